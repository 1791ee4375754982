"""What the three calls' files in this folder say, written to analysis.txt:

1. per call, the GPU's busy share (NVML samples, utilisation above 0) inside and outside the
   evaluations' spans, and the seconds evaluations waited for their builds (`compile_s`);
2. for the 145-kernel light run, the same per ten records in order, and the build pool over
   time (builds running, built, evaluated);
3. the host's CPU busy share from /proc/stat samples (every 2 s), after the first verdict;
4. CPU seconds a build by compiler stage (cpuprof.txt of the profiled calls);
5. the verdicts of the kernels the light and the full runs both judged, and their speedups.

Python 3 standard library only. Usage: python3 analyze.py > analysis.txt"""
import gzip
import json
import re
import statistics as st

CALLS = ("light-145", "light-fixtures-profiled", "full-79-profiled")


def rows(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def load(call):
    r = sorted(rows(f"{call}/lb_cold.records.jsonl.gz"), key=lambda x: x["finished_unix_s"])
    s = rows(f"{call}/lb_cold.gpu_samples.jsonl.gz")
    b = rows(f"{call}/lb_cold.builds.jsonl")
    t0 = float(open(f"{call}/lb_cold.wall").read().split()[0])
    return r, s, b, t0


def busy(samples, a, b):
    u = [x["util_pct"] for x in samples if a <= x["t_unix_s"] <= b]
    return sum(1 for x in u if x > 0) / len(u) if u else float("nan")


def host_busy(call, a, b):
    prev, tot_d, idle_d = None, 0, 0
    for line in open(f"{call}/host_cpu_stat.txt"):
        f = line.split()
        t, v = float(f[0]), [int(x) for x in f[2:10]]
        cur = (sum(v), v[3] + v[4])
        if prev and a <= t <= b:
            tot_d += cur[0] - prev[0]
            idle_d += cur[1] - prev[1]
        prev = cur
    return 1 - idle_d / tot_d if tot_d else float("nan")


def stages(call):
    """CPU seconds by (process, parent) from cpuprof.txt's second table."""
    out, on = {}, False
    for line in open(f"{call}/cpuprof.txt"):
        if line.startswith("by (comm"):
            on = True
            continue
        if on and not line.strip():
            break
        m = re.match(r"(\S+)\s+<-\s+(\S+)\s+([\d.]+)", line.strip())
        if on and m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


runs = {c: load(c) for c in CALLS}
print("1. GPU busy inside and outside evaluations, after the first verdict")
for c, (r, s, b, t0) in runs.items():
    first, last = r[0]["finished_unix_s"], r[-1]["finished_unix_s"]
    spans = [(x["started_unix_s"], x["finished_unix_s"]) for x in r]
    inside = [x for x in s if first <= x["t_unix_s"] <= last and any(p <= x["t_unix_s"] <= q for p, q in spans)]
    outside = [x for x in s if first <= x["t_unix_s"] <= last and not any(p <= x["t_unix_s"] <= q for p, q in spans)]
    idle_in = sum(1 for x in inside if x["util_pct"] == 0)
    idle_out = sum(1 for x in outside if x["util_pct"] == 0)
    waits = sum(x["phases"].get("compile_s", 0) for x in r if x["finished_unix_s"] > first)
    print(f"  {c}: {len(r)} kernels; busy {busy(s, first, last):.0%}; samples inside evaluations {len(inside)}"
          f" ({idle_in} idle), outside {len(outside)} ({idle_out} idle); evaluations after the first verdict"
          f" waited {waits:.0f} s for builds over {last - first:.0f} s")

print("\n2. light-145 by ten records: build waits, timing and GPU busy")
r, s, b, t0 = runs["light-145"]
for i in range(0, len(r), 10):
    ch = r[i:i + 10]
    a, z = ch[0]["started_unix_s"], ch[-1]["finished_unix_s"]
    print(f"  {i:3d}  t {a - t0:5.0f}-{z - t0:4.0f} s  waited for builds {sum(x['phases']['compile_s'] for x in ch):5.1f} s"
          f"  timing {sum(x['phases']['timing_s'] for x in ch):5.1f} s  busy {busy(s, a, z):.0%}")
print("  the build pool every 40 s (t, builds running, built, evaluated):")
for t in range(0, int(r[-1]["finished_unix_s"] - t0) + 1, 40):
    T = t0 + t
    running = sum(1 for x in b if x["started_unix_s"] <= T < x["ended_unix_s"])
    built = sum(1 for x in b if x["ended_unix_s"] <= T)
    done = sum(1 for x in r if x["finished_unix_s"] <= T)
    print(f"    {t:4d} s  {running:2d} running  {built:3d} built  {done:3d} evaluated")
print(f"  build jobs: {len(b)}, mean {st.mean(x['seconds'] for x in b):.1f} s"
      f" ({min(x['seconds'] for x in b):.0f}-{max(x['seconds'] for x in b):.0f})")

print("\n3. host CPU busy (/proc/stat) between the first and the last verdict")
for c, (r, s, b, t0) in runs.items():
    print(f"  {c}: {host_busy(c, r[0]['finished_unix_s'], r[-1]['finished_unix_s']):.0%}")

print("\n4. CPU seconds a build job by stage (whole call; profiled calls)")
for c in CALLS[1:]:
    st_ = stages(c)
    # The profile covers the whole call: the fixture run's 8 build jobs (its summary) too.
    nb = len(runs[c][2]) + (8 if c == "light-fixtures-profiled" else 0)
    parts = {
        "nvcc host gcc (cc1plus under gcc)": st_.get(("cc1plus", "gcc-real"), 0),
        "nvcc cudafe++": st_.get(("cudafe++", "sh"), 0),
        "nvcc cicc": st_.get(("cicc", "sh"), 0),
        "g++ of C++ sources (cc1plus under g++)": st_.get(("cc1plus", "g++-real"), 0),
        "python (build jobs and evaluating workers)": sum(v for (p, _), v in st_.items() if p.startswith("python")),
        "as and ld": sum(v for (p, _), v in st_.items() if p in ("as", "ld")),
    }
    tot = sum(parts.values())
    print(f"  {c}: {nb} build jobs; " + "; ".join(f"{k} {v / nb:.1f}" for k, v in parts.items())
          + f"; all {tot / nb:.1f} CPU s a build")

print("\n5. verdicts and speedups, light against full, kernels both judged")
full = {x["candidate"]["sha256"]: x for x in runs["full-79-profiled"][0]}
key = lambda x: (x["outcome"].get("kind"), x["outcome"].get("rule"), x["outcome"].get("family"))
for c in CALLS[:2]:
    light = {x["candidate"]["sha256"]: x for x in runs[c][0]}
    common = light.keys() & full.keys()
    diff = [h for h in common if key(light[h]) != key(full[h])]
    ratio = [light[h]["timing"]["speedup"] / full[h]["timing"]["speedup"] for h in common
             if (light[h].get("timing") or {}).get("speedup") and (full[h].get("timing") or {}).get("speedup")]
    print(f"  {c} against full-79-profiled: {len(common)} in common, {len(diff)} verdicts differ;"
          f" speedup light/full median {st.median(ratio):.3f} over {len(ratio)} (different machines)")
