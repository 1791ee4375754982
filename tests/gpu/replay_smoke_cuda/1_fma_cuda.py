import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
__global__ void fma_kernel(const float* a, const float* b, const float* c, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] * b[i] + c[i];
}
torch::Tensor fma3(torch::Tensor a, torch::Tensor b, torch::Tensor c) {
    auto y = torch::empty_like(a);
    long n = a.numel();
    fma_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="kbench_dev_fma", cpp_sources="torch::Tensor fma3(torch::Tensor a, torch::Tensor b, torch::Tensor c);",
                  cuda_sources=src, functions=["fma3"])

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, a, b, c):
        return ext.fma3(a.contiguous(), b.contiguous(), c.contiguous())
