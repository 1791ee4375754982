#!/usr/bin/env bash
# L2/77 and the other 3D transposed-convolution outliers: profiled timed calls (prof), and
# both workers releasing their cached blocks at time_open (sym) against the default, alternating.
set -u
D=devrun
[ -x /tmp/kbench-diag ] || { gunzip -c $D/kbench-diag.gz > /tmp/kbench-diag && chmod +x /tmp/kbench-diag; }
source $D/bwrap.sh
export KBENCH_CACHE_DIR=/tmp/kbench-cache KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.backends.cudnn.version())'; uname -r; $KBENCH_BWRAP --version; } > $OUT/env.txt 2>&1
mkdir -p /tmp/ss; printf '6eed%.0s' $(seq 16) > /tmp/ss/secret
run() { # name select [env]
  local name=$1 sel=$2; shift 2
  local t0=$(date +%s)
  env "$@" timeout -k 10 200 /tmp/kbench-diag run --agent reference --kernelbench $D/kernelbench --select $sel \
    --device cuda --gpus 0 --families random --secret-from /tmp/ss/secret --quiet --out /tmp/c/$name > /tmp/c-$name.log 2>&1
  echo "== $name rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/diag.txt
  python3 $D/sp.py /tmp/c/$name/records.jsonl >> $OUT/diag.txt 2>&1
}
mkdir -p /tmp/c
run prof 2/77,2/61 KBENCH_WORKER_TRACE=prof
grep -rh TIMEDPROF /tmp/c/prof > $OUT/timedprof.txt 2>&1
S=1/58,1/68,1/77,2/61,2/77
for i in 1 2; do
  run def$i $S X=1
  run sym$i $S KBENCH_WORKER_TRACE=sym
done
cat $OUT/diag.txt
