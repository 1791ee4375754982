#!/usr/bin/env bash
# go.sh PHASES SECONDS: phases among triton selfsp lb (comma separated), all within SECONDS
set -u
T0=$(date +%s); LIMIT=$2
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
mkdir -p /tmp/d
[ -x /tmp/d/kbench ] || { xz -dc devrun/kbench.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench; }
ln -sfn $PWD/devrun/kernelbench /tmp/d/kernelbench; ln -sfn $PWD/devrun/lb /tmp/d/lb; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH_CACHE_DIR=/tmp/kbench-cache
source tests/gpu/bwrap.sh
{ uname -r; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc; free -g | head -2
  python3 -c 'import torch, triton; print("torch", torch.__version__, torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "triton", triton.__version__)'
  /tmp/d/kbench --version; echo "bwrap $KBENCH_BWRAP"; } > $OUT/env.txt 2>&1
P=",$1,"
if [[ $P == *,attacks,* ]]; then
  mkdir -p /tmp/att; ( D=/tmp/d OUT=/tmp/att SIDES=new ATTACK_LIMIT=${AL:-220} CORPUS_LIMIT=${CL:-200} \
    bash tests/gpu/integrity.sh timing-attacks > /tmp/att/log.txt 2>&1; echo "attacks rc=$?" >> /tmp/att/log.txt )
  tar -czf $OUT/attacks.tgz -C /tmp/att . ; tail -30 /tmp/att/log.txt
fi
if [[ $P == *,triton,* ]]; then
  mkdir -p /tmp/tr; OUT=/tmp/tr bash tests/gpu/smoke.sh triton > /tmp/tr/log.txt 2>&1; echo "triton rc=$?" >> /tmp/tr/log.txt
  cat /tmp/tr/log.txt; tar -czf $OUT/triton.tgz -C /tmp/tr .
fi
if [[ $P == *,selfsp,* ]]; then
  mkdir -p /tmp/ss; printf '6eed%.0s' $(seq 16) > /tmp/ss/secret; cp $OUT/env.txt /tmp/ss/env.txt
  RES=""; [ -f /tmp/ss/sample/run.json ] && RES=--resume
  B=${SSB:-300}; echo "selfsp ${SSSEL:-2/59-100}: $B s $RES $(date -u +%T)" >> $OUT/selfsp.txt
  timeout -k 10 -s TERM $B /tmp/d/kbench run --agent reference --kernelbench devrun/kernelbench --select ${SSSEL:-2/59-100} \
    --device cuda --gpus 0 --families random --secret-from /tmp/ss/secret --quiet --out /tmp/ss/sample $RES >> $OUT/selfsp.txt 2>&1
  echo "rc=$? $(date -u +%T)" >> $OUT/selfsp.txt
  python3 tests/gpu/timing_cost.py /tmp/ss > $OUT/selfsp.md 2>&1
  tar -czf $OUT/sample.tgz -C /tmp/ss --exclude=sample/kernels sample
  tail -4 $OUT/selfsp.md; tail -3 $OUT/selfsp.txt
fi
if [[ $P == *,lb,* ]]; then
  L=/tmp/lbv; mkdir -p $L
  [ -d $L/lbset ] || /tmp/d/kbench import leaderboard /tmp/d/lb --out $L/lbset > $OUT/import.txt 2>&1
  if [ ! -f $L/run/run.json ] && [ -f devrun/lb-run.tgz ]; then tar -xzf devrun/lb-run.tgz -C $L; fi
  RES=""; [ -f $L/run/run.json ] && RES=--resume
  STOP=$(( $(left) - ${LBTAIL:-150} ))
  echo "lb ${LBSEL}: stop starting after $STOP s $RES $(date -u +%T)" >> $OUT/lb.txt
  timeout -k 10 -s INT $(( $(left) - 20 )) /tmp/d/kbench run --agent replay --replay-dir $L/lbset --kernelbench $L/lbset/problems \
    --levels 1,2 --select "$LBSEL" --device cuda --gpus 0 --time-as kernelbench,kernelbench-v0.1,cuda-l1 \
    --stop-starting-after $STOP --out $L/run $RES >> $OUT/lb.txt 2>&1
  echo "lb rc=$? $(date -u +%T)" >> $OUT/lb.txt
  /tmp/d/kbench report $L/run --claims $L/lbset/claims.json --claims-out $L/claims > $OUT/claims.txt 2>&1
  tar -czf $OUT/lb-run.tgz -C $L --exclude=run/kernels run claims
  tail -5 $OUT/lb.txt; head -40 $OUT/claims.txt
fi
