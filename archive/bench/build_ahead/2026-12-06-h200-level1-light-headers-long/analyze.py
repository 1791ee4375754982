"""Where the GPU idled in a run folder of this archive: NVML busy share every 20 s (from the
first evaluation's start), the evaluations that waited for their build (`compile_s`), and the
host CPU's busy share every 20 s. Usage: python3 analyze.py call2-light-long/lb_cold (or
call1-light-then-full/light, .../full): the files' common prefix."""
import gzip, json, sys

pre = sys.argv[1] + "."
op = lambda p: gzip.open(p, "rt")
rs = [json.loads(l) for l in op(pre + "records.jsonl.gz")]
ss = [json.loads(l) for l in op(pre + "gpu_samples.jsonl.gz")]
t0 = min(r["started_unix_s"] for r in rs)
first = min(r["finished_unix_s"] for r in rs) - t0
last = max(r["finished_unix_s"] for r in rs) - t0


def share(a, b):
    x = [s["util_pct"] > 0 for s in ss if a <= s["t_unix_s"] - t0 <= b]
    return sum(x) / max(1, len(x))


print(f"{len(rs)} evaluations; first verdict {first:.1f} s, last {last:.1f} s after the first start; "
      f"GPU busy between them {share(first, last):.1%}")
print("GPU busy every 20 s:", " ".join(f"{a}:{share(a, a + 20):.2f}" for a in range(0, int(last), 20)))
print("evaluations that waited for their build over 1.5 s:")
for r in sorted(rs, key=lambda r: r["started_unix_s"]):
    w = (r.get("phases") or {}).get("compile_s", 0)
    if w > 1.5:
        print(f"  {r['started_unix_s'] - t0:6.1f} s {r['candidate']['name']}: {w:.1f} s")
cpu = json.load(op(pre + "cpu.json.gz"))["stat"]
buck = {}
for a, b in zip(cpu, cpu[1:]):  # rows: unix time, total and idle jiffies (host_cpu.py)
    k = int((a[0] - t0) // 20) * 20
    acc = buck.setdefault(k, [0, 0])
    acc[0] += b[1] - a[1]
    acc[1] += b[2] - a[2]
print("host CPU busy every 20 s:", " ".join(f"{k}:{1 - v[1] / max(1, v[0]):.2f}" for k, v in sorted(buck.items())))
