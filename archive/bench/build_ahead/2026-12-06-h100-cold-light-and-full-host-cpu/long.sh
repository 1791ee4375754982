#!/usr/bin/env bash
# long.sh: fixtures cold, then KernelBenchLeaderboard L1 cold (torch's header, helper in the
# background), with the host's CPU use sampled every 2 s (/proc/stat).
set -u
mkdir -p /tmp/d
xz -dc devrun/kbench.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench
ln -sfn $PWD/devrun/kernelbench /tmp/d/kernelbench; ln -sfn $PWD/devrun/lb /tmp/d/lb; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
export PATH=$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH
NB=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null); [ -n "$NB" ] && export PATH=$NB:$PATH
( while :; do echo "$(date +%s.%N) $(head -1 /proc/stat)"; sleep 2; done ) > $OUT/cpu.txt & CP=$!
KBENCH_WORKER_TRACE=1 STEPS="${ST:-fixtures lb}" LEVELS=1 SEL=${SEL:-1-100} WARM=0 LIMIT=${LIM:-400} \
  ARGS="--stop-starting-after ${STOP:-340}" OUT=$OUT/run bash bench/build_ahead/run.sh > $OUT/run.txt 2>&1
kill $CP
cd $OUT && cp run/summary.md summary.md; tar -czf run.tgz run && rm -rf run
tail -12 $OUT/run.txt
