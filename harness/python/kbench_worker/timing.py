"""Timing (PROTOCOL.md, "Timing"): the harness drives the calls one at a time. Between them
it freezes this worker's every process, has the trusted reference draw the next calls'
inputs (fresh values from the run's secret, several calls ahead) into source buffers only it
maps, copies a call's into buffers each side maps for the whole phase, flushes the GPU's L2 from its own context and measures each call's window on its
own clock. A worker only runs the calls: `time_open` maps the buffers, `timed_call` runs one
call (timed with the clocks captured at start-up: the claim the harness checks against its
own clock) and copies its outputs into the harness's slots, `stage_inputs` (reference)
draws calls' inputs, `time_close` unmaps. The code is the same for both roles."""

import gc
import mmap
import os
import sys
import threading
import time

import torch

from .cases import _json_value
from .integrity import _orig, tampered_names
from .ipc import _Mapped
from .protocol import _ITEMSIZE, TRACE, WorkerError, _error_from, _field, _is_uint
from .tensors import _TORCH_OF, _sync, _wire_dtype, flatten_outputs, seed_forward


class _Phase:
    """What one timing phase holds from `time_open` to `time_close`."""

    def __init__(self):
        self.mapped = None  # device buffers (_Mapped kept open)
        self.file = None  # host: the exchange file and its mapping
        self.mm = None
        self.source = []  # reference: per source set, tensors over the buffers a call's inputs are drawn into
        self.staged = []  # tensors over the staged inputs' buffers (a call's arguments)
        self.slots = []  # tensors over the output slots
        self.args = []  # the call's arguments: staged tensors and plain values
        self.arg_sets = []  # per staged set, the call's arguments over that set (args is set 0)
        self.layout = []  # per argument: ("staged", j) or ("value", json)
        self.hold = 0  # how many of the latest calls' outputs stay alive
        self.held = []  # those outputs, oldest first
        self.forward_seed = 0
        self.events = None
        self.arena = None  # CUDA: the placed pool every call of the phase allocates from (_Arena)
        self.placements = []  # the placements the probe tried: (offset, ms)
        self.old_affinity = None
        self.gc_was_enabled = False


class TimingCommands:
    """The Worker's timing commands."""

    def _require_phase(self):
        if self.gated is None:
            raise WorkerError("protocol", "time", "no timing phase is open (send time_open first)")
        return self.gated

    def _host_view(self, ph, spec, size):
        dtype, shape, nbytes, offset = spec.get("dtype"), spec.get("shape"), spec.get("nbytes"), spec.get("offset")
        if dtype not in _ITEMSIZE or not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            raise WorkerError("protocol", "time", f"bad exchange tensor spec {spec!r}")
        numel = 1
        for d in shape:
            numel *= d
        if not (_is_uint(nbytes) and _is_uint(offset)) or numel * _ITEMSIZE[dtype] != nbytes or offset + nbytes > size:
            raise WorkerError("protocol", "time", f"exchange tensor spec {spec!r} does not fit the file ({size} bytes)")
        if numel == 0:
            return torch.empty(shape, dtype=_TORCH_OF[dtype])
        return torch.frombuffer(ph.mm, dtype=_TORCH_OF[dtype], count=numel, offset=offset).view(shape)

    def cmd_time_open(self, cmd, payload):
        self._require_model("time")
        if self.gated is not None:
            self._close_phase()
        args = _field(cmd, "args", list, "time")
        staged = _field(cmd, "staged", list, "time")
        outputs = _field(cmd, "outputs", list, "time")
        ph = _Phase()
        ph.forward_seed = _field(cmd, "forward_seed", int, "time")
        try:
            if self.device.type == "cuda":
                ph.mapped = _Mapped(self.device, "time").__enter__()
                view = ph.mapped.view
            else:
                exchange = _field(cmd, "exchange", dict, "time")
                path = exchange.get("path")
                if not isinstance(path, str):
                    raise WorkerError("protocol", "time", "exchange needs a path")
                ph.file = open(path, "r+b")
                size = os.fstat(ph.file.fileno()).st_size
                ph.mm = mmap.mmap(ph.file.fileno(), size) if size else None

                def view(spec):
                    return self._host_view(ph, spec, size)

            ph.staged = [view(s) for s in staged]
            ph.slots = [view(s) for s in outputs]
            if self.role == "reference":
                source = _field(cmd, "source", list, "time")
                if not all(isinstance(s, list) and len(s) == len(staged) for s in source):
                    raise WorkerError("protocol", "time", "source must list sets of one buffer per staged input")
                ph.source = [[view(s) for s in one] for one in source]
            for i, a in enumerate(args):
                if isinstance(a, dict) and set(a) == {"staged"} and _is_uint(a["staged"]) and a["staged"] < len(ph.staged):
                    ph.layout.append(("staged", a["staged"]))
                    ph.args.append(ph.staged[a["staged"]])
                elif isinstance(a, dict) and set(a) == {"value"}:
                    ph.layout.append(("value", a["value"]))
                    ph.args.append(a["value"])
                else:
                    raise WorkerError("protocol", "time", f"argument {i} is neither {{staged}} nor {{value}}: {a!r}")
            ph.arg_sets = [ph.args]
            # Where a call's memory lies moves its time by a few % on some kernels (an H200:
            # one placement of a 3D transposed convolution's inputs or outputs in four or so
            # 4% slower), and a process keeps the placement it first gets. Further staged
            # sets, used in turn, and the latest outputs kept alive, so that the next call's
            # are allocated elsewhere, spread each side's calls over several placements.
            more = cmd.get("staged_sets") or []
            hold = cmd.get("hold_outputs", 0)
            if not isinstance(more, list) or not _is_uint(hold):
                raise WorkerError("protocol", "time", "staged_sets must list sets of specs and hold_outputs be a count")
            if (more or hold) and self.device.type != "cuda":
                raise WorkerError("protocol", "time", "staged_sets and hold_outputs are for a CUDA phase")
            for one in more:
                if not isinstance(one, list) or len(one) != len(staged):
                    raise WorkerError("protocol", "time", "each of staged_sets must list one buffer per staged input")
                views = [view(x) for x in one]
                if any(v.dtype != w.dtype or v.shape != w.shape for v, w in zip(views, ph.staged)):
                    raise WorkerError("protocol", "time", "staged_sets must be laid out as staged")
                ph.arg_sets.append([views[ref] if kind == "staged" else val
                                    for (kind, ref), val in zip(ph.layout, ph.args)])
            ph.hold = hold
        except BaseException:
            self.gated = ph
            self._close_phase()
            raise
        if self.device.type == "cuda":
            ph.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ph.arena = _placed_arena(self, ph)
        # "cpu": the core the harness keeps free for this GPU's timing; CUDA only, as a CPU
        # forward's threads must keep every core they were given.
        cpu = cmd.get("cpu")
        if cpu is not None and self.device.type == "cuda" and hasattr(os, "sched_setaffinity"):
            if not _is_uint(cpu):
                raise WorkerError("protocol", "time", f"cpu must be a core number, got {cpu!r}")
            try:
                ph.old_affinity = os.sched_getaffinity(0)
                os.sched_setaffinity(0, {cpu})
            except OSError:
                ph.old_affinity = None
        # What is alive now is frozen out of every later collection (the reference process
        # holds more Python objects than a candidate's, so full collections would cost the
        # sides differently); collections stay on between calls, and each timed call runs
        # with them off, as timeit does (a cycle a model makes is then freed after its call).
        ph.gc_was_enabled = gc.isenabled()
        gc.collect()
        gc.freeze()
        self.gated = ph
        if TRACE and ph.placements:
            print("placements", [(o >> 20, round(ms, 4)) for o, ms in ph.placements], file=sys.stderr)
        return {
            "type": "time_opened",
            "placements": [[o, ms] for o, ms in ph.placements],
            # Calls the probe ran on the current case (its footprint's call among them): they
            # warmed this side as the phase's warm-up calls would.
            "calls": 1 + PROBE_CALLS * len(ph.placements) if ph.placements else 0,
            # The thread that runs the timed calls, as this process's namespace numbers it:
            # the harness reads its scheduler's waits around each window.
            "tid": threading.get_native_id(),
        }, []

    def cmd_stage_inputs(self, cmd, payload):
        """Reference: draws the inputs of the next calls, one per seed of `seeds`, as a case
        of the `random` family is drawn (the problem's own get_inputs, on the GPU where it
        allows), and writes the j-th into source set j (the harness copies a set into each
        side's staged inputs inside its window). A draw whose layout differs from the case's
        (another shape, a different plain value) is an error: the harness then times nothing."""
        if self.role != "reference":
            raise WorkerError("protocol", "time", "stage_inputs is for the reference role only")
        ph = self._require_phase()
        seeds = _field(cmd, "seeds", list, "time")
        if not seeds or len(seeds) > len(ph.source) or not all(_is_uint(x) for x in seeds):
            raise WorkerError("protocol", "time", f"seeds must be 1 to {len(ph.source)} seeds (one per source set), got {seeds!r}")
        inputs_s, inputs_on = 0.0, []
        for j, seed in enumerate(seeds):
            s, on = self._stage_one(ph, ph.source[j], seed)
            inputs_s += s
            inputs_on = on
        _sync(self.device)
        return {"type": "staged", "inputs_s": inputs_s, "inputs_on": inputs_on}, []

    def _stage_one(self, ph, source, seed):
        """Draws one call's inputs with `seed` into the buffers of `source`."""
        inputs, inputs_on, inputs_s, _ = self._make_inputs(seed, "random", self.device.type == "cuda")
        if len(inputs) != len(ph.layout):
            raise WorkerError("runtime_error", "time", f"get_inputs() gave {len(inputs)} inputs with seed {seed}, the timed case has {len(ph.layout)}: the problem's inputs change with the seed, so its timed calls cannot get fresh values")
        for i, (x, (kind, ref)) in enumerate(zip(inputs, ph.layout)):
            if kind == "staged":
                dst = source[ref]
                if not isinstance(x, torch.Tensor) or x.dtype != dst.dtype or x.shape != dst.shape:
                    got = f"{_wire_dtype(x)} {list(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
                    raise WorkerError("runtime_error", "time", f"input {i} drawn with seed {seed} is {got}, the timed case's is {_wire_dtype(dst)} {list(dst.shape)}: the problem's inputs change with the seed, so its timed calls cannot get fresh values")
                dst.copy_(x)
            elif isinstance(x, torch.Tensor) or _json_value(x, i) != ref:
                raise WorkerError("runtime_error", "time", f"input {i} drawn with seed {seed} differs from the timed case's plain value {ref!r}: the problem's inputs change with the seed, so its timed calls cannot get fresh values")
        del inputs
        return inputs_s, inputs_on

    def cmd_timed_call(self, cmd, payload):
        """One call on the staged inputs, its outputs copied into the slots. `round_warmup` (a
        count) runs untimed calls on the worker's own current case instead, outputs dropped:
        they warm the host's launch path before a timed call, on other values."""
        ph = self._require_phase()
        opening = cmd.get("round_warmup", 0)
        if not _is_uint(opening):
            raise WorkerError("protocol", "time", f"round_warmup must be a count, got {opening!r}")
        model = self.model
        if opening:
            if self.case is None:
                raise WorkerError("protocol", "time", "opening calls need a current case")
            for _ in range(opening):
                self._pin_threads()
                seed_forward(ph.forward_seed, self.device)
                try:
                    with _allocating_from(ph.arena, self.device):
                        out = model(*self.case)
                        _sync(self.device)
                except (Exception, SystemExit) as exc:
                    raise _error_from(exc, "runtime_error", "time")
                del out
            return {"type": "opened", "calls": opening}, []
        which = cmd.get("staged_set", 0)
        if not _is_uint(which) or which >= len(ph.arg_sets):
            raise WorkerError("protocol", "time", f"staged_set must be below {len(ph.arg_sets)}, got {which!r}")
        tr = [time.perf_counter()]
        self._pin_threads()
        seed_forward(ph.forward_seed, self.device)
        args = ph.arg_sets[which]
        tr.append(time.perf_counter())
        gc.disable()
        pool = _allocating_from(ph.arena, self.device)
        pool.__enter__()
        try:
            if self.device.type == "cuda":
                sync = _orig("torch.cuda.synchronize")
                record = _orig("torch.cuda.Event.record")
                ev_sync = _orig("torch.cuda.Event.synchronize")
                elapsed = _orig("torch.cuda.Event.elapsed_time")
                start, end = ph.events
                stream = torch.cuda.default_stream(self.device)
                record(start, stream)
                out = model(*args)
                # Outputs are made contiguous inside the timed region, on both sides: what
                # then goes into the slots costs the same for any kernel.
                outs = [t.contiguous() for t in flatten_outputs(out)]
                sync(self.device)
                record(end, stream)
                ev_sync(end)
                sample, clock = float(elapsed(start, end)), "cuda_event"
            else:
                ns = _orig("time.perf_counter_ns")
                t0 = ns()
                out = model(*args)
                outs = [t.contiguous() for t in flatten_outputs(out)]
                t1 = ns()
                sample, clock = (t1 - t0) / 1e6, "perf_counter"
        except WorkerError as exc:
            exc.phase = exc.phase or "time"
            raise
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", "time")
        finally:
            if ph.gc_was_enabled:
                gc.enable()
            pool.__exit__(None, None, None)
        tr.append(time.perf_counter())
        described = []
        for k, t in enumerate(outs):
            d = {"dtype": _wire_dtype(t), "shape": list(t.shape), "device": t.device.type, "copied": False}
            slot = ph.slots[k] if k < len(ph.slots) else None
            if slot is not None and t.device == slot.device and t.dtype == slot.dtype and t.shape == slot.shape:
                slot.copy_(t.detach())
                d["copied"] = True
            described.append(d)
        t = slot = None
        if ph.hold and ph.arena is None:
            # (With an arena, each call's memory must lie where the probe found it fastest:
            # a held output would push the next call's elsewhere.)
            ph.held.append(outs)
            del ph.held[:-ph.hold]
        del out, outs
        _sync(self.device)
        tr.append(time.perf_counter())
        if TRACE:
            print("timed_call split", [round((b - a) * 1e6) for a, b in zip(tr, tr[1:])], file=sys.stderr)
        return {
            "type": "timed_call",
            "clock": clock,
            "sample_ms": sample,
            "outputs": described,
            "integrity": {"tampered": tampered_names()},
        }, []

    def cmd_release(self, cmd, payload):
        """Hands every free block of the caching allocator back to the driver (between the
        calls of a case too large for both sides to keep their blocks cached)."""
        self._release_device_memory(keep=0)
        return {"type": "released"}, []

    def cmd_time_close(self, cmd, payload):
        collected = False
        if self.gated is not None:
            self._close_phase()
            collected = True
        if cmd.get("release", True) is not False:
            self._release_device_memory(keep=0, collected=collected)
        # How many objects stay out of later collections: what the load froze (torch, the
        # model) must still be, or every collection of the stress cases after timing scans
        # all of torch again (0.12 s each on an H200's host, five a case: 4.6 s a problem).
        return {"type": "time_closed", "frozen_objects": gc.get_freeze_count()}, []

    def _close_phase(self):
        ph, self.gated = self.gated, None
        if ph.old_affinity is not None:
            try:
                os.sched_setaffinity(0, ph.old_affinity)
            except OSError:
                pass
        gc.unfreeze()
        ph.args = ph.arg_sets = ph.staged = ph.slots = ph.source = ph.held = None
        ph.events = None
        gc.collect()
        # The phase's pool goes once nothing of it is alive (what a candidate keeps from a
        # timed call keeps its blocks; they go back to the driver when it lets them go).
        ph.arena = None
        if ph.mapped is not None:
            ph.mapped.__exit__(None, None, None)
        if ph.mm is not None:
            try:
                ph.mm.close()
            except BufferError:
                pass  # a tensor over it is still alive (held by the candidate): the GC frees it
        if ph.file is not None:
            ph.file.close()
        # Thawed above so that the phase's own cycles are collected; what is left alive (the
        # load's frozen objects among it) is frozen again, as after the load.
        gc.freeze()



# Where a timed call's memory lies moves some kernels' time by a third: on an H200, cuDNN's
# indexed dgrad kernel of a 3D transposed convolution (KernelBench L2/77) takes 4.9 or 6.5 ms
# a call by which 2 MiB pages its temporaries start on, L1/68 33.6 or 35.8 ms. Which
# placements are fast differs between processes (the same offsets from a 256 MiB boundary
# were fast in one process and slow in the next: the physical pages behind them decide), so
# no layout both sides could agree on makes them equal, and each side's allocator history
# drew it a state of its own (self-speedups of 0.77 and 1.31 on the same code). Each side
# therefore tries PLACEMENTS placements of its calls' memory, PLACEMENT_STEP apart in a pool
# of the phase's own, and keeps its fastest for every call of the phase: both sides are
# timed in their best state. The probe only chooses where memory lies; a candidate that
# games it gains nothing it could not get by allocating where it likes.
ARENA_ALIGN = 256 << 20
PLACEMENT_STEP = 2 << 20
PLACEMENTS = 12
# The probe stops early once it has spent this long (a placement at least): a call of over
# half a second gets one placement, a 40 ms call all of them.
PROBE_BUDGET_S = 1.0
# Calls the probe times at each placement (their least counts: the states differ by 2-30%,
# more than one call's noise).
PROBE_CALLS = 3
# The arena: twice one call's footprint plus the placements' span, at least ARENA_MIN and
# at most a quarter of the device's free memory.
ARENA_MIN = 64 << 20
# A block under this size goes to the allocator's small pool, not the arena's segment.
LARGE_BLOCK = 1 << 20


class _Arena:
    """One pool segment whose free space begins on an ARENA_ALIGN boundary (`shim` keeps the
    bytes before it) and then `offset` bytes further (`filler`)."""

    def __init__(self, pool, shim, device):
        self.pool, self.shim, self.device = pool, shim, device
        self.filler = None
        self.offset = 0

    def place(self, offset):
        """Moves the next large block to `offset` past the boundary; everything taken from
        the pool after the shim must have been freed."""
        self.filler = None
        self.offset = offset
        if offset:
            with torch.cuda.use_mem_pool(self.pool, self.device):
                self.filler = torch.empty(offset, dtype=torch.uint8, device=self.device)


def _footprint(worker, ph):
    """Bytes of the segments one untimed call on the worker's current case takes in a pool
    of its own."""
    probe = torch.cuda.MemPool()
    worker._pin_threads()
    seed_forward(ph.forward_seed, worker.device)
    with torch.cuda.use_mem_pool(probe, worker.device):
        out = worker.model(*worker.case)
        _sync(worker.device)
        del out
    size = sum(seg["total_size"] for seg in torch.cuda.memory_snapshot()
               if tuple(seg.get("segment_pool_id", ())) == tuple(probe.id))
    del probe
    torch.cuda.empty_cache()
    return size


def _placed_arena(worker, ph):
    """The phase's arena at its fastest placement (the offsets tried and their times in
    `ph.placements`), or None where this torch has no pools, the worker no current case or
    the device no room."""
    if not (hasattr(torch.cuda, "MemPool") and hasattr(torch.cuda, "use_mem_pool")) or worker.case is None:
        return None
    try:
        footprint = _footprint(worker, ph)
        free, _ = torch.cuda.mem_get_info(worker.device)
        size = max(ARENA_MIN, 2 * footprint) + ARENA_ALIGN + PLACEMENTS * PLACEMENT_STEP
        if size > free // 4:
            return None
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool, worker.device):
            block = torch.empty(size, dtype=torch.uint8, device=worker.device)
            gap = -block.data_ptr() % ARENA_ALIGN
            del block
            if 0 < gap < LARGE_BLOCK:
                gap += ARENA_ALIGN
            shim = torch.empty(gap, dtype=torch.uint8, device=worker.device) if gap else None
        arena = _Arena(pool, shim, worker.device)
    except (RuntimeError, torch.cuda.OutOfMemoryError):
        torch.cuda.empty_cache()
        return None
    except (Exception, SystemExit) as exc:
        raise _error_from(exc, "runtime_error", "time")
    try:
        ph.placements = _probe_placements(worker, ph, arena)
    except (Exception, SystemExit) as exc:
        raise _error_from(exc, "runtime_error", "time")
    best = min(ph.placements, key=lambda p: p[1])[0]
    arena.place(best)
    return arena


def _probe_placements(worker, ph, arena):
    """[(offset, ms)]: each placement tried, with the least of PROBE_CALLS calls there."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stream = torch.cuda.default_stream(worker.device)
    began = time.perf_counter()
    tried = []
    for k in range(PLACEMENTS):
        if k and time.perf_counter() - began > PROBE_BUDGET_S:
            break
        arena.place(k * PLACEMENT_STEP)
        times = []
        with torch.cuda.use_mem_pool(arena.pool, worker.device):
            for _ in range(PROBE_CALLS):
                worker._pin_threads()
                seed_forward(ph.forward_seed, worker.device)
                start.record(stream)
                out = worker.model(*worker.case)
                end.record(stream)
                end.synchronize()
                del out
                times.append(start.elapsed_time(end))
        tried.append((k * PLACEMENT_STEP, min(times)))
    return tried


class _allocating_from:
    """This thread's device allocations go to `arena`'s pool inside the block (nothing
    changes where arena is None). A class, not contextlib: cmd_timed_call enters it by hand
    around its try block."""

    def __init__(self, arena, device):
        self.inner = torch.cuda.use_mem_pool(arena.pool, device) if arena is not None else None

    def __enter__(self):
        if self.inner is not None:
            self.inner.__enter__()
        return self

    def __exit__(self, *exc):
        if self.inner is not None:
            self.inner.__exit__(*exc)
        return False
