# Call 1 (v18): CSPLIT on the normal path (64-wide weight tiles, one P tile) and split counts chosen with the cluster
# sum in the time model (cluster sizes up to 8); the review's fixes (-0 start, no unreachable waits); v4 DSMEM loads.
# Quick test with BFP8_LOG=hopper (cluster fit, plans), the unit suite, --small under four plans, memcheck and
# racecheck on --small, the owed sanitizer runs of the two tools, A/B against CSPLIT=0, a forced-split sweep.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all gpu-tools $(ls tests/test_*.c | sed 's|tests/|build/tests/|; s|\.c$||') > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1 2>&1 | tail -3
cuobjdump --dump-sass build/cuda/hopper.o 2>/dev/null | grep -c QGMMA | sed 's/^/QGMMA lines: /'
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 90 build/tests/test_hopper --small > $OUT/th-quick.log 2>&1; rc=$?; echo "quick --small rc=$rc: $(tail -1 $OUT/th-quick.log) $(( $(date +%s)-S ))s"
grep -m1 "clusters that fit" $OUT/th-quick.log
grep -E "summed in clusters" $OUT/th-quick.log | sed 's/(K blocks per split [0-9]*) //' | sort | uniq -c | cut -c1-160
if [ $rc != 0 ]; then grep -E "failed|FAIL" $OUT/th-quick.log | head -5; cd $OUT && tar czf c1.tgz *.log; exit 1; fi
(BFP8_LOG=hopper timeout 200 build/tests/test_hopper > $OUT/th-full.log 2>&1; echo "full test_hopper rc=$?: $(grep -v '^\[bfp8' $OUT/th-full.log | tail -1)"; grep "summed in clusters" $OUT/th-full.log | grep -E "N=(2112|4096|7168) K=(7168|2048|16384|18432):" | sed 's/(K blocks per split [0-9]*) //' | sort -u | head -20 | cut -c1-150) &
(timeout 200 sh tests/run-unit.sh build > $OUT/unit.log 2>&1; echo "unit suite rc=$?: $(tail -1 $OUT/unit.log)"; grep -E "^(PASS|FAIL)" $OUT/unit.log | cut -c1-100) &
for v in BFP8_HOPPER_CSPLIT=0 BFP8_HOPPER_SPLITS=3 BFP8_HOPPER_SPLITS=5 BFP8_HOPPER_SPLITS=8; do
  (env $v timeout 150 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "$v --small rc=$?: $(tail -1 $OUT/th-$v.log)") &
done
wait; echo "tests $(( $(date +%s)-S ))s"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: [0-9]' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200)"
done
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 build/launch_floor > $OUT/san-lf.log 2>&1; echo "launch_floor memcheck rc=$?: $(grep 'ERROR SUMMARY' $OUT/san-lf.log)"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 build/first_load > $OUT/san-fl.log 2>&1; echo "first_load racecheck rc=$?: $(grep 'RACECHECK SUMMARY' $OUT/san-fl.log)"
echo "sanitizer $(( $(date +%s)-S ))s"
SH=2112x7168,4096x7168,7168x2048,7168x16384,7168x18432
for r in 1 2; do
  timeout 60 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes $SH --m 1,8,16,64,128 --iters 20 --warmup 3 --json $OUT/cs-$r.json > /dev/null 2>&1 || echo "cs failed"
  BFP8_HOPPER_CSPLIT=0 timeout 60 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes $SH --m 1,8,16,64,128 --iters 20 --warmup 3 --json $OUT/rd-$r.json > /dev/null 2>&1 || echo "rd failed"
done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT rd cs
for s in 1 2 3 4 5 6 7 8; do
  BFP8_HOPPER_SPLITS=$s timeout 40 build/blockfp8 bench --device cuda --backend hopper --shapes 2112x7168,4096x7168,7168x2048 --m 1,16,128 --iters 20 --warmup 3 --json $OUT/swS$s-1.json > /dev/null 2>&1 || echo "sweep $s failed"
done; echo "sweep $(( $(date +%s)-S ))s"
python3 bench/ab/sweep.py $OUT sw 1 2 3 4 5 6 7 8
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c1.tgz *.log *.json && rm -f *.log *.json
