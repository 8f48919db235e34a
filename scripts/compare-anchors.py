#!/usr/bin/env python3
"""Compares a `blockfp8 bench --device cuda --json` file with the anchor table of shared/BENCHMARKS.md.

    scripts/compare-anchors.py BENCH_JSON [BENCHMARKS_MD] [--backend NAME] [--column triton|cuBLASLt|DeepGEMM]

Prints, per DeepSeek-R1 cell, the backend's median time, the anchor column's time and their ratio (anchor time /
backend time: above 1 means the backend is faster), then how many cells are at least as fast and the geometric mean.
The anchors come from another run on the same machine: BENCHMARKS.md puts the run-to-run spread at 10-15%, so a
ratio near 1 is a tie, not a result.
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_json")
    ap.add_argument("benchmarks_md", nargs="?",
                    default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                                         "BENCHMARKS.md"))
    ap.add_argument("--backend", default="cuda_generic")
    ap.add_argument("--column", default="triton", choices=["triton", "cuBLASLt", "DeepGEMM"])
    a = ap.parse_args()
    ref = anchors(a.benchmarks_md, a.column)
    runs = [r for r in json.load(open(a.bench_json)) if r["backend"] == a.backend]
    if not runs:
        sys.exit(f"compare-anchors: no records of backend '{a.backend}' in {a.bench_json}")
    print(f"| M | N | K | {a.backend} µs | {a.column} µs (anchor) | {a.backend} vs {a.column} |")
    print("|---|---|---|---|---|---|")
    logs, wins = [], 0
    for r in runs:
        key = (r["m"], r["n"], r["k"])
        if key not in ref:
            continue
        ratio = ref[key] / r["median_us"]
        logs.append(math.log(ratio))
        wins += ratio >= 1.0
        print(f"| {key[0]} | {key[1]} | {key[2]} | {r['median_us']:.1f} | {ref[key]:.1f} | {ratio:.2f}x |")
    if logs:
        print(f"\n{a.backend} at least as fast as the {a.column} anchor in {wins} of {len(logs)} cells; "
              f"geometric mean {math.exp(sum(logs) / len(logs)):.2f}x")


if __name__ == "__main__":
    main()
