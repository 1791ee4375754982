"""Module modes (PROTOCOL.md, "Model mode"): `load`'s `model_mode` (`eval` puts the model in
`.eval()` right after construction), the observations behind the harness's `mode-switch`
advisory (modules with `training == False`, an output that depends on BatchNorm running
statistics), and `eval_case`, one case with the model as constructed in `.eval()`: the
re-check of a `mode-switch` candidate that failed in train mode.

Measurements only: the harness decides what they mean.
"""

import contextlib

import torch

from .protocol import WorkerError, _field
from .tensors import _check_sendable, _host_copy, flatten_outputs

MODES = ("train", "eval")
# Module names listed in an observation (the count says how many there are).
MAX_NAMES = 8
# Buffers that a training-mode forward of a BatchNorm updates (and that `eval_case` resets to
# their values as constructed).
STAT_NAMES = ("running_mean", "running_var")
TRACKED_NAMES = STAT_NAMES + ("num_batches_tracked",)


def check_mode(cmd, phase="load"):
    mode = cmd.get("model_mode", "train")
    if mode is None:
        mode = "train"
    if mode not in MODES:
        raise WorkerError("protocol", phase, f"model_mode must be 'train' or 'eval', got {mode!r}")
    return mode


def _leaf(name):
    return name.rsplit(".", 1)[-1]


def eval_modules(model):
    """(names of up to MAX_NAMES modules with training == False, how many there are): the
    model itself is named by its class."""
    if not isinstance(model, torch.nn.Module):
        return [], 0
    names, count = [], 0
    for name, m in model.named_modules():
        if getattr(m, "training", True) is False:
            count += 1
            if len(names) < MAX_NAMES:
                names.append(name or type(model).__name__)
    return names, count


def _buffers(model, leaves):
    if not isinstance(model, torch.nn.Module):
        return []
    return [(n, b) for n, b in model.named_buffers() if _leaf(n) in leaves and isinstance(b, torch.Tensor)]


def stat_buffers(model):
    """The floating running-statistics buffers (running_mean, running_var) of the model."""
    return [(n, b) for n, b in _buffers(model, STAT_NAMES) if b.is_floating_point()]


def _outputs_differ(a, b):
    """Whether two forwards' outputs differ by more than run-to-run noise (GPU atomics)."""
    if len(a) != len(b):
        return True
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return True
        if x.is_floating_point() or x.is_complex():
            x64, y64 = x.detach().to(torch.float64), y.detach().to(torch.float64)
            both_nan = torch.isnan(x64) & torch.isnan(y64)
            far = (x64 - y64).abs() > 1e-3 * (1.0 + y64.abs())
            if bool((far & ~both_nan).any()):
                return True
        elif not bool((x == y).all()):
            return True
    return False


class ModeCommands:
    """Applying the run's module mode at load, the mode observations around a candidate's
    calls, and `eval_case`."""

    def _apply_mode(self, model, mode):
        """After construction: `eval` puts every module in inference mode."""
        self.model_mode = mode
        if mode == "eval" and isinstance(model, torch.nn.Module):
            model.eval()

    def _snapshot_buffers(self):
        """The BatchNorm buffers as constructed (host copies), for `eval_case`."""
        self.initial_buffers = {n: b.detach().to("cpu", copy=True) for n, b in _buffers(self.model, TRACKED_NAMES)}

    def mode_observations(self):
        """What the module tree says, for an `integrity` report: the modules in eval mode,
        when there are any in a train-mode run (nothing otherwise)."""
        if self.model_mode != "train":
            return {}
        names, count = eval_modules(self.model)
        return {"eval_modules": names, "eval_module_count": count} if count else {}

    def _stats_probe_inputs(self, args):
        """Copies of a case's inputs for the running-statistics probe, taken before the call
        (it may write to them): once per worker, in train mode, when the model has running
        statistics. None otherwise."""
        if self.model_mode != "train" or self.stats_probed or not stat_buffers(self.model):
            return None
        self.stats_probed = True
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in args]

    def _running_stats_read(self, args, out, forward_seed):
        """Names of the running-statistics buffers (up to MAX_NAMES) when the output depends
        on them: the call again with every running_mean shifted and running_var scaled. In
        training mode a BatchNorm normalises with the batch's statistics, so an honest
        candidate's output does not move; one that normalises with the running statistics
        (F.batch_norm(..., training=False), or its own math on them) does. [] when it does
        not, or when the probe itself fails (nothing is concluded). `out` must be copies the
        model's next call cannot touch (`copy_outputs`: a CUDA graph's replay takes back the
        outputs of the call before)."""
        bufs = stat_buffers(self.model)
        saved = [b.detach().clone() for _, b in bufs]
        try:
            first = flatten_outputs(out)
            for n, b in bufs:
                if _leaf(n) == "running_mean":
                    b.add_(0.5)
                else:
                    b.mul_(4.0).add_(1.0)
            out2, _ = self._forward(self.model, args, forward_seed, "run")
            moved = _outputs_differ(flatten_outputs(out2), first)
            del out2, first
        except (Exception, SystemExit):  # noqa: BLE001 (a probe: no conclusion)
            moved = False
        finally:
            for (_, b), v in zip(bufs, saved):
                b.copy_(v)
        self._release_device_memory()
        return [n for n, _ in bufs][:MAX_NAMES] if moved else []

    @contextlib.contextmanager
    def _as_constructed_in_eval(self):
        """The model in `.eval()` with its BatchNorm buffers as constructed; afterwards every
        module's `training` flag and every buffer as it was."""
        model = self.model
        flags = [(m, m.training) for m in model.modules()] if isinstance(model, torch.nn.Module) else []
        bufs = _buffers(model, TRACKED_NAMES)
        saved = [b.detach().clone() for _, b in bufs]
        try:
            for n, b in bufs:
                if n in self.initial_buffers:
                    b.copy_(self.initial_buffers[n].to(b.device))
            if isinstance(model, torch.nn.Module):
                model.eval()
            yield
        finally:
            for m, flag in flags:
                m.training = flag
            for (_, b), v in zip(bufs, saved):
                b.copy_(v)

    def cmd_eval_case(self, cmd, payload):
        """One case with the model as constructed, in `.eval()`. Reference: the inputs of
        `seed` (the random family) and its outputs. Candidate: its outputs on the inputs sent
        (as `run_case` takes them). Leaves the current case and the model's state alone."""
        self._require_model("run")
        forward_seed = _field(cmd, "forward_seed", int, "run")
        tensors, arg_list = [], []
        if self.role == "reference":
            seed = _field(cmd, "seed", int, "run")
            inputs, _, _, _ = self._make_inputs(seed, "random", False)
            from .cases import _json_value

            for i, x in enumerate(inputs):
                if isinstance(x, torch.Tensor):
                    _check_sendable(x, f"input {i}")
                    tensors.append((f"in:{i}", _host_copy(x, snapshot=True)))
                    arg_list.append({"tensor": f"in:{i}"})
                else:
                    arg_list.append({"value": _json_value(x, i)})
        else:
            inputs = self._host_args(cmd, payload, _field(cmd, "inputs", list, "run"))
        with self._as_constructed_in_eval():
            out, run_s = self._forward(self.model, inputs, forward_seed, "run")
            outs = [_host_copy(t, snapshot=True) for t in flatten_outputs(out)]
            del out
        del inputs
        self._release_device_memory()
        tensors += [(f"out:{k}", t) for k, t in enumerate(outs)]
        return {"type": "eval_case", "inputs": arg_list, "outputs": len(outs), "run_s": run_s}, tensors
