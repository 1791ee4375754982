#!/usr/bin/env bash
# Issue 21 (NaN/Inf rules, probe references, tol_needed) on the GPU: the device comparator's
# unit tests (D/kbench-lib-tests, a release test binary: `cargo test --release -p kbench --lib
# --no-run`, copied there), the worker's CUDA tests (device-path probe references), `kbench
# check` of the nan-inf fixtures on CUDA, and the reference agent on large level-1 problems
# under every family. Logs in $OUT/issue21.tar.gz, a summary with PASS/FAIL lines on stdout.
set -uo pipefail
export KBENCH_PYTHON=python3 KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; L=/tmp/issue21; T=/tmp/runs21
SELECT=${SELECT:-1/12,1/19,1/23,1/40,1/47,1/88}
rm -rf "$L" "$T"; mkdir -p "$OUT" "$L" "$T"
step() { echo "== $1 $(date -u +%T)"; }
verdict() { if [ "$1" = 0 ]; then echo "PASS $2"; else echo "FAIL $2"; fi; }

step libtests
timeout 300 $D/kbench-lib-tests gpu::compare --test-threads 1 > "$L/libtests.txt" 2>&1
rc=$?; grep -E "test result|FAILED|panicked|skipped" "$L/libtests.txt" | head -20
grep -q "skipped on the GPU" "$L/libtests.txt" && rc=9   # the GPU halves must run here
verdict $rc "device comparator = CPU comparator (probe_reference_rules, nan_and_inf_positions, ...)"

step pytests
(cd harness/python && timeout 200 python3 -m unittest test_worker.CudaStressTests test_worker.ProbeReferenceTests) > "$L/pytests.txt" 2>&1
verdict $? "worker probe references, host and device paths"; tail -3 "$L/pytests.txt"

step check
P=tests/fixtures/nan_inf/problems/level1; K=tests/fixtures/nan_inf/kernels/level1
for spec in "1_rewrite:0:accepted as reference artefacts" "1_inf_sign:3:inf-sign" \
            "2_honest:0:correct under every family that applies: yes" "2_where:3:drops-nan" \
            "2_mask_multiply:3:nonfinite-invented" "3_nan_to_num:3:drops-nan"; do
  IFS=: read -r k want text <<< "$spec"; id=${k%%_*}; prob=$(ls $P/${id}_*.py)
  timeout 240 $D/kbench check --problem "$prob" --kernel "$K/$k.py" --device cuda --no-timing \
    > "$L/check_$k.txt" 2>&1
  rc=$?; ok=1; [ "$rc" = "$want" ] && grep -q -- "$text" "$L/check_$k.txt" && ok=0
  verdict $ok "check $k on CUDA: exit $rc (want $want), '$text'"
done

step ref
timeout 500 $D/kbench run --agent reference --kernelbench $D/kernelbench --select "$SELECT" \
  --device cuda --gpus 0 --no-timing --out $T/ref > "$L/ref.txt" 2>&1
verdict $? "reference agent on $SELECT, every family (the reference must pass its own nan-inf cases)"
tail -20 "$L/ref.txt"
python3 - "$T/ref/records.jsonl" <<'PY' | tee "$L/ref_nan_inf.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    for c in r["cases"]:
        if c["case"]["family"] == "nan-inf":
            print(r["problem"]["name"], r["outcome"]["kind"], "artefacts", c.get("artefacts"),
                  "tol_needed", c.get("tol_needed"), "n/a" if c.get("not_applicable") else "")
PY
tar -czf "$OUT/issue21.tar.gz" -C /tmp issue21
