# Call 3 (v18): the kernel as committed, with the split model recalibrated (3.2 TB/s for the chip, v18's sweep).
# Tests (BFP8_LOG=hopper quick run: the cluster fit and the plans), the unit suite, --small under three plans,
# memcheck and racecheck on --small; then the A/B against CSPLIT=0 on the split cells, twice.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all $(ls tests/test_*.c | sed 's|tests/|build/tests/|; s|\.c$||') > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1 2>&1 | tail -2
cuobjdump --dump-sass build/cuda/hopper.o 2>/dev/null | grep -c QGMMA | sed 's/^/QGMMA lines in hopper.o: /'
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 90 build/tests/test_hopper --small > $OUT/th-quick.log 2>&1; rc=$?; echo "quick --small rc=$rc: $(tail -1 $OUT/th-quick.log) $(( $(date +%s)-S ))s"
grep -m1 "clusters that fit" $OUT/th-quick.log
grep -c "summed in clusters" $OUT/th-quick.log | sed 's/^/  calls summed in clusters: /'
if [ $rc != 0 ]; then grep -E "failed|FAIL" $OUT/th-quick.log | head -5; cd $OUT && tar czf c3.tgz *.log; exit 1; fi
(timeout 200 sh tests/run-unit.sh build > $OUT/unit.log 2>&1; echo "unit suite rc=$?: $(tail -1 $OUT/unit.log)"; grep -E "^(PASS|FAIL)" $OUT/unit.log | cut -c1-100) &
for v in BFP8_HOPPER_CSPLIT=0 BFP8_HOPPER_SPLITS=3 BFP8_HOPPER_SPLITS=8; do
  (env $v timeout 150 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "$v --small rc=$?: $(tail -1 $OUT/th-$v.log)") &
done
wait; echo "tests $(( $(date +%s)-S ))s"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: [0-9]' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200)"
done; echo "sanitizer $(( $(date +%s)-S ))s"
SH=2112x7168,4096x7168,7168x2048,7168x16384,7168x18432
for r in 1 2; do
  timeout 60 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes $SH --m 1,8,16,64,128 --iters 20 --warmup 3 --json $OUT/cs-$r.json > /dev/null 2>&1 || echo "cs failed"
  BFP8_HOPPER_CSPLIT=0 timeout 60 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes $SH --m 1,8,16,64,128 --iters 20 --warmup 3 --json $OUT/rd-$r.json > /dev/null 2>&1 || echo "rd failed"
done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT rd cs
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c3.tgz *.log *.json && rm -f *.log *.json
