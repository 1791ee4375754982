"""Measurements (stability, audit): reductions in float64, chunk by chunk on the device of
the first tensor, never deciding anything."""

import math
import sys

import torch

from .tensors import _wire_dtype


# Elements per chunk when comparing outputs in float64 (128 MiB per float64 temporary).
COMPARE_CHUNK = 1 << 24


def _json_float(v):
    """A float JSON can carry: +-inf becomes +-the largest float (a NaN cannot occur here)."""
    if v is None:
        return None
    v = float(v)
    if math.isnan(v):
        return None
    if math.isinf(v):
        return math.copysign(sys.float_info.max, v)
    return v


def _flat(t):
    t = t.detach()
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


class Excess:
    """max over elements finite in both a and b of (|a - b| - rtol*|b|), the count of
    elements where a and b disagree about being finite (one NaN, an Inf against a finite
    value or against the opposite Inf), and the number of elements compared.

    Accumulated on the tensors' device and read once, in `json`: reading each chunk's
    count and maximum back (three host syncs per 16M elements) took 0.4 s per stress case
    of a 6 GiB output on an H100, the whole of its stability measurement."""

    def __init__(self, rtol):
        self.rtol = float(rtol)
        self.max = None
        self.nan_mismatch = 0
        self.elements = 0
        # Per device: [running max (-inf: nothing finite in both yet), mismatch count], 0-d.
        self._acc = {}

    def _accumulate(self, dev, m, mism):
        acc = self._acc.get(dev)
        if acc is None:
            self._acc[dev] = [m, mism]
        else:
            acc[0] = torch.maximum(acc[0], m)
            acc[1] = acc[1] + mism

    def add(self, a, b, l2=None):
        """Adds one pair of tensors; a shape mismatch counts every element as a mismatch.
        `l2`: [num, den], 0-d float64 tensors on the pair's device, to which the all-finite
        pass adds sum((a - b)^2) and sum(b^2) as it goes (see `f64_figures`). Returns whether
        that pass decided the pair (every element finite in both): only then are the sums
        whole."""
        if tuple(a.shape) != tuple(b.shape):
            n = max(a.numel(), b.numel())
            self.nan_mismatch += n
            self.elements += n
            return False
        fa, fb = _flat(a), _flat(b)
        dev = fa.device
        n = fa.numel()
        self.elements += n
        if n == 0:
            return True
        fast = self._all_finite_max(fa, fb, dev, n, l2)
        if fast is not None:
            self._accumulate(dev, fast, torch.zeros((), dtype=torch.int64, device=dev))
            return True
        for s in range(0, n, COMPARE_CHUNK):
            # copy=True: a float64 input (the float64 reference's outputs) would otherwise be
            # returned as is, and the in-place arithmetic below would overwrite it.
            x = fa[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
            y = fb[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
            both = torch.isfinite(x) & torch.isfinite(y)
            mism = ((~both) & (x != y) & ~(torch.isnan(x) & torch.isnan(y))).sum()
            d = (x - y).abs_().sub_(y.abs_().mul_(self.rtol))
            del x, y
            # Elements not finite in both count as -inf, which never wins a maximum: a chunk
            # with none finite in both leaves the running maximum as it was.
            self._accumulate(dev, d.masked_fill_(~both, -math.inf).max(), mism)
            del d, both
        return False

    def _all_finite_max(self, fa, fb, dev, n, l2=None):
        """The pass for the common case, every element of both finite: max(|a - b| -
        rtol*|b|) in float64 with one float64 temporary per chunk and five kernels (the full
        pass below takes about 20, with the finiteness masks), read back once. Any element
        not finite in either (or a difference that overflows) makes that maximum NaN or +inf:
        then None, and the full pass decides. On an H100 the full pass took about 0.15 s
        per 6 GiB output, twice per stress case of the largest level-1 problems. With `l2`
        (see `add`) b is taken as a float64 copy, the same values, and the L2 sums of
        rel_l2_max are added from the same chunks."""
        if n == 0:
            return None
        best = None
        for s in range(0, n, COMPARE_CHUNK):
            if l2 is None:
                y = fb[s : s + COMPARE_CHUNK].to(device=dev)
            else:
                y = fb[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
            d = fa[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
            # float64 throughout: y is promoted exactly, |y| is exact in y's own dtype.
            d.sub_(y)
            if l2 is not None:
                # rel_l2_max's sums with nothing to mask, in its operations and order.
                l2[0] += d.pow(2).sum()
                l2[1] += y.pow(2).sum()
            # y is this pass's own copy only with l2: in place then, else a new tensor.
            d.abs_().sub_(y.abs_() if l2 is not None else y.abs(), alpha=self.rtol)
            m = d.max()
            best = m if best is None else torch.maximum(best, m)
            del d, y
        return best if bool(torch.isfinite(best)) else None

    def add_all(self, outs_a, outs_b):
        """Pairs of outputs by position; an output present on one side only is all mismatch."""
        for k in range(max(len(outs_a), len(outs_b))):
            if k < len(outs_a) and k < len(outs_b):
                self.add(outs_a[k], outs_b[k])
            else:
                n = (outs_a[k] if k < len(outs_a) else outs_b[k]).numel()
                self.nan_mismatch += n
                self.elements += n

    def _settle(self):
        """Reads the device accumulators into `max` and `nan_mismatch` (one sync each)."""
        for m, mism in self._acc.values():
            self.nan_mismatch += int(mism)
            m = float(m)
            if m != -math.inf:
                self.max = m if self.max is None else max(self.max, m)
        self._acc = {}

    def json(self, elements=True):
        self._settle()
        d = {"max_excess": _json_float(self.max), "nan_mismatch": self.nan_mismatch}
        if elements:
            d["elements"] = self.elements
        return d


def rel_l2_max(outs_a, outs_b):
    """The largest relative L2 distance `||a - b|| / ||b||` over pairs of outputs, over the
    elements finite in both, in float64 chunks; None when no output has a nonzero finite b
    (or the shapes differ: Excess counts that). The strict profile's applicability rule
    reads it: a working-precision reference this far from its float64 twin as a whole is
    ill-conditioned, one that is off only where a reduction cancels is not."""
    sums = []
    for a, b in zip(outs_a, outs_b):
        if not _l2_comparable(a, b):
            continue
        fa, fb = _flat(a), _flat(b)
        dev = fa.device
        num = torch.zeros((), dtype=torch.float64, device=dev)
        den = torch.zeros((), dtype=torch.float64, device=dev)
        for s in range(0, fa.numel(), COMPARE_CHUNK):
            x = fa[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
            y = fb[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
            both = torch.isfinite(x) & torch.isfinite(y)
            x.sub_(y).masked_fill_(~both, 0.0)
            y.masked_fill_(~both, 0.0)
            num += x.pow_(2).sum()
            den += y.pow_(2).sum()
            del x, y, both
        sums.append((float(num), float(den)))
    return _largest_rel_l2(sums)


def _l2_comparable(a, b):
    """Whether rel_l2_max measures the pair: one shape, floating point on both sides."""
    return tuple(a.shape) == tuple(b.shape) and a.is_floating_point() and b.is_floating_point()


def _largest_rel_l2(sums):
    """sqrt(num / den) largest over the pairs' (num, den) whose sums are finite and den > 0;
    None when there is none."""
    best = None
    for num, den in sums:
        if den > 0.0 and math.isfinite(num) and math.isfinite(den):
            r = math.sqrt(num / den)
            best = r if best is None else max(best, r)
    return best


def f64_figures(outs_a, outs_b, rtol):
    """`(Excess(rtol) over the pairs, rel_l2_max(outs_a, outs_b))`: the float64 stability
    figures of make_case, with the same values as computing them apart. When every pair has
    one shape, is floating point on both sides and finite throughout, Excess's all-finite
    pass adds rel_l2_max's sums from the chunks it reads, and no second pass runs. The two
    passes apart read every output four times: 1.6 s of the reference's time in one
    evaluation of L1/19 (ReLU on 6.4 GB) on an H100. Anything else, or a sum that
    overflows, takes rel_l2_max's own pass, with its finiteness rules."""
    m = Excess(rtol)
    if len(outs_a) != len(outs_b) or not all(_l2_comparable(a, b) for a, b in zip(outs_a, outs_b)):
        m.add_all(outs_a, outs_b)
        return m, rel_l2_max(outs_a, outs_b)
    sums, whole = [], True
    for a, b in zip(outs_a, outs_b):
        l2 = [torch.zeros((), dtype=torch.float64, device=a.device) for _ in range(2)]
        # A pair that is empty or not finite throughout leaves its sums partial.
        whole = m.add(a, b, l2) and whole
        sums.append(l2)
    if whole:
        sums = [(float(num), float(den)) for num, den in sums]
        if all(math.isfinite(x) for pair in sums for x in pair):
            return m, _largest_rel_l2(sums)
    return m, rel_l2_max(outs_a, outs_b)


def output_stats(o, rtol):
    """The audit's per-output measurements that need only the output itself."""
    flat = _flat(o)
    n = flat.numel()
    dev = flat.device
    max_abs = lo = hi = zeros = None
    nonfinite = 0

    def upd(cur, v, fn):
        return v if cur is None else fn(cur, v)

    for s in range(0, n, COMPARE_CHUNK):
        x = flat[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64)
        fin = torch.isfinite(x)
        nf = int((~fin).sum())
        nonfinite += nf
        if nf == x.numel():
            continue
        if nf:
            x = x[fin]
        ax = x.abs()
        max_abs = upd(max_abs, float(ax.max()), max)
        zeros = upd(zeros, float(ax.sub(ax.mul(rtol)).max()), max)
        lo = upd(lo, float(x.min()), min)
        hi = upd(hi, float(x.max()), max)
        del x, ax, fin
    constant = None
    if lo is not None:
        c = (lo + hi) / 2.0
        for s in range(0, n, COMPARE_CHUNK):
            x = flat[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64)
            fin = torch.isfinite(x)
            if not bool(fin.any()):
                continue
            x = x[fin]
            e = float((c - x).abs_().sub_(x.abs().mul_(rtol)).max())
            constant = upd(constant, e, max)
            del x, fin
    return {
        "shape": list(o.shape),
        "dtype": _wire_dtype(o),
        "elements": n,
        "max_abs": _json_float(max_abs),
        "nonfinite": nonfinite,
        "zeros_excess": _json_float(zeros),
        "constant_excess": _json_float(constant),
    }


def input_excess(x, o, rtol):
    """max over elements finite in both of (|x - o| - rtol*|o|), x taken in o's shape;
    None when x is not a floating tensor of o's element count (or nothing is finite)."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point()) or x.numel() != o.numel():
        return None
    fx, fo = _flat(x), _flat(o)
    dev = fo.device
    best = None
    for s in range(0, fo.numel(), COMPARE_CHUNK):
        # copy=True: float64 tensors would be returned as they are and overwritten below.
        a = fx[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
        b = fo[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
        both = torch.isfinite(a) & torch.isfinite(b)
        if bool(both.any()):
            e = float((a - b).abs_().sub_(b.abs_().mul_(rtol)).masked_fill_(~both, -math.inf).max())
            best = e if best is None else max(best, e)
        del a, b, both
    return _json_float(best)
