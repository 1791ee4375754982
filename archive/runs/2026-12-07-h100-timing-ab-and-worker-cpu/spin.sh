#!/usr/bin/env bash
# Do evaluating workers spin on the GPU? Per-process CPU during the ABBA timing runs, then the
# sync-mode micro-test.
set -u
{ nvidia-smi -L; uname -r; nproc; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; } > $OUT/env0.txt 2>&1
for m in auto spin block yield block auto; do timeout 60 python3 devrun/syncmode.py $m; done > $OUT/syncmode.txt 2>&1
cat $OUT/syncmode.txt
python3 devrun/cpusamp.py $OUT/cpu.jsonl & SP=$!
SEL=${SEL:-1/19,1/23} EACH=${EACH:-80} bash devrun/abt.sh > $OUT/abt.txt 2>&1
kill $SP; wait $SP
python3 - "$OUT/cpu.jsonl" <<'PY' > $OUT/cpu-summary.txt
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    g = r["grp"]; c = r["cpu"] - r["cpu0"]; life = max(r.get("last", r["first"]) - r["first"], 0.25)
    b = by.setdefault(g, [0, 0, 0]); b[0] += c; b[1] += life; b[2] += 1
for g, (c, l, n) in sorted(by.items(), key=lambda x: -x[1][0]):
    print(f"{g:10s} procs {n:4d} cpu_s {c:8.1f} life_s {l:8.1f} cpu/life {c/l:5.2f}")
for r in sorted(rows, key=lambda r: -(r["cpu"] - r["cpu0"]))[:25]:
    life = max(r.get("last", r["first"]) - r["first"], 0.25)
    print(f'{r["cpu"]-r["cpu0"]:7.1f} cpu_s {life:7.1f} life_s {(r["cpu"]-r["cpu0"])/life:5.2f}  {r["cmd"][:110]}')
PY
cat $OUT/cpu-summary.txt; tail -20 $OUT/abt.txt
