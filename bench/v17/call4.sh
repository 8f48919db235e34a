# Call 4 (v17): the full table on main's kernels (unchanged since 444c14a), clean flush, all backends; cuda_generic with
# the dirty flush for the anchor comparison; the model step once.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
timeout 200 build/blockfp8 bench --device cuda --backend all --baseline cublaslt --shapes dsr1 --m 1,16,64,128,512,4096 --iters 20 --warmup 3 --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-S ))s"
timeout 120 build/blockfp8 bench --device cuda --backend cuda_generic --baseline cublaslt --shapes dsr1 --m 1,16,64,128,512,4096 --iters 20 --warmup 3 --l2 dirty --json $OUT/bench-dirty.json > $OUT/bench-dirty.log 2>&1; echo "dirty rc=$? $(( $(date +%s)-S ))s"
timeout 90 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --compare --json $OUT/model.json > $OUT/model.log 2>&1; echo "model rc=$? $(( $(date +%s)-S ))s"
python3 bench/ab/table.py $OUT/bench.json
grep -E "step|batch" $OUT/model.log | head -8
echo "done $(( $(date +%s)-S ))s"
