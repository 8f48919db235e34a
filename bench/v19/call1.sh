# bench/v19/hopper-main.cu was main's hopper.cu, not kept in the repo: git show 61efed2:src/backends/cuda/hopper.cu > bench/v19/hopper-main.cu
# Call 1 (v19): row slices for the last wave of swapped tiles. Builds: the working tree, and main's hopper.cu
# (bench/v19/hopper-main.cu, 61efed2) for the A/B. Tests: BFP8_LOG=hopper quick run, the unit suite, --small under
# forced plans, memcheck and racecheck on --small. A/B clean flush, dsr1 M = 1, 8, 16, 64, 128: main, the tree, the
# tree with BFP8_HOPPER_SLICES=0, twice each; then dirty: cuda_generic (main / tree) and Triton on the cells that
# the slices change.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
mkdir -p /tmp/main; tar cf - --exclude=./build . | tar xf - -C /tmp/main; mkdir -p /tmp/main/build; cp -r build/deps /tmp/main/build/
touch /tmp/main/build/.deps-ok; cp bench/v19/hopper-main.cu /tmp/main/src/backends/cuda/hopper.cu
(make -j12 all $(ls tests/test_*.c | sed 's|tests/|build/tests/|; s|\.c$||') > $OUT/build.log 2>&1; echo "build rc=$?") &
(cd /tmp/main && make -j4 build/blockfp8 > $OUT/build-main.log 2>&1; echo "main build rc=$?") &
wait; echo "builds $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1 2>&1 | tail -1
cuobjdump --dump-sass build/cuda/hopper.o 2>/dev/null | grep -c QGMMA | sed 's/^/QGMMA lines in hopper.o: /'
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 90 build/tests/test_hopper --small > $OUT/th-quick.log 2>&1; rc=$?; echo "quick --small rc=$rc: $(tail -1 $OUT/th-quick.log) $(( $(date +%s)-S ))s"
grep -c "slices of" $OUT/th-quick.log | sed 's/^/  calls with row slices: /'
if [ $rc != 0 ]; then grep -E "failed|FAIL" $OUT/th-quick.log | head -5; cd $OUT && tar czf c1.tgz *.log; exit 1; fi
(timeout 240 sh tests/run-unit.sh build > $OUT/unit.log 2>&1; echo "unit suite rc=$?: $(tail -1 $OUT/unit.log)"; grep -E "^(PASS|FAIL)" $OUT/unit.log | cut -c1-100) &
for v in BFP8_HOPPER_SLICES=0 BFP8_HOPPER_TILE=swap BFP8_HOPPER_HYBRID=1 BFP8_HOPPER_EDGE_BOX=0 BFP8_HOPPER_ENTRY_STAGES=0; do
  (env $v timeout 200 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "$v --small rc=$?: $(tail -1 $OUT/th-$v.log)") &
done
wait; echo "tests $(( $(date +%s)-S ))s"
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: [0-9]' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200)"
done; echo "sanitizer $(( $(date +%s)-S ))s"
A="bench --device cuda --backend hopper --baseline cublaslt --shapes dsr1 --m 1,8,16,64,128 --iters 20 --warmup 3"
for r in 1 2; do
  timeout 60 /tmp/main/build/blockfp8 $A --json $OUT/main-$r.json > /dev/null 2>&1 || echo "main bench failed"
  timeout 60 build/blockfp8 $A --json $OUT/slices-$r.json > /dev/null 2>&1 || echo "slices bench failed"
  BFP8_HOPPER_SLICES=0 timeout 60 build/blockfp8 $A --json $OUT/off-$r.json > /dev/null 2>&1 || echo "off bench failed"
  echo "ab round $r $(( $(date +%s)-S ))s"
done
python3 bench/ab/abv.py $OUT main slices off
# The swapped path with slices at M = 32..128 on 36864x7168 (forced), against the default normal path's K split.
for r in 1 2; do BFP8_HOPPER_TILE=swap timeout 30 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes 36864x7168 --m 32,64,128 --iters 20 --warmup 3 --json $OUT/swapm-$r.json > /dev/null 2>&1; timeout 30 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --shapes 36864x7168 --m 32,64,128 --iters 20 --warmup 3 --json $OUT/normm-$r.json > /dev/null 2>&1; done
python3 bench/ab/abv.py $OUT normm swapm | tail -4
SH=36864x7168,24576x1536,32768x512
for r in 1 2; do
  timeout 60 /tmp/main/build/blockfp8 bench --device cuda --backend cuda_generic --baseline cublaslt --shapes $SH --m 1,8,16 --iters 20 --warmup 3 --l2 dirty --json $OUT/dmain-$r.json > /dev/null 2>&1 || echo "dirty main failed"
  timeout 60 build/blockfp8 bench --device cuda --backend cuda_generic --baseline cublaslt --shapes $SH --m 1,8,16 --iters 20 --warmup 3 --l2 dirty --json $OUT/dslices-$r.json > /dev/null 2>&1 || echo "dirty slices failed"
done; echo "dirty $(( $(date +%s)-S ))s"
E=$(( $(date +%s)-S )); if [ $E -lt 480 ]; then
(PYTHONUNBUFFERED=1 timeout $(( 560 - E )) python3 bench/triton_baseline.py --l2 dirty --m 1,16 --shapes $SH --json $OUT/triton-dirty.json > $OUT/triton.log 2>&1; echo "triton rc=$? $(( $(date +%s)-S ))s")
else echo "triton skipped (time)"; fi
python3 bench/ab/dirty.py $OUT/triton-dirty.json "main=$OUT/dmain-*.json" "slices=$OUT/dslices-*.json"
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c1.tgz *.log *.json && rm -f *.log *.json
