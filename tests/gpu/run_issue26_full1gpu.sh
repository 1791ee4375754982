#!/usr/bin/env bash
# Issue 26's baseline: the full 250 problems with every check on ONE GPU (about 1700 s, so
# three or four device calls), to set beside the 4-GPU run of
# archive/runs/2026-11-27-h100x4-worker-threads-full250/full250 (497 s). Each call runs
# bench/throughput/run.sh's ref250 step until BUDGET_S, then sends its state back
# ($OUT/state.tgz: records, run.json, the run's secret for --resume, invocations); put that file
# at $D/full1gpu_state.tgz before the next call and the run continues where it stopped (on a
# fresh machine too). Every invocation's process wall is in ref250.invocations, so the
# summary's process wall counts every call's kbench time and no gap between calls.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_issue26_full1gpu.sh      # repeat until "done"
#   here, between calls: cp <files_at>/state.tgz devrun/full1gpu_state.tgz
set -uo pipefail
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; B=/tmp/full1gpu
mkdir -p "$OUT" "$B"
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3}
# A fresh machine: restore the earlier calls' state (only into an empty folder).
if [ -f "$D/full1gpu_state.tgz" ] && [ -z "$(ls -A "$B")" ]; then
    tar -xzf "$D/full1gpu_state.tgz" -C "$B" && echo "restored the earlier calls' state"
fi
STEPS=ref250 FAMILIES=all BUDGET_S=${BUDGET_S:-540} D=$D OUT=$B \
    bash bench/throughput/run.sh > "$OUT/run_sh.txt" 2>&1
rc=$?
echo "bench rc=$rc (75: stopped at the budget, call again)"
[ -f "$B/ref250.done" ] && echo done
python3 bench/throughput/summarize.py --out "$B/results.json" --md "$B/results.md" "$B"/ref250/ \
    > "$OUT/summarize.txt" 2>&1
tar -czf "$OUT/state.tgz" -C "$B" --exclude='*/logs' .
cp "$B/results.md" "$OUT/" 2>/dev/null
tail -3 "$OUT/run_sh.txt"; sed -n 1,8p "$B/results.md"
