"""Bit-exact quantization against the C command-line tool on the same data: `blockfp8 quantize` writes codes and
row-major fp32 scales; the numpy path and the torch path must give the same bytes."""
import os
import subprocess

import numpy as np
import pytest

import blockfp8
from conftest import cli_path, torch
from oracle import ST_DTYPES, codes, from_numpy, random_input, st_read, st_write

CLI = cli_path()
pytestmark = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason=f"{CLI} is not built (make cli)")

SHAPES = [(1, 1), (3, 300), (16, 7168), (129, 255), (2112, 300), (7, 128), (200, 1000)]


def run_cli(tmp_path, kind, x, dtype, scale_format):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    st_write(str(src), {"x": (dtype, x.astype(ST_DTYPES[dtype]))})
    proc = subprocess.run([CLI, "quantize", "--kind", kind, "--in", str(src), "--out", str(dst), "--scale-format",
                           scale_format], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = st_read(str(dst))
    return got["x"][1], got["x_scale" if kind == "act" else "x_scale_inv"][1]


@pytest.mark.parametrize("kind", ["act", "weight"])
@pytest.mark.parametrize("scale_format", ["fp32", "ue8m0"])
@pytest.mark.parametrize("shape", SHAPES)
def test_quantize_matches_cli(tmp_path, rng, kind, scale_format, shape):
    dtype = ["F32", "BF16", "F16"][(SHAPES.index(shape) + (kind == "weight")) % 3]
    x = random_input(rng, shape[0], shape[1], specials=True)
    if dtype == "F16":
        x = np.where(np.isfinite(x), np.clip(x, -60000, 60000), x).astype(np.float32)
    stored = x.astype(ST_DTYPES[dtype])
    cli_q, cli_s = run_cli(tmp_path, kind, x, dtype, scale_format)
    ue8m0 = scale_format == "ue8m0"
    fn = (lambda a: blockfp8.per_token_group_quant_fp8(a, scale_ue8m0=ue8m0)) if kind == "act" else \
        (lambda a: blockfp8.per_block_quant_fp8(a, scale_ue8m0=ue8m0))
    results = {"numpy": fn(stored)}
    if torch is not None:
        results["torch"] = fn(from_numpy(stored))
    for path, (q, s) in results.items():
        np.testing.assert_array_equal(codes(q), codes(cli_q), err_msg=path)
        s = s.numpy() if hasattr(s, "numpy") else s
        np.testing.assert_array_equal(s.view(np.uint32), cli_s.view(np.uint32), err_msg=path)
