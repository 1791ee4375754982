"""nan-inf cases (PROTOCOL.md, "Probe references"): the reference run twice more with the
injected non-finite input elements replaced by finite probes, and per floating output the
probe reference `outalt:K` that tells where an output element does not depend on them.

An element whose two probe runs agree (both finite, within a hundredth of the run's
tolerance) does not depend on the injected values: where the reference is NaN or Inf
there, that is an artefact of its algorithm (a matmul spreads one NaN of B through a
whole column by 0·NaN), and the harness accepts a finite candidate close to the probe
value. Everywhere else the probe reference is NaN and the reference's NaN/Inf stands."""

import math

import torch

from .tensors import flatten_outputs

# The two probe values, +1024 and -768: exact in fp16, bf16 and fp32; far from the
# `signed` values (|x| < ~50) so that any real dependence moves the output; small enough
# that products with those values (|x|·1024 < 65504) stay finite in fp16. Of different
# magnitudes, so that an even function of the injected value (|x|, x², a norm) still
# differs between the two runs.
PROBES = (1024.0, -768.0)

# The probe runs must agree within tolerance/100: a dependence diluted by a reduction
# (a mean over N elements moves by 1792/N) is still seen up to N ≈ 1.8e9 at fp32
# tolerance 1e-4, while a reference that reorders its sums from run to run (atomics)
# makes the probe NaN, which only keeps the strict rule.
AGREE_SCALE = 0.01


def nonfinite_positions(pristine):
    """{input index: indices (a tuple per dimension) of its non-finite elements}, for the
    floating inputs (by index, as `pristine` holds them) that have any: three per tensor
    in the nan-inf family, so they cost nothing to keep."""
    positions = {}
    for i, x in pristine.items():
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            nz = (~torch.isfinite(x)).nonzero(as_tuple=True)
            if nz and nz[0].numel():
                positions[i] = nz
    return positions


def probe_alt(a, b, rtol, atol):
    """The probe reference of one output from its two probe runs: `a` where both are
    finite and agree within `AGREE_SCALE` of the tolerance, else NaN; `a`'s dtype."""
    return probe_alt_(a.clone(), b.clone(), rtol, atol)


def probe_alt_(a, b, rtol, atol):
    """`probe_alt` that consumes its arguments: the result is written into `a`, and `b` is
    used as scratch. Besides the two runs it needs one temporary of their size (the bound)
    and two boolean masks, where `probe_alt` needs four: on a 6 GiB output that is what
    decides whether the probe runs fit beside the candidate."""
    if tuple(a.shape) != tuple(b.shape):
        return a.fill_(math.nan)
    # fp16/bf16 compared in fp32 (copies), fp32 and fp64 as they are
    x = a if a.dtype in (torch.float32, torch.float64) else a.float()
    y = b if b.dtype in (torch.float32, torch.float64) else b.float()
    agree = torch.isfinite(x) & torch.isfinite(y)
    bound = y.abs().mul_(rtol).add_(atol).mul_(AGREE_SCALE)
    agree &= y.sub_(x).abs_() <= bound  # y is scratch from here
    del bound, x, y
    return a.masked_fill_(~agree, math.nan)


def probe_references(forward, inputs, pristine, outs, rtol, atol, restore):
    """[(k, probe reference of output k)] for the floating outputs `outs` (the reference's)
    that hold a NaN or Inf (elsewhere the rules need no probe). `forward(args)` runs the
    reference (seeded as the case's forward); `restore(inputs, pristine)` writes the
    pristine values back into the case's tensors. The probes are written into the case's own
    tensors (no copy of a possibly multi-GB input) and the pristine values restored after
    each run. Empty when no input has a non-finite element."""
    need = [
        k for k, o in enumerate(outs)
        if isinstance(o, torch.Tensor) and o.is_floating_point() and not bool(torch.isfinite(o).all())
    ]
    positions = nonfinite_positions(pristine)
    if not need or not positions:
        return []
    runs = []
    try:
        for value in PROBES:
            restore(inputs, pristine)
            for i, nz in positions.items():
                x = inputs[i]
                x[tuple(p.to(x.device) for p in nz)] = value
            out = forward(inputs)
            flat = flatten_outputs(out)
            del out
            # Only the outputs that need a probe reference are kept, as copies of their own:
            # an output may alias an input, which the next restore overwrites.
            runs.append({k: flat[k].detach().clone() for k in need if k < len(flat)})
            del flat
    finally:
        restore(inputs, pristine)
    alts = []
    for k in need:
        a, b = runs[0].pop(k, None), runs[1].pop(k, None)
        if a is not None and b is not None and a.dtype == outs[k].dtype:
            alt = probe_alt_(a, b, rtol, atol)
        else:
            alt = torch.full_like(outs[k], math.nan)
        del a, b
        alts.append((k, alt.to(device=outs[k].device).contiguous()))
    return alts
