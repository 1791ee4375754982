"""Cases (PROTOCOL.md, "make_case", "run_case"): the reference makes a case's inputs and
outputs, the candidate runs it; here with every tensor in the frames' payload (ipc.py has
the device I/O variants)."""

import json
import sys
import time

import torch

from .families import _check_family, apply_family
from .integrity import _changed_inputs, input_checksums
from .measure import Excess, f64_figures
from .protocol import (
    MAX_MESSAGE_CHARS,
    WorkerError,
    _clean_text,
    _describe,
    _error_from,
    _field,
    _rtol_field,
)
from .tensors import (
    _check_sendable,
    _host_copy,
    _sync,
    _tensor_from_payload,
    _to_f64,
    _wire_dtype,
    cast,
    flatten_outputs,
    seed_all,
)


class CaseCommands:
    """The Worker's `make_case` and `run_case` commands, and the making of a case's inputs."""

    def _make_inputs(self, seed, family, on_device, max_rows=None, cut=None):
        """The inputs of a case: get_inputs() under `seed` (with the CUDA device as torch's
        default device when `on_device` and the problem allows it), then (audit) the batch
        cut to `max_rows` (`cut["rows"]` says whether it cut), then `family`'s values for
        the floating tensors, then the casting rule. Returns (inputs, inputs_on, inputs_s,
        transformed)."""
        t_in = time.perf_counter()
        inputs_on = "cpu"
        raw = None
        if on_device:
            # Made on the GPU where the problem allows it: torch.rand of a multi-GB input
            # takes seconds on a CPU and milliseconds here. A get_inputs that cannot run
            # with CUDA as the default device (numpy, explicit CPU-only ops) falls back.
            seed_all(seed)
            try:
                with torch.device(self.device):
                    raw = list(self.get_inputs())
                inputs_on = "cuda"
            except (Exception, SystemExit):
                raw = None
        if raw is None:
            seed_all(seed)
            try:
                raw = list(self.get_inputs())
            except (Exception, SystemExit) as exc:
                raise _error_from(exc, "runtime_error", "run", "get_inputs failed: ")
        if max_rows is not None:
            # Before the family's values: the full tensors die here, and only the rows kept
            # are ever made with the family's values (GBs less of a host's memory).
            shorter = _cut_rows(raw, max_rows)
            if cut is not None:
                cut["rows"] = shorter is not None
            if shorter is not None:
                raw = shorter
                del shorter
        try:
            self.structure_kept = []
            transformed = apply_family(raw, family, seed, self.dtype, self.structure_kept)
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", "run", f"making the {family} inputs failed: ")
        inputs = [cast(x, self.device, self.dtype) for x in raw]
        del raw
        _sync(self.device)
        return inputs, inputs_on, time.perf_counter() - t_in, transformed

    def cmd_make_case(self, cmd, payload):
        if self.role != "reference":
            raise WorkerError("protocol", "run", "make_case is for the reference role only")
        self._require_model("run")
        seed = _field(cmd, "seed", int, "run")
        forward_seed = _field(cmd, "forward_seed", int, "run")
        family = _check_family(cmd.get("family"), "run")
        stability_rtol = _rtol_field(cmd, "stability_rtol", "run", required=False)
        if family == "random":
            stability_rtol = None  # the problem's own inputs: nothing to measure
        probe_tol = None
        if family == "nan-inf" and cmd.get("probe_rtol") is not None:
            probe_tol = (_rtol_field(cmd, "probe_rtol", "run"), _rtol_field(cmd, "probe_atol", "run"))
        # Drop the previous case first: on a GPU shared with a candidate process, whatever
        # this trusted process keeps is memory the candidate cannot have.
        self.case = None
        self.pending = None
        self._release_device_memory()
        device_io = bool(cmd.get("device_io")) and self.device.type == "cuda"
        mark = _memory_mark(self.device)
        t_case = time.perf_counter()
        inputs, inputs_on, inputs_s, transformed = self._make_inputs(seed, family, device_io)
        self.case = inputs
        if device_io:
            reply, tensors = self._make_device_case(
                inputs, forward_seed, inputs_on, inputs_s, stability_rtol, probe_tol
            )
            reply["family"] = family
            reply["transformed"] = transformed
            if self.structure_kept:
                reply["structure"] = self.structure_kept
            self._log_case_times(reply, t_case, mark)
            return reply, tensors

        # Inputs are copied to the host before any forward, so an in-place write by the
        # model cannot change what the candidate will be given.
        args, tensors, pristine = [], [], {}
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                _check_sendable(x, f"input {i}")
                pristine[i] = _host_copy(x, snapshot=True)
                tensors.append((f"in:{i}", pristine[i]))
                args.append({"tensor": f"in:{i}"})
            else:
                args.append({"value": _json_value(x, i)})

        # float64 first, on pristine inputs; its failure is information, not an error.
        sums = input_checksums(inputs)
        outs64, f64_error = [], None
        t64 = time.perf_counter()
        if self.model64 is not None:
            outs64, f64_error = self._run_f64(inputs, forward_seed)
        f64_s = time.perf_counter() - t64

        out, run_s = self._forward(self.model, inputs, forward_seed, "run")
        changed = _changed_inputs(sums, inputs)
        # With stability measurements or probes the outputs are copies of their own even on the CPU:
        # an output may alias an input (which is restored before the second run) or a
        # buffer the model reuses.
        own = stability_rtol is not None or probe_tol is not None
        outs = [_host_copy(t, snapshot=own) for t in flatten_outputs(out)]
        del out
        self.poison = [{"dtype": _wire_dtype(t), "nbytes": t.numel() * t.element_size()} for t in outs]
        tensors += [(f"out:{k}", t) for k, t in enumerate(outs)]
        tensors += [(f"out64:{k}", t) for k, t in enumerate(outs64)]
        reply = {
            "type": "case",
            "inputs": args,
            "outputs": len(outs),
            "outputs_f64": len(outs64),
            "run_s": run_s,
            "f64_s": f64_s,
            "inputs_s": inputs_s,
            "inputs_on": inputs_on,
            "family": family,
            "transformed": transformed,
            "inputs_changed": changed,
        }
        if self.structure_kept:
            reply["structure"] = self.structure_kept
        if f64_error is not None:
            reply["f64_error"] = _clean_text(f64_error, MAX_MESSAGE_CHARS)
        if stability_rtol is not None:
            self._measure_stability(
                reply, inputs, pristine, outs, outs64 if self.model64 is not None and f64_error is None else None,
                forward_seed, stability_rtol,
            )
        if probe_tol is not None:
            alts = self._probe_references(reply, inputs, pristine, outs, forward_seed, probe_tol)
            tensors += [(name, _host_copy(t, snapshot=False)) for name, t in alts]
            del alts
        self._release_device_memory()
        self._log_case_times(reply, t_case, mark)
        return reply, tensors

    def _log_case_times(self, reply, t_case, mark):
        """One line per case in the worker's log: where making it went (inputs, float64
        forward, working forward, stability measurement, probes) and, on a GPU, this
        process's peak allocation and the device's free memory when the case began (what
        decides whether a large case fits beside the candidate's worker; `mark` is
        `_memory_mark`'s (free, total) at its start, None off the GPU)."""
        parts = [f"{k[:-2]} {reply[k]:.3f}s" for k in ("inputs_s", "f64_s", "run_s", "stability_s", "probe_s")
                 if isinstance(reply.get(k), (int, float))]
        if mark is not None:
            free0, total = mark
            peak = torch.cuda.max_memory_allocated(self.device)
            parts.append(f"peak {peak / 2**30:.2f} GiB, free at start {free0 / 2**30:.2f} of {total / 2**30:.2f} GiB")
        print(f"kbench worker: make_case {reply.get('family', 'random')}: {time.perf_counter() - t_case:.3f}s "
              f"({', '.join(parts)})", file=sys.stderr, flush=True)

    def _measure_stability(self, reply, inputs, pristine, outs, outs64, forward_seed, rtol):
        """Adds `stability` and `stability_s` to a make_case reply: a second working forward
        on the pristine inputs against the first (`repeat`), and the first against the
        float64 model (`f64`, None without one)."""
        self._stability_repeat(reply, inputs, pristine, outs, forward_seed, rtol)
        self._stability_f64(reply, outs, outs64, rtol)

    def _stability_repeat(self, reply, inputs, pristine, outs, forward_seed, rtol):
        """`stability.repeat` (f64 still None) and `stability_s`: the working forward run again
        on the pristine inputs, against its first outputs."""
        t0 = time.perf_counter()
        self._restore_inputs(inputs, pristine)
        out2, _ = self._forward(self.model, inputs, forward_seed, "run")
        outs2 = flatten_outputs(out2)
        del out2
        repeat = Excess(rtol)
        repeat.add_all(outs2, outs)
        del outs2
        reply["stability"] = {"repeat": repeat.json(), "f64": None}
        self._release_device_memory()
        reply["stability_s"] = time.perf_counter() - t0

    @staticmethod
    def _stability_f64(reply, outs, outs64, rtol):
        """`stability.f64`: the working outputs against the float64 model's (None without
        them); its seconds are added to `stability_s`."""
        if outs64 is None:
            return
        t0 = time.perf_counter()
        m, rel_l2 = f64_figures(outs, outs64, rtol)
        reply["stability"]["f64"] = m.json()
        reply["stability"]["f64"]["rel_l2"] = rel_l2
        reply["stability_s"] = reply.get("stability_s", 0.0) + time.perf_counter() - t0

    def _probe_references(self, reply, inputs, pristine, outs, forward_seed, probe_tol):
        """nan-inf cases: the probe references (probes.py) as [(`outalt:K`, tensor)], and
        `outputs_alt`, `probe_s` in the reply. A probe run that fails is reported as
        `probe_error` and the case keeps the strict NaN/Inf rules."""
        # Imported on first use, by the reference only: imported at start-up it shifted the
        # candidate worker's CPU heap enough that the free-memory poisoning (integrity.py)
        # missed torch.empty_like's block in test_integrity, 3 runs of 3.
        from .probes import probe_references

        t0 = time.perf_counter()
        rtol, atol = probe_tol

        def forward(args):
            return self._forward(self.model, args, forward_seed, "run")[0]

        try:
            alts = probe_references(forward, inputs, pristine, outs, rtol, atol, self._restore_inputs)
        except WorkerError as exc:
            reply["probe_error"] = _clean_text(exc.message, MAX_MESSAGE_CHARS)
            alts = []
        except (Exception, SystemExit) as exc:
            reply["probe_error"] = _clean_text(_describe(exc), MAX_MESSAGE_CHARS)
            alts = []
        reply["outputs_alt"] = len(alts)
        reply["probe_s"] = time.perf_counter() - t0
        return [(f"outalt:{k}", t) for k, t in alts]

    def _run_f64(self, inputs, forward_seed):
        """(host outputs of the float64 model, None) or ([], why it failed). The float64
        copies of the inputs die with this frame, before the working forward runs."""
        try:
            args64 = [_to_f64(x) for x in inputs]
            out64, _ = self._forward(self.model64, args64, forward_seed, "run")
            return [_host_copy(t, snapshot=False) for t in flatten_outputs(out64)], None
        except WorkerError as exc:
            return [], exc.message
        except (Exception, SystemExit) as exc:
            return [], _describe(exc)

    def cmd_run_case(self, cmd, payload):
        if self.role != "candidate":
            raise WorkerError("protocol", "run", "run_case is for the candidate role only")
        self._require_model("run")
        forward_seed = _field(cmd, "forward_seed", int, "run")
        arg_specs = _field(cmd, "inputs", list, "run")
        self.case = None  # free the previous inputs before the new ones arrive
        self._release_device_memory()
        self._take_poison(cmd)
        if "device_inputs" in cmd:
            return self._run_device_case(cmd, arg_specs, forward_seed)
        args = self._host_args(cmd, payload, arg_specs)
        del payload
        self.case = args
        out, run_s, probes = self._probed_forward(args, forward_seed)
        flat = flatten_outputs(out)
        self._check_output_devices(flat)
        outs = [_host_copy(t, snapshot=False) for t in flat]
        del out, flat
        self._release_device_memory()
        tensors = [(f"out:{k}", t) for k, t in enumerate(outs)]
        if cmd.get("return_inputs"):
            # The inputs as they are after the call, so the harness can check they were
            # not written to.
            for i, x in enumerate(args):
                if isinstance(x, torch.Tensor):
                    _check_sendable(x, f"input {i}")
                    tensors.append((f"in:{i}", _host_copy(x, snapshot=False)))
        return {"type": "outputs", "outputs": len(outs), "run_s": run_s, "integrity": probes}, tensors

    def _host_args(self, cmd, payload, arg_specs):
        """A case's argument list from a frame's tensors (`{tensor}`) and JSON values (`{value}`)."""
        specs = {s["name"]: s for s in cmd.get("tensors") or []}
        args = []
        for i, a in enumerate(arg_specs):
            if isinstance(a, dict) and len(a) == 1 and "tensor" in a:
                spec = specs.get(a["tensor"])
                if spec is None:
                    raise WorkerError("protocol", "run", f"input {i} names tensor {a['tensor']!r}, not in the frame")
                # dtype as sent: the reference already applied the casting rule.
                args.append(_tensor_from_payload(payload, spec, self.device))
            elif isinstance(a, dict) and len(a) == 1 and "value" in a:
                args.append(a["value"])
            else:
                raise WorkerError("protocol", "run", f"input {i} is neither {{tensor}} nor {{value}}: {a!r}")
        return args


def _memory_mark(device):
    """(free, total) bytes of a CUDA device, with this process's peak-allocation counter
    reset, for the case's log line; None elsewhere."""
    if device is None or device.type != "cuda":
        return None
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.mem_get_info(device)


def _cut_rows(inputs, n):
    """`max_rows`: the inputs with their batch dimension cut to `n` rows (every tensor whose
    first dimension equals the first input's, when that is larger than n), or None when the
    first input has no such dimension."""
    first = inputs[0] if inputs else None
    if not isinstance(first, torch.Tensor) or first.dim() == 0 or first.shape[0] <= n:
        return None
    b = first.shape[0]
    return [
        x[:n].clone() if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == b else x
        for x in inputs
    ]


def _json_value(x, i):
    """A non-tensor input as JSON, or a clear error when it cannot travel."""
    try:
        json.dumps(x, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise WorkerError(
            "runtime_error", "run",
            f"input {i} is a {type(x).__qualname__} that cannot be sent as JSON ({exc}); "
            "inputs must be tensors or JSON values",
        )
    return x
