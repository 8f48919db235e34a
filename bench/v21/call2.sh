# Call 2 (v21): the final table on the tree of call 1 (every CUDA backend against cuBLASLt, clean flush), the
# stream-K cell against STREAMK=0 beside a control, twice, and the DeepSeek-R1 model step.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
timeout 240 build/blockfp8 bench --device cuda --backend all --baseline cublaslt --shapes dsr1 --m 1,16,64,128,512,4096 --iters 20 --warmup 3 --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-S ))s"
A="bench --device cuda --backend hopper --baseline cublaslt --shapes 2112x7168,7168x2048 --m 4096 --iters 20 --warmup 3"
for r in 1 2; do
  timeout 40 build/blockfp8 $A --json $OUT/def-$r.json > /dev/null 2>&1 || echo "def bench failed"
  BFP8_HOPPER_STREAMK=0 timeout 40 build/blockfp8 $A --json $OUT/off-$r.json > /dev/null 2>&1 || echo "off bench failed"
done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT off def
timeout 90 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --compare --json $OUT/model.json > $OUT/model.log 2>&1; echo "model rc=$? $(( $(date +%s)-S ))s"
grep -E "step|batch" $OUT/model.log | head -8
python3 bench/ab/table.py $OUT/bench.json
grep '^# ' $OUT/bench.log | grep -E 'geomean|summary'
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c2.tgz *.log *.json && rm -f *.log *.json
