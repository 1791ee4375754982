#!/usr/bin/env bash
# Side-by-side: KernelBench's own eval against kbench on the same problems and GPU, one after
# the other (README.md beside this file says what each number means and what is fair).
#
#   bash bench/side_by_side/run.sh --prepare   # here, once: KernelBench at the pinned commit into $D
#   OUT=/tmp/out bash bench/side_by_side/run.sh            # on the GPU machine, from the repo root
#   bash bench/side_by_side/run.sh --dry-run               # print the commands, run nothing
#
# Steps (STEPS, default "warm kernelbench random all"), each skipped once done:
#   warm         import torch and start CUDA once, so that no tool pays the cold page cache,
#                and fill kbench's own caches (interpreter probe, compiled bytecode) with a
#                run on the sample's first problem, which a user's second run finds; else
#                the first kbench step paid them and the second did not (counted nowhere)
#   kernelbench  kb_eval.py: KernelBench's batch_eval (a spawned process per kernel, 5
#                correctness trials, 100 timed trials) over SELECT, timed per problem
#   random       kbench run --agent reference --families random (KernelBench's check alone)
#   all          kbench run --agent reference with its default families (every check)
# then summarize.py writes $OUT/results.json and $OUT/results.md.
#
# Settings (environment): D (devrun: kbench binary, KernelBench/ checkout), KB ($D/KernelBench),
# KBENCH ($D/kbench), SELECT (kbench's --select; default 1/10,1/20,...,1/80; `1:10,20` also
# reads as level 1), OUT (what comes back: results.json, results.md, log.txt, state.tgz),
# WORK (everything else; /tmp/side_by_side), BUDGET_S (stop cleanly before this many seconds,
# exit 75: run again to continue; 0 = no limit), STATE_IN (a state.tgz from an earlier call,
# restored when WORK is empty, e.g. on a fresh machine; default $D/side_by_side_state.tgz),
# KBENCH_ARGS (more options for both kbench runs, e.g. `--rounds 10`; word-split),
# KBENCH_PYTHON (python3), KB_GPU_ARCH (KernelBench's gpu_arch, Hopper), KBENCH_BWRAP (the
# sandbox binary kbench uses, when set), DRY_RUN=1 (as --dry-run).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=${D:-devrun}
KB=${KB:-$D/KernelBench}
KBENCH=${KBENCH:-$D/kbench}
SELECT=${SELECT:-1/10,1/20,1/30,1/40,1/50,1/60,1/70,1/80}
STEPS=${STEPS:-warm kernelbench random all}
OUT=${OUT:-/tmp/side_by_side_out}
WORK=${WORK:-/tmp/side_by_side}
STATE=$WORK/state
BUDGET_S=${BUDGET_S:-0}
STATE_IN=${STATE_IN:-$D/side_by_side_state.tgz}
KB_GPU_ARCH=${KB_GPU_ARCH:-Hopper}
KB_PIN=${KB_PIN:-423217d}
MIRROR=${MIRROR:-/work/.mirror/ScalingIntelligence+KernelBench/repo}
DRY_RUN=${DRY_RUN:-0}
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3}
export PYTHONUNBUFFERED=1
# kbench's build cache and worker files: in WORK, never in OUT.
export KBENCH_CACHE_DIR=${KBENCH_CACHE_DIR:-$WORK/kbench-cache}
PY=$KBENCH_PYTHON
T0=$(date +%s)
STOPPED=0
FAILED=0

case "${1:-}" in
--dry-run) DRY_RUN=1 ;;
--prepare) MODE=prepare ;;
"") ;;
*) echo "usage: run.sh [--dry-run | --prepare]" >&2; exit 2 ;;
esac
MODE=${MODE:-run}

# --prepare, where KernelBench's mirror is (not on the GPU machine): the checkout at the
# pinned commit into $KB, its full commit id into $KB.commit. Never committed ($D is ignored).
if [ "$MODE" = prepare ]; then
    sha=$(git --git-dir="$MIRROR" rev-parse --verify "$KB_PIN^{commit}") || {
        echo "no commit $KB_PIN in $MIRROR (set MIRROR to KernelBench's git directory)" >&2; exit 1; }
    rm -rf "$KB" && mkdir -p "$KB" &&
        git --git-dir="$MIRROR" archive "$sha" | tar -x -C "$KB" || exit 1
    echo "$sha" > "$KB.commit"
    echo "KernelBench $sha extracted into $KB ($(du -sh "$KB" | cut -f1))"
    if [ -x "$KBENCH" ]; then
        echo "kbench: $("$KBENCH" --version)"
    else
        echo "no $KBENCH yet: cargo build --release && cp target/release/kbench $D/"
    fi
    exit 0
fi

# The log: this call's in OUT (it comes back even if the call is cut off), every call's in WORK.
if [ "$DRY_RUN" = 1 ]; then
    LOG=/dev/null; LOG_ALL=/dev/null
else
    mkdir -p "$OUT" "$STATE"
    LOG=$OUT/log.txt; LOG_ALL=$WORK/side_by_side.log
fi
log() { echo "[side-by-side $(date -u +%H:%M:%S)] $*" | tee -a "$LOG" "$LOG_ALL"; }
# A command as one could paste it: arguments with characters other than these are quoted.
show() {
    local out="+" a
    for a in "$@"; do
        if [[ "$a" =~ ^[A-Za-z0-9_./:,=+@%-]+$ ]]; then out+=" $a"; else out+=" '${a//\'/\'\\\'\'}'"; fi
    done
    echo "$out"
}

left_s() {
    if [ "$BUDGET_S" -le 0 ]; then echo 1000000; else echo $(( BUDGET_S - ($(date +%s) - T0) )); fi
}

SPEC=$("$PY" "$HERE/kb_eval.py" select "$SELECT") || exit 2

# A fresh machine: continue from the state an earlier call brought back.
if [ "$DRY_RUN" != 1 ] && [ ! -f "$STATE/selection.txt" ] && [ -f "$STATE_IN" ]; then
    tar -xzf "$STATE_IN" -C "$STATE" && log "restored the state of an earlier call from $STATE_IN"
fi
if [ "$DRY_RUN" != 1 ]; then
    if [ -f "$STATE/selection.txt" ] && [ "$(cat "$STATE/selection.txt")" != "$SPEC" ]; then
        log "$WORK holds a run of --select $(cat "$STATE/selection.txt"), not $SPEC: remove $WORK (and $STATE_IN) to start again"
        exit 2
    fi
    echo "$SPEC" > "$STATE/selection.txt"
fi
for need in "$KB/scripts/eval_from_generations.py" "$KBENCH"; do
    if [ ! -e "$need" ]; then
        if [ "$DRY_RUN" = 1 ]; then echo "# (missing here: $need)"; else
            log "missing $need: run 'bash bench/side_by_side/run.sh --prepare' and build kbench into $D first"; exit 1; fi
    fi
done

# One key=value line each, appended per invocation (summarize.py takes the last, and says when
# the GPU changed between calls).
record_env() {
    {
        echo "invocation=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "date=$(date -u +%Y-%m-%d)"
        if command -v nvidia-smi > /dev/null; then nvidia-smi -L 2>&1 | sed 's/^/gpu=/'; else echo "gpu=unknown (no nvidia-smi)"; fi
        echo "torch=$("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
        echo "kbench=$("$KBENCH" --version 2>&1 | head -1)"
        echo "kernelbench_commit=$(cat "$KB.commit" 2>/dev/null || echo "unknown (no $KB.commit)")"
        echo "host_cpus=$(nproc)"
        echo "kbench_bwrap=${KBENCH_BWRAP:-}"
        echo "select=$SPEC"
    } >> "$STATE/env.txt"
}

# step_run NAME CMD...: CMD under the budget, its stdout in STATE/NAME.txt, "start end rc" in
# STATE/NAME.invocations; NAME.done when it finished (0, or 3: kbench evaluated everything and
# some kernels are not ok). 75/124/130/137: stopped, resumable.
step_run() {
    local name=$1; shift
    if [ -f "$STATE/$name.done" ]; then
        log "$name: done before, skipped"; return 0
    fi
    [ "$STOPPED" = 1 ] && return 1
    local left; left=$(left_s)
    if [ "$DRY_RUN" = 1 ]; then show "$@"; return 0; fi
    if [ "$left" -lt 30 ]; then
        log "$name: budget spent; run again with the same WORK (or STATE_IN) to continue"
        STOPPED=1; return 1
    fi
    log "$name: $*"
    local s e rc
    s=$(date +%s.%N)
    timeout --kill-after=30 "$left" "$@" >> "$STATE/$name.txt" 2>&1
    rc=$?
    e=$(date +%s.%N)
    echo "$s $e $rc" >> "$STATE/$name.invocations"
    log "$name: rc=$rc in $(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.1f", e - s }')s"
    case $rc in
    0 | 3) touch "$STATE/$name.done" ;;
    75 | 124 | 130 | 137) log "$name: stopped before the end; run again to continue"; STOPPED=1 ;;
    *) log "$name: failed (see $name.txt in state.tgz)"; FAILED=1; tail -5 "$STATE/$name.txt" | tee -a "$LOG" "$LOG_ALL" ;;
    esac
}

kbench_step() {
    local name=$1; shift
    local resume=()
    [ -f "$WORK/$name/run.json" ] && resume=(--resume)
    # A state restored on a fresh machine: the run's files come back to its folder.
    if [ ! -f "$WORK/$name/run.json" ] && [ -f "$STATE/$name/run.json" ]; then
        [ "$DRY_RUN" = 1 ] || { mkdir -p "$WORK/$name" && cp -p "$STATE/$name"/* "$WORK/$name"/; }
        resume=(--resume)
    fi
    step_run "$name" "$KBENCH" run --agent reference --kernelbench "$KB" --select "$SPEC" \
        --gpus 0 --device cuda "$@" ${KBENCH_ARGS:-} --out "$WORK/$name" "${resume[@]}"
    # Keep what --resume and the summary need with the state (records, settings, the seed).
    if [ "$DRY_RUN" != 1 ] && [ -f "$WORK/$name/run.json" ]; then
        mkdir -p "$STATE/$name"
        cp -p "$WORK/$name/run.json" "$WORK/$name/records.jsonl" "$WORK/$name/secret" "$STATE/$name/" 2>/dev/null
        # The references' own account of each case (inputs, float64 forward, forward,
        # stability, probes, peak memory) and of their starts: where a phase's time went.
        grep -H "kbench worker: \(make_case\|reference started\|loaded\)" "$WORK/$name"/logs/*__reference.log \
            > "$STATE/${name}_reference_lines.txt" 2>/dev/null
    fi
}

[ "$DRY_RUN" = 1 ] || record_env
log "select $SPEC; steps: $STEPS; WORK=$WORK OUT=$OUT BUDGET_S=$BUDGET_S"
for step in $STEPS; do
    [ "$STOPPED" = 1 ] && break
    case $step in
    warm)
        WARM="import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
        KWARM=("$KBENCH" run --agent reference --kernelbench "$KB" --select "${SPEC%%,*}" --gpus 0
               --device cuda --families random --no-timing ${KBENCH_ARGS:-} --out "$WORK/kbench-warm" --quiet)
        if [ "$DRY_RUN" = 1 ]; then show "$PY" -c "$WARM"; show "${KWARM[@]}"; continue; fi
        s=$(date +%s.%N)
        "$PY" -c "$WARM" >> "$STATE/warm.txt" 2>&1
        log "warm (import torch, start CUDA): rc=$? in $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')s, counted nowhere"
        s=$(date +%s.%N)
        rm -rf "$WORK/kbench-warm"
        "${KWARM[@]}" >> "$STATE/warm.txt" 2>&1
        log "warm (kbench's caches: one run of ${SPEC%%,*}): rc=$? in $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')s, counted nowhere"
        ;;
    kernelbench)
        kb_budget=0
        [ "$BUDGET_S" -gt 0 ] && kb_budget=$(left_s)
        step_run kernelbench "$PY" "$HERE/kb_eval.py" run --kb "$KB" --select "$SPEC" \
            --out "$STATE/kb_timings.json" --work "$WORK/kb-work" --budget-s "$kb_budget" \
            --gpu-arch $KB_GPU_ARCH  # a list: Hopper, or e.g. "Hopper Ada"
        ;;
    random) kbench_step random --families random ;;
    all) kbench_step all ;;
    *) log "unknown step '$step' (known: warm kernelbench random all)"; FAILED=1 ;;
    esac
done

SUMMARY=("$PY" "$HERE/summarize.py" --state "$STATE" --out "$OUT/results.json" --md "$OUT/results.md")
if [ "$DRY_RUN" = 1 ]; then
    show "${SUMMARY[@]}"
    show tar -czf "$OUT/state.tgz" -C "$STATE" .
    exit 0
fi
# The table also goes to stdout: the device tool's reply shows the end of it.
if "${SUMMARY[@]}" >> "$LOG_ALL" 2>&1; then cat "$OUT/results.md"; else log "summarize.py failed (see $LOG_ALL)"; fi
# What comes back: four files (the device tool returns at most eight).
tar -czf "$OUT/state.tgz" -C "$STATE" . && log "state (records, timings, logs): $OUT/state.tgz ($(du -h "$OUT/state.tgz" | cut -f1))"
log "finished this call after $(( $(date +%s) - T0 ))s: stopped=$STOPPED failed=$FAILED"
[ "$FAILED" = 1 ] && exit 1
[ "$STOPPED" = 1 ] && exit 75
exit 0
