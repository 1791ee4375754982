#!/usr/bin/env bash
# GPU run for issue 2: reference agent on 21 KernelBench problems across levels 1-3, then a
# replay of a real CUDA load_inline kernel. Runs on the device machine from the repo root.
set -uo pipefail
export KBENCH_PYTHON=python3
export KBENCH_CACHE_DIR=/tmp/kbench-cache
export PYTHONUNBUFFERED=1
D=${D:-devrun}  # holds the release kbench binary and a copy of a KernelBench checkout as D/kernelbench (see README)
OUT=${OUT:-/tmp/out}
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
