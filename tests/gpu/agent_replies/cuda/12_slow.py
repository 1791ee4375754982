import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# diag(A) @ B as a row scale: one thread per row walking its columns (uncoalesced: slow).
cuda_src = r"""
#include <torch/extension.h>
__global__ void diag_scale_rows(const float* a, const float* b, float* out, long n, long m) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = a[i];
    for (long j = 0; j < m; ++j) out[i * m + j] = s * b[i * m + j];
}
torch::Tensor diag_scale(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(b);
    long n = b.size(0), m = b.size(1);
    diag_scale_rows<<<(n + 127) / 128, 128>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n, m);
    return out;
}
"""
cpp_src = "torch::Tensor diag_scale(torch::Tensor a, torch::Tensor b);"
ext = load_inline(name="kb8_diag_slow", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["diag_scale"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ext.diag_scale(A.contiguous(), B.contiguous())
