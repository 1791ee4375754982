import torch
import torch.nn as nn


class Model(nn.Module):
    """
    kbench smoke problem: C = A @ B with sizes that are not multiples of common tile sizes.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 193
K = 257
N = 131


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
