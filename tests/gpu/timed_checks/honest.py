# Honest: the problem's own computation.
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y):
        return x * 2.0 + y
