#!/usr/bin/env bash
set -u
D=devrun; L2=$D/kernelbench/level2; L1=$D/kernelbench/level1
for s in 1 2 3 4 5; do SEED=$s timeout 100 python3 $D/place5.py $L2/77_*.py 2>&1 | grep -v Warn; done > $OUT/place5.txt
for s in 1 2; do SEED=$s MODES=AWPA timeout 100 python3 $D/place5.py $L2/61_*.py $L1/68_*.py 2>&1 | grep -v Warn; done >> $OUT/place5.txt
# with the plan cache at its default size, plan eviction impossible: does W alone flip?
for s in 6 7; do SEED=$s TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT=10000 MODES=AWA timeout 100 python3 -c "
import os,sys,runpy; os.environ['TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT']='10000'; sys.argv=['x','$L2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool.py']
src=open('$D/place5.py').read().replace('os.environ[\"TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT\"] = \"1\"','pass'); exec(compile(src,'p5','exec'))" 2>&1 | grep -v Warn; done >> $OUT/place5.txt
cat $OUT/place5.txt
