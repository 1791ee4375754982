"""What a problem's `get_inputs()` promises about an input beyond its shape and dtype, kept when
a stress family replaces the input's values (PROTOCOL.md, "Case families").

A kernel may rely on what every input of its problem is: KernelBench's triangular matmuls
(level 1, problems 14 and 15) make upper and lower triangular matrices, and a kernel that skips
the zero half is honest there; its symmetric matmul (problem 13) makes symmetric matrices; its
hinge loss (problem 100) takes targets of -1 and +1; its KL divergence (problem 98) takes rows
of probabilities. A family that filled those inputs with dense, arbitrary values would fail such
kernels for a promise the problem never broke, or, for probabilities, make a reference that is
NaN wherever a value is negative, a check any NaN passes.

So the structure of each floating-point input, as `get_inputs()` made it for the case's seed, is
read here and put back on the family's values:

- `labels`: every value is -1, 0 or +1, and at least two of them occur (signs, masks, targets):
  the input keeps its own values (the family does not replace it);
- `upper` / `lower` / `diagonal`: a matrix (the last two dimensions, at least 2 x 2) with only
  zeros below / above / off its diagonal: the same zeros;
- `symmetric`: a square matrix equal to its transpose: the family's upper triangle, mirrored;
- `simplex`: no negative value, and every row of the last dimension sums to 1: each row of the
  family's magnitudes, divided by its sum.

Each check looks at a few elements first, so an input without structure costs a handful of
small operations; only an input whose first elements agree is checked in full, in slices of
about 64 MiB, never a copy of the whole input.
"""

import torch

# How many leading elements the labels check looks at before it reads the whole input.
_HEAD = 4096
# Elements per slice of a full check (about 64 MiB of fp32): a boolean or triangular copy of a
# multi-GB input would cost a quarter of its size, or all of it, again.
_CHUNK = 1 << 24
# How far a row of probabilities may sum from 1: fp32 softmax rows of 10^5 terms stay within
# 1e-3; a half-precision row's sum is off by a few of its epsilons.
_SIMPLEX_TOL = 1e-3


def _simplex_tol(dtype):
    return max(_SIMPLEX_TOL, 4.0 * torch.finfo(dtype).eps)


def _spans(x, dim):
    """(start, length) of the slices of `x` along `dim`, each of about `_CHUNK` elements or
    one index of that dimension; `x.narrow(dim, start, length)` is a view whatever the
    layout (no copy of a non-contiguous input)."""
    size = x.shape[dim]
    step = max(1, _CHUNK // max(1, x.numel() // max(1, size)))
    return [(i, min(step, size - i)) for i in range(0, size, step)]


def _all(x, pred):
    """`pred` holds for every element of `x`, checked slice by slice."""
    return all(bool(pred(x.narrow(0, i, n)).all()) for i, n in _spans(x, 0))


def _head(x):
    """Up to `_HEAD` leading elements of `x`'s first row (a view)."""
    return x[(0,) * (x.dim() - 1)][:_HEAD]


def _is_label(v):
    return (v == 0) | (v == 1) | (v == -1)


class Structure:
    """One input's structure: its `kind` (above), `fold` (a flat position moved to where the
    structure keeps a value, for the specials of `nan-inf`) and `impose` (the structure put
    on a family's float32 values of the input's shape)."""

    def __init__(self, kind, shape):
        self.kind, self.shape = kind, tuple(shape)

    def fold(self, p):
        if self.kind not in ("upper", "lower", "diagonal", "symmetric"):
            return p
        r, c = self.shape[-2], self.shape[-1]
        base, within = divmod(p, r * c)
        i, j = divmod(within, c)
        if self.kind == "diagonal":
            i = j = min(i, j)
        elif self.kind in ("upper", "symmetric") and i > j:
            i, j = (j, i) if i < c else (j, j)
        elif self.kind == "lower" and j > i:
            i, j = (j, i) if j < r else (i, i)
        return base * r * c + i * c + j

    def impose(self, v):
        if self.kind == "upper":
            return v.triu_()
        if self.kind == "lower":
            return v.tril_()
        if self.kind == "diagonal":
            return v.triu_().tril_()
        if self.kind == "symmetric":
            return v.triu_().add_(torch.triu(v, 1).transpose(-1, -2))
        if self.kind == "simplex":
            v.abs_()
            return v.div_(v.sum(-1, keepdim=True))
        return v


def _labels(x):
    if not bool(_is_label(_head(x)).all()) or not _all(x, _is_label):
        return False
    first = x[(0,) * x.dim()]
    return not _all(x, lambda v: v == first)


def _zero_off(x, side):
    """Whether `x` (at least 2 x 2 in its last two dimensions) is zero below (`side` -1) or
    above (+1) its diagonal, read in blocks of rows."""
    if bool((x[..., 1, 0] if side < 0 else x[..., 0, 1]).ne(0).any()):
        return False
    for i0, n in _spans(x, -2):
        block = x.narrow(-2, i0, n)
        # Element (i, j) of the block is row i0 + i: below the diagonal where j < i0 + i.
        off = torch.tril(block, i0 - 1) if side < 0 else torch.triu(block, i0 + 1)
        if int(off.count_nonzero()) != 0:
            return False
    return True


def _triangle(x):
    """`upper`, `lower`, `diagonal` or None (a matrix with nothing on its diagonal either is
    no triangle: an all-zero input promises nothing a kernel could use)."""
    if x.dim() < 2 or x.shape[-2] < 2 or x.shape[-1] < 2:
        return None
    below_zero = _zero_off(x, -1)
    above_zero = _zero_off(x, +1)
    if below_zero and above_zero:
        diagonal = torch.diagonal(x, dim1=-2, dim2=-1)
        return "diagonal" if int(diagonal.count_nonzero()) > 0 else None
    return "upper" if below_zero else "lower" if above_zero else None


def _symmetric(x):
    if x.dim() < 2 or x.shape[-1] != x.shape[-2] or x.shape[-1] < 2:
        return False
    if not bool((x[..., 0, 1] == x[..., 1, 0]).all()):
        return False
    t = x.transpose(-1, -2)
    return all(torch.equal(x.narrow(-2, i, n), t.narrow(-2, i, n)) for i, n in _spans(x, -2))


def _simplex(x):
    # Eight or more terms a row: fewer uniform draws could sum to 1 by chance.
    if x.dim() < 1 or x.shape[-1] < 8:
        return False
    tol = _simplex_tol(x.dtype)
    first = x[(0,) * (x.dim() - 1)]
    if float(first.min()) < 0 or abs(float(first.sum(dtype=torch.float64)) - 1.0) > tol:
        return False
    if float(x.min()) < 0:
        return False
    return float((x.sum(-1, dtype=torch.float64) - 1.0).abs().max()) <= tol


def detect(x):
    """The structure of input `x` (a floating-point tensor as get_inputs made it), or None."""
    if x.dim() == 0 or x.numel() < 2:
        return None
    if _labels(x):
        return Structure("labels", x.shape)
    if not bool(_head(x).ne(0).any()) and _all(x, lambda v: v == 0):
        return None  # all zero: no promise a kernel could use
    kind = _triangle(x)
    if kind is None and _symmetric(x):
        kind = "symmetric"
    if kind is None and _simplex(x):
        kind = "simplex"
    return None if kind is None else Structure(kind, x.shape)
