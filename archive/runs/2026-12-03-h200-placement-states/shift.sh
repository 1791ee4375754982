set -u
D=devrun
for s in 1 2; do timeout 120 python3 $D/shift.py $D/kernelbench/level2/77_*.py 2>&1 | grep -v Warn; echo "-- process $s done"; done > $OUT/shift.txt
cat $OUT/shift.txt
