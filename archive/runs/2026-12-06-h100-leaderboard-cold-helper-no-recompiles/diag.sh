#!/usr/bin/env bash
# diag.sh: a cold leaderboard run with the header helper in the background, watching every
# build folder: ninja's dry-run explanation whenever it changes, and each folder's metadata.
set -u
mkdir -p /tmp/d
xz -dc devrun/kbench.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench
ln -sfn $PWD/devrun/kernelbench /tmp/d/kernelbench; ln -sfn $PWD/devrun/lb /tmp/d/lb; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
W=/tmp/build-ahead; mkdir -p $W $OUT/watch
export PATH=$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH
NB=$(python3 -c "import ninja; print(ninja.BIN_DIR)" 2>/dev/null); [ -n "$NB" ] && export PATH=$NB:$PATH
uname -r > $OUT/host.txt; ninja --version >> $OUT/host.txt 2>&1; which ninja nvcc >> $OUT/host.txt 2>&1; python3 -c 'import torch;print(torch.__version__)' >> $OUT/host.txt
watch_builds() {
  while :; do
    for d in $W/cache-lb/torch_extensions/*/*/; do
      [ -f "$d/build.ninja" ] || continue
      k=$(echo "$d" | md5sum | cut -c1-10)
      st=$(cd "$d" && stat -c '%n %Y %s' build.ninja .ninja_log .ninja_deps *.so 2>/dev/null | md5sum | cut -c1-8)
      [ "$st" = "$(cat $OUT/watch/$k.st 2>/dev/null)" ] && continue
      echo "$st" > $OUT/watch/$k.st
      ex=$(cd "$d" && timeout 20 ninja -n -d explain 2>&1 | head -30)
      h=$(md5sum < "$d/build.ninja" | cut -c1-8)
      { echo "== $(date +%s.%N) ninja=$h $d"; ls -la --time-style=+%s.%N "$d"; echo "$ex"; } >> $OUT/watch/$k.log
      [ -f "$OUT/watch/$k.ninja.1" ] || cp "$d/build.ninja" "$OUT/watch/$k.ninja.1"
      cp "$d/build.ninja" "$OUT/watch/$k.ninja.last"
      cp "$d/.ninja_log" "$OUT/watch/$k.nlog" 2>/dev/null
    done
    sleep 3
  done
}
( cd harness/python && python3 -m unittest test_worker.test_integrity.CpuHeapTests test_worker.test_rebuild_reasons ) > $OUT/heap.txt 2>&1
watch_builds & WP=$!
STEPS=lb LEVELS=1 SEL=${SEL:-1-12} WARM=0 SETUP_PCH=0 CUDA_HEADER=full LIMIT=${LIM:-300} \
  ARGS="--stop-starting-after ${STOP:-230}" OUT=$OUT/run bash bench/build_ahead/run.sh > $OUT/run.txt 2>&1
kill $WP
cd $W/cache-lb && tar -czf $OUT/ext.tgz --exclude='*.o' --exclude='*.so' --exclude='*.gch' --exclude='*.partial' torch_extensions pch 2>/dev/null
cd $OUT && rm -f watch/*.st && tar -czf watch.tgz watch && rm -rf watch && cp run/summary.md summary.md; tar -czf run.tgz run && rm -rf run
tail -30 $OUT/run.txt
