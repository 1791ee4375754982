#!/usr/bin/env bash
# Issue 24's published load_inline set, one device call (about 6-9 minutes on 16 cores):
# KernelBenchLeaderboard's kernels for level-1 problems 1-6 (30 `load_inline` CUDA kernels, 5
# a problem; $D/lb holds the leaderboard's docs/assets, fetched, never committed), imported
# with `kbench import leaderboard` and replayed on the problems they were written for, every
# check on, from a cold build cache; then the same again with the cache warm. Per pass:
# seconds per kernel amortised, the first verdict's time after kbench started, builds ahead,
# and candidate-worker waits (bench/throughput/summarize.py's compile table). Goals: <= 5 s a
# kernel, first verdict within 60 s, no kernel waiting for a worker while another could start.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_issue24_lb_builds.sh
#   JOBS=4 ...   # --build-jobs (default: kbench's, a build per core but one within memory)
#   SEL=1/1-5 ... # fewer kernels (5 a problem)
#   PASSES=cold ... # the cold pass only (e.g. to compare --build-jobs values, one call each)
#   GPUS=0,1,2,3 ... # --gpus (default 0): issue 26's published set on every GPU, one build pool
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; L=/tmp/lbb; SEL=${SEL:-1/1-6}; BUDGET=${BUDGET:-540}
rm -rf "$L"; mkdir -p "$OUT" "$L"  # a second call in one session starts from nothing
T0=$(date +%s)
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nproc
  nvcc --version | tail -2; "$D/kbench" --version; } > "$OUT/env.txt" 2>&1
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
"$D/kbench" import leaderboard "$D/lb" --out "$L/lbset" > "$OUT/import.txt" 2>&1
JOBS_ARG=(); [ -n "${JOBS:-}" ] && JOBS_ARG=(--build-jobs "$JOBS")
# One kbench cache for both passes, empty before the cold one (as on a first run: no builds,
# no bytecode), so the warm pass finds the cold pass's builds.
export KBENCH_CACHE_DIR=/tmp/lbb-cache
PASSES=${PASSES:-cold warm}
case " $PASSES " in *" cold "*) rm -rf "$KBENCH_CACHE_DIR" ;; esac
for pass in $PASSES; do
    left=$(( BUDGET - ($(date +%s) - T0) ))
    [ "$left" -gt 30 ] || { echo "$pass: budget spent"; break; }
    S=$(date +%s.%N)
    timeout -s INT "$left" "$D/kbench" run --agent replay --replay-dir "$L/lbset" --kernelbench "$L/lbset/problems" \
        --levels 1 --select "$SEL" --device cuda --gpus "${GPUS:-0}" "${JOBS_ARG[@]}" --out "$L/$pass" > "$OUT/$pass.txt" 2>&1
    rc=$?
    E=$(date +%s.%N)
    echo "$S $E $rc" > "$L/$pass.invocations"
    echo "$pass rc=$rc wall=$(awk -v s="$S" -v e="$E" 'BEGIN { printf "%.1f", e - s }')s"
done
# shellcheck disable=SC2046
python3 bench/throughput/summarize.py --out "$OUT/results.json" --md "$OUT/results.md" $(for p in $PASSES; do [ -d "$L/$p" ] && echo "$L/$p"; done) \
    > /dev/null 2> "$OUT/summarize.txt"
mkdir -p "$L/back"; for pass in $PASSES; do
    [ -d "$L/$pass" ] && mkdir -p "$L/back/$pass" && cp "$L/$pass/records.jsonl" "$L/$pass/run.json" "$L/back/$pass/" 2>/dev/null
    cp "$L/$pass.invocations" "$L/back/" 2>/dev/null
done
tar -czf "$OUT/lb_builds.tgz" -C "$L/back" .
sed -n 1,8p "$OUT/results.md"; grep -A5 "^## Compile" "$OUT/results.md"
