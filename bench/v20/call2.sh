# Call 2 (v20): stream-K on the normal path. The full test_hopper (stream-K small cases, a linear call and a graph
# replay with it), --small under BFP8_HOPPER_STREAMK=all and =0, memcheck and racecheck on --small (default and
# =all); then the A/B at M = 64..4096, clean flush, twice: the heuristic (def), stream-K nowhere (off), everywhere
# it applies (all).
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 200 build/tests/test_hopper > $OUT/th.log 2>&1; echo "test_hopper rc=$?: $(tail -1 $OUT/th.log) $(( $(date +%s)-S ))s"
grep -c "stream-K" $OUT/th.log | sed 's/^/  calls with stream-K: /'
grep -E "CHECK|failed" $OUT/th.log | grep -v " 0 failed" | head -5
for v in all 0; do
  BFP8_HOPPER_STREAMK=$v BFP8_LOG=hopper timeout 120 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "STREAMK=$v --small rc=$?: $(tail -1 $OUT/th-$v.log) (stream-K calls $(grep -c stream-K $OUT/th-$v.log)) $(( $(date +%s)-S ))s"
done
for tool in memcheck racecheck; do
  for v in def all; do
    if [ $v = def ]; then E=; else E="BFP8_HOPPER_STREAMK=$v"; fi
    env $E timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool-$v.log 2>&1
    echo "$tool $v rc=$?: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/san-$tool-$v.log | tail -1) $(tail -1 $OUT/san-$tool-$v.log | cut -c1-60) $(( $(date +%s)-S ))s"
  done
done
A="bench --device cuda --backend hopper --baseline cublaslt --shapes dsr1 --m 64,128,512,4096 --iters 20 --warmup 3"
for r in 1 2; do
  for v in def off all; do
    case $v in def) E=;; off) E=BFP8_HOPPER_STREAMK=0;; all) E=BFP8_HOPPER_STREAMK=all;; esac
    env $E timeout 100 build/blockfp8 $A --json $OUT/$v-$r.json > /dev/null 2>&1 || echo "$v bench failed"
  done
done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT off def all
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c2.tgz *.log *.json && rm -f *.log *.json
