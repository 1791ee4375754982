#!/usr/bin/env bash
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
#   D=devrun OUT=/tmp/out bash tests/gpu/run_bounded_workers.sh
set -uo pipefail
source "$(dirname "$0")/common.sh"
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
tar -czf "$OUT/bounded.tgz" -C "$L" . 2>/dev/null
echo "status $status"
exit $status
