import torch
import torch.nn as nn


class Model(nn.Module):
    """
    kbench smoke problem: Conv2d -> subtract -> clamp, where forward reads the
    module-level constants `shift`, `clamp_min` and `clamp_max` (as some KernelBench
    problems do), so a harness must run it in the namespace that defines them.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = x - shift
        return torch.clamp(x, min=clamp_min, max=clamp_max)


batch_size = 4
in_channels = 3
out_channels = 8
height = 48
width = 48
kernel_size = 5
shift = 0.1
clamp_min = -0.5
clamp_max = 0.6


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
