set -u
D=devrun
for s in 1 2; do timeout 100 python3 $D/shim.py $D/kernelbench/level2/77_*.py 2>&1 | grep -v Warn; echo "-- process $s done"; done > $OUT/shim.txt
cat $OUT/shim.txt
