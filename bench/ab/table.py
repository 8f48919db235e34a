# The final table's summary: table.py BENCH_JSON (from `blockfp8 bench --device cuda --backend all --baseline
# cublaslt --shapes dsr1 ...`). Per backend in the file, the geomean speedup over cuBLASLt and the slower cells; then
# hopper at 4096x7168x16384, its decode bandwidth on the weights of 32 MB or more, and its smallest cell.
import json, sys, math
r = json.load(open(sys.argv[1]))
lt = {(x['m'], x['n'], x['k']): x['median_us'] for x in r if x['backend'] == 'cublaslt'}
g = lambda v: math.exp(sum(map(math.log, v)) / len(v))
for be in sorted({x['backend'] for x in r} - {'cublaslt'}):
    t = {(x['m'], x['n'], x['k']): x['median_us'] for x in r if x['backend'] == be}
    ks = [k for k in t if k in lt]
    if not ks: continue
    slow = sorted(k for k in ks if t[k] > lt[k])
    print("%-12s vs cublaslt %.3fx over %d cells, slower in %d: %s" % (be, g([lt[k] / t[k] for k in ks]), len(ks), len(slow), " ".join("%dx%dx%d %.2f/%.2f" % (k + (t[k], lt[k])) for k in slow)))
h = {(x['m'], x['n'], x['k']): x for x in r if x['backend'] == 'hopper'}
k = (4096, 7168, 16384); print("4096x7168x16384 hopper %.1f us %.0f TFLOP/s, cublaslt %.1f us" % (h[k]['median_us'], h[k]['tflops'], lt[k]))
for k in sorted(h):
    if k[0] <= 128 and k[1] * k[2] >= 32e6: print("  decode M=%d %dx%d: %.2f TB/s (%.1f us)" % (k + (h[k]['gbs'] / 1000, h[k]['median_us'])))
print("smallest hopper cell: %.2f us" % min(x['median_us'] for x in h.values()))
