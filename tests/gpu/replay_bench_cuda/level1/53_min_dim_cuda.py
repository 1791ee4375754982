import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# KernelBench level 1 problem 53 (Min_reduction_over_a_dimension, torch.min(x, dim)[0], dim 1 of 128x4096x4095).
# NaN wins, as in torch.min.

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>
#include <vector>

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

struct DimShape {
    int64_t outer, reduce, inner;
    std::vector<int64_t> out_sizes;
};

static DimShape dim_shape(const torch::Tensor& x, int64_t dim, bool keepdim) {
    const int64_t nd = x.dim();
    TORCH_CHECK(nd >= 1, "expects at least one dimension");
    if (dim < 0) dim += nd;
    TORCH_CHECK(dim >= 0 && dim < nd, "dim out of range");
    DimShape s{1, x.size(dim), 1, {}};
    for (int64_t d = 0; d < dim; ++d) s.outer *= x.size(d);
    for (int64_t d = dim + 1; d < nd; ++d) s.inner *= x.size(d);
    for (int64_t d = 0; d < nd; ++d) {
        if (d != dim) s.out_sizes.push_back(x.size(d));
        else if (keepdim) s.out_sizes.push_back(1);
    }
    return s;
}

__global__ void min_dim_kernel(const float* __restrict__ x, float* __restrict__ y,
                               int64_t outer, int64_t reduce, int64_t inner) {
    const int64_t outputs = outer * inner;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += stride) {
        const int64_t b = o / inner;
        const int64_t i = o - b * inner;
        const float* p = x + b * reduce * inner + i;
        float m = p[0];
        for (int64_t r = 1; r < reduce; ++r) {
            const float v = p[r * inner];
            if (v < m || isnan(v)) m = v;
        }
        y[o] = m;
    }
}

torch::Tensor min_dim_forward(torch::Tensor x_in, int64_t dim) {
    check_input(x_in, "x");
    const c10::cuda::CUDAGuard guard(x_in.device());
    auto x = x_in.contiguous();
    const DimShape s = dim_shape(x, dim, false);
    TORCH_CHECK(s.reduce > 0, "cannot reduce over an empty dimension");
    auto y = torch::empty(s.out_sizes, x.options().dtype(torch::kFloat32));
    const int64_t outputs = s.outer * s.inner;
    if (outputs == 0) return y;
    const int threads = 256;
    min_dim_kernel<<<grid_for(outputs, threads), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), s.outer, s.reduce, s.inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor min_dim_forward(torch::Tensor x_in, int64_t dim);"

_ext_l1_53 = load_inline(
    name="kbench_bench_l1_53_min_dim",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['min_dim_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x):
        return _ext_l1_53.min_dim_forward(x, int(self.dim))
