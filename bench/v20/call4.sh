# Call 4 (v20): stream-K with each CTA's pieces run from its second tile on and the run's first tile last (the CTAs
# step through K together), the tail summing. --small (default), the A/B at M = 64..4096 (clean flush, twice: the
# heuristic def, nowhere off, everywhere all), then --small, memcheck and racecheck under BFP8_HOPPER_STREAMK=all.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 100 build/tests/test_hopper --small > $OUT/th.log 2>&1; echo "--small rc=$?: $(tail -1 $OUT/th.log) (stream-K calls $(grep -c stream-K $OUT/th.log)) $(( $(date +%s)-S ))s"
grep -E "CHECK" $OUT/th.log | head -5
A="bench --device cuda --backend hopper --baseline cublaslt --shapes dsr1 --m 64,128,512,4096 --iters 20 --warmup 3"
for r in 1 2; do
  for v in def off all; do
    case $v in def) E=;; off) E=BFP8_HOPPER_STREAMK=0;; all) E=BFP8_HOPPER_STREAMK=all;; esac
    env $E timeout 100 build/blockfp8 $A --json $OUT/$v-$r.json > /dev/null 2>&1 || echo "$v bench failed"
  done
done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT off def all
export BFP8_HOPPER_STREAMK=all
BFP8_LOG=hopper timeout 100 build/tests/test_hopper --small > $OUT/th-all.log 2>&1; echo "STREAMK=all --small rc=$?: $(tail -1 $OUT/th-all.log) (stream-K calls $(grep -c stream-K $OUT/th-all.log)) $(( $(date +%s)-S ))s"
grep -E "CHECK" $OUT/th-all.log | head -5
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1
  echo "STREAMK=all $tool rc=$?: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/san-$tool.log | tail -1) $(tail -1 $OUT/san-$tool.log | cut -c1-60) $(( $(date +%s)-S ))s"
done
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c4.tgz *.log *.json && rm -f *.log *.json
