# A/B of variants against a base and against cuBLASLt measured in the same files: abv.py DIR base v1 v2 ...
# Files DIR/<v>-<r>.json (r = 1, 2). Per variant: geomean base/variant per M, hopper vs cuBLASLt geomean and slower
# cells; then per-cell mean hopper times and the cuBLASLt mean.
import json, sys, math, glob
d, names = sys.argv[1], sys.argv[2:]
g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float('nan')
t, lt = {}, {}
for v in names:
    runs = []
    for f in sorted(glob.glob("%s/%s-[0-9].json" % (d, v))):
        try: runs.append(json.load(open(f)))
        except Exception as e: print("  bad", f, e)
    h = {}
    for recs in runs:
        for r in recs:
            k = (r['m'], r['n'], r['k'])
            (h if r['backend'] == 'hopper' else lt).setdefault(k, []).append(r['median_us']) if r['backend'] in ('hopper', 'cublaslt') else None
    t[v] = {k: sum(x) / len(x) for k, x in h.items()}
L = {k: sum(x) / len(x) for k, x in lt.items()}
base = t[names[0]]
keys = sorted(k for k in base if all(k in t[v] for v in names))
Ms = sorted({k[0] for k in keys})
for v in names:
    vs = g([L[k] / t[v][k] for k in keys if k in L]); slow = [k for k in keys if k in L and t[v][k] > L[k]]
    print("  %-8s vs base %.4f (%s) | vs cublaslt %.4f, slower in %d: %s" % (v, g([base[k] / t[v][k] for k in keys]),
          " ".join("M=%d %.4f" % (M, g([base[k] / t[v][k] for k in keys if k[0] == M])) for M in Ms), vs, len(slow),
          " ".join("%dx%dx%d" % k for k in slow)))
print("     M      N      K " + " ".join("%8s" % v[:8] for v in names) + "  cublaslt")
for k in keys:
    print("  %4d %6d %6d " % k + " ".join("%8.2f" % t[v][k] for v in names) + "  %8.2f" % L.get(k, float('nan')))
