"""python -m blockfp8.plot on tables `blockfp8 bench --json` wrote (the repository's H200 and CPU files) and on
a small table made here; bad files are refused with a message."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("matplotlib")
from blockfp8 import plot  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def run(*args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "blockfp8.plot", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("name", ["h200-bench-v21-final.json", "cpu.json"])
def test_plots_repository_tables(tmp_path, name):
    src = os.path.join(ROOT, "bench", name)
    if not os.path.exists(src):
        pytest.skip(f"{src} is not in this checkout")
    out = tmp_path / "t.png"
    proc = run(src, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    assert data.startswith(PNG) and len(data) > 20000


def test_table_and_floors(tmp_path):
    records = [
        {"backend": "cublaslt", "m": 1, "n": 2112, "k": 7168, "out_dtype": "bf16", "median_us": 24.0},
        {"backend": "hopper", "m": 1, "n": 2112, "k": 7168, "out_dtype": "bf16", "median_us": 10.0},
        {"backend": "hopper", "m": 1, "n": 2112, "k": 7168, "out_dtype": "bf16", "median_us": 12.0},
        {"backend": "hopper", "m": 1, "n": 2112, "k": 7168, "out_dtype": "bf16", "median_us": 11.0},
        {"backend": "hopper", "m": 16, "n": 2112, "k": 7168, "out_dtype": "f32", "median_us": 99.0},
    ]
    cells, dtype = plot.table(records)
    assert dtype == "bf16"
    us, tbs, tflops = cells[(2112, 7168)]["hopper"][1]
    assert us == 11.0  # the median of the three runs; the f32 record is another table
    assert tbs == pytest.approx((2112 * 7168 + 7168 + 2 * 2112) / 11.0 * 1e-6)
    assert 16 not in cells[(2112, 7168)]["hopper"]
    # the floor (bench/data/README.md): bytes at 4.25 TB/s (M=1 2112x7168: 3.6 us)
    assert plot.floor_us(1, 2112, 7168, 2, 4.25, 1979) == pytest.approx(3.56, abs=0.01)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(records))
    proc = run(str(path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b.png").read_bytes().startswith(PNG)


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a table"}')
    proc = run(str(bad))
    assert proc.returncode == 1 and "not a bench table" in proc.stderr
    bad.write_text('[{"model": "dsr1"}]')
    proc = run(str(bad))
    assert proc.returncode == 1 and "no GEMM records" in proc.stderr
    proc = run(str(tmp_path / "missing.json"))
    assert proc.returncode == 1 and "missing.json" in proc.stderr
