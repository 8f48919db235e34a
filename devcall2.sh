export PATH=$PATH:/usr/local/cuda/bin
export CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
mkdir -p build && touch build/.deps-ok
T0=$(date +%s)
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s)-T0 ))s"
for v in swap16 swap32; do echo "== $v"; BFP8_HOPPER_TILE=$v timeout 200 build/tests/test_hopper | tail -1; done
echo "tests $(( $(date +%s)-T0 ))s"
for l2 in clean dirty; do for v in default swap32 swap16; do
  env $( [ $v != default ] && echo BFP8_HOPPER_TILE=$v ) timeout 100 build/blockfp8 bench --device cuda --backend hopper --baseline cublaslt --m 64 --iters 20 --warmup 3 --l2 $l2 --json $OUT/m64_${l2}_$v.json > /dev/null 2>&1
done; done
echo "bench $(( $(date +%s)-T0 ))s"
