#!/usr/bin/env bash
# Placement rotation: the in-process check (virtual processes, static against rotated
# placements) on three problems, then the reference as its own candidate over levels 1-2
# with the rotating binary for the rest of the call.
set -u
D=devrun; L=$D/kernelbench/level1
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.backends.cudnn.version())'; uname -r; } > $OUT/env.txt 2>&1
(cd harness/python && timeout 120 python3 -m unittest test_worker.test_cuda.PlacementTests) > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"; tail -3 $OUT/pytest.txt
VP=8 SEED=1 timeout 120 python3 $D/placement4.py $L/70_*.py $L/61_*.py $L/58_*.py 2>&1 | grep -v Warn > $OUT/place4.txt
cat $OUT/place4.txt
B=kbench-rot SEL=${SEL:-1/1-100,2/1-100} bash $D/selfsp.sh ${SECS:-420}
