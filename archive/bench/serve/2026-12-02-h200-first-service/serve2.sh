#!/usr/bin/env bash
# The anchor beside the service: the same 20 level-1 kernels (each problem's own model) through
# `kbench serve` (bench/serve, PyTorch candidates of L1 1-20) and through `kbench run --agent
# reference`, one after the other on the same GPU, with every default check.
set -u
D=devrun
source $D/bwrap.sh
mkdir -p /tmp/k && gunzip -c $D/kbench.gz > /tmp/k/kbench && chmod +x /tmp/k/kbench
export KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH=/tmp/k/kbench
t0=$(date +%s.%N)
/tmp/k/kbench run --agent reference --kernelbench $D/kernelbench --levels 1 --select 1-${NSEL:-20} --out /tmp/run-ref --quiet > $OUT/run.txt 2>&1
t1=$(date +%s.%N)
echo "kbench run: $(python3 -c "print(round($t1-$t0,1))") s for ${NSEL:-20} kernels" | tee $OUT/anchor.txt
KEEP_WORK=1 OUT=$OUT/kb timeout ${KBT:-300} bash bench/serve/run.sh --kernelbench $D/kernelbench -n ${NSEL:-20} --only 1-${NSEL:-20} --no-triton -k 20 --timeout-s 280 > $OUT/kb.txt 2>&1
python3 - <<'PY' >> $OUT/anchor.txt
import json, glob
def load(p):
    out = []
    for l in open(p):
        l = l.strip()
        if l:
            out.append(json.loads(l))
    return out
for name, pat in [("run", "/tmp/run-ref/records.jsonl"), ("serve", "/tmp/kbench-serve-bench-*/serve-run/public/records.jsonl")]:
    for p in glob.glob(pat):
        rs = load(p)
        w = sum(r["wall_s"] for r in rs)
        ph = {}
        for r in rs:
            for k, v in (r.get("phases") or {}).items():
                ph[k] = ph.get(k, 0) + (v or 0)
        print(name, len(rs), "records, wall_s sum", round(w, 1), "outcomes", sorted({r["outcome"]["kind"] for r in rs}))
        print("  phases (s, summed):", {k: round(v, 1) for k, v in sorted(ph.items(), key=lambda x: -x[1])})
PY
cp /tmp/run-ref/records.jsonl $OUT/run-records.jsonl 2>/dev/null
cp /tmp/kbench-serve-bench-*/serve-run/public/records.jsonl $OUT/serve-records.jsonl 2>/dev/null
cat $OUT/anchor.txt; cat $OUT/kb/summary.md | head -14
