"""Case families (PROTOCOL.md, "Case families"): deterministic replacements of the values of
a problem's floating-point inputs, same shapes, made for the working dtype."""

import math

import torch

from .protocol import WorkerError
from .structure import detect


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

    def __init__(self, shape, device, g, fold=None):
        self.shape, self.device, self.g = tuple(shape), device, g
        # Moves a flat position to one the input's structure keeps (structure.py).
        self.fold = fold or (lambda p: p)

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


# The generator of each stress family, by name, in the order kbench's family list
# (`FAMILIES` of harness/record/src/case.rs) names them; a Rust test checks that both name the
# same families in the same order. Each takes a `_Draw` (shape, device, generator) and the
# working dtype, and returns float32 values of the draw's shape.
GENERATORS = {}


def _generates(name):
    """Registers the decorated function as the generator of family `name`."""

    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


@_generates("signed")
def _signed(d, working_dtype):
    return d.signed()


@_generates("nan-inf")
def _nan_inf(d, working_dtype):
    v = d.signed()
    flat = v.view(-1)
    specials = (float("nan"), float("inf"), float("-inf"))
    numel = math.prod(d.shape)
    # Distinct where they land: folded into what an input's structure keeps, drawn positions
    # can meet (a few of a triangle's), so more are drawn, up to a bound for inputs that
    # keep fewer than three.
    landed = []
    for _ in range(256):
        for p in _distinct_positions(numel, min(3, numel), d.g, d.device):
            q = d.fold(p)
            if q not in landed:
                landed.append(q)
        if len(landed) >= min(3, numel):
            break
    for q, value in zip(landed, specials):
        flat[q] = value
    return v


@_generates("denormal")
def _denormal(d, working_dtype):
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


@_generates("fp16-saturation")
def _fp16_saturation(d, working_dtype):
    v = d.rand().mul_(0.5).add_(0.5).mul_(FP16_MAX).clamp_(FP16_MAX / 2, FP16_MAX)
    v.mul_(d.sign())
    return v


@_generates("large")
def _large(d, working_dtype):
    v = d.log_uniform(1e2, 1e5)
    v.mul_(d.sign())
    return v


@_generates("small")
def _small(d, working_dtype):
    v = d.log_uniform(1e-8, 1e-5)
    v.mul_(d.sign())
    return v


@_generates("cancellation")
def _cancellation(d, working_dtype):
    shape, device, g = d.shape, d.device, d.g
    n = shape[-1] if shape else 0
    if n < 2:
        return d.signed()
    rows = math.prod(shape) // n
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


# Every family the worker makes: `random` (the problem's own inputs) and the generators'.
FAMILIES = ("random", *GENERATORS)
# The stress families: every family but `random`, in the order a run takes them.
STRESS_FAMILIES = tuple(GENERATORS)


def family_values(family, shape, device, seed, working_dtype, structure=None):
    """The float32 values of `family` for a tensor of `shape` on `device`, drawn from a
    generator seeded with `seed`; made for `working_dtype` (denormal limits), with
    `structure` (structure.py) put on them."""
    generate = GENERATORS.get(family)
    if generate is None:
        raise ValueError(f"no generator for family {family!r}")
    fold = structure.fold if structure is not None else None
    v = generate(_Draw(shape, device, _generator(device, seed), fold), working_dtype)
    return v if structure is None else structure.impose(v)


def apply_family(raw, family, seed, working_dtype, kept=None):
    """Replaces, in the list `raw` (inputs as get_inputs made them), the values of every
    floating-point tensor with `family`'s, keeping what get_inputs promises about it
    (structure.py: labels stay as made, triangles, symmetry and probability rows hold);
    returns how many it replaced, and appends to `kept` (a list) "input I: KIND" for each
    structure it kept."""
    if family == "random":
        return 0
    transformed = 0
    for i, x in enumerate(raw):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            structure = detect(x)
            if structure is not None and kept is not None:
                kept.append(f"input {i}: {structure.kind}")
            if structure is not None and structure.kind == "labels":
                continue
            shape, device = tuple(x.shape), x.device
            raw[i] = x = None  # the problem's own values die before the new ones are made
            raw[i] = family_values(family, shape, device, _family_seed(seed, i), working_dtype, structure)
            transformed += 1
    return transformed
