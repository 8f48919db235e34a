#!/usr/bin/env python3
"""Cross-checks `blockfp8 quantize` and `blockfp8 linear` against an independent numpy implementation of
docs/numerics.md.

quantize: the bytes and scales must be bit-exact (E4M3 RNE via ml_dtypes after clipping to +-448; non-finite
inputs -> NaN with their sign, never in a scale; amax over the finite values that exist; s = amax / 448 in
float32; UE8M0 = ceil to a power of two). linear: y must match a float64 computation of the block-scaled GEMM
from the quantized operands within the tolerance of the output dtype, and calc_diff vs the unquantized product
must be under 1e-3.

Files are written and read with this script's own minimal safetensors code (numpy + json + struct), so nothing
is shared with the library under test. Fresh random data per run; the seed is printed (CROSSCHECK_SEED replays).
Usage: python3 tests/crosscheck_cli.py --build build
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

from numpy_ref import BLOCK, Tally, quantize

TOLERANCE_CPU = {"BF16": 8e-3, "F16": 1e-3, "F32": 1e-5}
CALC_DIFF_LIMIT = 1e-3

# ---------------------------------------------------------------------------------------------------------------
# Minimal safetensors I/O
# ---------------------------------------------------------------------------------------------------------------
DTYPES = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "I32": np.dtype("<i4"),
    "U8": np.dtype("u1"),
}


def st_write(path, tensors):
    """tensors: dict name -> (dtype name, numpy array)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, array) in tensors.items():
        data = np.ascontiguousarray(array.astype(DTYPES[dtype], copy=False)).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def st_read(path):
    """Returns dict name -> (dtype name, numpy array)."""
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    base = 8 + length
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(raw[base + begin : base + end], dtype=DTYPES[info["dtype"]])
        out[name] = (info["dtype"], array.reshape(info["shape"]))
    return out


# ---------------------------------------------------------------------------------------------------------------
# The block-scaled GEMM in float64 (the quantizer is tests/numpy_ref.py's)
# ---------------------------------------------------------------------------------------------------------------
def dequant(codes, scales, rows_per_block):
    values = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    rows, k = codes.shape
    full = np.repeat(np.repeat(scales.astype(np.float64), rows_per_block, axis=0), BLOCK, axis=1)[:rows, :k]
    return values * full


def block_gemm(qa, sa, qb, sb, bias):
    """y[m,n] = sum_kb sa[m,kb] * sb[n/128,kb] * sum_{k in kb} qa[m,k] qb[n,k] (+ bias), float64."""
    m, k = qa.shape
    n = qb.shape[0]
    a = qa.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    b = qb.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    y = np.zeros((m, n))
    for kb in range(-(-k // BLOCK)):
        part = a[:, kb * BLOCK : (kb + 1) * BLOCK] @ b[:, kb * BLOCK : (kb + 1) * BLOCK].T
        y += part * sa[:, kb : kb + 1].astype(np.float64) * np.repeat(sb[:, kb].astype(np.float64), BLOCK)[:n]
    if bias is not None:
        y += bias.astype(np.float64)
    return y


def calc_diff(x, y):
    x, y = x.astype(np.float64), y.astype(np.float64)
    return 1.0 - 2.0 * (x * y).sum() / (x * x + y * y).sum()


# ---------------------------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------------------------
def random_input(rng, rows, k, specials):
    """Normal values whose rows span 2^-20..2^20 (subnormal E4M3 codes and huge scales both occur)."""
    x = rng.standard_normal((rows, k)).astype(np.float32)
    x *= np.exp2(rng.integers(-20, 21, size=(rows, 1))).astype(np.float32)
    if specials and rows * k >= 8:
        flat = x.reshape(-1)
        idx = rng.choice(rows * k, size=min(8, rows * k), replace=False)
        flat[idx[0]] = np.nan
        flat[idx[1]] = np.inf
        flat[idx[2]] = -np.inf
        flat[idx[3]] = -0.0
        flat[idx[4]] = -np.nan  # a NaN with the sign bit set
        flat[idx[5]] = 1e-30  # far below every scale: rounds to a signed zero
        if k > BLOCK:  # a group of zeros: the 1e-10 amax floor
            x[0, :BLOCK] = 0.0
    return x


def run(cmd, expect_rc=0):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode == expect_rc, proc


def crosscheck_quantize(cli, tmp, rng, tally):
    # (rows, K) pairs: ragged K (300, 255, 1), N = 2112 (16.5 weight blocks), single rows.
    shapes = [(1, 1), (3, 300), (16, 7168), (129, 255), (2112, 300), (7, 128), (200, 1000)]
    dtypes = ["F32", "BF16", "F16"]
    for i, (rows, k) in enumerate(shapes):
        for kind in ("act", "weight"):
            for scale_format in ("fp32", "ue8m0"):
                dtype = dtypes[(i + (kind == "weight")) % 3]
                x = random_input(rng, rows, k, specials=True)
                if dtype == "F16":  # keep inside fp16's range (finite values beyond it would be inf)
                    x = np.where(np.isfinite(x), np.clip(x, -60000, 60000), x).astype(np.float32)
                stored = x.astype(DTYPES[dtype])
                src, dst = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
                extra_1d = rng.standard_normal(5).astype(np.float32)
                extra_i32 = rng.integers(-1000, 1000, size=(2, 3)).astype(np.int32)
                # Weights are quantized by default only when named like a linear layer's weight.
                tname = "x" if kind == "act" else "layer.weight"
                st_write(src, {tname: (dtype, stored), "bias": ("F32", extra_1d), "ids": ("I32", extra_i32)})
                what = f"quantize --kind {kind} {dtype} [{rows},{k}] {scale_format}"
                ok, proc = run([cli, "quantize", "--kind", kind, "--in", src, "--out", dst,
                                "--scale-format", scale_format])
                if not tally.check(ok, f"{what}: rc {proc.returncode}: {proc.stderr.strip()}"):
                    continue
                got = st_read(dst)
                rows_per_block = 1 if kind == "act" else BLOCK
                want_q, want_s, nonfinite = quantize(stored.astype(np.float32), rows_per_block, scale_format == "ue8m0")
                scale_name = tname + ("_scale" if kind == "act" else "_scale_inv")
                tally.check(set(got) == {tname, scale_name, "bias", "ids"}, f"{what}: tensors {sorted(got)}")
                if tname not in got or scale_name not in got:
                    continue
                q_dtype, q = got[tname]
                s_dtype, s = got[scale_name]
                tally.check(q_dtype == "F8_E4M3" and q.shape == (rows, k), f"{what}: {tname} is {q_dtype} {q.shape}")
                tally.check(s_dtype == "F32" and s.shape == want_s.shape,
                            f"{what}: {scale_name} is {s_dtype} {s.shape}, want F32 {want_s.shape}")
                if q.shape == want_q.shape:
                    diff = np.flatnonzero(q.view(np.uint8) != want_q)
                    tally.check(diff.size == 0, f"{what}: {diff.size} byte(s) differ, first at {diff[:5]}: "
                                f"got {q.view(np.uint8).reshape(-1)[diff[:5]]}, want {want_q.reshape(-1)[diff[:5]]}")
                if s.shape == want_s.shape:
                    sdiff = np.flatnonzero(s.view(np.uint32) != want_s.view(np.uint32))
                    tally.check(sdiff.size == 0, f"{what}: {sdiff.size} scale(s) differ: got "
                                f"{s.reshape(-1)[sdiff[:3]]}, want {want_s.reshape(-1)[sdiff[:3]]}")
                # Other tensors are copied through unchanged.
                tally.check("bias" in got and got["bias"][0] == "F32" and np.array_equal(got["bias"][1], extra_1d),
                            f"{what}: 1-D tensor not copied through")
                tally.check("ids" in got and got["ids"][0] == "I32" and np.array_equal(got["ids"][1], extra_i32),
                            f"{what}: I32 tensor not copied through")
                if nonfinite:
                    tally.check(str(nonfinite) in proc.stderr and "non-finite" in proc.stderr,
                                f"{what}: stderr does not report {nonfinite} non-finite values: {proc.stderr!r}")


def crosscheck_linear(cli, tmp, rng, tally):
    # (M, N, K, out dtype, bias dtype or None)
    cases = [(16, 2112, 7168, "BF16", "BF16"), (5, 320, 300, "F32", None), (1, 129, 1000, "F16", "F32"),
             (3, 2112, 384, "F32", "F16")]
    for m, n, k, out_dtype, bias_dtype in cases:
        what = f"linear M={m} N={n} K={k} out={out_dtype} bias={bias_dtype}"
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        qw, sw, _ = quantize(w, BLOCK, False)
        x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        weights = {"layer.weight": ("F8_E4M3", qw.view(ml_dtypes.float8_e4m3fn)),
                   "layer.weight_scale_inv": ("F32", sw)}
        bias = None
        args = []
        if bias_dtype:
            bias = (rng.standard_normal(n) * 0.5).astype(DTYPES[bias_dtype])
            weights["layer.bias"] = (bias_dtype, bias)
            args = ["--bias", "layer.bias"]
        wpath, xpath, ypath = (os.path.join(tmp, f) for f in ("w.safetensors", "x.safetensors", "y.safetensors"))
        st_write(wpath, weights)
        st_write(xpath, {"hidden": ("BF16", x)})
        dtype_flag = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}[out_dtype]
        ok, proc = run([cli, "linear", "--weights", wpath, "--weight", "layer.weight", "--in", xpath, "--input",
                        "hidden", "--out", ypath, "--out-dtype", dtype_flag] + args)
        if not tally.check(ok, f"{what}: rc {proc.returncode}: {proc.stderr.strip()}"):
            continue
        got = st_read(ypath)
        if not tally.check(set(got) == {"y"} and got["y"][0] == out_dtype and got["y"][1].shape == (m, n),
                           f"{what}: output tensors {[(k_, v[0], v[1].shape) for k_, v in got.items()]}"):
            continue
        y = got["y"][1].astype(np.float64)
        qx, sx, _ = quantize(x.astype(np.float32), 1, False)  # activations take the weight's scale format
        want = block_gemm(qx, sx, qw, sw, bias)
        rel = np.linalg.norm(y - want) / np.linalg.norm(want)
        tally.check(np.isfinite(y).all(), f"{what}: non-finite outputs")
        tally.check(rel <= TOLERANCE_CPU[out_dtype],
                    f"{what}: relative Frobenius error vs the float64 block GEMM {rel:.3e} > "
                    f"{TOLERANCE_CPU[out_dtype]:.0e}")
        exact = x.astype(np.float64) @ w.astype(np.float64).T
        if bias is not None:
            exact += bias.astype(np.float64)
        diff = calc_diff(y, exact)
        tally.check(diff < CALC_DIFF_LIMIT, f"{what}: calc_diff vs the unquantized product {diff:.3e}")
        print(f"  {what}: rel err vs float64 block GEMM {rel:.2e}, calc_diff vs unquantized {diff:.2e}")


def crosscheck_ue8m0_pipeline(cli, tmp, rng, tally):
    """quantize --scale-format ue8m0, then linear --scale-format ue8m0: the activations are quantized with UE8M0
    scales too (the true UE8M0 pipeline), on inputs with leading dimensions [2, 3, K] -> y [2, 3, N]."""
    n, k = 2112, 384
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    x = rng.standard_normal((2, 3, k)).astype(ml_dtypes.bfloat16)
    src, wq, xpath, ypath = (os.path.join(tmp, f) for f in ("w32.safetensors", "w8.safetensors", "x3.safetensors",
                                                            "y3.safetensors"))
    st_write(src, {"model.layers.0.mlp.down_proj.weight": ("F32", w)})
    st_write(xpath, {"hidden": ("BF16", x)})
    ok, proc = run([cli, "quantize", "--kind", "weight", "--in", src, "--out", wq, "--scale-format", "ue8m0"])
    if not tally.check(ok, f"ue8m0 quantize: rc {proc.returncode}: {proc.stderr.strip()}"):
        return
    got_w = st_read(wq)
    qw = got_w["model.layers.0.mlp.down_proj.weight"][1].view(np.uint8)
    sw = got_w["model.layers.0.mlp.down_proj.weight_scale_inv"][1]
    x2 = x.astype(np.float32).reshape(6, k)
    exact = x2.astype(np.float64) @ w.astype(np.float64).T
    for fmt in ("ue8m0", "fp32"):
        what = f"linear --scale-format {fmt} on UE8M0-quantized weights, x [2, 3, {k}]"
        ok, proc = run([cli, "linear", "--weights", wq, "--weight", "model.layers.0.mlp.down_proj.weight", "--in",
                        xpath, "--input", "hidden", "--out", ypath, "--out-dtype", "fp32", "--scale-format", fmt])
        if not tally.check(ok, f"{what}: rc {proc.returncode}: {proc.stderr.strip()}"):
            continue
        got = st_read(ypath)
        if not tally.check(set(got) == {"y"} and got["y"][1].shape == (2, 3, n), f"{what}: y {got.get('y', (0, 0))[1]}"):
            continue
        y = got["y"][1].astype(np.float64).reshape(6, n)
        # The activations take the declared format: with ue8m0, power-of-two scales per 1x128 group.
        qx, sx, _ = quantize(x2, 1, fmt == "ue8m0")
        want = block_gemm(qx, sx, qw, sw, None)
        other_q, other_s, _ = quantize(x2, 1, fmt != "ue8m0")
        other = block_gemm(other_q, other_s, qw, sw, None)
        rel = np.linalg.norm(y - want) / np.linalg.norm(want)
        rel_other = np.linalg.norm(y - other) / np.linalg.norm(other)
        tally.check(rel <= TOLERANCE_CPU["F32"], f"{what}: rel err vs the {fmt} pipeline {rel:.3e}")
        tally.check(rel_other > 100 * TOLERANCE_CPU["F32"],
                    f"{what}: also matches the other pipeline ({rel_other:.3e}): the format did not take effect")
        diff = calc_diff(y, exact)
        tally.check(diff < CALC_DIFF_LIMIT, f"{what}: calc_diff vs the unquantized product {diff:.3e}")
        print(f"  {what}: rel err vs the {fmt} pipeline {rel:.2e}, vs the other {rel_other:.2e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="build directory holding the blockfp8 binary")
    opts = parser.parse_args()
    cli = os.path.join(opts.build, "blockfp8")
    seed = int(os.environ.get("CROSSCHECK_SEED", "0")) or int.from_bytes(os.urandom(4), "little")
    print(f"crosscheck_cli: seed {seed} (CROSSCHECK_SEED={seed} replays)")
    rng = np.random.default_rng(seed)
    tally = Tally()
    if not os.access(cli, os.X_OK):
        print(f"crosscheck_cli: {cli} is not built", file=sys.stderr)
        tally.failed += 1
    else:
        with tempfile.TemporaryDirectory(prefix="bfp8-crosscheck-") as tmp:
            crosscheck_quantize(cli, tmp, rng, tally)
            crosscheck_linear(cli, tmp, rng, tally)
            crosscheck_ue8m0_pipeline(cli, tmp, rng, tally)
    print(f"crosscheck_cli: {tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
