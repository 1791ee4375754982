#!/usr/bin/env bash
# GPU checks after the compile pipeline landed: gpus, demo on CUDA, CUDA builds ahead cold/warm.
set -uo pipefail
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
# D holds the release kbench binary and a copy of a KernelBench checkout as D/kernelbench (see README).
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; T=/tmp/runs; mkdir -p "$OUT" "$T"
{ $D/kbench gpus; $D/kbench gpus --json; nproc; } 2>&1 | tee "$OUT/gpus.txt"
S=$(date +%s); timeout 240 $D/kbench demo --out $T/demo > "$OUT/demo.txt" 2>&1; echo "demo rc=$? wall=$(( $(date +%s)-S ))s" >> "$OUT/demo.txt"
cp $T/demo/records.jsonl "$OUT/demo_records.jsonl" 2>/dev/null
for pass in cold warm; do
  S=$(date +%s)
  timeout 200 $D/kbench run --agent replay --replay-dir tests/gpu/replay_smoke_cuda --suite smoke --select 1-4 --device cuda --out $T/pipe_$pass > "$OUT/pipe_$pass.txt" 2>&1
  echo "rc=$? wall=$(( $(date +%s)-S ))s" >> "$OUT/pipe_$pass.txt"
  cp $T/pipe_$pass/records.jsonl "$OUT/pipe_${pass}_records.jsonl" 2>/dev/null
done

