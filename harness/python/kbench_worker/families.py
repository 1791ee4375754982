"""Case families (PROTOCOL.md, "Case families"): deterministic replacements of the values of
a problem's floating-point inputs, same shapes, made for the working dtype."""

import math

import torch

from .protocol import WorkerError


FAMILIES = ("random", "signed", "nan-inf", "denormal", "fp16-saturation", "large", "small", "cancellation")
FP16_MAX = 65504.0


def _check_family(name, phase):
    if name is None:
        return "random"
    if not isinstance(name, str) or name not in FAMILIES:
        raise WorkerError(
            "protocol", phase, f"unknown case family {name!r} (known: {', '.join(FAMILIES)})"
        )
    return name


def _family_seed(seed, i):
    """The generator seed of input `i` of a case made from `seed`."""
    return (int(seed) * 1000003 + int(i)) % (1 << 63)


def _generator(device, seed):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


class _Draw:
    """float32 draws of one shape from one generator (in-place arithmetic throughout, so a
    multi-GB input costs about two temporaries of its size)."""

    def __init__(self, shape, device, g):
        self.shape, self.device, self.g = tuple(shape), device, g

    def rand(self):
        return torch.rand(self.shape, generator=self.g, device=self.device, dtype=torch.float32)

    def randn(self):
        return torch.randn(self.shape, generator=self.g, device=self.device, dtype=torch.float32)

    def sign(self):
        """-1 or +1, each with probability 1/2."""
        return self.rand().lt_(0.5).mul_(-2.0).add_(1.0)

    def log_uniform(self, a, b):
        """10**U(log10 a, log10 b), clamped into [a, b] against float32 rounding."""
        la, lb = math.log10(a), math.log10(b)
        return self.rand().mul_(lb - la).add_(la).mul_(math.log(10.0)).exp_().clamp_(a, b)

    def signed(self):
        v = self.randn()
        v.mul_(self.log_uniform(0.1, 10.0))
        return v


def _mantissa_bits(dtype):
    return int(round(-math.log2(torch.finfo(dtype).eps)))


def _smallest_normal(dtype):
    fi = torch.finfo(dtype)
    return float(getattr(fi, "smallest_normal", fi.tiny))


def _distinct_positions(n, k, g, device):
    """`k` distinct flat positions in [0, n), drawn with `g` (no permutation of n elements:
    a multi-GB input would need an int64 index per element)."""
    picked = []
    while len(picked) < k:
        for p in torch.randint(0, n, (2 * k,), generator=g, device=device).tolist():
            if p not in picked:
                picked.append(p)
                if len(picked) == k:
                    break
    return picked


def family_values(family, shape, device, seed, working_dtype):
    """The float32 values of `family` for a tensor of `shape` on `device`, drawn from a
    generator seeded with `seed`; made for `working_dtype` (denormal limits)."""
    shape = tuple(shape)
    g = _generator(device, seed)
    d = _Draw(shape, device, g)
    numel = math.prod(shape)
    if family == "signed":
        return d.signed()
    if family == "nan-inf":
        v = d.signed()
        flat = v.view(-1)
        specials = (float("nan"), float("inf"), float("-inf"))
        for p, value in zip(_distinct_positions(numel, min(3, numel), g, device), specials):
            flat[p] = value
        return v
    if family == "denormal":
        tiny = _smallest_normal(working_dtype)
        m = _mantissa_bits(working_dtype)
        # Subnormal for the working dtype: s * tiny * U(2^-m, 1), clamped into
        # [smallest subnormal, largest subnormal], both exact in the working dtype, so the
        # cast to it keeps every one of them nonzero and subnormal.
        sub = d.rand().mul_(1.0 - 2.0**-m).add_(2.0**-m).mul_(tiny)
        sub.clamp_(tiny * 2.0**-m, tiny * (1.0 - 2.0**-m))
        normal = d.log_uniform(tiny, 1.0)
        pick = d.rand().lt_(0.5).bool()
        v = torch.where(pick, sub, normal)
        del sub, normal, pick
        v.mul_(d.sign())
        return v
    if family == "fp16-saturation":
        v = d.rand().mul_(0.5).add_(0.5).mul_(FP16_MAX).clamp_(FP16_MAX / 2, FP16_MAX)
        v.mul_(d.sign())
        return v
    if family == "large":
        v = d.log_uniform(1e2, 1e5)
        v.mul_(d.sign())
        return v
    if family == "small":
        v = d.log_uniform(1e-8, 1e-5)
        v.mul_(d.sign())
        return v
    if family == "cancellation":
        n = shape[-1] if shape else 0
        if n < 2:
            return d.signed()
        rows = numel // n
        h = n // 2
        half = _Draw((rows, h), device, g)
        out = torch.empty((rows, n), dtype=torch.float32, device=device)
        v = half.log_uniform(1.0, 1e3)
        v.mul_(half.sign())
        out[:, :h] = v
        # The negatives, in a random order (one permutation for the whole tensor), each
        # with a relative noise of 1e-6: -v_j + v_j * 1e-6 * N(0, 1).
        perm = torch.randperm(h, generator=g, device=device)
        neg = v.index_select(1, perm)
        del v, perm
        noise = half.randn()
        neg.mul_(noise.mul_(1e-6).sub_(1.0))
        del noise
        out[:, h : 2 * h] = neg
        del neg
        if n % 2:
            out[:, 2 * h] = 0.0
        return out.view(shape)
    raise ValueError(f"no generator for family {family!r}")


def apply_family(raw, family, seed, working_dtype):
    """Replaces, in the list `raw` (inputs as get_inputs made them), the values of every
    floating-point tensor with `family`'s; returns how many it replaced."""
    if family == "random":
        return 0
    transformed = 0
    for i, x in enumerate(raw):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            shape, device = tuple(x.shape), x.device
            raw[i] = x = None  # the problem's own values die before the new ones are made
            raw[i] = family_values(family, shape, device, _family_seed(seed, i), working_dtype)
            transformed += 1
    return transformed
