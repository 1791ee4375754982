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
#             a twin of identical source, and a CUDA source the light header does not serve)
#                                                                 -> $OUT/fixtures_{cold,warm}
#   lb        KernelBenchLeaderboard's kernels (kbench import leaderboard $D/lb, fetched and
#             never committed), LEVELS and SEL                      -> $OUT/lb_{cold,warm}
#   cpu       tests/fixtures/build_patterns on the CPU (C++ extensions, smoke problems 1-2,
#             --no-timing, built in place one at a time): no GPU needed -> $OUT/cpu_{cold,warm}
# PCH (default on): `off` runs every step with KBENCH_PCH=off (no precompiled torch/extension.h);
# `both` runs each cold run twice, side by side, the second without (<run>_nopch).
# CUDA_HEADER (default full): `light` runs every step with KBENCH_CUDA_HEADER=light (a CUDA
# source's torch/extension.h compiled as torch/types.h first); `both` adds a cold run with it
# beside each cold run (<run>_light, its own empty cache), and summarize.py lists every kernel
# whose verdict differs between the two.
# CXX_HEADER (default full): `light` runs every step with KBENCH_CXX_HEADER=light (a C++
# source's torch/extension.h, every load_inline's binding, compiled as torch/types.h +
# torch/python.h first); `both` adds a cold run with it, *before* each cold run (<run>_cxx, its
# own empty cache: the run after it finds the host's page cache warm), and summarize.py
# compares the two as for CUDA_HEADER. With CUDA_HEADER=light both runs have the light CUDA header.
# SETUP_PCH=1: before each cold run with the headers, `kbench setup` makes them in its empty
# cache (its output and time in <run>.setup); without it the run's own helper makes them in
# the background, its builds using them once made.
# Each run writes <run>.txt (kbench's output), <run>.mem (host memory used, one sample a
# second), <run>.cpu.json (host_cpu.py: the host's CPU busy over time and every process's CPU
# seconds by compiler stage), <run>.wall (its start and end) and <run>/logs.tgz (the run's
# logs: workers, build jobs, the precompiled header helper); summarize.py turns the run folders
# into seconds per kernel, first verdict, GPU and host CPU busy shares after it, builds at
# once, peak memory and a build job's CPU seconds by stage.
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
PCH=${PCH:-on}
SETUP_PCH=${SETUP_PCH:-0}
CUDA_HEADER=${CUDA_HEADER:-full}
[ "$CUDA_HEADER" = light ] && export KBENCH_CUDA_HEADER=light
CXX_HEADER=${CXX_HEADER:-full}
[ "$CXX_HEADER" = light ] && export KBENCH_CXX_HEADER=light
read -r -a EXTRA <<< "${ARGS:-}"
W=${W:-/tmp/build-ahead}
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$W"
for f in kbench; do [ -f "$D/$f.gz" ] && gunzip -kf "$D/$f.gz" && chmod +x "$D/$f"; done
{ nvidia-smi -L; "$KBENCH_PYTHON" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
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
    rm -f "$OUT/$name.cpu.json"  # a sampler that writes nothing leaves none, not an older run's
    python3 bench/build_ahead/host_cpu.py "$OUT/$name.cpu.json" & local cpu_sampler=$!
    local t0; t0=$(date +%s.%N)
    KBENCH_CACHE_DIR=$cache timeout "$LIMIT" "$D/kbench" run --agent replay --out "$W/$name" "$@" "${EXTRA[@]}" \
        > "$OUT/$name.txt" 2>&1
    local rc=$?
    echo "$t0 $(date +%s.%N) $rc" > "$OUT/$name.wall"
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    # Asked to stop, then killed after 30 s if it has not (a read of /proc stuck on a process).
    kill -TERM "$cpu_sampler" 2>/dev/null
    # The watcher ends as soon as the sampler has, and holds none of run.sh's output open.
    ( for _ in $(seq 300); do kill -0 "$cpu_sampler" 2>/dev/null || exit 0; sleep 0.1; done
      kill -KILL "$cpu_sampler" 2>/dev/null ) > /dev/null 2>&1 & local watcher=$!
    wait "$cpu_sampler" 2>/dev/null
    wait "$watcher" 2>/dev/null
    echo "$name rc=$rc"
    mkdir -p "$OUT/$name"
    cp "$W/$name/records.jsonl" "$W/$name/gpu_samples.jsonl" "$W/$name/logs/builds.jsonl" "$OUT/$name/" 2>/dev/null
    # The workers' and build jobs' logs (ninja's lines say what a load compiled again) and the
    # precompiled header helper's, for finding where a load's seconds went.
    tar -czf "$OUT/$name/logs.tgz" -C "$W/$name" logs 2>/dev/null
}

# cold_and_warm STEP ARGS...: STEP's cold run(s) with an empty cache, as PCH says, then its warm run
# (the cache of the cold run with the headers) unless WARM=0.
cold_and_warm() {
    local step=$1; shift
    local cache="$W/cache-$step"
    if [ "$CXX_HEADER" = both ]; then
        rm -rf "$cache-cxx"
        KBENCH_CXX_HEADER=light run "${step}_cold_cxx" "$cache-cxx" "$@"
    fi
    if [ "$PCH" != off ]; then
        rm -rf "$cache"
        if [ "$SETUP_PCH" = 1 ]; then
            local t0; t0=$(date +%s.%N)
            KBENCH_CACHE_DIR=$cache "$D/kbench" setup --quiet > "$OUT/${step}_cold.setup" 2>&1
            local rc=$?; echo "setup rc=$rc seconds $(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN{print a - b}')" >> "$OUT/${step}_cold.setup"
        fi
        run "${step}_cold" "$cache" "$@"
    fi
    if [ "$PCH" != on ]; then
        local suffix=_nopch; [ "$PCH" = off ] && suffix=""
        rm -rf "$cache-nopch"
        KBENCH_PCH=off run "${step}_cold$suffix" "$cache-nopch" "$@"
    fi
    if [ "$CUDA_HEADER" = both ]; then
        rm -rf "$cache-light"
        KBENCH_CUDA_HEADER=light run "${step}_cold_light" "$cache-light" "$@"
    fi
    if [ "$WARM" = 1 ]; then
        if [ "$PCH" = off ]; then
            KBENCH_PCH=off run "${step}_warm" "$cache-nopch" "$@"
        else
            run "${step}_warm" "$cache" "$@"
        fi
    fi
}

if want fixtures; then
    cold_and_warm fixtures --device cuda --replay-dir tests/gpu/build_patterns/kernels --kernelbench tests/gpu/build_patterns/problems --levels 1
fi
if want lb; then
    "$D/kbench" import leaderboard "$D/lb" --out "$W/lbset" > "$OUT/import.txt" 2>&1 || echo "import failed"
    sel=(); [ -n "$SEL" ] && sel=(--select "$SEL")
    cold_and_warm lb --device cuda --replay-dir "$W/lbset" --kernelbench "$W/lbset/problems" --levels "$LEVELS" "${sel[@]}"
fi
if want cpu; then
    cold_and_warm cpu --device cpu --suite smoke --select 1,2 --replay-dir tests/fixtures/build_patterns \
        --families random --no-timing --build-jobs 0
fi
python3 bench/build_ahead/summarize.py "$OUT" > "$OUT/summary.md" 2>&1
cat "$OUT/summary.md"
