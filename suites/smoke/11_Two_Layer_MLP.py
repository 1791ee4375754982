import torch
import torch.nn as nn


class Model(nn.Module):
    """
    kbench smoke problem: a small two-layer MLP, Linear -> ReLU -> Linear.
    """

    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super(Model, self).__init__()
        self.network = nn.Sequential(
            nn.Linear(input_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, output_size),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


batch_size = 64
input_size = 256
hidden_size = 512
output_size = 96


def get_inputs():
    x = torch.randn(batch_size, input_size)
    return [x]


def get_init_inputs():
    return [input_size, hidden_size, output_size]
