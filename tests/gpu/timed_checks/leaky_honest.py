# Honest: KernelBench level-1 problem 20's own computation (LeakyReLU, 6.4 GB per tensor).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)
