#!/usr/bin/env python3
"""kbench worker: the Python executor behind the Rust harness.

    python3 -u worker.py reference|candidate

It loads, runs and times models; it never decides whether a kernel is correct. The wire
protocol is specified in PROTOCOL.md next to this file (embedded into the kbench binary
and written to a cache directory at run time, so this file imports nothing but the
standard library, torch and numpy).

Trust: the `reference` role only ever executes the problem file. The `candidate` role
executes hostile code in this very process, so nothing it reports is trusted by the
harness; the harness validates every frame and bounds every time from outside.
"""

import ctypes
import os
import sys

# Exit codes (PROTOCOL.md, "Exit codes").
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3
EXIT_PROTOCOL = 4

PROTOCOL_VERSION = 1
HELLO_MAGIC = "kbench-worker"
FRAME_MAGIC = b"KBF1"
# Same bound as the harness (record/src/protocol.rs MAX_HEADER_BYTES): headers are small JSON.
MAX_HEADER_BYTES = 16 << 20
# Error messages and tracebacks are clipped so a flood (a 10 MB compiler log) cannot
# bloat the run log; head and tail are kept since compilers put the first error first.
MAX_MESSAGE_CHARS = 20_000
MAX_TRACEBACK_CHARS = 20_000
# L2 flush size when the device does not report its L2 (KernelBench timing.py writes 256 MiB).
FALLBACK_FLUSH_BYTES = 256 << 20


def _take_protocol_fds():
    """Moves the protocol onto private fds before any other code can print.

    Afterwards fd 0 reads /dev/null and fd 1 is a copy of fd 2, so whatever the problem or
    the candidate writes (Python print, C printf, ninja/nvcc output of an extension build)
    lands on stderr, which the harness drains and truncates, and never on the protocol.
    os.dup returns non-inheritable fds, so build subprocesses do not get them either.
    """
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    # Python-level writes to sys.stdout go straight to stderr as well, with no buffer of
    # their own that could interleave oddly with stderr.
    sys.stdout = sys.stderr
    return proto_in, proto_out


# Light standard-library modules only: main() takes the fds before torch is imported.
import collections  # noqa: E402
import copy  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402

torch = None  # bound by main() once `import torch` succeeded
np = None


# ---------------------------------------------------------------------------------------
# Errors


class ProtocolViolation(Exception):
    """A malformed frame: the channel is corrupt, the worker exits with EXIT_PROTOCOL."""


class WorkerError(Exception):
    """An error that becomes one `{"type": "error"}` reply; the command loop goes on."""

    def __init__(self, kind, phase, message, tb=None, integrity=None):
        super().__init__(message)
        self.kind = kind
        self.phase = phase
        self.message = message
        self.tb = tb
        # An integrity probe's name for what went wrong (e.g. `non-plain-output`).
        self.integrity = integrity


def _clean_text(text, limit):
    """Clips `text` to about `limit` characters (head and tail) and makes it valid UTF-8.

    Lone surrogates (undecodable bytes from a compiler log) would make serde_json reject
    the whole header, so they are replaced.
    """
    text = str(text)
    if len(text) > limit:
        head = limit * 3 // 4
        tail = limit - head
        dropped = len(text) - head - tail
        text = f"{text[:head]}\n... [{dropped} characters clipped] ...\n{text[-tail:]}"
    return text.encode("utf-8", "replace").decode("utf-8")


def _describe(exc):
    """`Type: message`, the form every error message uses. A hostile exception whose
    __str__ raises must not take the command loop down with it."""
    try:
        msg = str(exc)
    except BaseException:  # noqa: BLE001
        msg = "<str() of the exception failed>"
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _format_tb(exc):
    """The formatted traceback, less the worker's own outer frames (the reader wants the
    candidate's frames; a bug in the worker itself still shows its innermost frame)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename == _THIS_FILE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


_THIS_FILE = _format_tb.__code__.co_filename


def _error_from(exc, kind, phase, prefix=""):
    return WorkerError(kind, phase, prefix + _describe(exc), _format_tb(exc))


def _error_header(kind, phase, message, tb=None):
    return {
        "type": "error",
        "kind": kind,
        "phase": phase,
        "message": _clean_text(message, MAX_MESSAGE_CHARS),
        "traceback": _clean_text(tb or "", MAX_TRACEBACK_CHARS),
    }


# ---------------------------------------------------------------------------------------
# Frames


def _physical_memory_bytes():
    """Upper bound for an incoming payload: a larger one cannot be honest."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


class Channel:
    """The private protocol streams: frames in, frames out."""

    def __init__(self, fd_in, fd_out):
        self._in = io.open(fd_in, "rb", buffering=1 << 16)
        # Unbuffered: a frame is written as a few large writes, never copied into a buffer.
        self._out = io.open(fd_out, "wb", buffering=0)
        self._max_payload = _physical_memory_bytes()

    def _read_into(self, buf, what):
        """Fills `buf` completely; returns False on EOF before the first byte."""
        view = memoryview(buf)
        filled = 0
        while filled < len(view):
            n = self._in.readinto(view[filled:])
            if not n:
                if filled == 0:
                    return False
                raise ProtocolViolation(f"channel closed inside the {what} of a frame")
            filled += n
        return True

    def read_frame(self):
        """Returns (header dict, payload bytearray), or None on a clean EOF between frames."""
        prefix = bytearray(16)
        if not self._read_into(prefix, "prefix"):
            return None
        if bytes(prefix[:4]) != FRAME_MAGIC:
            raise ProtocolViolation(f"bad frame magic {bytes(prefix[:4])!r}")
        header_len = int.from_bytes(prefix[4:8], "little")
        payload_len = int.from_bytes(prefix[8:16], "little")
        if header_len > MAX_HEADER_BYTES:
            raise ProtocolViolation(f"header of {header_len} bytes exceeds {MAX_HEADER_BYTES}")
        if payload_len > self._max_payload:
            raise ProtocolViolation(
                f"payload of {payload_len} bytes exceeds physical memory ({self._max_payload})"
            )
        raw_header = bytearray(header_len)
        if header_len and not self._read_into(raw_header, "header"):
            raise ProtocolViolation("channel closed inside the header of a frame")
        payload = bytearray(payload_len)
        if payload_len and not self._read_into(payload, "payload"):
            raise ProtocolViolation("channel closed inside the payload of a frame")
        try:
            header = json.loads(raw_header.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolViolation(f"header is not JSON: {exc}") from None
        if not isinstance(header, dict):
            raise ProtocolViolation("header is not a JSON object")
        header["tensors"] = _check_tensor_specs(header.get("tensors", []), payload_len)
        return header, payload

    def write_frame(self, header, tensors=()):
        self.send(self.encode(header, tensors))

    @staticmethod
    def encode(header, tensors=()):
        """Lays out one frame as a list of buffers. `tensors` is a list of (name, contiguous
        CPU tensor of a wire dtype); their bytes are views of tensor memory, not copies.
        Raises (nothing written yet) when the header cannot be serialised."""
        specs = []
        views = []
        offset = 0
        for name, t in tensors:
            view = _tensor_bytes(t)
            specs.append(
                {
                    "name": name,
                    "dtype": _wire_dtype(t),
                    "shape": list(t.shape),
                    "offset": offset,
                    "nbytes": view.nbytes,
                }
            )
            views.append(view)
            offset += view.nbytes
        if specs:
            header = dict(header, tensors=specs)
        raw = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
        if len(raw) > MAX_HEADER_BYTES:
            raise WorkerError("runtime_error", None, f"reply header of {len(raw)} bytes is too large")
        prefix = FRAME_MAGIC + len(raw).to_bytes(4, "little") + offset.to_bytes(8, "little")
        return [prefix + raw] + views

    def send(self, buffers):
        for buf in buffers:
            self._write_all(buf)

    def _write_all(self, data):
        view = memoryview(data)
        while len(view):
            n = self._out.write(view)
            if n is None:  # non-blocking fd; cannot happen on the pipes the harness makes
                n = 0
            view = view[n:]


def _check_tensor_specs(specs, payload_len):
    """Validates the header's tensor list against the payload (corrupt list = bad frame)."""
    if not isinstance(specs, list):
        raise ProtocolViolation("'tensors' is not a list")
    seen = set()
    checked = []
    for spec in specs:
        if not isinstance(spec, dict):
            raise ProtocolViolation("tensor spec is not an object")
        name = spec.get("name")
        dtype = spec.get("dtype")
        shape = spec.get("shape")
        offset = spec.get("offset")
        nbytes = spec.get("nbytes")
        if not isinstance(name, str) or name in seen:
            raise ProtocolViolation(f"tensor name {name!r} is missing or repeated")
        seen.add(name)
        if dtype not in _ITEMSIZE:
            raise ProtocolViolation(f"tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            raise ProtocolViolation(f"tensor {name!r}: bad shape {shape!r}")
        if not (_is_uint(offset) and _is_uint(nbytes)):
            raise ProtocolViolation(f"tensor {name!r}: bad offset/nbytes")
        numel = 1
        for d in shape:
            numel *= d
        if numel * _ITEMSIZE[dtype] != nbytes:
            raise ProtocolViolation(
                f"tensor {name!r}: {nbytes} bytes do not hold {dtype} of shape {shape}"
            )
        if offset + nbytes > payload_len:
            raise ProtocolViolation(
                f"tensor {name!r} lies outside the payload ({offset} + {nbytes} > {payload_len})"
            )
        checked.append(spec)
    return checked


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


# Wire dtype names (PROTOCOL.md) and their sizes in bytes.
_ITEMSIZE = {
    "f64": 8, "f32": 4, "f16": 2, "bf16": 2,
    "i64": 8, "i32": 4, "i16": 2, "i8": 1, "u8": 1, "bool": 1,
}  # fmt: skip
_WIRE_OF = {}  # torch dtype -> wire name, filled once torch is imported
_TORCH_OF = {}  # wire name -> torch dtype


def _init_dtype_tables():
    pairs = [
        (torch.float64, "f64"), (torch.float32, "f32"), (torch.float16, "f16"),
        (torch.bfloat16, "bf16"), (torch.int64, "i64"), (torch.int32, "i32"),
        (torch.int16, "i16"), (torch.int8, "i8"), (torch.uint8, "u8"), (torch.bool, "bool"),
    ]  # fmt: skip
    for dt, name in pairs:
        _WIRE_OF[dt] = name
        _TORCH_OF[name] = dt


def _wire_dtype(t):
    return _WIRE_OF[t.dtype]


def _tensor_bytes(t):
    """The raw little-endian bytes of a contiguous CPU tensor, as a memoryview (no copy).

    Viewing as uint8 first sidesteps numpy's missing bfloat16 and keeps bool as 0/1 bytes.
    """
    flat = t.reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return memoryview(flat.numpy())


def _tensor_from_payload(payload, spec, device):
    """Builds an owned tensor on `device` from a checked spec (copies out of the payload)."""
    dtype = spec["dtype"]
    shape = spec["shape"]
    numel = spec["nbytes"] // _ITEMSIZE[dtype]
    if numel == 0:
        return torch.empty(shape, dtype=_TORCH_OF[dtype], device=device)
    # Payload offsets need not be aligned for the dtype: take the bytes, copy them into
    # fresh (aligned, owned) memory on the device, then reinterpret. bool bytes are
    # normalised to 0/1.
    raw = torch.frombuffer(payload, dtype=torch.uint8, count=spec["nbytes"], offset=spec["offset"])
    if dtype == "bool":
        t = raw.ne(0).to(device)
    else:
        t = raw.to(device, copy=True).view(_TORCH_OF[dtype])
    return t.reshape(shape)


# ---------------------------------------------------------------------------------------
# Tensors: casting, output checks, host copies


def _precision_dtype(name):
    table = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if name not in table:
        raise WorkerError("protocol", "load", f"unknown precision {name!r} (fp32, fp16, bf16)")
    return table[name]


def _precision_name(dtype):
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, str(dtype))


def cast(x, device, dtype):
    """PROTOCOL.md casting rule: floating tensors to the working dtype and device; integer
    and bool tensors only to the device (KernelBench HEAD casts them too: its bug #151)."""
    if isinstance(x, torch.Tensor):
        if x.is_floating_point():
            return x.to(device=device, dtype=dtype)
        return x.to(device=device)
    return x


def _to_f64(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(torch.float64)
    return x


def _check_sendable(t, what):
    """Raises bad_output unless `t` is a plain dense tensor of a wire dtype. (A tensor
    subclass could compute lazily, or lie about its contents, so none is accepted.)"""
    flag = "non-plain-output"
    if type(t) is not torch.Tensor:
        raise WorkerError(
            "bad_output", None, f"{what} is a {type(t).__module__}.{type(t).__qualname__}, "
            "not a plain torch.Tensor", integrity=flag,
        )
    if t.layout != torch.strided:
        raise WorkerError("bad_output", None, f"{what} has layout {t.layout}; only dense tensors travel", integrity=flag)
    if t.is_nested:
        raise WorkerError("bad_output", None, f"{what} is a nested tensor", integrity=flag)
    if t.device.type == "meta":
        raise WorkerError("bad_output", None, f"{what} is a meta tensor (it holds no data)", integrity=flag)
    if t.dtype not in _WIRE_OF:
        raise WorkerError(
            "bad_output", None,
            f"{what} has dtype {t.dtype}, which kbench cannot compare "
            f"(supported: {', '.join(_ITEMSIZE)})",
        )


def _host_copy(t, snapshot):
    """Contiguous CPU copy for sending. With `snapshot`, a CPU tensor is copied too, so a
    later in-place write by the model cannot change what is sent."""
    t = t.detach().resolve_conj().resolve_neg()
    if snapshot or t.device.type != "cpu":
        return t.to("cpu", memory_format=torch.contiguous_format, copy=True)
    return t.contiguous()


def flatten_outputs(out):
    """forward's result as a flat list of checked tensors (tuples/lists flattened in order)."""
    flat = []

    def walk(x, path):
        if isinstance(x, (tuple, list)):
            for i, item in enumerate(x):
                walk(item, f"{path}[{i}]")
        else:
            flat.append((x, path))

    if isinstance(out, (tuple, list)):
        walk(out, "output")
    else:
        flat.append((out, "output"))
    must = "forward must return a torch.Tensor or a tuple/list of tensors"
    if not any(isinstance(x, torch.Tensor) for x, _ in flat):
        # Said plainly: a Python or numpy number is no tensor, whatever its dtype is called.
        if not flat:
            what = f"an empty {type(out).__name__}" if len(out) == 0 else f"a {type(out).__name__} of empty containers"
        elif isinstance(out, (tuple, list)):
            what = ", ".join(f"{_kind_of(x)} as {path}" for x, path in flat[:4]) + (", ..." if len(flat) > 4 else "")
        else:
            what = _kind_of(out)
        raise WorkerError("bad_output", None, f"forward returned no tensor, only {what}: {must}")
    for x, path in flat:
        if not isinstance(x, torch.Tensor):
            raise WorkerError("bad_output", None, f"forward returned {_kind_of(x)} as {path}, not a tensor: {must}")
        _check_sendable(x, path)
    return [x for x, _ in flat]


def _kind_of(x):
    """`a Python float (builtins.float)`: what a non-tensor value is, by its type's name."""
    if x is None:
        return "None"
    t = type(x)
    origin = "Python" if t.__module__ == "builtins" else t.__module__.split(".")[0]
    return f"a {origin} {t.__qualname__} ({t.__module__}.{t.__qualname__})"


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seed_all(seed):
    """torch.manual_seed seeds the CPU and every CUDA device. Python's and numpy's RNGs are
    seeded too so a get_inputs that uses them is still a function of the seed."""
    seed = int(seed)
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % (1 << 32))


# ---------------------------------------------------------------------------------------
# Timing: the one function both roles use (PROTOCOL.md, "time").


def time_calls(call, device, warmup, trials, flush_buffer, before_call, after_call=None):
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
        for i in range(warmup + trials):
            args = before_call(i)
            if flush_buffer is not None:
                flush_buffer.fill_(i & 0x7F)
            sync(device)
            record(start, stream)
            out = call(args)
            sync(device)
            record(end, stream)
            ev_sync(end)
            if i >= warmup:
                samples.append(float(elapsed(start, end)))
            if after_call is not None:
                after_call(i, args, out)
            del out, args
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


# ---------------------------------------------------------------------------------------
# Integrity probes (PROTOCOL.md, "Integrity"). Measurements only: the harness names flags.
# They run in the candidate's own process, so a candidate that patches torch can defeat
# them; they catch the tricks that do not go that far, and the harness's own checks (poison
# bits, wall clock, replayed outputs, the protocol's ids) do not depend on them.

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


def _malloc_reuses_freed_blocks():
    """CPU: large blocks come from the heap instead of fresh (zeroed) mmap pages and freed
    memory stays in the process, so a poisoned block freed before a call is what the
    candidate's next allocation of that size gets, as a GPU caching allocator would hand it.
    glibc only; elsewhere poisoning is best-effort."""
    try:
        libc = ctypes.CDLL(None)
        m_trim_threshold, m_mmap_threshold = -1, -3
        libc.mallopt(m_mmap_threshold, 32 << 20)  # glibc's maximum (HEAP_MAX_SIZE / 2)
        libc.mallopt(m_trim_threshold, 1 << 30)
    except (OSError, AttributeError):
        pass


def _poison_fill(nbytes, wire, device):
    """A tensor of `nbytes` (rounded up to whole elements) filled with the poison pattern
    of dtype `wire`."""
    if wire in POISON_BITS:
        idt = _POISON_INT_DTYPE[wire]
        n = -(-nbytes // torch.tensor([], dtype=idt).element_size())
        return torch.full((n,), POISON_BITS[wire], dtype=idt, device=device)
    return torch.full((nbytes,), 0xA5, dtype=torch.uint8, device=device)


def poison_free_memory(specs, device, cap_bytes):
    """Fills memory the candidate's next allocations will get with the poison pattern,
    then frees it. `specs`: [{"dtype": wire, "nbytes": n}], the reference's outputs.

    CUDA: besides blocks of the outputs' sizes, every inactive block of the caching
    allocator (from its snapshot; best-fit hands each size back exactly), up to
    `cap_bytes` in all. CPU: blocks of the outputs' sizes (see _malloc_reuses_freed_blocks)."""
    wire = next((s["dtype"] for s in specs if s.get("dtype") in POISON_BITS), "f32")
    held = []
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
            if 0 < n <= cap_bytes:
                # A little larger too: an aligned allocation (posix_memalign) asks malloc
                # for more than its size and would skip a freed block of exactly that size.
                for extra in (0, 128, 4096):
                    held.append(_poison_fill(n + extra, s.get("dtype"), device))
        _sync(device)
    except (RuntimeError, MemoryError):
        pass  # out of memory: poison what fitted
    del held


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
    any kernel that reads it."""
    sums = {}
    for i, x in enumerate(args):
        if not isinstance(x, torch.Tensor) or x.is_complex():
            continue
        v = _checksum_view(x)
        s1 = s2 = 0
        for s in range(0, v.numel(), COMPARE_CHUNK):
            # copy=True: an int64 input would otherwise be returned as is and squared in place.
            c = v[s : s + COMPARE_CHUNK].to(torch.int64, copy=True)
            s1 += int(c.sum())
            s2 += int(c.mul_(c).sum())
        sums[i] = (s1, s2, tuple(x.shape), x.dtype)
    return sums


def device_kernels(prof):
    """[{name, us, stream}] of the device activities (kernels, memcpy, memset) a profiler
    recorded, in launch order, capped at MAX_PROFILED_KERNELS."""
    out = []
    results = getattr(prof.profiler, "kineto_results", None)
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


# ---------------------------------------------------------------------------------------
# Case families (PROTOCOL.md, "Case families"): deterministic replacements of the values of
# a problem's floating-point inputs, same shapes, made for the working dtype.

FAMILIES = ("random", "signed", "nan-inf", "denormal", "fp16-saturation", "large", "small", "cancellation")
FP16_MAX = 65504.0
# How long a call's leftover threads get to finish before its outputs are fingerprinted again.
THREAD_GRACE_S = 0.5
# Device activities listed by `profile` (a candidate launching a million tiny kernels would
# otherwise make a multi-MB reply).
MAX_PROFILED_KERNELS = 4096
# Most free device memory poisoned before one candidate call (a memset at ~3 TB/s: ~3 ms).
POISON_CAP_BYTES = 8 << 30
# Elements per chunk when comparing outputs in float64 (128 MiB per float64 temporary).
COMPARE_CHUNK = 1 << 24


def _check_family(name, phase):
    if name is None:
        return "random"
    if not isinstance(name, str) or name not in FAMILIES:
        raise WorkerError(
            "protocol", phase, f"unknown case family {name!r} (known: {', '.join(FAMILIES)})"
        )
    return name


def _family_seed(seed, i):
    """The generator seed of input `i` of a case made from `seed`."""
    return (int(seed) * 1000003 + int(i)) % (1 << 63)


def _generator(device, seed):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


class _Draw:
    """float32 draws of one shape from one generator (in-place arithmetic throughout, so a
    multi-GB input costs about two temporaries of its size)."""

    def __init__(self, shape, device, g):
        self.shape, self.device, self.g = tuple(shape), device, g

    def rand(self):
        return torch.rand(self.shape, generator=self.g, device=self.device, dtype=torch.float32)

    def randn(self):
        return torch.randn(self.shape, generator=self.g, device=self.device, dtype=torch.float32)

    def sign(self):
        """-1 or +1, each with probability 1/2."""
        return self.rand().lt_(0.5).mul_(-2.0).add_(1.0)

    def log_uniform(self, a, b):
        """10**U(log10 a, log10 b), clamped into [a, b] against float32 rounding."""
        la, lb = math.log10(a), math.log10(b)
        return self.rand().mul_(lb - la).add_(la).mul_(math.log(10.0)).exp_().clamp_(a, b)

    def signed(self):
        v = self.randn()
        v.mul_(self.log_uniform(0.1, 10.0))
        return v


def _mantissa_bits(dtype):
    return int(round(-math.log2(torch.finfo(dtype).eps)))


def _smallest_normal(dtype):
    fi = torch.finfo(dtype)
    return float(getattr(fi, "smallest_normal", fi.tiny))


def _distinct_positions(n, k, g, device):
    """`k` distinct flat positions in [0, n), drawn with `g` (no permutation of n elements:
    a multi-GB input would need an int64 index per element)."""
    picked = []
    while len(picked) < k:
        for p in torch.randint(0, n, (2 * k,), generator=g, device=device).tolist():
            if p not in picked:
                picked.append(p)
                if len(picked) == k:
                    break
    return picked


def family_values(family, shape, device, seed, working_dtype):
    """The float32 values of `family` for a tensor of `shape` on `device`, drawn from a
    generator seeded with `seed`; made for `working_dtype` (denormal limits)."""
    shape = tuple(shape)
    g = _generator(device, seed)
    d = _Draw(shape, device, g)
    numel = math.prod(shape)
    if family == "signed":
        return d.signed()
    if family == "nan-inf":
        v = d.signed()
        flat = v.view(-1)
        specials = (float("nan"), float("inf"), float("-inf"))
        for p, value in zip(_distinct_positions(numel, min(3, numel), g, device), specials):
            flat[p] = value
        return v
    if family == "denormal":
        tiny = _smallest_normal(working_dtype)
        m = _mantissa_bits(working_dtype)
        # Subnormal for the working dtype: s * tiny * U(2^-m, 1), clamped into
        # [smallest subnormal, largest subnormal], both exact in the working dtype, so the
        # cast to it keeps every one of them nonzero and subnormal.
        sub = d.rand().mul_(1.0 - 2.0**-m).add_(2.0**-m).mul_(tiny)
        sub.clamp_(tiny * 2.0**-m, tiny * (1.0 - 2.0**-m))
        normal = d.log_uniform(tiny, 1.0)
        pick = d.rand().lt_(0.5).bool()
        v = torch.where(pick, sub, normal)
        del sub, normal, pick
        v.mul_(d.sign())
        return v
    if family == "fp16-saturation":
        v = d.rand().mul_(0.5).add_(0.5).mul_(FP16_MAX).clamp_(FP16_MAX / 2, FP16_MAX)
        v.mul_(d.sign())
        return v
    if family == "large":
        v = d.log_uniform(1e2, 1e5)
        v.mul_(d.sign())
        return v
    if family == "small":
        v = d.log_uniform(1e-8, 1e-5)
        v.mul_(d.sign())
        return v
    if family == "cancellation":
        n = shape[-1] if shape else 0
        if n < 2:
            return d.signed()
        rows = numel // n
        h = n // 2
        half = _Draw((rows, h), device, g)
        out = torch.empty((rows, n), dtype=torch.float32, device=device)
        v = half.log_uniform(1.0, 1e3)
        v.mul_(half.sign())
        out[:, :h] = v
        # The negatives, in a random order (one permutation for the whole tensor), each
        # with a relative noise of 1e-6: -v_j + v_j * 1e-6 * N(0, 1).
        perm = torch.randperm(h, generator=g, device=device)
        neg = v.index_select(1, perm)
        del v, perm
        noise = half.randn()
        neg.mul_(noise.mul_(1e-6).sub_(1.0))
        del noise
        out[:, h : 2 * h] = neg
        del neg
        if n % 2:
            out[:, 2 * h] = 0.0
        return out.view(shape)
    raise ValueError(f"no generator for family {family!r}")


def apply_family(raw, family, seed, working_dtype):
    """Replaces, in the list `raw` (inputs as get_inputs made them), the values of every
    floating-point tensor with `family`'s; returns how many it replaced."""
    if family == "random":
        return 0
    transformed = 0
    for i, x in enumerate(raw):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            shape, device = tuple(x.shape), x.device
            raw[i] = x = None  # the problem's own values die before the new ones are made
            raw[i] = family_values(family, shape, device, _family_seed(seed, i), working_dtype)
            transformed += 1
    return transformed


# ---------------------------------------------------------------------------------------
# Measurements (stability, audit): reductions in float64, chunk by chunk on the device of
# the first tensor, never deciding anything.


def _json_float(v):
    """A float JSON can carry: +-inf becomes +-the largest float (a NaN cannot occur here)."""
    if v is None:
        return None
    v = float(v)
    if math.isnan(v):
        return None
    if math.isinf(v):
        return math.copysign(sys.float_info.max, v)
    return v


def _flat(t):
    t = t.detach()
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


class Excess:
    """max over elements finite in both a and b of (|a - b| - rtol*|b|), the count of
    elements where a and b disagree about being finite (one NaN, an Inf against a finite
    value or against the opposite Inf), and the number of elements compared."""

    def __init__(self, rtol):
        self.rtol = float(rtol)
        self.max = None
        self.nan_mismatch = 0
        self.elements = 0

    def add(self, a, b):
        """Adds one pair of tensors; a shape mismatch counts every element as a mismatch."""
        if tuple(a.shape) != tuple(b.shape):
            n = max(a.numel(), b.numel())
            self.nan_mismatch += n
            self.elements += n
            return
        fa, fb = _flat(a), _flat(b)
        dev = fa.device
        n = fa.numel()
        self.elements += n
        for s in range(0, n, COMPARE_CHUNK):
            # copy=True: a float64 input (the float64 reference's outputs) would otherwise be
            # returned as is, and the in-place arithmetic below would overwrite it.
            x = fa[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
            y = fb[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
            both = torch.isfinite(x) & torch.isfinite(y)
            mism = (~both) & (x != y) & ~(torch.isnan(x) & torch.isnan(y))
            self.nan_mismatch += int(mism.sum())
            del mism
            d = (x - y).abs_().sub_(y.abs_().mul_(self.rtol))
            del x, y
            if bool(both.any()):
                m = float(d.masked_fill_(~both, -math.inf).max())
                self.max = m if self.max is None else max(self.max, m)
            del d, both

    def add_all(self, outs_a, outs_b):
        """Pairs of outputs by position; an output present on one side only is all mismatch."""
        for k in range(max(len(outs_a), len(outs_b))):
            if k < len(outs_a) and k < len(outs_b):
                self.add(outs_a[k], outs_b[k])
            else:
                n = (outs_a[k] if k < len(outs_a) else outs_b[k]).numel()
                self.nan_mismatch += n
                self.elements += n

    def json(self, elements=True):
        d = {"max_excess": _json_float(self.max), "nan_mismatch": self.nan_mismatch}
        if elements:
            d["elements"] = self.elements
        return d


def output_stats(o, rtol):
    """The audit's per-output measurements that need only the output itself."""
    flat = _flat(o)
    n = flat.numel()
    dev = flat.device
    max_abs = lo = hi = zeros = None
    nonfinite = 0

    def upd(cur, v, fn):
        return v if cur is None else fn(cur, v)

    for s in range(0, n, COMPARE_CHUNK):
        x = flat[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64)
        fin = torch.isfinite(x)
        nf = int((~fin).sum())
        nonfinite += nf
        if nf == x.numel():
            continue
        if nf:
            x = x[fin]
        ax = x.abs()
        max_abs = upd(max_abs, float(ax.max()), max)
        zeros = upd(zeros, float(ax.sub(ax.mul(rtol)).max()), max)
        lo = upd(lo, float(x.min()), min)
        hi = upd(hi, float(x.max()), max)
        del x, ax, fin
    constant = None
    if lo is not None:
        c = (lo + hi) / 2.0
        for s in range(0, n, COMPARE_CHUNK):
            x = flat[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64)
            fin = torch.isfinite(x)
            if not bool(fin.any()):
                continue
            x = x[fin]
            e = float((c - x).abs_().sub_(x.abs().mul_(rtol)).max())
            constant = upd(constant, e, max)
            del x, fin
    return {
        "shape": list(o.shape),
        "dtype": _wire_dtype(o),
        "elements": n,
        "max_abs": _json_float(max_abs),
        "nonfinite": nonfinite,
        "zeros_excess": _json_float(zeros),
        "constant_excess": _json_float(constant),
    }


def input_excess(x, o, rtol):
    """max over elements finite in both of (|x - o| - rtol*|o|), x taken in o's shape;
    None when x is not a floating tensor of o's element count (or nothing is finite)."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point()) or x.numel() != o.numel():
        return None
    fx, fo = _flat(x), _flat(o)
    dev = fo.device
    best = None
    for s in range(0, fo.numel(), COMPARE_CHUNK):
        # copy=True: float64 tensors would be returned as they are and overwritten below.
        a = fx[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
        b = fo[s : s + COMPARE_CHUNK].to(device=dev, dtype=torch.float64, copy=True)
        both = torch.isfinite(a) & torch.isfinite(b)
        if bool(both.any()):
            e = float((a - b).abs_().sub_(b.abs_().mul_(rtol)).masked_fill_(~both, -math.inf).max())
            best = e if best is None else max(best, e)
        del a, b, both
    return _json_float(best)


# ---------------------------------------------------------------------------------------
# Loading


def _new_namespace(path):
    """A fresh module `kbench_problem`, registered in sys.modules so dataclasses, typing,
    pickling and inspect (triton reads source through it) resolve the module by name."""
    module = types.ModuleType("kbench_problem")
    module.__file__ = path
    sys.modules["kbench_problem"] = module
    return module


def _read_source(path, label):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise WorkerError("environment", "load", f"cannot read the {label} file {path}: {_describe(exc)}")


def _is_extension_build_failure(exc):
    """torch.utils.cpp_extension raising (ninja/nvcc failed), anywhere in the cause chain."""
    seen = set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, subprocess.CalledProcessError):
            return True
        if isinstance(e, RuntimeError) and "Error building extension" in str(e):
            return True
        for frame in traceback.extract_tb(e.__traceback__):
            if frame.filename.replace("\\", "/").endswith("torch/utils/cpp_extension.py"):
                return True
        e = e.__cause__ or e.__context__
    return False


def _exec_candidate(module, path):
    """Executes the candidate into the problem's namespace; any failure is compile_error
    (KernelBench: compiled=False), with a message that names the candidate file."""
    source = _read_source(path, "candidate")
    module.__file__ = path
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise _error_from(exc, "compile_error", "load", f"syntax error in candidate {path}: ")
    try:
        exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        if _is_extension_build_failure(exc):
            what = "extension build failed"
        elif isinstance(exc, ImportError):
            what = "import failed"
        else:
            what = "exception"
        raise _error_from(exc, "compile_error", "load", f"{what} while executing candidate {path}: ")
    factory = module.__dict__.get("ModelNew")
    if factory is None:
        raise WorkerError("compile_error", "load", f"candidate {path} defines no ModelNew")
    if not callable(factory):
        raise WorkerError(
            "compile_error", "load",
            f"ModelNew in candidate {path} is a {type(factory).__qualname__}, not a class",
        )
    return factory


# ---------------------------------------------------------------------------------------
# Device I/O: harness-owned GPU buffers, mapped through CUDA IPC (PROTOCOL.md, "Device I/O")


class _Ipc:
    """cuIpcOpenMemHandle / cuIpcCloseMemHandle from the driver library, through ctypes.

    The harness allocates every buffer a worker fills or reads and sends its 64-byte IPC
    handle as 128 hex digits. A mapping lives only for the command that uses it."""

    _lib = None

    class Handle(ctypes.Structure):
        _fields_ = [("reserved", ctypes.c_char * 64)]

    @classmethod
    def lib(cls):
        if cls._lib is None:
            lib = ctypes.CDLL("libcuda.so.1")
            opener = getattr(lib, "cuIpcOpenMemHandle_v2", None) or lib.cuIpcOpenMemHandle
            opener.argtypes = [ctypes.POINTER(ctypes.c_uint64), cls.Handle, ctypes.c_uint]
            opener.restype = ctypes.c_int
            lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
            lib.cuIpcCloseMemHandle.restype = ctypes.c_int
            cls._open = opener
            cls._lib = lib
        return cls._lib

    @classmethod
    def open(cls, hex_handle, phase):
        cls.lib()
        if not (isinstance(hex_handle, str) and len(hex_handle) == 128):
            raise WorkerError("protocol", phase, f"bad IPC handle {hex_handle!r}")
        try:
            raw = bytes.fromhex(hex_handle)
        except ValueError:
            raise WorkerError("protocol", phase, "IPC handle is not hex")
        handle = cls.Handle()
        ctypes.memmove(ctypes.addressof(handle), raw, 64)
        ptr = ctypes.c_uint64(0)
        rc = cls._open(ctypes.byref(ptr), handle, 1)  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        if rc != 0:
            raise WorkerError("environment", phase, f"cuIpcOpenMemHandle failed with CUDA error {rc}")
        return ptr.value

    @classmethod
    def close(cls, ptr):
        cls.lib().cuIpcCloseMemHandle(ctypes.c_uint64(ptr))


class _DeviceBytes:
    """A raw device range as `__cuda_array_interface__`, so torch can view it without a copy."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3, "strides": None,
        }  # fmt: skip


class _Mapped:
    """Harness buffers mapped for one command; unmapped (after a device sync) on exit."""

    def __init__(self, device, phase):
        self.device = device
        self.phase = phase
        self.ptrs = []

    def __enter__(self):
        return self

    def view(self, spec):
        """The buffer of `spec` ({handle, dtype, shape, nbytes}) as a tensor of its dtype."""
        dtype, shape, nbytes = spec.get("dtype"), spec.get("shape"), spec.get("nbytes")
        if dtype not in _ITEMSIZE or not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            raise WorkerError("protocol", self.phase, f"bad device tensor spec {spec!r}")
        numel = 1
        for d in shape:
            numel *= d
        if not _is_uint(nbytes) or numel * _ITEMSIZE[dtype] != nbytes:
            raise WorkerError("protocol", self.phase, f"device tensor spec {spec!r}: size does not match shape")
        if nbytes == 0:
            return torch.empty(shape, dtype=_TORCH_OF[dtype], device=self.device)
        ptr = _Ipc.open(spec.get("handle"), self.phase)
        self.ptrs.append(ptr)
        raw = torch.as_tensor(_DeviceBytes(ptr, nbytes), device=self.device)
        return raw.view(_TORCH_OF[dtype]).view(shape)

    def __exit__(self, *exc):
        torch.cuda.synchronize(self.device)
        for ptr in self.ptrs:
            _Ipc.close(ptr)
        self.ptrs = []
        return False


def _device_spec(name, t):
    return {"name": name, "dtype": _wire_dtype(t), "shape": list(t.shape), "nbytes": t.numel() * t.element_size()}


# ---------------------------------------------------------------------------------------
# The worker


# ---------------------------------------------------------------------------------------
# Cost of a problem (PROTOCOL.md, "cost") and the profiling script mode ("worker.py
# profile SPEC").


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


def _torch_profile_events(prof, on_cuda, limit=40):
    """The profiler's table as plain rows: CUDA kernels (device time) on a GPU, aten ops'
    self CPU time on a CPU."""
    rows = []
    for e in prof.key_averages():
        if on_cuda:
            dev_type = getattr(e, "device_type", None)
            is_kernel = dev_type is not None and str(dev_type).endswith("CUDA")
            t = getattr(e, "self_device_time_total", None)
            if t is None:
                t = getattr(e, "self_cuda_time_total", 0.0)
            if not is_kernel or t <= 0:
                continue
            kind = "cuda_kernel"
        else:
            t = e.self_cpu_time_total
            if t <= 0:
                continue
            kind = "cpu_op"
        rows.append({"name": e.key, "kind": kind, "count": int(e.count), "total_us": float(t)})
    rows.sort(key=lambda r: -r["total_us"])
    return rows[:limit]


def profile_main(spec_path):
    """`worker.py profile SPEC`: a one-shot script, not a protocol session. Loads the problem
    (and the candidate, when `candidate_path` is given) as `load` does, makes inputs from
    `input_seed`, warms up, then runs `calls` forwards:

    - mode `ncu`: between cudaProfilerStart/Stop (torch.cuda.profiler) inside an NVTX range
      `kbench/profile`, so `ncu --profile-from-start off` captures only these calls;
    - mode `torch`: under torch.profiler (CUDA kernels' device times on a GPU, aten ops'
      CPU times on a CPU);
    - mode `cost`: no calls; the problem's cost (FLOPs and bytes) as the `cost` command;
    - mode `load`: load only (builds the candidate's extensions ahead of a profiled run).

    Writes one JSON object to `out_path`: the result, or `{"error": {...}}`."""
    with open(spec_path) as f:
        spec = json.load(f)
    out_path = spec["out_path"]

    def finish(obj, code):
        with open(out_path, "w") as f:
            json.dump(obj, f)
        return code

    _put_interpreter_bin_on_path()
    global torch, np
    try:
        import numpy as _np
        import torch as _torch
    except BaseException as exc:  # noqa: BLE001
        return finish({"error": {"kind": "environment", "message": f"cannot import torch and numpy with {sys.executable}: {_describe(exc)}"}}, EXIT_ENVIRONMENT)
    torch, np = _torch, _np
    _init_dtype_tables()
    mode = spec.get("mode", "torch")
    role = "candidate" if spec.get("candidate_path") else "reference"
    worker = Worker(role, None)
    load = {k: spec[k] for k in ("problem_path", "candidate_path", "device", "precision", "weight_seed", "build_dir") if spec.get(k) is not None}
    try:
        with torch.no_grad():
            loaded, _ = worker.cmd_load(load, b"")
            dev = worker.device
            result = {"mode": mode, "role": role, "device": str(dev), "device_name": loaded["device_name"], "torch": torch.__version__, "load_s": loaded["load_s"]}
            if mode == "load":
                return finish(result, EXIT_OK)
            seed_all(int(spec.get("input_seed", 0)))
            inputs = [cast(x, dev, worker.dtype) for x in worker.get_inputs()]
            if mode == "cost":
                result["cost"] = problem_cost(worker.model, inputs, int(spec.get("forward_seed", 0)), dev, spec.get("precision", "fp32"))
                return finish(result, EXIT_OK)
            calls = int(spec.get("calls", 10))
            for _ in range(int(spec.get("warmup", 3))):
                worker.model(*inputs)
            _sync(dev)
            # Host wall time per call, measured before any profiler is active (under ncu,
            # outside the captured range, so no kernel replay is included).
            t0 = time.perf_counter()
            for _ in range(calls):
                worker.model(*inputs)
            _sync(dev)
            result["wall_s_per_call"] = (time.perf_counter() - t0) / max(calls, 1)
            if mode == "ncu":
                if dev.type == "cuda":
                    torch.cuda.profiler.start()
                with torch.cuda.nvtx.range("kbench/profile") if dev.type == "cuda" else _null_context():
                    for _ in range(calls):
                        worker.model(*inputs)
                    _sync(dev)
                if dev.type == "cuda":
                    torch.cuda.profiler.stop()
            elif mode == "torch":
                from torch.profiler import ProfilerActivity, profile
                acts = [ProfilerActivity.CPU]
                if dev.type == "cuda":
                    acts.append(ProfilerActivity.CUDA)
                with profile(activities=acts) as prof:
                    for _ in range(calls):
                        worker.model(*inputs)
                    _sync(dev)
                result["events"] = _torch_profile_events(prof, dev.type == "cuda")
            else:
                return finish({"error": {"kind": "protocol", "message": f"unknown profile mode {mode!r} (ncu, torch, cost, load)"}}, EXIT_USAGE)
            result["calls"] = calls
            return finish(result, EXIT_OK)
    except WorkerError as exc:
        return finish({"error": {"kind": exc.kind, "phase": exc.phase, "message": exc.message, "traceback": exc.tb}}, 1)
    except (Exception, SystemExit) as exc:
        return finish({"error": {"kind": "runtime_error", "phase": "run", "message": _describe(exc), "traceback": _format_tb(exc)}}, 1)


class _null_context:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Worker:
    def __init__(self, role, channel):
        self.role = role
        self.channel = channel
        self.model = None
        self.model64 = None
        self.f64_error = None
        self.get_inputs = None
        self.device = None
        self.dtype = None
        self.num_threads = None
        self.case = None  # the current case: the argument list of the last make/run_case
        self.flush_buffer = None  # allocated once, on first use
        self.pending = None  # a device case made but not yet exported (name -> tensor)
        self.l2_bytes = None
        # The reference's outputs ({dtype, nbytes}) of the current case: the sizes the
        # integrity probes poison before a candidate call (run_case's `poison`).
        self.poison = None

    # -- helpers ------------------------------------------------------------------------

    def _require_model(self, phase):
        if self.model is None:
            raise WorkerError("protocol", phase, "no model is loaded (send a successful load first)")

    def _pin_threads(self):
        # A candidate may call torch.set_num_threads itself (or patch get_num_threads), so
        # every call is made after setting the count the harness asked for.
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)

    def _forward(self, model, args, seed, phase):
        self._pin_threads()
        seed_all(seed)
        t0 = time.perf_counter()
        try:
            out = model(*args)
            _sync(self.device)
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", phase)
        return out, time.perf_counter() - t0

    def _probed_forward(self, args, forward_seed):
        """The candidate's forward with the integrity probes around it: free memory
        poisoned before, inputs checksummed before and after, Python threads counted."""
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

    # -- commands -----------------------------------------------------------------------

    def cmd_load(self, cmd, payload):
        t0 = time.perf_counter()
        # A second load replaces the first (the harness normally uses one worker per model);
        # what the first froze (below) can be collected again.
        gc.unfreeze()
        self.model = self.model64 = self.case = None
        self.f64_error = None
        problem_path = _field(cmd, "problem_path", str, "load")
        candidate_path = cmd.get("candidate_path")
        if self.role == "reference" and candidate_path is not None:
            raise WorkerError("protocol", "load", "the reference role never loads candidate code")
        if self.role == "candidate" and not isinstance(candidate_path, str):
            raise WorkerError("protocol", "load", "load in the candidate role needs candidate_path")
        self.dtype = _precision_dtype(cmd.get("precision", "fp32"))
        self.device = self._parse_device(cmd.get("device", "cpu"))
        weight_seed = cmd.get("weight_seed", 42)
        if weight_seed is None:
            weight_seed = 42
        if not _is_int(weight_seed):
            raise WorkerError("protocol", "load", f"weight_seed must be an int, got {weight_seed!r}")
        want_f64 = bool(cmd.get("want_f64", False)) and self.role == "reference"
        num_threads = cmd.get("num_threads")
        if num_threads is not None and not (_is_int(num_threads) and num_threads > 0):
            raise WorkerError("protocol", "load", f"num_threads must be a positive int or null, got {num_threads!r}")
        self.num_threads = num_threads
        self._pin_threads()

        # The problem file is trusted; a failure there is the environment's (or the
        # suite's), not the candidate's.
        module = _new_namespace(problem_path)
        source = _read_source(problem_path, "problem")
        try:
            exec(compile(source, problem_path, "exec", dont_inherit=True), module.__dict__)
            get_inputs = module.__dict__["get_inputs"]
            get_init_inputs = module.__dict__["get_init_inputs"]
            # Captured now, before a candidate could rebind them in the shared namespace.
            seed_all(weight_seed)
            init = list(get_init_inputs())
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "environment", "load", f"problem file {problem_path} failed: ")
        self.get_inputs = get_inputs

        if self.role == "candidate":
            build_dir = cmd.get("build_dir")
            if isinstance(build_dir, str) and build_dir:
                os.makedirs(build_dir, exist_ok=True)
                os.environ["TORCH_EXTENSIONS_DIR"] = build_dir
            factory = _exec_candidate(module, candidate_path)
            name = "ModelNew"
        else:
            factory = module.__dict__.get("Model")
            if factory is None:
                raise WorkerError("environment", "load", f"problem file {problem_path} defines no Model")
            name = "Model"

        seed_all(weight_seed)
        try:
            model = factory(*init)
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", "load", f"constructing {name} failed: ")
        if want_f64:
            # Copied before the cast, so the float64 model holds the weights as constructed.
            try:
                self.model64 = copy.deepcopy(model).to(device=self.device, dtype=torch.float64)
            except (Exception, SystemExit) as exc:
                self.model64 = None
                self.f64_error = _clean_text(_describe(exc), MAX_MESSAGE_CHARS)
        try:
            self.model = model.to(device=self.device, dtype=self.dtype)
            _sync(self.device)
        except (Exception, SystemExit) as exc:
            self.model64 = None
            raise _error_from(exc, "runtime_error", "load", f"moving {name} to {self.device} failed: ")
        if self.model is None:
            raise WorkerError("runtime_error", "load", f"{name}.to(...) returned None")

        warm_s = None
        if cmd.get("warm_up") and self.role == "candidate":
            warm_s = self._warm_up(weight_seed)

        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            device_name = props.name
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0)) or None
        else:
            device_name = _cpu_name()
            self.l2_bytes = None
        # What is alive now (torch, the problem module, the model, an extension) lives as
        # long as the worker: frozen out of every later collection, so the collection in each
        # _release_device_memory scans only a case's objects. A full collection over torch
        # costs 40-75 ms, and a device case released memory 4-6 times (about 0.2 s a case).
        gc.collect()
        gc.freeze()
        return {
            "type": "loaded",
            "load_s": time.perf_counter() - t0,
            "device_name": device_name,
            "torch": torch.__version__,
            "l2_bytes": self.l2_bytes,
            "f64_available": self.model64 is not None,
            "f64_error": None if self.model64 is not None or not want_f64 else self.f64_error,
            "warm_s": warm_s,
            "integrity": {"tampered": tampered_names()},
        }, []

    def _warm_up(self, seed):
        """One untimed call on inputs from the problem's own get_inputs (seeded with the
        public weight seed, never the run's secret), so that work done on a model's first
        call (torch.compile's tracing, code generation and autotuning) falls in the load
        phase and its timeout instead of the first correctness case. A failure here is the
        mode's compile_error."""
        t0 = time.perf_counter()
        raw = None
        if self.device.type == "cuda":
            seed_all(seed)
            try:
                with torch.device(self.device):
                    raw = list(self.get_inputs())
            except (Exception, SystemExit):
                raw = None
        if raw is None:
            seed_all(seed)
            try:
                raw = list(self.get_inputs())
            except (Exception, SystemExit) as exc:
                raise _error_from(exc, "runtime_error", "load", "get_inputs failed: ")
        inputs = [cast(x, self.device, self.dtype) for x in raw]
        del raw
        try:
            seed_all(seed)
            out = self.model(*inputs)
            del out
            _sync(self.device)
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "compile_error", "load", "first call (compilation) failed: ")
        finally:
            del inputs
            self._release_device_memory()
        return time.perf_counter() - t0

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
            transformed = apply_family(raw, family, seed, self.dtype)
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
        # Drop the previous case first: on a GPU shared with a candidate process, whatever
        # this trusted process keeps is memory the candidate cannot have.
        self.case = None
        self.pending = None
        self._release_device_memory()
        device_io = bool(cmd.get("device_io")) and self.device.type == "cuda"
        t_case = time.perf_counter()
        inputs, inputs_on, inputs_s, transformed = self._make_inputs(seed, family, device_io)
        self.case = inputs
        if device_io:
            reply, tensors = self._make_device_case(inputs, forward_seed, inputs_on, inputs_s, stability_rtol)
            reply["family"] = family
            reply["transformed"] = transformed
            self._log_case_times(reply, t_case)
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
        # With stability measurements the outputs are copies of their own even on the CPU:
        # an output may alias an input (which is restored before the second run) or a
        # buffer the model reuses.
        outs = [_host_copy(t, snapshot=stability_rtol is not None) for t in flatten_outputs(out)]
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
        if f64_error is not None:
            reply["f64_error"] = _clean_text(f64_error, MAX_MESSAGE_CHARS)
        if stability_rtol is not None:
            self._measure_stability(
                reply, inputs, pristine, outs, outs64 if self.model64 is not None and f64_error is None else None,
                forward_seed, stability_rtol,
            )
        self._release_device_memory()
        self._log_case_times(reply, t_case)
        return reply, tensors

    @staticmethod
    def _log_case_times(reply, t_case):
        """One line per case in the worker's log: where making it went (inputs, float64
        forward, working forward, stability measurement)."""
        parts = [f"{k[:-2]} {reply[k]:.3f}s" for k in ("inputs_s", "f64_s", "run_s", "stability_s")
                 if isinstance(reply.get(k), (int, float))]
        print(f"kbench worker: make_case {reply.get('family', 'random')}: {time.perf_counter() - t_case:.3f}s "
              f"({', '.join(parts)})", file=sys.stderr, flush=True)

    def _restore_inputs(self, inputs, pristine):
        """Writes the pristine values (host or device copies, by input index) back into the
        case's tensors, which the model may have written to; a tensor that cannot be written
        (an expanded view) is replaced by a fresh copy."""
        for i, src in pristine.items():
            x = inputs[i]
            try:
                x.copy_(src)
            except RuntimeError:
                inputs[i] = src.to(device=x.device, copy=True)

    def _measure_stability(self, reply, inputs, pristine, outs, outs64, forward_seed, rtol):
        """Adds `stability` and `stability_s` to a make_case reply: a second working forward
        on the pristine inputs against the first (`repeat`), and the first against the
        float64 model (`f64`, None without one)."""
        t0 = time.perf_counter()
        self._restore_inputs(inputs, pristine)
        out2, _ = self._forward(self.model, inputs, forward_seed, "run")
        outs2 = flatten_outputs(out2)
        del out2
        repeat = Excess(rtol)
        repeat.add_all(outs2, outs)
        del outs2
        self._release_device_memory()
        f64 = None
        if outs64 is not None:
            m = Excess(rtol)
            m.add_all(outs, outs64)
            f64 = m.json()
        reply["stability"] = {"repeat": repeat.json(), "f64": f64}
        reply["stability_s"] = time.perf_counter() - t0

    def _release_device_memory(self):
        """Returns the caching allocator's free blocks to the driver. The reference and a
        candidate share one GPU: memory cached here (float64 copies, old outputs) would make a
        correct candidate fail with an out-of-memory error that is not its fault."""
        if self.device is not None and self.device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()

    def _make_device_case(self, inputs, forward_seed, inputs_on, inputs_s, stability_rtol=None):
        """make_case with device I/O: the case stays on the GPU, described by specs, until
        `export` copies it into the harness's buffers."""
        args, pending, specs = [], {}, []
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                _check_sendable(x, f"input {i}")
                name = f"in:{i}"
                # A snapshot before any forward: an in-place write by the model must not
                # change what candidates are given.
                pending[name] = x.detach().contiguous().clone()
                specs.append(_device_spec(name, pending[name]))
                args.append({"tensor": name})
            else:
                args.append({"value": _json_value(x, i)})
        sums = input_checksums(inputs)
        outs64, f64_error = [], None
        t64 = time.perf_counter()
        if self.model64 is not None:
            try:
                args64 = [_to_f64(x) for x in inputs]
                out64, _ = self._forward(self.model64, args64, forward_seed, "run")
                del args64
                outs64 = [t.detach().contiguous() for t in flatten_outputs(out64)]
                del out64
            except WorkerError as exc:
                f64_error = exc.message
            except (Exception, SystemExit) as exc:
                f64_error = _describe(exc)
        f64_s = time.perf_counter() - t64  # _forward synchronized the device
        out, run_s = self._forward(self.model, inputs, forward_seed, "run")
        changed = _changed_inputs(sums, inputs)
        if stability_rtol is None:
            outs = [t.detach().contiguous() for t in flatten_outputs(out)]
        else:
            # Copies of their own: an output may alias an input, which is restored before
            # the second run, or a buffer the model reuses.
            outs = [t.detach().clone(memory_format=torch.contiguous_format) for t in flatten_outputs(out)]
        del out
        self.poison = [{"dtype": _wire_dtype(t), "nbytes": t.numel() * t.element_size()} for t in outs]
        for k, t in enumerate(outs):
            pending[f"out:{k}"] = t
            specs.append(_device_spec(f"out:{k}", t))
        for k, t in enumerate(outs64):
            pending[f"out64:{k}"] = t
            specs.append(_device_spec(f"out64:{k}", t))
        self.pending = pending
        reply = {
            "type": "case",
            "inputs": args,
            "outputs": len(outs),
            "outputs_f64": len(outs64),
            "run_s": run_s,
            "f64_s": f64_s,
            "inputs_s": inputs_s,
            "inputs_on": inputs_on,
            "device_tensors": specs,
            "inputs_changed": changed,
        }
        if f64_error is not None:
            reply["f64_error"] = _clean_text(f64_error, MAX_MESSAGE_CHARS)
        if stability_rtol is not None:
            pristine = {i: pending[f"in:{i}"] for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)}
            has64 = self.model64 is not None and f64_error is None
            self._measure_stability(reply, inputs, pristine, outs, outs64 if has64 else None, forward_seed, stability_rtol)
        return reply, []

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

    def cmd_export(self, cmd, payload):
        """Copies the pending device case into the harness buffers named by `targets`."""
        if self.role != "reference":
            raise WorkerError("protocol", "run", "export is for the reference role only")
        if not self.pending:
            raise WorkerError("protocol", "run", "nothing to export (send make_case with device_io first)")
        targets = _field(cmd, "targets", list, "run")
        # "partial": drop only the exported tensors and keep the rest pending, so the harness
        # can move a case one tensor at a time (the GPU then holds the case plus one tensor,
        # not two copies of it: multi-GB level-1 cases did not fit twice on an 80 GB H100).
        partial = bool(cmd.get("partial", False))
        with _Mapped(self.device, "run") as m:
            for spec in targets:
                name = spec.get("name") if isinstance(spec, dict) else None
                t = self.pending.get(name)
                if t is None:
                    raise WorkerError("protocol", "run", f"export target {name!r} is not in the pending case")
                dst = m.view(spec)
                if dst.shape != t.shape or dst.dtype != t.dtype:
                    raise WorkerError("protocol", "run", f"export target {name!r} does not match the tensor")
                dst.copy_(t)
                if partial:
                    del dst, t
                    del self.pending[name]
        if not partial or not self.pending:
            self.pending = None
        self._release_device_memory()
        return {"type": "exported"}, []

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

    # -- audit --------------------------------------------------------------------------

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
        specs = {s["name"]: s for s in cmd["tensors"]}
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

    def _run_device_case(self, cmd, arg_specs, forward_seed):
        """run_case with device I/O: inputs are copied out of harness buffers into fresh
        tensors; each output goes into the harness's slot for it when its dtype and shape
        are the reference's (otherwise only its description is sent, which decides)."""
        if self.device.type != "cuda":
            raise WorkerError("protocol", "run", "device_inputs need a CUDA device")
        dev_in = _field(cmd, "device_inputs", dict, "run")
        slots = _field(cmd, "device_outputs", list, "run")
        args = []
        with _Mapped(self.device, "run") as m:
            for i, a in enumerate(arg_specs):
                if isinstance(a, dict) and len(a) == 1 and "tensor" in a:
                    spec = dev_in.get(a["tensor"])
                    if not isinstance(spec, dict):
                        raise WorkerError("protocol", "run", f"input {i} names tensor {a['tensor']!r}, not in device_inputs")
                    src = m.view(spec)
                    args.append(torch.empty_like(src).copy_(src))
                elif isinstance(a, dict) and len(a) == 1 and "value" in a:
                    args.append(a["value"])
                else:
                    raise WorkerError("protocol", "run", f"input {i} is neither {{tensor}} nor {{value}}: {a!r}")
        self.case = args
        out, run_s, probes = self._probed_forward(args, forward_seed)
        outs = flatten_outputs(out)
        del out
        described = []
        with _Mapped(self.device, "run") as m:
            for k, t in enumerate(outs):
                d = {"dtype": _wire_dtype(t), "shape": list(t.shape), "device": t.device.type, "copied": False}
                slot = slots[k] if k < len(slots) else None
                if (
                    isinstance(slot, dict)
                    and t.device == self.device
                    and d["dtype"] == slot.get("dtype")
                    and d["shape"] == slot.get("shape")
                ):
                    m.view(slot).copy_(t.detach())
                    d["copied"] = True
                described.append(d)
        del outs
        self._release_device_memory()
        return {
            "type": "outputs", "outputs": len(described), "run_s": run_s, "device_outputs": described,
            "integrity": probes,
        }, []

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
        fresh_inputs = bool(cmd.get("fresh_inputs", True))
        model, case = self.model, self.case
        probes = {"inputs_changed": set(), "threads_started": 0}
        checked = []  # (timed-call index, host copies of its outputs)
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
            return fresh

        def after_call(i, args, out):
            if i - warmup in check_calls:
                before = state.pop("sums")
                if self.role == "candidate":
                    probes["inputs_changed"].update(_changed_inputs(before, args))
                    flat = flatten_outputs(out)
                    checked.append((i - warmup, [_host_copy(t, snapshot=True) for t in flat]))
                else:
                    _changed_inputs(before, args)
            probes["threads_started"] = max(probes["threads_started"], _python_threads() - state["threads"])
        seed_all(forward_seed)
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
        gc.collect()
        gc.freeze()
        gc.disable()
        try:
            clock, samples = time_calls(
                lambda args: model(*args), self.device, warmup, trials, flush, before_call, after_call
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
        reply = {"type": "timing", "clock": clock, "samples_ms": samples}
        tensors = []
        if self.role == "candidate":
            reply["integrity"] = {
                "inputs_changed": sorted(probes["inputs_changed"]),
                "threads_started": probes["threads_started"],
                "tampered": tampered_names(),
            }
            reply["checked_calls"] = [j for j, _ in checked]
            for j, outs in checked:
                tensors += [(f"timed:{j}:out:{k}", t) for k, t in enumerate(outs)]
        return reply, tensors

    def cmd_profile(self, cmd, payload):
        """One call on fresh copies of the current case under torch.profiler (CUDA): the
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
        from torch.profiler import ProfilerActivity, profile

        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
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

    def _flush_buffer(self):
        if self.flush_buffer is None:
            nbytes = 2 * self.l2_bytes if self.l2_bytes else FALLBACK_FLUSH_BYTES
            nbytes = max(nbytes, 2 << 20)
            self.flush_buffer = torch.empty(nbytes // 4, dtype=torch.int32, device=self.device)
        return self.flush_buffer

    def _parse_device(self, name):
        try:
            device = torch.device(name)
        except (RuntimeError, TypeError) as exc:
            raise WorkerError("protocol", "load", f"bad device {name!r}: {exc}")
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise WorkerError("environment", "load", f"device {name} asked for, but CUDA is not available")
            index = device.index if device.index is not None else torch.cuda.current_device()
            if index >= torch.cuda.device_count():
                raise WorkerError("environment", "load", f"device {name} does not exist ({torch.cuda.device_count()} visible)")
            torch.cuda.set_device(index)
            return torch.device("cuda", index)
        if device.type != "cpu":
            raise WorkerError("protocol", "load", f"unsupported device {name!r} (cpu, cuda:N)")
        return device

    # -- loop ---------------------------------------------------------------------------

    PHASES = {
        "load": "load", "make_case": "run", "run_case": "run", "time": "time", "export": "run", "audit": "run",
        "profile": "run", "cost": "run",
    }  # fmt: skip

    def serve(self):
        handlers = {
            "load": self.cmd_load,
            "make_case": self.cmd_make_case,
            "run_case": self.cmd_run_case,
            "time": self.cmd_time,
            "export": self.cmd_export,
            "audit": self.cmd_audit,
            "cost": self.cmd_cost,
            "profile": self.cmd_profile,
        }
        while True:
            frame = self.channel.read_frame()
            if frame is None:
                return EXIT_OK  # the harness closed the channel: nothing left to answer
            cmd, payload = frame
            name = cmd.get("cmd")
            req_id = cmd.get("id")  # echoed so the harness can match answers to commands
            if name == "exit":
                self.channel.write_frame({"type": "bye", "id": req_id})
                return EXIT_OK
            handler = handlers.get(name)
            phase = self.PHASES.get(name)
            del frame
            if handler is None:
                header = _error_header("protocol", None, f"unknown command {name!r}")
                header["id"] = req_id
                buffers = Channel.encode(header)
            else:
                buffers = self._answer(handler, cmd, payload, phase)
            del payload
            self.channel.send(buffers)

    def _answer(self, handler, cmd, payload, phase):
        """Runs one command and encodes its reply; every failure becomes an error frame."""
        try:
            with torch.no_grad():
                reply, tensors = handler(cmd, payload)
            reply["id"] = cmd.get("id")
            return Channel.encode(reply, tensors)
        except WorkerError as exc:
            header = _error_header(exc.kind, exc.phase or phase, exc.message, exc.tb)
            if exc.integrity:
                header["integrity"] = exc.integrity
        except (Exception, SystemExit) as exc:
            header = _error_header("runtime_error", phase, _describe(exc), _format_tb(exc))
        header["id"] = cmd.get("id")
        return Channel.encode(header)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _field(cmd, key, kind, phase):
    v = cmd.get(key)
    ok = _is_int(v) if kind is int else isinstance(v, kind)
    if not ok:
        raise WorkerError("protocol", phase, f"field {key!r} must be {kind.__name__}, got {v!r}")
    return v


def _rtol_field(cmd, key, phase, required=True, default=None):
    """A non-negative finite number (int or float), or `default` when absent and optional."""
    v = cmd.get(key)
    if v is None and not required:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise WorkerError("protocol", phase, f"field {key!r} must be a non-negative number, got {v!r}")
    return float(v)


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


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


# ---------------------------------------------------------------------------------------
# Entry point


def _put_interpreter_bin_on_path():
    """Puts the interpreter's bin directory first on PATH, as activating its venv would.

    The harness starts `<venv>/bin/python worker.py` without activating anything, and
    torch.utils.cpp_extension finds `ninja` (installed in that venv) through PATH only.
    """
    bin_dir = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if bin_dir and bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = bin_dir + (os.pathsep + path if path else "")


def _warm_cuda():
    """KBENCH_WARM_CUDA=1 (the harness's workers on a GPU, which it starts ahead): creates
    the CUDA context and initialises the profiler (CUPTI) now, before the worker is needed.
    The candidate's one profiled call (integrity: which kernels it launches) cost 3-4 s a
    kernel on an H200, nearly all of it the profiler's first start in the process; done here
    it is hidden behind the problems before. Both roles do it, so both time their calls with
    the same profiler state. Returns the seconds it took (None when it failed: the profile
    then reports its own failure)."""
    t0 = time.perf_counter()
    try:
        from torch.profiler import ProfilerActivity, profile

        x = torch.zeros(1024, device="cuda")
        with profile(activities=[ProfilerActivity.CUDA]):
            x.add_(1.0)
            _orig("torch.cuda.synchronize")()
        del x
        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 (a warm-up only)
        return None
    return time.perf_counter() - t0


def _lower_priority():
    """KBENCH_NICE=N (set by the harness for its build-ahead jobs): this process and the
    compilers it starts run at niceness N, so a compile pipeline that fills every core takes
    only what the evaluation's own processes leave (an unprivileged process can never raise
    its priority back)."""
    n = os.environ.get("KBENCH_NICE")
    if n and n.isdigit() and hasattr(os, "nice"):
        try:
            os.nice(int(n))
        except OSError:
            pass


def main(argv):
    if len(argv) == 3 and argv[1] == "profile":
        return profile_main(argv[2])
    proto_in, proto_out = _take_protocol_fds()
    channel = Channel(proto_in, proto_out)
    role = argv[1] if len(argv) == 2 else None
    if role not in ("reference", "candidate"):
        channel.write_frame(_error_header("protocol", "start", "usage: worker.py reference|candidate"))
        return EXIT_USAGE

    _put_interpreter_bin_on_path()
    _lower_priority()
    global torch, np
    try:
        if sys.byteorder != "little":
            raise ImportError("the kbench wire format is little-endian; this host is big-endian")
        import numpy as _np
        import torch as _torch
    except BaseException as exc:  # noqa: BLE001 (any failure here means: no usable torch)
        header = _error_header(
            "environment", "start",
            f"cannot import torch and numpy with {sys.executable}: {_describe(exc)}",
            _format_tb(exc),
        )
        header["python_executable"] = sys.executable
        channel.write_frame(header)
        return EXIT_ENVIRONMENT
    torch, np = _torch, _np
    _init_dtype_tables()
    # Before any problem or candidate code: what the timing code calls, and what is watched.
    _capture_watched()
    _malloc_reuses_freed_blocks()

    try:
        cuda_available = bool(torch.cuda.is_available())
        device_count = int(torch.cuda.device_count()) if cuda_available else 0
    except Exception:  # noqa: BLE001 (a broken driver still gets a hello, with no GPUs)
        cuda_available, device_count = False, 0
    warm_s = _warm_cuda() if cuda_available and os.environ.get("KBENCH_WARM_CUDA") == "1" else None
    channel.write_frame(
        {
            "type": "hello",
            "magic": HELLO_MAGIC,
            "protocol": PROTOCOL_VERSION,
            "role": role,
            "pid": os.getpid(),
            "python": platform.python_version(),
            "python_executable": sys.executable,
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "numpy": np.__version__,
            "cuda_available": cuda_available,
            "device_count": device_count,
            "warm_cuda_s": warm_s,
        }
    )

    worker = Worker(role, channel)
    try:
        return worker.serve()
    except ProtocolViolation as exc:
        try:
            channel.write_frame(_error_header("protocol", None, f"bad frame: {exc}"))
        except OSError:
            pass
        return EXIT_PROTOCOL
    except (BrokenPipeError, ConnectionResetError):
        return EXIT_PROTOCOL  # the harness is gone


if __name__ == "__main__":
    try:
        code = main(sys.argv)
    except (BrokenPipeError, ConnectionResetError):
        code = EXIT_PROTOCOL  # the harness went away while we were writing
    except BaseException:  # noqa: BLE001 (a worker bug or a signal: report it, die non-zero)
        traceback.print_exc()
        code = 1
    if len(sys.argv) == 3 and sys.argv[1] == "profile":
        # Profiling script mode: a normal interpreter shutdown, so that the CUDA context is
        # torn down and a profiler injected into this process (ncu) finalises its data; the
        # result file is already written.
        sys.exit(code)
    try:
        sys.stderr.flush()
    finally:
        # os._exit: interpreter shutdown would run candidate atexit hooks and finalisers
        # that could print, hang or change the exit code; every answer is already sent.
        os._exit(code)
