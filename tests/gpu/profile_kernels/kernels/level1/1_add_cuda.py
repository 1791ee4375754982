import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

__global__ void elementwise_add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                       float* __restrict__ c, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) c[i] = a[i] + b[i];
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    long n = a.numel();
    int threads = 256;
    long blocks = (n + threads - 1) / threads;
    if (blocks > 65535L * 8) blocks = 65535L * 8;
    elementwise_add_kernel<<<blocks, threads>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                                c.data_ptr<float>(), n);
    return c;
}
"""
cpp = "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"
ext = load_inline(name="kbench_profile_add", cpp_sources=cpp, cuda_sources=source,
                  functions=["add_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.add_cuda(a.contiguous(), b.contiguous())
