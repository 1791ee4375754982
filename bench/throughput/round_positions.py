#!/usr/bin/env python3
"""Timed calls by their position in a timing round, and the paired speedup without a round's
first calls (Python 3 standard library only).

    round_positions.py [--skip K] [--min-per-round N] RECORDS.jsonl[.gz] ...
    round_positions.py --self-test

For every record whose timing has at least N timed calls a round (default 3: the released
rounds of large cases have 10), prints the median over the rounds of each position's sample,
both sides, and the paired speedup (median over rounds of reference mean / candidate mean, as
kbench computes it: reports/src/timing.rs, paired_round_ratios) as measured and with each
round's first K timed calls left out (default 2). Made for the question the 2026-11-27 H100
runs raised: were the released rounds' first calls slower (the allocator filling again), and
did they move the self-speedup? A summary line counts the timings within ±1% each way.
"""

import argparse
import gzip
import json
import statistics
import sys


def records(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            line = line.strip()
            if line:
                yield json.loads(line)


def paired(ref, cand, per_round, skip=0):
    """Median over rounds of mean(ref round) / mean(cand round), each round less its first
    `skip` calls (a round left empty is dropped)."""
    ratios = []
    for i in range(0, len(ref), per_round):
        r, c = ref[i + skip:i + per_round], cand[i + skip:i + per_round]
        if r and c:
            ratios.append(statistics.mean(r) / statistics.mean(c))
    return statistics.median(ratios) if ratios else None


def by_position(samples, per_round):
    rounds = [samples[i:i + per_round] for i in range(0, len(samples), per_round)]
    return [statistics.median(r[j] for r in rounds if len(r) > j) for j in range(per_round)]


def analyse(recs, skip, min_per_round):
    rows = []
    for rec in recs:
        t = rec.get("timing") or {}
        ref = (t.get("reference") or {}).get("samples_ms")
        cand = (t.get("candidate") or {}).get("samples_ms")
        rounds = t.get("rounds")
        if not ref or not cand or len(ref) != len(cand) or not rounds:
            continue
        per_round = -(-len(ref) // rounds)
        if per_round < min_per_round:
            continue
        p = rec.get("problem") or {}
        rows.append({
            "problem": "L{}/{}".format(p.get("level"), p.get("id")),
            "per_round": per_round,
            "ref_positions": by_position(ref, per_round),
            "cand_positions": by_position(cand, per_round),
            "paired": paired(ref, cand, per_round),
            "paired_skip": paired(ref, cand, per_round, skip),
        })
    return rows


def report(rows, skip):
    out = []
    for r in rows:
        out.append("{} ({} a round): paired {:.4f}, without the first {} {}".format(
            r["problem"], r["per_round"], r["paired"], skip,
            "n/a" if r["paired_skip"] is None else "{:.4f}".format(r["paired_skip"])))
        for side in ("ref", "cand"):
            out.append("  {:4s} by position: {}".format(
                side, " ".join("{:.2f}".format(v) for v in r[side + "_positions"])))
    within = sum(abs(r["paired"] - 1) <= 0.01 for r in rows)
    within_skip = sum(r["paired_skip"] is not None and abs(r["paired_skip"] - 1) <= 0.01 for r in rows)
    out.append("{} timings: within ±1% as measured {}, without each round's first {} calls {}".format(
        len(rows), within, skip, within_skip))
    return "\n".join(out) + "\n"


def self_test():
    failures = []

    def check(what, got, want):
        if got != want:
            failures.append("{}: got {!r}, want {!r}".format(what, got, want))

    # Two rounds of 4 calls: the reference's first call of each round is 5 ms, the rest 1 ms;
    # the candidate's are all 1 ms. Measured: each round 2 / 1 = 2.0; without the first: 1.0.
    ref = [5.0, 1.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0]
    cand = [1.0] * 8
    rec = {"problem": {"level": 1, "id": 87}, "timing": {"rounds": 2, "reference": {"samples_ms": ref},
                                                         "candidate": {"samples_ms": cand}}}
    short = {"problem": {"level": 1, "id": 1}, "timing": {"rounds": 4, "reference": {"samples_ms": ref},
                                                          "candidate": {"samples_ms": cand}}}
    rows = analyse([rec, short, {"problem": {}, "timing": None}], skip=1, min_per_round=3)
    check("rounds of 2 left out", [r["problem"] for r in rows], ["L1/87"])
    check("paired as kbench", rows[0]["paired"], 2.0)
    check("paired without the first", rows[0]["paired_skip"], 1.0)
    check("positions", rows[0]["ref_positions"], [5.0, 1.0, 1.0, 1.0])
    text = report(rows, 1)
    check("summary", text.strip().splitlines()[-1],
          "1 timings: within ±1% as measured 0, without each round's first 1 calls 1")
    check("skipping every call", paired(ref, cand, 4, skip=4), None)
    check("skipping every call is reported", "without the first 4 n/a" in report(
        analyse([rec], skip=4, min_per_round=3), 4), True)
    if failures:
        for f in failures:
            print("FAIL", f)
        return 1
    print("self-test: ok")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="*")
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--min-per-round", type=int, default=3)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.records:
        ap.error("give one or more records.jsonl files")
    rows = []
    for path in args.records:
        rows += analyse(records(path), args.skip, args.min_per_round)
    sys.stdout.write(report(rows, args.skip))
    return 0


if __name__ == "__main__":
    sys.exit(main())
