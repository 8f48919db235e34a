#!/usr/bin/env python3
"""Cross-checks libblockfp8's number formats and quantizers against numpy + ml_dtypes (docs/numerics.md).

Usage: python3 tests/crosscheck_formats.py --build build [--seed N]
Loads BUILD/libblockfp8.so with ctypes. Every expected value is computed here, independently of the library:
E4M3 decoding and encoding by ml_dtypes.float8_e4m3fn (after clipping to +-448, since its cast gives NaN rather
than saturating, and with the sign of NaN kept as docs/numerics.md says), cross-checked by a second pure-numpy nearest-code
encoder; bf16/f16 by ml_dtypes.bfloat16 / np.float16; the quantizers by the numpy implementation of section 3 in
tests/numpy_ref.py.
Ends with "crosscheck_formats: N passed, M failed" and exits non-zero on any failure.
"""
import argparse
import ctypes
import os
import sys

import ml_dtypes
import numpy as np

from numpy_ref import Tally, e4m3_codes, quantize

E4M3 = ml_dtypes.float8_e4m3fn
F32, BF16, F16 = 0, 1, 2  # bfp8_dtype
SCALE_FP32, SCALE_UE8M0 = 0, 1  # bfp8_scale_format
ROW_MAJOR, MN_MAJOR, MN_MAJOR_ALIGNED, PACKED_UE8M0 = 0, 1, 2, 3  # bfp8_scale_layout
LAYOUT_NAMES = ["row_major", "mn_major", "mn_major_aligned", "packed_ue8m0"]


class Scales(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int), ("layout", ctypes.c_int), ("rows", ctypes.c_int64),
                ("kblocks", ctypes.c_int64), ("data", ctypes.c_void_p)]


def load_library(build):
    lib = ctypes.CDLL(os.path.join(build, "libblockfp8.so"))
    lib.bfp8_e4m3_from_f32.argtypes = [ctypes.c_float]
    lib.bfp8_e4m3_from_f32.restype = ctypes.c_uint8
    lib.bfp8_e4m3_to_f32.argtypes = [ctypes.c_uint8]
    lib.bfp8_e4m3_to_f32.restype = ctypes.c_float
    for name in ("bfp8_bf16_from_f32", "bfp8_f16_from_f32"):
        getattr(lib, name).argtypes = [ctypes.c_float]
        getattr(lib, name).restype = ctypes.c_uint16
    for name in ("bfp8_bf16_to_f32", "bfp8_f16_to_f32"):
        getattr(lib, name).argtypes = [ctypes.c_uint16]
        getattr(lib, name).restype = ctypes.c_float
    lib.bfp8_last_error.restype = ctypes.c_char_p
    lib.bfp8_scales_bytes.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    lib.bfp8_scales_bytes.restype = ctypes.c_size_t
    lib.bfp8_scales_init.argtypes = [ctypes.POINTER(Scales), ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                                     ctypes.c_int64, ctypes.c_void_p]
    quant_args = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                  ctypes.POINTER(Scales), ctypes.POINTER(ctypes.c_int64)]
    lib.bfp8_quantize_act.argtypes = quant_args
    lib.bfp8_quantize_weight.argtypes = quant_args
    return lib


# ---- a second encoder, independent of numpy_ref.e4m3_codes ------------------------------------------------------

def brute_e4m3(x):
    """A second encoder, pure numpy: nearest of the 127 non-negative finite values, ties to the even code."""
    x = np.asarray(x, dtype=np.float32)
    codes = np.arange(0x7F, dtype=np.uint8)
    e, m = (codes >> 3).astype(np.int64), (codes & 7).astype(np.float64)
    values = np.where(e == 0, np.ldexp(m / 8, -6), np.ldexp(1 + m / 8, e - 7))
    with np.errstate(invalid="ignore"):  # signalling NaN bit patterns
        a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
    lo = np.clip(np.searchsorted(values, a, side="right") - 1, 0, 0x7E)
    hi = np.minimum(lo + 1, 0x7E)
    mid = (values[lo] + values[hi]) / 2
    pick = np.where(a < mid, lo, np.where(a > mid, hi, np.where(lo % 2 == 0, lo, hi)))
    pick = np.where(a == values[lo], lo, pick)
    sign = np.signbit(x).astype(np.uint8) << 7
    return np.where(np.isnan(x), 0x7F | sign, pick.astype(np.uint8) | sign).astype(np.uint8)


def layout_buffer(s, layout):
    """The expected raw bytes of scales s [rows, kblocks] in a layout (padding zero)."""
    rows, kblocks = s.shape
    ld = -(-rows // 4) * 4
    if layout == ROW_MAJOR:
        return s.astype(np.float32).tobytes()
    if layout == MN_MAJOR:
        return np.ascontiguousarray(s.T).astype(np.float32).tobytes()
    if layout == MN_MAJOR_ALIGNED:
        buf = np.zeros((kblocks, ld), dtype=np.float32)
        buf[:, :rows] = s.T
        return buf.tobytes()
    exps = np.zeros((ld, -(-kblocks // 4) * 4), dtype=np.uint32)
    exps[:rows, :kblocks] = (s.view(np.uint32) >> 23) & 0xFF
    words = np.zeros((exps.shape[1] // 4, ld), dtype=np.uint32)
    for b in range(4):
        words |= exps[:, b::4].T << np.uint32(8 * b)
    return words.astype("<u4").tobytes()


# ---- checks -----------------------------------------------------------------------------------------------------

def check_e4m3(lib, ck, rng):
    codes = np.arange(256, dtype=np.uint8)
    want = codes.view(E4M3).astype(np.float32)
    got = np.array([lib.bfp8_e4m3_to_f32(int(c)) for c in codes], dtype=np.float32)
    nan = np.isnan(want)
    ck.check(np.array_equal(np.isnan(got), nan) and np.array_equal(got[~nan].view(np.uint32),
                                                                     want[~nan].view(np.uint32)),
             "all 256 E4M3 codes decode like ml_dtypes.float8_e4m3fn")

    # Inputs: random bit patterns over a wide exponent range, every midpoint between adjacent codes and its two
    # neighbours, saturation and non-finite values.
    bits = rng.integers(0, 2**32, size=1_000_000, dtype=np.uint64).astype(np.uint32)
    exps = rng.integers(95, 140, size=bits.size).astype(np.uint32)
    wide = ((bits & np.uint32(0x807FFFFF)) | (exps << np.uint32(23))).view(np.float32)
    wide[:1000] = bits[:1000].view(np.float32)  # a few with any exponent (inf/NaN included)
    finite_vals = want[:0x7F]
    mids = ((finite_vals[:-1].astype(np.float64) + finite_vals[1:]) / 2).astype(np.float32)
    near = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0))])
    special = np.array([448, 449, 464, 465, 480, 1e30, np.inf, np.nan, 0, 2**-10, 2**-9, 2**-12], dtype=np.float32)
    x = np.concatenate([wide, near, -near, special, -special]).astype(np.float32)

    want_codes = e4m3_codes(x)
    ck.check(np.array_equal(want_codes, brute_e4m3(x)), "the two numpy E4M3 encoders agree")
    # The scalar encoder on a subset (ctypes calls are slow), the whole set through the quantizer below.
    sub = np.concatenate([x[:150_000], x[wide.size:]])
    got_sub = np.array([lib.bfp8_e4m3_from_f32(float(v)) for v in sub], dtype=np.uint8)
    bad = np.nonzero(got_sub != e4m3_codes(sub))[0]
    ck.check(bad.size == 0, f"bfp8_e4m3_from_f32 on {sub.size} values: {bad.size} differ"
             + (f", first x={sub[bad[0]]!r} got 0x{got_sub[bad[0]]:02x} want 0x{e4m3_codes(sub)[bad[0]]:02x}"
                if bad.size else ""))

    # All 1e6+ values bit-exact in one call: in groups of 127 values next to a 448, the group scale is exactly
    # 1 (448/448), so q = e4m3(x / 1) = e4m3(x). Values beyond 448 and non-finite ones stay on the scalar path.
    inrange = x[np.isfinite(x) & (np.abs(x) <= 448)]
    groups = -(-inrange.size // 127)
    a = np.full((groups, 128), np.float32(448))
    flat = np.zeros(groups * 127, dtype=np.float32)
    flat[:inrange.size] = inrange
    a[:, 1:] = flat.reshape(groups, 127)
    q = np.empty(a.shape, dtype=np.uint8)
    sc_buf = np.empty(groups, dtype=np.float32)
    sc = Scales(SCALE_FP32, ROW_MAJOR, groups, 1, sc_buf.ctypes.data)
    st = lib.bfp8_quantize_act(a.ctypes.data, F32, groups, 128, q.ctypes.data, ctypes.byref(sc), None)
    ok = st == 0 and np.all(sc_buf == 1.0) and np.array_equal(q, e4m3_codes(a))
    ck.check(ok, f"E4M3 encoding of {inrange.size} values through a unit-scale quantization")


def check_16bit(lib, ck, rng):
    pats = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    for name, dt in (("bf16", ml_dtypes.bfloat16), ("f16", np.float16)):
        to_f32 = getattr(lib, f"bfp8_{name}_to_f32")
        from_f32 = getattr(lib, f"bfp8_{name}_from_f32")
        want = pats.view(dt).astype(np.float32)
        got = np.array([to_f32(int(p)) for p in pats], dtype=np.float32)
        nan = np.isnan(want)
        ck.check(np.array_equal(np.isnan(got), nan) and np.array_equal(got[~nan].view(np.uint32),
                                                                         want[~nan].view(np.uint32)),
                 f"all 65536 {name} patterns decode like numpy")
        bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
        exps = rng.integers(90, 150, size=bits.size).astype(np.uint32)
        x = ((bits & np.uint32(0x807FFFFF)) | (exps << np.uint32(23))).view(np.float32)
        x[:20000] = bits[:20000].view(np.float32)
        x = np.concatenate([x, np.array([65520, 65519.996, 65504, 2**-25, 3 * 2**-25, np.inf, -np.inf, np.nan],
                                        dtype=np.float32)])
        with np.errstate(over="ignore", invalid="ignore"):
            w = x.astype(dt).view(np.uint16)
        g = np.array([from_f32(float(v)) for v in x], dtype=np.uint16)
        xnan = np.isnan(x)
        g_is_nan = g.view(dt).astype(np.float32)
        ok = np.array_equal(g[~xnan], w[~xnan]) and np.all(np.isnan(g_is_nan[xnan]))
        ck.check(ok, f"{name} encoding of {x.size} values equals numpy ({int((g[~xnan] != w[~xnan]).sum())} differ)")


def check_quantizers(lib, ck, rng):
    cases = [  # (weight?, rows, k, dtype, format, layout)
        (False, 5, 1, F32, SCALE_FP32, ROW_MAJOR), (False, 7, 127, BF16, SCALE_UE8M0, PACKED_UE8M0),
        (False, 3, 129, F16, SCALE_FP32, MN_MAJOR), (False, 9, 300, F32, SCALE_UE8M0, MN_MAJOR_ALIGNED),
        (False, 4, 7168, BF16, SCALE_FP32, MN_MAJOR_ALIGNED), (False, 33, 1000, F32, SCALE_UE8M0, PACKED_UE8M0),
        (True, 2112, 300, BF16, SCALE_FP32, ROW_MAJOR), (True, 200, 129, F32, SCALE_UE8M0, PACKED_UE8M0),
        (True, 130, 1, F16, SCALE_UE8M0, MN_MAJOR), (True, 257, 1100, F32, SCALE_FP32, MN_MAJOR_ALIGNED),
        (True, 64, 7168, F32, SCALE_UE8M0, ROW_MAJOR),
    ]
    np_dtypes = {F32: np.float32, BF16: ml_dtypes.bfloat16, F16: np.float16}
    for weight, rows, k, dt, fmt, layout in cases:
        g = 128 if weight else 1
        mags = np.float32(10.0) ** rng.uniform(-4, 4, size=(-(-rows // 7), -(-k // 128))).astype(np.float32)
        mag = np.repeat(np.repeat(mags, 7, axis=0), 128, axis=1)[:rows, :k]
        x = (rng.standard_normal((rows, k)).astype(np.float32) * mag).astype(np.float32)
        outliers = rng.random((rows, k)) < 0.005
        x[outliers] *= np.float32(100)
        flat = x.reshape(-1)
        for i, v in zip(rng.integers(0, flat.size, size=4), (np.nan, np.inf, -np.inf, -np.nan)):
            flat[i] = v
        with np.errstate(over="ignore"):
            xin = np.ascontiguousarray(x.astype(np_dtypes[dt]))
        xf = xin.astype(np.float32)
        want_q, want_s, want_bad = quantize(xf, g, fmt == SCALE_UE8M0)

        srows, kblocks = want_s.shape
        nbytes = lib.bfp8_scales_bytes(layout, srows, kblocks)
        sbuf = np.full(max(nbytes, 4), 0xFF, dtype=np.uint8)
        q = np.full((rows, k), 0xAB, dtype=np.uint8)
        sc = Scales()
        lib.bfp8_scales_init(ctypes.byref(sc), fmt, layout, srows, kblocks, sbuf.ctypes.data)
        bad = ctypes.c_int64(-1)
        fn = lib.bfp8_quantize_weight if weight else lib.bfp8_quantize_act
        st = fn(xin.ctypes.data, dt, rows, k, q.ctypes.data, ctypes.byref(sc), ctypes.byref(bad))
        what = (f"{'weight' if weight else 'act'} [{rows}, {k}] {['f32', 'bf16', 'f16'][dt]} "
                f"{['fp32', 'ue8m0'][fmt]} {LAYOUT_NAMES[layout]}")
        if st != 0:
            ck.check(False, f"{what}: status {st}: {lib.bfp8_last_error().decode()}")
            continue
        ck.check(np.array_equal(q, want_q), f"{what}: fp8 bytes ({int((q != want_q).sum())} differ)")
        ck.check(sbuf[:nbytes].tobytes() == layout_buffer(want_s, layout), f"{what}: scale bytes")
        ck.check(bad.value == want_bad, f"{what}: non-finite count {bad.value}, want {want_bad}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed: --seed {seed}")
    rng = np.random.default_rng(seed)
    lib = load_library(args.build)
    ck = Tally()
    check_e4m3(lib, ck, rng)
    check_16bit(lib, ck, rng)
    check_quantizers(lib, ck, rng)
    print(f"crosscheck_formats: {ck.passed} passed, {ck.failed} failed")
    return 1 if ck.failed else 0


if __name__ == "__main__":
    sys.exit(main())
