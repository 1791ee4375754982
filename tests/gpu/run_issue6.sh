#!/usr/bin/env bash
# Issue 6 on the GPU machine: the whole exploit corpus (adversarial/exploits, CPU and CUDA
# kernels alike) on --device cuda, once with the default policy and once, for the CUDA
# kernels, with --require-custom-kernels; prints and writes the table exploit, expected
# flag, flag raised (tests/gpu/issue6_table.py) plus the worker's unit tests on CUDA.
# Everything lands in $OUT (issue6_table.md, the run logs, issue6.tar.gz).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_issue6.sh
#
# Fits the device tool's 10-minute limit (pytests 150 s, corpus 330 s, policy run 100 s:
# the second run reuses the first one's extension builds from KBENCH_CACHE_DIR).
#
# Assumes python3 with a CUDA build of torch (KBENCH_PYTHON=python3) and the release binary
# at $D/kbench; the problems are the corpus's own (adversarial/exploits/problems).
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_CACHE_DIR=${KBENCH_CACHE_DIR:-/tmp/kbench-cache} PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; L=/tmp/issue6; C=/tmp/issue6-corpus
EX=adversarial/exploits
mkdir -p "$OUT" "$L"
rm -rf "$C" "$L"/run-* && mkdir -p "$C/all/level1" "$C/cuda/level1"
cp $EX/cpu/level1/*.py $EX/cuda/level1/*.py "$C/all/level1/"
cp $EX/cuda/level1/*.py "$C/cuda/level1/"
printf '6eed%.0s' $(seq 16) > "$L/secret"
step() { echo "== $1 $(date -u +%T)"; }
{
  step env; nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'; nproc
  $D/kbench --version
} 2>&1 | tee "$L/env.txt"
step pytests
S=$(date +%s)
# The worker's CUDA tests (timing loop, device I/O) and the integrity probes.
(cd harness/python && timeout 150 python3 -m unittest test_worker.CudaTests test_worker.DeviceIoTests test_worker.IntegrityProbeTests ${PYTEST_EXTRA:-}) > "$L/pytests.txt" 2>&1
echo "pytests rc=$? $(( $(date +%s)-S ))s"; tail -3 "$L/pytests.txt"
COMMON=(run --agent replay --kernelbench $EX/problems --levels 1 --device cuda --gpus 0
        --families signed,nan-inf --timed-calls 20 --rounds 2 --warmup 2 --secret-from "$L/secret" --quiet)
step "corpus, default policy"
S=$(date +%s)
timeout 330 $D/kbench "${COMMON[@]}" --replay-dir "$C/all" --out "$L/run-default" > "$L/default.txt" 2>&1
echo "default rc=$? (3: some kernels failed, as they should) $(( $(date +%s)-S ))s"; tail -14 "$L/default.txt"
step "CUDA kernels, --require-custom-kernels"
S=$(date +%s)
# --select 1: the CUDA kernels are all problem 1's (the other problems would get no_kernel records).
timeout 100 $D/kbench "${COMMON[@]}" --replay-dir "$C/cuda" --select 1 --out "$L/run-policy" --require-custom-kernels > "$L/policy.txt" 2>&1
echo "policy rc=$? $(( $(date +%s)-S ))s"; tail -8 "$L/policy.txt"
step table
python3 tests/gpu/issue6_table.py $EX/manifest.json "$L/run-default/records.jsonl" "$L/run-policy/records.jsonl" | tee "$L/issue6_table.md"
echo "table rc=${PIPESTATUS[0]}"
# Per record: outcome, flag/detail, advisories and the kernel profile, for the report.
python3 - "$L/run-default/records.jsonl" "$L/run-policy/records.jsonl" > "$L/details.txt" <<'PY'
import json, sys
for path in sys.argv[1:]:
    print("##", path)
    for line in open(path):
        r = json.loads(line); o = r["outcome"]; ig = r.get("integrity") or {}
        k = ig.get("kernels") or {}
        t = r.get("timing") or {}
        print(r["candidate"]["name"], o["kind"], o.get("flag") or o.get("rule") or "",
              (o.get("detail") or o.get("message") or "")[:300].replace("\n", " "))
        print("   advisories", ig.get("advisories"), "checked timed calls", ig.get("checked_timed_calls"),
              "speedup", t.get("speedup"))
        if k:
            print("   own %.2f library %.2f other %.2f side_stream %s own=%s library=%s" % (
                k["own_fraction"], k["library_fraction"], k["other_fraction"], k["side_stream"],
                k["own"][:3], k["library"][:3]))
PY
cat "$L/details.txt"
cp "$L/issue6_table.md" "$L/details.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/issue6.tar.gz" -C /tmp issue6
