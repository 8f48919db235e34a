# cuda_generic against Triton in the same call, both with the dirty flush: dirty.py TRITON_JSON NAME=GLOB ...
# (GLOB: `blockfp8 bench --backend cuda_generic --l2 dirty --json` files, several runs averaged). Per cell that
# Triton ran (every cell of the NAMEs without Triton figures), the mean cuda_generic time of each NAME and Triton's;
# the verdict compares the last NAME with Triton.
import json, sys, glob
def load(pattern, backend):
    t = {}
    for f in glob.glob(pattern):
        for x in json.load(open(f)):
            if x['backend'] == backend: t.setdefault((x['m'], x['n'], x['k']), []).append(x['median_us'])
    return {k: sum(v) / len(v) for k, v in t.items()}
try: triton = load(sys.argv[1], 'triton')
except Exception as e: triton = {}; print("no triton figures:", e)
runs = [(a.split('=', 1)[0], load(a.split('=', 1)[1], 'cuda_generic')) for a in sys.argv[2:]]
nan = float('nan')
for k in sorted(triton or set().union(*[set(t) for _, t in runs])):
    tr, last = triton.get(k, nan), runs[-1][1].get(k, nan)
    verdict = "" if tr != tr or last != last else ("ok" if last <= tr else "SLOWER")
    print("  dirty M=%d %dx%d: " % k + "  ".join("cuda_generic %s %.2f" % (n, t.get(k, nan)) for n, t in runs) +
          "  triton %.2f  %s" % (tr, verdict))
