import torch
import torch.nn as nn


# One tiny elementwise kernel launch per call: latency/launch-bound.
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2.0
