#!/usr/bin/env bash
# oom.sh: kbench serve, PyTorch candidates of L1/22 then L1/25 (6 GiB tensors), old binary then new
set -u
mkdir -p /tmp/d
for v in old new; do f=devrun/kbench.xz; [ $v = new ] && f=devrun/kbench-new.xz
  [ -x /tmp/d/kbench-$v ] || { xz -dc $f > /tmp/d/kbench-$v && chmod +x /tmp/d/kbench-$v; }; done
ln -sfn $PWD/devrun/kernelbench /tmp/d/kernelbench; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH_CACHE_DIR=/tmp/kbench-cache
source tests/gpu/bwrap.sh > /dev/null 2>&1
for v in ${VERSIONS:-old new}; do
  S=/tmp/oom-$v; rm -rf $S; mkdir -p $S
  echo "== $v $(date -u +%T)"
  KEEP_WORK=1 KBENCH=/tmp/d/kbench-$v OUT=$S bash bench/serve/run.sh --kernelbench /tmp/d/kernelbench \
    --steps throughput --no-triton --only ${ONLY:-22,25} -n ${N:-2} --timeout-s ${T:-150} > $S/run.txt 2>&1
  W=$(sed -n 's/^kept the service.s folder: //p' $S/run.txt | tail -1)
  [ -n "$W" ] && cp $W/serve-run/public/records.jsonl $S/records.jsonl 2>/dev/null; cp -r $W/serve-run/public/logs $S/logs 2>/dev/null
  [ -n "$W" ] && ls -R $W > $S/work-ls.txt 2>&1
  grep -A12 "^| measure" $S/summary.md; grep -A3 "finished not correct" $S/summary.md
  [ -f $S/records.jsonl ] && python3 -c "
import json,sys
for l in open('$S/records.jsonl'):
    r=json.loads(l)
    if isinstance(r,dict) and 'outcome' in r: print(r.get('problem',{}).get('id'), r['outcome'], r.get('notes'))" 
done
tar -czf $OUT/oom.tgz -C /tmp oom-old oom-new 2>/dev/null
echo "done $(date -u +%T)"
