# Call 3 (v19): row slices where a swapped plan has fewer tiles than SMs (BFP8_HOPPER_SLICES=all), against the
# default plans (K splits summed in clusters or by the reduce, or no split) at M = 1 and 8: the full test_hopper
# under the knob (its DSR1 cases run slices at M = 1, 3, 8), then the A/B, clean flush, twice.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
export BFP8_REQUIRE_CUDA=1
BFP8_HOPPER_SLICES=all BFP8_LOG=hopper timeout 150 build/tests/test_hopper > $OUT/th-all.log 2>&1; echo "SLICES=all test_hopper rc=$?: $(tail -1 $OUT/th-all.log) $(( $(date +%s)-S ))s"
grep -c "slices of" $OUT/th-all.log | sed 's/^/  calls with row slices: /'
A="bench --device cuda --backend hopper --baseline cublaslt --shapes dsr1 --m 1,8 --iters 20 --warmup 3"
for r in 1 2; do
  timeout 60 build/blockfp8 $A --json $OUT/def-$r.json > /dev/null 2>&1 || echo "def bench failed"
  BFP8_HOPPER_SLICES=all timeout 60 build/blockfp8 $A --json $OUT/all-$r.json > /dev/null 2>&1 || echo "all bench failed"
done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT def all
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c3.tgz *.log *.json && rm -f *.log *.json
