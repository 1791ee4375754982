import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# KernelBench level 1 problem 24 (LogSoftmax over dim (1) of 4096x393216).
# One block per row: x - max - log(sum(exp(x - max))).

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

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum (or max) over the block, returned to every thread. blockDim.x is a multiple of 32.
template <bool IS_MAX>
__device__ float block_reduce(float v) {
    __shared__ float shared[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = IS_MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? shared[lane] : (IS_MAX ? -INFINITY : 0.f);
        w = IS_MAX ? warp_max(w) : warp_sum(w);
        if (lane == 0) shared[0] = w;
    }
    __syncthreads();
    const float r = shared[0];
    __syncthreads();  // shared[] is reused by the next call
    return r;
}

// Rows of a 2-D tensor reduced along dim 1 (the last, contiguous one).
static void row_shape(const torch::Tensor& x, int64_t dim, int64_t& rows, int64_t& cols) {
    TORCH_CHECK(x.dim() == 2, "expects a 2-D input");
    if (dim < 0) dim += x.dim();
    TORCH_CHECK(dim == 1, "this kernel reduces along the last dimension (dim=1)");
    rows = x.size(0);
    cols = x.size(1);
    TORCH_CHECK(rows <= 2147483647LL, "too many rows for one block per row");
}

__global__ void log_softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* yr = y + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = block_reduce<true>(m);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += expf(xr[j] - m);
    s = block_reduce<false>(s);
    const float lse = logf(s);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = (xr[j] - m) - lse;
}

torch::Tensor log_softmax_forward(torch::Tensor x_in, int64_t dim) {
    check_input(x_in, "x");
    const c10::cuda::CUDAGuard guard(x_in.device());
    auto x = x_in.contiguous();
    int64_t rows, cols;
    row_shape(x, dim, rows, cols);
    auto y = torch::empty_like(x);
    if (rows == 0 || cols == 0) return y;
    const int threads = 1024;
    log_softmax_rows_kernel<<<static_cast<unsigned int>(rows), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor log_softmax_forward(torch::Tensor x_in, int64_t dim);"

_ext_l1_24 = load_inline(
    name="kbench_bench_l1_24_log_softmax",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['log_softmax_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x):
        return _ext_l1_24.log_softmax_forward(x, int(self.dim))
