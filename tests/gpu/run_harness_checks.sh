#!/usr/bin/env bash
# GPU checks of harness changes that CPU tests cannot reach, one device call (about 4 minutes
# on one H200):
#   1. the library's GPU tests (a test binary built here with `cargo test --release -p kbench
#      --lib --no-run`, copied to $D/kbench_lib_tests): `gpu::devmem` (copies and fills are
#      done on the device when they return: the race that failed L1/5 on one H200 on
#      2026-11-28) and the start gate's;
#   2. the worker's CUDA tests (float64 model made on the device among what they load);
#   3. L1/5 (a 4 GiB input, the race's victim) with every check, RUNS times on GPU 0;
#   4. the problems whose models take seconds to build on the host (4 GiB of Linear weights:
#      L2/55, 56, 59, 68 and L3/2), every check, on GPU 0: their loads sent ahead now build
#      unpaused while kernels are timed; `reference_open_s` and `load_s` per record say
#      whether the next problem's reference was ready in time.
# Every record must be ok. Results under $OUT (checks.tgz: logs, records, summaries).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_harness_checks.sh
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1 KBENCH_WORKER_TRACE=1
D=${D:-devrun}; BACK=${OUT:-/tmp/out}; L=/tmp/harness_checks; RUNS=${RUNS:-2}
rm -rf "$L"; mkdir -p "$L" "$BACK"
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; "$D/kbench" --version; nproc; } > "$L/env.txt" 2>&1
status=0
if [ -x "$D/kbench_lib_tests" ]; then
    timeout 300 "$D/kbench_lib_tests" gpu::devmem worker::gate --test-threads 1 > "$L/lib_tests.txt" 2>&1
    rc=$?; echo "library GPU tests: exit $rc"; grep -E "^test |test result" "$L/lib_tests.txt"
    [ $rc = 0 ] || status=1
fi
(cd harness/python && timeout 300 python3 -m unittest test_worker.test_cuda test_worker.test_stability) > "$L/pytests.txt" 2>&1
rc=$?; echo "worker CUDA tests: exit $rc"; tail -3 "$L/pytests.txt"
[ $rc = 0 ] || status=1
steps=()
for i in $(seq 1 "$RUNS"); do steps+=("l1_5_$i:1/5"); done
steps+=("big_models:2/55,2/56,2/59,2/68,3/2")
for step in "${steps[@]}"; do
    IFS=: read -r name sel <<< "$step"
    timeout 400 "$D/kbench" run --agent reference --kernelbench "$D/kernelbench" --select "$sel" \
        --families all --device cuda --gpus 0 --out "$L/$name" > "$L/$name.txt" 2>&1
    echo "$name rc=$?"
    python3 - "$L/$name/records.jsonl" <<'EOF' || status=1
import json, sys
bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    p, o, ph = r["problem"], r["outcome"], r.get("phases") or {}
    sp = (r.get("timing") or {}).get("speedup")
    print(f"  L{p['level']}/{p['id']} {p['name']}: {o['kind']} speedup {sp} wall {r['wall_s']:.1f}s"
          f" reference_open {ph.get('reference_open_s', 0):.2f}s load {r.get('load_s') or 0:.2f}s")
    if o["kind"] != "ok":
        print("    ", json.dumps(o)[:400])
    bad += o["kind"] != "ok"
sys.exit(1 if bad else 0)
EOF
done
for d in "$L"/*/; do rm -rf "$d/kernels"; done
tar -czf "$BACK/checks.tgz" -C "$L" .
exit $status
