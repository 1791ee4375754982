#!/usr/bin/env bash
# Triton candidates on a GPU, in the sandbox, every check on: the CPU fixtures of
# tests/triton_cpu.rs (there under Triton's interpreter) compiled by Triton for the GPU. The
# honest ELU is `ok` with a speedup; the one that drops alpha is a mismatch.
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_triton.sh
set -uo pipefail
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
D=${D:-devrun}; OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
[ -f "$D/kbench.gz" ] && gunzip -kf "$D/kbench.gz" && chmod +x "$D/kbench"
{ nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__, torch.version.cuda, "triton", triton.__version__)'
  "$D/kbench" --version; } > "$OUT/env.txt" 2>&1
. "$(dirname "$0")/bwrap.sh"  # the sandbox: host bwrap, else the wheel in $D
for k in 2_triton_elu 2_triton_elu_no_alpha; do
    timeout 280 "$D/kbench" check --problem suites/smoke/2_ELU.py --kernel "tests/fixtures/triton/$k.py" \
        --device cuda > "$OUT/$k.txt" 2>&1
    echo "$k rc=$?"
    tail -25 "$OUT/$k.txt"
done
