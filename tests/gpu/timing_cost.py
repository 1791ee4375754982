"""The table of tests/gpu/profiling.sh timing-cost: per problem the timing phase's seconds and the
reference agent's self-speedup, before (sbs-old) and after (sbs-new); the ratio of the summed
timing phases; and over every run with the new binary, how many self-speedups lie within 1%."""

import json
import os
import statistics
import sys


def load(path):
    p = os.path.join(path, "records.jsonl")
    if not os.path.exists(p):
        return {}
    out = {}
    for line in open(p):
        if line.strip():
            r = json.loads(line)
            out[f"L{r['problem']['level']}/{r['problem']['id']}"] = r
    return out


def passes(root, prefix):
    """Every pass of one binary: sbs-old, sbs-old2, ... (alternating passes of one call)."""
    names = sorted(n for n in os.listdir(root) if n == prefix or (n.startswith(prefix) and n[len(prefix):].isdigit()))
    return [load(os.path.join(root, n)) for n in names]


def pooled(runs):
    """Per problem timed in every pass: the first pass's record, with the passes' mean timing
    phase (`phases.timing_s`) and the list of them."""
    if not runs:
        return {}
    out = {}
    for k in set.intersection(*(set(r) for r in runs)):
        times = [r[k]["phases"]["timing_s"] for r in runs]
        rec = json.loads(json.dumps(runs[0][k]))
        rec["phases"]["timing_s"] = sum(times) / len(times)
        rec["timing_passes"] = times
        out[k] = rec
    return out


def main(root):
    old_runs, new_runs = passes(root, "sbs-old"), passes(root, "sbs-new")
    old, new = pooled(old_runs), pooled(new_runs)
    if len(old_runs) > 1 or len(new_runs) > 1:
        print(f"passes pooled: {len(old_runs)} old, {len(new_runs)} new (timing seconds are the passes' mean)\n")
        for name, runs in (("old", old_runs), ("new", new_runs)):
            keys = set(old) & set(new)
            print(f"{name} passes, timing phases summed: " + ", ".join(f"{sum(r[k]['phases']['timing_s'] for k in keys):.2f} s" for r in runs))
        print()
    sample = load(os.path.join(root, "sample"))
    print("| problem | timing s old | timing s new | new/old | timed calls new | self-speedup old | self-speedup new | clock supports | excess us [99%] |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    to = tn = 0.0
    for k in sorted(set(old) | set(new), key=lambda k: (k.split("/")[0], int(k.split("/")[1]))):
        o, n = old.get(k), new.get(k)
        ot = o["phases"]["timing_s"] if o else float("nan")
        nt = n["phases"]["timing_s"] if n else float("nan")
        if o and n:
            to += ot
            tn += nt
        so = (o or {}).get("timing") or {}
        sn = (n or {}).get("timing") or {}
        h = sn.get("harness_clock") or {}
        exc = f"{h['excess_ms']*1e3:.1f} [{h['excess_low_ms']*1e3:.1f}, {h['excess_high_ms']*1e3:.1f}]" if h else "-"
        calls = len((sn.get("candidate") or {}).get("samples_ms") or [])
        print(f"| {k} | {ot:.2f} | {nt:.2f} | {nt/ot if ot else float('nan'):.3f} | {calls} | {so.get('speedup', float('nan')):.4f} | "
              f"{sn.get('speedup', float('nan')):.4f} | {h.get('speedup', float('nan')):.4f} | {exc} |")
    if to:
        print(f"\ntiming phases summed over the problems timed by both: old {to:.2f} s, new {tn:.2f} s, new/old {tn/to:.3f}")
    allnew = [r for run in new_runs for r in run.values()] + list(sample.values())
    sp = [r["timing"]["speedup"] for r in allnew if r.get("timing")]
    if sp:
        within = sum(abs(s - 1) <= 0.01 for s in sp)
        flagged = [f"L{r['problem']['level']}/{r['problem']['id']} {r['outcome'].get('flag') or r['outcome']['kind']}"
                   for r in allnew if r["outcome"]["kind"] != "ok"]
        calls = [len(r["timing"]["candidate"]["samples_ms"]) for r in allnew if r.get("timing")]
        print(f"new binary, timed calls per kernel: median {statistics.median(calls)}, {sum(c < 100 for c in calls)} of {len(calls)} settled before 100")
        print(f"new binary, reference agent: {len(sp)} timed, {within} within 1% ({100*within/len(sp):.1f}%), median {statistics.median(sp):.4f}, "
              f"range {min(sp):.4f}-{max(sp):.4f}; not ok: {flagged or 'none'}")
        out = [f"L{r['problem']['level']}/{r['problem']['id']} {r['timing']['speedup']:.4f}" for r in allnew
               if r.get("timing") and abs(r["timing"]["speedup"] - 1) > 0.01]
        if out:
            print("beyond 1%: " + ", ".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
