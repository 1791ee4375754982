#!/usr/bin/env bash
# Issue 26 on a machine of 4 GPUs, one device call (about 8 minutes): the 40-problem sample of
# archive/runs/2026-11-27-h100x4-scaling with every check, warm first (so no compared run
# pays the machine's first start), then on 1 GPU, on 4, and on 4 again with every worker's
# torch CPU threads bounded (WORKER_THREADS, default 4): the A/B of the suspected cause of
# the 17% longer problems with four at once. Every worker traces its commands
# (KBENCH_WORKER_TRACE=1, the same on every side), and bench/throughput/worker_trace.py says
# which command's seconds grew from one GPU to four, or whether the time went between
# commands. Results (a tarball of the bench's small files and logs) under $OUT.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_issue26_x4.sh
#   STEPS="warm ref1 ref2 ref4" ...   # other steps of bench/throughput/run.sh; the summary
#                                     # compares each multi-GPU run present with ref_1gpu
#   SAMPLE=all STEPS="warm ref4" ...  # all 250 problems instead of the 40 (about 500 s on 4
#                                     # H100s; its 1-GPU side: run_issue26_full1gpu.sh)
set -uo pipefail
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; B=/tmp/bench26; C=/tmp/bench26copy
mkdir -p "$OUT"
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_WORKER_TRACE=1
SELECT=1/5,1/10,1/15,1/20,1/25,1/30,1/35,1/40,1/45,1/50,1/55,1/60,1/65,1/70,1/75,1/80,1/85,1/90,1/95,1/100
SELECT=$SELECT,2/10,2/20,2/30,2/40,2/50,2/60,2/70,2/80,2/90,2/100,3/5,3/10,3/15,3/20,3/25,3/30,3/35,3/40,3/45,3/50
[ "${SAMPLE:-40}" = all ] && SELECT=""
SELECT=$SELECT STEPS=${STEPS:-warm ref1 ref4 ref4t} FAMILIES=all BUDGET_S=${BUDGET_S:-560} D=$D OUT=$B COPY_TO=$C \
    bash bench/throughput/run.sh > "$OUT/run_sh.txt" 2>&1
echo "bench rc=$?"
COMPARE=()
for run in ref_2gpu ref_4gpu ref_4gpu_threads; do
    [ -d "$B/$run" ] && COMPARE+=(--scaling ref_1gpu "$run")
done
[ -d "$B/ref_4gpu" ] && [ -d "$B/ref_4gpu_threads" ] && COMPARE+=(--pair ref_4gpu ref_4gpu_threads)
python3 bench/throughput/summarize.py --out "$C/results.json" --md "$C/results.md" \
    "${COMPARE[@]}" "$B"/*/ > "$OUT/summarize.txt" 2>&1
python3 bench/throughput/worker_trace.py --md "$C/worker_trace_1_vs_4.md" "$C/ref_1gpu" "$C/ref_4gpu" \
    > /dev/null 2> "$OUT/worker_trace.txt"
if [ -d "$B/ref_4gpu_threads" ]; then
    python3 bench/throughput/worker_trace.py --md "$C/worker_trace_4_vs_4t.md" "$C/ref_4gpu" "$C/ref_4gpu_threads" \
        > /dev/null 2>> "$OUT/worker_trace.txt"
fi
tar -czf "$OUT/bench.tgz" -C "$C" .
tail -4 "$OUT/run_sh.txt"; sed -n 1,12p "$C/results.md"; grep -A3 "^## Scaling" "$C/results.md"
head -20 "$C/worker_trace_1_vs_4.md"
