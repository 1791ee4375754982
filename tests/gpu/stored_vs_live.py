#!/usr/bin/env python3
"""Checks that speedups against stored baselines equal live ones within noise.

    stored_vs_live.py STORED_RUN LIVE_RUN [--json FILE]

Both are `kbench run` directories of the same problems and the `reference` agent (each
problem's own code as the kernel): STORED_RUN with `--baselines MODES` (times from the store,
origin `measured`), LIVE_RUN with `--baselines live,MODES` (every baseline measured in that
run, origin `live`). For each problem and mode, with S = stored baseline / candidate (first
run) and L = live baseline / candidate (second run), it prints S, L and S/L, and splits S/L
into its two parts: stored / live baseline time, and the candidate's time in the first run /
in the second.

The noise that S/L is judged against is that of measuring the same code again: each
problem's kernel (its own eager code) was timed in both runs, two processes minutes apart, so
|log(candidate in the first run / in the second)| is how far one honest measurement moves
between runs. S/L carries two such moves (the candidate's, and the baseline's between the
store's machine and this one), so a mode's stored speedups agree with live ones when the
median of |log S/L| is at most twice that noise's median and no problem's is beyond twice its
maximum. The live run's eager speedup (eager timed by `baselines measure`, beside the compiled
modes, against the same code timed as the run's kernel) is printed too: 1 but for noise and
for any difference between the two ways eager is timed. The script says, per mode, whether
the speedups agree, and exits 1 if any mode does not (2 on unusable input).

Hand-written beside kbench's own report because this is a two-run comparison of one field kbench
writes (`baselines.<mode>`), used by one GPU script; stdlib only, so it runs with the device's
python3 as it is.
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path


def records(run):
    path = Path(run) / "records.jsonl"
    if not path.is_file():
        fail(f"{path} is missing: give a `kbench run` directory")
    out = {}
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}:{n}: not JSON ({e})")
            p = r["problem"]
            key = (p.get("level"), p.get("id"), p.get("name"))
            if r.get("candidate", {}).get("agent") != "reference":
                fail(f"{path}:{n}: agent {r.get('candidate', {}).get('agent')!r}; both runs must use `--agent reference`")
            out[key] = r
    return out


def fail(msg):
    print(f"stored_vs_live: {msg}", file=sys.stderr)
    sys.exit(2)


def pct(abs_log):
    return f"{100 * (math.exp(abs_log) - 1):.2f}%"


def median_ms(r):
    t = r.get("timing") or {}
    return (t.get("candidate") or {}).get("median_ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stored")
    ap.add_argument("live")
    ap.add_argument("--json", help="write the figures here as JSON")
    a = ap.parse_args()
    stored, live = records(a.stored), records(a.live)
    rows = []
    unusable = []
    # The noise: the same code (each problem's kernel) timed in the two runs, one value per
    # problem whatever its modes.
    noise = []
    for key in sorted(set(stored) | set(live), key=lambda k: (k[0] or 0, k[1] or 0)):
        s, l = stored.get(key), live.get(key)
        name = f"L{key[0]}/{key[1]} {key[2]}"
        if s is None or l is None:
            unusable.append(f"{name}: only in the {'live' if s is None else 'stored'} run")
            continue
        cs, cl = median_ms(s), median_ms(l)
        if cs and cl:
            noise.append(abs(math.log(cs / cl)))
        for mode in sorted(set(s.get("baselines", {})) | set(l.get("baselines", {})) | set(s.get("baselines_missing", {})) | set(l.get("baselines_missing", {}))):
            bs, bl = s.get("baselines", {}).get(mode), l.get("baselines", {}).get(mode)
            if bs is None or bl is None:
                why = s.get("baselines_missing", {}).get(mode) or l.get("baselines_missing", {}).get(mode) or f"outcome {s['outcome']} / {l['outcome']}"
                unusable.append(f"{name} {mode}: no speedup in both runs ({why})")
                continue
            if bs.get("origin") != "measured" or bl.get("origin") != "live":
                fail(f"{name} {mode}: origins {bs.get('origin')!r} and {bl.get('origin')!r}; expected 'measured' (the store) and 'live'")
            rows.append({
                "problem": name, "mode": mode,
                "stored_speedup": bs["speedup"], "live_speedup": bl["speedup"],
                "ratio": bs["speedup"] / bl["speedup"],
                "stored_ms": bs["baseline_ms"], "live_ms": bl["baseline_ms"],
                "baseline_ratio": bs["baseline_ms"] / bl["baseline_ms"],
                "candidate_ratio": cs / cl if cs and cl else None,
            })
    # Which GPU timed each run's kernels (records name it since kbench recorded it; none on
    # the CPU): the two runs of one call share it.
    for name, recs in ((Path(a.stored).name, stored), (Path(a.live).name, live)):
        gpus = sorted({r.get("env", {}).get("gpu_uuid") or "not named" for r in recs.values()})
        print(f"{name} run timed on: {', '.join(gpus)}")
    if not rows:
        print("\n".join(unusable))
        fail("no problem has a speedup for a mode in both runs")
    self_eager = [r["live_speedup"] for r in rows if r["mode"] == "eager"]
    print(f"{'problem':<48} {'mode':<13} {'stored':>8} {'live':>8} {'S/L':>7} {'base s/l':>9} {'cand 1/2':>9}")
    for r in rows:
        cr = f"{r['candidate_ratio']:.3f}" if r["candidate_ratio"] else "-"
        print(f"{r['problem'][:48]:<48} {r['mode']:<13} {r['stored_speedup']:8.3f} {r['live_speedup']:8.3f} {r['ratio']:7.3f} {r['baseline_ratio']:9.3f} {cr:>9}")
    for u in unusable:
        print(f"left out: {u}")
    summary = {"noise": None, "live_eager_speedup": None, "modes": {}}
    if self_eager:
        gm = math.exp(statistics.fmean(map(math.log, self_eager)))
        summary["live_eager_speedup"] = {"n": len(self_eager), "geomean": gm, "min": min(self_eager), "max": max(self_eager)}
        print(f"\nlive run, eager baseline over the same code as the run's kernel: geomean {gm:.4f}, {min(self_eager):.3f} to {max(self_eager):.3f}")
    if not noise:
        print("no problem's kernel was timed in both runs: the noise is unknown")
        verdict_ok = False
    else:
        nmed, nmax = statistics.median(noise), max(noise)
        summary["noise"] = {"n": len(noise), "median_abs_log": nmed, "max_abs_log": nmax}
        print(f"noise (the same kernel timed in the two runs): n={len(noise)}, median {pct(nmed)}, max {pct(nmax)}")
        verdict_ok = True
        for mode in sorted({r["mode"] for r in rows}):
            logs = [math.log(r["ratio"]) for r in rows if r["mode"] == mode]
            d = [abs(x) for x in logs]
            gm = math.exp(statistics.fmean(logs))
            dmed, dmax = statistics.median(d), max(d)
            ok = dmed <= 2 * nmed and dmax <= 2 * nmax
            verdict_ok &= ok
            summary["modes"][mode] = {"n": len(d), "geomean_ratio": gm, "median_abs_log": dmed, "max_abs_log": dmax, "within_noise": ok}
            print(f"{mode:<13} n={len(d)}: stored/live speedup geomean {gm:.4f}, median |diff| {pct(dmed)}, max {pct(dmax)}: {'within noise' if ok else 'NOT within noise'} (bounds {pct(2 * nmed)}, {pct(2 * nmax)})")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "left_out": unusable, "summary": summary}, indent=1))
    sys.exit(0 if verdict_ok else 1)


if __name__ == "__main__":
    main()
