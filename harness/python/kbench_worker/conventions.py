"""Timing under other evaluators' conventions (PROTOCOL.md, "time_as"): a diagnosis for
published claims, never a speedup kbench reports. Each worker times its own model in its own
process, so a candidate's number here comes from a clock inside the candidate's process and
is only as honest as the candidate (kbench's own speedups come from the harness's clock).

- `kernelbench`: KernelBench's `cuda_event` method (src/kernelbench/timing.py): grad mode on
  (its eval times outside `torch.no_grad()`), `get_inputs()` once after seed 42, the same
  tensors for every call; 3 warm-up calls each followed by a synchronize, then
  `empty_cache()`; `timed_calls + 1` timed calls, each: synchronize, a 256 MiB int64 fill to
  thrash L2, start event on the current stream, the call, end event, synchronize; the first
  discarded; the mean.
- `kernelbench-v0.1`: the same method as KernelBench had it until its timing rework of
  2025-12-15 (737c1eb added the L2 thrash), its releases v0 and v0.1 included (tag v0.1 =
  129232e, `src/eval.py`, `time_execution_with_cuda_event`), so for sets timed before then: grad mode on, `get_inputs()` once
  after seed 42, 3 warm-up calls each followed by a synchronize, then `timed_calls` timed calls,
  each: start event, the call, end event, synchronize; no L2 flush, no `empty_cache()`,
  nothing discarded; the mean.
- `cuda-l1`: CUDA-L1's `eval/eval_cuda.py`: the model in `.eval()` and `torch.no_grad()`,
  3 warm-up calls on one `get_inputs()`, then fresh `get_inputs()` for every timed call,
  events on the current stream, a synchronize after each, no L2 flush; the mean. (It also
  draws which model goes first per call; here each side runs in its own worker, one after
  the other.)

On a CPU the events are `time.perf_counter` around the call and the flush is skipped.
"""

import time

import torch

from .protocol import WorkerError, _error_from, _field
from .tensors import _sync, cast, seed_all

METHODS = ("kernelbench", "kernelbench-v0.1", "cuda-l1")
KERNELBENCH_SEED = 42
WARMUP = 3


class _Clock:
    """Events on the current stream (CUDA) or perf_counter (CPU), in milliseconds."""

    def __init__(self, device):
        self.device = device
        self.cuda = device.type == "cuda"

    def time(self, fn):
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(self.device)
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


class ConventionCommands:
    """The Worker's `time_as` command."""

    def _convention_inputs(self):
        try:
            raw = list(self.get_inputs())
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", "run", "get_inputs failed: ")
        return [cast(x, self.device, self.dtype) for x in raw]

    def cmd_time_as(self, cmd, _payload):
        method = _field(cmd, "method", str, "time_as")
        trials = _field(cmd, "timed_calls", int, "time_as")
        seed = _field(cmd, "seed", int, "time_as")
        budget_s = float(cmd.get("budget_s", 30.0))
        if method not in METHODS or trials < 1:
            raise WorkerError("protocol", "run", f"time_as: method must be one of {METHODS} and timed_calls >= 1")
        clock = _Clock(self.device)
        model = self.model
        was_training = getattr(model, "training", False)
        times = []
        try:
            if method == "kernelbench":
                seed_all(KERNELBENCH_SEED)
                inputs = self._convention_inputs()
                with torch.enable_grad():
                    for _ in range(WARMUP):
                        model(*inputs)
                        _sync(self.device)
                    if clock.cuda:
                        torch.cuda.empty_cache()
                    t_end = time.monotonic() + budget_s
                    for _ in range(trials + 1):
                        _sync(self.device)
                        if clock.cuda:
                            torch.empty((32, 1024, 1024), dtype=torch.int64, device=self.device).fill_(42)
                        times.append(clock.time(lambda: model(*inputs)))
                        if time.monotonic() > t_end and len(times) > 2:
                            break
                times = times[1:]
            elif method == "kernelbench-v0.1":
                seed_all(KERNELBENCH_SEED)
                inputs = self._convention_inputs()
                with torch.enable_grad():
                    for _ in range(WARMUP):
                        model(*inputs)
                        _sync(self.device)
                    t_end = time.monotonic() + budget_s
                    for _ in range(trials):
                        times.append(clock.time(lambda: model(*inputs)))
                        if time.monotonic() > t_end and len(times) > 2:
                            break
            else:
                if isinstance(model, torch.nn.Module):
                    model.eval()
                seed_all(seed)
                inputs = self._convention_inputs()
                for _ in range(WARMUP):
                    model(*inputs)
                _sync(self.device)
                t_end = time.monotonic() + budget_s
                for _ in range(trials):
                    inputs = self._convention_inputs()
                    times.append(clock.time(lambda: model(*inputs)))
                    if time.monotonic() > t_end and len(times) > 2:
                        break
        except WorkerError:
            raise
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", "run", f"time_as {method}: ")
        finally:
            if isinstance(model, torch.nn.Module):
                model.train(was_training)
            _sync(self.device)
            self._release_device_memory()
        return {
            "type": "time_as",
            "method": method,
            "timed_calls": len(times),
            "mean_ms": sum(times) / len(times),
        }, []
