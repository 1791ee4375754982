#!/usr/bin/env bash
# What the timing protections cost and whether equal code gets equal time, on a GPU: the
# reference agent (its own candidate) with every default check, at the commit before timed
# calls were clocked by the harness ($D/kbench-old) and now ($D/kbench), on the side-by-side
# benchmark's problems (bench/side_by_side: level 1, problems 10 to 80); then the new binary
# alone on a sample of levels 1 and 2 (random family only) for its self-speedups. Writes
# $OUT/cost.md (per problem: timing seconds old and new, self-speedup old and new; the ratio
# of the timing phases) and cost.tgz (the records).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_timing_cost.sh
set -uo pipefail
source "$(dirname "$0")/common.sh"
L=/tmp/timing-cost; rm -rf "$L"; mkdir -p "$L" "$OUT"
secret "$L/secret"
env_info | tee "$L/env.txt"
SBS=${SBS:-1/10,1/20,1/30,1/40,1/50,1/60,1/70,1/80}
# SIDES may repeat a binary (old new old2 new2: alternating passes, each old* the old binary):
# the passes are pooled, which evens out the 10% the same binary's timing moves between passes.
for side in ${SIDES:-old new}; do
  bin=$D/kbench; case $side in old*) bin=$D/kbench-old;; esac
  step "side by side set, $side"
  S=$(date +%s)
  timeout ${SBS_LIMIT:-150} $bin run --agent reference --kernelbench "$D/kernelbench" --select "$SBS" \
    --device cuda --gpus 0 --secret-from "$L/secret" --quiet --out "$L/sbs-$side" > "$L/sbs-$side.txt" 2>&1
  echo "$side rc=$? $(( $(date +%s)-S ))s"
done
if [ -n "${SAMPLE:-}" ]; then
  step "sample, new"
  S=$(date +%s)
  timeout ${SAMPLE_LIMIT:-150} $D/kbench run --agent reference --kernelbench "$D/kernelbench" --select "$SAMPLE" \
    --device cuda --gpus 0 --families random --secret-from "$L/secret" --quiet --out "$L/sample" > "$L/sample.txt" 2>&1
  echo "sample rc=$? $(( $(date +%s)-S ))s"
fi
python3 tests/gpu/timing_cost.py "$L" | tee "$OUT/cost.md"
tar czf "$OUT/cost.tgz" -C "$L" env.txt $(cd "$L" && ls -d sbs-* sample 2>/dev/null)
