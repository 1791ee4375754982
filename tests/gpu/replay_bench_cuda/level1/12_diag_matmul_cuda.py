import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# KernelBench level 1 problem 12 (Matmul_with_diagonal_matrices_, A.unsqueeze(1) * B).
# diag(A) @ B is a row scaling: y[i, j] = A[i] * B[i, j].

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

__global__ void row_scale_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                 float* __restrict__ y, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t r = i / cols;
        y[i] = a[r] * b[i];
    }
}

torch::Tensor diag_matmul_forward(torch::Tensor A, torch::Tensor B) {
    check_input(A, "A");
    check_input(B, "B");
    TORCH_CHECK(A.dim() == 1 && B.dim() == 2 && B.size(0) == A.size(0),
                "expects A of shape (N,) and B of shape (N, M)");
    const c10::cuda::CUDAGuard guard(B.device());
    auto a = A.contiguous();
    auto b = B.contiguous();
    auto y = torch::empty_like(b);
    const int64_t rows = b.size(0), cols = b.size(1);
    if (rows * cols == 0) return y;
    const int threads = 256;
    row_scale_kernel<<<grid_for(rows * cols, threads), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor diag_matmul_forward(torch::Tensor A, torch::Tensor B);"

_ext_l1_12 = load_inline(
    name="kbench_bench_l1_12_diag_matmul",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=['diag_matmul_forward'],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, A, B):
        return _ext_l1_12.diag_matmul_forward(A, B)
