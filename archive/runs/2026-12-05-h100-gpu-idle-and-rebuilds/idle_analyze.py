"""idle_analyze.py DIR: where the GPU idled in a traced run (DIR holds nvml.jsonl and run/ from idle.tgz)."""
import collections, glob, json, os, re, sys
d = sys.argv[1]
samples = []
for l in open(os.path.join(d, "nvml.jsonl")):
    x = json.loads(l)
    if isinstance(x[0], int):
        samples.append((x[0] / 1e6, x[1]))
samples.sort()
LINE = re.compile(r"kbench worker: (\S+) (\S+) ([0-9.]+) \+([0-9.]+)s")
cmds = []
for f in glob.glob(os.path.join(d, "run/logs/*.log")):
    for l in open(f, errors="replace"):
        m = LINE.search(l)
        if m:
            t0, dt = float(m.group(3)), float(m.group(4))
            cmds.append((t0, t0 + dt, m.group(1), m.group(2), os.path.basename(f)))
recs = [json.loads(l) for l in open(os.path.join(d, "run/records.jsonl")) if l.strip()]
spans = [(r["started_unix_s"], r["finished_unix_s"], f"L{r['problem']['level']}/{r['problem']['id']}", r["phases"]) for r in recs]
t_first, t_last = min(s[0] for s in spans), max(s[1] for s in spans)
print(f"{len(samples)} NVML samples, {len(cmds)} worker commands, {len(recs)} records, span {t_last - t_first:.1f} s")
if len(samples) > 1:
    ds = [b[0] - a[0] for a, b in zip(samples, samples[1:])]
    print(f"sample period median {sorted(ds)[len(ds)//2]*1e3:.0f} ms")
idle_by = collections.Counter(); busy = idle = 0.0
per_rec = collections.defaultdict(lambda: [0.0, 0.0])
for (ta, _), (tb, u) in zip(samples, samples[1:]):
    if tb < t_first or ta > t_last:
        continue
    dt = tb - ta
    rec = next((s[2] for s in spans if s[0] <= tb and ta <= s[1]), "between records")
    per_rec[rec][0] += dt
    if u > 0:
        busy += dt; continue
    idle += dt; per_rec[rec][1] += dt
    ov = [(min(tb, c[1]) - max(ta, c[0]), c) for c in cmds if c[0] < tb and c[1] > ta]
    if not ov:
        idle_by["(no worker command)"] += dt; continue
    tot = sum(o for o, _ in ov)
    cover = min(tot, dt)
    for o, c in ov:
        idle_by[f"{c[2]} {c[3]}"] += cover * o / tot
    idle_by["(no worker command)"] += dt - cover
print(f"within the records' span: busy {busy:.1f} s, idle {idle:.1f} s ({idle / max(busy + idle, 1e-9):.1%} idle)")
print("idle seconds by the worker commands running then (shared in proportion when several):")
for k, v in idle_by.most_common(25):
    print(f"  {v:7.2f}  {k}")
print("per record: span s, idle s, idle share; phases")
for s in spans:
    a, i = per_rec[s[2]]
    ph = ", ".join(f"{k[:-2]} {v:.2f}" for k, v in s[3].items() if v and v > 0.05)
    print(f"  {s[2]:8s} {s[1]-s[0]:6.2f} {i:6.2f} {i/max(a,1e-9):5.1%}  {ph}")
a, i = per_rec["between records"]
print(f"  between records: {a:.2f} s, idle {i:.2f}")
