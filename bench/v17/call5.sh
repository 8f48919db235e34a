# Call 5 (v17): the swapped plans' K splits summed inside clusters (CSPLIT). Build; unit suite; test_hopper --small
# under CSPLIT=0, SPLITS=4, SPLITS=8, TILE=swap; which cells take it (BFP8_LOG=hopper); compute-sanitizer memcheck and
# racecheck on test_hopper --small; A/B against BFP8_HOPPER_CSPLIT=0 (same build) at M = 1, 8, clean and dirty,
# twice each; the model step at batch 1.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all $(ls tests/test_*.c | sed 's|tests/|build/tests/|; s|\.c$||') > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1
export BFP8_REQUIRE_CUDA=1
(timeout 250 sh tests/run-unit.sh build > $OUT/unit.log 2>&1; echo "unit suite rc=$?: $(tail -1 $OUT/unit.log)"; grep -E "^FAIL" -A12 $OUT/unit.log | head -30) &
for v in BFP8_HOPPER_CSPLIT=0 BFP8_HOPPER_SPLITS=4 BFP8_HOPPER_SPLITS=8 BFP8_HOPPER_TILE=swap; do
  (env $v timeout 200 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "$v --small rc=$?: $(grep -E 'failed:|passed' $OUT/th-$v.log | head -3 | tr '\n' ' ' | cut -c1-300)") &
done
wait; echo "tests $(( $(date +%s)-S ))s"
BFP8_LOG=hopper timeout 60 build/blockfp8 bench --device cuda --backend hopper --shapes dsr1 --m 1,8 --iters 3 --warmup 1 2>&1 | grep "bfp8 hopper" | sort -u | cut -c1-170
BFP8_LOG=hopper timeout 60 build/tests/test_hopper --small 2>&1 | grep -c "summed in clusters" | sed 's/^/--small calls summed in clusters: /'
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: ' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200)"
done; echo "sanitizer $(( $(date +%s)-S ))s"
for l in clean dirty; do for r in 1 2; do
  timeout 60 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes dsr1 --m 1,8 --iters 20 --warmup 3 --l2 $l --json $OUT/cs$l-$r.json > /dev/null 2>&1 || echo "cs $l failed"
  BFP8_HOPPER_CSPLIT=0 timeout 60 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes dsr1 --m 1,8 --iters 20 --warmup 3 --l2 $l --json $OUT/rd$l-$r.json > /dev/null 2>&1 || echo "rd $l failed"
done; done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT rdclean csclean; python3 bench/ab/abv.py $OUT rddirty csdirty | head -4
for r in 1 2; do
  timeout 60 build/blockfp8 bench --model dsr1 --device cuda --batch 1 --iters 20 --json $OUT/m-cs-$r.json > /dev/null 2>&1 || echo "model cs failed"
  BFP8_HOPPER_CSPLIT=0 timeout 60 build/blockfp8 bench --model dsr1 --device cuda --batch 1 --iters 20 --json $OUT/m-rd-$r.json > /dev/null 2>&1 || echo "model rd failed"
done; python3 bench/ab/modelab.py $OUT rd cs
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c5.tgz *.log *.json && rm -f *.log *.json
