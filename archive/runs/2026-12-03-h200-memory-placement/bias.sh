#!/usr/bin/env bash
# Why some problems' reference, timed as its own candidate, is a steady few % slower on the
# candidate's side: the same Model in a plain process, under bwrap, after poisoning; then kbench
# with and without the sandbox.
set -u
D=devrun
[ -x $D/kbench ] || { gunzip -c $D/kbench.gz > $D/kbench && chmod +x $D/kbench; }
source $D/bwrap.sh
export KBENCH_CACHE_DIR=/tmp/kbench-cache KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
L=$D/kernelbench/level1
P="$L/70_*.py $L/58_*.py $L/61_*.py $L/34_*.py"
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.backends.cudnn.version())'; uname -r; } > $OUT/bias.txt 2>&1
TAG=plain python3 $D/convdiag.py $P >> $OUT/bias.txt 2>&1
TAG=poison KB_POISON=1 python3 $D/convdiag.py $P >> $OUT/bias.txt 2>&1
TAG=bwrap $KBENCH_BWRAP --ro-bind / / --dev-bind /dev /dev --proc /proc --tmpfs /tmp --unshare-pid --unshare-net --die-with-parent python3 $D/convdiag.py $P >> $OUT/bias.txt 2>&1
mkdir -p /tmp/b; printf '6eed%.0s' $(seq 16) > /tmp/b/secret
for mode in sandbox nosandbox; do
  X=""; [ $mode = nosandbox ] && X=--no-sandbox
  timeout -k 15 -s TERM 150 $D/kbench run --agent reference --kernelbench $D/kernelbench --select 1/34,1/58,1/61,1/70,1/12 \
    --device cuda --gpus 0 --families random --secret-from /tmp/b/secret --quiet --out /tmp/b/$mode $X >> $OUT/bias.txt 2>&1
  echo "$mode rc=$?" >> $OUT/bias.txt
  cp /tmp/b/$mode/records.jsonl $OUT/bias-$mode.jsonl 2>/dev/null
done
cat $OUT/bias.txt | grep -v "^$" | tail -30
