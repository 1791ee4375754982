#!/usr/bin/env bash
# go.sh PHASE SECONDS: attacks (timing-attacks with the landed binary, then the sweep) or sweep (resume)
set -u
T0=$(date +%s)
mkdir -p /tmp/d
[ -x /tmp/d/kbench ] || { xz -dc devrun/kbench.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench; }
ln -sfn $PWD/devrun/kernelbench /tmp/d/kernelbench; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH_CACHE_DIR=/tmp/kbench-cache
source tests/gpu/bwrap.sh
if [ "$1" = attacks ]; then
  { uname -r; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__, torch.backends.cudnn.version())'; /tmp/d/kbench --version; } > $OUT/env.txt 2>&1
  SIDES=new OUT=$OUT bash tests/gpu/integrity.sh timing-attacks > $OUT/attacks-log.txt 2>&1
fi
# the sweep: the reference agent as its own candidate over levels 1-2, resumed
if [ ! -f /tmp/ss/sample/run.json ] && [ -f devrun/sample.tgz ]; then mkdir -p /tmp/ss && tar -xzf devrun/sample.tgz -C /tmp/ss; fi
mkdir -p /tmp/ss; printf '6eed%.0s' $(seq 16) > /tmp/ss/secret
LEFT=$(( $2 - ($(date +%s) - T0) - 25 ))
RES=""; [ -f /tmp/ss/sample/run.json ] && RES=--resume
echo "selfsp: $LEFT s, $RES $(date -u +%T)" >> $OUT/selfsp.txt
timeout -k 10 -s TERM $LEFT /tmp/d/kbench run --agent reference --kernelbench devrun/kernelbench --select 1/1-100,2/1-100 \
  --device cuda --gpus 0 --families random --secret-from /tmp/ss/secret --quiet --out /tmp/ss/sample $RES >> $OUT/selfsp.txt 2>&1
echo "rc=$? $(date -u +%T)" >> $OUT/selfsp.txt
cp $OUT/env.txt /tmp/ss/env.txt 2>/dev/null || { nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; } > /tmp/ss/env.txt 2>&1
python3 tests/gpu/timing_cost.py /tmp/ss > $OUT/selfsp.md 2>&1
tar -czf $OUT/sample.tgz -C /tmp/ss sample
tail -8 $OUT/selfsp.md; tail -3 $OUT/selfsp.txt; cat $OUT/attacks.md 2>/dev/null
