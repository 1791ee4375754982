"""Integrity probes (PROTOCOL.md, "Integrity"). Measurements only: the harness names flags.

They run in the candidate's own process, so a candidate that patches torch can defeat
them; they catch the tricks that do not go that far, and the harness's own checks (poison
bits, wall clock, replayed outputs, the protocol's ids) do not depend on them.
"""

import time

import torch

from . import cpu_heap
from .measure import COMPARE_CHUNK
from .protocol import WorkerError, _clean_text, _error_from, _field, _is_uint
from .tensors import _sync, copy_outputs, flatten_outputs


# Bit patterns written into free memory before a candidate call: quiet NaNs with a payload
# no arithmetic produces (propagated NaNs keep the payload of an input NaN, and no case
# input carries this one), so an output element that still holds it was never written.
# Integer outputs get a byte pattern (0xA5...), which can be an honest value: the harness
# only counts floating outputs.
POISON_BITS = {"f32": 0x7FC0DEAD, "f16": 0x7E5B, "bf16": 0x7FDE, "f64": 0x7FF8DEADDEADDEAD}
_POISON_INT_DTYPE = {}  # wire name -> signed integer dtype of the same size (filled with torch)

# Functions the worker and the harness rely on, captured before any candidate code runs:
# the timing code calls these captured objects (a rebinding does not change what is
# measured), and `tampered_names` reports any that were rebound.
_WATCHED = {}


# How long a call's leftover threads get to finish before its outputs are fingerprinted again.
THREAD_GRACE_S = 0.5
# Device activities listed by `profile` (a candidate launching a million tiny kernels would
# otherwise make a multi-MB reply).
MAX_PROFILED_KERNELS = 4096
# Most free device memory poisoned before one candidate call (a memset at ~3 TB/s: ~3 ms).
POISON_CAP_BYTES = 8 << 30


def _capture_watched():
    _POISON_INT_DTYPE.update({"f32": torch.int32, "f16": torch.int16, "bf16": torch.int16, "f64": torch.int64})
    import importlib

    testing = importlib.import_module("torch.testing")

    def watch(label, owner, attr):
        try:
            _WATCHED[label] = (owner, attr, getattr(owner, attr))
        except AttributeError:
            pass

    for attr in ("perf_counter", "perf_counter_ns", "time", "monotonic", "monotonic_ns"):
        watch(f"time.{attr}", time, attr)
    for attr in ("allclose", "isclose", "equal"):
        watch(f"torch.{attr}", torch, attr)
    watch("torch.testing.assert_close", testing, "assert_close")
    watch("torch.cuda.synchronize", torch.cuda, "synchronize")
    for attr in ("record", "elapsed_time", "synchronize"):
        watch(f"torch.cuda.Event.{attr}", torch.cuda.Event, attr)


def tampered_names():
    """Names of watched functions that are no longer what they were at start-up."""
    return sorted(label for label, (owner, attr, orig) in _WATCHED.items() if getattr(owner, attr, None) is not orig)


def _orig(label):
    return _WATCHED[label][2]


def _poison_pattern(wire):
    """(bits, integer dtype of the same size) of dtype `wire`'s poison; (0xA5, None), a byte
    pattern, for a dtype without one."""
    if wire in POISON_BITS:
        return POISON_BITS[wire], _POISON_INT_DTYPE[wire]
    return 0xA5, None


def _poison_fill(nbytes, wire, device):
    """A tensor of `nbytes` (rounded up to whole elements) filled with the poison pattern
    of dtype `wire`."""
    bits, idt = _poison_pattern(wire)
    if idt is None:
        return torch.full((nbytes,), bits, dtype=torch.uint8, device=device)
    n = -(-nbytes // torch.tensor([], dtype=idt).element_size())
    return torch.full((n,), bits, dtype=idt, device=device)


def poison_free_memory(specs, device, cap_bytes):
    """Fills memory the candidate's next allocations will get with the poison pattern,
    then frees it. `specs`: [{"dtype": wire, "nbytes": n}], the reference's outputs.

    CUDA: besides blocks of the outputs' sizes, every inactive block of the caching
    allocator (from its snapshot; best-fit hands each size back exactly), up to
    `cap_bytes` in all. CPU: the free heap chunks an allocation of each output's size can be
    given (cpu_heap.poison_heap)."""
    wire = next((s["dtype"] for s in specs if s.get("dtype") in POISON_BITS), "f32")
    held, heap_blocks = [], []
    try:
        if device.type == "cuda":
            sizes = []
            for seg in torch.cuda.memory_snapshot():
                if seg.get("device") not in (None, device.index):
                    continue
                for b in seg.get("blocks", []):
                    if b.get("state") == "inactive" and b.get("size", 0) > 0:
                        sizes.append(int(b["size"]))
            total = 0
            for s in sorted(sizes, reverse=True):
                if total + s > cap_bytes:
                    continue
                held.append(_poison_fill(s, wire, device))
                total += s
        for s in specs:
            n = int(s.get("nbytes", 0))
            if not 0 < n <= cap_bytes:
                continue
            if device.type != "cuda":
                blocks = cpu_heap.poison_heap(n, *_poison_pattern(s.get("dtype")))
                if blocks is not None:
                    heap_blocks.extend(blocks)
                    continue
            # A little larger too: an aligned allocation asks for more than its size.
            for extra in (0, 128, 4096):
                held.append(_poison_fill(n + extra, s.get("dtype"), device))
        _sync(device)
    except (RuntimeError, MemoryError):
        pass  # out of memory: poison what fitted
    del held
    cpu_heap.free_blocks(heap_blocks)


def _checksum_view(x):
    """The tensor's bytes as a flat integer tensor (same element size; bool as uint8)."""
    x = x.detach()
    if not x.is_contiguous():
        x = x.contiguous()
    flat = x.reshape(-1)
    if flat.dtype == torch.bool:
        return flat.view(torch.uint8)
    if flat.is_floating_point():
        size = flat.element_size()
        return flat.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[size])
    return flat


def input_checksums(args):
    """Per tensor argument, (sum, sum of squares) of its bytes read as integers, computed
    on its device in int64 (wrapping), in chunks. Two passes over the input: cheap next to
    any kernel that reads it.

    The sums stay on the device until every argument has been queued, then are read back
    at once. Read back chunk by chunk (two host syncs per 16M elements, about 200 for a
    6 GiB input) they left the GPU idle between chunks: in one evaluation of L1/19 (ReLU on
    6.4 GB) on an H100 the checks took 0.9 s of the reference's time and 1.0 s of the
    candidate's. The figures only ever meet figures of this same function (before and after
    a call), so where the int64 sums wrap does not matter."""
    pending = []
    for i, x in enumerate(args):
        if not isinstance(x, torch.Tensor) or x.is_complex():
            continue
        v = _checksum_view(x)
        s1 = torch.zeros((), dtype=torch.int64, device=v.device)
        s2 = torch.zeros((), dtype=torch.int64, device=v.device)
        for s in range(0, v.numel(), COMPARE_CHUNK):
            # copy=True: an int64 input would otherwise be returned as is and squared in place.
            c = v[s : s + COMPARE_CHUNK].to(torch.int64, copy=True)
            s1 += c.sum()
            s2 += c.mul_(c).sum()
            del c
        pending.append((i, s1, s2, tuple(x.shape), x.dtype))
    return {i: (int(s1), int(s2), shape, dtype) for i, s1, s2, shape, dtype in pending}


def device_kernels(prof):
    """[{name, us, stream}] of the device activities (kernels, memcpy, memset) a profiler
    recorded, in launch order, capped at MAX_PROFILED_KERNELS."""
    out = []
    results = getattr(prof, "kineto_results", None)
    events = results.events() if results is not None else []
    for e in events:
        try:
            dev = e.device_type()
        except Exception:  # noqa: BLE001
            continue
        if dev != torch.autograd.DeviceType.CUDA:
            continue
        try:
            us = e.duration_ns() / 1e3
        except AttributeError:
            us = float(e.duration_us())
        try:
            stream = int(e.device_resource_id())
        except (AttributeError, TypeError, ValueError):
            stream = None
        out.append({"name": _clean_text(e.name(), 1000), "us": us, "stream": stream})
        if len(out) >= MAX_PROFILED_KERNELS:
            break
    return out


def _default_stream_id(device):
    """CUPTI's id of the legacy default stream (7 on current drivers); None if unknown."""
    return 7 if device.type == "cuda" else None


def _changed_inputs(before, args):
    """Indices of the tensor arguments whose checksum differs from `before`'s."""
    after = input_checksums(args)
    return sorted(i for i in before if after.get(i) != before[i])


def _thread_idents():
    import threading

    return {t.ident for t in threading.enumerate()}


def _threads_started_since(idents):
    """Python threads alive now that were not in `idents`."""
    import threading

    return [t for t in threading.enumerate() if t.ident not in idents and t.is_alive()]


def _python_threads():
    import threading

    return threading.active_count()


def cuda_profiler():
    """A profiler of CUDA activities only (CUPTI through Kineto), as a context manager whose
    `kineto_results` lists them. torch.autograd's profiler, not its torch.profiler wrapper:
    the wrapper's first use imports about 880 modules (torch._dynamo, torch.distributed)
    and took 4.8-7 s of CPU on the H100 host, where this profiler's first start, CUPTI's
    initialisation included, took 0.17 s; both record the same device activities."""
    return torch.autograd.profiler.profile(use_device="cuda", use_kineto=True, use_cpu=False)


def _warm_cuda():
    """KBENCH_WARM_CUDA=1 (the harness's workers on a GPU, which it starts ahead): creates
    the CUDA context and initialises the profiler (CUPTI) now, before the worker is needed,
    so the candidate's one profiled call (integrity: which kernels it launches) does not pay
    it. Both roles do it, so both time their calls with the same profiler state. Returns the
    seconds it took (None when it failed: the profile then reports its own failure)."""
    t0 = time.perf_counter()
    try:
        x = torch.zeros(1024, device="cuda")
        with cuda_profiler():
            x.add_(1.0)
            _orig("torch.cuda.synchronize")()
        del x
        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 (a warm-up only)
        return None
    return time.perf_counter() - t0


class IntegrityCommands:
    """The Worker's probes around a candidate's calls, and the `profile` command."""

    def _probed_forward(self, args, forward_seed):
        """The candidate's forward with the integrity probes around it: free memory
        poisoned before, inputs checksummed before and after, Python threads counted, and
        the mode observations (modes.py) after."""
        stats_args = self._stats_probe_inputs(args)
        before = input_checksums(args)
        threads = _thread_idents()
        # Last before the call, so no temporary of the probes takes the poisoned blocks.
        if self.poison is not None:
            poison_free_memory(self.poison, self.device, POISON_CAP_BYTES)
        out, run_s = self._forward(self.model, args, forward_seed, "run")
        report = {
            "inputs_changed": _changed_inputs(before, args),
            "threads_started": 0,
            "output_changed_after_return": False,
            "tampered": tampered_names(),
        }
        started = _threads_started_since(threads)
        if started:
            # Threads the call left running: benign (an idle pool, a compiler's workers)
            # unless they are still computing the result. Fingerprint the outputs now, give
            # the threads THREAD_GRACE_S to finish, and look again.
            report["threads_started"] = len(started)
            try:
                outs = list(flatten_outputs(out))
            except WorkerError:
                outs = None
            if outs is not None:
                at_return = input_checksums(outs)
                deadline = time.perf_counter() + THREAD_GRACE_S
                for t in started:
                    t.join(max(0.0, deadline - time.perf_counter()))
                _sync(self.device)
                report["output_changed_after_return"] = bool(_changed_inputs(at_return, outs))
        # Last: the probe calls the model again (modes.py). The case's outputs are copied
        # first; the probe compares its call with the copies and the case returns them: a
        # CUDA graph's replay (torch.compile's max-autotune and reduce-overhead) takes back
        # the storage of the outputs it returned before, so reading them after the probe's
        # call raised (H200 max-autotune baselines, L1/33 BatchNorm).
        if stats_args is not None:
            out = copy_outputs(out)
            report["running_stats_read"] = self._running_stats_read(stats_args, out, forward_seed)
            del stats_args
        report.update(self.mode_observations())
        return out, run_s, report

    def _check_output_devices(self, outs):
        """Outputs must be on the worker's device: the host path would otherwise move a
        tensor from elsewhere without anyone noticing."""
        for k, t in enumerate(outs):
            if t.device.type != self.device.type or (
                t.device.type == "cuda" and t.device.index not in (None, self.device.index)
            ):
                raise WorkerError(
                    "bad_output", "run", f"output {k} is on {t.device}; the case runs on {self.device}",
                    integrity="non-plain-output",
                )

    def _take_poison(self, cmd):
        spec = cmd.get("poison")
        if spec is None:
            return
        ok = isinstance(spec, list) and all(
            isinstance(p, dict) and isinstance(p.get("dtype"), str) and _is_uint(p.get("nbytes")) for p in spec
        )
        if not ok:
            raise WorkerError("protocol", "run", f"field 'poison' must be a list of {{dtype, nbytes}}, got {spec!r}")
        self.poison = spec

    def cmd_profile(self, cmd, payload):
        """One call on fresh copies of the current case under the CUDA profiler: the
        device kernels it launched, for the harness to tell the candidate's own kernels
        from library ones. Measurements only."""
        if self.role != "candidate":
            raise WorkerError("protocol", "run", "profile is for the candidate role only")
        self._require_model("run")
        if self.case is None:
            raise WorkerError("protocol", "run", "no current case (send run_case first)")
        if self.device.type != "cuda":
            raise WorkerError("protocol", "run", "profile needs a CUDA device (kernel lists come from CUPTI)")
        forward_seed = _field(cmd, "forward_seed", int, "run")
        args = [x.clone() if isinstance(x, torch.Tensor) else x for x in self.case]
        try:
            with cuda_profiler() as prof:
                out, _ = self._forward(self.model, args, forward_seed, "run")
                del out
                _orig("torch.cuda.synchronize")(self.device)
            kernels = device_kernels(prof)
        except WorkerError:
            raise
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", "run", "profiling one call failed: ")
        del args
        self._release_device_memory()
        return {"type": "profile", "kernels": kernels, "default_stream": _default_stream_id(self.device)}, []
