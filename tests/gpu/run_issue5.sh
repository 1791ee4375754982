#!/usr/bin/env bash
# Issue 5 on the GPU: the worker's CUDA tests, the smoke suite with every case family,
# `kbench check` over the stress fixtures (tests/fixtures/stress, run here on CUDA) and
# two CUDA kernels (tests/gpu/stress_cuda: fmaxf drops NaN, --use_fast_math flushes
# denormals), a reference run over level-1 problems whose outputs are GiB-sized, then
# the suite audit (resumable: AUDIT_SECS bounds it, state kept in $D/audit).
# Logs land in $OUT/issue5.tar.gz and $OUT/audit.tgz, with a summary on stdout.
set -uo pipefail
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; L=/tmp/issue5; T=/tmp/runs5
AUDIT_SECS=${AUDIT_SECS:-240}; PARTS=${PARTS:-env,pytests,smoke,check,ref,audit}
SELECT=${SELECT:-1/19,1/20,1/23,1/31,1/32,1/40,1/47,1/88}
rm -rf "$L" "$T"; mkdir -p "$OUT" "$L" "$T" "$D/audit"
step() { echo "== $1 $(date -u +%T)"; }
has() { [[ ",$PARTS," == *",$1,"* ]]; }
if has env; then
  { nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'
    $D/kbench --version; } > "$L/env.txt" 2>&1; cat "$L/env.txt"
fi
if has pytests; then
  step pytests; S=$(date +%s)
  (cd harness/python && timeout 150 python3 -m unittest test_worker) > "$L/pytests.txt" 2>&1
  echo "pytests rc=$? $(( $(date +%s)-S ))s"; tail -3 "$L/pytests.txt"
fi
if has smoke; then
  step smoke; S=$(date +%s)
  timeout 200 $D/kbench run --suite smoke --device cuda --out $T/smoke > "$L/smoke.txt" 2>&1
  echo "smoke rc=$? $(( $(date +%s)-S ))s"; tail -25 "$L/smoke.txt"
  cp $T/smoke/records.jsonl "$L/smoke_records.jsonl" 2>/dev/null
fi
if has check; then
  step check; S=$(date +%s)
  P=tests/fixtures/stress/problems/level1
  for k in tests/fixtures/stress/kernels/level1/*.py tests/gpu/stress_cuda/level1/*.py; do
    b=$(basename "$k" .py); id=${b%%_*}; prob=$(ls $P/${id}_*.py)
    case "$b" in *_cpp) continue;; esac   # a CPU extension
    echo "--- $k on $prob"
    timeout 240 $D/kbench check --problem "$prob" --kernel "$k" --device cuda --no-timing 2>&1 | tail -16
    echo "rc=${PIPESTATUS[0]}"
  done > "$L/check.txt" 2>&1
  echo "check $(( $(date +%s)-S ))s"; grep -E "^---|^rc=|verdict|FAIL|flush" "$L/check.txt" | head -60
fi
if has ref; then
  step ref; S=$(date +%s)
  timeout ${REF_SECS:-300} $D/kbench run --agent reference --kernelbench $D/kernelbench --select "$SELECT" \
    --device cuda --no-timing --out $T/ref > "$L/ref.txt" 2>&1
  echo "ref rc=$? $(( $(date +%s)-S ))s"; tail -30 "$L/ref.txt"
  cp $T/ref/records.jsonl "$L/ref_records.jsonl" 2>/dev/null
fi
tar czf "$OUT/issue5.tar.gz" -C /tmp issue5
if has audit; then
  step audit; S=$(date +%s)
  timeout -s INT -k 30 "$AUDIT_SECS" $D/kbench audit --kernelbench $D/kernelbench --device cuda \
    --jobs ${AUDIT_JOBS:-2} --out $D/audit --resume > "$D/audit/stdout.txt" 2> "$D/audit/stderr.txt"
  echo "audit rc=$? $(( $(date +%s)-S ))s"; tail -5 "$D/audit/stderr.txt"
  wc -l "$D/audit/audit.progress.jsonl" 2>/dev/null
  tar czf "$OUT/audit.tgz" -C "$D" audit
fi
