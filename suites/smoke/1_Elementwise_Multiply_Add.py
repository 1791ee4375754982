import torch
import torch.nn as nn


class Model(nn.Module):
    """
    kbench smoke problem: elementwise a * b + c over three same-shaped tensors.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return a * b + c


rows = 512
cols = 768


def get_inputs():
    a = torch.randn(rows, cols)
    b = torch.randn(rows, cols)
    c = torch.randn(rows, cols)
    return [a, b, c]


def get_init_inputs():
    return []
