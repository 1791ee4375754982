#!/usr/bin/env bash
# Placement-probe worker: its CUDA placement tests, the five 3D transposed convolutions twice,
# then the self-speedup sweep over SEL for the rest of the call.
set -u
D=devrun
gunzip -c $D/kbench.gz > /tmp/kbench && chmod +x /tmp/kbench
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
  local name=$1 sel=$2 lim=$3; local t0=$(date +%s)
  KBENCH_WORKER_TRACE=${TRACE:-} timeout -k 10 $lim /tmp/kbench run --agent reference --kernelbench $D/kernelbench --select $sel \
    --device cuda --gpus 0 --families random --secret-from /tmp/ss/secret --quiet --out /tmp/c/$name > /tmp/c-$name.log 2>&1
  echo "== $name rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/probe.txt
  python3 $D/sp.py /tmp/c/$name/records.jsonl >> $OUT/probe.txt 2>&1
}
S=1/58,1/68,1/77,2/61,2/77
for i in $(seq ${REPS:-2}); do run sel$i $S 150; done
cat $OUT/probe.txt
LEFT=$(( ${BUDGET:-570} - ($(date +%s) - T0) ))
if [ $LEFT -gt 60 ]; then run sweep ${SEL:-1/1-100,2/1-25} $LEFT; tail -3 /tmp/c-sweep.log; fi
cp /tmp/c/sweep/records.jsonl $OUT/sweep-records.jsonl 2>/dev/null; gzip -f $OUT/sweep-records.jsonl 2>/dev/null
grep -h "placements" /tmp/c-sel1.log | head -20 > $OUT/placements.txt
python3 - $OUT/probe.txt <<'PY'
import re, sys
sp = [float(m.group(1)) for m in re.finditer(r"sweep +L\S+ +\S+ sp=([0-9.]+)", open(sys.argv[1]).read())]
ok = [s for s in sp if s > 0]
print(f"sweep: {len(ok)} timed, {sum(abs(s-1) <= 0.01 for s in ok)} within 1%")
PY
