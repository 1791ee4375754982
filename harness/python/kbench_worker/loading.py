"""Loading (PROTOCOL.md, "load"): the problem file, the candidate's code in the problem's
namespace, the model on its device, and the `load` command."""

import copy
import gc
import os
import platform
import subprocess
import sys
import time
import traceback
import types

import torch

from .build_failures import install_replaying as install_failure_replay
from .integrity import tampered_names
from .modes import check_mode
from .protocol import (
    MAX_MESSAGE_CHARS,
    WorkerError,
    _clean_text,
    _describe,
    _error_from,
    _field,
    _is_int,
    check_command,
    driver_step,
)
from .rebuild_reasons import install as install_rebuild_reasons
from .session import FLOOR_CACHED_BYTES
from .tensors import _precision_dtype, _sync, cast, seed_all
from .written_sources import install_restore


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


def _exec_problem(problem_path, weight_seed, phase):
    """The problem file executed into a fresh namespace: (module, get_inputs, init inputs
    made after seeding `weight_seed`). The file is trusted; a failure here is the
    environment's (or the suite's), not the candidate's."""
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
        raise _error_from(exc, "environment", phase, f"problem file {problem_path} failed: ")
    return module, get_inputs, init


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


def _exec_candidate(module, path, source):
    """Executes the candidate `source` (read from `path` once by the caller) into the
    problem's namespace; any failure is compile_error (KernelBench: compiled=False), with a
    message that names the candidate file."""
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


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


class LoadCommands:
    """The Worker's `load` command."""

    def cmd_load(self, cmd, payload):
        t0 = time.perf_counter()
        # A second load replaces the first (the harness normally uses one worker per model);
        # what the first froze (below) can be collected again. A first load leaves the
        # worker's start frozen (__main__): only what the load makes is scanned at its end.
        if self.loads:
            gc.unfreeze()
        self.loads += 1
        self.model = self.model64 = self.case = None
        self.f64_error = None
        problem_path = _field(cmd, "problem_path", str, "load")
        candidate_path = cmd.get("candidate_path")
        if self.role == "reference" and candidate_path is not None:
            raise WorkerError("protocol", "load", "the reference role never loads candidate code")
        if self.role == "candidate" and not isinstance(candidate_path, str):
            raise WorkerError("protocol", "load", "load in the candidate role needs candidate_path")
        self.dtype = _precision_dtype(cmd.get("precision", "fp32"))
        mode = check_mode(cmd)
        self.stats_probed = False
        self.device = self._parse_device(cmd.get("device", "cpu"))
        weight_seed = cmd.get("weight_seed", 42)
        if weight_seed is None:
            weight_seed = 42
        if not _is_int(weight_seed):
            raise WorkerError("protocol", "load", f"weight_seed must be an int, got {weight_seed!r}")
        want_f64 = bool(cmd.get("want_f64", False)) and self.role == "reference"
        num_threads = cmd.get("cpu_threads")
        if num_threads is not None and not (_is_int(num_threads) and num_threads > 0):
            raise WorkerError("protocol", "load", f"cpu_threads must be a positive int or null, got {num_threads!r}")
        self.num_threads = num_threads
        self._pin_threads()

        # The problem file is trusted; a failure there is the environment's (or the
        # suite's), not the candidate's.
        with driver_step("load: problem"):
            module, get_inputs, init = _exec_problem(problem_path, weight_seed, "load")
        self.get_inputs = get_inputs

        if self.role == "candidate":
            build_dir = cmd.get("build_dir")
            if isinstance(build_dir, str) and build_dir:
                os.makedirs(build_dir, exist_ok=True)
                os.environ["TORCH_EXTENSIONS_DIR"] = build_dir
            # Sources the candidate writes and builds again find their build job's build, and
            # a build that failed there fails again without the compiler (imported only for
            # a candidate that names the module: it imports setuptools).
            source = _read_source(candidate_path, "candidate")
            if b"cpp_extension" in source:
                with driver_step("load: cpp_extension import"):
                    from torch.utils import cpp_extension

                install_restore(cpp_extension)
                # Innermost: a failure replayed without ninja is no compile again.
                install_rebuild_reasons(cpp_extension)
                install_failure_replay(cpp_extension)
            with driver_step("load: candidate import"):
                factory = _exec_candidate(module, candidate_path, source)
            name = "ModelNew"
        else:
            factory = module.__dict__.get("Model")
            if factory is None:
                raise WorkerError("environment", "load", f"problem file {problem_path} defines no Model")
            name = "Model"

        seed_all(weight_seed)
        try:
            with driver_step("load: construct"):
                model = factory(*init)
        except (Exception, SystemExit) as exc:
            # An extension that fails to build in the constructor is a compile error, as at
            # import: where the candidate builds does not change what its failure is.
            if _is_extension_build_failure(exc):
                raise _error_from(exc, "compile_error", "load", f"extension build failed while constructing {name}: ")
            raise _error_from(exc, "runtime_error", "load", f"constructing {name} failed: ")
        # Right after construction, before the float64 copy (which keeps the mode) is made.
        self._apply_mode(model, mode)
        if cmd.get("gate_device_work"):
            self._await_proceed(cmd.get("id"))
        # Moved as constructed, then the float64 copy made on the device from the moved
        # weights (before the cast, so it holds the weights as constructed): a copy made on
        # the host cost a second host copy of the weights, their conversion there and a
        # transfer of twice their size (about 5 s of a 4 GiB model's load on an H200 host).
        # The copy converts tensor by tensor, each of its own freed as it goes, so the peak is
        # about what the model and its float64 copy hold; the blocks freed on the way are
        # given back below.
        try:
            with driver_step("load: move"):
                moved = model.to(device=self.device)
        except (Exception, SystemExit) as exc:
            raise _error_from(exc, "runtime_error", "load", f"moving {name} to {self.device} failed: ")
        if moved is None:
            raise WorkerError("runtime_error", "load", f"{name}.to(...) returned None")
        if want_f64:
            try:
                self.model64 = copy.deepcopy(moved).to(dtype=torch.float64)
            except (Exception, SystemExit) as exc:
                self.model64 = None
                self.f64_error = _clean_text(_describe(exc), MAX_MESSAGE_CHARS)
        try:
            self.model = moved.to(dtype=self.dtype)
            _sync(self.device)
        except (Exception, SystemExit) as exc:
            self.model64 = None
            raise _error_from(exc, "runtime_error", "load", f"casting {name} to {self.dtype} failed: ")
        if self.model is None:
            raise WorkerError("runtime_error", "load", f"{name}.to(...) returned None")
        self._snapshot_buffers()

        if self.role == "reference":
            print(f"kbench worker: loaded {os.path.basename(problem_path)} in {time.perf_counter() - t0:.2f}s "
                  f"(done at {time.time():.3f})", file=sys.stderr, flush=True)
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
        # What the worker's start made is frozen already (__main__), so this one collection
        # scans only what the load made; the release below needs no second one.
        with driver_step("load: collect"):
            gc.collect()
        # The blocks the float64 copy and the cast freed (or a failed copy left), given back
        # past the floor whatever the GPU holds: a load sent ahead sits beside another
        # problem's evaluation on the GPU, out of reach of the harness's memory retries.
        with driver_step("load: release"):
            self._release_device_memory(keep=FLOOR_CACHED_BYTES, collected=True)
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
            "integrity": {"tampered": tampered_names(), **self.mode_observations()},
        }, []

    def _await_proceed(self, req_id):
        """A load sent ahead (PROTOCOL.md, "load", `gate_device_work`): everything so far ran
        on the host alone, unpaused while kernels are timed; the device work that follows
        waits for the harness, which first puts this process under the device's gate."""
        self.channel.write_frame({"type": "device_work", "id": req_id})
        frame = self.channel.read_frame()
        got = frame[0] if frame is not None else {}
        if got.get("cmd") != "proceed" or got.get("id") != req_id:
            raise WorkerError(
                "protocol", "load",
                f"expected proceed for load {req_id!r} after device_work, got {got.get('cmd')!r} ({got.get('id')!r})",
            )
        check_command(got, "load")

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
            # Past the floor whatever the GPU holds, as after the load itself.
            self._release_device_memory(keep=FLOOR_CACHED_BYTES)
        return time.perf_counter() - t0

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
