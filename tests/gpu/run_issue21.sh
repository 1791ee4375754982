#!/usr/bin/env bash
# Issue 21 on the GPU machine, one device call (under 10 minutes):
#
# - the NaN/Inf rule on the device path (outputs large enough for the GPU comparator): the
#   diag-matmul rewrite passes nan-inf, a ReLU that drops NaN fails `drops-nan`;
# - KernelBenchLeaderboard's published kernels (fetched, never committed; $D/lb holds its
#   docs/assets), imported with `kbench import leaderboard` and replayed on the problems
#   they were written for (the set's own references), `--resume` across calls ($D/lb-run is
#   the previous call's run directory, carried back), then `kbench report --claims`.
#
#   D=devrun OUT=/tmp/out SEL=1/1-13 BUDGET=420 bash tests/gpu/run_issue21.sh
#
# Assumes python3 with a CUDA build of torch (KBENCH_PYTHON=python3).
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_CACHE_DIR=${KBENCH_CACHE_DIR:-/tmp/kbench-cache} PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; L=/tmp/i21
SEL=${SEL:-1/1-13}; BUDGET=${BUDGET:-420}
mkdir -p "$OUT" "$L"
step() { echo "== $1 $(date -u +%T)"; }
step env
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nproc
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
COMMON=(--device cuda --gpus 0 --timed-calls 20 --rounds 4 --warmup 2 --quiet ${EXTRA:-})
if [ -z "${SKIP_NAN:-}" ]; then
  step "NaN/Inf rule on the device path"
  D="$D" OUT="$OUT" SELECT="${NAN_SELECT:-1/12,1/19,1/40}" bash tests/gpu/run_issue21_nan.sh > "$OUT/nan_rule.txt" 2>&1
  echo "nan rule rc=$?"; grep -E "^(PASS|FAIL|==)" "$OUT/nan_rule.txt"
fi
step "import KernelBenchLeaderboard"
$D/kbench import leaderboard "$D/lb" --out "$L/lbset" | tail -3
RUN="$L/lb-run"
if [ -f "$D/lb-run.tgz" ]; then tar -xzf "$D/lb-run.tgz" -C "$L"; fi
step "replay $SEL on the set's own problems (budget ${BUDGET}s)"
S=$(date +%s)
timeout -s INT "$BUDGET" $D/kbench run --agent replay --replay-dir "$L/lbset" --kernelbench "$L/lbset/problems" \
  --levels 1,2 --select "$SEL" "${COMMON[@]}" --resume --out "$RUN" > "$OUT/lb-run.txt" 2>&1
echo "replay rc=$? $(( $(date +%s)-S ))s"; tail -25 "$OUT/lb-run.txt"
step "claims report"
$D/kbench report "$RUN" --claims "$L/lbset/claims.json" --claims-out "$OUT/claims" > "$OUT/claims.txt" 2>&1
echo "report rc=$?"; head -30 "$OUT/claims.txt"
# One file back (the kernels are the set's own, not needed to resume or report).
tar -czf "$OUT/lb-run.tgz" -C "$L" --exclude=lb-run/kernels lb-run
