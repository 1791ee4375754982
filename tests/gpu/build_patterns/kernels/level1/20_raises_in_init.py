import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# kbench build-pattern fixture, KernelBench level 1 problem 20 (LeakyReLU): the constructor
# raises before it builds. runtime_error, built ahead or not (the pass may build the
# extension anyway: time only).
CUDA_SOURCE = "torch::Tensor never_built(torch::Tensor x) { return x; }"


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        raise ValueError("ModelNew refuses to be constructed")
        self.ext = load_inline(name="kbench_bp_never_built", cpp_sources="torch::Tensor never_built(torch::Tensor x);",
                               cuda_sources=CUDA_SOURCE, functions=["never_built"])

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, 0.01)
