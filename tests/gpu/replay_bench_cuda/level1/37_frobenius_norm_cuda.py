import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# KernelBench level 1 problem 37 (FrobeniusNorm_, x / ||x||_F on 112x64x512x512 (1.9e9 elements)).
# Sum of squares in double (per-block partials, then one block), sqrt, then x / norm;
# the norm stays on the device.

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

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block, valid in thread 0. blockDim.x is a multiple of 32.
__device__ double block_sum_d(double v) {
    __shared__ double shared[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = warp_sum_d(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    double r = 0.0;
    if (warp == 0) {
        r = lane < warps ? shared[lane] : 0.0;
        r = warp_sum_d(r);
    }
    return r;
}

// out[0] = (float)(scale_or_sqrt(sum of partials)).
__global__ void finish_kernel(const double* __restrict__ partials, int n, float* __restrict__ out,
                              double scale, bool take_sqrt) {
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += partials[i];
    s = block_sum_d(s);
    if (threadIdx.x == 0) {
        s *= scale;
        out[0] = (float)(take_sqrt ? sqrt(s) : s);
    }
}

static const int kReduceThreads = 256;

static inline int partial_blocks(int64_t n) {
    int64_t b = (n + kReduceThreads - 1) / kReduceThreads;
    if (b < 1) b = 1;
    if (b > 1024) b = 1024;
    return static_cast<int>(b);
}

__global__ void sum_squares_kernel(const float* __restrict__ x, int64_t n, double* __restrict__ partials) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        acc += (double)v * (double)v;
    }
    acc = block_sum_d(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void divide_kernel(const float* __restrict__ x, const float* __restrict__ norm,
                              float* __restrict__ y, int64_t n) {
    const float d = norm[0];
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = x[i] / d;
}

torch::Tensor frobenius_norm_forward(torch::Tensor x_in) {
    check_input(x_in, "x");
    const c10::cuda::CUDAGuard guard(x_in.device());
    auto x = x_in.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int blocks = partial_blocks(n);
    auto partials = torch::empty({blocks}, x.options().dtype(torch::kFloat64));
    auto norm = torch::empty({1}, x.options());
    sum_squares_kernel<<<blocks, kReduceThreads, 0, stream>>>(x.data_ptr<float>(), n, partials.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    finish_kernel<<<1, 1024, 0, stream>>>(partials.data_ptr<double>(), blocks, norm.data_ptr<float>(), 1.0, true);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    divide_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x.data_ptr<float>(), norm.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor frobenius_norm_forward(torch::Tensor x_in);"

_ext_l1_37 = load_inline(
    name="kbench_bench_l1_37_frobenius_norm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['frobenius_norm_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x):
        return _ext_l1_37.frobenius_norm_forward(x)
