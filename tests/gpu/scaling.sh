#!/usr/bin/env bash
# The scaling suite of GPU runs: `bash tests/gpu/scaling.sh STEP` from the repository root on
# the GPU machine (tests/gpu/README.md). Steps:
#   x2         2 GPUs: build probe, stress cost, 1 vs 2 GPUs (CALL=1..5)
#   x4         4 GPUs: warm, 1 vs 4 GPUs, 4 with bounded worker threads, worker traces compared
#   defaults   4 GPUs: warm, 1, 2 and 4 GPUs at the defaults, worker traces 1 vs 4
#   half       half of the 250 on 2 (or 4) GPUs and 1 of one host, resumable; ORDER=abba interleaves
#   full-1gpu  the full 250, every check, on one GPU over several calls
#   lb-builds  30 published load_inline kernels, cold then warm: s/kernel, first verdict, waits
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# step x2: 2 GPUs: build probe, stress cost, 1 vs 2 GPUs (CALL=1..5)
# Throughput on a host with two GPUs (the device tool's nvidia-h200-x2), in two calls that each
# fit its 10-minute limit and each stand alone (a fresh machine between them costs nothing):
#
#   CALL=1  on GPU 0: bench/throughput/build_probe.py (one trivial load_inline build, per
#           ninja step, with and without a precompiled header), then the worker's CUDA unit
#           tests; beside them on GPU 1: the stress families' cost (run.sh step `stress`).
#           Then, alone on the host, the subset below on GPU 0 (run.sh step `ref1`).
#   CALL=3  (after the fixes call 1 led to) the worker's integrity tests on CUDA, then the subset
#           on 2 GPUs, 1 GPU and 2 GPUs again; CALL=4 the compile pipeline alone.
#   CALL=2  the subset on GPUs 0 and 1, twice (steps `ref2`, `ref2b`: scaling against
#           CALL=1's `ref1`, and run-to-run agreement), then the compile pipeline cold and
#           warm (step `compile`) with whatever time is left.
#
#   D=devrun CALL=1 OUT=/tmp/out bash tests/gpu/scaling.sh x2
#
# The subset: every fifth problem of each level (20 + 20 + 10), KernelBench's check
# (--families random). Results (logs, run.json, records, GPU samples) land in $OUT/callN;
# summarize them here with bench/throughput/summarize.py.
step_x2() {
CALL=${CALL:-1}
LIMIT_S=${LIMIT_S:-570}
T0=$(date +%s)
left() { echo $(( LIMIT_S - ($(date +%s) - T0) )); }
B=/tmp/kb3
L=$OUT/call$CALL
mkdir -p "$L" "$B"
SUBSET=$(python3 -c "print(','.join([f'{l}/{i}' for l, n in ((1, 100), (2, 100), (3, 50)) for i in range(5, n + 1, 5)]))")
{
    echo "== $(date -u +%FT%T) call $CALL"; nvidia-smi -L; nproc; free -g | head -2
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    "$D/kbench" --version; "$D/kbench" gpus
} > "$L/env.txt" 2>&1

case $CALL in
1)
    (
        CUDA_VISIBLE_DEVICES=0 OUT=$B/probe STEPS=probe COPY_TO=$L/probe BUDGET_S=240 \
            D=$D bash bench/throughput/run.sh > "$L/probe.log" 2>&1
        s=$(date +%s)
        (cd harness/python && CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -m unittest \
            test_worker.CudaTests test_worker.DeviceIoTests test_worker.IntegrityProbeTests \
            test_worker.CudaStressTests) > "$L/pytests.txt" 2>&1
        echo "pytests rc=$? in $(( $(date +%s) - s ))s" >> "$L/pytests.txt"
    ) &
    side=$!
    OUT=$B/stress STEPS=stress STRESS_GPU=1 CACHE_ROOT=/tmp/kb3-cache-stress COPY_TO=$L/stress \
        BUDGET_S=300 D=$D bash bench/throughput/run.sh > "$L/stress.log" 2>&1
    wait "$side"
    # Alone on the host from here: the 1-GPU figure that 2 GPUs are compared with.
    OUT=$B/main SELECT=$SUBSET STEPS=ref1 COPY_TO=$L/main BUDGET_S=$(left) D=$D \
        bash bench/throughput/run.sh > "$L/main.log" 2>&1
    ;;
2)
    OUT=$B/main SELECT=$SUBSET STEPS="ref2 ref2b compile" COPY_TO=$L/main BUDGET_S=$(left) D=$D \
        bash bench/throughput/run.sh > "$L/main.log" 2>&1
    ;;
3)
    # After the fixes call 1 showed were needed (see archive/runs/2026-11-22-h200x2-two-gpu-throughput):
    # the worker's integrity tests on CUDA again, then 2 GPUs first (so a run cut short by
    # the limit still leaves a scaling pair), 1 GPU, and 2 GPUs again (agreement).
    s=$(date +%s)
    (cd harness/python && timeout 120 python3 -m unittest test_worker.IntegrityProbeTests \
        test_worker.CudaTests) > "$L/pytests.txt" 2>&1
    echo "pytests rc=$? in $(( $(date +%s) - s ))s" >> "$L/pytests.txt"
    OUT=$B/main SELECT=$SUBSET STEPS="ref2 ref1 ref2b" COPY_TO=$L/main BUDGET_S=$(left) D=$D \
        bash bench/throughput/run.sh > "$L/main.log" 2>&1
    ;;
5)
    # Call 3's 1-GPU run, cut by the limit, resumed from its run directory (carried in
    # $D/resume) on a fresh machine, then the compile pipeline with the time left.
    mkdir -p "$B/main"
    cp -r "$D/resume/ref_1gpu" "$D/resume/ref_1gpu.invocations" "$D/resume/ref_1gpu.txt" "$B/main/"
    OUT=$B/main SELECT=$SUBSET STEPS="ref1 compile" COPY_TO=$L/main BUDGET_S=$(left) D=$D \
        bash bench/throughput/run.sh > "$L/main.log" 2>&1
    ;;
4)
    OUT=$B/main STEPS=compile COPY_TO=$L/main BUDGET_S=$(left) D=$D \
        bash bench/throughput/run.sh > "$L/main.log" 2>&1
    ;;
*)
    echo "CALL must be 1 to 5" >&2
    exit 2
    ;;
esac
echo "call $CALL done in $(( $(date +%s) - T0 ))s" | tee -a "$L/env.txt"
# One archive: the device tool brings back a bounded number of files and folder depth.
pack "$OUT/call$CALL.tgz" "$OUT" "call$CALL" && rm -rf "${L:?}"
}

# step x4: 4 GPUs: warm, 1 vs 4 GPUs, 4 with bounded worker threads, worker traces compared
# Scaling on a machine of 4 GPUs, one device call (about 8 minutes): the 40-problem sample of
# archive/runs/2026-11-27-h100x4-scaling with every check, warm first (so no compared run
# pays the machine's first start), then on 1 GPU, on 4, and on 4 again with every worker's
# torch CPU threads bounded (WORKER_THREADS, default 4): the A/B of the suspected cause of
# the 17% longer problems with four at once. Every worker traces its commands
# (KBENCH_WORKER_TRACE=1, the same on every side), and bench/throughput/worker_trace.py says
# which command's seconds grew from one GPU to four, or whether the time went between
# commands. Results (a tarball of the bench's small files and logs) under $OUT.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/scaling.sh x4
#   STEPS="warm ref1 ref2 ref4" ...   # other steps of bench/throughput/run.sh; the summary
#                                     # compares each multi-GPU run present with ref_1gpu
#   SAMPLE=all STEPS="warm ref4" ...  # all 250 problems instead of the 40 (about 500 s on 4
#                                     # H100s; its 1-GPU side: scaling.sh full-1gpu)
step_x4() {
B=/tmp/bench26; C=/tmp/bench26copy
mkdir -p "$OUT"
use_sandbox
export KBENCH_WORKER_TRACE=1
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
pack "$OUT/bench.tgz" "$C" .
tail -4 "$OUT/run_sh.txt"; sed -n 1,12p "$C/results.md"; grep -A3 "^## Scaling" "$C/results.md"
head -20 "$C/worker_trace_1_vs_4.md"
}

# step defaults: 4 GPUs: warm, 1, 2 and 4 GPUs at the defaults, worker traces 1 vs 4
# Scaling at the current defaults (every GPU worker's torch threads bounded to cores / (4 x
# GPUs), candidate workers started ahead, reference cases dropped), one device call on a machine
# of 4 GPUs (about 9 minutes): scaling.sh x4's 40-problem sample with every check, warm
# first, then on 1 GPU, on 2 and on 4; scaling 1 -> 2 and 1 -> 4, each GPU's busy share, and
# which worker commands grew from 1 GPU to 4 (worker_trace.py).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/scaling.sh defaults
step_defaults() {
STEPS=${STEPS:-warm ref1 ref2 ref4} exec bash "$GPU_DIR/scaling.sh" x4
}

# step half: half of the 250 on 2 (or 4) GPUs and 1 of one host, resumable; ORDER=abba interleaves
# Half of the 250 on a machine of 2 GPUs, when the device time of one session does not cover all 250
# problems on 1 GPU and on 2 (about 1450 s + 800 s of an H200's time): half of the problems
# (HALF=a: the odd ids of every level, 125 problems; HALF=b: the even ids) on 2 GPUs and on 1,
# on the same host, every check (FAMILIES=all), each worker traced. The two halves together
# are the 250, each half's sides measured on one machine. Several device calls of at most 10
# minutes each: the same command again resumes (run.sh's --resume), from the run folders kept
# on the machine or, on a fresh machine, from the small files of the previous call carried
# back in $D/half_$HALF (RESTORE; run.sh's COPY_TO layout: run.json, records, secret).
#
#   D=devrun OUT=$OUT HALF=a BUDGET_S=540 bash tests/gpu/scaling.sh half
#   STEPS="warm ref4 ref1" ...   # on a machine of 4 GPUs
#   STEPS="ref2p" ...            # one process per GPU (two at once) against ref_2gpu's one for both
#   ORDER=abba ...               # two blocks, 2-GPU/1-GPU/1-GPU/2-GPU (MULTI=ref4 on 4 GPUs), so a
#                                # drift of the host's speed weighs on both sides alike
#   PROBE=1 ...                  # probe_contention.py first (about 100 s)
#   # here: mkdir -p devrun/half_a && tar -xzf <files_at>/bench.tgz -C devrun/half_a
#   # and the same command again until results.md shows both runs complete
step_half() {
HALF=${HALF:-a}
# BENCH_DIR: the runs on this machine; COPY_DIR: their small files, sent back (tar in $OUT).
B=${BENCH_DIR:-/tmp/bench_half_$HALF}; C=${COPY_DIR:-/tmp/bench_half_copy_$HALF}; RESTORE=${RESTORE:-$D/half_$HALF}
mkdir -p "$OUT" "$B"
use_sandbox
export KBENCH_WORKER_TRACE=1
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
pack "$OUT/bench.tgz" "$C" .
tail -4 "$OUT/run_sh.txt"; sed -n 1,14p "$C/results.md"; grep -A4 "^## Scaling" "$C/results.md" || true
}

# step full-1gpu: the full 250, every check, on one GPU over several calls
# The 1-GPU side of scaling: the full 250 problems with every check on ONE GPU (about 1700 s, so
# three or four device calls), to set beside the 4-GPU run of
# archive/runs/2026-11-27-h100x4-worker-threads-full250/full250 (497 s). Each call runs
# bench/throughput/run.sh's ref250 step until BUDGET_S, then sends its state back
# ($OUT/state.tgz: records, run.json, the run's secret for --resume, invocations); put that file
# at $D/full1gpu_state.tgz before the next call and the run continues where it stopped (on a
# fresh machine too). Every invocation's process wall is in ref250.invocations, so the
# summary's process wall counts every call's kbench time and no gap between calls.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/scaling.sh full-1gpu      # repeat until "done"
#   here, between calls: cp <files_at>/state.tgz devrun/full1gpu_state.tgz
step_full_1gpu() {
B=/tmp/full1gpu
mkdir -p "$OUT" "$B"
use_sandbox
# A fresh machine: restore the earlier calls' state (only into an empty folder).
if [ -f "$D/full1gpu_state.tgz" ] && [ -z "$(ls -A "$B")" ]; then
    tar -xzf "$D/full1gpu_state.tgz" -C "$B" && echo "restored the earlier calls' state"
fi
STEPS=ref250 FAMILIES=all BUDGET_S=${BUDGET_S:-540} D=$D OUT=$B \
    bash bench/throughput/run.sh > "$OUT/run_sh.txt" 2>&1
rc=$?
echo "bench rc=$rc (75: stopped at the budget, call again)"
[ -f "$B/ref250.done" ] && echo done
python3 bench/throughput/summarize.py --out "$B/results.json" --md "$B/results.md" "$B"/ref250/ \
    > "$OUT/summarize.txt" 2>&1
pack "$OUT/state.tgz" "$B" --exclude='*/logs' .
cp "$B/results.md" "$OUT/" 2>/dev/null
tail -3 "$OUT/run_sh.txt"; sed -n 1,8p "$B/results.md"
}

# step lb-builds: 30 published load_inline kernels, cold then warm: s/kernel, first verdict, waits
# A published load_inline set, one device call (about 6-9 minutes on 16 cores):
# KernelBenchLeaderboard's kernels for level-1 problems 1-6 (30 `load_inline` CUDA kernels, 5
# a problem; $D/lb holds the leaderboard's docs/assets, fetched, never committed), imported
# with `kbench import leaderboard` and replayed on the problems they were written for, every
# check on, from a cold build cache; then the same again with the cache warm. Per pass:
# seconds per kernel amortised, the first verdict's time after kbench started, builds ahead,
# and candidate-worker waits (bench/throughput/summarize.py's compile table). Goals: <= 5 s a
# kernel, first verdict within 60 s, no kernel waiting for a worker while another could start.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/scaling.sh lb-builds
#   JOBS=4 ...   # --build-jobs (default: kbench's, a build per core but one within memory)
#   SEL=1/1-5 ... # fewer kernels (5 a problem)
#   PASSES=cold ... # the cold pass only (e.g. to compare --build-jobs values, one call each)
#   GPUS=0,1,2,3 ... # --gpus (default 0): the published set on every GPU, one build pool
step_lb_builds() {
L=/tmp/lbb; SEL=${SEL:-1/1-6}; BUDGET=${BUDGET:-540}
rm -rf "$L"; mkdir -p "$OUT" "$L"  # a second call in one session starts from nothing
T0=$(date +%s)
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nproc
  nvcc --version | tail -2; "$D/kbench" --version; } > "$OUT/env.txt" 2>&1
use_sandbox
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
pack "$OUT/lb_builds.tgz" "$L/back" .
sed -n 1,8p "$OUT/results.md"; grep -A5 "^## Compile" "$OUT/results.md"
}

run_step "$@"
