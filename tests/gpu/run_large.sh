#!/usr/bin/env bash
# A level-1 problem with 6.4 GB tensors (19_ReLU) through the reference agent: cases do not fit
# the case budget and are remade per candidate; then the demo again (GC off in timed calls).
set -uo pipefail
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
# D holds the release kbench binary and a copy of a KernelBench checkout as D/kernelbench (see README).
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; T=/tmp/runs; mkdir -p "$OUT" "$T"
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
