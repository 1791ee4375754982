import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# KernelBench level 1 problem 100 (HingeLoss, mean(clamp(1 - p * t, min=0)), p 32768x32768, t (32768,)).
# targets broadcast along the last dimension of predictions, as in the problem.
# clamp(min=0) keeps NaN, as torch.clamp does.

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

__global__ void hinge_loss_partial_kernel(const float* __restrict__ p, const float* __restrict__ t, int64_t n, int64_t tmod,
                                      double* __restrict__ partials) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float a = p[i];
        const float b = t[tmod > 0 ? i % tmod : i];
        float e = 1.f - a * b;
        e = e < 0.f ? 0.f : e;
        acc += (double)e;
    }
    acc = block_sum_d(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

torch::Tensor hinge_loss_forward(torch::Tensor predictions, torch::Tensor targets) {
    check_input(predictions, "predictions");
    check_input(targets, "targets");
    const c10::cuda::CUDAGuard guard(predictions.device());
    auto p = predictions.contiguous();
    // targets broadcast against predictions: same shape, or one value per last-dim column
    // (the problem's (N,) targets against (B, N) predictions); anything else is expanded.
    torch::Tensor t;
    int64_t tmod = 0;
    if (targets.numel() == p.numel()) {
        t = targets.contiguous();
    } else if (targets.dim() == 1 && p.dim() >= 1 && targets.size(0) == p.size(-1)) {
        t = targets.contiguous();
        tmod = targets.size(0);
    } else {
        t = targets.expand_as(p).contiguous();
    }
    auto out = torch::empty(std::vector<int64_t>{}, p.options());
    const int64_t n = p.numel();
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int blocks = partial_blocks(n);
    auto partials = torch::empty({blocks}, p.options().dtype(torch::kFloat64));
    hinge_loss_partial_kernel<<<blocks, kReduceThreads, 0, stream>>>(
        p.data_ptr<float>(), t.data_ptr<float>(), n, tmod, partials.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    // mean = sum / n (n == 0 gives NaN, as torch.mean of an empty tensor)
    finish_kernel<<<1, 1024, 0, stream>>>(partials.data_ptr<double>(), blocks, out.data_ptr<float>(),
                                          n > 0 ? 1.0 / (double)n : NAN, false);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor hinge_loss_forward(torch::Tensor predictions, torch::Tensor targets);"

_ext_l1_100 = load_inline(
    name="kbench_bench_l1_100_hinge_loss",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['hinge_loss_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, predictions, targets):
        return _ext_l1_100.hinge_loss_forward(predictions, targets)
