#!/usr/bin/env bash
set -u
D=devrun; L=$D/kernelbench/level1
P="$L/70_*.py $L/61_*.py $L/58_*.py $L/1_*.py"
for s in 1 2 3; do SEED=$s python3 $D/placement.py $P 2>&1 | grep -v Warn >> $OUT/place.txt; done
cat $OUT/place.txt
