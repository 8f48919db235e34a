#!/usr/bin/env python3
"""Checks the measured ranking's data and its generator (scripts/make-rank-table.py): src/rank_table.c is what
bench/data/rank-*.csv generate; the seed table is the side-by-side run's hopper and blockfp8 cuBLASLt columns;
a bench JSON becomes the rows and C cells it should (n/a cells empty, records sorted, --merge keeping the other
shapes); and every malformed input fails with a message instead of a table.

    python3 tests/crosscheck_rank_table.py [--build DIR]   (DIR unused: no binary is involved)
"""
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "make-rank-table.py")
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


def rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def record(backend, m, n, k, us, out="bf16", **extra):
    return dict(backend=backend, m=m, n=n, k=k, out_dtype=out, median_us=us, tflops=1.0, gbs=1.0, **extra)


def c_cells(path):
    """The cells of a generated C file: [(arch, card, dtype, n, k, m, source, (times...))], its backends and cards."""
    text = open(path, encoding="utf-8").read()
    cells = []
    for m in re.finditer(r"\{(\d+), (\d+), BFP8_DTYPE_(\w+), (\d+), (\d+), (\d+), (\d+), \{([^}]*)\}\},", text):
        times = tuple(float(t) for t in m.group(8).split(", "))
        cells.append((int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(5)),
                      int(m.group(6)), int(m.group(7)), times))
    backends = re.search(r"kBackends\[\] = \{(.*?)\};", text).group(1)
    cards = re.search(r"kCards\[\] = \{(.*?)\};", text).group(1)
    return cells, re.findall(r'"([^"]+)"', backends), re.findall(r'"([^"]+)"', cards)


def check_repo():
    rc, out, err = run("check")
    check(rc == 0, f"src/rank_table.c does not match bench/data/rank-*.csv: {err}")
    table = os.path.join(DATA, "rank-h200.csv")
    cells, backends, cards = c_cells(os.path.join(ROOT, "src", "rank_table.c"))
    tables = [os.path.join(DATA, f) for f in os.listdir(DATA) if re.match(r"rank-.*\.csv$", f)]
    check(len(cells) == sum(len(rows(p)) for p in tables), "src/rank_table.c: a cell count other than the CSVs' rows")
    check({"hopper", "cublaslt"} <= set(backends), f"src/rank_table.c backends {backends}")
    csv_cards = {r["card"] for p in tables for r in rows(p)}
    check(cards and cards[0] == "NVIDIA H200" and set(cards) == csv_cards, f"src/rank_table.c cards {cards}")
    # While the table is the seed, it is the side-by-side run's two columns, exactly.
    t = rows(table)
    if {r["source"] for r in t} == {"side-by-side-h200-2026-12-04"}:
        side_csv = os.path.join(DATA, "side-by-side-h200-2026-12-04.csv")
        side = {(int(r["m"]), int(r["n"]), int(r["k"])): r for r in rows(side_csv)}
        check(len(t) == len(side) == 48, f"seed: {len(t)} rows for {len(side)} side-by-side cells")
        for r in t:
            s = side.get((int(r["m"]), int(r["n"]), int(r["k"])))
            check(s and r["arch"] == "90" and r["card"] == "NVIDIA H200" and r["out_dtype"] == "bf16" and
                  float(r["hopper_us"]) == float(s["hopper_us"]) and
                  float(r["cublaslt_us"]) == float(s["blockfp8_cublaslt_us"]), f"seed row {r} against {s}")
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run("side-by-side", side_csv, "--arch", "90", "--card", "NVIDIA H200",
                               "--csv", os.path.join(d, "rank-h200.csv"), "--c-out", os.path.join(d, "t.c"))
            check(rc == 0 and open(os.path.join(d, "rank-h200.csv")).read() == open(table).read(),
                  f"the seed does not regenerate bench/data/rank-h200.csv: {err}")


def check_json():
    with tempfile.TemporaryDirectory() as d:
        bench = os.path.join(d, "bench.json")
        csv_path = os.path.join(d, "rank-test.csv")
        c_out = os.path.join(d, "rank_table.c")
        recs = [record("cublaslt", 1, 2112, 7168, 18.0, baseline_ratio=1.0),
                record("hopper", 1, 2112, 7168, 10.25, baseline_ratio=1.75),
                record("cuda_generic", 1, 2112, 7168, 40.0),
                record("hopper", 4096, 2112, 7168, 100.5),  # cublaslt n/a here
                record("hopper", 0, 2112, 7168, 3.0),  # M=0: an empty problem, left out
                record("cublaslt", 16, 512, 256, 5.0, out="f16"),
                record("hopper", 16, 512, 256, 6.0, out="f16")]
        json.dump(recs, open(bench, "w"))
        where = ["--csv", csv_path, "--c-out", c_out]
        args = ["--arch", "90", "--card", "Test GPU", "--source", "test-run", *where]
        rc, out, err = run("json", bench, *args)
        check(rc == 0, f"json: {err}")
        t = rows(csv_path)
        check([(r["n"], r["k"], r["m"], r["out_dtype"]) for r in t] ==
              [("2112", "7168", "1", "bf16"), ("2112", "7168", "4096", "bf16"), ("512", "256", "16", "f16")],
              f"json: rows out of order or missing: {t}")
        check(list(t[0]) == ["arch", "card", "out_dtype", "n", "k", "m", "source", "cublaslt_us", "cuda_generic_us",
                             "hopper_us"], f"json: columns {list(t[0])}")
        check(t[0]["hopper_us"] == "10.25" and t[0]["cublaslt_us"] == "18" and t[1]["cublaslt_us"] == "" and
              t[1]["source"] == "test-run" and t[0]["card"] == "Test GPU", f"json: values {t}")
        cells, backends, cards = c_cells(c_out)
        check(backends == ["cublaslt", "cuda_generic", "hopper"], f"json C backends {backends}")
        check(cards == ["Test GPU"], f"json C cards {cards}")
        check(cells == [(90, 0, "BF16", 2112, 7168, 1, 0, (18.0, 40.0, 10.25)),
                        (90, 0, "BF16", 2112, 7168, 4096, 0, (0.0, 0.0, 100.5)),
                        (90, 0, "F16", 512, 256, 16, 0, (5.0, 0.0, 6.0))], f"json C cells {cells}")
        # --merge: a run of one shape replaces that shape's cells and keeps the others; a run on another card
        # replaces none of this card's.
        json.dump([record("hopper", 64, 2112, 7168, 12.0)], open(bench, "w"))
        rc, out, err = run("json", bench, "--arch", "90", "--card", "Test GPU", "--source", "other-run", *where,
                           "--merge")
        t = rows(csv_path)
        check(rc == 0 and [(r["n"], r["m"], r["source"]) for r in t] ==
              [("2112", "64", "other-run"), ("512", "16", "test-run")], f"--merge: {err} {t}")
        rc, out, err = run("json", bench, "--arch", "90", "--card", "Second GPU", "--source", "second-run", *where,
                           "--merge")
        t = rows(csv_path)
        check(rc == 0 and [(r["card"], r["n"], r["m"]) for r in t] ==
              [("Second GPU", "2112", "64"), ("Test GPU", "2112", "64"), ("Test GPU", "512", "16")],
              f"--merge of another card: {err} {t}")
        before = open(csv_path).read()
        rc, out, err = run("json", bench, *args)
        check(rc != 0 and "Second GPU" in err and open(csv_path).read() == before,
              f"without --merge, a run of one card over a table holding another's: {rc} {err}")
        os.remove(csv_path)
        run("json", bench, *args)
        rc, out, err = run("json", bench, *args)
        check(rc == 0 and len(rows(csv_path)) == 1, f"without --merge the run replaces its card's table: {err}")
        # Two tables of two cards: the reference card first in the C file, then the others by name, and each
        # cell with its card's index.
        json.dump([record("hopper", 1, 2112, 7168, 9.0), record("cublaslt", 1, 2112, 7168, 8.0)], open(bench, "w"))
        rc, out, err = run("json", bench, "--arch", "90", "--card", "NVIDIA H200", "--source", "ref-run",
                           "--csv", os.path.join(d, "rank-ref.csv"), "--c-out", c_out)
        cells, backends, cards = c_cells(c_out)
        check(rc == 0 and cards == ["NVIDIA H200", "Test GPU"], f"two cards: {err} {cards}")
        check([c[:2] + c[5:6] for c in cells] == [(90, 0, 1), (90, 1, 64)], f"two cards' cells {cells}")
        os.remove(os.path.join(d, "rank-ref.csv"))
        rc, out, err = run("c", "--data", d, "--c-out", c_out)
        check(rc == 0 and c_cells(c_out)[2] == ["Test GPU"], f"one card again: {err}")

        bad = {
            "the same cell twice": [record("hopper", 1, 2112, 7168, 10.0), record("hopper", 1, 2112, 7168, 11.0)],
            "not positive": [record("hopper", 1, 2112, 7168, 0.0)],
            "a CPU record": [record("cpu", 1, 2112, 7168, 10.0)],
            "a --model record": [dict(model="dsr1", batch=1, layer="q_b", n=1, k=1, backend="hopper", median_us=1)],
            "a variant": [record("hopper", 1, 2112, 7168, 10.0, variant="x")],
            "no median": [{"backend": "hopper", "m": 1, "n": 2112, "k": 7168, "out_dtype": "bf16"}],
            "an odd dtype": [record("hopper", 1, 2112, 7168, 10.0, out="e4m3")],
            "only M = 0": [record("hopper", 0, 2112, 7168, 10.0)],
            "M beyond 2^31": [record("hopper", 1 << 31 | 1, 2112, 7168, 10.0)],
            "nine backends": [record(f"b{i}", 1, 2112, 7168, 10.0) for i in range(9)],
            "no records": [],
        }
        before = open(csv_path).read()
        for what, recs in bad.items():
            json.dump(recs, open(bench, "w"))
            rc, out, err = run("json", bench, *args)
            check(rc != 0 and err.startswith("make-rank-table: "), f"{what}: rc {rc}, '{err.strip()}'")
        with open(bench, "w") as f:
            f.write('[\n  {"backend": "hopper", "m": 1')  # an interrupted run
        rc, out, err = run("json", bench, *args)
        check(rc != 0 and "unterminated" in err, f"interrupted JSON: {err}")
        check(open(csv_path).read() == before, "a failed run changed the table")
        rc, out, err = run("json", bench, "--card", "Test GPU", "--source", "x", *where)
        check(rc != 0, "json without --arch")
        rc, out, err = run("json", bench, "--arch", "90", "--source", "x", *where)
        check(rc != 0 and "--card" in err, f"json without --card: {err}")
        rc, out, err = run("json", bench, "--arch", "90", "--card", "T", "--source", "x")
        check(rc != 0 and "--csv" in err, f"json without --csv: {err}")
        rc, out, err = run("json", bench, "--arch", "90", "--card", "a/b", "--source", "x", *where)
        check(rc != 0 and "card" in err, f"a card with a slash: {err}")
        rc, out, err = run("json", bench, "--arch", "90", "--card", "T", "--source", "x", "--csv",
                           os.path.join(d, "t.csv"))
        check(rc != 0 and "rank-" in err, f"a CSV not named rank-*.csv: {err}")
        rc, out, err = run("json", bench, "--arch", "90", "--card", "T", "--source", "has space", "--csv", csv_path)
        check(rc != 0 and "--source" in err, f"a source with a space: {err}")
        # check notices a stale C file.
        with open(c_out, "a") as f:
            f.write("/* edited */\n")
        rc, out, err = run("check", "--data", d, "--c-out", c_out)
        check(rc != 0 and "make-rank-table.py c" in err, f"check of a stale C file: {err}")


def main():
    check_repo()
    check_json()
    print(f"crosscheck_rank_table: {'ok' if not failures else f'{failures} failures'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
