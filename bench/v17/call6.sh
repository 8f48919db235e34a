# Call 6 (v17): CSPLIT with cluster barriers (barrier.cluster arrive.release / wait.acquire) instead of remote
# mbarrier arrivals. A quick test first (stops the call if it fails or hangs); then the unit suite, --small under
# CSPLIT=0 / SPLITS=4 / SPLITS=8, memcheck and racecheck on --small, A/B against CSPLIT=0 on the cells it takes,
# the model step at batch 1 three times each.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all $(ls tests/test_*.c | sed 's|tests/|build/tests/|; s|\.c$||') > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1
export BFP8_REQUIRE_CUDA=1
timeout 90 build/tests/test_hopper --small > $OUT/th-quick.log 2>&1; rc=$?; echo "quick --small rc=$rc: $(tail -1 $OUT/th-quick.log) $(( $(date +%s)-S ))s"
if [ $rc != 0 ]; then grep -E "failed|FAIL" $OUT/th-quick.log | head -5; cd $OUT && tar czf c6.tgz *.log; exit 1; fi
(timeout 150 sh tests/run-unit.sh build > $OUT/unit.log 2>&1; echo "unit suite rc=$?: $(tail -1 $OUT/unit.log)"; grep -E "^(PASS|FAIL)" $OUT/unit.log | cut -c1-100) &
for v in BFP8_HOPPER_CSPLIT=0 BFP8_HOPPER_SPLITS=4 BFP8_HOPPER_SPLITS=8; do
  (env $v timeout 120 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "$v --small rc=$?: $(tail -1 $OUT/th-$v.log)") &
done
wait; echo "tests $(( $(date +%s)-S ))s"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: [0-9]' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200)"
done; echo "sanitizer $(( $(date +%s)-S ))s"
SH=2112x7168,4096x7168,7168x16384,7168x18432
for l in clean dirty; do for r in 1 2; do
  timeout 40 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes $SH --m 1,8 --iters 20 --warmup 3 --l2 $l --json $OUT/cs$l-$r.json > /dev/null 2>&1 || echo "cs $l failed"
  BFP8_HOPPER_CSPLIT=0 timeout 40 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes $SH --m 1,8 --iters 20 --warmup 3 --l2 $l --json $OUT/rd$l-$r.json > /dev/null 2>&1 || echo "rd $l failed"
done; done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT rdclean csclean 2>/dev/null; python3 bench/ab/abv.py $OUT rddirty csdirty 2>/dev/null
for r in 1 2 3; do
  timeout 40 build/blockfp8 bench --model dsr1 --device cuda --batch 1 --iters 20 --json $OUT/m-cs-$r.json > /dev/null 2>&1 || echo "model cs failed"
  BFP8_HOPPER_CSPLIT=0 timeout 40 build/blockfp8 bench --model dsr1 --device cuda --batch 1 --iters 20 --json $OUT/m-rd-$r.json > /dev/null 2>&1 || echo "model rd failed"
done; python3 bench/ab/modelab.py $OUT rd cs | grep -E "layer|o_proj|mlp.down|shared.gate|step"
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c6.tgz *.log *.json && rm -f *.log *.json
