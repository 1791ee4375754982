#!/usr/bin/env bash
# Issue 24 on the GPU: checked timed calls compared on the GPU. A problem with 384 MiB of
# output (tests/gpu/timed_checks; before, device cases over 256 MiB were never checked under
# timing), an honest kernel (ok, 6 checked timed calls) and one that returns zeros only when
# called from the timing loop (timed-output-mismatch); then the exploit corpus's small
# problem with the same exploit (C4); then KernelBench's level-1 problem 20 (LeakyReLU, 6.4 GB
# per tensor) with every family, where the reference session keeps no case and the timed
# case's outputs are kept alone for timing: honest (ok, checked calls > 0) and C4 (caught),
# and a C4 that also zeroes its old output slot through the IPC handle it kept (caught: the
# kept outputs are private copies).
# Writes everything under $OUT as it goes.
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_CACHE_DIR=${KBENCH_CACHE_DIR:-/tmp/kbench-cache} PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; T=/tmp/timed_checks
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
