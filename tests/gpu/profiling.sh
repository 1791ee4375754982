#!/usr/bin/env bash
# The profiling suite of GPU runs: `bash tests/gpu/profiling.sh STEP` from the repository root on
# the GPU machine (tests/gpu/README.md). Steps:
#   ncu             kbench profile under ncu on 3 kernels, fresh ncu fixtures, speed of light
#   case-times      where a stress case's time goes on large level-1 problems, and the memory hog
#   memory          where an every-check evaluation's time and GPU memory go (SELECT)
#   timing-cost     what the timing protections cost, self-speedups old and new
#   timing-windows  where a timed call's window goes, per problem and call order
#   placement-states  forward time against where inputs and temporaries lie; repeated self-speedups
#   self-speedup    the reference as its own candidate over levels 1-2, resumed across calls and machines
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# step ncu: kbench profile under ncu on 3 kernels, fresh ncu fixtures, speed of light
# Hardware feedback on the GPU. From the repository root on the GPU machine, with
# D (default devrun/) holding the release kbench binary and KernelBench (see README.md here):
#
#   OUT=/tmp/out bash tests/gpu/profiling.sh ncu
#
# 1. `kbench gpus`: the spec table's peaks for this GPU.
# 2. `kbench profile` under ncu on three kernels (tests/gpu/profile_kernels): a memory-bound CUDA
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
step_ncu() {
PART=${PART:-all}
use_cache_dir
W=/tmp/profiling; P=tests/gpu/profile_kernels
mkdir -p "$OUT" "$W"
LOG="$OUT/summary.txt"
exec > >(tee "$LOG") 2>&1
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
}

# step case-times: where a stress case's time goes on large level-1 problems, and the memory hog
# Where a stress case's time goes on large level-1 problems (the
# records' per-case `times`), and the memory-hog exploit (D2): a reference that runs out of
# GPU memory beside the candidate is remade with the candidate's worker stopped. Everything
# is written under $OUT as it goes (a call cut off still returns what ran).
step_case_times() {
use_cache_dir
T=/tmp/runs24
SELECT=${SELECT:-1/20,1/30}
rm -rf "$T"; mkdir -p "$OUT" "$T"
use_sandbox
P=adversarial/exploits/problems/level1/1_Scale_Add.py
for k in 1_memory_hog 1_honest_cuda; do
  echo "== check $k $(date -u +%T)"
  timeout 200 $D/kbench check --problem $P --kernel adversarial/exploits/cuda/level1/$k.py \
    --device cuda --no-timing > "$OUT/check_$k.txt" 2>&1
  echo "exit $?"; tail -6 "$OUT/check_$k.txt"
done
echo "== ref $SELECT $(date -u +%T)"
timeout 330 $D/kbench run --agent reference --kernelbench $D/kernelbench --select "$SELECT" \
  --device cuda --gpus 0 --out $T/ref > "$OUT/ref.txt" 2>&1
echo "exit $?"; tail -4 "$OUT/ref.txt"
cp $T/ref/records.jsonl "$OUT/ref_records.jsonl" 2>/dev/null
python3 tests/gpu/case_times.py "$T/ref/records.jsonl" | tee "$OUT/case_times.txt"
}

# step memory: where an every-check evaluation's time and GPU memory go (SELECT)
# Where an every-check evaluation's time and GPU memory go on large
# level-1 problems. Runs the reference agent (every family) on SELECT with bubblewrap, and
# writes under $OUT as it goes: the records' per-case times (case_times.txt), the reference
# workers' make_case lines (seconds per part, peak allocation, free memory at the start),
# the device's used memory sampled every 200 ms while kbench runs (smi.csv), and the records.
#
#   D=devrun OUT=/tmp/out SELECT=1/20,1/30 bash tests/gpu/profiling.sh memory
step_memory() {
use_cache_dir
T=/tmp/runs24p
SELECT=${SELECT:-1/20,1/30}; NAME=${NAME:-profile}
rm -rf "$T/$NAME"; mkdir -p "$OUT" "$T"
use_sandbox
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -lms 200 > "$OUT/${NAME}_smi.csv" &
SMI=$!
echo "== $NAME $SELECT $(date -u +%T)"
S=$(date +%s)
timeout ${LIMIT:-400} $D/kbench run --agent reference --kernelbench $D/kernelbench --select "$SELECT" \
  --device cuda --gpus 0 --out $T/$NAME ${KBENCH_ARGS:-} > "$OUT/${NAME}.txt" 2>&1
echo "exit $? in $(( $(date +%s) - S )) s"; tail -4 "$OUT/${NAME}.txt"
kill $SMI
cp $T/$NAME/records.jsonl "$OUT/${NAME}_records.jsonl" 2>/dev/null
python3 tests/gpu/case_times.py "$T/$NAME/records.jsonl" | tee "$OUT/${NAME}_case_times.txt"
find $T/$NAME -name "*.log" -exec grep -H "make_case" {} + 2>/dev/null | cut -c1-300 > "$OUT/${NAME}_worker_lines.txt"
tail -40 "$OUT/${NAME}_worker_lines.txt"
sort -t, -k2 -n "$OUT/${NAME}_smi.csv" | tail -1 | sed 's/^/peak used: /'
}

# step timing-cost: what the timing protections cost, self-speedups old and new
# What the timing protections cost and whether equal code gets equal time, on a GPU: the
# reference agent (its own candidate) with every default check, at the commit before timed
# calls were clocked by the harness ($D/kbench-old) and now ($D/kbench), on the side-by-side
# benchmark's problems (bench/side_by_side: level 1, problems 10 to 80); then the new binary
# alone on a sample of levels 1 and 2 (random family only) for its self-speedups. Writes
# $OUT/cost.md (per problem: timing seconds old and new, self-speedup old and new; the ratio
# of the timing phases) and cost.tgz (the records).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/profiling.sh timing-cost
step_timing_cost() {
use_sandbox; use_cache_dir
L=/tmp/timing-cost; rm -rf "$L"; mkdir -p "$L" "$OUT"
secret "$L/secret"
env_info | tee "$L/env.txt"
SBS=${SBS:-1/10,1/20,1/30,1/40,1/50,1/60,1/70,1/80}
# SIDES may repeat a binary (old new old2 new2: alternating passes, each old* the old binary):
# the passes are pooled, which evens out the 10% the same binary's timing moves between passes.
for side in ${SIDES:-old new}; do
  bin=$D/kbench; case $side in old*) bin=$D/kbench-old;; esac
  step "side by side set, $side"
  S=$(date +%s)
  timeout ${SBS_LIMIT:-150} $bin run --agent reference --kernelbench "$D/kernelbench" --select "$SBS" \
    --device cuda --gpus 0 --secret-from "$L/secret" --quiet --out "$L/sbs-$side" > "$L/sbs-$side.txt" 2>&1
  echo "$side rc=$? $(( $(date +%s)-S ))s"
done
if [ -n "${SAMPLE:-}" ]; then
  step "sample, new"
  S=$(date +%s)
  timeout ${SAMPLE_LIMIT:-150} $D/kbench run --agent reference --kernelbench "$D/kernelbench" --select "$SAMPLE" \
    --device cuda --gpus 0 --families random --secret-from "$L/secret" --quiet --out "$L/sample" > "$L/sample.txt" 2>&1
  echo "sample rc=$? $(( $(date +%s)-S ))s"
fi
python3 tests/gpu/timing_cost.py "$L" | tee "$OUT/cost.md"
pack "$OUT/cost.tgz" "$L" env.txt $(cd "$L" && ls -d sbs-* sample 2>/dev/null)
}

# step timing-windows: where a timed call's window goes, per problem and call order
# Where a timed call's window goes, on a GPU: the reference agent (its own candidate) on a few
# level-1 problems with KBENCH_TIMING_TRACE (each window's parts on stderr) and the workers'
# trace (each timed call's split), then per problem the unexplained time of each side and the
# excess (judge/clock.rs) by call order. Writes $OUT/windows.txt and windows.tgz.
#
#   D=devrun OUT=/tmp/out SELECT=1/1,1/19,1/23 bash tests/gpu/profiling.sh timing-windows
step_timing_windows() {
use_sandbox; use_cache_dir
L=/tmp/timing-windows; rm -rf "$L"; mkdir -p "$L" "$OUT"
step "reference agent, traced"
KBENCH_TIMING_TRACE=1 KBENCH_WORKER_TRACE=1 timeout ${LIMIT:-200} $D/kbench run --agent reference \
  --kernelbench "$D/kernelbench" --select "${SELECT:-1/1,1/19,1/23}" --device cuda --gpus 0 \
  --families random --out "$L/run" --quiet 2> "$L/trace.txt" > "$L/run.txt"
echo "rc=$?"
python3 tests/gpu/timing_windows.py "$L/trace.txt" "$L/run/records.jsonl" | tee "$OUT/windows.txt"
pack "$OUT/windows.tgz" "$L" trace.txt run.txt run/records.jsonl run/logs 2>/dev/null
}

# step placement-states: forward time against where inputs and temporaries lie; repeated self-speedups
# Whether a problem's kernels have speed states set by where their memory lies, and which
# memory decides: tests/gpu/placement_states.py over SELECT in two processes (a table per
# problem: rows the inputs' offset, columns the temporaries', in MiB from a 256 MiB boundary),
# then the reference agent as its own candidate over SELECT, REPEAT runs, each a fresh pair
# of workers (how often each problem's self-speedup lands within 1%). Writes
# $OUT/states.txt, $OUT/repeats.txt and states.tgz.
#
#   D=devrun OUT=/tmp/out SELECT=1/58,1/68,1/77,2/61,2/77 bash tests/gpu/profiling.sh placement-states
step_placement_states() {
use_sandbox; use_cache_dir
L=/tmp/placement-states; rm -rf "$L"; mkdir -p "$L" "$OUT"
secret "$L/secret"
SELECT=${SELECT:-1/58,1/68,1/77,2/61,2/77}
env_info | tee "$L/env.txt"
files=()
for p in ${SELECT//,/ }; do
  files+=("$(ls "$D/kernelbench/level${p%/*}/${p#*/}_"*.py)")
done
step "placement tables, two processes"
for i in 1 2; do
  timeout ${TABLE_LIMIT:-150} python3 tests/gpu/placement_states.py "${files[@]}" 2>&1 | grep -v Warning
done | tee "$OUT/states.txt"
for i in $(seq "${REPEAT:-3}"); do
  step "self-speedup run $i"
  timeout ${RUN_LIMIT:-150} $D/kbench run --agent reference --kernelbench "$D/kernelbench" --select "$SELECT" \
    --device cuda --gpus 0 --families random --secret-from "$L/secret" --quiet --out "$L/run$i" > "$L/run$i.txt" 2>&1
  echo "rc=$?"
  python3 - "$L/run$i/records.jsonl" <<'PY' | tee -a "$OUT/repeats.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    t, p = r.get("timing") or {}, r["problem"]
    ref, cand = (t.get(s) or {} for s in ("reference", "candidate"))
    print(f"L{p['level']}/{p['id']} self-speedup {t.get('speedup') or 0:.4f} reference {ref.get('median_ms', 0):.3f} ms candidate {cand.get('median_ms', 0):.3f} ms")
PY
done
pack "$OUT/states.tgz" "$L" env.txt $(cd "$L" && ls -d run* 2>/dev/null)
}


# step self-speedup: the reference as its own candidate over levels 1-2, resumed across calls and machines
# Whether equal code gets equal time on a GPU: the reference agent as its own candidate over
# SELECT (default all of levels 1 and 2: 1/1-100,2/1-100), random family (timing is what is
# measured), sandboxed, every default check, for BUDGET seconds at most (default 540). A run
# that does not finish is resumed by the next call: on the same machine from /tmp, and on a
# fresh one from $D/selfsp-run.tgz, the previous call's $OUT/selfsp-run.tgz carried back (the
# device machine can be a new one between two calls). Writes $OUT/selfsp.md (how many within
# 1%, the median, those outside; tests/gpu/timing_cost.py), $OUT/selfsp.txt (the run's
# summary) and $OUT/selfsp-run.tgz (the run folder without its kernels: enough to resume and
# to report). Set BUDGET to what the call has left: a call cut off by the device writes nothing.
#
#   D=devrun OUT=/tmp/out BUDGET=540 bash tests/gpu/profiling.sh self-speedup
#
# A dry run on a CPU: DEVICE=cpu KB=adversarial/exploits/problems SELECT=1/4.
step_self_speedup() {
use_sandbox; use_cache_dir
L=/tmp/self-speedup; mkdir -p "$L" "$OUT"
DEVICE=${DEVICE:-cuda}; KB=${KB:-$D/kernelbench}
GPUS=(); [ "$DEVICE" = cuda ] && GPUS=(--gpus 0)
if [ ! -f "$L/sample/run.json" ] && [ -f "$D/selfsp-run.tgz" ]; then tar -xzf "$D/selfsp-run.tgz" -C "$L"; fi
secret "$L/secret"
env_info > "$L/env.txt"
RESUME=(); [ -f "$L/sample/run.json" ] && RESUME=(--resume)
step "self-speedup ${SELECT:-1/1-100,2/1-100} ${RESUME[*]:-from the start}" | tee -a "$OUT/selfsp.txt"
timeout -k 10 -s TERM "${BUDGET:-540}" $D/kbench run --agent reference --kernelbench "$KB" \
  --select "${SELECT:-1/1-100,2/1-100}" --device "$DEVICE" "${GPUS[@]}" --families random \
  --secret-from "$L/secret" --quiet --out "$L/sample" "${RESUME[@]}" >> "$OUT/selfsp.txt" 2>&1
echo "rc=$?" | tee -a "$OUT/selfsp.txt"
python3 tests/gpu/timing_cost.py "$L" | tee "$OUT/selfsp.md"
pack "$OUT/selfsp-run.tgz" "$L" --exclude=sample/kernels sample
}

run_step "$@"
