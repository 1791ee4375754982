import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """
    kbench smoke problem: a fusion chain of three ops, Linear -> GELU -> scaling.
    """

    def __init__(self, in_features: int, out_features: int, scaling_factor: float):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = F.gelu(x)
        return x * self.scaling_factor


batch_size = 64
in_features = 256
out_features = 384
scaling_factor = 0.75


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
