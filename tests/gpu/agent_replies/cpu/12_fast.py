import torch
import torch.nn as nn


class ModelNew(nn.Module):
    # diag(A) @ B as one broadcast multiply.
    def forward(self, A, B):
        return B * A[:, None]
