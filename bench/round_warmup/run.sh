#!/usr/bin/env bash
# Round warm-up: what the untimed call opening each timing round buys (ROUND_WARMUP_UNTIL_MS,
# harness/src/config/run.rs). On the GPU machine, from the repository root: the reference
# as candidate, `--families random`, timed with `--round-warmup 0` and `1` alternately (ORDER),
# on problems spanning call times from 0.1 to 29 ms; then analyze.py over the records.
#
#   D=devrun OUT=/tmp/out bash bench/round_warmup/run.sh
#   python3 bench/round_warmup/analyze.py $OUT > $OUT/results.md
#
# With no opening call, a round's two timed calls are its cold first and its warm second:
# their ratio is what the opening call removes. Settings: D (kbench binary and kernelbench/),
# SEL (--select), ORDER (round warm-ups of the runs, in order), BUDGET (seconds; no new run
# starts after it), KBENCH_BWRAP (the sandbox binary, when not on PATH).
set -uo pipefail
D=${D:-devrun}; OUT=${OUT:-/tmp/round_warmup}; WORK=${WORK:-/tmp/round_warmup_work}
SEL=${SEL:-1/12,1/95,3/4,2/6,2/24,3/47,2/94,1/10,1/20,1/40,1/60,1/30,1/70}
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1 KBENCH_CACHE_DIR=${KBENCH_CACHE_DIR:-$WORK/cache}
mkdir -p "$OUT" "$WORK"
{ nvidia-smi -L; "$KBENCH_PYTHON" -c 'import torch; print("torch", torch.__version__, torch.version.cuda); torch.zeros(1, device="cuda")'; } | tee "$OUT/env.txt"
S0=$(date +%s); i=0
for rw in ${ORDER:-0 1 0 1}; do
  i=$((i + 1))
  if [ $(( $(date +%s) - S0 )) -gt "${BUDGET:-420}" ]; then echo "budget: stop before run $i"; break; fi
  s=$(date +%s); name=run$i-rw$rw
  timeout -s INT 200 "$D/kbench" run --agent reference --kernelbench "$D/kernelbench" --select "$SEL" \
    --families random --device cuda --round-warmup "$rw" --out "$WORK/$name" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - s ))s"
  mkdir -p "$OUT/$name" && cp "$WORK/$name/records.jsonl" "$OUT/$name/"
done
