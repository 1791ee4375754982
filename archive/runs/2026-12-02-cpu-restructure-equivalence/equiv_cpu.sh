#!/usr/bin/env bash
# run.sh REPO OUT: the smoke suite (reference agent) and the CPU exploit corpus with a fixed
# secret, records normalised (timings, ids removed) for a before/after comparison.
set -u
R=$1; O=$2; mkdir -p "$O"; B=${B:-$R/target/release/kbench}
printf '%s' 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef > "$O/secret"
export KBENCH_PYTHON=/root/.cache/kbench/venv/bin/python3
rm -rf "$O/smoke" "$O/corpus"
$B run --agent reference --suite smoke --device cpu --timed-calls 20 --secret-from "$O/secret" --out "$O/smoke" --quiet > "$O/smoke.log" 2>&1; echo "smoke rc=$?" >> "$O/rc"
$B run --agent replay --replay-dir $R/adversarial/exploits/cpu --kernelbench $R/adversarial/exploits/problems --levels 1 --device cpu --families signed --timed-calls 20 --warmup 1 --secret-from "$O/secret" --out "$O/corpus" --quiet > "$O/corpus.log" 2>&1; echo "corpus rc=$?" >> "$O/rc"
for x in smoke corpus; do python3 /tmp/equiv/norm_records.py "$O/$x" > "$O/$x.norm"; done
