#!/usr/bin/env bash
# One long cold KernelBenchLeaderboard level-1 run, both light headers.
set -u
REPO=$PWD
mkdir -p /tmp/d
xz -dc devrun/${BIN:-kbench}.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench
ln -sfn $PWD/devrun/lb /tmp/d/lb; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
export PATH=$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH
NB=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null); [ -n "$NB" ] && export PATH=$NB:$PATH
{ nvidia-smi -L; uname -r; nproc; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } > $OUT/env0.txt 2>&1
W=/tmp/ba-long-${BIN:-kbench} CUDA_HEADER=light CXX_HEADER=light STEPS=lb LEVELS=${LV:-1} SEL=${SEL:-} WARM=0 \
  LIMIT=${LIM:-560} ARGS="--stop-starting-after ${STOP:-520}" OUT=$OUT/long bash bench/build_ahead/run.sh > $OUT/run-long.txt 2>&1
find /tmp/ba-long-${BIN:-kbench} -name 'kbench-c*-header.txt' -exec cat {} + | sort | uniq -c > $OUT/markers.txt 2>&1
python3 devrun/verdicts.py $OUT/long > $OUT/verdicts.txt 2>&1
cd $OUT && tar -czf run.tgz long && rm -rf long
head -c 3000 verdicts.txt; cat markers.txt; tail -8 run-long.txt
