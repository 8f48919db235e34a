# Call 2 (v18): the cluster sum's loads issued together per peer, its second arrival before the stores, the
# occupancy query with a whole number of clusters. Tests (BFP8_LOG=hopper: the cluster fit, the plans), the unit
# suite, --small under five plans, memcheck and racecheck on --small; then forced-split sweeps with the cluster sum
# and with the reduce kernel (CSPLIT=0) on the split cells, for the time model's constants.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all $(ls tests/test_*.c | sed 's|tests/|build/tests/|; s|\.c$||') > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1 2>&1 | tail -2
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 90 build/tests/test_hopper --small > $OUT/th-quick.log 2>&1; rc=$?; echo "quick --small rc=$rc: $(tail -1 $OUT/th-quick.log) $(( $(date +%s)-S ))s"
grep -m1 "clusters that fit" $OUT/th-quick.log
grep -E "summed in clusters" $OUT/th-quick.log | sed 's/(K blocks per split [0-9]*) //; s/(whole 0) //' | sort | uniq -c | cut -c1-150
if [ $rc != 0 ]; then grep -E "failed|FAIL" $OUT/th-quick.log | head -5; cd $OUT && tar czf c2.tgz *.log; exit 1; fi
(BFP8_LOG=hopper timeout 200 build/tests/test_hopper > $OUT/th-full.log 2>&1; echo "full test_hopper rc=$?: $(grep -v '^\[bfp8' $OUT/th-full.log | tail -1)"; grep -c "summed in clusters" $OUT/th-full.log | sed 's/^/  calls summed in clusters: /') &
(timeout 200 sh tests/run-unit.sh build > $OUT/unit.log 2>&1; echo "unit suite rc=$?: $(tail -1 $OUT/unit.log)"; grep -E "^FAIL" $OUT/unit.log | cut -c1-100) &
for v in BFP8_HOPPER_CSPLIT=0 BFP8_HOPPER_SPLITS=3 BFP8_HOPPER_SPLITS=5 BFP8_HOPPER_SPLITS=7 BFP8_HOPPER_SPLITS=8; do
  (env $v timeout 150 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "$v --small rc=$?: $(tail -1 $OUT/th-$v.log)") &
done
wait; echo "tests $(( $(date +%s)-S ))s"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: [0-9]' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200)"
done; echo "sanitizer $(( $(date +%s)-S ))s"
SH=2112x7168,4096x7168,7168x2048
for s in 1 2 3 4 5 6 7 8; do
  BFP8_HOPPER_SPLITS=$s timeout 40 build/blockfp8 bench --device cuda --backend hopper --shapes $SH --m 1,8,16,64,128 --iters 20 --warmup 3 --json $OUT/csS$s-1.json > /dev/null 2>&1 || echo "cs sweep $s failed"
  [ $s -gt 1 ] && { BFP8_HOPPER_CSPLIT=0 BFP8_HOPPER_SPLITS=$s timeout 40 build/blockfp8 bench --device cuda --backend hopper --shapes $SH --m 1,8,16,64,128 --iters 20 --warmup 3 --json $OUT/rdS$s-1.json > /dev/null 2>&1 || echo "rd sweep $s failed"; }
done; echo "sweep $(( $(date +%s)-S ))s"
echo "cluster sum (where the clusters fit; see the fit line):"; python3 bench/ab/sweep.py $OUT cs 1 2 3 4 5 6 7 8
echo "reduce:"; python3 bench/ab/sweep.py $OUT rd 2 3 4 5 6 7 8
timeout 60 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes $SH --m 1,8,16,64,128 --iters 20 --warmup 3 --json $OUT/def-1.json > /dev/null 2>&1
ls $OUT/def-1.json >/dev/null && python3 -c "
import json; [print('  default M=%d %dx%d %.2f' % (r['m'], r['n'], r['k'], r['median_us'])) for r in json.load(open('$OUT/def-1.json')) if r['backend']=='hopper']"
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c2.tgz *.log *.json && rm -f *.log *.json
