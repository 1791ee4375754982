"""Tables of a round warm-up run (run.sh): per problem and run, the reference's median, the
timing phase's seconds, the reference's self-speedup and, in runs without an opening call,
how much slower a round's first timed call was than its second (both sides).

    python3 bench/round_warmup/analyze.py RESULTS_DIR > RESULTS_DIR/results.md
"""

import glob
import json
import os
import statistics as st
import sys


def first_over_second(samples):
    """Median of the rounds' first calls over the median of their second calls (2 a round)."""
    first, second = samples[0::2], samples[1::2]
    return st.median(first) / st.median(second), st.median(first) - st.median(second)


def main(root):
    runs = {}
    for path in sorted(glob.glob(os.path.join(root, "run*", "records.jsonl"))):
        name = os.path.basename(os.path.dirname(path))
        for line in open(path):
            r = json.loads(line)
            t, p = r.get("timing"), r["problem"]
            if t:
                runs.setdefault(f"L{p['level']}/{p['id']}", {})[name] = (t, r.get("phases") or {})
    env = open(os.path.join(root, "env.txt")).read().strip() if os.path.exists(os.path.join(root, "env.txt")) else ""
    print("# Round warm-up: a round's cold first call, with and without an opening call\n")
    print("```\n" + env + "\n```\n")
    print("| problem | run | round warm-up | reference median ms | timing s | self-speedup | "
          "first/second, reference | candidate | first - second, reference us |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    order = sorted(runs.items(), key=lambda kv: next(iter(kv[1].values()))[0]["reference"]["median_ms"])
    totals = {}
    for key, by_run in order:
        for name, (t, ph) in sorted(by_run.items()):
            rf, rd = first_over_second(t["reference"]["samples_ms"])
            cf, _ = first_over_second(t["candidate"]["samples_ms"])
            rw = t.get("round_warmup")
            totals.setdefault(rw, []).append(ph.get("timing_s", 0.0))
            print(f"| {key} | {name} | {rw} | {t['reference']['median_ms']:.4f} | {ph.get('timing_s', 0.0):.2f} | "
                  f"{t['speedup']:.4f} | {rf:.4f} | {cf:.4f} | {rd * 1000:.1f} |")
    print()
    for rw, xs in sorted(totals.items(), key=lambda kv: str(kv[0])):
        print(f"- round warm-up {rw}: {len(xs)} timings, {sum(xs):.1f} s in all")


def self_test():
    """Synthetic rounds whose first call is 40 us slower: the ratio and the difference come
    out as made; then a whole results folder is tabled."""
    import tempfile

    samples = []
    for r in range(50):
        base = 5.0 + 0.001 * (r % 7)
        samples += [base + 0.040, base]
    ratio, diff = first_over_second(samples)
    assert abs(diff - 0.040) < 1e-9, diff
    assert abs(ratio - (5.043 / 5.003)) < 1e-3, ratio
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "run1-rw0"))
        rec = {"problem": {"level": 1, "id": 30}, "phases": {"timing_s": 4.2},
               "timing": {"round_warmup": 0, "speedup": 1.0, "reference": {"median_ms": 5.0, "samples_ms": samples},
                          "candidate": {"median_ms": 5.0, "samples_ms": samples}}}
        with open(os.path.join(d, "run1-rw0", "records.jsonl"), "w") as f:
            f.write(json.dumps(rec) + "\n")
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            main(d)
        text = buf.getvalue()
        assert "| L1/30 | run1-rw0 | 0 | 5.0000 | 4.20 | 1.0000 |" in text, text
        assert "| 40.0 |" in text, text
    print("self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else ".")
