#!/usr/bin/env python3
"""Checks scripts/compare-anchors.py, which turns the GPU bench JSON into issue 4's Triton comparison: the ratios,
the count of cells at least as fast, and the errors, against an anchor table and against a same-run JSON.

    python3 tests/crosscheck_compare_anchors.py [--build DIR]   (DIR unused: no binary is involved)
"""
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "compare-anchors.py")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}")


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def record(backend, m, n, k, us):
    return dict(backend=backend, m=m, n=n, k=k, out_dtype="bf16", median_us=us)


def main():
    with tempfile.TemporaryDirectory() as d:
        bench = os.path.join(d, "bench.json")
        baseline = os.path.join(d, "triton.json")
        anchors = os.path.join(d, "BENCHMARKS.md")
        # Three cells: faster, a tie (counts as at least as fast), slower; a cublaslt record that must be ignored.
        json.dump([record("cuda_generic", 1, 2112, 7168, 10.0), record("cuda_generic", 16, 2112, 7168, 20.0),
                   record("cuda_generic", 16, 36864, 7168, 80.5), record("cublaslt", 1, 2112, 7168, 1.0)],
                  open(bench, "w"))
        json.dump([record("triton", 1, 2112, 7168, 40.0), record("triton", 16, 2112, 7168, 20.0),
                   record("triton", 16, 36864, 7168, 78.0)], open(baseline, "w"))
        with open(anchors, "w", encoding="utf-8") as f:
            f.write("| M | N | K | triton µs | cuBLASLt µs |\n|---|---|---|---|---|\n"
                    "| 1 | 2112 | 7168 | 38.1 | n/a |\n| 16 | 2112 | 7168 | 41.5 | 18.8 |\n"
                    "| 16 | 36864 | 7168 | 78.1 | 98.6 |\n")

        rc, out, err = run(bench, "--against", baseline)
        check(rc == 0, f"--against: exit {rc} ({err.strip()})")
        check("| 1 | 2112 | 7168 | 10.0 | 40.0 | 4.00x |" in out, "--against: the 4x cell")
        check("| 16 | 36864 | 7168 | 80.5 | 78.0 | 0.97x |" in out, "--against: the slower cell")
        geo = math.exp((math.log(4.0) + math.log(1.0) + math.log(78.0 / 80.5)) / 3)
        check(f"in 2 of 3 cells; geometric mean {geo:.2f}x" in out, f"--against: summary line\n{out}")
        check("triton (same run)" in out, "--against: the baseline is labelled as the same run")

        rc, out, err = run(bench, anchors)
        check(rc == 0, f"anchors: exit {rc} ({err.strip()})")
        check("| 16 | 2112 | 7168 | 20.0 | 41.5 | 2.08x |" in out, "anchors: triton column")
        check("in 2 of 3 cells" in out, f"anchors: summary line\n{out}")
        rc, out, err = run(bench, anchors, "--column", "cuBLASLt")
        check(rc == 0 and "in 1 of 2 cells" in out, f"anchors: cuBLASLt column skips n/a\n{out}{err}")

        rc, out, err = run(bench, "--against", baseline, "--backend", "hopper")
        check(rc != 0 and "no records of backend 'hopper'" in err, f"missing backend: exit {rc}, {err.strip()}")
        rc, out, err = run(bench, "--against", baseline, "--against-backend", "deepgemm")
        check(rc != 0 and "no records of backend 'deepgemm'" in err, f"missing baseline: exit {rc}, {err.strip()}")
        other = os.path.join(d, "other.json")
        json.dump([record("triton", 4096, 7168, 2048, 100.0)], open(other, "w"))
        rc, out, err = run(bench, "--against", other)
        check(rc != 0 and "no cell" in err, f"no common cell: exit {rc}, {err.strip()}")

    print(f"compare-anchors: {'FAIL' if failures else 'ok'} ({failures} failed)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
