# Sourced by the GPU scripts: the setup every one of them shares. D (the carried folder, default
# devrun) and OUT (where results go, default /tmp/out), kbench's Python (the machine's python3
# with its CUDA torch) and cache, the sandbox's bwrap (bwrap.sh), and two helpers: `step` (a
# timestamped heading) and `env_info` (GPU, torch, kernel, cores, the binaries' versions).
D=${D:-devrun}
OUT=${OUT:-/tmp/out}
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} KBENCH_CACHE_DIR=${KBENCH_CACHE_DIR:-/tmp/kbench-cache} PYTHONUNBUFFERED=1
source "$(dirname "${BASH_SOURCE[0]}")/bwrap.sh"
step() { echo "== $1 $(date -u +%T)"; }
env_info() {
  nvidia-smi -L 2>/dev/null
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "kernel $(uname -r), $(nproc) cores, bwrap ${KBENCH_BWRAP:-none}"
  for b in "$D"/kbench "$D"/kbench-old; do [ -x "$b" ] && echo "$b: $("$b" --version)"; done
  return 0
}
# A fixed run secret (64 hex digits) at $1.
secret() { printf '6eed%.0s' $(seq 16) > "$1"; }
