#!/usr/bin/env bash
# Issue 24: the GPU check of three changes measured only in simulation or not at all, one
# device call (about 7-9 minutes on one H100, 16 cores):
#   1. released rounds opening with --warmup untimed calls (0d3a345): the reference agent,
#      random cases, traced, on the 26 level-1 problems timed in released rounds on
#      2026-11-27; self-speedups, and round_positions.py on their records (were 33 of 41
#      within 1% with one opening call);
#   2. the build pool's default (8813348: a build per core but one, half at first) and two
#      candidate workers started ahead (968b9d5): the leaderboard set of
#      run_issue24_lb_builds.sh, cold then warm, default --build-jobs (was, with 8 builds at
#      once and one worker ahead: 293 s cold, first verdict 79 s; 58 s warm, 0.43 s of
#      worker wait a kernel).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_issue24_verify.sh   # -> $OUT/verify.tgz
#   STEPS="released lb" (default both), BUDGET (seconds for the whole call, default 560)
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
D=${D:-devrun}; BUDGET=${BUDGET:-560}; STEPS=${STEPS:-released lb}
# Everything goes into a folder of its own, packed into $OUT/verify.tgz at the end (the
# device tool brings back a few files only); nothing else under $OUT is touched.
BACK=${OUT:-/tmp/out}; OUT=$BACK/verify
rm -rf "$OUT"; mkdir -p "$OUT"
T0=$(date +%s)
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
RELEASED=1/5,1/19,1/20,1/21,1/23,1/25,1/27,1/29,1/30,1/31,1/33,1/35,1/37,1/39,1/41,1/47,1/49,1/51,1/53,1/63,1/87,1/89,1/90,1/91,1/93,1/97
for step in $STEPS; do
    left=$(( BUDGET - ($(date +%s) - T0) ))
    case $step in
    released)
        # Leaves 300 s for the lb step when it follows; resumable (run.sh keeps /tmp/verify):
        # a second call on a warm machine goes on.
        budget=$left
        case " $STEPS " in *" released "*" lb "*) budget=$(( left - 300 )) ;; esac
        if [ "$budget" -lt 60 ]; then echo "released: budget spent ($budget s)"; continue; fi
        KBENCH_WORKER_TRACE=1 SELECT=$RELEASED STEPS="warm ref1" FAMILIES=random BUDGET_S=$budget \
            OUT=/tmp/verify COPY_TO="$OUT/released" bash bench/throughput/run.sh > "$OUT/released.txt" 2>&1
        echo "released: rc=$?"
        python3 bench/throughput/round_positions.py /tmp/verify/ref_1gpu/records.jsonl > "$OUT/round_positions.txt" 2>&1
        tail -1 "$OUT/round_positions.txt"
        python3 bench/throughput/summarize.py --md "$OUT/released.md" /tmp/verify/ref_1gpu > /dev/null 2>&1
        grep -A2 "self-speedup outside" "$OUT/released.md"
        python3 bench/throughput/worker_trace.py --md "$OUT/worker_trace.md" /tmp/verify/ref_1gpu > /dev/null 2>&1
        rm -rf "$OUT/released/ref_1gpu/logs" "$OUT/released/warm"
        ;;
    lb)
        if [ "$left" -lt 90 ]; then echo "lb: budget spent ($left s)"; continue; fi
        mkdir -p "$OUT/lb"
        D=$D OUT="$OUT/lb" BUDGET=$(( left - 10 )) bash tests/gpu/run_issue24_lb_builds.sh > "$OUT/lb/log.txt" 2>&1
        echo "lb: rc=$?"; grep -E "^(cold|warm) rc" "$OUT/lb/log.txt"
        grep -A4 "^## Compile" "$OUT/lb/results.md" | tail -2
        ;;
    *) echo "unknown step $step (released, lb)"; exit 2 ;;
    esac
done
tar -czf "$BACK/verify.tgz" -C "$OUT" . && rm -rf "$OUT"
