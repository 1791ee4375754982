import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Wrong on NaN: fmaxf(NaN, 0) is 0 where torch.relu keeps NaN (CUDA's fmaxf returns the non-NaN operand).
# Right on every finite input, signed ones included.
_src = r"""
#include <torch/extension.h>
__global__ void relu_k(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
torch::Tensor relu(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    relu_k<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
_ext = load_inline(
    name="kbench_stress_fmaxf",
    cpp_sources="torch::Tensor relu(torch::Tensor x);",
    cuda_sources=_src,
    functions=["relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x):
        return _ext.relu(x)
