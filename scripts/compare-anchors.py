#!/usr/bin/env python3
"""Compares a `blockfp8 bench --device cuda --json` file with a column of committed anchor figures, or with records
of another JSON measured in the same run.

    scripts/compare-anchors.py BENCH_JSON [ANCHORS_CSV] [--column NAME] [--backend NAME] [--variant V]
    scripts/compare-anchors.py BENCH_JSON --against BASELINE_JSON [--against-backend triton] [--against-variant V]

ANCHORS_CSV is one of bench/data/*.csv with columns m, n, k and one `<name>_us` column per method; the default is
bench/data/anchors-h200-2026-11-30.csv (triton, cublaslt and deepgemm columns; --column triton by default). The
side-by-side table bench/data/side-by-side-h200-2026-12-04.csv has hopper, auto, blockfp8_cublaslt,
torch_cublaslt and deepgemm. Prints, per cell, the backend's median time, the baseline's and their ratio (baseline
time / backend time: above 1 means the backend is faster), then how many cells are at least as fast and the
geometric mean. Anchors come from another run: bench/data/README.md puts the run-to-run spread at 10-15%, so a
ratio near 1 is a tie, not a result. --against takes the baseline from records of the same run instead, e.g. those
of bench/triton_baseline.py. A JSON that holds several variants of one cell (records with a "variant" field, from
several calls) needs --variant / --against-variant to say which.
"""
import argparse
import csv
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_ANCHORS = os.path.join(ROOT, "bench", "data", "anchors-h200-2026-11-30.csv")


def fail(message):
    sys.exit(f"compare-anchors: {message}")


def load_anchors(path, column):
    """{(m, n, k): us} of one `<column>_us` column of an anchor CSV (empty cells: not measured)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames or []
            key = column.lower() + "_us"
            if not {"m", "n", "k"} <= set(fields):
                fail(f"{path} is not an anchor CSV (no m, n, k columns)")
            if key not in fields:
                names = ", ".join(c[:-3] for c in fields if c.endswith("_us"))
                fail(f"no column '{key}' in {path} (it has: {names})")
            rows = {}
            for r in reader:
                if r[key].strip():
                    rows[(int(r["m"]), int(r["n"]), int(r["k"]))] = float(r[key])
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if not rows:
        fail(f"column '{key}' of {path} has no figures")
    return rows


def load_records(path, backend, variant=None):
    """{(m, n, k): median_us} of one backend's records in a bench JSON (of one variant, if given)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    except ValueError as e:
        fail(f"{path} is not JSON: {e}")
    recs = [r for r in data if r.get("backend") == backend]
    if variant is not None:
        recs = [r for r in recs if r.get("variant") == variant]
    if not recs:
        fail(f"no records of backend '{backend}'" + (f", variant '{variant}'" if variant else "") + f" in {path}")
    rows = {}
    for r in recs:
        key = (r["m"], r["n"], r["k"])
        if key in rows:
            variants = sorted({str(x.get("variant")) for x in recs})
            fail(f"{path} has several '{backend}' records of M={key[0]} {key[1]}x{key[2]} (variants "
                 f"{', '.join(variants)}): choose one with --variant / --against-variant")
        rows[key] = r["median_us"]
    return rows


def compare(runs, ref):
    """Rows (m, n, k, us, ref_us, ratio) of the cells in both, the count at least as fast, and the geomean."""
    rows = [(*key, us, ref[key], ref[key] / us) for key, us in runs.items() if key in ref]
    if not rows:
        return rows, 0, None
    wins = sum(r[5] >= 1.0 for r in rows)
    return rows, wins, math.exp(sum(math.log(r[5]) for r in rows) / len(rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_json")
    ap.add_argument("anchors_csv", nargs="?", default=DEFAULT_ANCHORS)
    ap.add_argument("--backend", default="cuda_generic")
    ap.add_argument("--column", default="triton", help="the anchor CSV's column (its name without _us)")
    ap.add_argument("--variant", help="the bench JSON's records of this variant only")
    ap.add_argument("--against", metavar="BASELINE_JSON", help="baseline records of the same run")
    ap.add_argument("--against-backend", default="triton")
    ap.add_argument("--against-variant", help="the baseline JSON's records of this variant only")
    a = ap.parse_args()
    if a.against:
        ref = load_records(a.against, a.against_backend, a.against_variant)
        label = f"{a.against_backend} (same run)"
    else:
        ref, label = load_anchors(a.anchors_csv, a.column), f"{a.column.lower()} anchor"
    runs = load_records(a.bench_json, a.backend, a.variant)
    rows, wins, geomean = compare(runs, ref)
    if not rows:
        fail(f"no cell of {a.bench_json} is in the baseline")
    print(f"| M | N | K | {a.backend} µs | {label} µs | {a.backend} vs {label} |")
    print("|---|---|---|---|---|---|")
    for m, n, k, us, ref_us, ratio in rows:
        print(f"| {m} | {n} | {k} | {us:.1f} | {ref_us:.1f} | {ratio:.2f}x |")
    print(f"\n{a.backend} at least as fast as the {label} in {wins} of {len(rows)} cells; "
          f"geometric mean {geomean:.2f}x")


if __name__ == "__main__":
    main()
