import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# One fused pass instead of PyTorch eager's ~7 elementwise kernels: read x once, write y once.
gelu_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__global__ void new_gelu_kernel(const float4* __restrict__ x, float4* __restrict__ y, long n4) {
    const float k0 = 0.7978845608028654f;   // sqrt(2/pi)
    const float k1 = 0.044715f;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n4; i += (long)gridDim.x * blockDim.x) {
        float4 v = x[i];
        float4 r;
        r.x = 0.5f * v.x * (1.0f + tanhf(k0 * (v.x + k1 * v.x * v.x * v.x)));
        r.y = 0.5f * v.y * (1.0f + tanhf(k0 * (v.y + k1 * v.y * v.y * v.y)));
        r.z = 0.5f * v.z * (1.0f + tanhf(k0 * (v.z + k1 * v.z * v.z * v.z)));
        r.w = 0.5f * v.w * (1.0f + tanhf(k0 * (v.w + k1 * v.w * v.w * v.w)));
        y[i] = r;
    }
}

__global__ void new_gelu_tail(const float* __restrict__ x, float* __restrict__ y, long start, long n) {
    long i = start + blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

torch::Tensor new_gelu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "expects a float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    long n4 = n / 4;
    if (n4 > 0) {
        int threads = 256;
        long blocks = (n4 + threads - 1) / threads;
        if (blocks > 65535L * 16) blocks = 65535L * 16;
        new_gelu_kernel<<<(unsigned)blocks, threads>>>(
            reinterpret_cast<const float4*>(xc.data_ptr<float>()),
            reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
    }
    long rest = n - n4 * 4;
    if (rest > 0) {
        new_gelu_tail<<<1, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n4 * 4, n);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

gelu_cpp = "torch::Tensor new_gelu(torch::Tensor x);"

gelu = load_inline(
    name="kbench_devrun_new_gelu",
    cpp_sources=gelu_cpp,
    cuda_sources=gelu_source,
    functions=["new_gelu"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x):
        return gelu.new_gelu(x)
