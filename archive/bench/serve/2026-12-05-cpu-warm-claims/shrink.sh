#!/usr/bin/env bash
# The six problems of the RL shape (KernelBench level 1, 19-24), shrunk from 4096 x 393216 to
# 16 x 4096 so that a CPU evaluates them in about a second each. Usage: shrink.sh KB OUT
set -eu
mkdir -p "$2/level1"
for f in "$1"/level1/{19,20,21,22,23,24}_*.py; do
  sed -E 's/^batch_size = 4096$/batch_size = 16/; s/^dim = 393216$/dim = 4096/' "$f" > "$2/level1/$(basename "$f")"
done
