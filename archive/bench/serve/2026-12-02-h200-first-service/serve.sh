#!/usr/bin/env bash
# kbench serve on the GPU: STEP=kb (throughput + cached on KernelBench L1) or STEP=lb (a
# published set through the API: KernelBenchLeaderboard L1, first LBN kernels).
set -u
D=devrun
source $D/bwrap.sh
mkdir -p /tmp/k && gunzip -c $D/kbench.gz > /tmp/k/kbench && chmod +x /tmp/k/kbench
export KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1 KBENCH=/tmp/k/kbench
{ nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__, torch.version.cuda, "triton", triton.__version__)'; uname -r; nproc; } > $OUT/env.txt 2>&1
case "${STEP:-kb}" in
kb)
  OUT=$OUT/kb timeout ${KBT:-540} bash bench/serve/run.sh --kernelbench $D/kernelbench -n ${N:-60} -k ${K:-200} --timeout-s ${TS:-420} > $OUT/kb.txt 2>&1
  ;;
lb)
  /tmp/k/kbench import leaderboard $D/lb --out /tmp/lbset > $OUT/import.txt 2>&1 || echo "import failed" >> $OUT/import.txt
  mkdir -p /tmp/lbsub
  ls /tmp/lbset/level_1_problem_*_kernel.py | sort -V | head -${LBN:-30} | xargs -I{} cp {} /tmp/lbsub/
  OUT=$OUT/lb timeout ${KBT:-540} bash bench/serve/run.sh --kernelbench /tmp/lbset/problems --steps published --published /tmp/lbsub --timeout-s ${TS:-420} > $OUT/lb.txt 2>&1
  ;;
esac
tail -40 $OUT/${STEP:-kb}.txt
cat $OUT/${STEP:-kb}/summary.md 2>/dev/null
