#!/usr/bin/env bash
# Before/after on the GPU: the smoke suite (reference agent) and the whole exploit corpus with a
# fixed secret, by the binary before the restructuring (kbench-old) and after (kbench), sharing
# one build cache; records normalised (timings, ids removed) and compared. Then the failed-build
# fixture alone, cold, with the new binary (its build must be replayed, not compiled again).
set -u
export KBENCH_PYTHON=python3 PYTHONUNBUFFERED=1
D=devrun; for b in kbench kbench-old; do gunzip -kf $D/$b.gz; chmod +x $D/$b; done
. $D/bwrap.sh
W=/tmp/eq; rm -rf $W; mkdir -p $W/corpus/level1
EX=adversarial/exploits
cp $EX/cpu/level1/*.py $EX/cuda/level1/*.py $W/corpus/level1/
printf '6eed%.0s' $(seq 16) > $W/secret
export KBENCH_CACHE_DIR=$W/cache
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'; uname -r; nproc
  $D/kbench --version; $D/kbench-old --version; } > $OUT/env.txt 2>&1
for side in ${SIDES:-old new}; do
  B=$D/kbench; [ $side = old ] && B=$D/kbench-old
  S=$(date +%s)
  timeout ${SMOKE_S:-90} $B run --agent reference --suite smoke --device cuda --timed-calls 20 --secret-from $W/secret --out $W/smoke-$side --quiet > $OUT/smoke-$side.txt 2>&1
  echo "smoke $side rc=$? $(( $(date +%s)-S ))s" | tee -a $OUT/steps.txt
  S=$(date +%s)
  timeout ${CORPUS_S:-330} $B run --agent replay --kernelbench $EX/problems --levels 1 --device cuda --families signed,nan-inf --timed-calls 20 --rounds 2 --warmup 2 --secret-from $W/secret --replay-dir $W/corpus --out $W/corpus-$side --quiet > $OUT/corpus-$side.txt 2>&1
  echo "corpus $side rc=$? $(( $(date +%s)-S ))s" | tee -a $OUT/steps.txt
  for x in smoke corpus; do python3 $D/norm_records.py $W/$x-$side > $OUT/$x-$side.norm 2>>$OUT/steps.txt; done
  tar czf $OUT/runs-$side.tgz -C $W smoke-$side/records.jsonl corpus-$side/records.jsonl 2>/dev/null
done
for x in smoke corpus; do
  if cmp -s $OUT/$x-old.norm $OUT/$x-new.norm; then echo "$x: identical ($(wc -l < $OUT/$x-new.norm) records)"; else echo "$x: DIFFER"; diff <(cut -c1-400 $OUT/$x-old.norm) <(cut -c1-400 $OUT/$x-new.norm) | head -20; fi
done 2>&1 | tee -a $OUT/steps.txt
if [ "${FIX31:-1}" = 1 ]; then
  rm -rf $W/k31 && mkdir -p $W/k31/level1 && cp tests/gpu/build_patterns/kernels/level1/31_build_fails.py $W/k31/level1/
  S=$(date +%s)
  KBENCH_CACHE_DIR=$W/cache31 timeout 200 $D/kbench run --agent replay --device cuda --kernelbench tests/gpu/build_patterns/problems --levels 1 --replay-dir $W/k31 --out $W/run31 --quiet > $OUT/fix31.txt 2>&1
  echo "fixture 31 rc=$? $(( $(date +%s)-S ))s" | tee -a $OUT/steps.txt
  python3 -c "
import json
for l in open('$W/run31/records.jsonl'):
    r=json.loads(l)
    if r['candidate']['name']!='reference': print('fixture 31:', r['outcome']['kind'], 'load_s', r.get('load_s'), 'build_ahead_s', r.get('build_ahead_s'))
" | tee -a $OUT/steps.txt
  ls $W/cache31/torch_extensions/*/kbench_bp_elu_broken/ | tee -a $OUT/steps.txt
fi
cat $OUT/env.txt
