#!/usr/bin/env bash
# The agents suite of GPU runs: `bash tests/gpu/agents.sh STEP` from the repository root on
# the GPU machine (tests/gpu/README.md). Steps:
#   scripted  coder-judge and kevin against the fake LLM, Nsight Compute metrics reaching the Judge
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# step scripted: coder-judge and kevin against the fake LLM, Nsight Compute metrics reaching the Judge
# The LLM agents on the GPU: `coder-judge` and `kevin` with scripted
# CUDA replies on three level-1 problems, with Nsight Compute feedback reaching the Judge.
# From the repository root on the GPU machine, with D (default devrun/) holding the release
# kbench binary and KernelBench (see README.md here):
#
#   OUT=/tmp/out KBENCH_PYTHON=python3 bash tests/gpu/agents.sh scripted
#
# Problems 1/12 (diag(A) @ B: a row scale, 16M floats), 1/40 (LayerNorm over 64x256x256,
# 67M floats), 1/88 (tanh-GELU, 67M floats): elementwise and reduction shapes small enough to
# evaluate in seconds (19_ReLU and friends hold 1.6G floats and take minutes each).
# The Coder's replies are the hand-written load_inline kernels in tests/gpu/agent_replies/cuda/:
#   coder-judge (--max-rounds 2): 12 and 88: a slow kernel, the Judge's optimisation reply
#     (its prompt must carry Nsight Compute's CudaForge metrics for that kernel), a fast one;
#     40: a kernel that does not compile, the Judge's correction reply (its prompt must carry
#     nvcc's error), a correct one.
#   kevin (T=2, K=2): the same sources again (the content-addressed build cache makes them
#     hits): 12 and 88: t0 slow then fast, t1 slow twice; 40: t0 broken then correct, t1
#     correct twice.
# The fake server (`kbench fake-llm`) answers each model's calls in arrival order, so both
# runs use --jobs 1 (and --trajectory-jobs 1). A replay run first builds the five distinct
# compiling kernels ahead in parallel, so the agents' rounds find them in the cache.
#
# DEVICE=cpu runs the same plumbing on a CPU (tests/gpu/agent_replies/cpu/: PyTorch-only replies, the
# broken one a SyntaxError; problems copied with smaller shapes); the Nsight Compute checks
# are skipped there (the CPU's profile feedback is the measured times).
#
# At most 6 files land in $OUT: summary.txt (everything printed), fakellm_requests.jsonl
# (every request the fake server received), coder_judge_tasks.jsonl, kevin_tasks.jsonl,
# runs.tar.gz (both runs' agent/ llm/ runs/ folders and records), and the prewarm log.
# The last line says PASS or FAIL; the exit status is 0 on PASS.
# Expected on an H100 (estimates, not yet measured): about 2 min prewarm, 3-5 min coder-judge
# (each Nsight Compute profile builds the kernel's extension again in its own folder, then
# replays it under ncu), 2 min kevin. PART=cj and PART=kevin run (and check) one agent each,
# for a 7-minute budget per command: the prewarm runs in both; the second finds the build
# cache (KBENCH_CACHE_DIR) warm when it runs on the same machine.
step_scripted() {
DEVICE=${DEVICE:-cuda}
PART=${PART:-all}
use_cache_dir
W=${W:-/tmp/agents}; P=tests/gpu/agent_replies
HPY=${HPY:-python3}   # runs this script's JSON helpers (standard library only)
rm -rf "$W"; mkdir -p "$OUT" "$W"
exec > >(tee "$OUT/summary.txt") 2>&1
T0=$(date +%s)

step "env (DEVICE=$DEVICE)"
$D/kbench --version
if [ "$DEVICE" = cuda ]; then
  nvidia-smi -L; which ncu && ncu --version | tail -1
  K=$P/cuda; KB=$D/kernelbench
  EVAL=(--device cuda --gpus 0 --trials 2 --families random --timed-calls 30 --rounds 5 --warmup 2)
else
  K=$P/cpu; KB=$W/kernelbench
  # The same problems with shapes a shared CPU evaluates in a second.
  mkdir -p $KB/level1
  sed -e 's/^M = 4096/M = 256/' -e 's/^N = 4096/N = 256/' \
    $D/kernelbench/level1/12_Matmul_with_diagonal_matrices_.py > $KB/level1/12_Matmul_with_diagonal_matrices_.py
  sed -e 's/^batch_size = 16/batch_size = 4/' -e 's/^features = 64/features = 8/' \
    -e 's/^dim1 = 256/dim1 = 32/' -e 's/^dim2 = 256/dim2 = 32/' \
    $D/kernelbench/level1/40_LayerNorm.py > $KB/level1/40_LayerNorm.py
  sed -e 's/^batch_size = 8192/batch_size = 512/' -e 's/^dim = 8192/dim = 512/' \
    $D/kernelbench/level1/88_MinGPTNewGelu.py > $KB/level1/88_MinGPTNewGelu.py
  grep -hE '^(M|N|batch_size|features|dim1|dim2|dim) =' $KB/level1/*.py | tr '\n' ' '; echo
  EVAL=(--device cpu --trials 1 --families random --timed-calls 5 --rounds 1 --warmup 1)
fi
SEL=1/12,1/40,1/88

# The fake server's script: the Coder's and Judge's replies for coder-judge, kevin's replies.
$HPY - "$K" "$W/script.json" <<'PY'
import json, sys
k, out = sys.argv[1], sys.argv[2]
src = lambda name: open(f"{k}/{name}.py").read()
usage = {"prompt_tokens": 1000, "completion_tokens": 200}
def code(name):
    return {"content": f"Here is the kernel ({name}).\n```python\n{src(name)}```\nDone.", "usage": usage}
def judge(v):
    return {"content": "```json\n" + json.dumps(v) + "\n```", "usage": usage}
opt = lambda what: judge({"bottleneck": f"JUDGE-BOTTLENECK {what}: low DRAM throughput for a memory-bound op",
                          "optimisation method": "coalesced float4 accesses over a full grid",
                          "modification plan": f"JUDGE-PLAN {what}: one thread per float4 of the output"})
script = {"models": {
    # Problems run in id order (12, 40, 88), one at a time.
    "coder": [code("12_slow"), code("12_fast"), code("40_bad"), code("40_ok"), code("88_slow"), code("88_fast")],
    "judge": [opt("12"),
              judge({"critical_issue": "JUDGE-CRITICAL undeclared identifier m_rows",
                     "why_it_matters": "the extension does not build", "minimal_fix_hint": "divide by m"}),
              opt("88")],
    # Per problem: t0 turn 1, t0 turn 2, t1 turn 1, t1 turn 2.
    "kevin": [code("12_slow"), code("12_fast"), code("12_slow"), code("12_slow"),
              code("40_bad"), code("40_ok"), code("40_ok"), code("40_ok"),
              code("88_slow"), code("88_fast"), code("88_slow"), code("88_slow")],
}}
json.dump(script, open(out, "w"))
print({m: len(v) for m, v in script["models"].items()}, "scripted replies")
PY

step "fake LLM server"
$D/kbench fake-llm --script "$W/script.json" --url-file "$W/url" --log "$W/requests.jsonl" > "$W/fakellm.log" 2>&1 &
FAKE=$!
trap 'kill $FAKE 2>/dev/null' EXIT
for _ in $(seq 50); do [ -s "$W/url" ] && break; sleep 0.1; done
URL=$(cat "$W/url" 2>/dev/null); echo "serving $URL (pid $FAKE)"
for m in coder judge kevin; do
  printf '[models.%s]\nbase_url = "%s"\nmodel = "%s"\ninput_usd_per_mtok = 2.0\noutput_usd_per_mtok = 8.0\ntimeout_s = 60\nmax_retries = 1\n\n' \
    $m "$URL" $m
done > "$W/kbench.toml"

if [ "$DEVICE" = cuda ]; then
  step "prewarm: build the five compiling kernels ahead in parallel (replay, no timing)"
  mkdir -p $W/prewarm
  for x in 12_slow:12:0 12_fast:12:1 40_ok:40:0 88_slow:88:0 88_fast:88:1; do
    # Without the final newline: the agents' code-block parser drops it, and the build cache
    # is keyed by the kernel's exact bytes.
    IFS=: read -r f p s <<< "$x"; printf '%s' "$(cat $K/$f.py)" > $W/prewarm/level_1_problem_${p}_sample_${s}_kernel.py
  done
  S=$(date +%s)
  timeout 240 $D/kbench run --agent replay --replay-dir $W/prewarm --kernelbench $KB --levels 1 --select $SEL \
    --device cuda --gpus 0 --trials 1 --families random --no-timing --jobs 3 --quiet \
    --out $W/prewarm_run > "$OUT/prewarm.log" 2>&1
  echo "prewarm rc=$? $(( $(date +%s) - S ))s"; tail -5 "$OUT/prewarm.log"
fi

if [ "$PART" != kevin ]; then
step "coder-judge (--max-rounds 2)"
S=$(date +%s)
timeout 420 $D/kbench run --kernelbench $KB --levels 1 --select $SEL --agent coder-judge --coder coder --judge judge \
  --max-rounds 2 --jobs 1 --llm-config $W/kbench.toml "${EVAL[@]}" --out $W/cj
echo "coder-judge rc=$? $(( $(date +%s) - S ))s" | tee $W/cj.rc
fi

if [ "$PART" != cj ]; then
step "kevin (T=2, K=2)"
S=$(date +%s)
timeout 300 $D/kbench run --kernelbench $KB --levels 1 --select $SEL --agent kevin --model kevin \
  --trajectories 2 --trajectory-jobs 1 --max-rounds 2 --jobs 1 --llm-config $W/kbench.toml "${EVAL[@]}" --out $W/kevin
echo "kevin rc=$? $(( $(date +%s) - S ))s" | tee $W/kevin.rc

step "kbench report --table kevin"
$D/kbench report --table kevin $W/kevin
fi

step "checks"
kill $FAKE 2>/dev/null
cp "$W/requests.jsonl" "$OUT/fakellm_requests.jsonl" 2>/dev/null
cp "$W/cj/agent_tasks.jsonl" "$OUT/coder_judge_tasks.jsonl" 2>/dev/null
cp "$W/kevin/agent_tasks.jsonl" "$OUT/kevin_tasks.jsonl" 2>/dev/null
(cd $W && tar czf "$OUT/runs.tar.gz" --ignore-failed-read script.json kbench.toml requests.jsonl \
  cj/agent cj/llm cj/runs cj/records.jsonl cj/agent_tasks.jsonl \
  kevin/agent kevin/llm kevin/runs kevin/records.jsonl kevin/agent_tasks.jsonl 2>/dev/null)
$HPY - "$W" "$DEVICE" harness/src/measure/profile/ncu.rs "$PART" <<'PY'
import json, os, re, sys
w, device, profile_rs, part = sys.argv[1:5]
cuda = device == "cuda"
fails = []
def check(ok, what, detail=""):
    print(("PASS " if ok else "FAIL ") + what + (f"  [{detail}]" if detail and not ok else ""))
    if not ok:
        fails.append(what)
def jsonl(p):
    try:
        return [json.loads(l) for l in open(p) if l.strip()]
    except OSError as e:
        print("missing", p, e); return []
def rc(name):
    try:
        return int(open(f"{w}/{name}.rc").read().split("rc=")[1].split()[0])
    except Exception:
        return None
def user(req):
    return "\n".join(m.get("content") or "" for m in req["body"]["messages"] if m["role"] == "user")
def system(req):
    return "\n".join(m.get("content") or "" for m in req["body"]["messages"] if m["role"] == "system")

def build_error(text):  # nvcc's message, or at least torch's, in an error tail
    if cuda:
        return "m_rows" in text or "Error building extension" in text
    return "SyntaxError" in text or "never closed" in text
metric_names = re.findall(r'"([a-z0-9_]+__[a-z0-9_.]+)"',
                          open(profile_rs).read().split("pub const CUDAFORGE_METRICS")[1].split("];")[0])
check(len(metric_names) == 24, f"read CudaForge's 24 metric names from {profile_rs}", len(metric_names))
reqs = jsonl(f"{w}/requests.jsonl")
by = {m: [r for r in reqs if r["body"].get("model") == m] for m in ("coder", "judge", "kevin")}
want = {"coder": 6, "judge": 3, "kevin": 12}
if part == "cj":
    want["kevin"] = 0
if part == "kevin":
    want["coder"] = want["judge"] = 0
check({m: len(v) for m, v in by.items()} == want, f"fake server got exactly the scripted calls {want}",
      {m: len(v) for m, v in by.items()})
def loads(run):  # (problem id, candidate) -> seconds to load it (a build-cache hit: seconds)
    return {(r["problem"]["file"].split("_")[0], r["candidate"]["name"]): r.get("load_s")
            for r in jsonl(f"{w}/{run}/records.jsonl")}

def rounds(run, pid):
    return jsonl(f"{w}/{run}/agent/level1_problem{pid}/rounds.jsonl")
tot = lambda ts, k: sum(t["spend"][k] for t in ts)

def coder_judge():
    print("\n-- coder-judge")
    check(rc("cj") == 0, "coder-judge run exits 0", rc("cj"))
    cj_tasks = {t["problem"]: t for t in jsonl(f"{w}/cj/agent_tasks.jsonl")}
    for pid, kinds, correct in [("12", ["seed", "optimisation"], [True, True]),
                                ("40", ["seed", "correction"], [False, True]),
                                ("88", ["seed", "optimisation"], [True, True])]:
        rs = rounds("cj", pid)
        got_k = [r["kind"] for r in rs]
        got_c = [bool(r.get("kernel") and r["kernel"]["correct"]) for r in rs]
        check(got_k == kinds and got_c == correct, f"1/{pid}: rounds {kinds}, correct {correct}", f"{got_k} {got_c}")
        ls = loads("cj")
        for r in rs:
            k = r.get("kernel") or {}
            print(f"   round {r['index']} {r['kind']}: {k.get('name')} correct={k.get('correct')} "
                  f"speedup={k.get('speedup')} load_s={ls.get((pid, k.get('name')))} {str(k.get('outcome'))[:70]}")
        if pid != "40" and len(rs) == 2 and all(r.get("kernel") for r in rs):
            s0, s1 = rs[0]["kernel"]["speedup"] or 0, rs[1]["kernel"]["speedup"] or 0
            if cuda:
                check(s1 > s0, f"1/{pid}: the Judge-guided kernel is faster ({s1:.3f} vs {s0:.3f})")
            else:
                print(f"   (CPU: speedups {s0:.3f} -> {s1:.3f}, not checked)")
    j = by["judge"]
    if len(j) == 3:
        for i, pid, ref, kname in [(0, "12", "A.unsqueeze(1) * B", "diag_scale_rows"),
                                   (2, "88", "torch.tanh", "gelu_small_grid")]:
            s, u = system(j[i]), user(j[i])
            check("performance engineer" in s and ref in u, f"judge call {i} is 1/{pid}'s optimisation prompt")
            if cuda:
                found = [m for m in metric_names if m in u]
                check("Nsight Compute (kbench profile)" in u, f"1/{pid}: the Judge's prompt says Nsight Compute (kbench profile)")
                check(len(found) >= 12, f"1/{pid}: the Judge's prompt carries CudaForge metrics ({len(found)}/{len(metric_names)})",
                      u[-1500:])
                # A JSON key naming the kernel (the code itself mentions it without a quote).
                check(f'"{kname}' in u, f"1/{pid}: the metrics are keyed by the candidate's own kernel {kname}")
                check("roofline" in u and "time_over_speed_of_light" in u,
                      f"1/{pid}: roofline verdict and speed-of-light ratio reach the Judge")
                m = re.search(r'"(sm__throughput[^"]*|dram__throughput[^"]*)":\s*([0-9.eE+-]+)', u)
                print("   e.g.", m and m.group(0))
            else:
                print(f"   SKIP Nsight Compute checks for 1/{pid} (DEVICE=cpu: the Judge gets measured times)")
                check("speedup" in u, f"1/{pid}: the Judge's prompt carries the measured speedup")
        corr = user(j[1])
        if cuda:
            print("   nvcc's own message (m_rows) in the Judge's error log:", "m_rows" in corr.split("PyTorch reference")[0])
        check(corr.startswith("ERROR_LOG:") and build_error(corr.split("PyTorch reference")[0]),
              "1/40: the Judge's correction prompt carries the build error", corr[:600])
    else:
        check(False, "three Judge calls to inspect")
    c = by["coder"]
    if len(c) == 6:
        check("JUDGE-PLAN 12" in user(c[1]) and "JUDGE-PLAN 88" in user(c[5]),
              "the Judge's modification plans reach the Coder")
        check("JUDGE-CRITICAL" in user(c[3]), "the Judge's critical issue reaches the Coder's repair prompt")
    for pid in ("12", "40", "88"):
        t = next((t for p, t in cj_tasks.items() if p.endswith(f"L1/{pid}")), None)
        if t is None:
            check(False, f"1/{pid}: a task in agent_tasks.jsonl", list(cj_tasks)); continue
        fk = t.get("final_kernel") or {}
        # The fastest correct kernel (round01 on a GPU, where the check above makes it the
        # faster; on a shared CPU either may win).
        ks = [r["kernel"] for r in rounds("cj", pid) if r.get("kernel") and r["kernel"]["correct"]]
        want = max(ks, key=lambda k: k.get("speedup") or 0)["name"] if ks else None
        check(fk.get("name") == want and fk.get("correct"), f"1/{pid}: final kernel is the fastest correct ({want})",
              fk)
        sp = t["spend"]
        print(f"   final 1/{pid}: {fk.get('name')} speedup={fk.get('speedup')} | calls={sp['calls']} "
              f"in={sp['input_tokens']} out={sp['output_tokens']} ${sp['cost_usd']:.4f} | wall {t['wall_s']:.1f}s")
    ts = list(cj_tasks.values())
    check((tot(ts, "calls"), tot(ts, "input_tokens"), tot(ts, "output_tokens")) == (9, 9000, 1800)
          and abs(tot(ts, "cost_usd") - 9 * 0.0036) < 1e-9,
          "coder-judge totals: 9 calls, 9000 in, 1800 out, $0.0324",
          (tot(ts, "calls"), tot(ts, "input_tokens"), tot(ts, "output_tokens"), tot(ts, "cost_usd")))
    print(f"   coder-judge spend: {tot(ts, 'calls')} calls, {tot(ts, 'input_tokens')} in + {tot(ts, 'output_tokens')} out, ${tot(ts, 'cost_usd'):.4f}")
    for pid in ("12", "40", "88"):
        check(os.path.isfile(f"{w}/cj/runs/coder-judge/level_1_problem_{pid}_sample_0_kernel.py"),
              f"1/{pid}: final kernel in runs/coder-judge/")

def kevin():
    print("\n-- kevin")
    check(rc("kevin") == 0, "kevin run exits 0", rc("kevin"))
    kt = jsonl(f"{w}/kevin/agent_tasks.jsonl")
    check(len(kt) == 3, "kevin: three tasks", len(kt))
    for t in kt:
        x, fk, sp = t.get("extra") or {}, t.get("final_kernel") or {}, t["spend"]
        print(f"   {t['problem']}: trajectories {x.get('trajectory_speedups')} best-of-T {x.get('best_of_t_speedup')} "
              f"avg-of-T {x.get('avg_of_t_speedup')} correct best/avg {x.get('best_of_t_correct')}/{x.get('avg_of_t_correct')} "
              f"| final {fk.get('name')} {fk.get('speedup')} | calls={sp['calls']} ${sp['cost_usd']:.4f}")
        check(x.get("best_of_t_correct") is True and x.get("avg_of_t_correct") == 1.0
              and (x.get("best_of_t_speedup") or 0) >= (x.get("avg_of_t_speedup") or 0) > 0,
              f"kevin {t['problem']}: both trajectories correct, best-of-T >= avg-of-T > 0")
    kr = [r for pid in ("12", "40", "88") for r in rounds("kevin", pid)]
    check(sum(1 for r in kr if r.get("kernel") and not r["kernel"]["correct"]) == 1,
          "kevin: exactly one incorrect turn (1/40 t0 turn 1, the broken build)")
    k = by["kevin"]
    if len(k) == 12:
        fb = user(k[5])
        check(build_error(fb) and "Compilation error" in fb,
              "kevin: 1/40 t0 turn 2 sees the build error", fb[-800:])
        check("speedup" in user(k[1]).lower(), "kevin: 1/12 t0 turn 2 sees the measured speedup")
    check((tot(kt, "calls"), tot(kt, "input_tokens"), tot(kt, "output_tokens")) == (12, 12000, 2400),
          "kevin totals: 12 calls, 12000 in, 2400 out",
          (tot(kt, "calls"), tot(kt, "input_tokens"), tot(kt, "output_tokens")))
    print(f"   kevin spend: {tot(kt, 'calls')} calls, {tot(kt, 'input_tokens')} in + {tot(kt, 'output_tokens')} out, ${tot(kt, 'cost_usd'):.4f}")
    n = len(kt) or 1
    print(f"   kevin mean over tasks: best-of-T {sum(t['extra']['best_of_t_speedup'] for t in kt) / n:.3f}x, "
          f"avg-of-T {sum(t['extra']['avg_of_t_speedup'] for t in kt) / n:.3f}x")

if part != "kevin":
    coder_judge()
if part != "cj":
    kevin()
print("RESULT:", "PASS" if not fails else f"FAIL ({len(fails)}: " + "; ".join(fails) + ")")
sys.exit(1 if fails else 0)
PY
R=$?
echo "done $(date -u +%T), $(( $(date +%s) - T0 ))s in all"
exit $R
}

run_step "$@"
