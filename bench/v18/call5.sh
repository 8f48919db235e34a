# Call 5 (v18): the committed kernels (c10abdf's hopper.cu): tests (BFP8_LOG=hopper quick run), the unit suite,
# --small with CSPLIT=0, memcheck and racecheck on --small; the full table, clean flush, all backends; cuda_generic
# with the dirty flush for the anchor comparison; the model step; Triton in the same call (dirty) on the cells where
# issue 4 missed, if the time allows.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all $(ls tests/test_*.c | sed 's|tests/|build/tests/|; s|\.c$||') > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1 2>&1 | tail -1
cuobjdump --dump-sass build/cuda/hopper.o 2>/dev/null | grep -c QGMMA | sed 's/^/QGMMA lines in hopper.o: /'
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 90 build/tests/test_hopper --small > $OUT/th-quick.log 2>&1; rc=$?; echo "quick --small rc=$rc: $(tail -1 $OUT/th-quick.log) $(( $(date +%s)-S ))s"
grep -m1 "clusters that fit" $OUT/th-quick.log
if [ $rc != 0 ]; then grep -E "failed|FAIL" $OUT/th-quick.log | head -5; cd $OUT && tar czf c5.tgz *.log; exit 1; fi
(timeout 200 sh tests/run-unit.sh build > $OUT/unit.log 2>&1; echo "unit suite rc=$?: $(tail -1 $OUT/unit.log)"; grep -E "^(PASS|FAIL)" $OUT/unit.log | cut -c1-100) &
(BFP8_HOPPER_CSPLIT=0 timeout 150 build/tests/test_hopper --small > $OUT/th-cs0.log 2>&1; echo "CSPLIT=0 --small rc=$?: $(tail -1 $OUT/th-cs0.log)") &
wait; echo "tests $(( $(date +%s)-S ))s"
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: [0-9]' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200)"
done; echo "sanitizer $(( $(date +%s)-S ))s"
timeout 200 build/blockfp8 bench --device cuda --backend all --baseline cublaslt --shapes dsr1 --m 1,16,64,128,512,4096 --iters 20 --warmup 3 --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-S ))s"
timeout 100 build/blockfp8 bench --device cuda --backend cuda_generic --baseline cublaslt --shapes dsr1 --m 1,16,64,128,512,4096 --iters 20 --warmup 3 --l2 dirty --json $OUT/bench-dirty.json > $OUT/bench-dirty.log 2>&1; echo "dirty rc=$? $(( $(date +%s)-S ))s"
timeout 60 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --compare --json $OUT/model.json > $OUT/model.log 2>&1; echo "model rc=$? $(( $(date +%s)-S ))s"
python3 bench/ab/table.py $OUT/bench.json
grep -E "step|batch" $OUT/model.log | head -8
E=$(( $(date +%s)-S )); if [ $E -lt 420 ]; then
SH=32768x512,36864x7168
(PYTHONUNBUFFERED=1 timeout $(( 540 - E )) python3 bench/triton_baseline.py --l2 dirty --m 1,16 --shapes $SH --json $OUT/triton-dirty.json > $OUT/triton.log 2>&1; echo "triton rc=$? $(( $(date +%s)-S ))s")
python3 bench/ab/dirty.py $OUT/triton-dirty.json "final=$OUT/bench-dirty.json"
else echo "triton skipped (time)"; fi
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c5.tgz *.log *.json && rm -f *.log *.json
