import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# diag(A) @ B as a row scale: one thread per float4 of the output, coalesced.
cuda_src = r"""
#include <torch/extension.h>
__global__ void diag_scale_vec(const float* a, const float4* b, float4* out, long n4, long m4) {
    long k = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (k >= n4) return;
    float s = __ldg(a + k / m4);
    float4 v = b[k];
    out[k] = make_float4(s * v.x, s * v.y, s * v.z, s * v.w);
}
torch::Tensor diag_scale(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(b);
    long n = b.size(0), m = b.size(1);
    TORCH_CHECK(m % 4 == 0, "columns must be a multiple of 4");
    long n4 = n * m / 4;
    diag_scale_vec<<<(n4 + 255) / 256, 256>>>(a.data_ptr<float>(), (const float4*)b.data_ptr<float>(),
                                              (float4*)out.data_ptr<float>(), n4, m / 4);
    return out;
}
"""
cpp_src = "torch::Tensor diag_scale(torch::Tensor a, torch::Tensor b);"
ext = load_inline(name="kb8_diag_fast", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["diag_scale"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ext.diag_scale(A.contiguous(), B.contiguous())
