#!/usr/bin/env bash
# A/B on one machine: the builds ranked by need (new) against the first wave (old), cold
# KernelBenchLeaderboard level 1 with both light headers, new first (the second run finds
# the host's page cache warm).
set -u
REPO=$PWD
export KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
export PATH=$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH
NB=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null); [ -n "$NB" ] && export PATH=$NB:$PATH
{ nvidia-smi -L; uname -r; nproc; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } > $OUT/env0.txt 2>&1
for v in new old; do
  mkdir -p /tmp/d$v; xz -dc devrun/kbench${v/old/}.xz > /tmp/d$v/kbench 2>/dev/null || xz -dc devrun/kbench-$v.xz > /tmp/d$v/kbench
  chmod +x /tmp/d$v/kbench; ln -sfn $PWD/devrun/lb /tmp/d$v/lb; cp devrun/*.whl /tmp/d$v/
done
for v in new old; do
  D=/tmp/d$v W=/tmp/ba-$v CUDA_HEADER=light CXX_HEADER=light STEPS=lb LEVELS=1 WARM=0 \
    LIMIT=${LIM:-140} ARGS="--stop-starting-after ${STOP:-105}" OUT=$OUT/$v bash bench/build_ahead/run.sh > $OUT/run-$v.txt 2>&1
done
cd $OUT && tar -czf run.tgz new old && for v in new old; do echo "== $v"; cat $v/summary.md | sed -n 3p; done
