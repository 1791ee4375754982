#!/usr/bin/env bash
# Issue 24 on the GPU: where an every-check evaluation's time and GPU memory go on large
# level-1 problems. Runs the reference agent (every family) on SELECT with bubblewrap, and
# writes under $OUT as it goes: the records' per-case times (case_times.txt), the reference
# workers' make_case lines (seconds per part, peak allocation, free memory at the start),
# the device's used memory sampled every 200 ms while kbench runs (smi.csv), and the records.
#
#   D=devrun OUT=/tmp/out SELECT=1/20,1/30 bash tests/gpu/run_issue24_profile.sh
set -uo pipefail
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; T=/tmp/runs24p
SELECT=${SELECT:-1/20,1/30}; NAME=${NAME:-profile}
rm -rf "$T/$NAME"; mkdir -p "$OUT" "$T"
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -lms 200 > "$OUT/${NAME}_smi.csv" &
SMI=$!
echo "== $NAME $SELECT $(date -u +%T)"
S=$(date +%s)
timeout ${LIMIT:-400} $D/kbench run --agent reference --kernelbench $D/kernelbench --select "$SELECT" \
  --device cuda --gpus 0 --out $T/$NAME ${KBENCH_ARGS:-} > "$OUT/${NAME}.txt" 2>&1
echo "exit $? in $(( $(date +%s) - S )) s"; tail -4 "$OUT/${NAME}.txt"
kill $SMI
cp $T/$NAME/records.jsonl "$OUT/${NAME}_records.jsonl" 2>/dev/null
python3 tests/gpu/case_times.py "$T/$NAME/records.jsonl" | tee "$OUT/${NAME}_case_times.txt"
find $T/$NAME -name "*.log" -exec grep -H "make_case" {} + 2>/dev/null | cut -c1-300 > "$OUT/${NAME}_worker_lines.txt"
tail -40 "$OUT/${NAME}_worker_lines.txt"
sort -t, -k2 -n "$OUT/${NAME}_smi.csv" | tail -1 | sed 's/^/peak used: /'
