import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """
    kbench smoke problem: mean cross-entropy over logits with int64 class targets.
    The output is a 0-dim tensor; the targets must not be cast to float.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


batch_size = 2048
num_classes = 100


def get_inputs():
    logits = torch.randn(batch_size, num_classes) * 3.0
    targets = torch.randint(0, num_classes, (batch_size,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []
