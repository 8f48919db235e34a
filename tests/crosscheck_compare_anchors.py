#!/usr/bin/env python3
"""Checks the committed benchmark data (bench/data/) and scripts/compare-anchors.py, which compares `blockfp8 bench`
JSON with it: every anchor table covers the DeepSeek-R1 table exactly, the shape list agrees with the one the CLI,
the model bench and the Triton baseline use, no benchmark file or doc names a file outside the repository, and the
script's ratios, counts, variant choice and errors are right, against the committed anchors and against a same-run
JSON.

    python3 tests/crosscheck_compare_anchors.py [--build DIR]   (DIR unused: no binary is involved)
"""
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "compare-anchors.py")
DATA = os.path.join(ROOT, "bench", "data")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}")


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def rows_of(name):
    with open(os.path.join(DATA, name), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def record(backend, m, n, k, us, **extra):
    return dict(backend=backend, m=m, n=n, k=k, out_dtype="bf16", median_us=us, **extra)


def check_data():
    """The shape list, once as data, against the C and Python copies; every anchor table on exactly that grid."""
    shapes = [(r["layer"], int(r["n"]), int(r["k"])) for r in rows_of("dsr1_shapes.csv")]
    ms = [int(r["m"]) for r in rows_of("dsr1_m.csv")]
    check(len(shapes) == 8 and ms == [1, 16, 64, 128, 512, 4096], f"dsr1 data: {shapes} {ms}")
    nk = [(n, k) for _, n, k in shapes]
    # The CLI's one table of the dense layers (bench --shapes dsr1, --model dsr1 and --tp read it).
    src = open(os.path.join(ROOT, "tools", "dsr1_layers.c"), encoding="utf-8").read()
    layers = re.findall(r'\{"([^"]+)", (\d+), (\d+), [A-Z0-9_]+\}', src)
    check([(name, int(n), int(k)) for name, n, k in layers] == shapes,
          "tools/dsr1_layers.c's layers differ from bench/data/dsr1_shapes.csv")
    src = open(os.path.join(ROOT, "tools", "bench_model.c"), encoding="utf-8").read()
    experts = re.findall(r'\{"(experts\.[^"]+)", PART_EXPERTS, (\d+), (\d+)\}', src)
    check([(int(n), int(k)) for _, n, k in experts] == [(4096, 7168), (7168, 2048)],
          "tools/bench_model.c's routed experts are not DeepSeek-R1's gate_up 4096x7168 and down 7168x2048")
    src = open(os.path.join(ROOT, "bench", "triton_baseline.py"), encoding="utf-8").read()
    check("dsr1_shapes.csv" in src, "bench/triton_baseline.py does not take its shapes from bench/data")
    grid = {(m, n, k) for m in ms for n, k in nk}
    for name, columns in (("anchors-h200-2026-11-30.csv", ["triton_us", "cublaslt_us", "deepgemm_us"]),
                          ("side-by-side-h200-2026-12-04.csv",
                           ["hopper_us", "auto_us", "blockfp8_cublaslt_us", "torch_cublaslt_us", "deepgemm_us"])):
        rows = rows_of(name)
        cells = [(int(r["m"]), int(r["n"]), int(r["k"])) for r in rows]
        check(len(cells) == 48 and set(cells) == grid, f"{name}: not the 48 cells of the DeepSeek-R1 table")
        for r in rows:
            for c in columns:
                v = r[c].strip()
                check(v == "" or float(v) > 0, f"{name}: {c} of M={r['m']} {r['n']}x{r['k']} is '{v}'")
    moe = rows_of("moe-anchor-h200-2026-12-04.csv")
    check(len(moe) == 24 and {(r["n"], r["k"]) for r in moe} == {("4096", "7168"), ("7168", "2048")} and
          {r["layout"] for r in moe} == {"contiguous", "masked"}, "moe anchor: 24 rows of the two expert shapes")
    for r in moe:  # the TFLOP/s column is 2 * rows * groups * N * K / time
        flops = 2.0 * int(r["groups"]) * int(r["rows_per_group"]) * int(r["n"]) * int(r["k"])
        tflops = flops / (float(r["deepgemm_us"]) * 1e-6) / 1e12
        check(abs(tflops / float(r["deepgemm_tflops"]) - 1) < 0.01, f"moe anchor: TFLOP/s of {r}")
    # The benchmark files and the docs name no file outside the repository (the strings are split so that this
    # file does not name them either).
    outside = [".." + "/shared", "shared" + "/", "BENCHMARKS" + ".md", "DESIGN" + ".md", "FACTS" + ".md"]
    files = [os.path.join(ROOT, "scripts", "compare-anchors.py")]
    for top in ("bench", "docs"):
        for d, _, names in os.walk(os.path.join(ROOT, top)):
            files += [os.path.join(d, n) for n in names if n.endswith((".md", ".py", ".csv", ".c", ".cu", ".h"))]
    for path in files:
        text = open(path, encoding="utf-8").read()
        bad = [o for o in outside if o in text]
        check(not bad, f"{os.path.relpath(path, ROOT)} names a file outside the repository: {bad}")


def check_script():
    anchors = {(int(r["m"]), int(r["n"]), int(r["k"])): r for r in rows_of("anchors-h200-2026-11-30.csv")}
    with tempfile.TemporaryDirectory() as d:
        bench = os.path.join(d, "bench.json")
        baseline = os.path.join(d, "triton.json")
        # Three cells: faster, a tie (counts as at least as fast), slower; a cublaslt record that must be ignored.
        json.dump([record("cuda_generic", 1, 2112, 7168, 10.0), record("cuda_generic", 16, 2112, 7168, 20.0),
                   record("cuda_generic", 16, 36864, 7168, 80.5), record("cublaslt", 1, 2112, 7168, 1.0)],
                  open(bench, "w"))
        json.dump([record("triton", 1, 2112, 7168, 40.0), record("triton", 16, 2112, 7168, 20.0),
                   record("triton", 16, 36864, 7168, 78.0)], open(baseline, "w"))

        rc, out, err = run(bench, "--against", baseline)
        check(rc == 0, f"--against: exit {rc} ({err.strip()})")
        check("| 1 | 2112 | 7168 | 10.0 | 40.0 | 4.00x |" in out, "--against: the 4x cell")
        check("| 16 | 36864 | 7168 | 80.5 | 78.0 | 0.97x |" in out, "--against: the slower cell")
        geo = math.exp((math.log(4.0) + math.log(1.0) + math.log(78.0 / 80.5)) / 3)
        check(f"in 2 of 3 cells; geometric mean {geo:.2f}x" in out, f"--against: summary line\n{out}")
        check("triton (same run)" in out, "--against: the baseline is labelled as the same run")

        # The committed anchors, by default: triton 38.1 / 41.5 / 78.1 us at those cells.
        rc, out, err = run(bench)
        t = [float(anchors[c]["triton_us"]) for c in ((1, 2112, 7168), (16, 2112, 7168), (16, 36864, 7168))]
        check(rc == 0, f"default anchors: exit {rc} ({err.strip()})")
        check(f"| 16 | 2112 | 7168 | 20.0 | {t[1]:.1f} | {t[1] / 20.0:.2f}x |" in out, f"default anchors\n{out}")
        wins = (t[0] >= 10.0) + (t[1] >= 20.0) + (t[2] >= 80.5)
        check(f"in {wins} of 3 cells" in out and "triton anchor" in out, f"default anchors: summary\n{out}")
        # The cuBLASLt column has no M=1 2112x7168 figure: that cell is left out.
        rc, out, err = run(bench, "--column", "cuBLASLt")
        check(rc == 0 and "of 2 cells" in out and "| 1 | 2112 |" not in out, f"cublaslt column\n{out}{err}")
        side = os.path.join(DATA, "side-by-side-h200-2026-12-04.csv")
        rc, out, err = run(bench, side, "--column", "deepgemm")
        check(rc == 0 and "| 1 | 2112 | 7168 | 10.0 | 15.1 | 1.51x |" in out, f"side-by-side deepgemm\n{out}{err}")
        rc, out, err = run(bench, side, "--column", "cudnn")
        check(rc != 0 and "no column 'cudnn_us'" in err and "torch_cublaslt" in err, f"unknown column: {err}")
        rc, out, err = run(bench, os.path.join(ROOT, "README.md"))
        check(rc != 0 and "not an anchor CSV" in err, f"a file that is not an anchor CSV: {err.strip()}")

        # Several calls' records in one JSON: the variant must be named.
        calls = os.path.join(d, "calls.json")
        json.dump([record("triton", 1, 2112, 7168, 40.0, variant="call1"),
                   record("triton", 1, 2112, 7168, 30.0, variant="call2")], open(calls, "w"))
        rc, out, err = run(bench, "--against", calls)
        check(rc != 0 and "several 'triton' records" in err and "call1, call2" in err, f"variants: {err.strip()}")
        rc, out, err = run(bench, "--against", calls, "--against-variant", "call2")
        check(rc == 0 and "| 1 | 2112 | 7168 | 10.0 | 30.0 | 3.00x |" in out, f"--against-variant\n{out}{err}")

        rc, out, err = run(bench, "--against", baseline, "--backend", "hopper")
        check(rc != 0 and "no records of backend 'hopper'" in err, f"missing backend: exit {rc}, {err.strip()}")
        rc, out, err = run(bench, "--against", baseline, "--against-backend", "deepgemm")
        check(rc != 0 and "no records of backend 'deepgemm'" in err, f"missing baseline: exit {rc}, {err.strip()}")
        other = os.path.join(d, "other.json")
        json.dump([record("triton", 4096, 7168, 2048, 100.0)], open(other, "w"))
        rc, out, err = run(bench, "--against", other)
        check(rc != 0 and "no cell" in err, f"no common cell: exit {rc}, {err.strip()}")
        rc, out, err = run(os.path.join(d, "missing.json"))
        check(rc != 0 and "cannot read" in err, f"missing file: exit {rc}, {err.strip()}")


def main():
    check_data()
    check_script()
    print(f"compare-anchors: {'FAIL' if failures else 'ok'} ({failures} failed)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
