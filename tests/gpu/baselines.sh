#!/usr/bin/env bash
# The baselines suite of GPU runs: `bash tests/gpu/baselines.sh STEP` from the repository root on
# the GPU machine (tests/gpu/README.md). Steps:
#   store           stored baselines measured into baselines/data, resumable; coverage of all 250
#   live            the reference agent against stored and live baselines on 5 or 10 problems
#   autotune-probe  one max-autotune compile plain, in kbench bare and sandboxed, cold caches
#   launch-drift    launch-bound level-3 forwards in fresh processes, unpinned and pinned
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# step store: stored baselines measured into baselines/data, resumable; coverage of all 250
# Stored baselines on the GPU machine, one device call (under 10 minutes): measure stored baselines
# into the repository's own store (baselines/data in the device's copy of the tree), stopping
# cleanly before BUDGET seconds, then print the coverage of all 250 problems and send the
# store back. Measuring resumes: each call measures only what the store still lacks (times
# and recorded failures both count as done), so repeat the call until the coverage table shows
# no gaps, on an H100 and then on an H200.
#
#   D=devrun OUT=/tmp/out MODES=max-autotune LEVELS=2 BUDGET=500 bash tests/gpu/baselines.sh store
#   GPUS=0,1,2,3 ... on a machine of four GPUs
#
# Then, here: tar -xzf <files_at>/store.tgz -C baselines/data && kbench baselines show
# --kernelbench KB, and commit baselines/data; cp <files_at>/compile-cache.tgz D/ and give
# the next call CACHE_IN=D/compile-cache.tgz (see below).
#
# Order, cheapest first (the plan): eager and compile of every level before any
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
step_store() {
use_cache_dir
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
step env
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nproc
use_sandbox
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
pack "$OUT/store.tgz" "$STORE" .
pack "$OUT/work.tgz" "$KBENCH_CACHE_DIR" --exclude=kernels --exclude=secret baseline-runs 2>/dev/null
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
}

# step live: the reference agent against stored and live baselines on 5 or 10 problems
# Stored against live baselines on the GPU machine in one device call: do speedups against the stored
# baselines equal live ones within noise? The `reference` agent (each problem's own code as its
# kernel) is run three times over the same problems:
#   fresh:  `kbench baselines measure` into an empty store on this GPU, then `kbench run
#           --baselines MODES` against it: the stored path with nothing but the method between
#           the two measurements (same GPU, minutes apart);
#   stored: `kbench run --baselines MODES`, the times from the repository's store (other
#           machines, days before: what a user of the committed store gets);
#   live:   `kbench run --baselines live,MODES`, every baseline measured now, in that run;
# then tests/gpu/stored_vs_live.py compares fresh and stored against live, each problem's
# speedups mode by mode, against the noise of two separate measurements of the same code (see
# its header). RUNS="stored live" skips the fresh store.
#
#   D=devrun OUT=/tmp/out HALF=a bash tests/gpu/baselines.sh live     # then HALF=b
#   D=devrun OUT=/tmp/out SELECT=1/76,...,3/43 GPUS=0,1 bash tests/gpu/baselines.sh live
#
# The ten problems (ten per mode; the same ten serve every mode): per level,
# those the store times in all three modes on this GPU with an eager median under 20 ms (each is
# timed 100 times a side in five evaluations: level 3's cheapest compiles are RNNs of 60 to
# 120 ms a call), cheapest summed compile and max-autotune compile first: four of level 1, four
# of level 2 and two of level 3 (on the H200's store of 2026-11-29). On one GPU a call holds
# about half of them with max-autotune's compiles: HALF=a and HALF=b (two of level 1, two of
# level 2, one of level 3 each); on two GPUs all ten fit one call.
#
# The repository's store is copied first, so that a baseline the store lacks, which `run`
# measures before it starts, is not written into it; such a problem is named in the log and
# the comparison says its time is not a stored one.
#
# Assumes python3 with a CUDA build of torch (KBENCH_PYTHON=python3) and, in D, the release
# binary (kbench), the KernelBench problems (kernelbench/) and the bubblewrap wheel.
step_live() {
use_cache_dir
GPUS=${GPUS:-0}; DEVICE=${DEVICE:-cuda}
# STORE: the store of the stored run (a dry run on the CPU gives one of CPU times).
STORE=${STORE:-baselines/data}
MODES=${MODES:-eager,compile,max-autotune}
case "${HALF:-}" in
    a) DEFAULT=1/76,1/64,2/100,2/20,3/13 ;;
    b) DEFAULT=1/5,1/21,2/34,2/81,3/43 ;;
    *) DEFAULT=1/76,1/64,1/5,1/21,2/100,2/20,2/34,2/81,3/13,3/43 ;;
esac
SELECT=${SELECT:-$DEFAULT}
mkdir -p "$OUT"
step env
nvidia-smi -L; "$KBENCH_PYTHON" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nproc
use_sandbox
rm -rf /tmp/live-store /tmp/fresh-store /tmp/fresh-work && cp -r "$STORE" /tmp/live-store
common=(--kernelbench "$D/kernelbench" --select "$SELECT" --agent reference --device "$DEVICE")
[ "$DEVICE" = cuda ] && common+=(--gpus "$GPUS")
# RUNS: fresh (a store measured here first, by `baselines measure`: the method alone, same
# GPU, minutes apart), stored (the repository's store: what a user of it gets, measured on
# other machines days before), live (`--baselines live`, the reference both are compared to).
RUNS=${RUNS:-fresh stored live}
for run in $RUNS; do
    S=$(date +%s)
    case $run in
    fresh)
        step "measure a fresh store: $MODES"
        m=(--kernelbench "$D/kernelbench" --select "$SELECT" --modes "$MODES" --device "$DEVICE" --store /tmp/fresh-store --work /tmp/fresh-work)
        [ "$DEVICE" = cuda ] && m+=(--gpus "$GPUS")
        "$D/kbench" baselines measure "${m[@]}" > "$OUT/fresh-measure.log" 2>&1
        echo "measure rc=$? $(( $(date +%s) - S ))s"; tail -4 "$OUT/fresh-measure.log"
        step "run fresh: $SELECT"
        "$D/kbench" run "${common[@]}" --baselines "$MODES" --baseline-store /tmp/fresh-store --out "$OUT/$run" > "$OUT/$run.log" 2>&1 ;;
    stored)
        step "run stored: $SELECT"
        "$D/kbench" run "${common[@]}" --baselines "$MODES" --baseline-store /tmp/live-store --out "$OUT/$run" > "$OUT/$run.log" 2>&1 ;;
    live)
        step "run live: $SELECT"
        "$D/kbench" run "${common[@]}" --baselines "live,$MODES" --out "$OUT/$run" > "$OUT/$run.log" 2>&1 ;;
    *) echo "RUNS: unknown run '$run' (fresh, stored, live)" >&2; exit 2 ;;
    esac
    rc=$?
    echo "$run rc=$rc $(( $(date +%s) - S ))s"; tail -6 "$OUT/$run.log"
    # 0: every kernel ok; 3: some failed (their records say why); else nothing to compare.
    [ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "run $run failed (rc=$rc): see $OUT/$run.log" >&2; exit 1; }
done
for run in fresh stored; do
    [ -f "$OUT/$run.log" ] && grep -H "measuring .* baseline time" "$OUT/$run.log" &&
        echo "the $run run measured baselines its store lacked: those rows are not stored times" >&2
done
rcs=()
for run in fresh stored; do
    [ -d "$OUT/$run" ] && [ -d "$OUT/live" ] || continue
    step "compare $run / live"
    "$KBENCH_PYTHON" tests/gpu/stored_vs_live.py "$OUT/$run" "$OUT/live" --json "$OUT/compare-$run.json" | tee "$OUT/compare-$run.txt"
    rcs+=("$run=${PIPESTATUS[0]}")
done
echo "compare rc: ${rcs[*]}"
# The run directories and their logs come back in one archive (the device sends at most 8
# files back; three runs' folders and logs are more), without the kernels (the problems' own
# code) and the secret; the comparisons stay beside it.
packed=()
for run in $RUNS; do
    for f in "$run" "$run.log"; do [ -e "$OUT/$f" ] && packed+=("$f"); done
done
[ -e "$OUT/fresh-measure.log" ] && packed+=(fresh-measure.log)
if [ ${#packed[@]} -gt 0 ] &&
    pack "$OUT/runs.tgz" "$OUT" --exclude=kernels --exclude=secret "${packed[@]}"; then
    for f in "${packed[@]}"; do rm -rf "${OUT:?}/$f"; done
fi
}

# step autotune-probe: one max-autotune compile plain, in kbench bare and sandboxed, cold caches
# A max-autotune compile on the GPU machine, one device call (about 8 minutes for the default problem): was
# a max-autotune compile slower inside kbench than in plain Python, and why? (Answered on
# 2026-11-29: torch's own path once its compile-process pool is ready; see warmpool.) On 2026-11-29 on one H200,
# L3/9 ResNet18 ran past kbench's 500 s compile limit (recorded as a `timeout`), where a plain
# compile of it has been seen to take about 131 s. Its worker log showed the first
# autotunings precompiling their Triton choices in parallel (6 s) and benchmarking them in
# 0.3 s, and the later ones "0.0003 seconds precompiling" then 20-119 s of benchmarking, as if
# each choice were compiled one by one inside the benchmark; L3/4 LeNet5 showed the same
# (33 s and 15 s of benchmarking for two small matmuls).
#
# The same problem, each variant from cold compile caches of its own:
#   plain    tests/gpu/autotune_plain.py: torch.compile(mode="max-autotune") and one call;
#   cupti    the same after a CUDA-only profiler was started and stopped, as each of kbench's
#            GPU workers does when it starts (a suspect: CUPTI, once initialised, may slow
#            every later module load, and autotuning loads a module per choice);
#   workerenv  the same with the rest of what a kbench GPU worker sets up before a load:
#            glibc's heap thresholds (cpu_heap.reuse_freed_blocks) and OMP_NUM_THREADS=4
#            (16 cores, one GPU);
#   nopool   plain with inductor's compile_threads at 1: no pool of compile processes, so a
#            template's choices are precompiled by threads before their benchmarks (is the
#            slow path torch's own, once its process pool has started?);
#   bare     kbench baselines measure --no-sandbox (kbench's worker, no bubblewrap);
#   sandbox  kbench baselines measure (the worker in bubblewrap, as the stored baselines were).
#            Since the generated max-autotune baseline sets compile_threads to 1 (the answer,
#            below), these two show kbench without the pool; before, they showed the slow path
#            (archive/runs/2026-11-29-h200-autotune-probe, with a `bare1` variant that
#            exported TORCHINDUCTOR_COMPILE_THREADS=1, now what bare does by itself);
#   warmpool plain after inductor's compile-process pool has started and is ready (in a kbench
#            worker the compile starts well after torch's import, once the reference has
#            loaded, so the pool is ready; in plain Python it may not yet be, and inductor
#            then compiles choices with threads);
#   warmkbenv  warmpool in a worker's environment (env -i and kbench's allow-list);
#   hybrid   warmpool, but a template's choices precompiled by threads (the pool kept for the
#            other kernels): is it faster than nopool on a large model?
# Writes, under OUT, summary.txt (per variant the seconds in all, the sums of inductor's
# "benchmarking" and "precompiling" seconds, kbench's stored compile_s) and logs.tgz (each
# variant's stderr or worker logs: a device call sends back at most 8 files).
#
#   D=devrun OUT=$OUT/probe bash tests/gpu/baselines.sh autotune-probe
#   PROBLEM=level3/9_ResNet18.py (default level3/4_LeNet5.py), VARIANTS="plain sandbox"
step_autotune_probe() {
PROBLEM=${PROBLEM:-level3/4_LeNet5.py}; VARIANTS=${VARIANTS:-plain cupti workerenv nopool bare sandbox}
LIMIT=${LIMIT:-500}
# DEVICE=cpu tries the script out on a machine without a GPU (inductor then autotunes no Triton).
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
W=$(mktemp -d)  # each variant's files, sent back as one logs.tgz
nvidia-smi -L 2>/dev/null; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'; nproc
# inductor's summary line per autotuning: "... benchmarking takes X seconds and Y seconds
# precompiling for N choices"; the sums of X and of Y over a log's lines.
sums() {
    awk '/AUTOTUNE benchmarking takes/ { for (i = 1; i <= NF; i++) { if ($i == "takes") b += $(i+1); if ($i == "and") p += $(i+1) } n++ }
         END { printf "%d autotunings, benchmarking %.1f s, precompiling %.1f s", n, b, p }' "$@"
}
# No variant starts past BUDGET - 120 seconds into the call (a device call ends at 600 s):
# the rest are named in the summary as not run, for a second call (VARIANTS=...).
BUDGET=${BUDGET:-560}; T0=$(date +%s)
for v in $VARIANTS; do
    if [ $(( $(date +%s) - T0 )) -gt $(( BUDGET - 120 )) ]; then
        echo "$v: not run (past BUDGET=$BUDGET less 120 s)" | tee -a "$OUT/summary.txt"; continue
    fi
    echo "== $v $(date -u +%T)"
    export TORCHINDUCTOR_CACHE_DIR=/tmp/probe-$v/inductor TRITON_CACHE_DIR=/tmp/probe-$v/triton
    rm -rf "/tmp/probe-$v"; mkdir -p "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR" "$W/$v"
    S=$(date +%s.%N)
    case $v in
        plain|cupti|workerenv|nopool|warmpool|warmkbenv|hybrid)
            # Off unless the variant turns it on (env takes the last of repeated names).
            env=(PROBE_CUPTI=0 PROBE_MALLOPT=0 PROBE_NO_POOL=0 PROBE_WARM_POOL=0 PROBE_HYBRID=0)
            case $v in
                cupti) env+=(PROBE_CUPTI=1);;
                workerenv) env+=(PROBE_CUPTI=1 PROBE_MALLOPT=1 OMP_NUM_THREADS=4);;
                nopool) env+=(PROBE_NO_POOL=1);;
                warmpool) env+=(PROBE_WARM_POOL=1);;
                hybrid) env+=(PROBE_HYBRID=1);;
                # As warmpool, in a worker's environment: nothing but kbench's allow-list.
                warmkbenv) env=(-i HOME="$HOME" PATH="$PATH" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 CUDA_VISIBLE_DEVICES=0
                                OMP_NUM_THREADS=4 TORCHINDUCTOR_CACHE_DIR="$TORCHINDUCTOR_CACHE_DIR" TRITON_CACHE_DIR="$TRITON_CACHE_DIR"
                                PROBE_WARM_POOL=1);;
            esac
            env "${env[@]}" timeout -s INT "$LIMIT" python3 tests/gpu/autotune_plain.py "$D/kernelbench/$PROBLEM" max-autotune "$DEVICE" \
                > "$W/$v/result.json" 2> "$W/$v/stderr.log"
            echo "rc=$?"; cat "$W/$v/result.json";;
        bare|sandbox)
            NS=(); [ "$v" = bare ] && NS=(--no-sandbox)
            "$D/kbench" baselines measure --problem "$D/kernelbench/$PROBLEM" --modes max-autotune \
                --store "/tmp/probe-$v/store" --work "/tmp/probe-$v/work" --device "$DEVICE" --lookahead 0 \
                --timeout-load "$LIMIT" "${NS[@]}" > "$W/$v/measure.txt" 2>&1
            echo "rc=$?"; tail -3 "$W/$v/measure.txt"
            find "/tmp/probe-$v/work" -name '*.log' -exec cp {} "$W/$v/" \;
            find "/tmp/probe-$v/store" -name 'max-autotune.json' -exec cp {} "$W/$v/" \;;;
    esac
    E=$(python3 -c "import time; print(round(time.time() - $S, 1))")
    logs=("$W/$v"/*.log)
    line="$v: ${E} s in all; $(sums "${logs[@]}")"
    if [ -s "$W/$v/result.json" ]; then
        line="$line; first call $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['first_call_s'], 1))" "$W/$v/result.json") s"
    fi
    if [ -f "$W/$v/max-autotune.json" ]; then
        line="$line; stored compile_s $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print([round(e.get('compile_s') or -1, 1) for l in d.values() if isinstance(l, dict) for e in l.values() if isinstance(e, dict) and 'compile_s' in e])" "$W/$v/max-autotune.json")"
    fi
    echo "$line" | tee -a "$OUT/summary.txt"
done
pack "$OUT/logs.tgz" "$W" .
echo "== summary"; cat "$OUT/summary.txt"
}

# step launch-drift: launch-bound level-3 forwards in fresh processes, unpinned and pinned
# Launch-bound drift on the GPU machine, one device call (about 5 minutes at the defaults: 28 processes
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
#   D=devrun OUT=$OUT/drift bash tests/gpu/baselines.sh launch-drift
#   PROBLEMS="20_MobileNetV2 30_SwinTransformerV2 13_DenseNet121TransitionLayer" ROUNDS=6 PINNED=2
step_launch_drift() {
cd "$(dirname "$0")/../.."
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
}

run_step "$@"
