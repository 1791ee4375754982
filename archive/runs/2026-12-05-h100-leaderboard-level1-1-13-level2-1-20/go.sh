#!/usr/bin/env bash
# go.sh PHASES SECONDS: phases among lb hdr serve (comma separated), all within SECONDS
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
if [[ $P == *,lb,* ]]; then
  L=/tmp/lbv; mkdir -p $L
  [ -d $L/lbset ] || /tmp/d/kbench import leaderboard /tmp/d/lb --out $L/lbset > $OUT/import.txt 2>&1
  if [ ! -f $L/run/run.json ] && [ -f devrun/lb-run.tgz ]; then tar -xzf devrun/lb-run.tgz -C $L; fi
  RES=""; [ -f $L/run/run.json ] && RES=--resume
  STOP=$(( $(left) - ${LBTAIL:-150} ))
  echo "lb ${LBSEL}: stop starting after $STOP s $RES $(date -u +%T)" >> $OUT/lb.txt
  timeout -k 10 -s INT $(( $(left) - 20 )) /tmp/d/kbench run --agent replay --replay-dir $L/lbset --kernelbench $L/lbset/problems \
    --levels 1,2 --select "$LBSEL" --device cuda --gpus 0 --time-as kernelbench,kernelbench-v0.1,cuda-l1 \
    --stop-starting-after $STOP --out $L/run $RES 2>&1 | grep -v "matches no selected problem" >> $OUT/lb.txt
  echo "lb rc=${PIPESTATUS[0]} $(date -u +%T)" >> $OUT/lb.txt
  /tmp/d/kbench report $L/run --claims $L/lbset/claims.json --claims-out $L/claims > $OUT/claims.txt 2>&1
  tar -czf $OUT/lb-run.tgz -C $L --exclude=run/kernels run claims
  tail -5 $OUT/lb.txt; head -40 $OUT/claims.txt
fi
if [[ $P == *,hdr,* ]]; then
  H=/tmp/hdr; mkdir -p $H
  ( LIMIT=${HRL:-120} WARM=0 CUDA_HEADER=both STEPS="${HSTEPS:-fixtures lb}" LEVELS=1 SEL=${HSEL:-1/1-6} \
    ARGS="--stop-starting-after ${HSTOP:-90}" OUT=$H bash bench/build_ahead/run.sh > $H/log.txt 2>&1; echo "hdr rc=$?" >> $H/log.txt )
  python3 bench/build_ahead/summarize.py $H > $OUT/hdr-summary.txt 2>&1
  tar -czf $OUT/hdr.tgz -C $H --exclude='*/kernels' .
  tail -5 $H/log.txt; cat $OUT/hdr-summary.txt | tail -40
fi
if [[ $P == *,serve,* ]]; then
  S=/tmp/sv; mkdir -p $S
  ( KBENCH=/tmp/d/kbench OUT=$S bash bench/serve/run.sh --kernelbench /tmp/d/kernelbench -n ${SVN:-60} ${SVONLY:+--only $SVONLY --no-triton} \
     -k ${SVK:-100} --timeout-s ${SVT:-230} > $S/run.txt 2>&1; echo "serve rc=$?" >> $S/run.txt )
  tar -czf $OUT/serve.tgz -C $S .
  tail -45 $S/run.txt
fi
echo "go done $(date -u +%T), $(( $(date +%s) - T0 )) s"
