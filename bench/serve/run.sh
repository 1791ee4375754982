#!/usr/bin/env bash
# kbench serve under load, on one machine: starts `kbench serve` on loopback over KernelBench
# level 1 with a fresh token (`--new-token`) and a fresh --out, runs serve_bench.py against it
# (throughput, GPU busy share, cached-answer latency, optionally a published set), stops the
# service with SIGTERM and leaves in OUT: serve.log (the service's stderr), results.json,
# summary.md, env.txt, bench.log. From the repository root on the GPU machine:
#
#   KBENCH=devrun/kbench KBENCH_PYTHON=python3 bash bench/serve/run.sh --kernelbench devrun/kernelbench
#   bash bench/serve/run.sh --kernelbench KB --out DIR --published DIR -n 60 -k 200   # serve_bench.py options pass through
#   bash bench/serve/run.sh --kernelbench KB --dry-run      # the commands and candidates; starts nothing
#
# Settings (environment): KBENCH (default `kbench` on PATH), OUT (default ./serve-bench-out;
# --out wins), SERVE_ARGS (more `kbench serve` options, e.g. "--gpus 0,1 --device cuda"),
# GPUS (indices NVML samples, default all), PORT (default a free one), HEALTH_WAIT_S (300: the
# first start may build the Python environment), STOP_WAIT_S (60: SIGTERM, then SIGKILL),
# KEEP_WORK=1 (keep the service's run folder, printed), KBENCH_BWRAP (the sandbox; else the
# host's bwrap or the wheel in D=devrun, as tests/gpu/bwrap.sh finds it).
set -uo pipefail
HERE=$(pwd)
cd "$(dirname "$0")/../.."
KBENCH=${KBENCH:-kbench}
OUT=${OUT:-serve-bench-out}
KB=""
DRY=0
PASS=()
while [ $# -gt 0 ]; do
  case $1 in
    --kernelbench) KB=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) PASS+=("$1"); shift ;;
  esac
done
if [ -z "$KB" ]; then
  echo "run.sh: --kernelbench DIR is needed (a KernelBench checkout, or a folder holding level1/)" >&2
  exit 2
fi
# Relative paths are the caller's, not the repository root's.
case $OUT in /*) ;; *) OUT=$HERE/$OUT ;; esac
case $KB in /*) ;; *) KB=$HERE/$KB ;; esac
case $KBENCH in */*) case $KBENCH in /*) ;; *) KBENCH=$HERE/$KBENCH ;; esac ;; esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
KB=$(cd "$KB" && pwd) || exit 2
PORT=${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
URL=http://127.0.0.1:$PORT
# shellcheck disable=SC2206 # SERVE_ARGS is a list of options
EXTRA=(${SERVE_ARGS:-})
BENCH=(python3 bench/serve/serve_bench.py --url "$URL" --kernelbench "$KB" --out "$OUT" ${GPUS:+--gpus "$GPUS"})

if [ "$DRY" = 1 ]; then
  echo "would run:"
  echo "  $KBENCH serve --new-token bench   (then serve_bench.py --make-tokens: a tokens file without quotas in the way)"
  echo "  $KBENCH serve --kernelbench $KB --levels 1 --listen 127.0.0.1:$PORT --out WORK/serve-run --tokens WORK/tokens.toml ${EXTRA[*]} 2> $OUT/serve.log &"
  echo "  ${BENCH[*]} --token-file WORK/token --service-started-unix-s T ${PASS[*]}"
  echo "  kill -TERM <service>"
  "${BENCH[@]}" --dry-run "${PASS[@]}"
  exit $?
fi

if [ -z "${KBENCH_BWRAP:-}" ] && ! command -v bwrap > /dev/null; then
  D=${D:-devrun}
  # shellcheck source=../../tests/gpu/bwrap.sh
  source tests/gpu/bwrap.sh
fi
WORK=$(mktemp -d /tmp/kbench-serve-bench-XXXXXX)
SPID=""
stop_service() {
  [ -n "$SPID" ] || return 0
  local s0 rc
  s0=$(date +%s)
  if kill -0 "$SPID" 2> /dev/null; then
    kill -TERM "$SPID"
    while kill -0 "$SPID" 2> /dev/null && [ $(( $(date +%s) - s0 )) -lt "${STOP_WAIT_S:-60}" ]; do sleep 0.2; done
    if kill -0 "$SPID" 2> /dev/null; then
      echo "service still running ${STOP_WAIT_S:-60} s after SIGTERM: SIGKILL" | tee -a "$OUT/bench.log"
      kill -KILL "$SPID"
    fi
  fi
  wait "$SPID" 2> /dev/null
  rc=$?
  echo "service exit status $rc, $(( $(date +%s) - s0 )) s after SIGTERM" | tee -a "$OUT/bench.log"
  SPID=""
}
cleanup() {
  stop_service
  if [ "${KEEP_WORK:-0}" = 1 ]; then echo "kept the service's folder: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

: > "$OUT/bench.log"
{
  date -u +%FT%TZ
  echo "kbench: $("$KBENCH" --version 2>&1)"
  echo "commit: $(git rev-parse --short HEAD 2> /dev/null || echo '?')"
  nvidia-smi -L 2> /dev/null || echo "no nvidia-smi"
  "${KBENCH_PYTHON:-python3}" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
  "${KBENCH_PYTHON:-python3}" -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
  echo "kernel $(uname -r), $(nproc) cores, bwrap ${KBENCH_BWRAP:-$(command -v bwrap || echo none)}"
  echo "serve args: --kernelbench $KB --levels 1 ${EXTRA[*]}"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if ! "$KBENCH" serve --new-token bench > "$WORK/new-token.txt" 2>&1; then
  echo "run.sh: \`$KBENCH serve --new-token bench\` failed:" >&2
  cat "$WORK/new-token.txt" >&2
  exit 1
fi
python3 bench/serve/serve_bench.py --make-tokens "$WORK/new-token.txt" "$WORK/tokens.toml" "$WORK/token" || exit 1

STARTED=$(python3 -c 'import time; print(f"{time.time():.3f}")')
"$KBENCH" serve --kernelbench "$KB" --levels 1 --listen "127.0.0.1:$PORT" --out "$WORK/serve-run" \
  --tokens "$WORK/tokens.toml" "${EXTRA[@]}" > "$OUT/serve.stdout" 2> "$OUT/serve.log" &
SPID=$!
echo "service pid $SPID on $URL (log $OUT/serve.log)" | tee -a "$OUT/bench.log"

# Ready when /v1/health answers; a service that exits first is a failure, said with its log.
t0=$(date +%s)
until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/v1/health", timeout=2)' "$URL" 2> /dev/null; do
  if ! kill -0 "$SPID" 2> /dev/null; then
    wait "$SPID"; echo "run.sh: the service exited ($?) before answering /v1/health; its log:" >&2
    tail -30 "$OUT/serve.log" >&2
    SPID=""
    exit 1
  fi
  if [ $(( $(date +%s) - t0 )) -ge "${HEALTH_WAIT_S:-300}" ]; then
    echo "run.sh: no answer from $URL/v1/health within ${HEALTH_WAIT_S:-300} s; the log's end:" >&2
    tail -30 "$OUT/serve.log" >&2
    exit 1
  fi
  sleep 0.5
done
echo "service ready after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/bench.log"

"${BENCH[@]}" --token-file "$WORK/token" --service-started-unix-s "$STARTED" "${PASS[@]}" 2>&1 | tee -a "$OUT/bench.log"
RC=${PIPESTATUS[0]}
stop_service
exit "$RC"
