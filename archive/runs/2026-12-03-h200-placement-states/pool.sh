#!/usr/bin/env bash
# The fresh-pool worker: its CUDA worker tests, the 3D transposed-convolution outliers twice,
# then (if L2/77 is within 3% both times) the self-speedup sweep over levels 1-2 for the rest
# of the call.
set -u
D=devrun
gunzip -c $D/kbench-pool.gz > /tmp/kbench-pool && chmod +x /tmp/kbench-pool
source $D/bwrap.sh
export KBENCH_CACHE_DIR=/tmp/kbench-cache KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.backends.cudnn.version())'; uname -r; } > $OUT/env.txt 2>&1
T0=$(date +%s)
(cd harness/python && timeout 150 python3 -m unittest test_worker.test_cuda) > $OUT/pytest.txt 2>&1; echo "pytest rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/pytest.txt
tail -3 $OUT/pytest.txt
mkdir -p /tmp/ss /tmp/c; printf '6eed%.0s' $(seq 16) > /tmp/ss/secret
run() {
  local name=$1 sel=$2; local t0=$(date +%s)
  timeout -k 10 150 /tmp/kbench-pool run --agent reference --kernelbench $D/kernelbench --select $sel \
    --device cuda --gpus 0 --families random --secret-from /tmp/ss/secret --quiet --out /tmp/c/$name > /tmp/c-$name.log 2>&1
  echo "== $name rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/pool.txt
  python3 $D/sp.py /tmp/c/$name/records.jsonl >> $OUT/pool.txt 2>&1
}
S=1/58,1/68,1/77,2/61,2/77
run pool1 $S; run pool2 $S
cat $OUT/pool.txt
BAD=$(grep -h "L2/77 " $OUT/pool.txt | awk '{split($4,a,"="); if (a[2] < 0.97 || a[2] > 1.03) print}' | wc -l)
LEFT=$(( 560 - ($(date +%s) - T0) ))
if [ "$BAD" = 0 ] && [ $LEFT -gt 60 ]; then
  B=kbench-pool SEL=${SEL:-1/1-100,2/1-100} bash $D/selfsp.sh $LEFT
else echo "sweep skipped: bad=$BAD left=$LEFT" | tee -a $OUT/pool.txt; fi
