#!/usr/bin/env bash
# idle.sh SEL: a traced reference run with NVML's own samples, to find where the GPU idles
set -u
mkdir -p /tmp/d; [ -x /tmp/d/kbench ] || { xz -dc devrun/kbench.xz > /tmp/d/kbench && chmod +x /tmp/d/kbench; }
ln -sfn $PWD/devrun/kernelbench /tmp/d/kernelbench; cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH_CACHE_DIR=/tmp/kbench-cache
source tests/gpu/bwrap.sh
{ env | grep -i -E "preload|malloc"; ldd /usr/bin/python3 $(readlink -f $(which python3)) 2>&1 | head; python3 -c "import platform;print(platform.libc_ver())";
  python3 -c "
import torch, ctypes
print(open('/proc/self/maps').read().count('jemalloc'), open('/proc/self/maps').read().count('tcmalloc'))
import sys; sys.path.insert(0,'harness/python')
from kbench_worker import cpu_heap
cpu_heap.reuse_freed_blocks()
for n in (1000, 4096, 100000):
    b = cpu_heap.poison_heap(n, 0x7FC0DEAD, torch.int32); cpu_heap.free_blocks(b)
    out = torch.empty(n//4); print(n, len(b), float((out.view(torch.int32)==0x7FC0DEAD).float().mean()), hex(out.data_ptr()), [hex(x) for x in b[:3]])
"; } > $OUT/heap.txt 2>&1
python3 devrun/nvsample.py $OUT/nvml.jsonl & NV=$!
sleep 1
KBENCH_WORKER_TRACE=1 KBENCH_TIMING_TRACE=1 timeout -k 10 -s INT ${LIM:-400} /tmp/d/kbench run --agent reference --kernelbench /tmp/d/kernelbench \
  --select "$1" --device cuda --gpus 0 --out /tmp/idle/run 2>&1 | python3 -u -c "
import sys,time
for l in sys.stdin: sys.stdout.write('%.3f %s' % (time.time(), l))" > $OUT/run.txt
echo "rc=${PIPESTATUS[0]}" >> $OUT/run.txt
sleep 1; kill $NV; wait $NV
tar -czf $OUT/idle.tgz -C /tmp/idle run/logs run/records.jsonl $(cd /tmp/idle && ls run/*.json 2>/dev/null)
tail -15 $OUT/run.txt
