#!/usr/bin/env bash
# Issue 25, on the GPU machine, one device call (about 8 minutes for the default problem): was
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
#   D=devrun OUT=$OUT/probe bash tests/gpu/run_autotune_probe.sh
#   PROBLEM=level3/9_ResNet18.py (default level3/4_LeNet5.py), VARIANTS="plain sandbox"
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}
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
tar -czf "$OUT/logs.tgz" -C "$W" .
echo "== summary"; cat "$OUT/summary.txt"
