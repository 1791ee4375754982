"""Reading kbench's run logs, shared by the benchmarks' summarisers (throughput/,
side_by_side/). Standard library only: they run on the GPU machine with whatever python3
is there."""

import json
import math
import os

# The record's `phases` fields, in the order the summaries print them.
PHASES = ("reference_open_s", "build_wait_s", "worker_wait_s", "reference_s", "inputs_s", "compile_s", "correctness_s", "timing_s",
          "stress_s", "stress_reference_s", "time_as_s", "profile_s")


def read_jsonl(path):
    """Objects of a JSON-lines file; unreadable lines (e.g. a line cut off when the process
    was stopped) are skipped. A missing file reads as empty."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


def num(x):
    """x as a finite float, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None
