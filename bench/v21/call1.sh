# Call 1 (v21): stream-K CTAs take their run by a ticket (the order they started) instead of the block index.
# Build, ptxas check, QGMMA count; the full test_hopper (now with stream-K calls on a green context of 16 SMs) with
# the plans logged; the GPU unit suite; test_hopper --small under STREAMK=0 and =all; memcheck and racecheck on
# --small, memcheck under STREAMK=all. The summary last.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all $(ls tests/test_*.c | sed 's|tests/|build/tests/|; s|\.c$||') > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
sh tests/ptxas-check.sh build/cuda 1 2>&1 | tail -1
cuobjdump --dump-sass build/cuda/hopper.o 2>/dev/null | grep -c QGMMA | sed 's/^/QGMMA lines in hopper.o: /'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 200 build/tests/test_hopper > $OUT/th.log 2>&1; echo "test_hopper rc=$?: $(tail -1 $OUT/th.log) (stream-K calls $(grep -c stream-K $OUT/th.log)) $(( $(date +%s)-S ))s"
grep -E "SM partition|CHECK|failed|giving up" $OUT/th.log | head -8
(timeout 240 sh tests/run-unit.sh build > $OUT/unit.log 2>&1; echo "unit suite rc=$?: $(tail -1 $OUT/unit.log)"; grep -E "^(PASS|FAIL)" $OUT/unit.log | cut -c1-100) &
for v in BFP8_HOPPER_STREAMK=0 BFP8_HOPPER_STREAMK=all; do
  (env $v timeout 200 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "$v --small rc=$?: $(tail -1 $OUT/th-$v.log)") &
done
wait; echo "tests $(( $(date +%s)-S ))s"
for tool in memcheck racecheck; do
  timeout 130 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: [0-9]' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200) $(( $(date +%s)-S ))s"
done
BFP8_HOPPER_STREAMK=all timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-memcheck-all.log 2>&1; echo "memcheck STREAMK=all rc=$?: $(grep -E 'ERROR SUMMARY|hopper: [0-9]' $OUT/san-memcheck-all.log | tr '\n' ' ' | cut -c1-200) $(( $(date +%s)-S ))s"
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c1.tgz *.log && rm -f *.log
