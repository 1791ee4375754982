import os
import tempfile

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load

# kbench build-pattern fixture (CUDA), KernelBench level 1 problem 25 (Swish): `__init__`
# writes its sources into a temporary folder and builds them with
# `torch.utils.cpp_extension.load`. Correct.
CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void ew_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        y[i] = v / (1.f + expf(-v));
    }
}

torch::Tensor swish_forward(torch::Tensor x_in) {
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
BINDING = r"""
#include <torch/extension.h>
torch::Tensor swish_forward(torch::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("swish_forward", &swish_forward); }
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        folder = os.path.join(tempfile.gettempdir(), "kbench_bp_swish_sources")
        os.makedirs(folder, exist_ok=True)
        paths = [os.path.join(folder, "binding.cpp"), os.path.join(folder, "swish.cu")]
        for path, text in zip(paths, (BINDING, CUDA_SOURCE)):
            with open(path, "w") as f:
                f.write(text)
        self.ext = load(name="kbench_bp_swish_load", sources=paths, extra_cuda_cflags=["-O3"])

    def forward(self, x):
        return self.ext.swish_forward(x)
