"""The profiling script mode (PROTOCOL.md, "Profiling script mode"):
`python -m kbench_worker profile SPEC`, a one-shot run, not a protocol session.

Standard library only until profile_main has imported torch: a missing torch is the result
file's error, as it was before this module was imported."""

import json
import sys
import time

from .protocol import EXIT_ENVIRONMENT, EXIT_OK, EXIT_USAGE, WorkerError, _describe, _format_tb
from .startup import _put_interpreter_bin_on_path


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
    """`python -m kbench_worker profile SPEC`: a one-shot script, not a protocol session.
    Loads the problem (and the candidate, when `candidate_path` is given) as `load` does,
    makes inputs from `input_seed`, warms up, then runs `calls` forwards:

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
    try:
        import numpy  # noqa: F401 (imported first, as the protocol roles do)
        import torch
    except BaseException as exc:  # noqa: BLE001
        return finish({"error": {"kind": "environment", "message": f"cannot import torch and numpy with {sys.executable}: {_describe(exc)}"}}, EXIT_ENVIRONMENT)
    # The modules that use torch, now that it has loaded.
    from .cost import problem_cost
    from .server import Worker
    from .tensors import _init_dtype_tables, _sync, cast, seed_all

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
