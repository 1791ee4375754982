#!/usr/bin/env bash
# KernelBenchLeaderboard level 1 (every problem), cold cache, cut: no problem starts after STOPAFTER s.
set -u
O=/tmp/o; mkdir -p $O
export KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
STEPS=lb WARM=0 LEVELS=1 LIMIT=${LBLIMIT:-560} ARGS="--stop-starting-after ${STOPAFTER:-470}" OUT=$O/l bash bench/build_ahead/run.sh > $O/l.txt 2>&1
cp $O/l/summary.md $OUT/lb_summary.md 2>/dev/null
cp $O/l/env.txt $OUT/ 2>/dev/null
tar czf $OUT/lb.tgz -C $O l l.txt
tail -12 $O/l.txt
