import torch
import torch.nn as nn


class Model(nn.Module):
    """
    kbench smoke problem: softmax over the last dimension. Inputs are scaled so that
    a kernel without the max subtraction overflows.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


batch_size = 128
num_classes = 1000
logit_scale = 30.0


def get_inputs():
    x = torch.randn(batch_size, num_classes) * logit_scale
    return [x]


def get_init_inputs():
    return []
