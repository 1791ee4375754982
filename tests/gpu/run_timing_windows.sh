#!/usr/bin/env bash
# Where a timed call's window goes, on a GPU: the reference agent (its own candidate) on a few
# level-1 problems with KBENCH_TIMING_TRACE (each window's parts on stderr) and the workers'
# trace (each timed call's split), then per problem the unexplained time of each side and the
# excess (judge/clock.rs) by call order. Writes $OUT/windows.txt and windows.tgz.
#
#   D=devrun OUT=/tmp/out SELECT=1/1,1/19,1/23 bash tests/gpu/run_timing_windows.sh
set -uo pipefail
source "$(dirname "$0")/common.sh"
L=/tmp/timing-windows; rm -rf "$L"; mkdir -p "$L" "$OUT"
step "reference agent, traced"
KBENCH_TIMING_TRACE=1 KBENCH_WORKER_TRACE=1 timeout ${LIMIT:-200} $D/kbench run --agent reference \
  --kernelbench "$D/kernelbench" --select "${SELECT:-1/1,1/19,1/23}" --device cuda --gpus 0 \
  --families random --out "$L/run" --quiet 2> "$L/trace.txt" > "$L/run.txt"
echo "rc=$?"
python3 tests/gpu/timing_windows.py "$L/trace.txt" "$L/run/records.jsonl" | tee "$OUT/windows.txt"
tar czf "$OUT/windows.tgz" -C "$L" trace.txt run.txt run/records.jsonl run/logs 2>/dev/null
