import torch
import torch.nn as nn


class Model(nn.Module):
    """kbench GPU test: out = 2x + y with 384 MiB of output, more than the 256 MiB above which
    timed calls went unchecked before their outputs were compared on the GPU."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + y


def get_inputs():
    return [torch.randn(8192, 12288), torch.randn(8192, 12288)]


def get_init_inputs():
    return []
