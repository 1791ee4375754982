import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# kbench build-pattern fixture (CUDA), KernelBench level 1 problem 19 (ReLU): built at module
# level, from a CUDA source that needs more of torch/extension.h than torch/types.h (Python.h's
# PyObject). With KBENCH_CUDA_HEADER=light nvcc refuses it on the light header and kbench
# compiles it again against torch's own: its build folder's kbench-cuda-header.txt says `full`.
# Correct.
CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

// Declared by torch/extension.h (torch/python.h includes Python.h), not by torch/types.h.
static_assert(sizeof(PyObject*) == sizeof(void*), "Python.h through torch/extension.h");

__global__ void ew_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        y[i] = v < 0.f ? 0.f : v;
    }
}

torch::Tensor relu_forward(torch::Tensor x_in) {
    TORCH_CHECK(x_in.is_cuda() && x_in.scalar_type() == torch::kFloat32, "float32 CUDA tensor expected");
    auto x = x_in.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    int64_t blocks = (n + 255) / 256;
    if (blocks > (1 << 20)) blocks = 1 << 20;
    ew_kernel<<<(unsigned)blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="kbench_bp_relu_full_header", cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
                  cuda_sources=CUDA_SOURCE, functions=["relu_forward"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_forward(x)
