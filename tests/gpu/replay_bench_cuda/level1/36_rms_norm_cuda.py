import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# KernelBench level 1 problem 36 (RMSNorm_ over the features (dim 1) of 112x64x512x512).
# x / sqrt(mean(x^2 over dim 1) + eps); each thread owns one (batch, h, w) position.

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>

static void check_input(const torch::Tensor& x, const char* what) {
    TORCH_CHECK(x.is_cuda(), what, " must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, what, " must be float32");
}

// Blocks for a grid-stride loop over `work` items (grid.x is at most 2^31 - 1; 2^20 blocks of
// 256 threads keep every SM busy and leave the rest to the loop).
static inline unsigned int grid_for(int64_t work, int threads) {
    int64_t b = (work + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > (1 << 20)) b = 1 << 20;
    return static_cast<unsigned int>(b);
}

// x viewed as (outer, features, inner); one thread per (outer, inner) position.
__global__ void rms_norm_kernel(const float* __restrict__ x, float* __restrict__ y,
                                int64_t outer, int64_t features, int64_t inner, float eps) {
    const int64_t positions = outer * inner;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < positions; o += stride) {
        const int64_t b = o / inner;
        const int64_t i = o - b * inner;
        const int64_t base = b * features * inner + i;
        float s = 0.f;
        for (int64_t f = 0; f < features; ++f) {
            const float v = x[base + f * inner];
            s += v * v;
        }
        const float rms = sqrtf(s / (float)features + eps);
        for (int64_t f = 0; f < features; ++f) y[base + f * inner] = x[base + f * inner] / rms;
    }
}

torch::Tensor rms_norm_forward(torch::Tensor x_in, double eps) {
    check_input(x_in, "x");
    TORCH_CHECK(x_in.dim() >= 2, "expects (batch, features, ...)");
    const c10::cuda::CUDAGuard guard(x_in.device());
    auto x = x_in.contiguous();
    auto y = torch::empty_like(x);
    const int64_t outer = x.size(0), features = x.size(1);
    int64_t inner = 1;
    for (int64_t d = 2; d < x.dim(); ++d) inner *= x.size(d);
    if (outer * inner == 0 || features == 0) return y;
    const int threads = 256;
    rms_norm_kernel<<<grid_for(outer * inner, threads), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), outer, features, inner, static_cast<float>(eps));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor rms_norm_forward(torch::Tensor x_in, double eps);"

_ext_l1_36 = load_inline(
    name="kbench_bench_l1_36_rms_norm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['rms_norm_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        return _ext_l1_36.rms_norm_forward(x, float(self.eps))
