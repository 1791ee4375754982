#!/usr/bin/env bash
# Timing phase, current binary against 82f0086's, ABBA on one GPU: the reference agent as its own
# candidate on L1/19, 20, 23 (6.4 GB inputs), every default check.
set -u
mkdir -p /tmp/d
for b in new old; do xz -dc devrun/kbench-$b.xz > /tmp/d/kbench-$b && chmod +x /tmp/d/kbench-$b; done
cp devrun/*.whl /tmp/d/
export D=/tmp/d KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
export PATH=$(dirname "$(python3 -c "import sys; print(sys.executable)")"):$PATH
source tests/gpu/bwrap.sh
{ nvidia-smi -L; uname -r; nproc; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; for b in new old; do /tmp/d/kbench-$b --version; done; } > $OUT/env.txt 2>&1
printf '6eed%.0s' $(seq 16) > /tmp/secret
i=0
for b in ${ORDER:-new old old new}; do
  i=$((i+1))
  s0=$(date +%s.%N)
  timeout -k 5 ${EACH:-110} /tmp/d/kbench-$b run --agent reference --kernelbench $PWD/devrun/kernelbench --select ${SEL:-1/19,1/20,1/23} \
    --device cuda --gpus 0 --secret-from /tmp/secret --quiet --out /tmp/t$i-$b > $OUT/run$i-$b.txt 2>&1
  echo "run$i $b rc=$? wall=$(python3 -c "import time; print(round(time.time()-$s0,1))")" >> $OUT/walls.txt
  cp /tmp/t$i-$b/records.jsonl $OUT/records$i-$b.jsonl 2>/dev/null
done
python3 - "$OUT" <<'PY'
import json, glob, sys, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], "records*.jsonl"))):
    for l in open(f):
        r = json.loads(l); ph = r.get("phases") or {}; t = r.get("timing") or {}
        notes = [n[:60] for n in r.get("notes") or [] if n.startswith("timed again")]
        p = r.get("problem"); p = p.get("id", p) if isinstance(p, dict) else p
        print(os.path.basename(f), str(p)[:40], json.dumps(r.get("outcome"))[:30], "timing_s", ph.get("timing_s"),
              "wall", round(r.get("wall_s") or 0, 2), "again", len(notes),
              "timing:", {k: v for k, v in t.items() if isinstance(v, (int, float))} if isinstance(t, dict) else t)
PY
cat $OUT/walls.txt
