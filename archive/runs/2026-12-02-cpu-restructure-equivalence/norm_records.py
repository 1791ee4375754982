#!/usr/bin/env python3
"""norm_records.py RUNDIR: the records of a run with what varies between runs (timings, run
ids, wall clocks, temp paths, containment) taken out, one JSON line each, sorted."""
import json, re, sys
VARY = {"run_id", "timing", "wall_s", "started_unix_s", "finished_unix_s", "load_s",
        "build_ahead_s", "phases", "mac", "containment", "times"}
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in sorted(v.items()) if k not in VARY}
    if isinstance(v, list):
        return [clean(x) for x in v]
    if isinstance(v, str):
        v = re.sub(r"/tmp/[^\s'\"]*", "/tmp/X", v)
        v = re.sub(r"\d+\.\d+ ?(s|ms|us)\b", "N s", v)
        return v
    return v
rows = []
for line in open(sys.argv[1] + "/records.jsonl"):
    if line.strip():
        r = json.loads(line)
        rows.append(json.dumps(clean(r), sort_keys=True))
for r in sorted(rows):
    print(r)
