#!/usr/bin/env bash
# Issue 3 on a host with two GPUs (the device tool's nvidia-h200-x2), in two calls that each
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
#   D=devrun CALL=1 OUT=/tmp/out bash tests/gpu/run_issue3_x2.sh
#
# The subset: every fifth problem of each level (20 + 20 + 10), KernelBench's check
# (--families random). Results (logs, run.json, records, GPU samples) land in $OUT/callN;
# summarize them here with bench/throughput/summarize.py.
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; CALL=${CALL:-1}
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
tar czf "$OUT/call$CALL.tgz" -C "$OUT" "call$CALL" && rm -rf "${L:?}"
