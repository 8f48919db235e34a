#!/usr/bin/env python3
"""Compares a `blockfp8 bench --device cuda --json` file with the anchor table of shared/BENCHMARKS.md, or with
another JSON of the same records measured in the same run.

    scripts/compare-anchors.py BENCH_JSON [BENCHMARKS_MD] [--backend NAME] [--column triton|cuBLASLt|DeepGEMM]
    scripts/compare-anchors.py BENCH_JSON --against BASELINE_JSON [--backend NAME] [--against-backend triton]

Prints, per DeepSeek-R1 cell, the backend's median time, the baseline's time and their ratio (baseline time /
backend time: above 1 means the backend is faster), then how many cells are at least as fast and the geometric mean.
The anchors come from another run on the same machine: BENCHMARKS.md puts the run-to-run spread at 10-15%, so a
ratio near 1 is a tie, not a result. --against takes the baseline from records of the same run instead, e.g. those
of bench/triton_baseline.py.
"""
import argparse
import json
import math
import os
import sys


def anchors(path, column):
    rows, header = {}, None
    for line in open(path, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 4 and cells[0] == "M" and cells[1] == "N":
            header = cells
            continue
        if header and len(cells) == len(header) and cells[0].isdigit():
            value = cells[header.index(column + " µs")]
            if value != "n/a":
                rows[(int(cells[0]), int(cells[1]), int(cells[2]))] = float(value)
    if not rows:
        sys.exit(f"compare-anchors: no '{column} µs' column with rows in {path}")
    return rows


def records(path, backend):
    """{(m, n, k): median_us} of one backend's records in a bench JSON."""
    rows = {(r["m"], r["n"], r["k"]): r["median_us"] for r in json.load(open(path)) if r["backend"] == backend}
    if not rows:
        sys.exit(f"compare-anchors: no records of backend '{backend}' in {path}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_json")
    ap.add_argument("benchmarks_md", nargs="?",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                                         "BENCHMARKS.md"))
    ap.add_argument("--backend", default="cuda_generic")
    ap.add_argument("--column", default="triton", choices=["triton", "cuBLASLt", "DeepGEMM"])
    ap.add_argument("--against", metavar="BASELINE_JSON", help="baseline records of the same run")
    ap.add_argument("--against-backend", default="triton")
    a = ap.parse_args()
    if a.against:
        ref, label = records(a.against, a.against_backend), f"{a.against_backend} (same run)"
    else:
        ref, label = anchors(a.benchmarks_md, a.column), f"{a.column} anchor"
    runs = records(a.bench_json, a.backend)
    print(f"| M | N | K | {a.backend} µs | {label} µs | {a.backend} vs {label} |")
    print("|---|---|---|---|---|---|")
    logs, wins = [], 0
    for key, us in runs.items():
        if key not in ref:
            continue
        ratio = ref[key] / us
        logs.append(math.log(ratio))
        wins += ratio >= 1.0
        print(f"| {key[0]} | {key[1]} | {key[2]} | {us:.1f} | {ref[key]:.1f} | {ratio:.2f}x |")
    if not logs:
        sys.exit(f"compare-anchors: no cell of {a.bench_json} is in the baseline")
    print(f"\n{a.backend} at least as fast as the {label} in {wins} of {len(logs)} cells; "
          f"geometric mean {math.exp(sum(logs) / len(logs)):.2f}x")


if __name__ == "__main__":
    main()
