"""Cost of a problem (PROTOCOL.md, "cost"): the FLOPs of one forward and the bytes a kernel
must at least move."""

import torch

from .protocol import WorkerError, _error_from, _field
from .tensors import _precision_name, _sync, seed_all


def _tensor_nbytes(x):
    """Bytes of every tensor in a (possibly nested) argument or output."""
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_tensor_nbytes(v) for v in x)
    if isinstance(x, dict):
        return sum(_tensor_nbytes(v) for v in x.values())
    return 0


def _weight_nbytes(model):
    """Bytes of the model's parameters and buffers, each storage counted once."""
    seen, total = set(), 0
    if not isinstance(model, torch.nn.Module):
        return 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = (t.device, t.data_ptr())
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def problem_cost(model, inputs, forward_seed, device, precision):
    """FLOPs of one forward (torch.utils.flop_counter.FlopCounterMode: matmuls, convolutions,
    attention; FMA = 2) and the bytes a kernel must at least move: inputs, weights and
    outputs once each."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    seed_all(forward_seed)
    with counter:
        out = model(*inputs)
    _sync(device)
    by_op = {}
    for op, n in counter.get_flop_counts().get("Global", {}).items():
        by_op[str(op)] = float(n)
    return {
        "flops": float(counter.get_total_flops()),
        "flops_by_op": by_op,
        "precision": precision,
        "input_bytes": float(_tensor_nbytes(list(inputs))),
        "weight_bytes": float(_weight_nbytes(model)),
        "output_bytes": float(_tensor_nbytes(out)),
    }


class CostCommands:
    """The Worker's `cost` command."""

    def cmd_cost(self, cmd, payload):
        if self.role != "reference":
            raise WorkerError("protocol", "run", "cost is for the reference role only")
        self._require_model("run")
        seed = _field(cmd, "seed", int, "run")
        forward_seed = _field(cmd, "forward_seed", int, "run")
        self._pin_threads()
        try:
            # Made on the GPU where the problem allows it, as cases are: a level-1 problem's
            # multi-GB inputs took 10+ s from a CPU torch.rand, per problem.
            inputs, _, _, _ = self._make_inputs(seed, "random", self.device.type == "cuda")
            reply = problem_cost(self.model, inputs, forward_seed, self.device, _precision_name(self.dtype))
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", "run", "counting the reference's cost failed: ")
        del inputs
        self._release_device_memory()
        reply["type"] = "cost"
        return reply, []
