import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# kbench build-pattern fixture (CUDA), KernelBench level 1 problem 30 (Softsign): built at the
# first forward from a source specialised to the model's own settings (only running the model
# reaches it). Correct.
TEMPLATE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void ew_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        y[i] = v / (ONE + fabsf(v));
    }
}

torch::Tensor softsign_forward(torch::Tensor x_in) {
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.one = 1.0
        self.ext = None

    def _compile(self):
        source = TEMPLATE.replace("ONE", repr(self.one) + "f")
        return load_inline(name="kbench_bp_softsign_first_call",
                           cpp_sources="torch::Tensor softsign_forward(torch::Tensor x);",
                           cuda_sources=source, functions=["softsign_forward"], extra_cuda_cflags=["-O3"])

    def forward(self, x):
        if self.ext is None:
            self.ext = self._compile()
        return self.ext.softsign_forward(x)
