# Call 5 (v20): the final tree. Stream-K's kernels are call 4's; the heuristic now takes it only with more tiles than
# SMs and a nearly empty last wave (M=4096 2112x7168 in the DeepSeek-R1 table), and the small cases are ones it takes.
# The full test_hopper (its graph replay now of a stream-K linear call), memcheck on --small, and the A/B of the one
# cell that changed against stream-K off, beside a control, twice.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 170 build/tests/test_hopper > $OUT/th.log 2>&1; echo "test_hopper rc=$?: $(tail -1 $OUT/th.log) (stream-K calls $(grep -c stream-K $OUT/th.log)) $(( $(date +%s)-S ))s"
grep -E "CHECK" $OUT/th.log | head -5
A="bench --device cuda --backend hopper --baseline cublaslt --shapes 2112x7168,7168x2048 --m 4096 --iters 20 --warmup 3"
for r in 1 2; do
  timeout 40 build/blockfp8 $A --json $OUT/def-$r.json > /dev/null 2>&1 || echo "def bench failed"
  BFP8_HOPPER_STREAMK=0 timeout 40 build/blockfp8 $A --json $OUT/off-$r.json > /dev/null 2>&1 || echo "off bench failed"
done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT off def
timeout 110 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-memcheck.log 2>&1
echo "memcheck rc=$?: $(grep -E "ERROR SUMMARY" $OUT/san-memcheck.log | tail -1) $(tail -1 $OUT/san-memcheck.log | cut -c1-60) $(( $(date +%s)-S ))s"
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c5.tgz *.log *.json && rm -f *.log *.json
