#!/usr/bin/env bash
# prof.sh SEL [EXTRA...]: kbench run --agent reference over SEL with py-spy sampling every worker
set -u
mkdir -p /tmp/d; [ -x /tmp/d/kbench ] || { xz -dc devrun/kbench.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench; }
ln -sfn $PWD/devrun/kernelbench /tmp/d/kernelbench; cp devrun/bubblewrap*.whl /tmp/d/ 2>/dev/null
pip install -q --no-deps devrun/py_spy*.whl > /dev/null 2>&1; which py-spy
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH_CACHE_DIR=/tmp/kbench-cache
source tests/gpu/bwrap.sh
SEL=$1; shift; TAG=${TAG:-prof}
P=$OUT/$TAG; mkdir -p $P/spy; R=/tmp/prof-$TAG; rm -rf $R
T0=$(date +%s.%N)
/tmp/d/kbench run --agent reference --kernelbench /tmp/d/kernelbench --levels 1 --select "$SEL" \
  --device cuda --gpus 0 --out $R "$@" > $P/run.txt 2>&1 &
K=$!
declare -A seen
while kill -0 $K 2>/dev/null; do
  for p in $(pgrep -f 'worker/[0-9a-f]{16}'); do
    [ -n "${seen[$p]:-}" ] && continue; seen[$p]=1
    py-spy record -p $p -r ${RATE:-100} -f raw --nonblocking ${SPYARGS:-} -o $P/spy/$p.txt > $P/spy/$p.log 2>&1 &
  done
  sleep 0.2
done
wait $K; echo "rc=$? wall=$(echo "$(date +%s.%N) - $T0" | bc)" >> $P/run.txt
sleep 2; wait
gzip -c $R/records.jsonl > $P/records.jsonl.gz 2>/dev/null || find $R -name '*.jsonl' | head >> $P/run.txt
tar -czf $OUT/$TAG.tgz -C $OUT $TAG; tail -5 $P/run.txt; ls $P/spy | head; head -3 $P/spy/*.log | head -20
