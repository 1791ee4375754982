import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# KernelBench level 1 problem 94 (MSELoss, mean((p - t)^2) over 32768x32768).
# Per-block partial sums in double, one block adds them; returns a 0-dim tensor like torch.mean.

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

__global__ void mse_loss_partial_kernel(const float* __restrict__ p, const float* __restrict__ t, int64_t n,
                                      double* __restrict__ partials) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float a = p[i];
        const float b = t[i];
        const float d = a - b;
        const float e = d * d;
        acc += (double)e;
    }
    acc = block_sum_d(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

torch::Tensor mse_loss_forward(torch::Tensor predictions, torch::Tensor targets) {
    check_input(predictions, "predictions");
    check_input(targets, "targets");
    const c10::cuda::CUDAGuard guard(predictions.device());
    auto p = predictions.contiguous();
    TORCH_CHECK(targets.sizes() == predictions.sizes(), "predictions and targets must have the same shape");
    auto t = targets.contiguous();
    auto out = torch::empty(std::vector<int64_t>{}, p.options());
    const int64_t n = p.numel();
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int blocks = partial_blocks(n);
    auto partials = torch::empty({blocks}, p.options().dtype(torch::kFloat64));
    mse_loss_partial_kernel<<<blocks, kReduceThreads, 0, stream>>>(
        p.data_ptr<float>(), t.data_ptr<float>(), n, partials.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    // mean = sum / n (n == 0 gives NaN, as torch.mean of an empty tensor)
    finish_kernel<<<1, 1024, 0, stream>>>(partials.data_ptr<double>(), blocks, out.data_ptr<float>(),
                                          n > 0 ? 1.0 / (double)n : NAN, false);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor mse_loss_forward(torch::Tensor predictions, torch::Tensor targets);"

_ext_l1_94 = load_inline(
    name="kbench_bench_l1_94_mse_loss",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['mse_loss_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, predictions, targets):
        return _ext_l1_94.mse_loss_forward(predictions, targets)
