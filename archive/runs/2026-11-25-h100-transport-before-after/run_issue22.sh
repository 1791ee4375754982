#!/usr/bin/env bash
# Issue 22 on the GPU: the safetensors transport and the CUDA-Python-bindings IPC, before
# and after. D/kbench-before is a release build of the last commit before them (protocol 1:
# JSON tensor lists, IPC through ctypes), D/kbench the new one (each binary carries its own
# worker). Both run the reference agent with every family on level-1 problems with
# multi-GB outputs, alternately (before, after, before, after), without timing, so the
# per-case cost of the transport and the mappings is what differs. Also: the worker's CUDA
# tests (device I/O through the new IPC), and which cuda-bindings/safetensors python3 has.
# Logs and records in $OUT/issue22.tar.gz; a per-problem table on stdout.
set -uo pipefail
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; L=/tmp/issue22
SELECT=${SELECT:-1/19,1/20,1/23}
rm -rf "$L"; mkdir -p "$OUT" "$L"
step() { echo "== $1 $(date -u +%T)"; }
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D

step env
python3 -c "import torch, cuda.bindings, safetensors; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__, 'safetensors', safetensors.__version__)" 2>&1 | tee "$L/env.txt"
nvidia-smi -L | tee -a "$L/env.txt"

step pytests
(cd harness/python && timeout 240 python3 -m unittest test_worker.test_cuda test_worker.test_protocol) > "$L/pytests.txt" 2>&1
echo "worker CUDA + protocol tests: exit $?"; tail -3 "$L/pytests.txt"

for round in 1 2; do
  for who in before after; do
    bin=$D/kbench; [ $who = before ] && bin=$D/kbench-before
    step "$who $round"
    /usr/bin/time -f "%e s wall" timeout 280 $bin run --agent reference --kernelbench $D/kernelbench \
      --select "$SELECT" --device cuda --gpus 0 --no-timing --out $L/${who}_$round > "$L/${who}_$round.txt" 2>&1
    echo "exit $?"; tail -1 "$L/${who}_$round.txt"
  done
done

python3 - "$L" <<'PY' | tee "$L/table.md"
import json, sys, glob, os
L = sys.argv[1]
rows = {}
for d in sorted(glob.glob(f"{L}/*_[12]")):
    who = os.path.basename(d)
    for line in open(f"{d}/records.jsonl"):
        r = json.loads(line)
        cases = r.get("cases") or []
        ph = r.get("phases") or {}
        rows.setdefault(r["problem"]["name"], {})[who] = (
            r["outcome"]["kind"], len(cases), r.get("wall_s", 0),
            ph.get("reference_s", 0) + ph.get("stress_reference_s", 0),
            ph.get("correctness_s", 0) + ph.get("stress_s", 0) - ph.get("stress_reference_s", 0),
            sum(c.get("wall_s", 0) for c in cases))
print("| problem | run | verdict | cases | record s | reference cases s | candidate cases s | s per case | candidate call s per case |")
print("|---|---|---|---|---|---|---|---|---|")
for p, by in rows.items():
    for who, (k, n, w, rs, c, cw) in sorted(by.items()):
        print(f"| {p} | {who} | {k} | {n} | {w:.1f} | {rs:.1f} | {c:.1f} | {(rs + c)/max(n,1):.2f} | {cw/max(n,1):.3f} |")
PY
tar -czf "$OUT/issue22.tar.gz" --exclude=kernels --exclude='*.so' -C /tmp issue22
