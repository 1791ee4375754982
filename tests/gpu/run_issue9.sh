#!/usr/bin/env bash
# GPU run for issue 9 (hardware feedback). From the repository root on the GPU machine, with
# D (default devrun/) holding the release kbench binary and KernelBench (see README.md here):
#
#   OUT=/tmp/out bash tests/gpu/run_issue9.sh
#
# 1. `kbench gpus`: the spec table's peaks for this GPU.
# 2. `kbench profile` under ncu on three kernels (tests/gpu/issue9): a memory-bound CUDA
#    elementwise add (load_inline), a bf16 4096^3 matmul (cuBLAS), a launch-bound 1024-element
#    scale. Each: the table, then --json; the raw ncu CSV is kept as a fresh fixture.
# 3. The PyTorch-profiler fallback on the GPU (--no-ncu) for the matmul.
# 4. `kbench run` (replay) on the three problems: records must carry speed_of_light and the
#    summary shows the ratio to it.
# 5. A check that ncu's tensor-pipe `ops` count 2·N^3 FLOPs for the matmul (the parser takes
#    sm__ops_path_tensor_* as FLOPs).
#
# At most 8 files land in $OUT: summary.txt (everything printed), profile_{elementwise,matmul,tiny}.json,
# ncu_{elementwise,matmul,tiny}.csv (replace tests/fixtures/ncu/ with these; see its README),
# records.jsonl.
# PART=profile runs steps 1-3 and 5, PART=run step 4 only (each fits a 10-minute limit on an
# H100: about 4 and 3 minutes); the default runs everything.
set -uo pipefail
PART=${PART:-all}
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_CACHE_DIR=/tmp/kbench-cache PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; W=/tmp/issue9; P=tests/gpu/issue9
mkdir -p "$OUT" "$W"
LOG="$OUT/summary.txt"
exec > >(tee "$LOG") 2>&1
step() { echo; echo "== $1 $(date -u +%T)"; }
step env
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
which ncu && ncu --version | tail -1
$D/kbench --version
$D/kbench gpus

prof() {  # name problem kernel precision timeout_s
  local name=$1 problem=$2 kernel=$3 prec=$4
  step "profile $name ($prec)"
  local S=$(date +%s)
  rm -rf "$W/$name"
  timeout "$5" $D/kbench profile --problem "$problem" --kernel "$kernel" --device cuda:0 \
    --precision "$prec" --calls 3 --warmup 2 --keep "$W/$name" --json > "$OUT/profile_$name.json"
  echo "profile $name rc=$? $(( $(date +%s) - S ))s"
  # The gist of the JSON (the table form is shown once below).
  python3 - "$OUT/profile_$name.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("no JSON:", e); sys.exit(0)
print("source:", r["source"], "| fallback:", r["fallback_reason"])
sol = r.get("speed_of_light")
if sol:
    print(f"speed of light {sol['min_s']*1e6:.2f} us (memory {sol['memory_s']*1e6:.2f}, compute {sol['compute_s']*1e6:.2f} at {sol['compute_peak']}); ratio {r['sol_ratio']}")
n = r.get("ncu")
if n:
    for k in n["kernels"]:
        v = k["verdict"] or {}
        print(f"  {k['name'][:90]}: {k['counters']['duration_s']*1e6:.2f} us x {k['launches_per_call']}/call, "
              f"bound={v.get('bound')} bw={v.get('bandwidth_fraction', 0):.3f} compute={v.get('compute_fraction', 0):.3f} "
              f"AI={v.get('arithmetic_intensity')} occ={k['counters']['achieved_occupancy_pct']}")
        for e in v.get("evidence", []):
            print("     -", e)
    pc = n["per_call_verdict"]
    print("  whole call:", pc and pc["bound"], "| dropped metrics:", n["dropped_metrics"])
    flops = sum(n["per_call"]["flops"].values())
    cost = r.get("cost") or {}
    if cost.get("flops"):
        print(f"  ncu FLOPs per call / FlopCounterMode FLOPs = {flops / cost['flops']:.4f} (1.0 expected for a matmul)")
    print("  per-call flops by class:", n["per_call"]["flops"])
else:
    for e in r.get("torch_events", [])[:8]:
        print(f"  {e['kind']} {e['name'][:80]} x{e['count']} {e['total_us']:.1f} us")
PY
  cp "$W/$name/ncu.csv" "$OUT/ncu_$name.csv" 2>/dev/null || echo "(no ncu CSV kept for $name)"
}
if [ "$PART" != run ]; then
prof elementwise $P/problems/level1/1_Add_large.py $P/kernels/level1/1_add_cuda.py fp32 180
prof matmul $P/problems/level1/2_Matmul_4096.py $P/kernels/level1/2_matmul_torch.py bf16 120
prof tiny $P/problems/level1/3_Tiny_scale.py $P/kernels/level1/3_tiny_scale.py fp32 90

step "table output (tiny, ncu)"
timeout 60 $D/kbench profile --problem $P/problems/level1/3_Tiny_scale.py \
  --kernel $P/kernels/level1/3_tiny_scale.py --device cuda:0 --calls 2

step "fallback on the GPU (--no-ncu)"
timeout 60 $D/kbench profile --problem $P/problems/level1/2_Matmul_4096.py \
  --kernel $P/kernels/level1/2_matmul_torch.py --device cuda:0 --precision bf16 --no-ncu
fi
[ "$PART" = profile ] && { echo "done $(date -u +%T)"; exit 0; }

step "replay run with speed of light in the records"
S=$(date +%s)
timeout 240 $D/kbench run --agent replay --replay-dir $P/kernels --kernelbench $P/problems \
  --levels 1 --device cuda --gpus 0 --families random --out "$W/run"
echo "run rc=$? $(( $(date +%s) - S ))s"
cp "$W/run/records.jsonl" "$OUT/records.jsonl" 2>/dev/null
python3 - "$W/run/records.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    sol, t = r.get("speed_of_light"), r.get("timing")
    ratio = (t["candidate"]["median_ms"] / 1e3 / sol["min_s"]) if sol and t and sol["min_s"] > 0 else None
    print(r["problem"]["file"], json.dumps(r["outcome"])[:60],
          "| sol us:", sol and round(sol["min_s"] * 1e6, 2), "| median us:", t and round(t["candidate"]["median_ms"] * 1e3, 2),
          "| x SOL:", ratio and round(ratio, 2))
PY
echo "done $(date -u +%T)"
