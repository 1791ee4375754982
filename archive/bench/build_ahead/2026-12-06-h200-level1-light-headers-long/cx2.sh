#!/usr/bin/env bash
# cx2.sh: KernelBenchLeaderboard level LV cold, both light headers (run first) then torch's
# headers (run second), each its own empty cache and work folder, cut at LIM s.
set -u
REPO=$PWD
mkdir -p /tmp/d
xz -dc devrun/kbench.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench
ln -sfn $PWD/devrun/lb /tmp/d/lb; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
export PATH=$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH
NB=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null); [ -n "$NB" ] && export PATH=$NB:$PATH
for mode in ${ORDER:-light full}; do
  W=/tmp/ba-$mode CUDA_HEADER=$mode CXX_HEADER=$mode KBENCH_WORKER_TRACE=1 STEPS="${ST:-lb}" LEVELS=${LV:-2} SEL=${SEL:-} WARM=0 \
    LIMIT=${LIM:-240} ARGS="--stop-starting-after ${STOP:-200}" OUT=$OUT/$mode bash bench/build_ahead/run.sh > $OUT/run-$mode.txt 2>&1
done
{ command -v nm readelf; nm --version | head -1; } > $OUT/tools.txt 2>&1
for mode in light full; do echo "== $mode"; find /tmp/ba-$mode -name 'kbench-c*-header.txt' -exec cat {} + | sort | uniq -c; done > $OUT/markers.txt 2>&1
cd $OUT && for mode in light full; do cp $mode/summary.md summary-$mode.md; done; cp light/env.txt env.txt
# One folder for summarize.py: torch's headers as lb_cold, both light as lb_cold_light.
mkdir -p merged; cp -r full/lb_cold* merged/; cp full/env.txt merged/
for f in light/lb_cold*; do cp -r "$f" "merged/$(basename "$f" | sed 's/^lb_cold/lb_cold_light/')"; done
python3 $REPO/bench/build_ahead/summarize.py $OUT/merged > $OUT/summary.md 2>&1
tar -czf run.tgz light full merged && rm -rf light full merged
tail -60 summary.md; cat $OUT/tools.txt $OUT/markers.txt
