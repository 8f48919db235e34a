# Call 2 (v17): 64-row P stages for M <= 64 (p64) and the entry barriers split (entry). Builds: main (p64+entry),
# HEAD's hopper.cu, p64 alone. Tests on main: unit suite, test_hopper --small under 8 forced plans. A/B clean flush
# M=1,16,64,128 (head, p64, entry, entryonly = main with SHORT_P=0), twice each; model step head vs main.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
for v in head p64; do mkdir -p /tmp/$v; tar cf - --exclude=./build . | tar xf - -C /tmp/$v; mkdir -p /tmp/$v/build; cp -r build/deps /tmp/$v/build/; touch /tmp/$v/build/.deps-ok; cp build/s/hopper-$v.cu /tmp/$v/src/backends/cuda/hopper.cu; done
(make -j8 all $(ls tests/test_*.c | sed 's|tests/|build/tests/|; s|\.c$||') > $OUT/build.log 2>&1; echo "build rc=$?") &
for v in head p64; do (cd /tmp/$v && make -j4 build/blockfp8 > $OUT/build-$v.log 2>&1; echo "$v build rc=$?") & done
wait; echo "builds $(( $(date +%s)-S ))s"; sh tests/ptxas-check.sh build/cuda 1; ls build/tests | tr '\n' ' '; echo
export BFP8_REQUIRE_CUDA=1
(sh tests/run-unit.sh build > $OUT/unit.log 2>&1; echo "unit suite rc=$?: $(tail -1 $OUT/unit.log)"; grep -E "^(PASS|FAIL)" $OUT/unit.log | cut -c1-110) &
for v in BFP8_HOPPER_SHORT_P=0 BFP8_HOPPER_EDGE_BOX=0 BFP8_HOPPER_ENTRY_STAGES=0 BFP8_HOPPER_ENTRY_STAGES=1 BFP8_HOPPER_ENTRY_STAGES=12 BFP8_HOPPER_CLUSTER=1 BFP8_HOPPER_TILE=swap16 BFP8_HOPPER_HYBRID=1; do
  (env $(echo $v | tr , ' ') timeout 250 build/tests/test_hopper --small > $OUT/th-$v.log 2>&1; echo "$v --small rc=$?: $(grep -E 'failed:|passed' $OUT/th-$v.log | head -2 | tr '\n' ' ' | cut -c1-200)") &
done
wait; echo "tests $(( $(date +%s)-S ))s"
A="bench --device cuda --backend hopper --baseline cublaslt --shapes dsr1 --m 1,16,64,128 --iters 20 --warmup 3"
for r in 1 2; do
  timeout 60 /tmp/head/build/blockfp8 $A --json $OUT/head-$r.json > /dev/null 2>&1 || echo "head bench failed"
  timeout 60 /tmp/p64/build/blockfp8 $A --json $OUT/p64-$r.json > /dev/null 2>&1 || echo "p64 bench failed"
  timeout 60 build/blockfp8 $A --json $OUT/entry-$r.json > /dev/null 2>&1 || echo "entry bench failed"
  BFP8_HOPPER_SHORT_P=0 timeout 60 build/blockfp8 $A --json $OUT/entryonly-$r.json > /dev/null 2>&1 || echo "entryonly bench failed"
  echo "ab round $r $(( $(date +%s)-S ))s"
done
python3 bench/ab/abv.py $OUT head p64 entry entryonly
for r in 1 2; do
  timeout 60 /tmp/head/build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --iters 20 --json $OUT/m-head-$r.json > /dev/null 2>&1 || echo "model head failed"
  timeout 60 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --iters 20 --json $OUT/m-entry-$r.json > /dev/null 2>&1 || echo "model entry failed"
done; echo "model $(( $(date +%s)-S ))s"
python3 bench/ab/modelab.py $OUT head entry | grep -E "layer|step"
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c2.tgz *.log *.json && rm -f *.log *.json
