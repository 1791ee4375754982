"""One process's timing of a KernelBench problem's eager forward, plain Python outside kbench,
with what the process ran on: the anchor for the per-run drift of launch-bound level-3 models
(docs/baselines.md, "Stored against live": L3/30's eager median 13.7 ms in one kbench run and
25.2 ms in another on one machine). `baselines.sh launch-drift` starts it many times, each a fresh
process, so that a difference between processes shows here or not at all.

    python3 tests/gpu/launch_drift.py path/to/level3/20_MobileNetV2.py [calls [device]]

Prints one JSON line: the problem, the pid, the cores allowed and the core the process last ran
on, that core's clock where sysfs gives it, the forward's median and p10/p90 over `calls`
synchronised calls (default 200, after 20 warm-up calls), the same in three blocks (start,
middle, end: drift inside the process), and two probes of the CPU side alone: the microseconds
per launch of a tiny CUDA kernel (`add_` on one element, 2000 launches, then one sync) and the
milliseconds of a fixed pure-Python loop. A process whose forward is slow because its CPU side
is slow shows it in both probes; one slow in the forward alone points elsewhere.
"""

import json
import os
import statistics
import sys
import time

# Untimed calls before the timed ones (KBENCH_DRIFT_WARMUP; 20 unless set).
WARMUP = int(os.environ.get("KBENCH_DRIFT_WARMUP", "20"))
# The core baselines.sh launch-drift pinned this process to with taskset, or "none" (the label its
# summary groups by; the process's own affinity is in "allowed").
PINNED = os.environ.get("KBENCH_DRIFT_PINNED", "none")


def _pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _core_now():
    # Field 39 of /proc/self/stat is the CPU the process last ran on. The command name (field
    # 2) may hold spaces, so fields are counted after its closing parenthesis.
    with open("/proc/self/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[36])


def _core_khz(core):
    path = f"/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_cur_freq"
    try:
        with open(path) as f:
            return int(f.read().strip())
    except OSError:
        return None


def main():
    path = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    import torch

    device = sys.argv[3] if len(sys.argv) > 3 else ("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    from problem_load import load_problem

    model, inputs = load_problem(path, device)
    model.eval()
    times = []
    with torch.no_grad():
        for i in range(WARMUP + calls):
            sync()
            t0 = time.perf_counter()
            model(*inputs)
            sync()
            if i >= WARMUP:
                times.append((time.perf_counter() - t0) * 1e3)
        one = torch.zeros(1, device=device)
        sync()
        t0 = time.perf_counter()
        for _ in range(2000):
            one.add_(1)
        sync()
        launch_us = (time.perf_counter() - t0) * 1e6 / 2000
    t0 = time.perf_counter()
    acc = 0
    for i in range(2_000_000):
        acc += i & 7
    python_ms = (time.perf_counter() - t0) * 1e3
    third = max(1, len(times) // 3)
    blocks = [times[:third], times[third : 2 * third], times[2 * third :]]
    core = _core_now()
    print(
        json.dumps(
            {
                "problem": os.path.basename(path),
                "device": device,
                "pid": os.getpid(),
                "allowed": sorted(os.sched_getaffinity(0)),
                "core": core,
                "core_khz": _core_khz(core),
                "median_ms": statistics.median(times),
                "p10_ms": _pct(times, 0.1),
                "p90_ms": _pct(times, 0.9),
                "block_medians_ms": [statistics.median(b) for b in blocks if b],
                "launch_us": launch_us,
                "python_ms": python_ms,
                "torch": torch.__version__,
                "pinned": PINNED,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
