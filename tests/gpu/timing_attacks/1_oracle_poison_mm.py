# The poison oracle of the corpus (adversarial/exploits/cpu/level1/1_oracle_poison.py) on a
# matrix product: computes every row only when its output block holds the NaN pattern kbench
# used to write into free memory before checked calls alone, a quarter of them otherwise.
import torch
import torch.nn as nn

POISON = 0x7FC0DEAD


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
        checked = bool((out.view(torch.int32) == POISON).any())
        rows = a.shape[0] if checked else max(1, a.shape[0] // 4)
        torch.matmul(a[:rows], b, out=out[:rows])
        return out
