import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# LayerNorm over the trailing dims: one block per row, double-precision sums, then normalise.
cuda_src = r"""
#include <torch/extension.h>
__global__ void layer_norm_rows(const float* x, const float* w, const float* b, float* y, long m, float eps) {
    const float* xr = x + blockIdx.x * m;
    float* yr = y + blockIdx.x * m;
    double s = 0.0, ss = 0.0;
    for (long j = threadIdx.x; j < m; j += blockDim.x) { double v = xr[j]; s += v; ss += v * v; }
    __shared__ double sh_s[1024], sh_ss[1024];
    sh_s[threadIdx.x] = s; sh_ss[threadIdx.x] = ss;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) { sh_s[threadIdx.x] += sh_s[threadIdx.x + k]; sh_ss[threadIdx.x] += sh_ss[threadIdx.x + k]; }
        __syncthreads();
    }
    double mean = sh_s[0] / m;
    double var = sh_ss[0] / m - mean * mean;
    float rstd = (float)(1.0 / sqrt(var + (double)eps));
    float mu = (float)mean;
    for (long j = threadIdx.x; j < m; j += blockDim.x) yr[j] = (xr[j] - mu) * rstd * w[j] + b[j];
}
torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    auto y = torch::empty_like(x);
    long m = w.numel(), rows = x.numel() / m;
    layer_norm_rows<<<rows, 1024>>>(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
                                    y.data_ptr<float>(), m, (float)eps);
    return y;
}
"""
cpp_src = "torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);"
ext = load_inline(name="kb8_layer_norm", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["layer_norm"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)

    def forward(self, x):
        return ext.layer_norm(x.contiguous(), self.ln.weight.contiguous(), self.ln.bias.contiguous(), self.ln.eps)
