#!/usr/bin/env bash
# Issue 26 on a machine of 2 GPUs, when the device time of one session does not cover all 250
# problems on 1 GPU and on 2 (about 1450 s + 800 s of an H200's time): half of the problems
# (HALF=a: the odd ids of every level, 125 problems; HALF=b: the even ids) on 2 GPUs and on 1,
# on the same host, every check (FAMILIES=all), each worker traced. The two halves together
# are the 250, each half's sides measured on one machine. Several device calls of at most 10
# minutes each: the same command again resumes (run.sh's --resume), from the run folders kept
# on the machine or, on a fresh machine, from the small files of the previous call carried
# back in $D/issue26_$HALF (RESTORE; run.sh's COPY_TO layout: run.json, records, secret).
#
#   D=devrun OUT=$OUT HALF=a BUDGET_S=540 bash tests/gpu/run_issue26_half.sh
#   STEPS="warm ref4 ref1" ...   # on a machine of 4 GPUs
#   STEPS="ref2p" ...            # one process per GPU (two at once) against ref_2gpu's one for both
#   ORDER=abba ...               # two blocks, 2-GPU/1-GPU/1-GPU/2-GPU (MULTI=ref4 on 4 GPUs), so a
#                                # drift of the host's speed weighs on both sides alike
#   PROBE=1 ...                  # probe_contention.py first (about 100 s)
#   # here: mkdir -p devrun/issue26_a && tar -xzf <files_at>/bench.tgz -C devrun/issue26_a
#   # and the same command again until results.md shows both runs complete
set -uo pipefail
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; HALF=${HALF:-a}
# BENCH_DIR: the runs on this machine; COPY_DIR: their small files, sent back (tar in $OUT).
B=${BENCH_DIR:-/tmp/bench26_$HALF}; C=${COPY_DIR:-/tmp/bench26copy_$HALF}; RESTORE=${RESTORE:-$D/issue26_$HALF}
mkdir -p "$OUT" "$B"
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_WORKER_TRACE=1
case $HALF in
a) first=1 ;;
b) first=2 ;;
*) echo "HALF must be a or b, not $HALF" >&2; exit 2 ;;
esac
SELECT=$(for l in 1 2 3; do
    last=$([ $l = 3 ] && echo 50 || echo 100)
    seq "$first" 2 "$last" | sed "s|^|$l/|"
done | paste -sd,)
# A fresh machine: take up the runs where the last call (carried back) left them.
if [ ! -d "$B/ref_2gpu" ] && [ -d "$RESTORE" ]; then
    cp -r "$RESTORE"/. "$B"/
    echo "restored $(cat "$B"/*/records.jsonl 2>/dev/null | wc -l) records from $RESTORE"
fi
BUDGET_S=${BUDGET_S:-540}
# PROBE=1: bench/throughput/probe_contention.py first, on the idle machine (about 100 s of the
# budget): how the host's cores and the two GPUs' driver calls slow each other, beside the runs.
if [ "${PROBE:-0}" = 1 ]; then
    mkdir -p "$C"
    P0=$(date +%s)
    timeout 150 python3 bench/throughput/probe_contention.py --seconds 2 > "$C/probe_$(date -u +%H%M%S).json" 2>> "$OUT/probe.err"
    BUDGET_S=$(( BUDGET_S - ($(date +%s) - P0) ))
fi
if [ "${ORDER:-}" = abba ]; then
    # Interleaved: the half's problems in two blocks (alternate positions of SELECT, so each
    # block holds every level), run MULTI (ref2, or ref4 on 4 GPUs) on block 0, ref1 on block 0,
    # ref1 on block 1, MULTI on block 1. A host whose speed drifts over the session (its vCPUs
    # did: archive/runs/2026-11-28-h200x2-half-b) then weighs on both
    # sides alike instead of on the side run later. Each side is one run folder, resumed with
    # the next block's problems; abba_<step>_<block>.done marks a finished quarter, so a call
    # cut by the budget goes on where it stopped. warm runs first in every call.
    MULTI=${MULTI:-ref2}
    IFS=, read -ra ALL <<< "$SELECT"
    BLOCK=("" "")
    for i in "${!ALL[@]}"; do BLOCK[$(( i % 2 ))]+="${BLOCK[$(( i % 2 ))]:+,}${ALL[$i]}"; done
    T0=$(date +%s)
    SELECT=${ALL[0]} STEPS=warm FAMILIES=all D=$D OUT=$B COPY_TO=$C bash bench/throughput/run.sh > "$OUT/run_sh.txt" 2>&1
    for item in "$MULTI:0" ref1:0 ref1:1 "$MULTI:1"; do
        step=${item%%:*}; blk=${item#*:}
        case $step in ref1) name=ref_1gpu ;; ref2) name=ref_2gpu ;; ref4) name=ref_4gpu ;; esac
        [ -f "$B/abba_${step}_$blk.done" ] && continue
        left=$(( BUDGET_S - ($(date +%s) - T0) ))
        if [ "$left" -lt 60 ]; then echo "budget spent before $step on block $blk; call again"; break; fi
        # The run folder goes on with this block: run.sh skips a run whose NAME.done exists.
        rm -f "$B/$name.done"
        SELECT=${BLOCK[$blk]} STEPS=$step FAMILIES=all BUDGET_S=$left D=$D OUT=$B COPY_TO=$C \
            bash bench/throughput/run.sh >> "$OUT/run_sh.txt" 2>&1
        if [ -f "$B/$name.done" ]; then
            touch "$B/abba_${step}_$blk.done"
            cp "$B/abba_${step}_$blk.done" "$C"/
        else
            echo "$step on block $blk stopped before its end; call again"; break
        fi
    done
    echo "bench done: $(cd "$B" && ls abba_*.done 2>/dev/null | paste -sd' ')"
else
    SELECT=$SELECT STEPS=${STEPS:-warm ref2 ref1} FAMILIES=all BUDGET_S=$BUDGET_S D=$D OUT=$B COPY_TO=$C \
        bash bench/throughput/run.sh > "$OUT/run_sh.txt" 2>&1
    echo "bench rc=$?"
fi
# Each multi-GPU run present against the 1-GPU one (STEPS="warm ref4 ref1" on 4 GPUs).
COMPARE=()
for n in 2 4; do
    [ -d "$B/ref_1gpu" ] && [ -d "$B/ref_${n}gpu" ] && COMPARE+=(--scaling ref_1gpu "ref_${n}gpu")
done
python3 bench/throughput/summarize.py --out "$C/results.json" --md "$C/results.md" \
    "${COMPARE[@]}" "$B"/*/ > "$OUT/summarize.txt" 2>&1
for n in 2 4; do
    if [ -d "$C/ref_1gpu" ] && [ -d "$C/ref_${n}gpu" ]; then
        python3 bench/throughput/worker_trace.py --md "$C/worker_trace_1_vs_$n.md" "$C/ref_1gpu" \
            "$C/ref_${n}gpu" > /dev/null 2>> "$OUT/worker_trace.txt"
    fi
done
tar -czf "$OUT/bench.tgz" -C "$C" .
tail -4 "$OUT/run_sh.txt"; sed -n 1,14p "$C/results.md"; grep -A4 "^## Scaling" "$C/results.md" || true
