#!/usr/bin/env bash
# The RL shape: many candidates of a few problems (10 each of L1 19-24), every default check,
# through kbench serve: the problems' reference sessions and cached cases stay warm.
set -u
D=devrun
source $D/bwrap.sh
mkdir -p /tmp/k && gunzip -c $D/kbench.gz > /tmp/k/kbench && chmod +x /tmp/k/kbench
export KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH=/tmp/k/kbench
KEEP_WORK=1 OUT=$OUT/rl timeout ${KBT:-420} bash bench/serve/run.sh --kernelbench $D/kernelbench -n 60 --only 19-24 --no-triton -k 50 --timeout-s ${TS:-340} > $OUT/rl.txt 2>&1
python3 - <<'PY' > $OUT/phases.txt
import json, glob
for p in glob.glob("/tmp/kbench-serve-bench-*/serve-run/public/records.jsonl"):
    rs = [json.loads(l) for l in open(p) if l.strip()]
    ph = {}
    for r in rs:
        for k, v in (r.get("phases") or {}).items():
            ph[k] = ph.get(k, 0) + (v or 0)
    print(len(rs), "records, wall_s sum", round(sum(r["wall_s"] for r in rs), 1), sorted({r["outcome"]["kind"] for r in rs}))
    print({k: round(v, 1) for k, v in sorted(ph.items(), key=lambda x: -x[1])})
PY
cat $OUT/phases.txt; head -16 $OUT/rl/summary.md
