# Call 6 (v19): the final tree after call 5's rule was narrowed again (host code and one new small case only):
# test_hopper --small, memcheck and racecheck on --small.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 150 build/tests/test_hopper --small > $OUT/th.log 2>&1; echo "--small rc=$?: $(tail -1 $OUT/th.log), $(grep -c 'row slices' $OUT/th.log) calls with row slices"
grep "N=7000" $OUT/th.log | head -2
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-$tool.log 2>&1; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hopper: [0-9]' $OUT/san-$tool.log | tr '\n' ' ' | cut -c1-200)"
done
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c6.tgz *.log && rm -f *.log
