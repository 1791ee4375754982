import torch
import torch.nn as nn


class Model(nn.Module):
    """Swish, as KernelBench's level 1 problem of the same number, on small inputs (kbench's
    build-pattern benchmark: the builds, not the checks, should set its pace)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
