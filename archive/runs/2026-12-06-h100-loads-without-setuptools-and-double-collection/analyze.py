"""Per run of ab2.sh's output folder (run/): kernels, first verdict, seconds a kernel between
the first and the last verdict, the GPU's busy share and mean utilisation between them (NVML
samples, utilisation above 0), the loads' seconds (records' compile_s and load_s, loads that
waited for no build), the mean gap between records, and the workers' traced load split
(KBENCH_WORKER_TRACE=1: 'driver split (candidate load)' lines). Usage: analyze.py RUN_DIR"""
import collections
import glob
import json
import os
import re
import statistics as st
import sys
import tarfile
import tempfile

run = sys.argv[1]
for n in ["lb_cold", "warm_old_a", "warm_new_a", "warm_old_b"]:
    d = os.path.join(run, n)
    r = sorted((json.loads(l) for l in open(os.path.join(d, "records.jsonl"))), key=lambda x: x["finished_unix_s"])
    t0 = float(open(d + ".wall").read().split()[0])
    first, last = r[0]["finished_unix_s"], r[-1]["finished_unix_s"]
    s = [json.loads(l) for l in open(os.path.join(d, "gpu_samples.jsonl"))]
    s = [x for x in s if first <= x["t_unix_s"] <= last]
    busy = sum(1 for x in s if x["util_pct"] > 0) / max(1, len(s))
    util = st.mean(x["util_pct"] for x in s) / 100
    built = [x for x in r if x["phases"].get("compile_s", 0) < 3]
    gaps = [r[i + 1]["started_unix_s"] - r[i]["finished_unix_s"] for i in range(len(r) - 1)]
    split = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(os.path.join(d, "logs.tgz")) as tar:
            tar.extractall(tmp)
        for f in glob.glob(os.path.join(tmp, "logs", "*__replay__*[0-9].log")):
            for line in open(f, errors="replace"):
                if "driver split (candidate load)" in line:
                    for part in line.split("): ", 1)[1].replace(" (calls, s)", "").split(", "):
                        m = re.match(r"(.*) (\d+) ([\d.]+)$", part.strip())
                        if m:
                            split[m.group(1)].append(float(m.group(3)))
    print(f"{n}: {len(r)} kernels, first verdict {first - t0:.1f} s, {(last - first) / (len(r) - 1):.2f} s a kernel after it, "
          f"GPU busy {busy:.0%} (mean util {util:.0%}), load {st.mean(x['phases']['compile_s'] for x in built):.3f} s "
          f"(median {st.median(x['phases']['compile_s'] for x in built):.3f}), record wall {st.mean(x['wall_s'] for x in built):.2f} s, "
          f"gap between records {st.mean(gaps):.3f} s")
    print("   load split (mean s a load):", {k: round(sum(v) / len(v), 3) for k, v in sorted(split.items())})
