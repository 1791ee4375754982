#!/usr/bin/env bash
# ab.sh SEL ORDER: kbench run --agent reference over SEL with binaries in ORDER (e.g. "old new new old")
set -u
mkdir -p /tmp/d
for b in kbench kbench-old; do [ -x /tmp/d/$b ] || { xz -dc devrun/$b.xz > /tmp/d/$b && chmod +x /tmp/d/$b; }; done
ln -sfn $PWD/devrun/kernelbench /tmp/d/kernelbench; cp devrun/bubblewrap*.whl /tmp/d/ 2>/dev/null
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH_CACHE_DIR=/tmp/kbench-cache
source tests/gpu/bwrap.sh
{ nvidia-smi -L; python3 -c 'import torch; print(torch.__version__)'; /tmp/d/kbench --version; /tmp/d/kbench-old --version; uname -r; } > $OUT/env.txt 2>&1
printf '6eed%.0s' $(seq 16) > /tmp/secret
SEL=$1; ORDER=$2; A=$OUT/ab; mkdir -p $A; i=0
for w in $ORDER; do
  i=$((i+1)); bin=/tmp/d/kbench; [ $w = old ] && bin=/tmp/d/kbench-old
  R=/tmp/ab-$i-$w; rm -rf $R; t0=$(date +%s.%N)
  $bin run --agent reference --kernelbench /tmp/d/kernelbench --levels 1 --select "$SEL" --secret-from /tmp/secret \
    --device cuda --gpus 0 --out $R > $A/$i-$w.txt 2>&1
  echo "$i $w rc=$? wall=$(python3 -c "import time; print(round(time.time()-$t0,2))")" | tee -a $A/summary.txt
  gzip -c $R/records.jsonl > $A/$i-$w.jsonl.gz
done
tar -czf $OUT/ab.tgz -C $OUT ab
