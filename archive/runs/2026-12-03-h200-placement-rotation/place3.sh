#!/usr/bin/env bash
set -u
D=devrun; L=$D/kernelbench/level1
P="$L/70_*.py $L/61_*.py $L/58_*.py $L/77_*.py $L/12_*.py $L/34_*.py"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/env.txt
python3 -c "import torch; print(torch.__version__, torch.backends.cudnn.version())" >> $OUT/env.txt
for s in 1 2 3; do SEED=$s timeout 170 python3 $D/placement3.py $P 2>&1 | grep -v Warn >> $OUT/place3.txt; done
cat $OUT/place3.txt
