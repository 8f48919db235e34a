# bench/v19/hopper-main.cu was main's hopper.cu, not kept in the repo: git show 61efed2:src/backends/cuda/hopper.cu > bench/v19/hopper-main.cu
# Call 2 (v19): the row slices first (units [0, slices) are the slices, then the whole tiles), so that their
# latency-bound stream overlaps the whole tiles of the CTAs without a slice. Builds: the tree and main's hopper.cu.
# Tests: quick --small, --small with SLICES=0, memcheck on --small. A/B clean on the cells the slices change and
# three controls, twice; dirty cuda_generic main / tree and Triton on 36864x7168.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
mkdir -p /tmp/main; tar cf - --exclude=./build . | tar xf - -C /tmp/main; mkdir -p /tmp/main/build; cp -r build/deps /tmp/main/build/
touch /tmp/main/build/.deps-ok; cp bench/v19/hopper-main.cu /tmp/main/src/backends/cuda/hopper.cu
(make -j12 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$?") &
(cd /tmp/main && make -j4 build/blockfp8 > $OUT/build-main.log 2>&1; echo "main build rc=$?") &
wait; echo "builds $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1 2>&1 | tail -1
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 90 build/tests/test_hopper --small > $OUT/th-quick.log 2>&1; rc=$?; echo "quick --small rc=$rc: $(tail -1 $OUT/th-quick.log) $(( $(date +%s)-S ))s"
grep -c "slices of" $OUT/th-quick.log | sed 's/^/  calls with row slices: /'
if [ $rc != 0 ]; then grep -E "failed|FAIL" $OUT/th-quick.log | head -5; cd $OUT && tar czf c2.tgz *.log; exit 1; fi
(BFP8_HOPPER_SLICES=0 timeout 150 build/tests/test_hopper --small > $OUT/th-off.log 2>&1; echo "SLICES=0 --small rc=$?: $(tail -1 $OUT/th-off.log)") &
(timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-memcheck.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|hopper: [0-9]' $OUT/san-memcheck.log | tr '\n' ' ' | cut -c1-200)") &
wait; echo "tests $(( $(date +%s)-S ))s"
A="bench --device cuda --backend hopper --baseline cublaslt --shapes 36864x7168,24576x1536,32768x512,2112x7168,7168x16384 --m 1,8,16 --iters 20 --warmup 3"
for r in 1 2; do
  timeout 60 /tmp/main/build/blockfp8 $A --json $OUT/main-$r.json > /dev/null 2>&1 || echo "main bench failed"
  timeout 60 build/blockfp8 $A --json $OUT/first-$r.json > /dev/null 2>&1 || echo "first bench failed"
  BFP8_HOPPER_SLICES=0 timeout 60 build/blockfp8 $A --json $OUT/off-$r.json > /dev/null 2>&1 || echo "off bench failed"
  echo "ab round $r $(( $(date +%s)-S ))s"
done
python3 bench/ab/abv.py $OUT main first off
SH=36864x7168,24576x1536
for r in 1 2; do
  timeout 60 /tmp/main/build/blockfp8 bench --device cuda --backend cuda_generic --baseline cublaslt --shapes $SH --m 1,8,16 --iters 20 --warmup 3 --l2 dirty --json $OUT/dmain-$r.json > /dev/null 2>&1 || echo "dirty main failed"
  timeout 60 build/blockfp8 bench --device cuda --backend cuda_generic --baseline cublaslt --shapes $SH --m 1,8,16 --iters 20 --warmup 3 --l2 dirty --json $OUT/dfirst-$r.json > /dev/null 2>&1 || echo "dirty first failed"
done; echo "dirty $(( $(date +%s)-S ))s"
(PYTHONUNBUFFERED=1 timeout 120 python3 bench/triton_baseline.py --l2 dirty --m 1,16 --shapes 36864x7168 --json $OUT/triton-dirty.json > $OUT/triton.log 2>&1; echo "triton rc=$? $(( $(date +%s)-S ))s")
python3 bench/ab/dirty.py $OUT/triton-dirty.json "main=$OUT/dmain-*.json" "first=$OUT/dfirst-*.json"
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c2.tgz *.log *.json && rm -f *.log *.json
