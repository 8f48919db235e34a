# Model-step A/B: modelab.py DIR v1 v2 ... (files DIR/m-<v>-<r>.json, r = 1, 2): per batch and layer, mean of the runs.
import json, sys, glob
d, names = sys.argv[1], sys.argv[2:]
t = {}
for v in names:
    for f in sorted(glob.glob("%s/m-%s-*.json" % (d, v))):
        try: recs = json.load(open(f))
        except Exception as e: print("  bad", f, e); continue
        for r in recs: t.setdefault((r['batch'], r['layer']), {}).setdefault(v, []).append(r['median_us'])
print("  batch layer            " + " ".join("%14s" % v[:14] for v in names))
for k in sorted(t, key=lambda k: (k[0], k[1] == 'step', k[1])):
    print("  %5d %-16s " % k + " ".join("%14s" % ("/".join("%.1f" % x for x in t[k].get(v, []))) for v in names))
