import torch
import torch.nn as nn
import triton
import triton.language as tl

# kbench build-pattern fixture (Triton), KernelBench level 1 problem 32 (HardTanh): compiled
# by Triton's JIT at the first launch, which needs the GPU. Correct.


@triton.jit
def hardtanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    # tl.minimum/tl.maximum drop NaN (kbench's nan-inf case caught the first version of
    # this fixture); PyTorch's hardtanh keeps it.
    y = tl.where(x != x, x, tl.minimum(tl.maximum(x, -1.0), 1.0))
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        hardtanh_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
