#!/usr/bin/env bash
# Issue 24 on the GPU: where a stress case's time goes on large level-1 problems (the
# records' per-case `times`), and the memory-hog exploit (D2): a reference that runs out of
# GPU memory beside the candidate is remade with the candidate's worker stopped. Everything
# is written under $OUT as it goes (a call cut off still returns what ran).
set -uo pipefail
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; T=/tmp/runs24
SELECT=${SELECT:-1/20,1/30}
rm -rf "$T"; mkdir -p "$OUT" "$T"
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
P=adversarial/exploits/problems/level1/1_Scale_Add.py
for k in 1_memory_hog 1_honest_cuda; do
  echo "== check $k $(date -u +%T)"
  timeout 200 $D/kbench check --problem $P --kernel adversarial/exploits/cuda/level1/$k.py \
    --device cuda --no-timing > "$OUT/check_$k.txt" 2>&1
  echo "exit $?"; tail -6 "$OUT/check_$k.txt"
done
echo "== ref $SELECT $(date -u +%T)"
timeout 330 $D/kbench run --agent reference --kernelbench $D/kernelbench --select "$SELECT" \
  --device cuda --gpus 0 --out $T/ref > "$OUT/ref.txt" 2>&1
echo "exit $?"; tail -4 "$OUT/ref.txt"
cp $T/ref/records.jsonl "$OUT/ref_records.jsonl" 2>/dev/null
python3 tests/gpu/case_times.py "$T/ref/records.jsonl" | tee "$OUT/case_times.txt"
