# Call 5 (v19): with fewer tiles than SMs, 64-row slices wherever they use as many CTAs as the K split and K has
# >= 32 blocks (4096x7168 at M <= 8 joins 7168x16384 and 7168x18432). Host-only change (plan_tiling). The full
# test_hopper and --small under SLICES=0, memcheck on --small; A/B against SLICES=0 at M = 1 and 8, twice.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
export BFP8_REQUIRE_CUDA=1
(BFP8_LOG=hopper timeout 150 build/tests/test_hopper > $OUT/th.log 2>&1; echo "test_hopper rc=$?: $(tail -1 $OUT/th.log), $(grep -c 'row slices' $OUT/th.log) calls with row slices") &
(BFP8_HOPPER_SLICES=0 timeout 150 build/tests/test_hopper --small > $OUT/th-off.log 2>&1; echo "SLICES=0 --small rc=$?: $(tail -1 $OUT/th-off.log)") &
wait
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-memcheck.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|hopper: [0-9]' $OUT/san-memcheck.log | tr '\n' ' ' | cut -c1-200)"
echo "tests $(( $(date +%s)-S ))s"
A="bench --device cuda --backend hopper --baseline cublaslt --shapes 4096x7168,7168x16384,7168x18432,2112x7168,7168x2048 --m 1,8 --iters 20 --warmup 3"
for r in 1 2; do
  timeout 60 build/blockfp8 $A --json $OUT/new-$r.json > /dev/null 2>&1 || echo "new bench failed"
  BFP8_HOPPER_SLICES=0 timeout 60 build/blockfp8 $A --json $OUT/off-$r.json > /dev/null 2>&1 || echo "off bench failed"
done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT off new
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c5.tgz *.log *.json && rm -f *.log *.json
