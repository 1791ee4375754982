"""Analysis of bench/self_speedup/run.sh: the reference agent's self-speedup over the smoke
suite, run after run. Goal (the CPU's): the median within 2% of 1, and no side favoured: a
two-sided sign test of the runs' medians against 1 with p > 0.05. Also counts the problems the
harness clock's check flagged (it should flag none: each side runs the same code)."""

import argparse
import json
import math
import statistics
import sys


def sign_test(values, centre=1.0):
    """Two-sided exact binomial p of as many values above `centre` as seen (ties dropped)."""
    above = sum(v > centre for v in values)
    below = sum(v < centre for v in values)
    n = above + below
    if n == 0:
        return above, below, 1.0
    k = min(above, below)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return above, below, min(1.0, 2 * tail)


def self_test():
    """The sign test's p against exact values, and a favoured side found."""
    assert sign_test([1.1] * 5 + [0.9] * 5)[2] == 1.0
    above, below, p = sign_test([1.01] * 9 + [0.99])
    assert (above, below) == (9, 1) and abs(p - 22 / 1024) < 1e-12, p
    assert sign_test([1.0, 1.0])[2] == 1.0  # ties say nothing
    assert sign_test([1.02] * 30)[2] < 1e-8
    print("self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("--json")
    a = ap.parse_args()
    runs = [json.loads(line) for line in open(a.runs) if line.strip()]
    medians, every, flagged, excess = [], [], [], []
    for run in runs:
        sp = [p["speedup"] for p in run["problems"].values() if p["speedup"]]
        if sp:
            medians.append(statistics.median(sp))
        every += sp
        for k, p in run["problems"].items():
            if p["outcome"] != "ok":
                flagged.append(f"run {run['run']} {k} {p['outcome']}")
            if p["excess_us"] is not None:
                excess.append(p["excess_us"])
    above, below, p = sign_test(medians)
    overall = statistics.median(every) if every else float("nan")
    out = {
        "runs": len(runs),
        "median_of_all": overall,
        "run_medians": medians,
        "median_of_run_medians": statistics.median(medians) if medians else None,
        "runs_above_1": above,
        "runs_below_1": below,
        "sign_test_p": p,
        "within_2pct": abs(overall - 1) <= 0.02,
        "no_side_favoured": p > 0.05,
        "not_ok": flagged,
        "excess_us_median": statistics.median(excess) if excess else None,
        "excess_us_p10_p90": [sorted(excess)[len(excess) // 10], sorted(excess)[9 * len(excess) // 10]] if excess else None,
    }
    print(f"{len(runs)} runs of the smoke suite, the reference agent as its own candidate (CPU)")
    print(f"- median self-speedup over every problem of every run: {overall:.4f} (goal within 2% of 1: {'yes' if out['within_2pct'] else 'NO'})")
    print(f"- runs whose median is above 1: {above}, below: {below}; two-sided sign test p = {p:.3f} (goal p > 0.05: {'yes' if out['no_side_favoured'] else 'NO'})")
    print(f"- harness clock excess over every problem: median {out['excess_us_median']} us, p10-p90 {out['excess_us_p10_p90']}")
    print(f"- not ok: {len(flagged)}" + (": " + "; ".join(flagged[:20]) if flagged else ""))
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
