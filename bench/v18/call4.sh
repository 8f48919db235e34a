# Call 4 (v18): the cluster sum with 128-wide weight tiles on the normal path (a third CSPLIT kernel), reached with
# BFP8_HOPPER_TILE=128: --small under it (BFP8_LOG=hopper), memcheck and racecheck on it; then, at M = 16, 64, 128 on
# five shapes, the default plans against 128-wide tiles with 1-6 splits (summed in clusters where they fit).
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1 2>&1 | tail -2
export BFP8_REQUIRE_CUDA=1
BFP8_HOPPER_TILE=128 BFP8_LOG=hopper timeout 90 build/tests/test_hopper --small > $OUT/th-t128.log 2>&1; rc=$?; echo "TILE=128 --small rc=$rc: $(tail -1 $OUT/th-t128.log) $(( $(date +%s)-S ))s"
grep "summed in clusters" $OUT/th-t128.log | grep "BQ=128" | sed 's/(K blocks per split [0-9]*) //; s/(whole 0) //' | sort -u | cut -c1-140
if [ $rc != 0 ]; then grep -E "failed|FAIL" $OUT/th-t128.log | head -5; cd $OUT && tar czf c4.tgz *.log; exit 1; fi
(BFP8_HOPPER_TILE=128 BFP8_HOPPER_SPLITS=3 timeout 90 build/tests/test_hopper --small > $OUT/th-t128s3.log 2>&1; echo "TILE=128 SPLITS=3 --small rc=$?: $(tail -1 $OUT/th-t128s3.log)") &
for tool in memcheck racecheck; do
  BFP8_HOPPER_TILE=128 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "TILE=128 $tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: [0-9]' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200)"
done; wait; echo "sanitizer $(( $(date +%s)-S ))s"
SH=2112x7168,4096x7168,7168x2048,7168x16384,7168x18432
B="bench --device cuda --backend hopper --shapes $SH --m 16,64,128 --iters 20 --warmup 3"
for r in 1 2; do
  timeout 40 build/blockfp8 $B --json $OUT/defS0-$r.json > /dev/null 2>&1 || echo "default failed"
  BFP8_HOPPER_TILE=128 timeout 40 build/blockfp8 $B --json $OUT/t128S0-$r.json > /dev/null 2>&1 || echo "t128 failed"
done
for s in 1 2 3 4 6; do
  BFP8_HOPPER_TILE=128 BFP8_HOPPER_SPLITS=$s timeout 40 build/blockfp8 $B --json $OUT/t128S$s-1.json > /dev/null 2>&1 || echo "t128 S=$s failed"
done; echo "sweep $(( $(date +%s)-S ))s"
echo "default (S=0 column) and TILE=128 (model's split count in S=0, forced counts after):"
python3 bench/ab/sweep.py $OUT def 0; python3 bench/ab/sweep.py $OUT t128 0 1 2 3 4 6
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c4.tgz *.log *.json && rm -f *.log *.json
