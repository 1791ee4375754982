import torch
import torch.nn as nn


class Model(nn.Module):
    """
    kbench smoke problem: GroupNorm with non-trivial affine weights (the defaults are
    ones and zeros, which would let a kernel that ignores them pass).
    """

    def __init__(self, num_groups: int, num_channels: int):
        super(Model, self).__init__()
        self.norm = nn.GroupNorm(num_groups, num_channels)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.5 * torch.randn(num_channels))
            self.norm.bias.copy_(torch.randn(num_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


batch_size = 16
num_channels = 32
num_groups = 4
height = 24
width = 24


def get_inputs():
    x = torch.randn(batch_size, num_channels, height, width) * 2.0 + 0.5
    return [x]


def get_init_inputs():
    return [num_groups, num_channels]
