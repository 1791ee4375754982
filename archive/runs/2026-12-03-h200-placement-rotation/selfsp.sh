#!/usr/bin/env bash
# The reference agent as its own candidate over all of levels 1-2 (random family: timing is
# what is measured), resumed from where the last call stopped; $1 seconds at most.
set -u
D=devrun
B=${B:-kbench}
[ -x /tmp/$B ] || { gunzip -c $D/$B.gz > /tmp/$B && chmod +x /tmp/$B; }
source $D/bwrap.sh
export KBENCH_CACHE_DIR=/tmp/kbench-cache KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
mkdir -p /tmp/ss; printf '6eed%.0s' $(seq 16) > /tmp/ss/secret
RES=""; [ -f /tmp/ss/sample/run.json ] && RES=--resume
echo "selfsp: $B $1 s, $RES" >> $OUT/selfsp.txt
timeout -k 15 -s TERM $1 /tmp/$B run --agent reference --kernelbench $D/kernelbench --select ${SEL:-1/1-100,2/1-100} \
  --device cuda --gpus 0 --families random --secret-from /tmp/ss/secret --quiet --out /tmp/ss/sample $RES >> $OUT/selfsp.txt 2>&1
echo "rc=$?" >> $OUT/selfsp.txt
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; } > /tmp/ss/env.txt 2>&1
python3 tests/gpu/timing_cost.py /tmp/ss > $OUT/selfsp.md 2>&1
cp /tmp/ss/sample/records.jsonl $OUT/selfsp-records.jsonl 2>/dev/null
tail -5 $OUT/selfsp.md
