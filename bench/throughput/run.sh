#!/usr/bin/env bash
# Throughput benchmark of the harness itself (see README.md beside this file). Run on the GPU
# machine from the repository root:
#
#   OUT=/tmp/bench bash bench/throughput/run.sh
#
# D (default devrun) holds the release kbench binary and D/kernelbench a copy of the problems.
# Steps (STEPS, default "ref250 ref250b gpus2 compile"):
#   ref250   reference agent over SELECT (default all 250 problems) on GPU 0    -> $OUT/ref250
#   ref250b  the same again, for run-to-run agreement                            -> $OUT/ref250b
#   gpus2    with 2+ GPUs: SELECT on --gpus 0,1 and on --gpus 0                  -> $OUT/ref_2gpu, $OUT/ref_1gpu
#   ref1, ref2, ref2b   the parts of gpus2 one by one (ref2b: --gpus 0,1 again, for
#            run-to-run agreement)                                               -> $OUT/ref_1gpu, ref_2gpu, ref_2gpu_b
#   ref4     with 4+ GPUs: SELECT on --gpus 0,1,2,3                              -> $OUT/ref_4gpu
#   ref2p    with 2+ GPUs: two kbench processes at once, --shard 0/2 on GPU 0 and 1/2 on
#            GPU 1, each on half the cores: one process per GPU against ref2's one for
#            both                                                         -> $OUT/ref_2proc_0, ref_2proc_1
#   ref4t    ref4 again with OMP_NUM_THREADS=WORKER_THREADS (default 4) for every worker:
#            the A/B of torch's CPU threads per worker (its default is one per core in
#            each of the eight or more workers)                                -> $OUT/ref_4gpu_threads
#   warm     untimed: one small problem per visible GPU, every GPU at once, so that the
#            first measured step does not pay a fresh machine's first start (reading
#            torch from disk, kbench's bytecode cache written by the first workers: on
#            4 H100s the first reference took 12.8 s to open against 3.2 s warm). Put it
#            first when steps are compared, e.g. STEPS="warm ref1 ref2 ref4"  -> $OUT/warm
#   compile  the replay kernels of tests/gpu/replay_bench_cuda (REPLAY), with a fresh build
#            cache (cold), then the same cache again (warm)                      -> $OUT/compile_cold, $OUT/compile_warm
#   probe    bench/throughput/build_probe.py: one trivial load_inline build, cold, with
#            and without torch's precompiled header, per ninja step              -> $OUT/build_probe.json
#   stress   reference agent with every stress family (--families all) over
#            STRESS_SELECT on GPU STRESS_GPU (default 0): what the families cost -> $OUT/stress
# The reference steps run with FAMILIES (default "random": KernelBench's check, the one
# the throughput target is about; "all" adds the stress families).
# Every step is resumable: a run cut off (e.g. by a 10-minute limit per command) continues
# with --resume when the script is run again with the same OUT; a finished step is skipped
# (its OUT/<run>.done marker). BUDGET_S (seconds, default 0 = none) stops the script before
# that long has passed, leaving the current run resumable (exit 75). COPY_TO copies the small
# files (logs, run.json, records, GPU samples, the run's seed for --resume) there at the end,
# e.g. the device tool's $OUT. Build caches live under CACHE_ROOT, not OUT, so OUT stays small.
# compile is not resumed: a cold pass cut off midway is started again from an empty cache.
set -uo pipefail

D=${D:-devrun}
KB=${KB:-$D/kernelbench}
OUT=${OUT:-/tmp/bench}
STEPS=${STEPS:-ref250 ref250b gpus2 compile}
SELECT=${SELECT:-}
FAMILIES=${FAMILIES:-random}
STRESS_SELECT=${STRESS_SELECT:-1/19,1/23,1/40,2/17,3/9}
STRESS_GPU=${STRESS_GPU:-0}
REPLAY=${REPLAY:-tests/gpu/replay_bench_cuda}
BUDGET_S=${BUDGET_S:-0}
COPY_TO=${COPY_TO:-}
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3}
export PYTHONUNBUFFERED=1
# Build caches: the reference steps' (kept between invocations), and compile's cold one.
CACHE_ROOT=${CACHE_ROOT:-/tmp/kbench-bench-cache}
export KBENCH_CACHE_DIR=$CACHE_ROOT/ref
COLD_CACHE=$CACHE_ROOT/cold

KBENCH=$D/kbench
T0=$(date +%s)
mkdir -p "$OUT"
STOPPED=0

log() { echo "[bench $(date -u +%H:%M:%S)] $*" | tee -a "$OUT/bench.txt"; }

# Seconds left of BUDGET_S (a large number when there is no budget).
left_s() {
    if [ "$BUDGET_S" -le 0 ]; then echo 1000000; else echo $(( BUDGET_S - ($(date +%s) - T0) )); fi
}

copy_results() {
    [ -n "$COPY_TO" ] || return 0
    mkdir -p "$COPY_TO"
    cp "$OUT"/*.txt "$OUT"/*.json "$OUT"/*.invocations "$OUT"/*.cpu_speed "$OUT"/*.done "$COPY_TO"/ 2>/dev/null
    for d in "$OUT"/*/; do
        [ -f "$d/run.json" ] || continue
        n=$(basename "$d")
        mkdir -p "$COPY_TO/$n"
        cp -p "$d"/run.json "$d"/records.jsonl "$d"/gpu_samples.jsonl "$d"/secret "$COPY_TO/$n"/ 2>/dev/null
        # The reference workers' logs: one line per case made (inputs, float64, forward,
        # stability seconds); with KBENCH_WORKER_TRACE=1 every worker's log, whose
        # per-command lines bench/throughput/worker_trace.py compares between runs.
        if [ -d "$d/logs" ]; then
            mkdir -p "$COPY_TO/$n/logs"
            if [ "${KBENCH_WORKER_TRACE:-}" = 1 ]; then
                cp -p "$d"/logs/*.log "$COPY_TO/$n/logs/" 2>/dev/null
            else
                cp -p "$d"/logs/*__reference.log "$COPY_TO/$n/logs/" 2>/dev/null
            fi
        fi
    done
    log "copied results to $COPY_TO"
}

# cpu_speed NAME WHEN: the host's single-core speed (cpu_speed.py, about 2 s) appended to
# $OUT/NAME.cpu_speed as "unix_s WHEN json": summarize.py compares it between the runs of a
# scaling figure, whose sides ran minutes apart on a host whose vCPUs change speed.
# CPU_SPEED=0 turns it off.
cpu_speed() {
    [ "${CPU_SPEED:-1}" = 0 ] && return 0
    local got
    got=$("$KBENCH_PYTHON" "$(dirname "${BASH_SOURCE[0]}")/cpu_speed.py" 2>/dev/null) || return 0
    echo "$(date +%s.%N) $2 $got" >> "$OUT/$1.cpu_speed"
}

# kb_run NAME ARGS...: kbench run ... --out $OUT/NAME, resumed when NAME was started before,
# skipped when NAME.done exists. Each invocation appends "start end rc" to NAME.invocations.
kb_run() {
    local name=$1; shift
    local dir=$OUT/$name
    if [ -f "$OUT/$name.done" ]; then
        log "$name: done before, skipped (rm $OUT/$name.done to run it again)"
        return 0
    fi
    if [ "$STOPPED" = 1 ]; then return 1; fi
    local left; left=$(left_s)
    if [ "$left" -lt 30 ]; then
        log "$name: budget spent; run the script again with OUT=$OUT to continue"
        STOPPED=1
        return 1
    fi
    local resume=()
    [ -f "$dir/run.json" ] && resume=(--resume)
    # KB_WRAP (word-split): a command the run goes through, e.g. `taskset -c 0-15` (ref2p).
    local wrap=()
    [ -n "${KB_WRAP:-}" ] && read -ra wrap <<< "$KB_WRAP"
    local cmd=("${wrap[@]}" "$KBENCH" run "$@" --device cuda --out "$dir" "${resume[@]}")
    log "$name: ${cmd[*]}"
    cpu_speed "$name" before
    local s e rc
    s=$(date +%s.%N)
    # SIGTERM (timeout) makes kbench stop cleanly: what was recorded is kept for --resume.
    timeout --kill-after=30 "$left" "${cmd[@]}" 2>&1 | tee -a "$OUT/$name.txt"
    rc=${PIPESTATUS[0]}
    e=$(date +%s.%N)
    echo "$s $e $rc" >> "$OUT/$name.invocations"
    cpu_speed "$name" after
    log "$name: rc=$rc wall=$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.1f", e - s }')s"
    # 0: all ok; 3: evaluated, some kernels failed. Anything else leaves the run resumable.
    if [ "$rc" = 0 ] || [ "$rc" = 3 ]; then
        touch "$OUT/$name.done"
        return 0
    fi
    if [ "$rc" = 124 ] || [ "$rc" = 130 ] || [ "$rc" = 137 ]; then
        log "$name: stopped before the end; run the script again with OUT=$OUT to resume it"
        STOPPED=1
    fi
    return 1
}

sel_args() {
    if [ -n "$SELECT" ]; then echo "--select $SELECT --families $FAMILIES"; else echo "--families $FAMILIES"; fi
}

{
    echo "== kbench"; "$KBENCH" --version
    echo "== kbench gpus"; "$KBENCH" gpus
    echo "== nvidia-smi -L"; nvidia-smi -L
    echo "== torch"; "$KBENCH_PYTHON" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)'
    echo "== host"; echo "nproc $(nproc)"; free -g | head -2
    echo "== steps: $STEPS; SELECT=${SELECT:-all}; OUT=$OUT; D=$D"
    # What reaches the workers and changes their speed, when exported (unset: kbench's defaults).
    echo "== worker env: OMP_NUM_THREADS=${OMP_NUM_THREADS:-} KBENCH_KEEP_CACHED_BYTES=${KBENCH_KEEP_CACHED_BYTES:-}"
} 2>&1 | tee -a "$OUT/env.txt"

NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)

for step in $STEPS; do
    [ "$STOPPED" = 1 ] && break
    case $step in
    ref250)
        # shellcheck disable=SC2046
        kb_run ref250 --agent reference --kernelbench "$KB" $(sel_args) --gpus 0
        ;;
    ref250b)
        # shellcheck disable=SC2046
        kb_run ref250b --agent reference --kernelbench "$KB" $(sel_args) --gpus 0
        ;;
    gpus2)
        if [ "$NGPU" -lt 2 ]; then
            log "gpus2: $NGPU GPU(s) visible, skipped"
            continue
        fi
        # shellcheck disable=SC2046
        kb_run ref_2gpu --agent reference --kernelbench "$KB" $(sel_args) --gpus 0,1 &&
            kb_run ref_1gpu --agent reference --kernelbench "$KB" $(sel_args) --gpus 0
        ;;
    ref2p)
        # The A/B of one kbench process driving two GPUs (ref2): two processes at once, each
        # on one GPU with half the problems (--shard) and half the cores (taskset, so each
        # reserves its own timing core). Whether a problem takes longer beside another in the
        # same process than in another process: compare Σ problem wall of ref_2proc_0 and
        # ref_2proc_1 together with ref_2gpu's and ref_1gpu's.
        if [ "$NGPU" -lt 2 ]; then
            log "ref2p: $NGPU GPU(s) visible, skipped"
            continue
        fi
        ncpu=$(nproc); halfcpu=$(( ncpu / 2 ))
        # shellcheck disable=SC2046
        KB_WRAP="taskset -c 0-$(( halfcpu - 1 ))" kb_run ref_2proc_0 --agent reference --kernelbench "$KB" \
            $(sel_args) --shard 0/2 --gpus 0 &
        # shellcheck disable=SC2046
        KB_WRAP="taskset -c $halfcpu-$(( ncpu - 1 ))" kb_run ref_2proc_1 --agent reference --kernelbench "$KB" \
            $(sel_args) --shard 1/2 --gpus 1 &
        wait
        ;;
    ref4t)
        if [ "$NGPU" -lt 4 ]; then
            log "ref4t: $NGPU GPU(s) visible, skipped"
            continue
        fi
        log "ref4t: every worker gets OMP_NUM_THREADS=${WORKER_THREADS:-4}"
        # shellcheck disable=SC2046
        OMP_NUM_THREADS=${WORKER_THREADS:-4} kb_run ref_4gpu_threads --agent reference --kernelbench "$KB" \
            $(sel_args) --gpus 0,1,2,3
        ;;
    warm)
        # Not a measurement: it shows in the summary as the run `warm`; compare nothing with it.
        # Run every time (a later call may be on a fresh machine), never resumed.
        rm -rf "$OUT/warm" "$OUT/warm.done"
        warm_select=$(seq -s, 1 "$(( NGPU > 0 ? NGPU : 1 ))" | sed 's|\([0-9]*\)|1/\1|g')
        kb_run warm --agent reference --kernelbench "$KB" --select "$warm_select" --families random \
            --gpus "$(seq -s, 0 "$(( (NGPU > 0 ? NGPU : 1) - 1 ))")"
        ;;
    ref1)
        # shellcheck disable=SC2046
        kb_run ref_1gpu --agent reference --kernelbench "$KB" $(sel_args) --gpus 0
        ;;
    ref2 | ref2b)
        if [ "$NGPU" -lt 2 ]; then
            log "$step: $NGPU GPU(s) visible, skipped"
            continue
        fi
        name=ref_2gpu
        [ "$step" = ref2b ] && name=ref_2gpu_b
        # shellcheck disable=SC2046
        kb_run "$name" --agent reference --kernelbench "$KB" $(sel_args) --gpus 0,1
        ;;
    ref4)
        if [ "$NGPU" -lt 4 ]; then
            log "ref4: $NGPU GPU(s) visible, skipped"
            continue
        fi
        # shellcheck disable=SC2046
        kb_run ref_4gpu --agent reference --kernelbench "$KB" $(sel_args) --gpus 0,1,2,3
        ;;
    probe)
        if [ -f "$OUT/build_probe.json" ]; then
            log "probe: done before, skipped"
            continue
        fi
        log "probe: bench/throughput/build_probe.py"
        s=$(date +%s)
        timeout "$(left_s)" "$KBENCH_PYTHON" bench/throughput/build_probe.py "$OUT/build_probe.json" \
            > "$OUT/build_probe.txt" 2>&1
        log "probe: rc=$? in $(( $(date +%s) - s ))s"
        ;;
    stress)
        kb_run stress --agent reference --kernelbench "$KB" --select "$STRESS_SELECT" \
            --families all --gpus "$STRESS_GPU"
        ;;
    compile)
        # Exactly the problems the replay kernels cover, e.g. 1/5,1/12,...
        KSEL=$(find "$REPLAY" -name '*.py' | sed -E 's#.*/level([0-9]+)/([0-9]+)_[^/]*$#\1/\2#' |
            grep -E '^[0-9]+/[0-9]+$' | sort -t/ -k1,1n -k2,2n | paste -sd, -)
        if [ -z "$KSEL" ]; then
            log "compile: no kernels under $REPLAY/level<L>/"
            continue
        fi
        log "compile: kernels for $KSEL"
        if [ ! -f "$OUT/compile_cold.done" ] || { [ ! -d "$COLD_CACHE" ] && [ ! -f "$OUT/compile_warm.done" ]; }; then
            # A cold pass starts from an empty cache (a partial one is dropped), and a warm pass
            # needs the cache of the cold pass before it (gone on a fresh machine): redo both.
            rm -rf "$COLD_CACHE" "$OUT/compile_cold" "$OUT/compile_warm"
            rm -f "$OUT"/compile_cold.* "$OUT"/compile_warm.*
        fi
        KBENCH_CACHE_DIR=$COLD_CACHE kb_run compile_cold --agent replay --replay-dir "$REPLAY" \
            --kernelbench "$KB" --select "$KSEL" --families "$FAMILIES" --gpus 0 &&
            KBENCH_CACHE_DIR=$COLD_CACHE kb_run compile_warm --agent replay --replay-dir "$REPLAY" \
                --kernelbench "$KB" --select "$KSEL" --families "$FAMILIES" --gpus 0
        ;;
    *)
        log "unknown step '$step' (known: ref250 ref250b gpus2 ref1 ref2 ref2b compile probe stress)"
        ;;
    esac
done

copy_results
if [ "$STOPPED" = 1 ]; then
    log "stopped early after $(( $(date +%s) - T0 ))s; run again with the same OUT to continue"
    exit 75
fi
log "all steps done in $(( $(date +%s) - T0 ))s; summarize with:"
log "  python3 bench/throughput/summarize.py --out $OUT/results.json --md $OUT/results.md --pair ref250 ref250b --scaling ref_1gpu ref_2gpu --scaling ref_1gpu ref_4gpu $OUT/*/"
