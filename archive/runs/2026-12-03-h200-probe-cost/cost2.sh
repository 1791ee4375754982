#!/usr/bin/env bash
# The worker's CUDA tests; the side-by-side set's timing phases, bb05bfb (before the timing
# protections) against the new binary, two passes each; the new binary traced on a sample of
# levels 1-2 (where a timing's opening goes); the five 3D transposed convolutions twice.
set -u
T0=$(date +%s)
mkdir -p /tmp/d
xz -dc devrun/kbench-new.xz > /tmp/d/kbench; xz -dc devrun/kbench-bb.xz > /tmp/d/kbench-old; chmod +x /tmp/d/kbench*
cp -r devrun/kernelbench devrun/*.whl devrun/sp.py /tmp/d/
export D=/tmp/d
(cd harness/python && timeout 150 python3 -m unittest test_worker.test_cuda) > $OUT/pytest.txt 2>&1; echo "pytest rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/pytest.txt
tail -3 $OUT/pytest.txt
SIDES="old new new2 old2" SBS_LIMIT=120 bash tests/gpu/profiling.sh timing-cost > $OUT/timing-cost.log 2>&1
echo "timing-cost done $(( $(date +%s) - T0 )) s"
source devrun/bwrap.sh
export KBENCH_CACHE_DIR=/tmp/kbench-cache KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
mkdir -p /tmp/ss /tmp/c; printf '6eed%.0s' $(seq 16) > /tmp/ss/secret
run() {
  local name=$1 sel=$2 lim=$3; local t0=$(date +%s)
  KBENCH_TIMING_TRACE=1 KBENCH_WORKER_TRACE=1 timeout -k 10 $lim /tmp/d/kbench run --agent reference --kernelbench $D/kernelbench --select $sel \
    --device cuda --gpus 0 --families random --secret-from /tmp/ss/secret --quiet --out /tmp/c/$name > /tmp/c/$name.trace 2>&1
  echo "== $name rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/probe.txt
  python3 $D/sp.py /tmp/c/$name/records.jsonl >> $OUT/probe.txt 2>&1
}
for i in 1 2 3; do run conv$i 1/58,1/68,1/77,2/61,2/77 100; done
LEFT=$(( 400 - ($(date +%s) - T0) ))
[ $LEFT -gt 40 ] && run sample ${SEL:-1/3,1/10,1/17,1/24,1/31,1/38,1/45,1/52,1/59,1/66,1/73,1/80,1/87,1/94,2/2,2/9,2/16,2/23,2/30,2/37,2/44,2/51,2/58,2/65,2/72,2/79,2/86,2/93,2/100} $LEFT
cd /tmp/c && tar czf $OUT/probe.tgz */records.jsonl *.trace
cat $OUT/probe.txt | grep "=="
