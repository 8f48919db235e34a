"""The grouped (MoE) GEMM, DeepGEMM's m_grouped_fp8_gemm_nt_contiguous / _masked, on numpy arrays and CPU torch
tensors: against the float64 grouped oracle (tests/python/oracle.py: ref within one ulp, cpu within the CPU
tolerance, calc_diff against the unquantized product), each group byte for byte the dense call of the same backend
on its rows, fp32 and UE8M0 scales in the layouts DeepGEMM and SGLang allocate, ragged N and K, G = 1 as the dense
call, empty groups, outputs poisoned with random bytes whose unused rows must keep them, bad contents refused before
any write, and the torch op eager, through torch.ops, on fake tensors and under torch.compile(fullgraph=True)."""
import numpy as np
import pytest

import blockfp8
from conftest import needs_torch, torch
from oracle import (NP_OUT, TOL, calc_diff, from_numpy, grouped_gemm, grouped_operands, pack_ue8m0, rel_err,
                    to_numpy, ulp_distance)

CONTIGUOUS, MASKED = "contiguous", "masked"
LAYOUTS = [CONTIGUOUS, MASKED]

if torch is not None:
    from blockfp8 import _torch_path as T


def poisoned(rng, shape, dtype):
    """An output of random bytes (NaN and inf among them): what a call does not write keeps them."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return rng.integers(0, 256, nbytes, dtype=np.uint8).view(dtype).reshape(shape)


def bits(a):
    a = to_numpy(a)
    return a.view(f"u{a.dtype.itemsize}")


def make_row_map(rng, layout, groups, rows):
    """m_indices [rows] in [-1, G) (padding and, for G > 2, an unused group among them) or masked_m [G] in
    [0, rows] (0 and rows among them for G > 1)."""
    if layout == CONTIGUOUS:
        idx = rng.integers(-1, groups, rows).astype(np.int32)
        if groups > 2:
            idx[idx == groups - 1] = -1
        return idx
    counts = rng.integers(0, rows + 1, groups).astype(np.int32)
    if groups > 1:
        counts[rng.permutation(groups)[:2]] = (rows, 0)
    return counts


def used_rows(layout, row_map, shape):
    """Where the call writes: the rows of d [m, N] with an index, or of d [G, max_m, N] below masked_m."""
    if layout == CONTIGUOUS:
        return row_map >= 0
    return np.arange(shape[1])[None, :] < row_map[:, None]


def call(layout, a, sfa, b, sfb, d, row_map, expected_m=0):
    if layout == CONTIGUOUS:
        return blockfp8.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, row_map)
    return blockfp8.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, row_map, expected_m)


def oracle(layout, qa, sa, qb, sb, row_map):
    return grouped_gemm(qa, sa, qb, sb, **{"m_indices" if layout == CONTIGUOUS else "masked_m": row_map})


# (G, rows, N, K): rows is m (contiguous) or max_m (masked); N and K ragged (not multiples of 128) among them
SHAPES = [(1, 5, 128, 128), (3, 9, 200, 300), (4, 33, 129, 520), (8, 16, 256, 1000)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("out", list(NP_OUT))
@pytest.mark.parametrize("ue8m0", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_against_the_oracle(rng, layout, backend, out, ue8m0, shape):
    groups, rows, n, k = shape
    qa, sa, qb, sb = grouped_operands(rng, groups, rows, n, k, layout == MASKED, ue8m0)
    row_map = make_row_map(rng, layout, groups, rows)
    want = oracle(layout, qa, sa, qb, sb, row_map)
    d = poisoned(rng, want.shape, NP_OUT[out])
    before = d.copy()
    # UE8M0 scales are the packed int32 form (power-of-two float32 scales stay fp32 scales)
    sfa, sfb = (pack_ue8m0(sa), pack_ue8m0(sb)) if ue8m0 else (sa, sb)
    with blockfp8.policy("strict", backend):
        assert call(layout, qa, sfa, qb, sfb, d, row_map, rows // 2) is None
    used = used_rows(layout, row_map, want.shape)
    np.testing.assert_array_equal(bits(d)[~used], bits(before)[~used])
    got = d[used]
    assert np.isfinite(got.astype(np.float32)).all()
    if backend == "ref":
        assert ulp_distance(got, want[used].astype(NP_OUT[out])).max(initial=0) <= 1
    elif used.any():
        assert rel_err(got, want[used]) <= TOL[out]
    assert blockfp8.stats()["calls"][backend] == 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_close_to_the_unquantized_product(rng, layout):
    """DeepGEMM's calc_diff against the product of the unquantized operands: catches scale and indexing bugs."""
    groups, rows, n, k = 6, 64, 384, 1024
    masked = layout == MASKED
    x = rng.standard_normal(((groups, rows) if masked else (rows,)) + (k,)).astype(np.float32)
    w = rng.standard_normal((groups, n, k)).astype(np.float32)
    qa, sa = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
    qb, sb = blockfp8.per_block_quant_fp8(w)
    row_map = make_row_map(rng, layout, groups, rows)
    d = np.zeros((groups, rows, n) if masked else (rows, n), NP_OUT["bfloat16"])
    call(layout, qa, sa, qb, sb, d, row_map, rows)
    if masked:
        exact = np.einsum("gmk,gnk->gmn", x.astype(np.float64), w.astype(np.float64))
    else:
        exact = np.einsum("mk,mnk->mn", x.astype(np.float64), w[np.maximum(row_map, 0)].astype(np.float64))
    used = used_rows(layout, row_map, d.shape)
    assert calc_diff(d[used].astype(np.float64), exact[used]) < 1e-3


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
def test_each_group_is_the_dense_call(rng, layout, backend, out):
    """A group's rows get, byte for byte, what the dense call of the same backend gives on those rows alone."""
    groups, rows, n, k = 5, 40, 300, 700
    masked = layout == MASKED
    qa, sa, qb, sb = grouped_operands(rng, groups, rows, n, k, masked)
    row_map = make_row_map(rng, layout, groups, rows)
    d = poisoned(rng, (groups, rows, n) if masked else (rows, n), NP_OUT[out])
    with blockfp8.policy("strict", backend):
        call(layout, qa, sa, qb, sb, d, row_map)
        for g in range(groups):
            if masked:
                a_g, s_g, d_g = qa[g, :row_map[g]], sa[g, :row_map[g]], d[g, :row_map[g]]
            else:
                a_g, s_g, d_g = qa[row_map == g], sa[row_map == g], d[row_map == g]
            dense = blockfp8.w8a8_block_fp8_matmul(a_g, qb[g], s_g, sb[g], output_dtype=out)
            np.testing.assert_array_equal(bits(d_g), bits(dense), err_msg=f"group {g}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_one_group_is_the_dense_call(rng, layout):
    m, n, k = 12, 200, 300
    qa, sa, qb, sb = grouped_operands(rng, 1, m, n, k, layout == MASKED)
    dense = np.zeros((m, n), NP_OUT["bfloat16"])
    blockfp8.fp8_gemm_nt((qa.reshape(m, k), sa.reshape(m, -1)), (qb[0], sb[0]), dense)
    if layout == CONTIGUOUS:
        d = np.zeros((m, n), dense.dtype)
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((qa, sa), (qb, sb), d, np.zeros(m, np.int32))
    else:
        d = np.zeros((1, m, n), dense.dtype)
        blockfp8.m_grouped_fp8_gemm_nt_masked((qa, sa), (qb, sb), d, np.array([m], np.int32), m)
    np.testing.assert_array_equal(bits(d).reshape(m, n), bits(dense))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ue8m0", [False, True])
def test_every_scale_layout_same_bytes(rng, layout, ue8m0):
    """sfa in any layout its strides describe (row-major, MN-major, DeepGEMM's MN-major TMA-aligned form, packed
    UE8M0) and sfb row-major or MN-major per group give the bytes of the row-major call; strides no layout describes
    are copied, never misread."""
    groups, rows, n, k = 4, 10, 260, 900
    masked = layout == MASKED
    x = rng.standard_normal(((groups, rows) if masked else (rows,)) + (k,)).astype(np.float32)
    qb, sb = blockfp8.per_block_quant_fp8(rng.standard_normal((groups, n, k)).astype(np.float32), scale_ue8m0=ue8m0)
    row_map = make_row_map(rng, layout, groups, rows)
    qa, sa = blockfp8.per_token_group_quant_fp8(x, scale_ue8m0=ue8m0)
    shape = (groups, rows, n) if masked else (rows, n)
    want = np.zeros(shape, np.float32)
    call(layout, qa, sa, qb, sb, want, row_map)
    flags = [(True, True, True)] if ue8m0 else [(True, False, False), (True, True, False)]
    sb_forms = {"row": sb, "mn": np.swapaxes(np.ascontiguousarray(np.swapaxes(sb, 1, 2)), 1, 2)}
    if ue8m0:
        sb_forms["packed"] = pack_ue8m0(sb)
    # Matrices that are row-major each but not back to back (views into taller buffers) are copied too.
    wide = np.zeros(sa.shape[:-1] + (2 * sa.shape[-1],), np.float32)
    wide[..., ::2] = sa
    tall_a, tall_b = np.zeros((groups, rows + 3, sa.shape[-1]), np.float32), np.zeros((groups, sb.shape[1] + 1,
                                                                                         sb.shape[2]), np.float32)
    tall_a[:, :rows], tall_b[:, :-1] = sa, sb
    cases = [(sa, form) for form in sb_forms.values()] + [(wide[..., ::2], tall_b[:, :-1])]
    if masked:
        cases.append((tall_a[:, :rows], sb))
    for column_major, aligned, packed in flags:
        q2, s2 = blockfp8.per_token_group_quant_fp8(x, column_major_scales=column_major, scale_tma_aligned=aligned,
                                                    scale_ue8m0=packed)
        np.testing.assert_array_equal(q2.view(np.uint8), qa.view(np.uint8))
        cases.append((s2, sb_forms["packed" if packed else "row"]))
    for sfa, sfb in cases:
        d = np.zeros(shape, np.float32)
        call(layout, qa, sfa, qb, sfb, d, row_map)
        np.testing.assert_array_equal(d, want, err_msg=f"sfa strides {sfa.strides}, sfb strides {sfb.strides}")


@pytest.mark.parametrize("case", ["all padding", "no rows", "every count 0", "one group used"])
def test_nothing_to_write_writes_nothing(rng, case):
    groups, rows, n, k = 4, 8, 130, 256
    masked = case in ("every count 0", "one group used")
    qa, sa, qb, sb = grouped_operands(rng, groups, 0 if case == "no rows" else rows, n, k, masked)
    if masked:
        row_map = np.zeros(groups, np.int32)
        if case == "one group used":
            row_map[2] = 3
    else:
        row_map = np.full(qa.shape[0], -1, np.int32)
    want = oracle(CONTIGUOUS if not masked else MASKED, qa, sa, qb, sb, row_map)
    d = poisoned(rng, want.shape, np.float32)
    before = d.copy()
    call(MASKED if masked else CONTIGUOUS, qa, sa, qb, sb, d, row_map, 1)
    used = np.isfinite(want)
    np.testing.assert_array_equal(bits(d)[~used], bits(before)[~used])
    if used.any():
        assert rel_err(d[used], want[used]) <= TOL["float32"]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("bad", ["masked_m > max_m", "masked_m < 0", "index >= G", "index < -1"])
def test_bad_contents_refused_before_any_write(rng, framework, bad):
    """On host data an index outside [-1, G) or a count outside [0, max_m] is the library's InvalidArgumentError,
    raised before anything is written."""
    if framework == "torch" and torch is None:
        pytest.skip("needs torch")
    groups, rows, n, k = 3, 6, 140, 200
    masked = bad.startswith("masked_m")
    qa, sa, qb, sb = grouped_operands(rng, groups, rows, n, k, masked)
    row_map = make_row_map(rng, MASKED if masked else CONTIGUOUS, groups, rows)
    row_map[1] = {"masked_m > max_m": rows + 1, "masked_m < 0": -1, "index >= G": groups, "index < -1": -2}[bad]
    d = poisoned(rng, (groups, rows, n) if masked else (rows, n), np.float32)
    before = d.copy()
    args = [qa, sa, qb, sb, d, row_map]
    if framework == "torch":
        args = [from_numpy(v) for v in args]
    with pytest.raises(blockfp8.InvalidArgumentError, match=r"(masked_m|m_indices)\[1\] = -?\d+ is outside"):
        call(MASKED if masked else CONTIGUOUS, *args)
    np.testing.assert_array_equal(bits(args[4]), bits(before))


# ---------------------------------------------------------------------------------------------------------------
# torch on CPU tensors
# ---------------------------------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("out", list(NP_OUT))
def test_torch_same_bytes_as_numpy(rng, path, layout, out):
    """DeepGEMM-style operands (sfa MN-major TMA-aligned, made by per_token_group_quant_fp8 on torch tensors):
    the numpy path's bytes, unused rows untouched."""
    groups, rows, n, k = 5, 12, 200, 640
    masked = layout == MASKED
    x = torch.randn(((groups, rows) if masked else (rows,)) + (k,), dtype=torch.bfloat16)
    qa, sa = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
    qb, sb = blockfp8.per_block_quant_fp8(torch.randn(groups, n, k))
    row_map = make_row_map(rng, layout, groups, rows)
    d_np = poisoned(rng, (groups, rows, n) if masked else (rows, n), NP_OUT[out])
    d = from_numpy(d_np)
    call(layout, qa, sa, qb, sb, d, torch.from_numpy(row_map), rows)
    call(layout, to_numpy(qa), to_numpy(sa), to_numpy(qb), to_numpy(sb), d_np, row_map, rows)
    np.testing.assert_array_equal(bits(d), bits(d_np))


@needs_torch
def test_torch_non_contiguous_operands_are_copied(rng, path):
    groups, rows, n, k = 3, 8, 136, 300
    qa, sa, qb, sb = (from_numpy(v) for v in grouped_operands(rng, groups, rows, n, k, True))
    counts = torch.tensor([8, 3, 0], dtype=torch.int32)
    want = torch.zeros(groups, rows, n)
    blockfp8.m_grouped_fp8_gemm_nt_masked((qa, sa), (qb, sb), want, counts, 4)
    wide = torch.zeros(groups, rows, 2 * k, dtype=qa.dtype)
    wide[..., ::2] = qa
    wide_counts = torch.zeros(6, dtype=torch.int32)
    wide_counts[::2] = counts
    d = torch.zeros(groups, rows, n)
    blockfp8.m_grouped_fp8_gemm_nt_masked((wide[..., ::2], sa.transpose(1, 2).contiguous().transpose(1, 2)),
                                          (qb.transpose(1, 2).contiguous().transpose(1, 2), sb), d,
                                          wide_counts[::2], 4)
    assert torch.equal(d, want)


@needs_torch
def test_torch_non_contiguous_d_is_refused(rng, path):
    qa, sa, qb, sb = (from_numpy(v) for v in grouped_operands(rng, 2, 4, 128, 256, False))
    d = torch.zeros(128, 4).t()
    with pytest.raises(ValueError, match="contiguous"):
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((qa, sa), (qb, sb), d, torch.zeros(4, dtype=torch.int32))


@needs_torch
def test_grouped_op_registered_with_a_fake_implementation(rng):
    groups, rows, n, k = 3, 5, 130, 256
    qa, sa, qb, sb = (from_numpy(v) for v in grouped_operands(rng, groups, rows, n, k, True))
    d = torch.zeros(groups, rows, n, dtype=torch.bfloat16)
    counts = torch.tensor([5, 0, 2], dtype=torch.int32)
    torch.library.opcheck(torch.ops.blockfp8.grouped_gemm.default,
                          (qa, sa, qb, sb, d, counts, blockfp8._c.MASKED, 2), test_utils=("test_faketensor",))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # shapes are checked, nothing runs
        a = torch.empty(groups, rows, k, dtype=torch.float8_e4m3fn)
        fd = torch.empty(groups, rows, n, dtype=torch.bfloat16)
        blockfp8.m_grouped_fp8_gemm_nt_masked((a, torch.empty(groups, rows, 2)),
                                              (torch.empty(groups, n, k, dtype=torch.float8_e4m3fn),
                                               torch.empty(groups, 2, 2)), fd,
                                              torch.empty(groups, dtype=torch.int32), 2)
        with pytest.raises(ValueError, match=r"d must be \[3, 5, 130\]"):
            blockfp8.m_grouped_fp8_gemm_nt_masked((a, torch.empty(groups, rows, 2)),
                                                  (torch.empty(groups, n, k, dtype=torch.float8_e4m3fn),
                                                   torch.empty(groups, 2, 2)), fd[:, :4],
                                                  torch.empty(groups, dtype=torch.int32), 2)


@needs_torch
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(rng, backend):
    """A MoE step calling both grouped ops (routing in torch) traces in one graph and gives the eager bytes."""
    torch._dynamo.reset()
    groups, n, k, max_m = 4, 256, 384, 6
    qb, sb = blockfp8.per_block_quant_fp8(torch.randn(groups, n, k) / k ** 0.5)

    def f(x, expert, counts):
        q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
        y = torch.full((x.shape[0], n), float("nan"), dtype=torch.bfloat16)
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((q, s), (qb, sb), y, expert)
        xm = x[: groups * max_m].view(groups, max_m, k)
        qm, sm = blockfp8.per_token_group_quant_fp8(xm, column_major_scales=True, scale_tma_aligned=True)
        z = torch.full((groups, max_m, n), float("nan"))
        blockfp8.m_grouped_fp8_gemm_nt_masked((qm, sm), (qb, sb), z, counts, max_m // 2)
        return torch.nan_to_num(y.float()).relu(), z

    g = torch.compile(f, fullgraph=True, backend=backend, dynamic=False)
    for m in (32, 32):
        x = torch.randn(m, k)
        expert = torch.from_numpy(make_row_map(rng, CONTIGUOUS, groups, m))
        counts = torch.from_numpy(make_row_map(rng, MASKED, groups, max_m))
        for got, want in zip(g(x, expert, counts), f(x, expert, counts)):
            np.testing.assert_array_equal(bits(got), bits(want))


@needs_torch
def test_compiled_graph_calls_the_op(rng):
    torch._dynamo.reset()
    qb, sb = blockfp8.per_block_quant_fp8(torch.randn(2, 128, 256))
    seen = []

    def backend(gm, inputs):
        seen.extend(str(node.target) for node in gm.graph.nodes if node.op == "call_function")
        return gm

    def f(q, s, counts):
        d = torch.zeros(2, 3, 128)
        blockfp8.m_grouped_fp8_gemm_nt_masked((q, s), (qb, sb), d, counts, 3)
        return d

    q, s = blockfp8.per_token_group_quant_fp8(torch.randn(2, 3, 256))
    torch.compile(f, fullgraph=True, backend=backend)(q, s, torch.tensor([3, 1], dtype=torch.int32))
    assert any("blockfp8.grouped_gemm" in t for t in seen), seen
