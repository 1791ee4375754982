"""The `audit` command (PROTOCOL.md, "audit"): measurements for `kbench audit`, no
verdicts."""

import math
import time

import torch

from .families import _check_family, _family_seed, _generator, family_values
from .measure import Excess, input_excess, output_stats
from .protocol import (
    MAX_MESSAGE_CHARS,
    WorkerError,
    _clean_text,
    _describe,
    _field,
    _is_int,
    _rtol_field,
)
from .tensors import _check_sendable, cast, flatten_outputs


class AuditCommands:
    """The Worker's `audit` command."""

    def cmd_audit(self, cmd, payload):
        """Measurements for `kbench audit` (PROTOCOL.md, "audit"): how far trivial outputs
        (zeros, a constant, an input) are from the reference's, and how much the outputs
        move when one input or one weight changes. No verdicts."""
        if self.role != "reference":
            raise WorkerError("protocol", "run", "audit is for the reference role only")
        self._require_model("run")
        seed = _field(cmd, "seed", int, "run")
        forward_seed = _field(cmd, "forward_seed", int, "run")
        families = _field(cmd, "families", list, "run")
        for f in families:
            if not isinstance(f, str):
                raise WorkerError("protocol", "run", f"families must be names, got {f!r}")
            _check_family(f, "run")
        rtol = _rtol_field(cmd, "rtol", "run")
        max_weights = cmd.get("max_weights", 64)
        if max_weights is None:
            max_weights = 64
        if not (_is_int(max_weights) and max_weights >= 0):
            raise WorkerError("protocol", "run", f"field 'max_weights' must be a non-negative int, got {max_weights!r}")
        max_rows = cmd.get("max_rows")
        if max_rows is not None and not (_is_int(max_rows) and max_rows >= 1):
            raise WorkerError("protocol", "run", f"field 'max_rows' must be a positive int or null, got {max_rows!r}")
        self.case = None
        self.pending = None
        self._release_device_memory()
        params = [(n, p) for n, p in self.model.named_parameters() if p.is_floating_point()]
        total = len(params)
        if total > max_weights:
            chosen = [j * total // max_weights for j in range(max_weights)]
        else:
            chosen = list(range(total))
        result = {}
        for family in families:
            if family in result:
                continue
            t0 = time.perf_counter()
            state = {"transformed": None, "rows_cut": False}
            try:
                fam = self._audit_family(family, seed, forward_seed, rtol, params, chosen, max_rows, state)
            except WorkerError as exc:
                fam = {"outputs": [], "error": _clean_text(exc.message, MAX_MESSAGE_CHARS)}
            except (Exception, SystemExit) as exc:
                fam = {"outputs": [], "error": _clean_text(_describe(exc), MAX_MESSAGE_CHARS)}
            fam["seconds"] = time.perf_counter() - t0
            fam["transformed"] = state["transformed"]
            fam["rows_cut"] = state["rows_cut"]
            fam["weights_total"] = total
            for out in fam["outputs"]:
                out["weights_total"] = total
            result[family] = fam
            self._release_device_memory()
        return {"type": "audit", "families": result}, []

    def _audit_family(self, family, seed, forward_seed, rtol, params, chosen, max_rows, state):
        """One family's measurements; `state` gets `transformed` and `rows_cut` as soon as
        they are known (the caller reports them also when this raises)."""
        on_device = self.device.type == "cuda"
        cut = {"rows": False}
        inputs, inputs_on, _, state["transformed"] = self._make_inputs(seed, family, on_device, max_rows, cut)
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                _check_sendable(x, f"input {i}")
        out = None
        if max_rows is not None:
            if cut["rows"]:
                pristine = {i: x.detach().clone() for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)}
                try:
                    out, _ = self._forward(self.model, inputs, forward_seed, "run")
                    state["rows_cut"] = True
                except WorkerError:
                    # The model does not take fewer rows: the full inputs, made again.
                    del inputs, pristine
                    self._release_device_memory()
                    inputs, inputs_on, _, state["transformed"] = self._make_inputs(seed, family, on_device)
        if out is None:
            # Pristine copies on the device: every run starts from them, since the model
            # may write to its inputs.
            pristine = {i: x.detach().clone() for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)}
            out, _ = self._forward(self.model, inputs, forward_seed, "run")
        # o is a copy of its own: an output may alias an input (identity), a weight or a
        # buffer the model reuses, all of which the perturbation runs write to.
        o = [t.detach().clone(memory_format=torch.contiguous_format) for t in flatten_outputs(out)]
        del out
        self._release_device_memory()
        outputs = []
        for t in o:
            stats = output_stats(t, rtol)
            stats["input_excess"] = [input_excess(pristine.get(i), t, rtol) for i in range(len(inputs))]
            stats["input_sensitivity"] = []
            stats["weight_sensitivity"] = {}
            outputs.append(stats)
        errors = []

        def perturbed_run(args, what):
            """Runs the model on `args`; per output, {max_excess, nan_mismatch} against o,
            or None for every output when the run failed."""
            try:
                out2, _ = self._forward(self.model, args, forward_seed, "run")
                outs2 = flatten_outputs(out2)
                del out2
            except WorkerError as exc:
                errors.append(_clean_text(f"{what}: {exc.message}", 2000))
                return [None] * len(o)
            measured = []
            for k in range(len(o)):
                m = Excess(rtol)
                if k < len(outs2):
                    m.add(outs2[k], o[k])
                else:
                    m.nan_mismatch, m.elements = o[k].numel(), o[k].numel()
                measured.append(m.json(elements=False))
            del outs2
            self._release_device_memory()
            return measured

        for i, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor):
                for stats in outputs:
                    stats["input_sensitivity"].append(None)
                continue
            try:
                changed = self._perturbed_input(family, seed, i, pristine[i], inputs_on, max_rows if state["rows_cut"] else None)
            except WorkerError as exc:
                errors.append(_clean_text(f"perturbing input {i}: {exc.message}", 2000))
                changed = None
            if changed is None:
                measured = [None] * len(o)
            else:
                self._restore_inputs(inputs, pristine)
                args = list(inputs)
                args[i] = changed
                measured = perturbed_run(args, f"input {i} changed")
                del args, changed
            for stats, m in zip(outputs, measured):
                stats["input_sensitivity"].append(m)

        for j in chosen:
            name, p = params[j]
            self._restore_inputs(inputs, pristine)
            saved = p.detach().clone()
            try:
                flat = p.detach().float().reshape(-1)
                std = float(flat.std()) if flat.numel() > 1 else 0.0
                del flat
                if not math.isfinite(std) or std == 0.0:
                    std = 1.0
                g = _generator(p.device, _family_seed(seed + 2, j))
                new = torch.randn(tuple(p.shape), generator=g, device=p.device, dtype=torch.float32).mul_(std)
                p.data.copy_(new)
                del new
                measured = perturbed_run(inputs, f"weight {name} changed")
            finally:
                p.data.copy_(saved)  # bit for bit: same dtype, same storage
                del saved
            for stats, m in zip(outputs, measured):
                stats["weight_sensitivity"][name] = m

        del o, inputs, pristine
        self._release_device_memory()
        reply = {"outputs": outputs}
        if errors:
            reply["perturbation_errors"] = errors
        return reply

    def _perturbed_input(self, family, seed, i, x, inputs_on, max_rows=None):
        """Input `i` (pristine value `x`) as the case of seed + 1 would make it: the family's
        generator with seed + 1 for a floating tensor (for `random`, get_inputs() under
        seed + 1; should that give the same values, the `signed` values of seed + 1); a
        uniform redraw in [min, max] of an integer tensor; random flips of a bool tensor."""
        g = _generator(x.device, _family_seed(seed + 1, i))
        if x.is_floating_point():
            if family != "random":
                return cast(family_values(family, x.shape, x.device, _family_seed(seed + 1, i), self.dtype), self.device, self.dtype)
            raw, _, _, _ = self._make_inputs(seed + 1, "random", inputs_on == "cuda", max_rows)
            y = raw[i] if i < len(raw) else None
            del raw
            if (
                isinstance(y, torch.Tensor)
                and y.dim() >= 1
                and x.dim() >= 1
                and y.shape[1:] == x.shape[1:]
                and y.shape[0] > x.shape[0]
            ):
                y = y[: x.shape[0]].clone()  # the rows were cut (max_rows)
            if (
                not isinstance(y, torch.Tensor)
                or y.shape != x.shape
                or y.dtype != x.dtype
                or torch.equal(y, x)
            ):
                y = cast(family_values("signed", x.shape, x.device, _family_seed(seed + 1, i), self.dtype), self.device, self.dtype)
            return y
        if x.dtype == torch.bool:
            flip = torch.rand(tuple(x.shape), generator=g, device=x.device) < 0.5
            return x ^ flip
        if x.numel() == 0:
            return x.clone()
        lo, hi = int(x.min()), int(x.max())
        high = hi + 1 if hi < torch.iinfo(x.dtype).max else hi
        if high <= lo:
            return x.clone()
        return torch.randint(lo, high, tuple(x.shape), generator=g, device=x.device, dtype=x.dtype)
