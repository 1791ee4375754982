#!/usr/bin/env bash
# cx.sh: KernelBenchLeaderboard L1 cold, the light C++ header run first then torch's (both with
# the light CUDA header), each cut at LIM s; GPU name, torch and the host into env.txt.
set -u
mkdir -p /tmp/d
xz -dc devrun/kbench.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench
ln -sfn $PWD/devrun/lb /tmp/d/lb; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
export PATH=$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH
NB=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null); [ -n "$NB" ] && export PATH=$NB:$PATH
CUDA_HEADER=light CXX_HEADER=${CXXH:-both} KBENCH_WORKER_TRACE=1 STEPS="${ST:-lb}" LEVELS=1 SEL=${SEL:-1-100} WARM=0 \
  LIMIT=${LIM:-280} ARGS="--stop-starting-after ${STOP:-240}" OUT=$OUT/run bash bench/build_ahead/run.sh > $OUT/run.txt 2>&1
cd $OUT && cp run/summary.md summary.md; cp run/env.txt env.txt; tar -czf run.tgz run && rm -rf run
tail -40 $OUT/summary.md
