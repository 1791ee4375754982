#!/usr/bin/env bash
# The GPU check of the reference dropping its cases and of the candidate's out-of-memory
# retry (found 2026-11-27: archive/runs/2026-11-27-h100x4-worker-threads-full250, L1/38 L1Norm_ and L1/39
# L2Norm_ failed the honest candidate with `runtime_error` out of memory on their nan-inf case
# on an 80 GB H100). One device call, about 2-3 minutes on one H100:
#   1. the worker's CUDA tests (export with drop_case among them; a worker keeps free blocks
#      cached between commands, the reference's past 1 GiB while the GPU has room for them,
#      and gives everything back on a drop:
#      test_small_cases_keep_their_blocks_until_a_drop);
#   2. the reference agent with every check on L1/36-39 (8 GiB tensors; 36 and 37 passed
#      before and must still pass) on GPU 0: every record must be ok;
#   3. the same on L2/1 and L1/19 with --families random: small and large cases timed as before
#      (self-speedup), the timed case still held by the reference for timing (a case of up to
#      1 GiB, L2/1's, moves from the reference in one export; L1/19's, larger, a tensor at a
#      time);
#   4. L1/45 (Average_Pooling_2D, a 16 GiB input) with every check: `reference_error` in every
#      run until the reference released its float64 forward's memory before the harness
#      allocates the case's buffers (the worker's test_made_case_holds_only_its_tensors).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_memory_retry.sh   # -> $OUT/memory_retry.tgz
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
D=${D:-devrun}; BACK=${OUT:-/tmp/out}; L=/tmp/memory_retry
rm -rf "$L"; mkdir -p "$L" "$BACK"
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; "$D/kbench" --version; } > "$L/env.txt" 2>&1
(cd harness/python && timeout 240 python3 -m unittest test_worker.test_cuda) > "$L/pytests.txt" 2>&1
echo "worker CUDA tests: exit $?"; tail -3 "$L/pytests.txt"
status=0
for step in "large:1/36-39:all" "timed:1/19,2/1:random" "pool45:1/45:all"; do
    IFS=: read -r name sel fam <<< "$step"
    timeout 400 "$D/kbench" run --agent reference --kernelbench "$D/kernelbench" --select "$sel" \
        --families "$fam" --device cuda --gpus 0 --out "$L/$name" > "$L/$name.txt" 2>&1
    echo "$name rc=$?"
    python3 tests/gpu/case_times.py "$L/$name/records.jsonl" > "$L/${name}_cases.txt" 2>&1
    python3 - "$L/$name/records.jsonl" <<'EOF' || status=1
import json, sys
bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    p, o = r["problem"], r["outcome"]
    sp = (r.get("timing") or {}).get("speedup")
    print(f"  L{p['level']}/{p['id']} {p['name']}: {o['kind']} speedup {sp}")
    for n in r.get("notes", []):
        if "memory" in n:
            print("    note:", n[:200])
    bad += o["kind"] != "ok"
sys.exit(1 if bad else 0)
EOF
done
rm -rf "$L"/*/kernels "$L"/*/logs
tar -czf "$BACK/memory_retry.tgz" -C "$L" .
exit $status
