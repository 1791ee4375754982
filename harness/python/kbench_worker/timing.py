"""Timing: the one function both roles use (PROTOCOL.md, "time"), and the `time` command."""

import collections
import gc
import os
import sys

import torch

from .integrity import (
    POISON_CAP_BYTES,
    _changed_inputs,
    _orig,
    _python_threads,
    input_checksums,
    poison_free_memory,
    tampered_names,
)
from .ipc import copy_into_slots
from .protocol import TRACE, WorkerError, _error_from, _field, _is_uint
from .tensors import _host_copy, flatten_outputs, seed_all


# L2 flush size when the device does not report its L2 (KernelBench timing.py writes 256 MiB).
FALLBACK_FLUSH_BYTES = 256 << 20


def time_calls(call, device, warmup, trials, flush_buffer, before_call, after_call=None, split=None):
    """Runs `call(args)` warmup + trials times; returns (clock name, the `trials` samples in ms).

    `before_call(i)` returns the arguments of call i (fresh tensors every call) and runs,
    like `after_call(i, args, out)`, outside the timed region.
    CUDA: a device-wide synchronize before recording the end event, so work the call left
    on side streams is counted; `flush_buffer` (>= 2x L2, or None for no flush) is written
    before every call so no call starts with a warm L2. Events are recorded on the default
    stream, which the candidate cannot have swapped out from under us.
    CPU: perf_counter_ns around the call.
    The clock functions are the ones captured at start-up, before any candidate code ran,
    so rebinding them (time.perf_counter_ns, torch.cuda.Event.elapsed_time) changes nothing.
    `split` (a dict, CUDA only; KBENCH_WORKER_TRACE): host seconds per part of the loop added
    into it ("before": fresh inputs and probes, "flush": the flush and the synchronize
    before the start event, "call": start event to the end event's completion of the timed
    calls, "untimed": the same of the warm-up calls, "after"),
    for finding where a timing round's time goes outside the timed calls.
    """
    samples = []
    if device.type == "cuda":
        sync = _orig("torch.cuda.synchronize")
        record = _orig("torch.cuda.Event.record")
        ev_sync = _orig("torch.cuda.Event.synchronize")
        elapsed = _orig("torch.cuda.Event.elapsed_time")
        stream = torch.cuda.default_stream(device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        tick = _orig("time.perf_counter") if split is not None else None
        for i in range(warmup + trials):
            t0 = tick() if tick else 0.0
            args = before_call(i)
            t1 = tick() if tick else 0.0
            if flush_buffer is not None:
                flush_buffer.fill_(i & 0x7F)
            sync(device)
            t2 = tick() if tick else 0.0
            record(start, stream)
            out = call(args)
            sync(device)
            record(end, stream)
            ev_sync(end)
            t3 = tick() if tick else 0.0
            if i >= warmup:
                samples.append(float(elapsed(start, end)))
            if after_call is not None:
                after_call(i, args, out)
            del out, args
            if tick:
                t4 = tick()
                region = "call" if i >= warmup else "untimed"
                for k, v in (("before", t1 - t0), ("flush", t2 - t1), (region, t3 - t2), ("after", t4 - t3)):
                    split[k] = split.get(k, 0.0) + v
        return "cuda_event", samples
    clock = _orig("time.perf_counter_ns")
    for i in range(warmup + trials):
        args = before_call(i)
        t0 = clock()
        out = call(args)
        t1 = clock()
        if i >= warmup:
            samples.append((t1 - t0) / 1e6)
        if after_call is not None:
            after_call(i, args, out)
        del out, args
    return "perf_counter", samples


class TimingCommands:
    """The Worker's `time` command."""

    def cmd_time(self, cmd, payload):
        self._require_model("time")
        warmup = _field(cmd, "warmup", int, "time")
        trials = _field(cmd, "trials", int, "time")
        forward_seed = _field(cmd, "forward_seed", int, "time")
        if warmup < 0 or trials < 1:
            raise WorkerError("protocol", "time", f"need warmup >= 0 and trials >= 1, got {warmup}, {trials}")
        if self.case is None:
            raise WorkerError("protocol", "time", "no current case (send make_case or run_case first)")
        flush = None
        if cmd.get("l2_flush", True) and self.device.type == "cuda":
            flush = self._flush_buffer()
        check_calls = cmd.get("check_calls") or []
        if not (isinstance(check_calls, list) and all(_is_uint(j) and j < trials for j in check_calls)):
            raise WorkerError("protocol", "time", f"check_calls must list timed-call indices below {trials}, got {check_calls!r}")
        # Probed in both roles alike (checksums, poison), so the probes' side effects on
        # caches and the allocator cost both sides the same; only the candidate reports.
        check_calls = set(check_calls)
        # The candidate's checked outputs into harness buffers on the GPU (compared there),
        # instead of host copies sent back through the pipe.
        device_outputs = cmd.get("device_outputs")
        if device_outputs is not None:
            if not (isinstance(device_outputs, list) and self.role == "candidate" and self.device.type == "cuda"):
                raise WorkerError("protocol", "time", "device_outputs must be a list, for a candidate on a GPU")
        fresh_inputs = bool(cmd.get("fresh_inputs", True))
        model, case = self.model, self.case
        probes = {"inputs_changed": set(), "threads_started": 0}
        checked = []  # (timed-call index, host copies of its outputs)
        checked_device = []  # {call, outputs: descriptions}, the outputs in device_outputs
        recent = collections.deque(maxlen=2)
        state = {}

        def before_call(i):
            self._pin_threads()
            # Fresh tensors at fresh addresses for every call (the two previous calls' are
            # kept alive, so no address is handed straight back): a result cached on an
            # input's data_ptr is never found again. Same code in both roles.
            fresh = list(case)
            if fresh_inputs:
                try:
                    fresh = [x.clone() if isinstance(x, torch.Tensor) else x for x in case]
                except torch.OutOfMemoryError:
                    # A case too large to copy three times: keep one copy alive, or none.
                    recent.clear()
                    try:
                        fresh = [x.clone() if isinstance(x, torch.Tensor) else x for x in case]
                    except torch.OutOfMemoryError:
                        fresh = list(case)
            recent.append(fresh)
            state["threads"] = _python_threads()
            if i - warmup in check_calls:
                state["sums"] = input_checksums(fresh)
                if self.poison is not None:
                    poison_free_memory(self.poison, self.device, POISON_CAP_BYTES)
            # Every call starts from the case's random state, as its forward did in
            # make_case/run_case: a model drawing random numbers (training-mode dropout) then
            # gives the case's outputs in a checked call. Every call alike, in both roles, so
            # the state tells a kernel nothing about which calls are checked.
            seed_all(forward_seed)
            return fresh

        def after_call(i, args, out):
            if i - warmup in check_calls:
                before = state.pop("sums")
                if self.role == "candidate":
                    probes["inputs_changed"].update(_changed_inputs(before, args))
                    flat = flatten_outputs(out)
                    if device_outputs is not None:
                        described = copy_into_slots(flat, device_outputs, self.device, "time")
                        checked_device.append({"call": i - warmup, "outputs": described})
                    else:
                        checked.append((i - warmup, [_host_copy(t, snapshot=True) for t in flat]))
                else:
                    _changed_inputs(before, args)
            probes["threads_started"] = max(probes["threads_started"], _python_threads() - state["threads"])
        # As timeit does: no garbage collection inside timed calls. The reference process holds
        # more Python objects (float64 model, cases) than a candidate process, so collections
        # would cost the two sides differently and bias launch-bound timings.
        gc_was_enabled = gc.isenabled()
        # "cpu": the core the harness keeps free for this GPU's timing (both sides move there,
        # so a launch-bound forward is timed on the same, otherwise idle core). CUDA only: a
        # CPU forward's threads must keep every core they were given.
        old_affinity = None
        cpu = cmd.get("cpu")
        if cpu is not None and self.device.type == "cuda" and hasattr(os, "sched_setaffinity"):
            if not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0:
                raise WorkerError("protocol", "time", f"cpu must be a core number, got {cpu!r}")
            try:
                old_affinity = os.sched_getaffinity(0)
                os.sched_setaffinity(0, {cpu})
            except OSError:
                old_affinity = None
        # Objects alive now (torch, the model, the problem module) are frozen out of every
        # later collection: a full collection over them took ~75 ms per timing round.
        split = {} if TRACE and self.device.type == "cuda" else None
        clock_s = _orig("time.perf_counter")
        t_start = clock_s()
        gc.collect()
        gc.freeze()
        gc.disable()
        try:
            clock, samples = time_calls(
                lambda args: model(*args), self.device, warmup, trials, flush, before_call, after_call, split
            )
        except WorkerError:
            raise
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", "time")
        finally:
            if gc_was_enabled:
                gc.enable()
            if old_affinity is not None:
                os.sched_setaffinity(0, old_affinity)
        # The fresh copies die and, after the last round (`release`, default true), the
        # allocator's blocks go back to the driver: held until this worker's next command,
        # they were GBs the other worker's next case could not have (the reference's stress
        # cases of 6 GiB inputs ran out of memory beside an idle candidate that had just been
        # timed). Not after every round: a full collection and empty_cache, then the next
        # round's copies allocated afresh, cost every one of 50 rounds on both sides. Every
        # free block, not only past the bound other commands keep: this runs once per timed
        # problem, or every round when the harness times again after an out-of-memory error.
        recent.clear()
        state.clear()
        t_loop = clock_s()
        if cmd.get("release", True) is not False:
            self._release_device_memory(keep=0)
        if split is not None:
            # Not the "<role> <command> <start> +<s>s" form: worker_trace.py counts those.
            parts = ", ".join(f"{k} {v:.4f}" for k, v in split.items())
            print(f"kbench worker: time split ({self.role}): {warmup + trials} calls, samples {sum(samples) / 1e3:.4f}, "
                  f"{parts}, loop {t_loop - t_start:.4f}, release {clock_s() - t_loop:.4f} (s)",
                  file=sys.stderr, flush=True)
        reply = {"type": "timing", "clock": clock, "samples_ms": samples}
        tensors = []
        if self.role == "candidate":
            reply["integrity"] = {
                "inputs_changed": sorted(probes["inputs_changed"]),
                "threads_started": probes["threads_started"],
                "tampered": tampered_names(),
            }
            reply["checked_calls"] = [j for j, _ in checked] + [c["call"] for c in checked_device]
            if device_outputs is not None:
                reply["checked_device"] = checked_device
            for j, outs in checked:
                tensors += [(f"timed:{j}:out:{k}", t) for k, t in enumerate(outs)]
        return reply, tensors

    def _flush_buffer(self):
        if self.flush_buffer is None:
            nbytes = 2 * self.l2_bytes if self.l2_bytes else FALLBACK_FLUSH_BYTES
            nbytes = max(nbytes, 2 << 20)
            self.flush_buffer = torch.empty(nbytes // 4, dtype=torch.int32, device=self.device)
        return self.flush_buffer
