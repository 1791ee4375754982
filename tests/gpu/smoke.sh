#!/usr/bin/env bash
# The smoke suite of GPU runs: `bash tests/gpu/smoke.sh STEP` from the repository root on
# the GPU machine (tests/gpu/README.md). Steps:
#   reference  the reference agent on 21 problems of levels 1-3, then a replay of a CUDA load_inline kernel
#   pipeline   kbench gpus, the demo on CUDA, CUDA builds ahead cold then warm
#   large      a 6.4 GB level-1 problem through the reference agent, then the demo with GC off in timed calls
#   engine     library GPU tests, worker CUDA tests, the smoke suite on CUDA, a reference spread, the cold build probe
#   harness    library GPU tests (devmem, start gate), worker CUDA tests, L1/5, the 4 GiB-model loads
#   triton     Triton fixtures compiled for the GPU, in the sandbox, every family
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# step reference: the reference agent on 21 problems of levels 1-3, then a replay of a CUDA load_inline kernel
# The reference agent on 21 KernelBench problems across levels 1-3, then a
# replay of a real CUDA load_inline kernel. Runs on the device machine from the repo root.
step_reference() {
use_cache_dir
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$OUT/gpu.txt"
$D/kbench setup 2>&1 | tee -a "$OUT/gpu.txt"
SEL=${SEL:-1/1,1/8,1/12,1/17,1/40,1/50,1/88,1/95,2/9,2/12,2/29,2/40,2/66,2/76,2/86,2/99,3/1,3/4,3/9,3/19,3/28}
START=$(date +%s)
timeout ${REF_LIMIT:-480} $D/kbench run --agent reference --kernelbench $D/kernelbench --select "$SEL" --device cuda --out "$OUT/ref" 2>&1 | tee "$OUT/ref.txt"
echo "reference run rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - START ))s" | tee -a "$OUT/ref.txt"
[ "${SKIP_REPLAY:-0}" = 1 ] && { cp "$OUT/ref/records.jsonl" "$OUT/ref_records.jsonl"; rm -rf "$OUT/ref"; exit 0; }
START=$(date +%s)
$D/kbench run --agent replay --replay-dir tests/gpu/replay_kernelbench_cuda --kernelbench $D/kernelbench --select 1/88 --device cuda --out "$OUT/replay" 2>&1 | tee "$OUT/replay.txt"
echo "replay run rc=${PIPESTATUS[0]} wall=$(( $(date +%s) - START ))s" | tee -a "$OUT/replay.txt"
cp "$OUT/ref/records.jsonl" "$OUT/ref_records.jsonl" 2>/dev/null
cp "$OUT/replay/records.jsonl" "$OUT/replay_records.jsonl" 2>/dev/null
rm -rf "$OUT/ref" "$OUT/replay"
}

# step pipeline: kbench gpus, the demo on CUDA, CUDA builds ahead cold then warm
# GPU checks after the compile pipeline landed: gpus, demo on CUDA, CUDA builds ahead cold/warm.
step_pipeline() {
use_cache_dir
# D holds the release kbench binary and a copy of a KernelBench checkout as D/kernelbench (see README).
T=/tmp/runs; mkdir -p "$OUT" "$T"
{ $D/kbench gpus; $D/kbench gpus --json; nproc; } 2>&1 | tee "$OUT/gpus.txt"
S=$(date +%s); timeout 240 $D/kbench demo --out $T/demo > "$OUT/demo.txt" 2>&1; echo "demo rc=$? wall=$(( $(date +%s)-S ))s" >> "$OUT/demo.txt"
cp $T/demo/records.jsonl "$OUT/demo_records.jsonl" 2>/dev/null
for pass in cold warm; do
  S=$(date +%s)
  timeout 200 $D/kbench run --agent replay --replay-dir tests/gpu/replay_smoke_cuda --suite smoke --select 1-4 --device cuda --out $T/pipe_$pass > "$OUT/pipe_$pass.txt" 2>&1
  echo "rc=$? wall=$(( $(date +%s)-S ))s" >> "$OUT/pipe_$pass.txt"
  cp $T/pipe_$pass/records.jsonl "$OUT/pipe_${pass}_records.jsonl" 2>/dev/null
done
}

# step large: a 6.4 GB level-1 problem through the reference agent, then the demo with GC off in timed calls
# A level-1 problem with 6.4 GB tensors (19_ReLU) through the reference agent: cases do not fit
# the case budget and are remade per candidate; then the demo again (GC off in timed calls).
step_large() {
use_cache_dir
# D holds the release kbench binary and a copy of a KernelBench checkout as D/kernelbench (see README).
T=/tmp/runs; mkdir -p "$OUT" "$T"
S=$(date +%s)
( while sleep 5; do ps -o rss= -C kbench | awk '{s+=$1} END {print s}'; done ) > "$T/rss.txt" &
MON=$!
timeout ${LARGE_LIMIT:-420} $D/kbench run --agent reference --kernelbench $D/kernelbench --select 1/19 --device cuda --out $T/large > "$OUT/large.txt" 2>&1
echo "rc=$? wall=$(( $(date +%s)-S ))s peak harness RSS KiB=$(sort -n $T/rss.txt | tail -1)" >> "$OUT/large.txt"
kill $MON
cp $T/large/records.jsonl "$OUT/large_records.jsonl" 2>/dev/null
[ "${SKIP_DEMO:-0}" = 1 ] && exit 0
S=$(date +%s); timeout 150 $D/kbench demo --out $T/demo > "$OUT/demo.txt" 2>&1; echo "demo rc=$? wall=$(( $(date +%s)-S ))s" >> "$OUT/demo.txt"
cp $T/demo/records.jsonl "$OUT/demo_records.jsonl" 2>/dev/null
}

# step engine: library GPU tests, worker CUDA tests, the smoke suite on CUDA, a reference spread, the cold build probe
# A first GPU check of the engine: device-side comparison tests (the harness's own
# unit tests, built here as a release test binary: D/kbench-lib-tests), the worker's Python
# tests on CUDA, the smoke suite on CUDA, a reference run over a spread of KernelBench
# problems (large level-1 outputs included), and the cold load_inline build probe.
# Everything lands in $OUT/check.tar.gz plus a summary on stdout.
step_engine() {
use_cache_dir
L=/tmp/check; T=/tmp/runs
SELECT=${SELECT:-1/1,1/12,1/19,1/23,1/40,1/47,1/88,1/95,2/9,2/12,2/40,2/66,2/76,2/99,3/1,3/9,3/28,3/44}
mkdir -p "$OUT" "$L" "$T"
{
  step env; nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'; nproc
  $D/kbench --version; $D/kbench gpus
} > "$L/env.txt" 2>&1
cat "$L/env.txt"
step libtests
S=$(date +%s)
timeout 150 $D/kbench-lib-tests --test-threads 1 > "$L/libtests.txt" 2>&1; echo "libtests rc=$? $(( $(date +%s)-S ))s"
grep -E "test result|FAILED|panicked|GiB/s|skipp" "$L/libtests.txt" | head -20
step pytests
S=$(date +%s)
(cd harness/python && timeout 120 python3 -m unittest test_worker) > "$L/pytests.txt" 2>&1; echo "pytests rc=$? $(( $(date +%s)-S ))s"; tail -3 "$L/pytests.txt"
step demo
S=$(date +%s)
timeout 120 $D/kbench demo --out $T/demo > "$L/demo.txt" 2>&1; echo "demo rc=$? $(( $(date +%s)-S ))s"; tail -22 "$L/demo.txt"
step ref
S=$(date +%s)
timeout 300 $D/kbench run --agent reference --kernelbench $D/kernelbench --select "$SELECT" --device cuda --gpus 0 --out $T/ref > "$L/ref.txt" 2>&1; echo "ref rc=$? $(( $(date +%s)-S ))s"; tail -30 "$L/ref.txt"
cp $T/ref/records.jsonl "$L/ref_records.jsonl" 2>/dev/null; cp $T/ref/gpu_samples.jsonl "$L/" 2>/dev/null
cp $T/demo/records.jsonl "$L/demo_records.jsonl" 2>/dev/null
pack "$OUT/check.tar.gz" /tmp check
}

# step harness: library GPU tests (devmem, start gate), worker CUDA tests, L1/5, the 4 GiB-model loads
# GPU checks of harness changes that CPU tests cannot reach, one device call (about 4 minutes
# on one H200):
#   1. the library's GPU tests (a test binary built here with `cargo test --release -p kbench
#      --lib --no-run`, copied to $D/kbench_lib_tests): `gpu::devmem` (copies and fills are
#      done on the device when they return: the race that failed L1/5 on one H200 on
#      2026-11-28) and the start gate's;
#   2. the worker's CUDA tests (float64 model made on the device among what they load);
#   3. L1/5 (a 4 GiB input, the race's victim) with every check, RUNS times on GPU 0;
#   4. the problems whose models take seconds to build on the host (4 GiB of Linear weights:
#      L2/55, 56, 59, 68 and L3/2), every check, on GPU 0: their loads sent ahead now build
#      unpaused while kernels are timed; `reference_open_s` and `load_s` per record say
#      whether the next problem's reference was ready in time.
# Every record must be ok. Results under $OUT (checks.tgz: logs, records, summaries).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/smoke.sh harness
step_harness() {
export KBENCH_WORKER_TRACE=1
BACK=$OUT; L=/tmp/harness_checks; RUNS=${RUNS:-2}
rm -rf "$L"; mkdir -p "$L" "$BACK"
use_sandbox
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; "$D/kbench" --version; nproc; } > "$L/env.txt" 2>&1
status=0
if [ -x "$D/kbench_lib_tests" ]; then
    timeout 300 "$D/kbench_lib_tests" gpu::devmem worker::gate --test-threads 1 > "$L/lib_tests.txt" 2>&1
    rc=$?; echo "library GPU tests: exit $rc"; grep -E "^test |test result" "$L/lib_tests.txt"
    [ $rc = 0 ] || status=1
fi
(cd harness/python && timeout 300 python3 -m unittest test_worker.test_cuda test_worker.test_stability) > "$L/pytests.txt" 2>&1
rc=$?; echo "worker CUDA tests: exit $rc"; tail -3 "$L/pytests.txt"
[ $rc = 0 ] || status=1
steps=()
for i in $(seq 1 "$RUNS"); do steps+=("l1_5_$i:1/5"); done
steps+=("big_models:2/55,2/56,2/59,2/68,3/2")
for step in "${steps[@]}"; do
    IFS=: read -r name sel <<< "$step"
    timeout 400 "$D/kbench" run --agent reference --kernelbench "$D/kernelbench" --select "$sel" \
        --families all --device cuda --gpus 0 --out "$L/$name" > "$L/$name.txt" 2>&1
    echo "$name rc=$?"
    python3 - "$L/$name/records.jsonl" <<'EOF' || status=1
import json, sys
bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    p, o, ph = r["problem"], r["outcome"], r.get("phases") or {}
    sp = (r.get("timing") or {}).get("speedup")
    print(f"  L{p['level']}/{p['id']} {p['name']}: {o['kind']} speedup {sp} wall {r['wall_s']:.1f}s"
          f" reference_open {ph.get('reference_open_s', 0):.2f}s load {r.get('load_s') or 0:.2f}s")
    if o["kind"] != "ok":
        print("    ", json.dumps(o)[:400])
    bad += o["kind"] != "ok"
sys.exit(1 if bad else 0)
EOF
done
for d in "$L"/*/; do rm -rf "$d/kernels"; done
pack "$BACK/checks.tgz" "$L" .
exit $status
}

# step triton: Triton fixtures compiled for the GPU, in the sandbox, every family
# Triton candidates on a GPU, in the sandbox, every check on: the CPU fixtures of
# tests/triton_cpu.rs (there under Triton's interpreter) compiled by Triton for the GPU, and
# one the interpreter cannot judge (`tl.dot` in TF32, which it computes in fp32: on an H200
# it fails as `integrity`, rule precision-downgrade, its error against float64 5000 times the
# fp32 reference's). Each has the outcome written beside it; the step fails when one differs.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/smoke.sh triton
step_triton() {
mkdir -p "$OUT"
[ -f "$D/kbench.gz" ] && gunzip -kf "$D/kbench.gz" && chmod +x "$D/kbench"
{ nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__, torch.version.cuda, "triton", triton.__version__)'
  "$D/kbench" --version; } > "$OUT/env.txt" 2>&1
use_sandbox
local status=0
while read -r problem k want; do
    timeout 280 "$D/kbench" check --problem "suites/smoke/$problem.py" \
        --kernel "tests/fixtures/triton/$k.py" --device cuda > "$OUT/$k.txt" 2>&1
    got=$(sed -n 's/^outcome: \([a-z_]*\).*/\1/p' "$OUT/$k.txt" | head -1)
    echo "$k: outcome ${got:-none}, expected $want"
    if [ "$got" != "$want" ]; then status=1; tail -25 "$OUT/$k.txt"; fi
done <<'EOF'
2_ELU 2_triton_elu ok
2_ELU 2_triton_elu_no_alpha mismatch
4_Softmax 4_triton_online_softmax ok
4_Softmax 4_triton_softmax_no_max mismatch
5_Matmul_Irregular_Shapes 5_triton_matmul ok
5_Matmul_Irregular_Shapes 5_triton_matmul_tf32 integrity
EOF
return $status
}

run_step "$@"
