#!/usr/bin/env bash
# Issue 25, on the GPU machine, one device call (about 5 minutes at the defaults: 28 processes
# took 235 s on an H200 host): is the per-run drift of launch-bound level-3 models
# (docs/baselines.md, "Stored against live") a property of the process, of the core it runs
# on, or of the machine at that time? In the
# committed records L3/30 SwinTransformerV2's eager forward took 25.2 ms in one kbench run and
# 13.7 ms in another on one 4-GPU H100 machine, and L3/20 MobileNetV2 4.6 to 8.5 ms over eight
# H100 evaluations, while within one run the reference and the candidate (the same code)
# agreed within 4%. GPU-bound L3/13 stayed within 1%.
#
# Plain Python, no kbench: tests/gpu/launch_drift.py times one problem's forward in a fresh
# process. ROUNDS rounds (default 6), each starting one process per problem in turn (so a
# change of the machine over time hits every problem alike), unpinned; then PINNED rounds
# (default 2) of the same pinned with taskset to each of three cores (the first, the middle and
# the last allowed). Each process prints its core, that core's clock where sysfs gives it, the
# forward's median, p10/p90 and three block medians (drift inside the process), and two probes
# of its CPU side alone (µs per tiny kernel launch, ms of a fixed Python loop).
#
# Writes, under OUT: drift.jsonl (one line per process, with "pinned"), host.txt (lscpu,
# nvidia-smi clocks before and after), summary.txt: per problem and pinning, the medians'
# range (max/min) and, over the unpinned processes, how the forward's median follows the
# launch probe (Spearman's rho): tests/gpu/drift_summary.py, which also reads a cut-off
# run's lines.
#
#   D=devrun OUT=$OUT/drift bash tests/gpu/run_launch_drift.sh
#   PROBLEMS="20_MobileNetV2 30_SwinTransformerV2 13_DenseNet121TransitionLayer" ROUNDS=6 PINNED=2
set -uo pipefail
cd "$(dirname "$0")/../.."
D=${D:-devrun}
OUT=${OUT:?set OUT}
KB=${KBENCH_KERNELBENCH_DIR:-$D/kernelbench}
PY=${KBENCH_PYTHON:-python3}
PROBLEMS=${PROBLEMS:-"20_MobileNetV2 30_SwinTransformerV2 13_DenseNet121TransitionLayer"}
ROUNDS=${ROUNDS:-6}
PINNED=${PINNED:-2}
CALLS=${CALLS:-200}
mkdir -p "$OUT"
J=$OUT/drift.jsonl
: > "$J"

{
    date -u
    lscpu 2>/dev/null | grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)|MHz" || true
    cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || true
    nvidia-smi --query-gpu=name,uuid,clocks.sm,clocks.mem,clocks.max.sm,power.draw,pstate --format=csv 2>/dev/null || true
} > "$OUT/host.txt"

cores=$("$PY" -c 'import os; print(" ".join(map(str, sorted(os.sched_getaffinity(0)))))')
read -r -a all <<< "$cores"
pins=$(printf "%s\n" "${all[0]}" "${all[$(( ${#all[@]} / 2 ))]}" "${all[$(( ${#all[@]} - 1 ))]}" | sort -nu)

one() { # pinned-core-or-"none" problem
    local pin=$1 p=$2 line pre=()
    [ "$pin" = none ] || pre=(taskset -c "$pin")
    line=$(KBENCH_DRIFT_PINNED=$pin "${pre[@]}" "$PY" tests/gpu/launch_drift.py "$KB/level3/$p.py" "$CALLS" 2>>"$OUT/errors.log")
    if [ -n "$line" ]; then
        echo "$line" >> "$J"
        echo "$pin $p $(printf '%s' "$line" | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print("core", r["core"], "median %.3f ms" % r["median_ms"], "launch %.2f us" % r["launch_us"], "python %.0f ms" % r["python_ms"])')"
    else
        echo "$pin $p: no result (see errors.log)"
    fi
}

# The summary is rewritten after each round, so that a call cut off by its limit keeps one.
summary() { "$PY" tests/gpu/drift_summary.py "$J" > "$OUT/summary.txt"; }
t0=$(date +%s)
for r in $(seq "$ROUNDS"); do
    for p in $PROBLEMS; do one none "$p"; done
    summary
done
for r in $(seq "$PINNED"); do
    for c in $pins; do
        for p in $PROBLEMS; do one "$c" "$p"; done
    done
    summary
done
echo "processes done in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,pstate --format=csv >> "$OUT/host.txt" 2>/dev/null || true
summary
cat "$OUT/summary.txt"
