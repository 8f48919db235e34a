# Call 1 (v20): probes, no code change. (a) Is a 112-CTA long-K decode plan (7168x16384: 112 row slices or 112
# 64-wide tiles) limited per SM or by the chip? 8448x16384 gives 132 CTAs the same 1 MB each: if it takes as long
# as 7168x16384, the SM is the limit and spreading 7168x16384 over 132 SMs pays. (b) Does the 16 KB power-of-two
# row stride cost anything (7168x16512, 129 K blocks)? (c) 16896x7168 (132 whole tiles) against 8448x7168 (66).
# (d) M=128 24576x1536 and 32768x512 under the other tilings.
export PATH=$PATH:/usr/local/cuda/bin CPATH=$PWD/build/deps/include LIBRARY_PATH=$PWD/build/deps/lib LD_LIBRARY_PATH=$PWD/build/deps/lib
S=$(date +%s); touch build/.deps-ok
make -j16 all > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-S ))s"
export BFP8_REQUIRE_CUDA=1
A="bench --device cuda --backend hopper --baseline cublaslt --iters 20 --warmup 3"
for r in 1 2; do
  timeout 90 build/blockfp8 $A --shapes 7168x16384,8448x16384,7168x16512,16896x7168,8448x7168 --m 1,16,128 --json $OUT/probe-$r.json > /dev/null 2>&1 || echo "probe bench failed"
  for t in def 128 swap 64; do
    if [ $t = def ]; then E=; else E="BFP8_HOPPER_TILE=$t"; fi
    env $E timeout 60 build/blockfp8 $A --shapes 24576x1536,32768x512 --m 128 --json $OUT/t$t-$r.json > /dev/null 2>&1 || echo "tile $t bench failed"
  done
done; echo "bench $(( $(date +%s)-S ))s"
python3 - $OUT <<'PY'
import json, sys, glob
d = sys.argv[1]
def load(pat):
    h, lt = {}, {}
    for f in sorted(glob.glob(d + "/" + pat)):
        for r in json.load(open(f)):
            k = (r['m'], r['n'], r['k'])
            (h if r['backend'] == 'hopper' else lt).setdefault(k, []).append(r['median_us'])
    return h, lt
h, lt = load("probe-*.json")
print("%-22s %18s %18s %8s" % ("cell", "hopper us (runs)", "cublaslt us", "TB/s"))
for k in sorted(h, key=lambda k: (k[0], k[1] * k[2])):
    print("%-22s %18s %18s %8.2f" % ("M=%d %dx%d" % k, "/".join("%.2f" % x for x in h[k]), "/".join("%.2f" % x for x in lt.get(k, [])), k[1] * k[2] / (sum(h[k]) / len(h[k])) * 1e-6))
for t in ("def", "128", "swap", "64"):
    h, lt = load("t%s-*.json" % t)
    print("TILE=%-5s" % t, "  ".join("M=%d %dx%d %s (lt %s)" % (k + ("/".join("%.2f" % x for x in h[k]), "/".join("%.2f" % x for x in lt.get(k, [])))) for k in sorted(h)))
PY
echo "done $(( $(date +%s)-S ))s"
cd $OUT && tar czf c1.tgz *.log *.json && rm -f *.log *.json
