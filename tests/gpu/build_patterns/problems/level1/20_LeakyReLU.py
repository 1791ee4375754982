import torch
import torch.nn as nn


class Model(nn.Module):
    """LeakyReLU, as KernelBench's level 1 problem of the same number, on small inputs (kbench's
    build-pattern benchmark: the builds, not the checks, should set its pace)."""

    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
