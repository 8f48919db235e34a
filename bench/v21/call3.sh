# Call 3 (v21): why the ticket cost the stream-K cell ~5.7 us (call 2: 101.3 -> 107.0 at M=4096 2112x7168). A
# diagnostic switch (BFP8_HOPPER_SK_TICKET): 0 the block index everywhere (v20), 1 the ticket for every unit (call
# 2), 2 the ticket for the stream-K runs only (whole tiles by block index), 3 the ticket taken but not used. Twice,
# alternating, beside a control (7168x2048, no stream-K); then test_hopper --small under STREAMK=all with mode 2.
# (BFP8_HOPPER_SK_TICKET and HopperParams::sk_ticket_mode lived in that call's working tree only: mode 2 became the
# committed code, and the switch was removed.)
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all build/tests/test_hopper > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
A="bench --device cuda --backend hopper --baseline cublaslt --shapes 2112x7168,7168x2048 --m 4096 --iters 20 --warmup 3"
for r in 1 2; do for mode in 0 1 2 3; do
  BFP8_HOPPER_SK_TICKET=$mode timeout 40 build/blockfp8 $A --json $OUT/t$mode-$r.json > /dev/null 2>&1 || echo "t$mode bench failed"
done; done; echo "ab $(( $(date +%s)-S ))s"
python3 bench/ab/abv.py $OUT t0 t1 t2 t3
export BFP8_REQUIRE_CUDA=1
for mode in 2 0; do
BFP8_HOPPER_SK_TICKET=$mode BFP8_HOPPER_STREAMK=all timeout 150 build/tests/test_hopper --small > $OUT/th-t$mode.log 2>&1; echo "mode $mode STREAMK=all --small rc=$?: $(tail -1 $OUT/th-t$mode.log) $(( $(date +%s)-S ))s"
done
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c3.tgz *.log *.json && rm -f *.log *.json
