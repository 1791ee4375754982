#!/usr/bin/env bash
# Probe cost: the same problems timed by the binary before the placement probe (old), the
# landed one (head) and the one with the probe's screen and warm-up credit (new), in turn.
set -u
D=devrun
for b in old head new; do xz -dc $D/kbench-$b.xz > /tmp/kbench-$b && chmod +x /tmp/kbench-$b; done
source $D/bwrap.sh
export KBENCH_CACHE_DIR=/tmp/kbench-cache KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.backends.cudnn.version())'; uname -r; } > $OUT/env.txt 2>&1
T0=$(date +%s)
if [ -z "${SKIP_TESTS:-}" ]; then
(cd harness/python && timeout 200 python3 -m unittest test_worker.test_cuda) > $OUT/pytest.txt 2>&1; echo "pytest rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/pytest.txt
tail -3 $OUT/pytest.txt
fi
mkdir -p /tmp/ss /tmp/c; printf '6eed%.0s' $(seq 16) > /tmp/ss/secret
run() {
  local b=$1 name=$2 sel=$3 lim=$4; local t0=$(date +%s)
  timeout -k 10 $lim /tmp/kbench-$b run --agent reference --kernelbench $D/kernelbench --select $sel \
    --device cuda --gpus 0 --families random --secret-from /tmp/ss/secret --quiet --out /tmp/c/$name > /tmp/c-$name.log 2>&1
  echo "== $name rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/cost.txt
  python3 $D/sp.py /tmp/c/$name/records.jsonl >> $OUT/cost.txt 2>&1
  cp /tmp/c/$name/records.jsonl $OUT/$name.jsonl 2>/dev/null
}
run new warm 1/1 60
S=${SEL:-1/3,1/10,1/17,1/24,1/31,1/38,1/45,1/52,1/59,1/66,1/73,1/80,1/87,1/94,2/2,2/9,2/16,2/23,2/30,2/37,2/44,2/51,2/58,2/65,2/72,2/79,2/86,2/93,2/100}
for r in ${ROUNDS:-1}; do for b in old head new; do run $b $b$r "$S" 200; done; done
for i in 1 2; do run new conv$i 1/58,1/68,1/77,2/61,2/77 120; done
cd $OUT && tar czf records.tgz *.jsonl && rm -f *.jsonl
