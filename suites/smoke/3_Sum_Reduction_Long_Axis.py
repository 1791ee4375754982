import torch
import torch.nn as nn


class Model(nn.Module):
    """
    kbench smoke problem: sum over a long axis (8192 elements per row), where the
    order of accumulation visibly changes fp32 results.
    """

    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim)


batch_size = 128
length = 8192
reduce_dim = 1


def get_inputs():
    x = torch.randn(batch_size, length)
    return [x]


def get_init_inputs():
    return [reduce_dim]
