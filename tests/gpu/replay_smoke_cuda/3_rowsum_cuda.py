import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# One block per row, tree reduction in shared memory.
src = r"""
#include <torch/extension.h>
__global__ void rowsum_kernel(const float* x, float* y, long cols) {
    __shared__ float buf[256];
    const float* row = x + blockIdx.x * cols;
    float acc = 0.f;
    for (long j = threadIdx.x; j < cols; j += blockDim.x) acc += row[j];
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = buf[0];
}
torch::Tensor rowsum(torch::Tensor x) {
    auto xc = x.contiguous();
    long rows = xc.size(0), cols = xc.size(1);
    auto y = torch::empty({rows}, xc.options());
    rowsum_kernel<<<rows, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), cols);
    return y;
}
"""
ext = load_inline(name="kbench_dev_rowsum", cpp_sources="torch::Tensor rowsum(torch::Tensor x);",
                  cuda_sources=src, functions=["rowsum"])

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        assert dim == 1
    def forward(self, x):
        return ext.rowsum(x)
