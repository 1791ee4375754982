import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """
    kbench smoke problem: ELU with a non-default alpha. The negative branch
    alpha * (exp(x) - 1) is only exercised by signed inputs, hence torch.randn.
    """

    def __init__(self, alpha: float):
        super(Model, self).__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.elu(x, alpha=self.alpha)


batch_size = 256
dim = 2048
alpha = 1.3


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [alpha]
