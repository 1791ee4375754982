"""Summarises a traced timing (tests/gpu/profiling.sh timing-windows): per problem and side, the
quantiles of each part of a window (staging and flush, the answer, the freeze) from kbench's
KBENCH_TIMING_TRACE lines, and from the records each side's unexplained time (window minus
claim) and the candidate's excess over the reference's, split by which side went first."""

import json
import re
import statistics
import sys

UNIT = {"ns": 1e-3, "µs": 1.0, "ms": 1e3, "s": 1e6}
LINE = re.compile(r"gated (\w+) call (\d+): staged ([\d.]+)(\w+) thawed ([\d.]+)(\w+) answered ([\d.]+)(\w+) frozen ([\d.]+)(\w+)")


def q(v, p):
    v = sorted(v)
    return v[int(p * (len(v) - 1))] if v else float("nan")


def main(trace, records):
    # One block per timing: a new one starts where the call index falls back to 0.
    blocks, last = [], None
    for line in open(trace):
        m = LINE.match(line)
        if not m:
            continue
        g = m.groups()
        us = [float(g[i]) * UNIT[g[i + 1]] for i in (2, 4, 6, 8)]
        call = int(g[1])
        if last is None or (call == 0 and last > 0):
            blocks.append({})
        last = call
        blocks[-1].setdefault(g[0], []).append((us[0], us[2] - us[1], us[3] - us[2]))
    recs = [json.loads(l) for l in open(records) if l.strip()]
    for i, r in enumerate(recs):
        t = r.get("timing")
        name = r["problem"]["name"]
        if not t:
            print(name, r["outcome"])
            continue
        h = t["harness_clock"]
        rs, cs = t["reference"]["samples_ms"], t["candidate"]["samples_ms"]
        ur = [(a - b) * 1e3 for a, b in zip(h["reference_wall_ms"], rs)]
        uc = [(a - b) * 1e3 for a, b in zip(h["candidate_wall_ms"], cs)]
        d = [c - r_ for c, r_ in zip(uc, ur)]
        w = t["warmup"]
        ev = [d[k] for k in range(len(d)) if (k + w) % 2 == 0]
        od = [d[k] for k in range(len(d)) if (k + w) % 2 == 1]
        print(f"{name}: claims ref {statistics.median(rs):.4f} cand {statistics.median(cs):.4f} ms, speedup {t['speedup']:.4f}, "
              f"clock {h['speedup']:.4f}, supported {h['supported']}, excess {h['excess_ms']*1e3:.1f} [{h['excess_low_ms']*1e3:.1f}, {h['excess_high_ms']*1e3:.1f}] us, allowed {h['allowed_ms']*1e3:.1f}")
        print(f"   unexplained ref p10/50/90 {q(ur,.1):.0f}/{q(ur,.5):.0f}/{q(ur,.9):.0f} cand {q(uc,.1):.0f}/{q(uc,.5):.0f}/{q(uc,.9):.0f} us; excess ref-first {statistics.median(ev):.1f} cand-first {statistics.median(od):.1f} us")
        if i < len(blocks):
            for side, parts in blocks[i].items():
                cols = ["staged+flush", "answer", "freeze"]
                print("   " + side + ": " + ", ".join(
                    f"{c} {q([p[j] for p in parts], .5):.0f} ({q([p[j] for p in parts], .1):.0f}-{q([p[j] for p in parts], .9):.0f})"
                    for j, c in enumerate(cols)) + " us")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
