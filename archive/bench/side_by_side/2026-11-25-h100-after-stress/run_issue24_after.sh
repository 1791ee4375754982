#!/usr/bin/env bash
# Issue 24 after the stress/OOM changes: the device comparator's unit tests (the GPU flush
# count against the host's; D/kbench-lib-tests, a release test binary from `cargo test
# --release -p kbench --lib --no-run`), then the side-by-side benchmark in full (KernelBench's
# eval, kbench --families random, kbench with every check) in the same call.
set -uo pipefail
D=${D:-devrun}; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
echo "== libtests $(date -u +%T)"
timeout 90 $D/kbench-lib-tests gpu::compare --test-threads 1 > "$OUT/libtests.txt" 2>&1
echo "exit $?"; grep -E "test result|FAILED|panicked|flush" "$OUT/libtests.txt" | head -12
echo "== side-by-side $(date -u +%T)"
BUDGET_S=${BUDGET_S:-470} bash bench/side_by_side/run.sh > "$OUT/console.txt" 2>&1
echo "exit $?"
