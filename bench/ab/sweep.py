# sweep.py DIR prefix S1 S2 ... : hopper medians per cell for each forced split count, from DIR/<prefix>S<s>-<r>.json
# (r = 1, 2, ...; mean over runs), and the best S per cell.
import json, sys, glob
d, prefix, ss = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
t = {}
for s in ss:
    for f in sorted(glob.glob("%s/%sS%d-[0-9].json" % (d, prefix, s))):
        for r in json.load(open(f)):
            if r['backend'] == 'hopper':
                t.setdefault((r['m'], r['n'], r['k']), {}).setdefault(s, []).append(r['median_us'])
print("     M      N      K " + " ".join("%7s" % ("S=%d" % s) for s in ss) + "  best")
for k in sorted(t):
    row = {s: sum(v) / len(v) for s, v in t[k].items()}
    best = min(row, key=row.get)
    print("  %4d %6d %6d " % k + " ".join("%7.2f" % row[s] if s in row else "      -" for s in ss) + "  S=%d" % best)
