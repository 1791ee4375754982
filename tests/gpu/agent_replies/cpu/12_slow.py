import torch
import torch.nn as nn


class ModelNew(nn.Module):
    # diag(A) @ B as a row scale, row block by row block (slow).
    def forward(self, A, B):
        out = torch.empty_like(B)
        for i in range(0, B.shape[0], 8):
            out[i:i + 8] = A[i:i + 8, None] * B[i:i + 8]
        return out
