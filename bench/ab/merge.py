# merge.py OUT.json DIR name... : concatenates DIR/<name>-<r>.json records, tagging each with variant "<name>-<r>".
import json, sys, glob, re
out, d, names = sys.argv[1], sys.argv[2], sys.argv[3:]
recs = []
for n in names:
    for f in sorted(glob.glob("%s/%s-[0-9].json" % (d, n))):
        r = re.search(r'-(\d)\.json$', f).group(1)
        for x in json.load(open(f)):
            x['variant'] = "%s-%s" % (n, r); recs.append(x)
json.dump(recs, open(out, 'w'), indent=0)
print(out, len(recs))
