# Call 3 (v17): the evict-first hint on small weights. HEAD build (no kernel change). Dirty flush: cuda_generic with
# the hint (ef) and without (noef, BFP8_HOPPER_EVICT_FIRST=0), three rounds alternating, on five shapes x M<=128, and
# Triton on the same cells; clean flush hopper ef/noef twice; the model step ef/noef twice.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
SH=2112x7168,32768x512,7168x2048,4096x7168,24576x1536
D="bench --device cuda --backend cuda_generic --baseline cublaslt --shapes $SH --m 1,16,64,128 --iters 20 --warmup 3 --l2 dirty"
for r in 1 2 3; do
  timeout 60 build/blockfp8 $D --json $OUT/ef-$r.json > /dev/null 2>&1 || echo "ef failed"
  BFP8_HOPPER_EVICT_FIRST=0 timeout 60 build/blockfp8 $D --json $OUT/noef-$r.json > /dev/null 2>&1 || echo "noef failed"
done; echo "dirty $(( $(date +%s)-S ))s"
(PYTHONUNBUFFERED=1 timeout 300 python3 bench/triton_baseline.py --l2 dirty --m 1,16,64,128 --shapes $SH --json $OUT/triton-dirty.json > $OUT/triton.log 2>&1; echo "triton rc=$? $(( $(date +%s)-S ))s")
C="bench --device cuda --backend hopper --baseline cublaslt --shapes $SH --m 1,16,64,128 --iters 20 --warmup 3"
for r in 1 2; do
  timeout 60 build/blockfp8 $C --json $OUT/cef-$r.json > /dev/null 2>&1 || echo "cef failed"
  BFP8_HOPPER_EVICT_FIRST=0 timeout 60 build/blockfp8 $C --json $OUT/cnoef-$r.json > /dev/null 2>&1 || echo "cnoef failed"
done; echo "clean $(( $(date +%s)-S ))s"
for r in 1 2; do
  timeout 60 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --iters 20 --json $OUT/m-ef-$r.json > /dev/null 2>&1 || echo "model ef failed"
  BFP8_HOPPER_EVICT_FIRST=0 timeout 60 build/blockfp8 bench --model dsr1 --device cuda --batch 1,16,128 --iters 20 --json $OUT/m-noef-$r.json > /dev/null 2>&1 || echo "model noef failed"
done; echo "model $(( $(date +%s)-S ))s"
python3 - $OUT <<'PY'
import json, sys, glob, statistics as st
d = sys.argv[1]
def load(pat, be):
    t = {}
    for f in sorted(glob.glob(d + '/' + pat)):
        for r in json.load(open(f)):
            if r['backend'] == be: t.setdefault((r['m'], r['n'], r['k']), []).append(r['median_us'])
    return t
ef, noef = load('ef-[0-9].json', 'cuda_generic'), load('noef-[0-9].json', 'cuda_generic')
tr = load('triton-dirty.json', 'triton')
cef, cnoef = load('cef-[0-9].json', 'hopper'), load('cnoef-[0-9].json', 'hopper')
lt = load('cef-[0-9].json', 'cublaslt')
print("     M      N      K | dirty: ef runs / noef runs / triton | clean: ef / noef / cublaslt")
for k in sorted(ef):
    f = lambda v: "/".join("%.2f" % x for x in v)
    print("  %4d %6d %6d | %s  %s  %s | %s  %s  %s" % (k + (f(ef[k]), f(noef.get(k, [])), f(tr.get(k, [])), f(cef.get(k, [])), f(cnoef.get(k, [])), f(lt.get(k, [])))))
PY
python3 bench/ab/modelab.py $OUT ef noef | grep -E "layer|step|kv_b|q_a|shared.down"
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c3.tgz *.log *.json && rm -f *.log *.json
