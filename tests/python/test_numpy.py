"""The numpy path against the independent numpy implementation of docs/numerics.md (tests/numpy_ref.py) and a
float64 block GEMM: bit-exact quantization for every input dtype, leading dimensions, ragged K and N, UE8M0 and
every scale layout; GEMMs within one ulp (ref) or the CPU tolerance (cpu)."""
import ml_dtypes
import numpy as np
import pytest

import blockfp8
from oracle import (BF16, BLOCK, FP8, NP_OUT, TOL, block_gemm, calc_diff, codes, quantize, quantized_operands,
                    random_input, rel_err, ulp_distance, unpack_ue8m0)

IN_DTYPES = {"float32": np.float32, "bfloat16": BF16, "float16": np.float16}


def strides_of(a, want):
    """a's last two strides in elements against `want`, ignoring dimensions of extent 1 (whose stride is free)."""
    got = [st // a.itemsize for st in a.strides[-2:]]
    return all(g == w for g, w, d in zip(got, want, a.shape[-2:]) if d > 1)


def make_input(rng, shape, dtype):
    rows, k = int(np.prod(shape[:-1])), shape[-1]
    x = random_input(rng, rows, k, specials=True)
    if dtype == "float16":  # finite values beyond fp16's range would become inf
        x = np.where(np.isfinite(x), np.clip(x, -60000, 60000), x).astype(np.float32)
    return x.astype(IN_DTYPES[dtype]).reshape(shape)


# (shape of x) with K ragged (1, 255, 300), exact (128, 7168), single rows and leading dimensions
ACT_SHAPES = [(1,), (1, 1), (3, 300), (7, 128), (2, 3, 255), (16, 7168), (129, 1000), (2, 2, 2, 130)]


@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", ACT_SHAPES)
@pytest.mark.parametrize("ue8m0", [False, True])
def test_act_quant_bit_exact(rng, dtype, shape, ue8m0):
    x = make_input(rng, shape, dtype)
    q, s = blockfp8.per_token_group_quant_fp8(x, scale_ue8m0=ue8m0)
    k = shape[-1]
    want_q, want_s, _ = quantize(x.reshape(-1, k).astype(np.float32), 1, ue8m0)
    assert q.dtype == FP8 and q.shape == shape
    assert s.dtype == np.float32 and s.shape == shape[:-1] + (-(-k // BLOCK),) and s.flags.c_contiguous
    np.testing.assert_array_equal(codes(q).reshape(-1, k), want_q)
    np.testing.assert_array_equal(s.reshape(want_s.shape).view(np.uint32), want_s.view(np.uint32))


LAYOUT_FLAGS = [  # (column_major_scales, scale_tma_aligned, scale_ue8m0)
    (True, False, False), (True, True, False), (True, True, True), (False, True, False), (False, False, True)]


@pytest.mark.parametrize("flags", LAYOUT_FLAGS)
@pytest.mark.parametrize("shape", [(1, 128), (5, 300), (8, 1000), (3, 6, 513), (2, 1, 129)])
def test_act_scale_layouts(rng, flags, shape):
    """Each layout holds the same scales as the row-major call, at the strides SGLang's allocations have."""
    column_major, aligned, ue8m0 = flags
    x = make_input(rng, shape, "bfloat16")
    q_row, s_row = blockfp8.per_token_group_quant_fp8(x, scale_ue8m0=ue8m0)
    q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=column_major, scale_tma_aligned=aligned,
                                              scale_ue8m0=ue8m0)
    np.testing.assert_array_equal(codes(q), codes(q_row))
    rows, kb = shape[-2], s_row.shape[-1]
    ld = -(-rows // 4) * 4
    if column_major and ue8m0:
        words = -(-kb // 4)
        assert s.dtype == np.int32 and s.shape == shape[:-1] + (words,)
        assert strides_of(s, (1, ld))
        got = np.stack([unpack_ue8m0(m, kb) for m in s.reshape(-1, rows, words)])
        np.testing.assert_array_equal(got.reshape(s_row.shape), s_row)
        return
    assert s.dtype == np.float32 and s.shape == s_row.shape
    if column_major:
        assert strides_of(s, (1, ld if aligned else rows))
    else:
        assert s.flags.c_contiguous
    np.testing.assert_array_equal(s, s_row)


WEIGHT_SHAPES = [(1, 1), (129, 255), (2112, 300), (256, 128), (3, 200, 130)]


@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", WEIGHT_SHAPES)
@pytest.mark.parametrize("ue8m0", [False, True])
def test_weight_quant_bit_exact(rng, dtype, shape, ue8m0):
    w = make_input(rng, shape, dtype)
    q, s = blockfp8.per_block_quant_fp8(w, scale_ue8m0=ue8m0)
    n, k = shape[-2:]
    assert q.dtype == FP8 and q.shape == shape
    assert s.shape == shape[:-2] + (-(-n // BLOCK), -(-k // BLOCK)) and s.dtype == np.float32
    for b, wb in enumerate(w.reshape(-1, n, k)):
        want_q, want_s, _ = quantize(wb.astype(np.float32), BLOCK, ue8m0)
        np.testing.assert_array_equal(codes(q).reshape(-1, n, k)[b], want_q)
        np.testing.assert_array_equal(s.reshape(-1, *want_s.shape)[b].view(np.uint32), want_s.view(np.uint32))


GEMM_SHAPES = [(1, 1, 1), (1, 129, 300), (5, 320, 300), (3, 2112, 384), (17, 256, 1000), (4, 100, 128)]


@pytest.mark.parametrize("out", NP_OUT)
@pytest.mark.parametrize("shape", GEMM_SHAPES)
def test_matmul_ref_within_one_ulp(rng, out, shape):
    """The ref backend rounds the float64 block GEMM once: at most one ulp from the oracle's."""
    m, n, k = shape
    qa, sa, qb, sb, _, _ = quantized_operands(rng, m, n, k)
    with blockfp8.policy("strict", "ref"):
        y = blockfp8.w8a8_block_fp8_matmul(qa, qb, sa, sb, [128, 128], output_dtype=out)
    assert y.dtype == NP_OUT[out] and y.shape == (m, n)
    want = block_gemm(codes(qa), sa, codes(qb), sb, None)
    assert ulp_distance(y, want.astype(NP_OUT[out])).max() <= 1
    calls = blockfp8.stats()["calls"]  # every registered backend: the CUDA ones too where there is a GPU
    assert calls["ref"] == 1 and all(v == 0 for name, v in calls.items() if name != "ref")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("bias", ["float32", "bfloat16", "float16"])
def test_apply_linear_ref_with_bias(rng, dtype, bias):
    """x quantized in the call, bias added in fp32 before the one rounding (ref: within one ulp)."""
    m, n, k = 5, 257, 300
    x = rng.standard_normal((m, k)).astype(IN_DTYPES[dtype])
    wq, ws = blockfp8.per_block_quant_fp8(rng.standard_normal((n, k)).astype(np.float32))
    b = (rng.standard_normal(n) * 4).astype(NP_OUT[bias])
    with blockfp8.policy("strict", "ref"):
        y = blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws, bias=b)
    qa, sa, _ = quantize(x.astype(np.float32), 1, False)
    want = block_gemm(qa, sa, codes(wq), ws, b.astype(np.float64))
    assert y.dtype == x.dtype
    assert ulp_distance(y, want.astype(x.dtype)).max() <= 1


@pytest.mark.parametrize("out", NP_OUT)
@pytest.mark.parametrize("shape", GEMM_SHAPES)
def test_matmul_cpu_tolerance(rng, out, shape):
    m, n, k = shape
    qa, sa, qb, sb, x, w = quantized_operands(rng, m, n, k)
    y = blockfp8.w8a8_block_fp8_matmul(qa, qb, sa, sb, output_dtype=out)
    want = block_gemm(codes(qa), sa, codes(qb), sb, None)
    assert np.isfinite(y.astype(np.float32)).all()
    if np.linalg.norm(want) > 0:
        assert rel_err(y, want) <= TOL[out]
    if k >= 128:
        # Against the unquantized product, most of calc_diff is the data's FP8 quantization noise, which on a
        # small output (1 x 129) passes 1e-3 about once in 30 draws: hold y to the exact product of the same
        # quantized inputs plus 1e-4, as docs/numerics.md and the C tests do.
        exact = x.astype(np.float64) @ w.astype(np.float64).T
        assert calc_diff(y.astype(np.float64), exact) <= calc_diff(want, exact) + 1e-4
    assert blockfp8.stats()["calls"]["cpu"] == 1


def test_matmul_leading_dims_and_default_dtype(rng):
    qa, sa, qb, sb, _, _ = quantized_operands(rng, 6, 200, 300)
    y2 = blockfp8.w8a8_block_fp8_matmul(qa, qb, sa, sb, [128, 128])
    assert y2.dtype == np.float16  # the engines' default output dtype
    y3 = blockfp8.w8a8_block_fp8_matmul(qa.reshape(2, 3, 300), qb, sa.reshape(2, 3, 3), sb, [128, 128])
    assert y3.shape == (2, 3, 200)
    np.testing.assert_array_equal(y3.reshape(6, 200).view(np.uint16), y2.view(np.uint16))


@pytest.mark.parametrize("ue8m0", [False, True])
def test_matmul_every_scale_layout_same_bytes(rng, ue8m0):
    """Activation scales in any layout the strides describe give the bytes of the row-major call."""
    x = make_input(rng, (9, 700), "bfloat16")
    x = np.where(np.isfinite(x.astype(np.float32)), x, 0).astype(BF16)
    qb, sb = blockfp8.per_block_quant_fp8(rng.standard_normal((300, 700)).astype(np.float32), scale_ue8m0=ue8m0)
    q, s_row = blockfp8.per_token_group_quant_fp8(x, scale_ue8m0=ue8m0)
    want = blockfp8.w8a8_block_fp8_matmul(q, qb, s_row, sb, output_dtype="bfloat16")
    for flags in LAYOUT_FLAGS:
        if flags[2] != ue8m0:
            continue
        q2, s2 = blockfp8.per_token_group_quant_fp8(x, column_major_scales=flags[0], scale_tma_aligned=flags[1],
                                                    scale_ue8m0=flags[2])
        got = blockfp8.w8a8_block_fp8_matmul(q2, qb, s2, sb, output_dtype="bfloat16")
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16), err_msg=str(flags))
    # Strides no layout describes (every other column of a wider array) are copied, not misread.
    wide = np.zeros((9, 2 * s_row.shape[1]), np.float32)
    wide[:, ::2] = s_row
    got = blockfp8.w8a8_block_fp8_matmul(q, qb, wide[:, ::2], sb, output_dtype="bfloat16")
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("dtype", IN_DTYPES)
@pytest.mark.parametrize("shape", [(1, 128), (4, 300), (2, 3, 1000), (33, 129)])
@pytest.mark.parametrize("bias", [None, "float32", "bfloat16"])
def test_apply_linear_is_quant_then_matmul(rng, dtype, shape, bias):
    """apply_w8a8_block_fp8_linear: the input's dtype out, and the bytes of quantize + the same GEMM (+ bias)."""
    x = (rng.standard_normal(shape)).astype(IN_DTYPES[dtype])
    k, n = shape[-1], 257
    wq, ws = blockfp8.per_block_quant_fp8(rng.standard_normal((n, k)).astype(np.float32))
    b = None if bias is None else (rng.standard_normal(n)).astype(NP_OUT[bias])
    y = blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws, bias=b)
    assert y.dtype == x.dtype and y.shape == shape[:-1] + (n,)
    q, s = blockfp8.per_token_group_quant_fp8(x)
    qa, sa = codes(q).reshape(-1, k), s.reshape(-1, s.shape[-1])
    want = block_gemm(qa, sa, codes(wq), ws, None if b is None else b.astype(np.float64))
    assert rel_err(y.reshape(-1, n), want) <= TOL[dtype]
    if b is None:
        z = blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, output_dtype=x.dtype)
        np.testing.assert_array_equal(codes(y.view(np.uint8)), codes(z.view(np.uint8)))


@pytest.mark.parametrize("out", NP_OUT)
def test_fp8_gemm_nt_writes_d(rng, out):
    m, n, k = 7, 300, 500
    qa, sa, qb, sb, _, _ = quantized_operands(rng, m, n, k)
    d = np.full((m, n), np.nan, NP_OUT[out])
    assert blockfp8.fp8_gemm_nt((qa, sa), (qb, sb), d) is None
    want = blockfp8.w8a8_block_fp8_matmul(qa, qb, sa, sb, output_dtype=out)
    np.testing.assert_array_equal(d.view(np.uint8), want.view(np.uint8))


def test_fp8_gemm_nt_accumulates_c(rng):
    m, n, k = 5, 130, 256
    qa, sa, qb, sb, _, _ = quantized_operands(rng, m, n, k)
    plain = blockfp8.w8a8_block_fp8_matmul(qa, qb, sa, sb, output_dtype="float32")
    c = rng.standard_normal((m, n)).astype(np.float32)
    d = np.full((m, n), np.nan, np.float32)
    blockfp8.fp8_gemm_nt((qa, sa), (qb, sb), d, c=c)
    np.testing.assert_array_equal(d, plain + c)
    d2 = c.copy()  # c may be d itself: d = a @ b^T + d
    blockfp8.fp8_gemm_nt((qa, sa), (qb, sb), d2, c=d2)
    np.testing.assert_array_equal(d2, plain + c)


def test_uint8_codes_and_non_contiguous_inputs(rng):
    """uint8 codes are E4M3 codes; non-contiguous operands are copied, never misread."""
    qa, sa, qb, sb, _, _ = quantized_operands(rng, 6, 140, 260)
    want = blockfp8.w8a8_block_fp8_matmul(qa, qb, sa, sb, output_dtype="float32")
    got = blockfp8.w8a8_block_fp8_matmul(codes(qa), codes(qb), sa, sb, output_dtype="float32")
    np.testing.assert_array_equal(got, want)
    a_t = np.ascontiguousarray(qa.T).T  # same values, column-major memory
    b_wide = np.zeros((140, 520), FP8)
    b_wide[:, ::2] = qb
    got = blockfp8.w8a8_block_fp8_matmul(a_t, b_wide[:, ::2], np.asfortranarray(sa), sb, output_dtype="float32")
    np.testing.assert_array_equal(got, want)
    x = rng.standard_normal((12, 300)).astype(np.float32)
    q1, s1 = blockfp8.per_token_group_quant_fp8(x[::2])
    q2, s2 = blockfp8.per_token_group_quant_fp8(np.ascontiguousarray(x[::2]))
    np.testing.assert_array_equal(codes(q1), codes(q2))
    np.testing.assert_array_equal(s1, s2)


def test_nan_inf_inputs(rng):
    """Non-finite activations encode as NaN (sign kept) and never reach a scale (docs/numerics.md)."""
    x = rng.standard_normal((2, 256)).astype(np.float32)
    x[0, 3], x[0, 4], x[1, 200] = np.nan, np.inf, -np.inf
    q, s = blockfp8.per_token_group_quant_fp8(x)
    c = codes(q)
    assert c[0, 3] & 0x7F == 0x7F and c[0, 4] == 0x7F and c[1, 200] == 0xFF
    finite = np.where(np.isfinite(x), np.abs(x), 0)
    np.testing.assert_array_equal(s[:, 0], np.float32(finite[:, :128].max(axis=1)) / np.float32(448))


def test_zero_sized(rng):
    q, s = blockfp8.per_token_group_quant_fp8(np.zeros((0, 256), np.float32))
    assert q.shape == (0, 256) and s.shape == (0, 2)
    qa, sa, qb, sb, _, _ = quantized_operands(rng, 3, 130, 200)
    y = blockfp8.w8a8_block_fp8_matmul(qa[:0], qb, sa[:0], sb, output_dtype="float32")
    assert y.shape == (0, 130)


def test_ml_dtypes_outputs():
    q, _ = blockfp8.per_token_group_quant_fp8(np.ones((1, 128), np.float32))
    assert q.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    assert float(q.astype(np.float32)[0, 0]) == 448.0
