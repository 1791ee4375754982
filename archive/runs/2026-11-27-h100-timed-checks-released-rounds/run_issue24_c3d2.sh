#!/usr/bin/env bash
# C3 (forged payload) and D2 (memory hog) of the exploit corpus on the GPU, beside the honest kernels.
set -uo pipefail
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
D=${D:-devrun}; EX=adversarial/exploits; C=/tmp/c3d2; L=/tmp/c3d2-run
rm -rf $C $L; mkdir -p $C/level1 $L
cp $EX/cpu/level1/1_forge_payload.py $EX/cpu/level1/1_honest.py $EX/cuda/level1/1_memory_hog.py $EX/cuda/level1/1_honest_cuda.py $C/level1/
printf '6eed%.0s' $(seq 16) > $L/secret
timeout 280 $D/kbench run --agent replay --kernelbench $EX/problems --levels 1 --select 1 --device cuda --gpus 0 \
  --families signed,nan-inf --timed-calls 20 --rounds 2 --warmup 2 --secret-from $L/secret --quiet \
  --replay-dir $C --out $L/run > $L/out.txt 2>&1
echo "rc=$?"; tail -12 $L/out.txt
python3 - $L/run/records.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); o = r["outcome"]
    print(r["candidate"]["name"], o["kind"], o.get("flag") or "", (o.get("detail") or o.get("message") or "")[:250].replace("\n", " "))
PY
