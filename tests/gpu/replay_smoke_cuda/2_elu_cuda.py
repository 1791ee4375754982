import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
__global__ void elu_kernel(const float* x, float* y, float alpha, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = v > 0.f ? v : alpha * expm1f(v); }
}
torch::Tensor elu(torch::Tensor x, double alpha) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    elu_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), (float)alpha, n);
    return y;
}
"""
ext = load_inline(name="kbench_dev_elu", cpp_sources="torch::Tensor elu(torch::Tensor x, double alpha);",
                  cuda_sources=src, functions=["elu"])

class ModelNew(nn.Module):
    def __init__(self, alpha):
        super().__init__()
        self.alpha = alpha
    def forward(self, x):
        return ext.elu(x, self.alpha)
