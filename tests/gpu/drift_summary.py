#!/usr/bin/env python3
"""Summary of tests/gpu/baselines.sh launch-drift's drift.jsonl (one line per process):

    drift_summary.py drift.jsonl > summary.txt

Per problem and pinning, the spread of the forward's median over processes (max/min), the
launch and Python-loop probes' ranges and the largest drift inside one process (its block
medians); then, over the unpinned processes, Spearman's rho of the median against each probe.
Stdlib only, so that it runs with the device's python3 as it is, on a cut-off run's lines too.
"""
import json, sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def rank(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    for k, i in enumerate(order):
        r[i] = float(k)
    return r
def spearman(a, b):
    # Spearman's rho as the Pearson correlation of ranks (ties are rare in timings).
    if len(a) < 3:
        return float("nan")
    ra, rb = rank(a), rank(b)
    n = len(a); ma = sum(ra) / n; mb = sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra); vb = sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5 if va and vb else float("nan")
groups = defaultdict(list)
for r in rows:
    groups[(r["problem"], r["pinned"])].append(r)
print(f"{'problem':<36} {'pinned':>6} {'n':>3} {'min ms':>9} {'max ms':>9} {'max/min':>8} {'launch us':>14} {'python ms':>12} {'in-proc max/min':>16}")
for (p, pin), rs in sorted(groups.items()):
    m = [r["median_ms"] for r in rs]
    lu = [r["launch_us"] for r in rs]
    py = [r["python_ms"] for r in rs]
    inproc = max(max(r["block_medians_ms"]) / min(r["block_medians_ms"]) for r in rs)
    print(f"{p:<36} {pin:>6} {len(rs):>3} {min(m):>9.3f} {max(m):>9.3f} {max(m)/min(m):>8.3f} "
          f"{min(lu):>6.2f}-{max(lu):<7.2f} {min(py):>5.0f}-{max(py):<6.0f} {inproc:>16.3f}")
print()
for p in sorted({r["problem"] for r in rows}):
    for label, keep in (("unpinned", lambda r: r["pinned"] == "none"), ("all", lambda r: True)):
        rs = [r for r in rows if r["problem"] == p and keep(r)]
        m = [r["median_ms"] for r in rs]
        print(f"{p}: {label} (n={len(rs)}), "
              f"rho(median, launch_us) = {spearman(m, [r['launch_us'] for r in rs]):.2f}, "
              f"rho(median, python_ms) = {spearman(m, [r['python_ms'] for r in rs]):.2f}, "
              f"cores {sorted({r['core'] for r in rs})}")
print()
print("python_ms, process by process:", " ".join(f"{r['python_ms']:.0f}" for r in rows))
