# Call 7 (v18): after review, host code only (the kernels' SASS is c10abdf's): the one-unit-per-CTA check before a
# CSPLIT launch, the occupancy query leaving a caller's pending error alone, test_cluster_fit. test_hopper --small
# under compute-sanitizer memcheck (API errors included), then the plain run's summary lines.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
export BFP8_REQUIRE_CUDA=1
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_hopper --small > $OUT/san-memcheck.log 2>&1; echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|hopper: [0-9]' $OUT/san-memcheck.log | tr '\n' ' ' | cut -c1-200)"
grep -E "clusters that fit|failed" $OUT/san-memcheck.log | head -5
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c7.tgz *.log && rm -f *.log
