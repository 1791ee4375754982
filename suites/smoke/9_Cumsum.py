import torch
import torch.nn as nn


class Model(nn.Module):
    """
    kbench smoke problem: inclusive prefix sum along a dimension (a scan: every output
    depends on all earlier inputs of its row).
    """

    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


batch_size = 64
length = 4096
scan_dim = 1


def get_inputs():
    x = torch.randn(batch_size, length)
    return [x]


def get_init_inputs():
    return [scan_dim]
