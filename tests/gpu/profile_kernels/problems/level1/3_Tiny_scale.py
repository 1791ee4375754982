import torch
import torch.nn as nn


class Model(nn.Module):
    """y = 2x on 1024 elements: a few microseconds at most, launch-bound."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.rand(1024)]


def get_init_inputs():
    return []
