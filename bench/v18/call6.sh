# Call 6 (v18): the model step (bfp8_linear: quantization, then the GEMM as its programmatic dependent) with the
# cluster sum (cs) and without it (rd, BFP8_HOPPER_CSPLIT=0), four rounds alternating, batch 1, 16, 128.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
for r in 1 2 3 4; do
  timeout 40 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --iters 20 --json $OUT/m-cs-$r.json > /dev/null 2>&1 || echo "model cs failed"
  BFP8_HOPPER_CSPLIT=0 timeout 40 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --iters 20 --json $OUT/m-rd-$r.json > /dev/null 2>&1 || echo "model rd failed"
done; python3 bench/ab/modelab.py $OUT rd cs
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c6.tgz *.json && rm -f *.log *.json
