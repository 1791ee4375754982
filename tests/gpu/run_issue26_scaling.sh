#!/usr/bin/env bash
# Issue 26 at the current defaults (every GPU worker's torch threads bounded to cores / (4 x
# GPUs), candidate workers started ahead, reference cases dropped), one device call on a machine
# of 4 GPUs (about 9 minutes): run_issue26_x4.sh's 40-problem sample with every check, warm
# first, then on 1 GPU, on 2 and on 4; scaling 1 -> 2 and 1 -> 4, each GPU's busy share, and
# which worker commands grew from 1 GPU to 4 (worker_trace.py).
#
#   D=devrun OUT=/tmp/out bash tests/gpu/run_issue26_scaling.sh
STEPS=${STEPS:-warm ref1 ref2 ref4} exec bash "$(dirname "${BASH_SOURCE[0]}")/run_issue26_x4.sh"
