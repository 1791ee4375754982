#!/usr/bin/env python3
"""KernelBench's own batch eval of the reference offered as the candidate, timed per problem.

    kb_eval.py select SPEC
        Prints SPEC as kbench's --select (L/ID, L/A-B, ID, A-B; `L:ID,ID` is read as level L
        for the ids after it). Needs no torch.
    kb_eval.py run --kb DIR --select SPEC --out JSON --work DIR [--budget-s N] ...
        Runs KernelBench's scripts/eval_from_generations.py `batch_eval` (its local path: a
        fresh spawned mp.Pool(1) per kernel, eval_kernel_against_ref with 5 correctness
        trials and 100 timed trials, a 180 s timeout) once per selected problem and writes
        each problem's wall seconds to JSON (rewritten after every problem; a problem already
        there is skipped, so a run cut off continues where it stopped). Exits 75 when
        --budget-s ran out before the end.

DIR is a KernelBench checkout (extracted at the pinned commit, see README.md). The candidate
for problem P is P's own source with `Model` renamed to `ModelNew`, as kbench's reference
agent makes it. Packages KernelBench imports but never uses on this path (pydra, modal,
dotenv, openai, litellm, requests; pydantic for one result class, tqdm for a progress bar)
are replaced by inert stand-ins only where they are not installed; the JSON lists which were.
"""

import argparse
import importlib
import importlib.util
import json
import os
import re
import sys
import time
import types

# Set by `run` before the first worker starts: spawned workers re-import this file as
# __mp_main__ and must see KernelBench's modules (and the same stand-ins) as the parent does.
ENV_KB = "SIDE_BY_SIDE_KB"
# Where a worker's own clock readings travel back, inside the result's metadata; taken out
# again before KernelBench writes its eval_results.json.
SBS_KEY = "_side_by_side"
_T_PROCESS = time.time()  # this module's import: a spawned worker's start, near enough
LEVELS = (1, 2, 3)
STUBBED = []


# ----------------------------------------------------------------------------------------------
# Selection (kbench's --select grammar)


def parse_select(spec):
    """[(level or None, a, b)] from kbench's grammar (ID, A-B, L/ID, L/A-B) or `L:ID,ID`
    (level L for the bare ids that follow, up to the next `L:`)."""
    if not spec or not spec.strip():
        raise ValueError("empty selection: name problems as L/ID, L/A-B, ID or A-B (e.g. 1/10,1/20)")
    items, level = [], None
    for i, part in enumerate(spec.split(",")):
        part = part.strip()
        if not part:
            raise ValueError("selection {!r}: element {} is empty".format(spec, i + 1))
        m = re.fullmatch(r"(?:(\d+)\s*([/:]))?\s*(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise ValueError("selection: cannot read {!r}; use L/ID, L/A-B, ID, A-B or L:ID,ID".format(part))
        lv, sep, a, b = m.group(1), m.group(2), int(m.group(3)), int(m.group(4) or m.group(3))
        if a > b:
            raise ValueError("selection: {!r} is an empty range".format(part))
        if sep == ":":
            level = int(lv)
            items.append((level, a, b))
        elif sep == "/":
            items.append((int(lv), a, b))
        else:
            items.append((level, a, b))
    return items


def kbench_spec(items):
    """The selection in kbench's own spelling."""
    out = []
    for lv, a, b in items:
        r = str(a) if a == b else "{}-{}".format(a, b)
        out.append(r if lv is None else "{}/{}".format(lv, r))
    return ",".join(out)


def matches(items, level, pid):
    return any((lv is None or lv == level) and a <= pid <= b for lv, a, b in items)


def rename_model(source):
    """`Model` → `ModelNew` where it is a whole identifier (kbench's reference agent)."""
    return re.sub(r"(?<![\w])Model(?![\w])", "ModelNew", source)


# ----------------------------------------------------------------------------------------------
# KernelBench's modules without the packages this path never uses


class _Inert:
    """Anything: every attribute, call and decoration gives itself (modal's App, Image, cls)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *a, **k):
        return self


def _stub_pydantic():
    import copy

    class BaseModel:
        """What KernelExecResult needs of pydantic: keyword construction over class defaults."""

        def __init__(self, **data):
            for klass in reversed(type(self).__mro__):
                for name in getattr(klass, "__annotations__", {}):
                    if name not in data and hasattr(type(self), name):
                        setattr(self, name, copy.deepcopy(getattr(type(self), name)))
            for k, v in data.items():
                setattr(self, k, v)

        def model_dump(self):
            return dict(vars(self))

        def __repr__(self):
            return "{}({})".format(type(self).__name__, ", ".join("{}={!r}".format(k, v) for k, v in vars(self).items()))

    m = types.ModuleType("pydantic")
    m.BaseModel = BaseModel
    return m


def _stub(name):
    m = types.ModuleType(name)
    if name == "pydantic":
        return _stub_pydantic()
    if name == "dotenv":
        m.load_dotenv = lambda *a, **k: False
    elif name == "openai":
        class OpenAI:
            def __init__(self, *a, **k):
                raise RuntimeError("openai is not installed here (side-by-side stand-in)")
        m.OpenAI = OpenAI
    elif name == "litellm":
        def completion(*a, **k):
            raise RuntimeError("litellm is not installed here (side-by-side stand-in)")
        m.completion = completion
    elif name == "pydra":
        class Config:
            def to_dict(self):
                return dict(vars(self))
        m.Config = Config
        m.REQUIRED = "<REQUIRED>"
        m.main = lambda *a, **k: (lambda fn: fn)
    elif name == "tqdm":
        class tqdm:
            def __init__(self, iterable=None, *a, **k):
                self.iterable = iterable

            def __iter__(self):
                return iter(self.iterable or ())

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def update(self, n=1):
                pass
        m.tqdm = tqdm
    elif name in ("modal", "modal.experimental"):
        inert = _Inert()

        def __getattr__(attr):  # PEP 562: modal.App(...), modal.Image..., modal.method()
            if attr.startswith("__"):
                raise AttributeError(attr)
            return inert
        m.__getattr__ = __getattr__
    return m


def setup_imports(kb_root):
    """KernelBench's src/ and scripts/ on sys.path; stand-ins for what is not installed."""
    for sub in ("src", "scripts"):
        p = os.path.join(kb_root, sub)
        if p not in sys.path:
            sys.path.insert(0, p)
    for name in ("pydantic", "dotenv", "openai", "litellm", "pydra", "modal", "requests", "tqdm"):
        if name in sys.modules:
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            sys.modules[name] = _stub(name)
            if name == "modal":
                sys.modules["modal.experimental"] = _stub("modal.experimental")
            STUBBED.append(name)


def _timed(fn):
    """eval_kernel_against_ref with the worker's clock readings added to the result."""

    def wrapper(*a, **k):
        t0 = time.time()
        res = fn(*a, **k)
        t1 = time.time()
        md = getattr(res, "metadata", None)
        if isinstance(md, dict):
            md[SBS_KEY] = {"process_start_unix_s": _T_PROCESS, "eval_start_unix_s": t0, "eval_end_unix_s": t1}
        return res

    return wrapper


def _worker_setup():
    setup_imports(os.environ[ENV_KB])
    efg = importlib.import_module("eval_from_generations")
    if not getattr(efg.eval_kernel_against_ref, "_side_by_side", False):
        efg.eval_kernel_against_ref = _timed(efg.eval_kernel_against_ref)
        efg.eval_kernel_against_ref._side_by_side = True


if __name__ == "__mp_main__" and os.environ.get(ENV_KB):
    _worker_setup()


# ----------------------------------------------------------------------------------------------
# The run


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def _num(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 else None


def run(a):
    kb_root = os.path.abspath(a.kb)
    if not os.path.isdir(os.path.join(kb_root, "KernelBench", "level1")) or not os.path.isfile(
            os.path.join(kb_root, "scripts", "eval_from_generations.py")):
        sys.exit("kb_eval.py: {} is not a KernelBench checkout (KernelBench/level1, scripts/)".format(kb_root))
    items = parse_select(a.select)
    os.environ[ENV_KB] = kb_root
    setup_imports(kb_root)
    t_imports = time.time()
    import multiprocessing as mp

    import torch

    efg = importlib.import_module("eval_from_generations")
    from kernelbench import dataset as kb_dataset
    from kernelbench import utils as kb_utils

    imports_s = time.time() - t_imports

    out = {"tool": "kernelbench", "problems": []}
    if os.path.exists(a.out):
        with open(a.out) as f:
            out = json.load(f)
    done = {(p["level"], p["id"]) for p in out.get("problems", []) if p.get("wall_s") is not None}
    out.update({
        "kernelbench_root": kb_root,
        "selection": kbench_spec(items),
        "stubbed_modules": sorted(set(out.get("stubbed_modules", [])) | set(STUBBED)),
        "settings": {
            "entry": "scripts/eval_from_generations.py batch_eval (local), one problem per call",
            "isolation": "mp.Pool(1) per kernel, spawn start method",
            "num_correct_trials": a.correct_trials, "num_perf_trials": a.perf_trials,
            "timeout_s": a.timeout, "timing_method": "cuda_event", "measure_performance": True,
            "backend": "cuda", "precision": "fp32", "gpu_arch": a.gpu_arch, "device": "cuda:0",
        },
        "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    })
    out.setdefault("invocations", []).append({"started_unix_s": _T_PROCESS, "imports_s": imports_s})

    # As scripts/eval_from_generations.py's main() does before batch_eval.
    kb_utils.set_gpu_arch(a.gpu_arch)
    if mp.get_start_method(allow_none=True) is None:
        mp.set_start_method("spawn")

    # Each batch's results go through add_to_eval_results_file in this (parent) process:
    # read them there, and take the worker's clock readings out before KernelBench writes.
    seen = {}
    original_add = efg.add_to_eval_results_file

    def add_and_keep(problem_id, sample_id, eval_result, eval_file_path):
        md = getattr(eval_result, "metadata", None)
        clocks = md.pop(SBS_KEY, None) if isinstance(md, dict) else None
        seen["result"] = eval_result
        seen["clocks"] = clocks
        seen["added_unix_s"] = time.time()
        return original_add(problem_id, sample_id, eval_result, eval_file_path)

    efg.add_to_eval_results_file = add_and_keep

    work = os.path.abspath(a.work)
    budget_end = _T_PROCESS + a.budget_s if a.budget_s > 0 else None
    slowest = 0.0
    stopped = False
    for level in LEVELS:
        if not os.path.isdir(os.path.join(kb_root, "KernelBench", "level{}".format(level))):
            continue
        dataset = kb_dataset.construct_kernelbench_dataset(level=level, source="local")
        pids = [p for p in dataset.get_problem_ids() if matches(items, level, p)]
        if not pids:
            continue
        config = efg.EvalConfig()
        config.run_name = "side_by_side_level{}".format(level)
        config.dataset_src = "local"
        config.level = level
        config.num_correct_trials = a.correct_trials
        config.num_perf_trials = a.perf_trials
        config.timeout = a.timeout
        config.measure_performance = True
        config.timing_method = "cuda_event"
        config.gpu_arch = a.gpu_arch
        config.num_gpu_devices = 1
        config.backend = "cuda"
        config.precision = "fp32"
        config.runs_dir = os.path.join(work, "runs")
        config.kernel_eval_build_dir = os.path.join(work, "cache")
        run_dir = os.path.join(config.runs_dir, config.run_name)
        os.makedirs(run_dir, exist_ok=True)
        eval_file = os.path.join(work, "level{}".format(level), "eval_results.json")
        for pid in pids:
            if (level, pid) in done:
                continue
            left = budget_end - time.time() if budget_end else None
            if left is not None and left < max(a.min_left_s, 1.5 * slowest):
                print("[side-by-side] budget: {:.0f}s left, a problem may take {:.0f}s; stopping before L{}/{}".format(
                    left, max(a.min_left_s, 1.5 * slowest), level, pid), flush=True)
                stopped = True
                break
            problem = dataset.get_problem_by_id(pid)
            kernel = os.path.join(run_dir, "level_{}_problem_{}_sample_0_kernel.py".format(level, pid))
            with open(kernel, "w") as f:
                f.write(rename_model(problem.code))
            # An earlier, cut-off attempt may have left this problem in KernelBench's file,
            # where batch_eval would append a second entry: start it clean.
            _drop_problem(eval_file, pid)
            seen.clear()
            failure = None
            t0 = time.time()
            try:
                efg.batch_eval([(pid, 0)], config, dataset, run_dir, eval_file)
            except Exception as e:  # noqa: BLE001 - KernelBench's own loop would stop here
                failure = "batch_eval raised {}: {}".format(type(e).__name__, str(e)[:300])
            t1 = time.time()
            slowest = max(slowest, t1 - t0)
            row = _problem_row(level, pid, problem.name, t0, t1, seen)
            if failure:
                row["error"] = failure
            out["problems"] = [p for p in out["problems"] if (p["level"], p["id"]) != (level, pid)]
            out["problems"].append(row)
            out["problems"].sort(key=lambda p: (p["level"], p["id"]))
            _write_json(a.out, out)
            print("[side-by-side] L{}/{} {}: {:.2f}s correct={} {}".format(
                level, pid, problem.name, t1 - t0, row["correctness"], row["error"] or ""), flush=True)
        if stopped:
            break
    out["invocations"][-1]["finished_unix_s"] = time.time()
    out["invocations"][-1]["stopped"] = stopped
    _write_json(a.out, out)
    return 75 if stopped else 0


def _drop_problem(eval_file, pid):
    if not os.path.exists(eval_file):
        return
    try:
        with open(eval_file) as f:
            data = json.load(f)
    except (OSError, ValueError):
        os.remove(eval_file)
        return
    if str(pid) in data:
        del data[str(pid)]
        _write_json(eval_file, data)


def _problem_row(level, pid, name, t0, t1, seen):
    res = seen.get("result")
    clocks = seen.get("clocks") or {}
    row = {
        "level": level, "id": pid, "name": name,
        "started_unix_s": t0, "finished_unix_s": t1, "wall_s": t1 - t0,
        "compiled": getattr(res, "compiled", None), "correctness": getattr(res, "correctness", None),
        # KernelBench's runtime fields hold the mean of its CUDA-event samples, which are
        # milliseconds (its class comment says microseconds).
        "runtime_ms": _num(getattr(res, "runtime", None)),
        "ref_runtime_ms": _num(getattr(res, "ref_runtime", None)),
        "error": None,
    }
    if res is None:
        row["error"] = "no result (timed out or lost)"
    else:
        md = getattr(res, "metadata", {}) or {}
        for k in ("runtime_error", "compilation_error", "correctness_issue", "other_error", "cuda_error", "error"):
            if k in md:
                row["error"] = "{}: {}".format(k, str(md[k])[:300])
                break
    if row["runtime_ms"] and row["ref_runtime_ms"]:
        row["speedup"] = row["ref_runtime_ms"] / row["runtime_ms"]
    else:
        row["speedup"] = None
    # Where the problem's wall time went: the worker's start (spawn, interpreter, imports of
    # torch and KernelBench), the eval itself, and the rest (result back, pool shut down,
    # KernelBench's eval_results.json written).
    ps, es, ee = (clocks.get(k) for k in ("process_start_unix_s", "eval_start_unix_s", "eval_end_unix_s"))
    if ps and es and ee:
        row["breakdown_s"] = {"worker_start_s": es - t0, "eval_s": ee - es, "after_s": t1 - ee,
                              "spawn_to_import_s": ps - t0}
    else:
        row["breakdown_s"] = None
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("select", help="print SPEC as kbench's --select")
    s.add_argument("spec")
    r = sub.add_parser("run", help="KernelBench's batch eval, per problem, timed")
    r.add_argument("--kb", required=True, help="KernelBench checkout")
    r.add_argument("--select", required=True)
    r.add_argument("--out", required=True, help="timings JSON (read first: finished problems are skipped)")
    r.add_argument("--work", required=True, help="KernelBench's runs/ and build cache go here")
    r.add_argument("--budget-s", type=float, default=0.0, help="stop before a problem that may not fit (0: none)")
    r.add_argument("--min-left-s", type=float, default=60.0)
    r.add_argument("--correct-trials", type=int, default=5)
    r.add_argument("--perf-trials", type=int, default=100)
    r.add_argument("--timeout", type=int, default=180, help="KernelBench's per-kernel timeout")
    r.add_argument("--gpu-arch", nargs="+", default=["Hopper"], help="KernelBench's gpu_arch (set_gpu_arch)")
    a = ap.parse_args(argv)
    if a.cmd == "select":
        try:
            print(kbench_spec(parse_select(a.spec)))
        except ValueError as e:
            print("kb_eval.py: {}".format(e), file=sys.stderr)
            return 2
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
