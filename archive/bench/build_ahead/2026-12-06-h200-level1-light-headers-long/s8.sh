#!/usr/bin/env bash
# Cold KernelBenchLeaderboard level 1: both light headers, then torch's, with the builds'
# pause and the windows' waits (HEAD's binary); then every verdict and every timing again.
set -u
{ nvidia-smi -L; uname -r; nproc; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } > $OUT/env0.txt 2>&1
cat $OUT/env0.txt
ORDER="light full" LV=1 LIM=${LIM:-230} STOP=${STOP:-180} bash devrun/cx2.sh > $OUT/cx2.txt 2>&1
mkdir -p /tmp/x && tar -xzf $OUT/run.tgz -C /tmp/x
python3 devrun/verdicts.py /tmp/x/light /tmp/x/full > $OUT/verdicts.txt 2>&1
cat $OUT/verdicts.txt | cut -c1-600
grep -h "s/kernel\|first verdict\|busy" $OUT/summary.md | head -20
