#!/usr/bin/env bash
# First GPU check of the issue-3 engine: device-side comparison tests (the harness's own
# unit tests, built here as a release test binary: D/kbench-lib-tests), the worker's Python
# tests on CUDA, the smoke suite on CUDA, a reference run over a spread of KernelBench
# problems (large level-1 outputs included), and the cold load_inline build probe.
# Everything lands in $OUT/check.tar.gz plus a summary on stdout.
set -uo pipefail
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; L=/tmp/check; T=/tmp/runs
SELECT=${SELECT:-1/1,1/12,1/19,1/23,1/40,1/47,1/88,1/95,2/9,2/12,2/40,2/66,2/76,2/99,3/1,3/9,3/28,3/44}
mkdir -p "$OUT" "$L" "$T"
step() { echo "== $1 $(date -u +%T)"; }
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
tar czf "$OUT/check.tar.gz" -C /tmp check
