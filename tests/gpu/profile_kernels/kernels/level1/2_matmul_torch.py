import torch
import torch.nn as nn


# cuBLAS through torch.matmul: the matmul whose tensor-core FLOPs ncu should count as 2·N^3.
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)
