#!/usr/bin/env bash
# prof2.sh: long.sh with a per-process CPU profile (cpuprof.py) beside it.
python3 devrun/cpuprof.py $OUT/cpuprof.txt & PP=$!
bash devrun/long.sh
kill -TERM $PP; wait $PP
head -60 $OUT/cpuprof.txt
