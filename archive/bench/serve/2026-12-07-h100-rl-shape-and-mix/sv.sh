#!/usr/bin/env bash
# kbench serve on the GPU machine: the RL shape (L1/19-24, PyTorch) then the level-1 mix.
set -u
mkdir -p /tmp/d
xz -dc devrun/kbench.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench
cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
export PATH=$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH
NB=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null); [ -n "$NB" ] && export PATH=$NB:$PATH
source tests/gpu/bwrap.sh
KBENCH=/tmp/d/kbench OUT=$OUT/rl bash bench/serve/run.sh --kernelbench $PWD/devrun/kernelbench \
  -n 60 --only 19-24 --no-triton -k 20 --timeout-s ${RLT:-220} > $OUT/rl.txt 2>&1
KBENCH=/tmp/d/kbench OUT=$OUT/mix bash bench/serve/run.sh --kernelbench $PWD/devrun/kernelbench \
  -n 60 -k 50 --timeout-s ${MIXT:-220} > $OUT/mix.txt 2>&1
for s in rl mix; do echo "== $s"; cat $OUT/$s/summary.md 2>/dev/null | head -40; tail -3 $OUT/$s.txt; done
cd $OUT && tar -czf serve.tgz rl mix && rm -rf rl mix
