#!/usr/bin/env bash
# The reference as its own candidate on the problems whose self-speedup depended on the
# process's memory placement: the settling binary (one placement per side) twice, the
# re-placing binary three times; each run its own processes. Then the cost line per run.
set -u
D=devrun
for b in kbench kbench-place; do [ -x /tmp/$b ] || { gunzip -c $D/$b.gz > /tmp/$b && chmod +x /tmp/$b; }; done
source $D/bwrap.sh
export KBENCH_CACHE_DIR=/tmp/kbench-cache KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
mkdir -p /tmp/p; printf '6eed%.0s' $(seq 16) > /tmp/p/secret
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; } > $OUT/place2.txt 2>&1
for r in old1 new1 new2 old2 new3; do
  b=kbench; case $r in new*) b=kbench-place;; esac
  /usr/bin/time -f "$r wall %e s" timeout -k 15 -s TERM 110 /tmp/$b run --agent reference --kernelbench $D/kernelbench --select 1/1,1/34,1/58,1/61,1/70,1/77 \
    --device cuda --gpus 0 --families random --secret-from /tmp/p/secret --quiet --out /tmp/p/$r >> $OUT/place2.txt 2>&1
  echo "$r rc=$?" >> $OUT/place2.txt
  cp /tmp/p/$r/records.jsonl $OUT/place2-$r.jsonl 2>/dev/null
done
grep "wall\|rc=" $OUT/place2.txt
