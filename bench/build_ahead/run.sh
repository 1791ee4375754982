#!/usr/bin/env bash
# Published kernel sets at GPU speed, whatever way their kernels build (README.md beside this
# file). Run on the GPU machine from the repository root:
#
#   D=devrun OUT=/tmp/out bash bench/build_ahead/run.sh
#
# Steps (STEPS, default "fixtures lb"), each cold (an empty build cache) then warm (the same
# cache again), every default check on:
#   fixtures  tests/gpu/build_patterns: one kernel per build pattern (module level, __init__
#             behind device work, behind torch.cuda.is_available(), the first call, `load` of
#             files it writes, Triton's JIT, a build that fails, a constructor that raises,
#             and a twin of identical source)                     -> $OUT/fixtures_{cold,warm}
#   lb        KernelBenchLeaderboard's kernels (kbench import leaderboard $D/lb, fetched and
#             never committed), LEVELS and SEL                      -> $OUT/lb_{cold,warm}
# Each run writes <run>.txt (kbench's output), <run>.mem (host memory used, one sample a
# second) and <run>.wall (its start and end); summarize.py turns the run folders into
# seconds per kernel, first verdict, GPU busy share after it, builds at once and peak memory.
# WARM=0 skips the warm passes; LIMIT (seconds, default 540) bounds each run; ARGS are added
# to every kbench run (e.g. ARGS="--stop-starting-after 400": no problem starts after 400 s,
# so a run cut short still ends with whole records).
set -uo pipefail
D=${D:-devrun}
OUT=${OUT:-/tmp/out}
STEPS=" ${STEPS:-fixtures lb} "
LEVELS=${LEVELS:-1,2}
SEL=${SEL:-}
LIMIT=${LIMIT:-540}
WARM=${WARM:-1}
read -r -a EXTRA <<< "${ARGS:-}"
W=${W:-/tmp/build-ahead}
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$W"
for f in kbench; do [ -f "$D/$f.gz" ] && gunzip -kf "$D/$f.gz" && chmod +x "$D/$f"; done
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  echo "cores $(nproc)"; free -g | sed -n 2p; uname -r; "$D/kbench" --version; } > "$OUT/env.txt" 2>&1
[ -f tests/gpu/bwrap.sh ] && . tests/gpu/bwrap.sh  # the sandbox: host bwrap, else the wheel in $D
want() { [[ "$STEPS" == *" $1 "* ]]; }

# Host memory in use (MemTotal - MemAvailable, bytes), one line a second, until killed.
sample_memory() {
    while :; do
        awk -v t="$(date +%s.%N)" '/^MemTotal:/{m=$2} /^MemAvailable:/{a=$2} END{printf "%s %d\n", t, (m-a)*1024}' /proc/meminfo
        sleep 1
    done
}

# run NAME CACHE ARGS...: one kbench run into $W/NAME with build cache CACHE.
run() {
    local name=$1 cache=$2; shift 2
    rm -rf "${W:?}/$name"
    sample_memory > "$OUT/$name.mem" & local sampler=$!
    local t0; t0=$(date +%s.%N)
    KBENCH_CACHE_DIR=$cache timeout "$LIMIT" "$D/kbench" run --agent replay --device cuda --out "$W/$name" "$@" "${EXTRA[@]}" \
        > "$OUT/$name.txt" 2>&1
    local rc=$?
    echo "$t0 $(date +%s.%N) $rc" > "$OUT/$name.wall"
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    echo "$name rc=$rc"
    mkdir -p "$OUT/$name"
    cp "$W/$name/records.jsonl" "$W/$name/gpu_samples.jsonl" "$W/$name/logs/builds.jsonl" "$OUT/$name/" 2>/dev/null
}

if want fixtures; then
    rm -rf "$W/cache-fixtures"
    run fixtures_cold "$W/cache-fixtures" --replay-dir tests/gpu/build_patterns/kernels --kernelbench tests/gpu/build_patterns/problems --levels 1
    [ "$WARM" = 1 ] && run fixtures_warm "$W/cache-fixtures" --replay-dir tests/gpu/build_patterns/kernels --kernelbench tests/gpu/build_patterns/problems --levels 1
fi
if want lb; then
    "$D/kbench" import leaderboard "$D/lb" --out "$W/lbset" > "$OUT/import.txt" 2>&1 || echo "import failed"
    sel=(); [ -n "$SEL" ] && sel=(--select "$SEL")
    rm -rf "$W/cache-lb"
    run lb_cold "$W/cache-lb" --replay-dir "$W/lbset" --kernelbench "$W/lbset/problems" --levels "$LEVELS" "${sel[@]}"
    [ "$WARM" = 1 ] && run lb_warm "$W/cache-lb" --replay-dir "$W/lbset" --kernelbench "$W/lbset/problems" --levels "$LEVELS" "${sel[@]}"
fi
python3 bench/build_ahead/summarize.py "$OUT" > "$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
