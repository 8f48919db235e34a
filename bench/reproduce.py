#!/usr/bin/env python3
"""Reproduces the tables of bench/RESULTS.md and prints their summary last.

    bench/reproduce.py cpu OUT [options]      the CPU tables, on the 2-core project machine (needs OpenBLAS)
    bench/reproduce.py gpu OUT [options]      the GPU tables, on an H200 (the Triton step needs torch + triton)
    bench/reproduce.py summary DIR [--markdown]
                                              the summary (or RESULTS.md's tables) of the JSON in DIR, e.g.
                                              bench/results, or an OUT of the two commands above
    bench/reproduce.py ab DIR                 old tree against new from scripts/gpu-check.sh's `ab` step

Options of cpu and gpu:
    --only STEP,...   run these steps only (cpu: cpu-bench cpu-bench-haswell cpu-model quant; gpu: h200-bench
                      h200-bench-dirty h200-triton-dirty h200-model probes). A device lent in calls of 10 minutes
                      runs the whole gpu list in two calls: `--only h200-triton-dirty` (its config sweep takes
                      ~6 minutes) and the rest.
    --quick           a few cells of each table, to check that every step runs (not for the record)
    --build DIR       the build directory (default build); --no-make uses it as it is, else `make` runs first
    --make-args ARGS  extra make arguments, e.g. "CUDA=0" on a machine whose nvcc should not be used

Every step writes OUT/<step>.json (and OUT/<step>.log); OUT/meta.json says when, on which commit and machine.
To record a run, copy each JSON to bench/results/<step>-<date>-<commit>.json and update bench/RESULTS.md from
`bench/reproduce.py summary bench/results --markdown`.
"""
import argparse
import datetime
import glob
import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")

# compare-anchors.py holds the one comparison of bench records with a baseline (same-run records or anchors).
_spec = importlib.util.spec_from_file_location("compare_anchors", os.path.join(ROOT, "scripts", "compare-anchors.py"))
compare_anchors = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_anchors)


def dsr1_table():
    """[(N, K)] of the eight DeepSeek-R1 layers and [M] of the benchmark table (bench/data)."""
    import csv
    with open(os.path.join(DATA, "dsr1_shapes.csv"), newline="", encoding="utf-8") as f:
        shapes = [(int(r["n"]), int(r["k"])) for r in csv.DictReader(f)]
    with open(os.path.join(DATA, "dsr1_m.csv"), newline="", encoding="utf-8") as f:
        ms = [int(r["m"]) for r in csv.DictReader(f)]
    return shapes, ms


SHAPES, GPU_MS = dsr1_table()
CPU_MS = [1, 16, 128, 512]


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


# --- running ----------------------------------------------------------------------------------------------------

def steps(kind, out, build, quick):
    """[(name, env, argv)] of one kind, in the order they run."""
    cli = os.path.join(build, "blockfp8")
    if kind == "cpu":
        shapes, ms, hw_ms, batch = ("2112x7168", "1,128", "1,128", "1") if quick else \
            ("dsr1", ",".join(map(str, CPU_MS)), "1,128,512", "1,16")
        bench = [cli, "bench", "--device", "cpu", "--backend", "cpu", "--baseline", "openblas", "--shapes", shapes]
        quant = "512 7168" if quick else "4096 7168"
        return [
            ("cpu-bench", {}, bench + ["--m", ms, "--json", f"{out}/cpu-bench.json"]),
            # OpenBLAS's AVX2 kernels, forced: the like-for-like comparison (this VM's CPUID makes it pick SSE3 ones).
            ("cpu-bench-haswell", {"OPENBLAS_CORETYPE": "Haswell"},
             bench + ["--m", hw_ms, "--json", f"{out}/cpu-bench-haswell.json"]),
            ("cpu-model", {}, [cli, "bench", "--model", "dsr1", "--batch", batch, "--compare",
                               "--json", f"{out}/cpu-model.json"]),
            ("quant", {}, ["sh", "-c", f"for t in 1 2; do BFP8_NUM_THREADS=$t {build}/quant_bench {quant}; done"]),
        ]
    shapes, ms, batch, iters = ("2112x7168,7168x2048", "1,128,4096", "1", "5") if quick else \
        ("dsr1", ",".join(map(str, GPU_MS)), "1,16,128,4096", "20")
    table = ["--shapes", shapes, "--m", ms, "--iters", iters, "--warmup", "3"]
    triton_shapes = [] if not quick else ["--shapes", shapes, "--m", ms]
    return [
        ("h200-bench", {}, [cli, "bench", "--device", "cuda", "--backend", "all", "--baseline", "cublaslt"] + table +
         ["--json", f"{out}/h200-bench.json"]),
        # The portable kernel with the dirty flush (the one PyTorch's zero_() leaves), beside Triton's.
        ("h200-bench-dirty", {}, [cli, "bench", "--device", "cuda", "--backend", "cuda_generic", "--baseline",
                                  "cublaslt", "--l2", "dirty"] + table + ["--json", f"{out}/h200-bench-dirty.json"]),
        ("h200-triton-dirty", {"PYTHONUNBUFFERED": "1"},
         [sys.executable, os.path.join(HERE, "triton_baseline.py"), "--l2", "dirty"] + triton_shapes +
         ["--json", f"{out}/h200-triton-dirty.json"]),
        ("h200-model", {}, [cli, "bench", "--model", "dsr1", "--device", "cuda", "--batch", batch, "--compare",
                            "--iters", iters, "--json", f"{out}/h200-model.json"]),
        ("probes", {}, ["sh", "-c", f"{build}/launch_floor && {build}/first_load"]),
    ]


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=7"],
                              capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def machine(kind):
    """One line naming the machine: the GPU, its driver and clocks; or the CPU, its cores and the load average."""
    if kind == "gpu":
        cmd = ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem", "--format=csv,noheader"]
    else:
        cmd = ["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'; echo \"$(nproc) cores,"
               " load $(cut -d' ' -f1-3 /proc/loadavg)\""]
    try:
        return ", ".join(x for x in subprocess.run(cmd, capture_output=True, text=True).stdout.split("\n") if x)
    except OSError:
        return "unknown"


def run(kind, a):
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ)
    # A GPU machine without the cJSON package: headers and library carried in build/deps (as scripts/gpu-check.sh).
    deps = os.path.join(ROOT, a.build, "deps")
    if not os.path.exists("/usr/include/cjson/cJSON.h") and os.path.exists(os.path.join(deps, "include", "cJSON.h")):
        for var, sub in (("CPATH", "include"), ("LIBRARY_PATH", "lib"), ("LD_LIBRARY_PATH", "lib")):
            env[var] = os.path.join(deps, sub) + (":" + env[var] if env.get(var) else "")
        os.makedirs(os.path.join(ROOT, a.build), exist_ok=True)
        open(os.path.join(ROOT, a.build, ".deps-ok"), "a").close()
    env["PATH"] = env.get("PATH", "") + ":/usr/local/cuda/bin"
    todo = steps(kind, os.path.abspath(a.out), a.build, a.quick)
    if a.only:
        names = a.only.split(",")
        unknown = [n for n in names if n not in [s[0] for s in todo]]
        if unknown:
            sys.exit(f"reproduce: unknown step {', '.join(unknown)} (the {kind} steps: {' '.join(s[0] for s in todo)})")
        todo = [s for s in todo if s[0] in names]
    meta = {"kind": kind, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(), "machine": machine(kind), "quick": a.quick, "steps": {}}
    if not a.no_make:
        targets = ["all"] + (["quant-bench"] if kind == "cpu" else ["gpu-tools"])
        cmd = ["make", f"-j{os.cpu_count() or 2}", f"BUILD={a.build}"] + shlex.split(a.make_args) + targets
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd, cwd=ROOT, env=env).returncode != 0:
            sys.exit("reproduce: the build failed")
    for name, extra, argv in todo:
        print("+", " ".join(f"{k}={v}" for k, v in extra.items()), " ".join(argv), flush=True)
        t0 = datetime.datetime.now()
        with open(os.path.join(a.out, f"{name}.log"), "w") as log:
            rc = subprocess.run(argv, cwd=ROOT, env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT).returncode
        secs = (datetime.datetime.now() - t0).total_seconds()
        meta["steps"][name] = {"rc": rc, "seconds": round(secs, 1), "command": " ".join(argv)}
        print(f"  {name}: {'ok' if rc == 0 else f'FAILED (exit {rc}, see {name}.log)'} ({secs:.0f} s)", flush=True)
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"\n==== summary ({meta['date']}, commit {meta['commit']}; {meta['machine']})")
    summary(a.out, markdown=False)
    for name in ("quant", "probes"):
        if name in meta["steps"]:
            print(f"-- {name} ({name}.log):")
            print("".join("  " + line for line in open(os.path.join(a.out, f"{name}.log")) if line.strip())[-3000:])
    return 0 if all(s["rc"] == 0 for s in meta["steps"].values()) else 1


# --- summarizing ------------------------------------------------------------------------------------------------

def find(d, kind):
    """The JSON files of one step in d: <kind>.json or <kind>-<date>-<commit>.json, oldest first."""
    pat = re.compile(re.escape(kind) + r"(-\d{4}-\d\d-\d\d-[0-9a-f]+)?\.json$")
    return sorted(p for p in glob.glob(os.path.join(d, "*.json")) if pat.match(os.path.basename(p)))


def suffix(path, kind):
    return os.path.basename(path)[len(kind):-len(".json")]


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def by_cell(recs, backend):
    return {(r["m"], r["n"], r["k"]): r for r in recs if r.get("backend") == backend}


def times(cells):
    return {c: r["median_us"] for c, r in cells.items()}


def against(runs, ref):
    """compare-anchors' comparison of {cell: µs} with a baseline: ({cell: ratio}, geomean); ratio > 1 is faster."""
    rows, _, gm = compare_anchors.compare(runs, ref)
    return {r[:3]: r[5] for r in rows}, gm


def matrix(cells, fmt, shapes=SHAPES):
    """Markdown: one row per M, one column per N x K; fmt(cell) gives a cell's text ('-' where cells lacks it)."""
    ms = sorted({c[0] for c in cells})
    lines = ["| M | " + " | ".join(f"{n}x{k}" for n, k in shapes) + " |", "|---" * (len(shapes) + 1) + "|"]
    for m in ms:
        lines.append(f"| {m} | " + " | ".join(fmt((m, n, k)) if (m, n, k) in cells else "-" for n, k in shapes) + " |")
    return "\n".join(lines)


def gpu_bench(path, markdown):
    recs = load(path)
    base = by_cell(recs, "cublaslt")
    out = []
    if markdown:
        out.append("cuBLASLt µs:\n\n" + matrix(base, lambda c: f"{base[c]['median_us']:.1f}"))
    for be in sorted({r["backend"] for r in recs} - {"cublaslt"}):
        t = by_cell(recs, be)
        ratio, gm = against(times(t), times(base))
        if not ratio:
            continue
        slow = sorted(c for c in ratio if ratio[c] < 1)
        ms = sorted({c[0] for c in ratio})
        by_m = " / ".join(f"{geomean([x for c, x in ratio.items() if c[0] == m]):.3f}" for m in ms)
        out.append(f"{be}: {gm:.3f}x cuBLASLt over {len(ratio)} cells (by M {'/'.join(map(str, ms))}: {by_m}); "
                   f"slower in {len(slow)}" + "".join(f"\n  M={c[0]} {c[1]}x{c[2]}: {be} {t[c]['median_us']:.2f} µs, "
                                                     f"cuBLASLt {base[c]['median_us']:.2f}" for c in slow))
        if markdown:
            out.append(f"{be} µs and cuBLASLt time / {be} time:\n\n" + matrix(
                t, lambda c: f"{t[c]['median_us']:.1f}" + (f" {ratio[c]:.2f}x" if c in ratio else "")))
    h = by_cell(recs, "hopper")
    if not h:
        return out
    big = (4096, 7168, 16384)
    if big in h:
        line = f"hopper at M=4096 7168x16384: {h[big]['median_us']:.1f} µs, {h[big]['tflops']:.0f} TFLOP/s"
        if big in base:
            line += f" (cuBLASLt {base[big]['median_us']:.1f} µs, {base[big]['tflops']:.0f})"
        out.append(line)
    decode = sorted(c for c in h if c[0] <= 128 and c[1] * c[2] >= 32e6)
    if decode:
        fast = [c for c in decode if h[c]["gbs"] >= 3400]
        out.append(f"hopper decode (M <= 128, weights >= 32 MB): >= 3.4 TB/s in {len(fast)} of {len(decode)} "
                   "cells; " + ", ".join(f"M={c[0]} {c[1]}x{c[2]} {h[c]['gbs'] / 1000:.2f}" for c in decode))
    small = min(h.values(), key=lambda r: r["median_us"])
    out.append(f"hopper's smallest cell: M={small['m']} {small['n']}x{small['k']} {small['median_us']:.2f} µs")
    return out


def gpu_dirty(path, triton_path, markdown):
    recs = load(path)
    g = times(by_cell(recs, "cuda_generic"))
    out = []
    ratio, gm = against(g, times(by_cell(recs, "cublaslt")))
    if ratio:
        out.append(f"cuda_generic (dirty flush): {gm:.3f}x cuBLASLt over {len(ratio)} cells")
    anchor = compare_anchors.load_anchors(compare_anchors.DEFAULT_ANCHORS, "triton")
    rows, wins, gm = compare_anchors.compare(g, anchor)
    if rows:
        out.append(f"cuda_generic vs the Triton anchor (bench/data, 2026-11-30): at least as fast in {wins} of "
                   f"{len(rows)} cells, geomean {gm:.2f}x")
    same = {}
    if triton_path:
        trecs = load(triton_path)
        # Several calls' records in one file: the last call's, the one that ran beside `path`.
        variants = [v for v in dict.fromkeys(r.get("variant") for r in trecs) if v is not None]
        last = variants[-1] if variants else None
        same = times(by_cell([r for r in trecs if r.get("variant") == last], "triton"))
        rows, wins, gm = compare_anchors.compare(g, same)
        if rows:
            out.append(f"cuda_generic vs Triton in the same run{f' (records {last})' if last else ''}: at least as "
                       f"fast in {wins} of {len(rows)} cells, geomean {gm:.2f}x" +
                       "".join(f"\n  Triton faster: M={r[0]} {r[1]}x{r[2]}: cuda_generic {r[3]:.2f} µs, Triton "
                               f"{r[4]:.2f}" for r in rows if r[5] < 1))
    if markdown and g:
        out.append("cuda_generic µs, dirty flush" + (", / Triton µs of the same run" if same else "") + ":\n\n" +
                   matrix(g, lambda c: f"{g[c]:.1f}" + (f" / {same[c]:.1f}" if c in same else "")))
    return out


def us_text(us):
    return f"{us / 1000:.1f} ms" if us >= 10000 else f"{us:.1f} µs"


def model(path, markdown):
    recs = load(path)
    out = []
    for r in recs:
        if r["layer"] == "step":
            moe = "routed_experts_us" in r  # the step is one MoE decoder layer (before: the 8 dense-path layers)
            line = f"batch {r['batch']}: step {us_text(r['median_us'])}"
            if moe:
                line += (f" (one MoE layer: routed experts {100 * r['expert_share']:.1f}%, {r['experts']} experts, "
                         f"{r['moe_layout']}), 61 layers' GEMMs {us_text(r['model_us'])}")
            rate = lambda x: f"{x:.3f}" if x < 10 else f"{x:.0f}"
            line += f", {rate(r['tokens_per_s'])} tokens/s"
            if "fallback_us" in r:
                fewer = 100 * (1 - r["fallback_tokens_per_s"] / r["tokens_per_s"])
                line += (f"; every layer on the fallback {us_text(r['fallback_us'])}, "
                         f"{rate(r['fallback_tokens_per_s'])} tokens/s "
                         f"({abs(fewer):.1f}% {'fewer' if fewer >= 0 else 'more'})")
            out.append(line)
    if markdown:
        batches = list(dict.fromkeys(r["batch"] for r in recs))
        layers = list(dict.fromkeys(r["layer"] for r in recs))
        cell = {(r["layer"], r["batch"]): r for r in recs}
        fb = next((r["fallback"] for r in recs if r.get("fallback")), None)
        lines = ["| layer | " + " | ".join(f"batch {b}" for b in batches) + " |", "|---" * (len(batches) + 1) + "|"]
        for layer in layers:
            row = []
            for b in batches:
                r = cell.get((layer, b))
                if r is None:
                    row.append("-")
                    continue
                text = (f"{r['backend']} " if r.get("backend") else "") + us_text(r["median_us"])
                row.append(text + (f" / {us_text(r['fallback_us'])}" if "fallback_us" in r else ""))
            lines.append(f"| {'**step**' if layer == 'step' else layer} | " + " | ".join(row) + " |")
        out.append("backend and median time per layer" + (f" / the same layer on {fb}" if fb else "") + ":\n\n" +
                   "\n".join(lines))
    return out


def cpu_bench(path, markdown):
    recs = load(path)
    cpu = by_cell(recs, "cpu")
    ratio, _ = against(times(cpu), times(by_cell(recs, "openblas")))
    core = next((r["openblas_core"] for r in recs if r.get("openblas_core")), "?")
    out = []
    ms = sorted({c[0] for c in ratio})
    for m in ms:
        rs = {c: x for c, x in ratio.items() if c[0] == m}
        target = 3.0 if m == 1 else 0.9 if m >= 128 else None  # bench/RESULTS.md, section 8
        line = (f"cpu vs OpenBLAS ({core}) at M={m}: {min(rs.values()):.2f}-{max(rs.values()):.2f}x, "
                f"geomean {geomean(list(rs.values())):.2f}x")
        if target:
            miss = sorted(c for c, x in rs.items() if x < target)
            line += f"; target >= {target}x: " + ("met" if not miss else "missed at " + ", ".join(
                f"{c[1]}x{c[2]} {rs[c]:.2f}x" for c in miss))
        out.append(line)
    if markdown:
        lines = ["| N x K | " + " | ".join(f"M={m}" for m in ms) + " |", "|---" * (len(ms) + 1) + "|"]
        for n, k in SHAPES:
            lines.append(f"| {n}x{k} | " + " | ".join(
                f"{cpu[m, n, k]['median_us'] / 1000:.2f} ms {ratio[m, n, k]:.2f}x" if (m, n, k) in ratio else "-"
                for m in ms) + " |")
        out.append(f"cpu ms and OpenBLAS ({core}) time / cpu time:\n\n" + "\n".join(lines))
    return out


def summary(d, markdown):
    def dirty(p):
        """The dirty-flush table, with the Triton records of the same run (the same file-name suffix)."""
        tri = [t for t in find(d, "h200-triton-dirty")
               if suffix(t, "h200-triton-dirty") == suffix(p, "h200-bench-dirty")]
        return ([f"(with {os.path.basename(tri[0])})"] if tri else []) + gpu_dirty(p, tri[0] if tri else None, markdown)
    sections = [("h200-bench", lambda p: gpu_bench(p, markdown)), ("h200-bench-dirty", dirty),
                ("h200-model", lambda p: model(p, markdown)), ("cpu-bench", lambda p: cpu_bench(p, markdown)),
                ("cpu-bench-haswell", lambda p: cpu_bench(p, markdown)), ("cpu-model", lambda p: model(p, markdown))]
    found = False
    for kind, fn in sections:
        for p in find(d, kind):
            found = True
            print(f"-- {os.path.basename(p)}")
            for line in fn(p):
                print(line + ("\n" if markdown else ""))
    if not found:
        print(f"(no benchmark JSON in {d})")


def ab(d):
    """Old tree against new, from ab-{old,new}-{1,2}.json (scripts/gpu-check.sh's `ab` step: the two trees' full
    tables alternated in one call). Per backend and cell: the mean of each tree's two runs, the old tree's own
    run-to-run spread (the noise), and new/old speed; a cell is slower only beyond that noise (and 2%)."""
    runs = {t: [load(os.path.join(d, f"ab-{t}-{i}.json")) for i in (1, 2)] for t in ("old", "new")}
    backends = sorted({r["backend"] for r in runs["new"][0] if r.get("median_us")})
    lines, worst = [], []
    print("| backend | M | N | K | old µs | new µs | noise | new speed / old |")
    print("|---|---|---|---|---|---|---|---|")
    for b in backends:
        per = {t: [times(by_cell(run, b)) for run in runs[t]] for t in runs}
        ratios = []
        for cell in sorted(per["new"][0]):
            try:
                o1, o2 = per["old"][0][cell], per["old"][1][cell]
                n1, n2 = per["new"][0][cell], per["new"][1][cell]
            except KeyError:
                continue
            if not all(isinstance(v, (int, float)) and v > 0 for v in (o1, o2, n1, n2)):
                continue
            old, new = (o1 + o2) / 2, (n1 + n2) / 2
            noise = abs(o1 - o2) / old
            speed = old / new
            ratios.append(speed)
            slower = speed < 1 - max(noise, 0.02)
            if slower:
                worst.append((b, cell, speed, noise))
            print(f"| {b} | {cell[0]} | {cell[1]} | {cell[2]} | {old:.1f} | {new:.1f} | {noise * 100:.1f}% | "
                  f"{speed:.3f}{' SLOWER' if slower else ''} |")
        if ratios:
            lines.append(f"{b}: new/old geomean speed {geomean(ratios):.4f} over {len(ratios)} cells")
    print()
    for line in lines:
        print(line)
    print(f"cells slower beyond the noise (and 2%): {len(worst)}")
    for b, cell, speed, noise in worst:
        print(f"  {b} M={cell[0]} N={cell[1]} K={cell[2]}: {speed:.3f} (noise {noise * 100:.1f}%)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["cpu", "gpu", "summary", "ab"])
    ap.add_argument("dir", help="OUT for cpu and gpu, the JSON's directory for summary")
    ap.add_argument("--only", help="comma-separated steps")
    ap.add_argument("--quick", action="store_true", help="a few cells of each table")
    ap.add_argument("--build", default="build", help="the build directory")
    ap.add_argument("--no-make", action="store_true", help="do not run make first")
    ap.add_argument("--make-args", default="", help="extra make arguments")
    ap.add_argument("--markdown", action="store_true", help="summary: the tables as markdown too")
    a = ap.parse_args()
    if a.what == "summary":
        summary(a.dir, a.markdown)
        return 0
    if a.what == "ab":
        return ab(a.dir)
    a.out = a.dir
    return run(a.what, a)


if __name__ == "__main__":
    sys.exit(main())
