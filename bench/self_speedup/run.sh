#!/usr/bin/env bash
# Equal code gets equal time, on the CPU: the reference agent (each problem's own Model as its
# candidate) on the embedded smoke suite, RUNS times (30), each run a fresh `kbench run`
# (random family only: the cases do not change what is timed). Writes $OUT/runs.jsonl (a line
# per run: every problem's self-speedup and the harness clock's excess) and $OUT/results.md
# and results.json (analyze.py): the median self-speedup over the suite, per run and over all
# runs, and a sign test of the runs' medians against 1 (does either side win more often than
# chance?).
#
#   OUT=archive/bench/self_speedup/$(date +%F)-cpu RUNS=30 bash bench/self_speedup/run.sh
#
# Needs the machine to itself: anything else running skews single-threaded CPU timings.
set -uo pipefail
cd "$(dirname "$0")/../.."
KBENCH=${KBENCH:-target/release/kbench}
OUT=${OUT:-/tmp/self_speedup}
RUNS=${RUNS:-30}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/kbench-self-speedup-XXXX)
: > "$OUT/runs.jsonl"
{ uname -r; nproc; $KBENCH --version; } > "$OUT/env.txt" 2>&1
for i in $(seq 1 "$RUNS"); do
  rm -rf "$W/run"
  $KBENCH run --agent reference --suite smoke --device cpu --families random --out "$W/run" --quiet \
    > "$W/log" 2>&1
  python3 - "$W/run/records.jsonl" "$i" >> "$OUT/runs.jsonl" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    t = r.get("timing") or {}
    h = t.get("harness_clock") or {}
    rows[f"L{r['problem']['level']}/{r['problem']['id']}"] = {
        "outcome": r["outcome"].get("flag") or r["outcome"]["kind"],
        "speedup": t.get("speedup"),
        "excess_us": None if not h else h["excess_ms"] * 1e3,
        "excess_low_us": None if not h else h["excess_low_ms"] * 1e3,
        "supported": h.get("supported"),
    }
print(json.dumps({"run": int(sys.argv[2]), "problems": rows}))
PY
  echo "run $i/$RUNS done"
done
rm -rf "$W"
python3 bench/self_speedup/analyze.py "$OUT/runs.jsonl" --json "$OUT/results.json" | tee "$OUT/results.md"
