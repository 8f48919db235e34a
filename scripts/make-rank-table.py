#!/usr/bin/env python3
"""Builds the measured ranking that `auto` uses on CUDA (docs/dispatch.md, "The measured ranking"): a CSV table of
median times per backend under bench/data/, and src/rank_table.c, the same table as C data, generated from it.

    scripts/make-rank-table.py json BENCH.json [BENCH.json ...] --arch 90 --card NAME --source ID --csv FILE
                               [--merge]
        the table FILE (bench/data/rank-<card>.csv, e.g. rank-h200.csv) from `blockfp8 bench --device cuda
        --backend all --json BENCH.json` runs, then src/rank_table.c from every rank-*.csv beside it
    scripts/make-rank-table.py side-by-side CSV --arch 90 --card NAME [--source ID] --csv FILE [--merge]
        the same from a side-by-side table (bench/data/side-by-side-*.csv: its hopper_us and blockfp8_cublaslt_us
        columns, the backends `hopper` and `cublaslt`)
    scripts/make-rank-table.py c
        only src/rank_table.c, from every bench/data/rank-*.csv (after editing one by hand)
    scripts/make-rank-table.py check
        exits 1 when src/rank_table.c is not what the CSVs generate

--c-out and --data name other files and folders than src/rank_table.c and bench/data (for tests).

A bench JSON does not say which GPU ran it, so --arch (the compute capability x10) and --card (the device's name as
the driver reports it: `nvidia-smi --query-gpu=name --format=csv,noheader`, e.g. "NVIDIA H200") label its cells;
--source is a short name for the run that goes into every row (e.g. bench-h200-2026-12-10-abc1234). The table's
rows are (arch, card, out_dtype, n, k, m, source) and one `<backend>_us` column per backend, empty where that
backend did not run the cell (`n/a` in the bench: it cannot). Without --merge the new run replaces the table; with
--merge it replaces only the shapes (arch, card, out_dtype, n, k) it measured, so one shape's cells on one card
always come from one run. The C table lists the reference card (REFERENCE_CARD) first: a card without cells of
its own for a problem's shape and dtype is ranked by the first listed card that has them. The script checks what it reads and fails
with a message: the same cell twice, a time that is not positive, a CPU record.
"""
import argparse
import csv
import glob
import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "data")
C_OUT = os.path.join(ROOT, "src", "rank_table.c")
MAX_BACKENDS = 8  # BFP8_RANK_MAX_BACKENDS in src/rank.h
MAX_M = 1 << 31  # BFP8_RANK_MAX_M: the lookup multiplies two measured M in int64
MAX_DIM = 1 << 62  # BFP8_DIM_MAX
DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "f16": "f16", "fp16": "f16", "float16": "f16", "f32": "f32",
          "fp32": "f32", "float32": "f32"}
C_DTYPE = {"bf16": "BFP8_DTYPE_BF16", "f16": "BFP8_DTYPE_F16", "f32": "BFP8_DTYPE_F32"}
HOST_BACKENDS = {"cpu", "ref", "openblas"}  # a --device cpu run: the table ranks CUDA backends
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
SOURCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,79}$")
CARD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._+()-]{0,79}$")
# The card whose cells rank a card that has none of its own (the project's GPU figures are the H200's).
REFERENCE_CARD = "NVIDIA H200"
KEY = ("arch", "card", "out_dtype", "n", "k", "m")


def fail(message):
    sys.exit(f"make-rank-table: {message}")


def as_int(value, what, lo, hi):
    try:
        v = int(value)
    except (TypeError, ValueError):
        fail(f"{what}: '{value}' is not an integer")
    if isinstance(value, float) and value != v:
        fail(f"{what}: '{value}' is not an integer")
    if not lo <= v <= hi:
        fail(f"{what}: {v} is outside [{lo}, {hi}]")
    return v


def as_time(value, what):
    try:
        v = float(value)
    except (TypeError, ValueError):
        fail(f"{what}: '{value}' is not a time in us")
    if not (math.isfinite(v) and v > 0):
        fail(f"{what}: {value} is not a positive time in us")
    return v


def as_dtype(value, what):
    if not isinstance(value, str) or value.lower() not in DTYPES:
        fail(f"{what}: output dtype '{value}' is not bf16, f16 or f32")
    return DTYPES[value.lower()]


class Table:
    """{(arch, out_dtype, n, k, m): {"source": str, backend: us}}."""

    def __init__(self):
        self.cells = {}

    def add(self, key, source, backend, us, where):
        if not NAME_RE.match(backend):
            fail(f"{where}: backend name '{backend}' is not a backend name")
        if backend in HOST_BACKENDS:
            fail(f"{where}: a record of '{backend}' (a --device cpu run?): the table ranks CUDA backends")
        cell = self.cells.setdefault(key, {"source": source})
        if cell["source"] != source:
            fail(f"{where}: cell {key} comes from two runs ({cell['source']}, {source})")
        if backend in cell:
            fail(f"{where}: {backend} at {dict(zip(KEY, key))} twice: one cell, one measurement")
        cell[backend] = us

    def shapes(self):
        return {key[:5] for key in self.cells}

    def backends(self):
        names = sorted({b for cell in self.cells.values() for b in cell if b != "source"})
        if len(names) > MAX_BACKENDS:
            fail(f"{len(names)} backends ({', '.join(names)}): the C table holds {MAX_BACKENDS}")
        return names


def as_card(value, what):
    if not isinstance(value, str) or not CARD_RE.match(value):
        fail(f"{what}: card '{value}' is not a device name (letters, digits, spaces and ._+()- only, up to 80)")
    return value


def key_of(arch, card, dtype, n, k, m, where):
    return (arch, card, dtype, as_int(n, f"{where}: n", 1, MAX_DIM), as_int(k, f"{where}: k", 1, MAX_DIM),
            as_int(m, f"{where}: m", 1, MAX_M))


def read_bench_json(paths, arch, card, source):
    t = Table()
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                records = json.load(f)
        except (OSError, ValueError) as e:
            fail(f"{path}: not a bench JSON file ({e}); an interrupted run leaves an unterminated array")
        if not isinstance(records, list):
            fail(f"{path}: not a bench JSON array")
        for i, r in enumerate(records):
            where = f"{path} record {i}"
            if not isinstance(r, dict):
                fail(f"{where}: not an object")
            if "batch" in r or "layer" in r:
                fail(f"{where}: a `bench --model` record; the table takes `blockfp8 bench` GEMM records")
            missing = [f for f in ("backend", "m", "n", "k", "out_dtype", "median_us") if f not in r]
            if missing:
                fail(f"{where}: no {', '.join(missing)}")
            if "variant" in r:
                fail(f"{where}: a record with a variant ({r['variant']}): give one plain run")
            if r["m"] == 0:  # an empty problem: its time ranks nothing
                continue
            key = key_of(arch, card, as_dtype(r["out_dtype"], where), r["n"], r["k"], r["m"], where)
            t.add(key, source, str(r["backend"]), as_time(r["median_us"], f"{where}: median_us"), where)
    if not t.cells:
        fail(f"{', '.join(paths)}: no records")
    return t


# The side-by-side table's columns that are this project's backends; the rest (auto, torch, DeepGEMM) are not.
SIDE_BY_SIDE = {"hopper_us": "hopper", "blockfp8_cublaslt_us": "cublaslt"}


def read_side_by_side(path, arch, card, source):
    t = Table()
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        fail(f"{path}: {e}")
    if not rows or not {"m", "n", "k", *SIDE_BY_SIDE} <= set(rows[0]):
        fail(f"{path}: needs the columns m, n, k, {', '.join(SIDE_BY_SIDE)}")
    for i, r in enumerate(rows):
        where = f"{path} row {i + 2}"
        key = key_of(arch, card, "bf16", r["n"], r["k"], r["m"], where)  # bench/data: bf16 output throughout
        for column, backend in SIDE_BY_SIDE.items():
            if r[column].strip():
                t.add(key, source, backend, as_time(r[column], f"{where}: {column}"), where)
    return t


def read_table_csv(path):
    t = Table()
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        ncols = len(KEY) + 1
        if fields[:ncols] != [*KEY, "source"] or not all(c.endswith("_us") for c in fields[ncols:]):
            fail(f"{path}: the columns must be {', '.join(KEY)}, source, <backend>_us...")
        for i, r in enumerate(reader):
            where = f"{path} row {i + 2}"
            key = key_of(as_int(r["arch"], f"{where}: arch", 1, 1000), as_card(r["card"], f"{where}: card"),
                         as_dtype(r["out_dtype"], where), r["n"], r["k"], r["m"], where)
            if not SOURCE_RE.match(r["source"] or ""):
                fail(f"{where}: source '{r['source']}' is not a run name")
            measured = [c for c in fields[ncols:] if (r[c] or "").strip()]
            if not measured:
                fail(f"{where}: no backend measured")
            for c in measured:
                t.add(key, r["source"], c[:-3], as_time(r[c], f"{where}: {c}"), where)
    return t


def write_table_csv(t, path):
    names = t.backends()
    tmp = path + ".tmp"
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow([*KEY, "source", *[b + "_us" for b in names]])
        for key in sorted(t.cells, key=sort_key):
            cell = t.cells[key]
            w.writerow([*key, cell["source"], *[fmt_us(cell[b]) if b in cell else "" for b in names]])
    os.replace(tmp, path)


def card_order(cards):
    """The reference card first, then the others by name."""
    return sorted(cards, key=lambda c: (c != REFERENCE_CARD, c))


def sort_key(key, cards=None):
    arch, card, dtype, n, k, m = key
    return (arch, cards.index(card) if cards else card, ["bf16", "f16", "f32"].index(dtype), n, k, m)


def fmt_us(us):
    """A time to the nanosecond, as bench's JSON writes it, without trailing zeros."""
    return f"{us:.3f}".rstrip("0").rstrip(".")


def table_files(data):
    files = sorted(glob.glob(os.path.join(data, "rank-*.csv")))
    if not files:
        fail(f"no {os.path.relpath(os.path.join(data, 'rank-*.csv'), ROOT)}")
    return files


def c_source(data):
    """src/rank_table.c, from every rank-*.csv of the folder `data`."""
    files = table_files(data)
    t = Table()
    origin = {}  # source -> the CSV it came from
    for path in files:
        part = read_table_csv(path)
        rel = os.path.relpath(path, ROOT)
        for key, cell in part.cells.items():
            if key in t.cells:
                fail(f"{rel}: cell {dict(zip(KEY, key))} is also in {origin[t.cells[key]['source']]}")
            for b, us in cell.items():
                if b != "source":
                    t.add(key, cell["source"], b, us, rel)
            origin.setdefault(cell["source"], rel)
    names = t.backends()
    sources = sorted({cell["source"] for cell in t.cells.values()})
    cards = card_order({key[1] for key in t.cells})
    rels = ", ".join(os.path.relpath(p, ROOT) for p in files)
    out = [
        "/* GENERATED by scripts/make-rank-table.py from " + rels + ": do not edit.",
        " * The measured ranking of `auto` on CUDA (docs/dispatch.md, \"The measured ranking\"): median times per",
        " * backend and cell, as data. Regenerate after a run on the GPU:",
        " *   build/blockfp8 bench --device cuda --backend all --json BENCH.json",
        " *   scripts/make-rank-table.py json BENCH.json --arch 90 --card 'NVIDIA H200' --source NAME --csv CSV",
        " * or, after editing a CSV by hand, scripts/make-rank-table.py c. */",
        '#include "rank.h"',
        "",
        "static const char *const kBackends[] = {" + ", ".join(f'"{b}"' for b in names) + "};",
        "/* Each run, and the CSV that holds its cells. */",
        "static const char *const kSources[] = {",
        *[f'    "{s} ({origin[s]})",' for s in sources],
        "};",
        "/* The cards measured, the reference card first (a card without cells of its own for a problem's shape and",
        " * dtype reads the first listed card's that has them). */",
        "static const char *const kCards[] = {" + ", ".join(f'"{c}"' for c in cards) + "};",
        "",
        "static const bfp8_rank_cell kCells[] = {",
        "    /* arch, card, out dtype, N, K, M, source, {" + ", ".join(names) + "} median us (0: not measured) */",
    ]
    for key in sorted(t.cells, key=lambda key: sort_key(key, cards)):
        arch, card, dtype, n, k, m = key
        cell = t.cells[key]
        times = ", ".join(fmt_us(cell[b]) if b in cell else "0" for b in names)
        out.append(f"    {{{arch}, {cards.index(card)}, {C_DTYPE[dtype]}, {n}, {k}, {m}, "
                   f"{sources.index(cell['source'])}, {{{times}}}}},")
    out += [
        "};",
        "",
        "const bfp8_rank_table bfp8_rank_table_builtin = {",
        "    .backends = kBackends,",
        "    .nbackends = sizeof kBackends / sizeof kBackends[0],",
        "    .sources = kSources,",
        "    .nsources = sizeof kSources / sizeof kSources[0],",
        "    .cards = kCards,",
        "    .ncards = sizeof kCards / sizeof kCards[0],",
        "    .cells = kCells,",
        "    .ncells = sizeof kCells / sizeof kCells[0],",
        "};",
        "",
    ]
    return "\n".join(out)


def write_c(path, data):
    text = c_source(data)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    print(f"make-rank-table: wrote {os.path.relpath(path, ROOT)}")


def write_new_table(t, path, merge, c_out):
    if not merge and os.path.exists(path):
        # A run replaces its own card's table; another card's cells go only with --merge (or to their own file).
        others = sorted({key[1] for key in read_table_csv(path).cells} - {key[1] for key in t.cells})
        if others:
            fail(f"{os.path.relpath(path, ROOT)} holds cells of {', '.join(others)}: without --merge this run would "
                 f"drop them (name the card's own rank-<card>.csv, or pass --merge)")
    if merge and os.path.exists(path):
        old = read_table_csv(path)
        replaced = t.shapes()
        for key, cell in old.cells.items():
            if key[:5] not in replaced:
                for b, us in cell.items():
                    if b != "source":
                        t.add(key, cell["source"], b, us, path)
    t.backends()  # fails before anything is written when there are too many
    write_table_csv(t, path)
    print(f"make-rank-table: wrote {os.path.relpath(path, ROOT)}: {len(t.cells)} cells, backends "
          f"{', '.join(t.backends())}")
    write_c(c_out, os.path.dirname(path))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    for mode in ("json", "side-by-side"):
        p = sub.add_parser(mode)
        p.add_argument("inputs", nargs="+" if mode == "json" else 1)
        p.add_argument("--arch", type=int, required=True, help="compute capability x10 of the GPU that ran it")
        p.add_argument("--card", required=True, help="the GPU's name as the driver reports it, e.g. 'NVIDIA H200'")
        p.add_argument("--source", required=mode == "json", help="a short name for the run")
        p.add_argument("--csv", required=True, help="the card's table to write, bench/data/rank-<card>.csv")
        p.add_argument("--merge", action="store_true", help="keep the table's shapes that the run did not measure")
        p.add_argument("--c-out", default=C_OUT, help="the C file, from every rank-*.csv beside --csv")
    for mode in ("c", "check"):
        p = sub.add_parser(mode)
        p.add_argument("--data", default=DATA, help="the folder of the rank-*.csv files (default bench/data)")
        p.add_argument("--c-out", default=C_OUT, help="the C file (default src/rank_table.c)")
    args = ap.parse_args()

    if args.mode in ("json", "side-by-side"):
        if not 1 <= args.arch <= 1000:
            fail(f"--arch {args.arch}: a compute capability x10, e.g. 90")
        source = args.source or os.path.splitext(os.path.basename(args.inputs[0]))[0]
        if not SOURCE_RE.match(source):
            fail(f"--source '{source}': letters, digits and ._+- only, up to 80")
        csv_path = os.path.abspath(args.csv)
        name = os.path.basename(csv_path)
        if not name.startswith("rank-") or not name.endswith(".csv"):
            fail(f"--csv {args.csv}: name it rank-<device>.csv (the C file is built from every rank-*.csv there)")
        card = as_card(args.card, "--card")
        if args.mode == "json":
            t = read_bench_json(args.inputs, args.arch, card, source)
        else:
            t = read_side_by_side(args.inputs[0], args.arch, card, source)
        write_new_table(t, csv_path, args.merge, os.path.abspath(args.c_out))
    elif args.mode == "c":
        write_c(os.path.abspath(args.c_out), os.path.abspath(args.data))
    else:
        want = c_source(os.path.abspath(args.data))
        c_rel = os.path.relpath(os.path.abspath(args.c_out), ROOT)
        try:
            with open(args.c_out, encoding="utf-8") as f:
                have = f.read()
        except OSError:
            have = None
        if have != want:
            fail(f"{c_rel} is not what the rank-*.csv files generate: run scripts/make-rank-table.py c")
        print(f"make-rank-table: {c_rel} matches the rank-*.csv files")


if __name__ == "__main__":
    main()
