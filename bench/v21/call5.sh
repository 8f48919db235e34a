# Call 5 (v21): the review's test fixes (the partition test checks its plans and its stream's green context, syncs
# the uploads before a call on a non-blocking stream; host check of the units in launch_planned). The kernels' SASS
# is call 4's (nvdisasm). The full test_hopper with the plans logged.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
export BFP8_REQUIRE_CUDA=1
BFP8_LOG=hopper timeout 240 build/tests/test_hopper > $OUT/th.log 2>&1; echo "test_hopper rc=$?: $(tail -1 $OUT/th.log) (stream-K calls $(grep -c stream-K $OUT/th.log)) $(( $(date +%s)-S ))s"
grep -E "SM partition|CHECK|failed|giving up" $OUT/th.log | head -8
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c5.tgz *.log && rm -f *.log
