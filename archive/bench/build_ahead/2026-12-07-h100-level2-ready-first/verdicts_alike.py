"""Whether the runs of this folder gave each kernel the same outcome (kind and flag): every
pair of runs over the kernels both judged. Usage: python3 verdicts_alike.py"""
import gzip, itertools, json
runs = ["call1-level2-long-head", "call2-ready-first", "call3-in-order"]
out = {}
for r in runs:
    out[r] = {}
    for l in gzip.open(f"{r}/lb_cold.records.jsonl.gz", "rt"):
        x = json.loads(l)
        o = x["outcome"]
        out[r][x["candidate"]["name"]] = o["kind"] + (":" + o["flag"] if o.get("flag") else "")
for a, b in itertools.combinations(runs, 2):
    both = sorted(set(out[a]) & set(out[b]))
    differ = [(k, out[a][k], out[b][k]) for k in both if out[a][k] != out[b][k]]
    print(f"{a} / {b}: {len(both)} kernels judged by both, {len(differ)} differ")
    for d in differ:
        print("   ", *d)
