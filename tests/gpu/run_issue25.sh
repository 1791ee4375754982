#!/usr/bin/env bash
# Issue 25 on the GPU machine, one device call (under 10 minutes): measure stored baselines
# into the repository's own store (baselines/data in the device's copy of the tree), stopping
# cleanly before BUDGET seconds, then print the coverage of all 250 problems and send the
# store back. Measuring resumes: each call measures only what the store still lacks (times
# and recorded failures both count as done), so repeat the call until the coverage table shows
# no gaps, on an H100 and then on an H200.
#
#   D=devrun OUT=/tmp/out MODES=max-autotune LEVELS=2 BUDGET=500 bash tests/gpu/run_issue25.sh
#   GPUS=0,1,2,3 ... on a machine of four GPUs
#
# Then, here: tar -xzf <files_at>/store.tgz -C baselines/data && kbench baselines show
# --kernelbench KB, and commit baselines/data; cp <files_at>/compile-cache.tgz D/ and give
# the next call CACHE_IN=D/compile-cache.tgz (see below).
#
# Order, cheapest first (issue 25's plan): eager and compile of every level before any
# max-autotune (eager comes with each compile mode's record); max-autotune level 1, then 2,
# then 3 (level 3's autotuning is minutes per model: 131 s for ResNet18). Within a call kbench
# takes the problems cheapest stored compile first. A problem still compiling when the budget
# ends is measured again next call; one that runs past the compile timeout is recorded as a
# `timeout` with the limit, which is its recorded reason. Level 3's heavy models: each alone
# on its GPU, so that the limit is the model's own (on 2026-11-28 three calls that compiled
# them side by side timed none):
#   GPUS=0,1,2,3 MODES=max-autotune LEVELS=3 BUDGET=550 EXTRA="--timeout-load 500 --lookahead 0"
#
# Assumes python3 with a CUDA build of torch (KBENCH_PYTHON=python3) and, in D, the release
# binary (kbench) and the KernelBench problems (kernelbench/).
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_CACHE_DIR=${KBENCH_CACHE_DIR:-/tmp/kbench-cache} PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}
MODES=${MODES:-eager,compile,max-autotune}; LEVELS=${LEVELS:-1,2,3}; BUDGET=${BUDGET:-500}
STORE=${STORE:-baselines/data}
# GPUs to spread the problems over (one problem per GPU at a time, each timed on its own GPU
# with its own reserved core; compiles run beside on the host's other cores).
GPUS=${GPUS:-0}
# More options for `baselines measure`, word-split: e.g. `--timeout-load 400`, so that a
# max-autotune compile longer than one call is recorded as a timeout with that limit instead
# of being cut off by the call and started again by the next one.
EXTRA=${EXTRA:-}
mkdir -p "$OUT"
step() { echo "== $1 $(date -u +%T)"; }
step env
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nproc
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
# Inductor's and Triton's caches are per machine: a fresh one starts cold. CACHE_IN (a
# compile-cache.tgz an earlier call sent back, carried in D) seeds them, so that a model whose
# max-autotune compile a call cut off goes on where it stopped instead of starting over: each
# autotuned choice's timings are kept in inductor's cache (on 2026-11-28 L3/23's grouped
# convolutions took about 30 s each; a cut-off compile of 445 s then took 192 s on the same
# warm machine). The compile_s stored for such a problem is then the last attempt's, not a
# cold compile's: say so where the figures are given. The times are those of the same
# compiled model.
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache TRITON_CACHE_DIR=/tmp/triton-cache
if [ -n "${CACHE_IN:-}" ]; then
    if [ -f "$CACHE_IN" ]; then
        mkdir -p /tmp/inductor-cache && tar -xzf "$CACHE_IN" -C /tmp && echo "compile caches seeded from $CACHE_IN ($(du -sh /tmp/inductor-cache | cut -f1) inductor)"
    else
        echo "CACHE_IN=$CACHE_IN is not a file: the compile caches start cold" >&2
    fi
fi
step "measure $MODES, levels $LEVELS, budget ${BUDGET}s"
S=$(date +%s)
# STOP_STARTING (seconds, default none): no problem is started after it, so a compile that
# could not finish before BUDGET is never begun (set it to BUDGET less the compile timeout of
# EXTRA's --timeout-load and a margin for the problems taken ahead).
STOP=(); [ -n "${STOP_STARTING:-}" ] && STOP=(--stop-starting-after "$STOP_STARTING")
timeout -s INT -k 60 "$BUDGET" "$D/kbench" baselines measure --kernelbench "$D/kernelbench" \
  --levels "$LEVELS" --modes "$MODES" --store "$STORE" --device cuda --gpus "$GPUS" "${STOP[@]}" $EXTRA \
  > "$OUT/measure.txt" 2>&1
echo "measure rc=$? $(( $(date +%s) - S ))s"; tail -15 "$OUT/measure.txt"
step coverage
"$D/kbench" baselines show --store "$STORE" --kernelbench "$D/kernelbench" | tee "$OUT/coverage.txt"
# The store's files (a few MB of samples) come back, and the measuring runs' records and
# worker logs (what each compile did, when), without the candidates' sources.
tar -czf "$OUT/store.tgz" -C "$STORE" .
tar -czf "$OUT/work.tgz" -C "$KBENCH_CACHE_DIR" --exclude=kernels --exclude=secret baseline-runs 2>/dev/null
# The compile caches come back for the next call's CACHE_IN, as much of them as fits
# CACHE_MAX_MB compressed (default 15: a file sent back from a device call is at most 16 MiB):
# inductor's and Triton's caches; else inductor's alone (compiled graphs and autotuning
# results; Triton's cubins are compiled again); else the autotuning results alone, a few
# hundred kB: inductor's table of each autotuned choice's timings (`cache/`, keyed by GPU,
# torch and Triton) and the `.best_config` of each tuned kernel. These are what a level-3
# compile spends its time on (on 2026-11-29 ResNet18's 8 autotunings benchmarked for 469 s),
# and the next attempt looks them up instead of benchmarking again. On 2026-11-29 inductor's
# cache alone was 47 to 75 MB compressed after one to three heavy models, and lost.
CACHE_MAX_MB=${CACHE_MAX_MB:-15}
cache_tgz="$OUT/compile-cache.tgz"
fits() { [ "$(du -m "$1" | cut -f1)" -le "$CACHE_MAX_MB" ]; }
# A tar that cannot fit is not made: compression gives about 4x here at best, and each try on
# 300 MB of cache costs tens of seconds at the end of a call.
may_fit() { [ "$(du -smc "$@" | tail -1 | cut -f1)" -le $((4 * CACHE_MAX_MB)) ]; }
if [ -d /tmp/inductor-cache ]; then
    rm -f "$cache_tgz"
    tries=("inductor-cache triton-cache" "inductor-cache")
    [ -d /tmp/triton-cache ] || tries=("inductor-cache")
    for parts in "${tries[@]}"; do
        # shellcheck disable=SC2086 # a list of folder names
        set -- $parts
        (cd /tmp && may_fit "$@") || continue
        tar -czf "$cache_tgz.part" -C /tmp "$@" && fits "$cache_tgz.part" && mv "$cache_tgz.part" "$cache_tgz" && break
    done
    if [ ! -f "$cache_tgz" ]; then
        (cd /tmp && find inductor-cache/cache -type f 2>/dev/null; find inductor-cache -name '*.best_config') \
            | tar -czf "$cache_tgz" -C /tmp -T -
    fi
    rm -f "$cache_tgz.part"
    listed=$(tar -tzf "$cache_tgz")
    echo "compile-cache.tgz: $(du -h "$cache_tgz" | cut -f1), $(grep -vc '/$' <<< "$listed") files ($(cut -d/ -f1 <<< "$listed" | sort -u | tr '\n' ' '))"
    fits "$cache_tgz" || echo "compile-cache.tgz is past CACHE_MAX_MB=$CACHE_MAX_MB even with the autotuning results alone: it will not come back" >&2
fi
