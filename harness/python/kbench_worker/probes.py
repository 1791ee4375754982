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


def nonfinite_masks(pristine):
    """{input index: bool mask of its non-finite elements}, for the floating inputs (by
    index, as `pristine` holds them) that have any."""
    masks = {}
    for i, x in pristine.items():
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            m = ~torch.isfinite(x)
            if bool(m.any()):
                masks[i] = m
    return masks


def _probe_args(inputs, pristine, masks, value):
    """The case's arguments with the pristine values, the masked elements set to `value`
    (fresh copies: the probe forward may write to them)."""
    args = list(inputs)
    for i, src in pristine.items():
        x = src.to(device=inputs[i].device, copy=True)
        if i in masks:
            x.masked_fill_(masks[i].to(x.device), value)
        args[i] = x
    return args


def probe_alt(a, b, rtol, atol):
    """The probe reference of one output from its two probe runs: `a` where both are
    finite and agree within `AGREE_SCALE` of the tolerance, else NaN; `a`'s dtype."""
    if tuple(a.shape) != tuple(b.shape):
        return torch.full_like(a, math.nan)
    # fp16/bf16 compared in fp32, fp32 and fp64 as they are
    x = a if a.dtype == torch.float64 else a.float()
    y = b if b.dtype == torch.float64 else b.float()
    bound = y.abs().mul_(rtol).add_(atol).mul_(AGREE_SCALE)
    agree = torch.isfinite(x) & torch.isfinite(y) & ((x - y).abs_() <= bound)
    del bound
    return torch.where(agree, a, torch.full_like(a, math.nan))


def probe_references(forward, inputs, pristine, outs, rtol, atol):
    """[(k, probe reference of output k)] for the floating outputs `outs` (the reference's)
    that hold a NaN or Inf (elsewhere the rules need no probe); `forward(args)` runs the
    reference on `args` (seeded as the case's forward). Empty when no input has a
    non-finite element."""
    need = [
        k for k, o in enumerate(outs)
        if isinstance(o, torch.Tensor) and o.is_floating_point() and not bool(torch.isfinite(o).all())
    ]
    masks = nonfinite_masks(pristine)
    if not need or not masks:
        return []
    runs = []
    for value in PROBES:
        out = forward(_probe_args(inputs, pristine, masks, value))
        runs.append([t.detach() for t in flatten_outputs(out)])
        del out
    alts = []
    for k in need:
        if k < len(runs[0]) and k < len(runs[1]) and runs[0][k].dtype == outs[k].dtype:
            alt = probe_alt(runs[0][k], runs[1][k], rtol, atol)
        else:
            alt = torch.full_like(outs[k], math.nan)
        alts.append((k, alt.to(device=outs[k].device).contiguous()))
    return alts
