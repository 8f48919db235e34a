# Call 1 (v17): separate weight and activation rings (M <= 128 normal path). Builds: default (A=5/4 act stages),
# A=3, A=4; the owed standalone tools. Correctness: test_hopper full, --small under RINGS=0 / ENTRY_STAGES=0,12 /
# TILE=128 / TILE=128+TMA_STORE=0, test_linear. A/B clean flush M=16,64,128 (single = RINGS=0), the model step.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
for v in a3 a4; do mkdir -p /tmp/$v; tar cf - --exclude=./build . | tar xf - -C /tmp/$v; mkdir -p /tmp/$v/build; cp -r build/deps /tmp/$v/build/; touch /tmp/$v/build/.deps-ok; done
(make -j8 all build/tests/test_hopper build/tests/test_linear build/tests/test_cuda > $OUT/build.log 2>&1; echo "build rc=$?"; make gpu-tools > $OUT/tools-build.log 2>&1; echo "gpu-tools rc=$?") &
for a in 3 4; do (cd /tmp/a$a && make -j4 NVCC_GENCODE="-gencode=arch=compute_90a,code=sm_90a -DBFP8_HOPPER_ACT_STAGES=$a" build/blockfp8 > $OUT/build-a$a.log 2>&1; echo "a$a build rc=$?") & done
wait; echo "builds $(( $(date +%s)-S ))s"; sh tests/ptxas-check.sh build/cuda 1
export BFP8_REQUIRE_CUDA=1
(timeout 200 build/tests/test_hopper > $OUT/th-full.log 2>&1; echo "test_hopper full rc=$?: $(tail -1 $OUT/th-full.log)") &
(timeout 200 build/tests/test_linear > $OUT/tl.log 2>&1; echo "test_linear rc=$?: $(tail -1 $OUT/tl.log)") &
for v in BFP8_HOPPER_RINGS=0 BFP8_HOPPER_ENTRY_STAGES=0 BFP8_HOPPER_ENTRY_STAGES=12 BFP8_HOPPER_TILE=128 BFP8_HOPPER_TILE=128,BFP8_HOPPER_TMA_STORE=0; do
  (env $(echo $v | tr , ' ') timeout 200 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "$v --small rc=$?: $(grep -E 'failed:|passed' $OUT/th-$v.log | head -2 | tr '\n' ' ' | cut -c1-200)") &
done
wait; echo "tests $(( $(date +%s)-S ))s"
grep -h "FAIL\|failed:" $OUT/th-*.log | head -5
(timeout 60 build/first_load > $OUT/first_load.log 2>&1; echo "first_load rc=$?"; tail -4 $OUT/first_load.log)
(timeout 60 build/launch_floor > $OUT/launch_floor.log 2>&1; echo "launch_floor rc=$?"; tail -4 $OUT/launch_floor.log)
(timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build/first_load > $OUT/san-first_load.log 2>&1; echo "memcheck first_load rc=$?: $(grep -E 'ERROR SUMMARY' $OUT/san-first_load.log)")
echo "tools $(( $(date +%s)-S ))s"
A="bench --device cuda --backend hopper --baseline cublaslt --shapes dsr1 --m 16,64,128 --iters 20 --warmup 3"
for r in 1 2; do
  BFP8_HOPPER_RINGS=0 timeout 60 build/blockfp8 $A --json $OUT/single-$r.json > /dev/null 2>&1 || echo "single bench failed"
  timeout 60 build/blockfp8 $A --json $OUT/rings-$r.json > /dev/null 2>&1 || echo "rings bench failed"
  for a in 3 4; do timeout 60 /tmp/a$a/build/blockfp8 $A --json $OUT/a$a-$r.json > /dev/null 2>&1 || echo "a$a bench failed"; done
  echo "ab round $r $(( $(date +%s)-S ))s"
done
python3 bench/ab/abv.py $OUT single rings a3 a4
for r in 1 2; do
  BFP8_HOPPER_RINGS=0 timeout 60 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --iters 20 --json $OUT/m-single-$r.json > /dev/null 2>&1 || echo "model single failed"
  timeout 60 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --iters 20 --json $OUT/m-rings-$r.json > /dev/null 2>&1 || echo "model rings failed"
done; echo "model $(( $(date +%s)-S ))s"
python3 bench/ab/modelab.py $OUT single rings | grep -E "layer|step|q_b|kv_b"
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c1.tgz *.log *.json && rm -f *.log *.json
