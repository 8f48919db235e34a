"""The same bytes as the C command-line tool on the same data: `blockfp8 quantize` (codes and row-major fp32
scales) and `blockfp8 linear` (bfp8_linear), against the numpy path and the torch path."""
import os
import subprocess

import numpy as np
import pytest

import blockfp8
from conftest import cli_path, torch
from oracle import ST_DTYPES, codes, from_numpy, random_input, st_read, st_write, to_numpy

CLI = cli_path()
pytestmark = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason=f"{CLI} is not built (make cli)")

SHAPES = [(1, 1), (3, 300), (16, 7168), (129, 255), (2112, 300), (7, 128), (200, 1000)]


def run_cli(tmp_path, kind, x, dtype, scale_format):
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    st_write(str(src), {"x": (dtype, x.astype(ST_DTYPES[dtype]))})
    # --tensor x: without it `quantize --kind weight` converts only tensors named *.weight
    proc = subprocess.run([CLI, "quantize", "--kind", kind, "--in", str(src), "--out", str(dst), "--scale-format",
                           scale_format, "--tensor", "x"], capture_output=True, text=True)
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


@pytest.mark.parametrize("out", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("backend", ["cpu", "ref"])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_matches_cli(tmp_path, rng, out, backend, bias):
    """`blockfp8 linear` (bfp8_linear in C) and the Python layer and functions give the same bytes."""
    import blockfp8
    from oracle import BF16, BLOCK, FP8, quantize

    m, n, k = 5, 300, 700
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    qw, sw, _ = quantize(w, BLOCK, False)
    x = rng.standard_normal((m, k)).astype(BF16)
    tensors = {"layer.weight": ("F8_E4M3", qw.view(FP8)), "layer.weight_scale_inv": ("F32", sw)}
    b = (rng.standard_normal(n)).astype(BF16)
    if bias:
        tensors["layer.bias"] = ("BF16", b)
    wpath, xpath, ypath = (str(tmp_path / f) for f in ("w.safetensors", "x.safetensors", "y.safetensors"))
    st_write(wpath, tensors)
    st_write(xpath, {"hidden": ("BF16", x)})
    cmd = [CLI, "linear", "--weights", wpath, "--weight", "layer.weight", "--in", xpath, "--input", "hidden",
           "--out", ypath, "--out-dtype", out, "--backend", backend, "--strict"]
    if bias:
        cmd += ["--bias", "layer.bias"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    want = st_read(ypath)["y"][1]
    dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[out]
    layer = blockfp8.Linear.from_safetensors(wpath, "layer.weight", bias="layer.bias" if bias else None)
    with blockfp8.policy("strict", backend):
        got = {"Linear": layer(x, out_dtype=dtype)}
        if out == "bf16":  # apply_w8a8_block_fp8_linear's output has the input's dtype
            got["apply_w8a8_block_fp8_linear"] = blockfp8.apply_w8a8_block_fp8_linear(
                x, qw.view(FP8), [128, 128], sw, bias=b if bias else None)
        if torch is not None:
            got["Linear (torch)"] = layer(from_numpy(x), out_dtype=dtype)
    for what, y in got.items():
        y = y if isinstance(y, np.ndarray) else to_numpy(y)
        np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8), err_msg=what)


EXPLAIN_CASES = [  # (explain() keywords, the CLI's flags)
    (dict(m=16, n=2112, k=7168), []),
    (dict(m=1, n=129, k=100, out_dtype="fp32", scale_format="ue8m0"), ["--out-dtype", "fp32", "--scale-format",
                                                                       "ue8m0"]),
    (dict(m=16, n=2112, k=7168, device="cuda", arch=90, bias="bf16"), ["--device", "cuda", "--arch", "90", "--bias",
                                                                       "--bias-dtype", "bf16"]),
    (dict(m=4096, n=7168, k=2048, device="cuda", arch=90, gemm=True), ["--device", "cuda", "--arch", "90", "--gemm"]),
    (dict(m=128, n=7168, k=16384, device="cuda", arch=90, card="NVIDIA H100 80GB HBM3"),
     ["--device", "cuda", "--arch", "90", "--card", "NVIDIA H100 80GB HBM3"]),
]


@pytest.mark.parametrize("case", range(len(EXPLAIN_CASES)))
def test_explain_text_is_the_cli_table(case):
    import blockfp8

    kwargs, flags = EXPLAIN_CASES[case]
    proc = subprocess.run([CLI, "explain", "--m", str(kwargs["m"]), "--n", str(kwargs["n"]), "--k", str(kwargs["k"])]
                          + flags, capture_output=True, text=True)
    assert str(blockfp8.explain(**kwargs)) == proc.stdout
