"""The wire protocol (PROTOCOL.md): exit codes, errors and their replies, frames, and the
fields of commands.

Standard library only: the entry point uses it before torch is imported, so a worker that
cannot import torch still answers with an error frame.
"""

import contextlib
import io
import json
import linecache
import math
import os
import time
import traceback

# Exit codes (PROTOCOL.md, "Exit codes").
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3
EXIT_PROTOCOL = 4

# 2: payloads are safetensors buffers (1 listed tensors in the JSON header).
PROTOCOL_VERSION = 2
HELLO_MAGIC = "kbench-worker"
FRAME_MAGIC = b"KBF1"
# Same bound as the harness (record/src/protocol.rs MAX_HEADER_BYTES): headers are small JSON.
MAX_HEADER_BYTES = 16 << 20
# Error messages and tracebacks are clipped so a flood (a 10 MB compiler log) cannot
# bloat the run log; head and tail are kept since compilers put the first error first.
# KBENCH_WORKER_TRACE=1: one line per command in the worker's log (when it began, how long
# it took; server.py) and, on a GPU, one per `time` command splitting its seconds
# (timing.py), for finding where an evaluation's time goes.
TRACE = os.environ.get("KBENCH_WORKER_TRACE") == "1"
# With TRACE, the calls and host seconds of the driver-heavy steps within the current command
# (the IPC mappings and the sync before unmapping in ipc.py, the collection and the
# allocator's release in session.py), written after the command's line (server.py) and
# reset: bench/throughput/worker_trace.py sums them per command.
DRIVER_SPLIT = {}


@contextlib.contextmanager
def driver_step(part):
    """Counts the block's calls and host seconds under `part` in DRIVER_SPLIT (TRACE only)."""
    if not TRACE:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        n, s = DRIVER_SPLIT.get(part, (0, 0.0))
        DRIVER_SPLIT[part] = (n + 1, s + time.perf_counter() - t0)


def driver_split_line(role, command):
    """The trace line of the current command's driver steps (None when there were none), and
    the count reset for the next command."""
    if not DRIVER_SPLIT:
        return None
    parts = ", ".join(f"{k} {n} {s:.4f}" for k, (n, s) in sorted(DRIVER_SPLIT.items()))
    DRIVER_SPLIT.clear()
    return f"kbench worker: driver split ({role} {command}): {parts} (calls, s)"

MAX_MESSAGE_CHARS = 20_000
MAX_TRACEBACK_CHARS = 20_000


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
    while tb is not None and tb.tb_next is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == _THIS_DIR:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


# The worker's own frames: those of a file in this folder, where every module of the package is.
_THIS_DIR = os.path.dirname(_format_tb.__code__.co_filename)


def _cache_own_source():
    """Reads the source of every module of the package into linecache now, once torch is
    imported and before any command runs.

    Without a CUDA context, every torch.manual_seed (seed_all) formats the stack (torch.cuda
    queues the seed with the traceback), and linecache reads a frame's file the first time
    it sees it. The one-file worker's source was read by its first load; a module first on
    the stack in a later command would be read there, between the integrity probes'
    poisoning of free memory and the candidate's call, and its read buffer would take the
    poisoned block. Read now, no command reads a file of its own."""
    for name in sorted(os.listdir(_THIS_DIR)):
        if name.endswith(".py"):
            linecache.getlines(os.path.join(_THIS_DIR, name))


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
        header["tensors"] = _read_safetensors_index(payload)
        return header, payload

    def write_frame(self, header, tensors=()):
        self.send(self.encode(header, tensors))

    @staticmethod
    def encode(header, tensors=()):
        """Lays out one frame as a list of buffers. `tensors` is a list of (name, contiguous
        CPU tensor of a wire dtype), sent as one safetensors buffer whose data are views of
        tensor memory, not copies. Raises (nothing written yet) when the header cannot be
        serialised."""
        views = []
        if tensors:
            # Here, not at the top: frames without tensors (hello, errors) are encoded
            # before torch is imported, and tensors.py imports it.
            from .tensors import _tensor_bytes, _wire_dtype

            index = {}
            offset = 0
            for name, t in tensors:
                view = _tensor_bytes(t)
                index[name] = {
                    "dtype": _ST_DTYPE[_wire_dtype(t)],
                    "shape": list(t.shape),
                    "data_offsets": [offset, offset + view.nbytes],
                }
                views.append(view)
                offset += view.nbytes
            # The safetensors layout written here rather than by `safetensors.serialize`,
            # which copies every tensor into one bytes object: outputs can be gigabytes.
            # The harness parses it with the safetensors crate, and test_protocol checks
            # this writer against the safetensors package.
            st_header = json.dumps(index, separators=(",", ":")).encode("utf-8")
            st_header += b" " * (-len(st_header) % 8)
            views.insert(0, len(st_header).to_bytes(8, "little") + st_header)
        raw = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
        if len(raw) > MAX_HEADER_BYTES:
            raise WorkerError("runtime_error", None, f"reply header of {len(raw)} bytes is too large")
        payload_len = sum(memoryview(v).nbytes for v in views)
        prefix = FRAME_MAGIC + len(raw).to_bytes(4, "little") + payload_len.to_bytes(8, "little")
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


def _read_safetensors_index(payload):
    """The tensors of a safetensors payload as specs {name, dtype, shape, offset, nbytes}
    (`offset` from the start of the payload), checked against it; [] for an empty payload.

    Parsed here rather than by `safetensors.deserialize`, which copies every tensor into a
    bytes object (inputs can be gigabytes), and with the standard library only (this module
    runs before torch is imported). The payload comes from the harness; a malformed one is
    a corrupt channel."""
    total = len(payload)
    if total == 0:
        return []
    if total < 8:
        raise ProtocolViolation(f"payload of {total} bytes is too short for a safetensors header")
    n = int.from_bytes(payload[:8], "little")
    if n > MAX_HEADER_BYTES or 8 + n > total:
        raise ProtocolViolation(f"safetensors header of {n} bytes does not fit the payload ({total})")
    try:
        index = json.loads(bytes(payload[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolViolation(f"safetensors header is not JSON: {exc}") from None
    if not isinstance(index, dict):
        raise ProtocolViolation("safetensors header is not a JSON object")
    index.pop("__metadata__", None)
    specs = []
    for name, info in index.items():
        if not isinstance(info, dict):
            raise ProtocolViolation(f"tensor {name!r}: entry is not an object")
        dtype = _WIRE_OF_ST.get(info.get("dtype"))
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if dtype is None:
            raise ProtocolViolation(f"tensor {name!r}: unknown dtype {info.get('dtype')!r}")
        if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            raise ProtocolViolation(f"tensor {name!r}: bad shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_uint(o) for o in offsets)):
            raise ProtocolViolation(f"tensor {name!r}: bad data_offsets {offsets!r}")
        numel = math.prod(shape)
        nbytes = offsets[1] - offsets[0]
        if nbytes != numel * _ITEMSIZE[dtype]:
            raise ProtocolViolation(f"tensor {name!r}: {nbytes} bytes do not hold {dtype} of shape {shape}")
        specs.append({"name": name, "dtype": dtype, "shape": shape, "offset": 8 + n + offsets[0], "nbytes": nbytes})
    # The data must be covered exactly once, back to back (as the format requires).
    end = 8 + n
    for spec in sorted(specs, key=lambda s: s["offset"]):
        if spec["offset"] != end:
            raise ProtocolViolation(f"tensor {spec['name']!r} does not start where the previous one ends")
        end += spec["nbytes"]
    if end != total:
        raise ProtocolViolation(f"safetensors data end at {end}, the payload at {total}")
    return specs


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


# Wire dtype names (PROTOCOL.md) and their sizes in bytes.
_ITEMSIZE = {
    "f64": 8, "f32": 4, "f16": 2, "bf16": 2,
    "i64": 8, "i32": 4, "i16": 2, "i8": 1, "u8": 1, "bool": 1,
}  # fmt: skip
# The same dtypes as safetensors names them.
_ST_DTYPE = {"bf16": "BF16", "bool": "BOOL"}
_ST_DTYPE.update({k: k.upper() for k in _ITEMSIZE if k not in _ST_DTYPE})
_WIRE_OF_ST = {v: k for k, v in _ST_DTYPE.items()}


# ---------------------------------------------------------------------------------------
# Fields of commands


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


# ---------------------------------------------------------------------------------------
# Commands and their fields (PROTOCOL.md, "Commands"): the same commands and fields as the
# harness's `Command` enum (harness/record/src/protocol/command.rs, whose test reads this
# table: keep it JSON, double quotes and no trailing commas). Every frame may also carry
# `cmd` and `id`, and the channel adds `tensors` (the payload's index) to every one it reads.

# fmt: off
COMMANDS = {
    "load": {"required": ["problem_path"], "optional": ["candidate_path", "device", "precision", "model_mode", "weight_seed", "want_f64", "cpu_threads", "build_dir", "warm_up", "gate_device_work"]},
    "build": {"required": ["problem_path", "candidate_path", "build_dir"], "optional": ["weight_seed", "forward_s"]},
    "make_case": {"required": ["seed", "forward_seed"], "optional": ["device_io", "family", "stability_rtol", "probe_rtol", "probe_atol"]},
    "run_case": {"required": ["forward_seed", "inputs"], "optional": ["poison", "device_inputs", "device_outputs", "release_case", "return_inputs"]},
    "eval_case": {"required": ["forward_seed"], "optional": ["seed", "inputs"]},
    "export": {"required": ["targets"], "optional": ["partial", "drop_case"]},
    "audit": {"required": ["seed", "forward_seed", "families", "rtol"], "optional": ["max_weights", "max_rows"]},
    "cost": {"required": ["seed", "forward_seed"], "optional": []},
    "profile": {"required": ["forward_seed"], "optional": []},
    "time_as": {"required": ["method", "timed_calls", "seed"], "optional": ["budget_s"]},
    "time_open": {"required": ["args", "forward_seed", "staged", "outputs"], "optional": ["source", "exchange", "cpu", "staged_sets", "hold_outputs"]},
    "stage_inputs": {"required": ["seeds"], "optional": []},
    "timed_call": {"required": [], "optional": ["round_warmup", "staged_set"]},
    "release": {"required": [], "optional": []},
    "time_close": {"required": [], "optional": ["release"]},
    "proceed": {"required": [], "optional": []},
    "exit": {"required": [], "optional": []}
}
# fmt: on
_ENVELOPE = ("cmd", "id", "tensors")


def check_command(cmd, phase):
    """Raises a `protocol` WorkerError (phase `phase`) for an unknown command, a field the
    command does not have, or a required field missing; the fields' values are the
    handlers' to check."""
    name = cmd.get("cmd")
    entry = COMMANDS.get(name) if isinstance(name, str) else None
    if entry is None:
        raise WorkerError("protocol", None, f"unknown command {name!r}")
    unknown = sorted(k for k in cmd if k not in _ENVELOPE and k not in entry["required"] and k not in entry["optional"])
    if unknown:
        raise WorkerError("protocol", phase, f"{name}: unknown field(s) {', '.join(map(repr, unknown))}")
    missing = [k for k in entry["required"] if k not in cmd]
    if missing:
        raise WorkerError("protocol", phase, f"{name}: missing field(s) {', '.join(map(repr, missing))}")
