"""Entry point: `python -u -m kbench_worker reference|candidate` (a protocol session, see
PROTOCOL.md) or `python -m kbench_worker profile SPEC` (the profiling script mode).

Imports only the standard-library modules of the package: the protocol's fds are taken
before torch is imported, and the modules that use torch are imported once it has loaded.
"""

import gc
import os
import platform
import sys
import time
import traceback

from .profiling import profile_main
from .protocol import (
    EXIT_ENVIRONMENT,
    EXIT_PROTOCOL,
    EXIT_USAGE,
    HELLO_MAGIC,
    PROTOCOL_VERSION,
    Channel,
    ProtocolViolation,
    _cache_own_source,
    _describe,
    _error_header,
    _format_tb,
)
from .startup import (
    _cap_address_space,
    _die_with_harness,
    _drop_privileges,
    _lower_priority,
    _put_interpreter_bin_on_path,
    _take_protocol_fds,
)


def main(argv):
    if len(argv) == 3 and argv[1] == "profile":
        return profile_main(argv[2])
    if len(argv) == 4 and argv[1] == "pch":
        from .pch import pch_main

        return pch_main(argv[2], argv[3])
    proto_in, proto_out = _take_protocol_fds()
    channel = Channel(proto_in, proto_out)
    # Before anything else runs: the uid the harness asked for (which clears a parent-death
    # signal), then the parent-death signal (the worker ends with the harness).
    dropped = _drop_privileges()
    if dropped is not None:
        channel.write_frame(_error_header("environment", "start", dropped))
        return EXIT_ENVIRONMENT
    _die_with_harness(proto_in)
    role = argv[1] if len(argv) == 2 else None
    if role not in ("reference", "candidate"):
        channel.write_frame(_error_header("protocol", "start", "usage: worker.py reference|candidate"))
        return EXIT_USAGE

    _put_interpreter_bin_on_path()
    _lower_priority()
    t_up = time.time()
    try:
        if sys.byteorder != "little":
            raise ImportError("the kbench wire format is little-endian; this host is big-endian")
        import numpy as np
        import torch
    except BaseException as exc:  # noqa: BLE001 (any failure here means: no usable torch)
        header = _error_header(
            "environment", "start",
            f"cannot import torch and numpy with {sys.executable}: {_describe(exc)}",
            _format_tb(exc),
        )
        header["python_executable"] = sys.executable
        channel.write_frame(header)
        return EXIT_ENVIRONMENT
    # The modules that use torch, now that it has loaded.
    from .cpu_heap import reuse_freed_blocks
    from .integrity import _capture_watched, _warm_cuda
    from .server import Worker
    from .tensors import _init_dtype_tables

    # Before any problem or candidate code: the memory cap, where no cgroup sets it.
    try:
        rlimit_as = _cap_address_space()
    except (OSError, ValueError) as exc:
        channel.write_frame(_error_header("environment", "start", f"could not cap the worker's memory: {exc}"))
        return EXIT_ENVIRONMENT
    _cache_own_source()
    _init_dtype_tables()
    # Before any problem or candidate code: what the timing code calls, and what is watched.
    _capture_watched()
    reuse_freed_blocks()

    if role == "reference" and os.environ.get("KBENCH_WARM_CUDA") == "1":
        # A GPU's reference (problems' costs are counted on GPUs only): the `cost` command's
        # FLOP counter imports torch's higher-order ops (triton among them) on its first
        # use, 4.6-5.4 s of CPU on the H100 host at the end of every problem. Used once
        # here, on the CPU, it is paid while the reference starts ahead, before the start
        # gate applies.
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False):
            torch.ones(2, 2) @ torch.ones(2, 2)
    if role == "candidate" and os.environ.get("KBENCH_IMPORT_CPP_EXTENSION") == "1":
        # A GPU candidate whose source names torch's extension module (the harness's
        # eval/start.rs): its import (setuptools among it, 0.2-0.4 s) runs here, ahead and
        # unpaused like torch's, not in the load between two evaluations on the GPU. Harness
        # code before any candidate code; a failure is left for the load to meet and report.
        try:
            import torch.utils.cpp_extension  # noqa: F401
        except Exception:  # noqa: BLE001
            pass
    # Everything the imports made (torch's objects: about a million) stays alive as long as
    # the worker: collected and frozen here, before the start gate applies (so on a GPU it
    # runs unpaused, like the imports), and the load's collection (loading.py) scans only what
    # came after. A full collection over torch costs 40-75 ms, which every load paid before.
    gc.collect()
    gc.freeze()
    if os.environ.get("KBENCH_IMPORTED_FRAME") == "1":
        # Before anything touches a GPU: the harness pauses a starting worker's CUDA set-up
        # while a kernel is timed on its GPU, but lets the imports above run.
        channel.write_frame({"type": "imported"})
    try:
        cuda_available = bool(torch.cuda.is_available())
        device_count = int(torch.cuda.device_count()) if cuda_available else 0
    except Exception:  # noqa: BLE001 (a broken driver still gets a hello, with no GPUs)
        cuda_available, device_count = False, 0
    t_imported = time.time()
    warm_s = _warm_cuda() if cuda_available and os.environ.get("KBENCH_WARM_CUDA") == "1" else None
    if role == "reference":
        # Where a reference's start went (the candidate's log is the candidate's own output).
        print(f"kbench worker: reference started: spawned {_spawned_at():.3f}, python up {t_up:.3f}, "
              f"torch imported +{t_imported - t_up:.2f}s, CUDA ready +{time.time() - t_up:.2f}s (unix times)",
              file=sys.stderr, flush=True)
    channel.write_frame(
        {
            "type": "hello",
            "magic": HELLO_MAGIC,
            "protocol": PROTOCOL_VERSION,
            "role": role,
            "pid": os.getpid(),
            "uid": os.getuid(),
            "rlimit_as": rlimit_as,
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


def _spawned_at():
    """When this process was spawned (unix time, to 10 ms: /proc's start time counts clock
    ticks since boot), or NaN off Linux."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return float("nan")


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
