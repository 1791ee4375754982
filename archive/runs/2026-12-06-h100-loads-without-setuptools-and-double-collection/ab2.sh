#!/usr/bin/env bash
# ab2.sh: a cold KernelBenchLeaderboard L1 run (new binary) filling a build cache, then warm
# runs on that cache, old binary then new then old, GPU-bound: where the loads' seconds went.
set -u
mkdir -p /tmp/d
xz -dc devrun/kbench.xz > /tmp/d/kbench && xz -dc devrun/kbench-old.xz > /tmp/d/kbench-old && chmod +x /tmp/d/kbench /tmp/d/kbench-old
ln -sfn $PWD/devrun/kernelbench /tmp/d/kernelbench; ln -sfn $PWD/devrun/lb /tmp/d/lb; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH_WORKER_TRACE=1
export PATH=$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH
NB=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null); [ -n "$NB" ] && export PATH=$NB:$PATH
W=/tmp/build-ahead; R=$OUT/run; mkdir -p $R
STEPS=lb LEVELS=1 SEL=${SEL:-1-40} WARM=0 LIMIT=${LIM:-270} ARGS="--stop-starting-after ${STOP:-215}" \
  OUT=$R bash bench/build_ahead/run.sh > $OUT/run.txt 2>&1
. tests/gpu/bwrap.sh 2>/dev/null
warm() {  # warm NAME BINARY
  local name=$1 bin=$2
  rm -rf $W/$name; local t0; t0=$(date +%s.%N)
  KBENCH_CACHE_DIR=$W/cache-lb timeout ${WLIM:-80} $bin run --agent replay --out $W/$name --device cuda \
    --replay-dir $W/lbset --kernelbench $W/lbset/problems --levels 1 --select ${WSEL:-1-10} \
    --stop-starting-after ${WSTOP:-60} > $R/$name.txt 2>&1
  echo "$t0 $(date +%s.%N) $?" > $R/$name.wall
  mkdir -p $R/$name; cp $W/$name/records.jsonl $W/$name/gpu_samples.jsonl $W/$name/logs/builds.jsonl $R/$name/ 2>/dev/null
  tar -czf $R/$name/logs.tgz -C $W/$name logs 2>/dev/null
  echo "$name done"
}
warm warm_old_a $D/kbench-old; warm warm_new_a $D/kbench; warm warm_old_b $D/kbench-old
python3 bench/build_ahead/summarize.py $R > $R/summary.md 2>&1
cd $OUT && cp run/summary.md summary.md; tar -czf run.tgz run && rm -rf run
cat $OUT/summary.md | head -12
