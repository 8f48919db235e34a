"""CUDA tensors (skipped without a GPU): the outputs on the input's device, the same bytes as the CPU path for
quantization, GEMMs within the numerics' (docs/numerics.md) GPU tolerances of the float64 oracle, the layouts the Hopper kernels read
derived from the scales' strides, CUDA-graph capture and replay with identical bytes, torch.compile (inductor and
reduce-overhead), work on torch.cuda.current_stream(), no host synchronization. The grouped (MoE) calls: against the
float64 grouped oracle, unused rows untouched, bad row maps harmless, the masked call captured once and replayed with
new counts, the current stream, torch.compile."""
import numpy as np
import pytest

import blockfp8
from conftest import needs_cuda, torch
from oracle import block_gemm, calc_diff, codes, grouped_gemm, pack_ue8m0, quantize, rel_err, to_numpy

pytestmark = needs_cuda

GPU_TOL = {"bfloat16": 8e-3, "float16": 1e-3, "float32": 2.5e-4}
if torch is not None:
    DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cuda(t):
    return t.to("cuda")


def same(a, b):
    a, b = to_numpy(a), to_numpy(b)
    assert a.shape == b.shape and a.dtype.itemsize == b.dtype.itemsize
    np.testing.assert_array_equal(a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}"))


def is_hopper():
    return torch.cuda.get_device_capability() == (9, 0)


FLAGS = [(False, False, False), (True, False, False), (True, True, False), (True, True, True), (False, False, True)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(1, 1), (5, 300), (2, 3, 1000), (16, 7168)])
@pytest.mark.parametrize("flags", FLAGS)
def test_quant_act_same_bytes_as_cpu(dtype, shape, flags):
    x = torch.randn(shape, dtype=DT[dtype]) * 7
    x.view(-1)[0] = float("nan")
    kw = dict(column_major_scales=flags[0], scale_tma_aligned=flags[1], scale_ue8m0=flags[2])
    qc, sc = blockfp8.per_token_group_quant_fp8(x, **kw)
    qg, sg = blockfp8.per_token_group_quant_fp8(cuda(x), **kw)
    assert qg.device.type == "cuda" and sg.device.type == "cuda"
    assert sg.stride() == sc.stride() or min(sg.shape[-2:]) <= 1
    same(qg, qc)
    same(sg, sc)


def test_quant_weight_same_bytes_as_cpu():
    w = torch.randn(3, 300, 260)
    qc, sc = blockfp8.per_block_quant_fp8(w, scale_ue8m0=True)
    qg, sg = blockfp8.per_block_quant_fp8(cuda(w), scale_ue8m0=True)
    assert qg.device.type == "cuda"
    same(qg, qc)
    same(sg, sc)


def oracle(q, s, wq, ws):
    qa = codes(q).reshape(-1, q.shape[-1])
    sa = to_numpy(s.contiguous()).reshape(qa.shape[0], -1)
    return block_gemm(qa, sa, codes(wq), to_numpy(ws), None)


@pytest.mark.parametrize("out", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("mnk", [(1, 2112, 7168), (16, 2112, 7168), (100, 4096, 512), (3, 130, 300), (128, 7168, 2048)])
@pytest.mark.parametrize("aligned", [False, True])
def test_matmul_within_gpu_tolerance(out, mnk, aligned):
    m, n, k = mnk
    x = torch.randn(m, k, device="cuda")
    w = torch.randn(n, k, device="cuda") / k ** 0.5
    q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=aligned, scale_tma_aligned=aligned)
    wq, ws = blockfp8.per_block_quant_fp8(w)
    y = blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, [128, 128], output_dtype=DT[out])
    assert y.device.type == "cuda" and y.dtype == DT[out]
    want = oracle(q, s, wq, ws)
    assert rel_err(to_numpy(y.float()), want) <= GPU_TOL[out]
    if k >= 128:
        exact = x.double().cpu().numpy() @ w.double().cpu().numpy().T
        # held to the exact product of the same quantized inputs plus 1e-4 (docs/numerics.md), as test_numpy.py
        assert calc_diff(to_numpy(y.float()).astype(np.float64), exact) <= calc_diff(want, exact) + 1e-4
    calls = blockfp8.stats()["calls"]
    assert sum(calls[b] for b in ("hopper", "cublaslt", "cuda_generic")) == 1 and calls["cpu"] == 0


@pytest.mark.skipif(torch is None or not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the hopper backend runs on sm_90")
def test_layout_from_strides_picks_hopper():
    """MN-major aligned activation scales (SGLang's column_major + tma_aligned) are what hopper reads: it runs them;
    row-major ones go to a backend that reads those, and explain says why hopper could not."""
    x = torch.randn(16, 7168, device="cuda")
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(2112, 7168, device="cuda"))
    q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
    blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, output_dtype=torch.bfloat16)
    assert blockfp8.stats()["calls"]["hopper"] == 1
    q, s = blockfp8.per_token_group_quant_fp8(x)
    blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, output_dtype=torch.bfloat16)
    assert blockfp8.stats()["calls"]["hopper"] == 1
    with blockfp8.policy("strict", "hopper"):
        with pytest.raises(blockfp8.UnsupportedError, match="mn_major_aligned"):
            blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, output_dtype=torch.bfloat16)
    # apply_w8a8_block_fp8_linear quantizes into the layout the chosen backend reads: hopper at M=16.
    blockfp8.reset_stats()
    blockfp8.apply_w8a8_block_fp8_linear(x.bfloat16(), wq, [128, 128], ws)
    assert blockfp8.stats()["calls"]["hopper"] == 1


def test_apply_linear_is_quant_then_gemm_on_the_device():
    x = torch.randn(2, 8, 7168, dtype=torch.bfloat16, device="cuda")
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(2112, 7168, device="cuda"))
    bias = torch.randn(2112, dtype=torch.bfloat16, device="cuda")
    y = blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws, bias=bias)
    assert y.shape == (2, 8, 2112) and y.dtype == torch.bfloat16 and y.device.type == "cuda"
    q, s = blockfp8.per_token_group_quant_fp8(x)
    want = oracle(q, s, wq, ws) + bias.double().cpu().numpy()
    assert rel_err(to_numpy(y.float()).reshape(16, 2112), want) <= GPU_TOL["bfloat16"]
    blockfp8.reset_stats()
    y0 = blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws)
    (backend,) = [b for b, n in blockfp8.stats()["calls"].items() if n]
    layout = blockfp8.backends()[[b["name"] for b in blockfp8.backends()].index(backend)]["a_layouts"]
    aligned = "mn_major_aligned" in layout
    q, s = blockfp8.per_token_group_quant_fp8(x.view(16, 7168), column_major_scales=aligned, scale_tma_aligned=aligned)
    d = torch.full((16, 2112), float("nan"), dtype=torch.bfloat16, device="cuda")
    with blockfp8.policy("strict", backend):
        blockfp8.fp8_gemm_nt((q, s), (wq, ws), d)  # the same backend on the same quantized operands
    same(d, y0.view(16, 2112))


def test_linear_on_cuda(tmp_path):
    w = torch.randn(2112, 7168) / 7168 ** 0.5
    layer = blockfp8.Linear.from_float(w, device="cuda", bias=torch.randn(2112, dtype=torch.bfloat16))
    assert "row_major" in layer.layouts()["device"]
    x = torch.randn(16, 7168, dtype=torch.bfloat16, device="cuda")
    y = layer(x)
    assert y.device == x.device and y.dtype == torch.bfloat16
    q, s = layer.weight()
    qx, sx, _ = quantize(x.float().cpu().numpy(), 1, False)
    want = block_gemm(qx, sx, codes(q), s, layer.bias_numpy.astype(np.float64))
    assert rel_err(to_numpy(y.float()), want) <= GPU_TOL["bfloat16"]
    with pytest.raises(ValueError, match="this layer on cuda"):
        layer(x.cpu())


def model():
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(2112, 7168, device="cuda") / 85)
    layer = blockfp8.Linear.from_float(torch.randn(1536, 2112) / 46, device="cuda")

    def f(x):
        y = blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws)
        q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
        z = blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, [128, 128], output_dtype=torch.bfloat16)
        d = torch.empty(x.shape[0], 2112, dtype=torch.bfloat16, device="cuda")
        blockfp8.fp8_gemm_nt((q, s), (wq, ws), d)
        return layer(torch.relu(y)), z, d, q.view(torch.uint8), s

    return f


def test_graph_capture_and_replay_identical_bytes():
    f = model()
    x = torch.randn(16, 7168, dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        f(x)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = f(x)
    for step in range(3):
        x.copy_(torch.randn(16, 7168, dtype=torch.bfloat16, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(captured, f(x)):
            same(got, want)
        if step == 0:
            first = [t.clone() for t in captured]
    graph.replay()  # the same input replayed twice: the same bytes
    torch.cuda.synchronize()
    again = [t.clone() for t in captured]
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(again, captured):
        same(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(first, captured))  # the replays did read the new inputs


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_torch_compile_on_cuda(mode):
    torch._dynamo.reset()
    f = model()
    g = torch.compile(f, fullgraph=True, mode=mode)
    for m in (16, 16, 16, 9):
        x = torch.randn(m, 7168, dtype=torch.bfloat16, device="cuda")
        for got, want in zip(g(x), f(x)):
            same(got.clone(), want)


def test_runs_on_the_current_stream():
    """Work issued on a side stream: the inputs it just wrote are read (the op is ordered on that stream), and
    nothing waits for the host."""
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(2112, 7168, device="cuda"))
    src = torch.randn(16, 7168, dtype=torch.bfloat16, device="cuda")
    want = blockfp8.apply_w8a8_block_fp8_linear(src, wq, [128, 128], ws)
    layer = blockfp8.Linear.from_tensors(wq, ws, device="cuda")
    want_layer = layer(src)
    side = torch.cuda.Stream()
    x = torch.zeros_like(src)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before x is written
        x.copy_(src)
        torch.cuda.set_sync_debug_mode("error")
        try:
            y = blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws)
            y2 = layer(x)
            q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
            z = blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, output_dtype=torch.bfloat16)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    side.synchronize()
    same(y, want)
    same(y2, want_layer)
    q0, s0 = blockfp8.per_token_group_quant_fp8(src, column_major_scales=True, scale_tma_aligned=True)
    same(q, q0)
    same(z, blockfp8.w8a8_block_fp8_matmul(q0, wq, s0, ws, output_dtype=torch.bfloat16))


@pytest.mark.skipif(torch is None or not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs two CUDA devices")
def test_second_device():
    x = torch.randn(4, 512, device="cuda:1")
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(256, 512, device="cuda:1"))
    before = torch.cuda.current_device()
    y = blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws)
    assert y.device == x.device and torch.cuda.current_device() == before
    want = blockfp8.apply_w8a8_block_fp8_linear(x.to("cuda:0"), wq.to("cuda:0"), [128, 128], ws.to("cuda:0"))
    same(y, want)


def test_unaligned_views_are_copied():
    """Views at addresses that are not 16-byte aligned (the TMA kernels' requirement) give the aligned call's
    bytes, on the backend the aligned call took."""
    m, n, k = 16, 2112, 7168
    x = torch.randn(m, k, device="cuda")
    q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(n, k, device="cuda"))
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    blockfp8.fp8_gemm_nt((q, s), (wq, ws), d)
    (backend,) = [b for b, c in blockfp8.stats()["calls"].items() if c]

    def offset(t, extra):
        flat = torch.empty(t.numel() + extra, dtype=t.dtype, device="cuda")
        view = flat[extra:].view(t.shape)
        view.copy_(t)
        return view

    s_off = torch.empty(s.shape[1] * 16 + 1, device="cuda")[1:].as_strided(s.shape, (1, 16))
    s_off.copy_(s)
    d_off = offset(torch.zeros(m, n, dtype=torch.bfloat16, device="cuda"), 1)
    with blockfp8.policy("strict", backend):
        blockfp8.fp8_gemm_nt((offset(q, 1), s_off), (offset(wq, 3), offset(ws, 1)), d_off)
    same(d_off, d)
    y = blockfp8.apply_w8a8_block_fp8_linear(offset(x.bfloat16(), 1), offset(wq, 1), [128, 128], ws)
    same(y, blockfp8.apply_w8a8_block_fp8_linear(x.bfloat16(), wq, [128, 128], ws))


def test_mixed_devices_refused():
    x = torch.randn(4, 512, device="cuda")
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(256, 512))
    with pytest.raises(ValueError, match="weight is on cpu"):
        blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws)


def test_fallback_warning_on_cuda():
    """cuBLASLt does not declare fp32 output: preferring it for an fp32 GEMM falls back, visibly, once."""
    x = torch.randn(16, 512, device="cuda")
    q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(256, 512, device="cuda"))
    with blockfp8.policy("prefer", "cublaslt"):
        with pytest.warns(blockfp8.FallbackWarning, match="cublaslt"):
            blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, output_dtype=torch.float32)
    (f,) = blockfp8.stats()["fallbacks"]
    assert f["preferred"] == "cublaslt" and "output dtype" in f["reason"]


# ---------------------------------------------------------------------------------------------------------------
# Grouped (MoE) GEMM: m_grouped_fp8_gemm_nt_contiguous / _masked on CUDA tensors
# ---------------------------------------------------------------------------------------------------------------
def packed_on_cuda(scales):
    """fp32 power-of-two scales [..., rows, kb] -> int32 packed UE8M0 on the GPU, in the packed layout's strides
    (its padding included), as DeepGEMM and SGLang allocate them."""
    view = pack_ue8m0(to_numpy(scales))
    return torch.from_numpy(view.base).to("cuda").transpose(-1, -2)[..., :view.shape[-2], :]


def grouped_case(rng, layout, groups, rows, n, k, ue8m0=False, segmented=False):
    """(a, sfa, b, sfb, row map, float64 oracle with NaN where nothing is written) on the GPU: sfa in DeepGEMM's
    MN-major TMA-aligned form (packed UE8M0 with ue8m0); contiguous rows in 128-aligned segments per group
    (segmented, DeepGEMM's layout) or scattered with padding."""
    masked = layout == "masked"
    x = torch.randn(((groups, rows) if masked else (rows,)) + (k,), device="cuda")
    qa, sa = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True,
                                                scale_ue8m0=ue8m0)
    sa_rows = blockfp8.per_token_group_quant_fp8(x, scale_ue8m0=ue8m0)[1]  # the same scales, fp32 row-major
    qb, sb = blockfp8.per_block_quant_fp8(torch.randn(groups, n, k, device="cuda") / k ** 0.5, scale_ue8m0=ue8m0)
    if masked:
        row_map = rng.integers(0, rows + 1, groups).astype(np.int32)
        row_map[rng.permutation(groups)[:2]] = (rows, 0)
    elif segmented:
        row_map = np.full(rows, -1, np.int32)
        for g in range(groups):
            used = min(128, int(rng.integers(0, 129)))
            row_map[g * 128: g * 128 + used] = g
    else:
        row_map = rng.integers(-1, groups, rows).astype(np.int32)
    want = grouped_gemm(qa, sa_rows.cpu().numpy(), qb, sb.cpu().numpy(),
                        **{"masked_m" if masked else "m_indices": row_map})
    sfb = packed_on_cuda(sb) if ue8m0 else sb
    return qa, sa, qb, sfb, torch.from_numpy(row_map).to("cuda"), want


def grouped_call(layout, a, sfa, b, sfb, d, row_map, expected_m=0):
    if layout == "contiguous":
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, row_map)
    else:
        blockfp8.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, row_map, expected_m)


def poison(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


@pytest.mark.parametrize("layout,segmented", [("contiguous", True), ("contiguous", False), ("masked", False)])
@pytest.mark.parametrize("out", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("ue8m0", [False, True])
@pytest.mark.parametrize("shape", [(8, 1024, 512, 1024), (3, 37, 200, 300)])
def test_grouped_within_gpu_tolerance(rng, layout, segmented, out, ue8m0, shape):
    """Against the float64 grouped oracle; the rows no group uses keep their NaN; one call on a CUDA backend."""
    groups, rows, n, k = shape
    if segmented and rows < groups * 128:
        pytest.skip("128-aligned segments need 128 rows per group")
    a, sfa, b, sfb, row_map, want = grouped_case(rng, layout, groups, rows, n, k, ue8m0, segmented)
    d = poison(want.shape, DT[out])
    grouped_call(layout, a, sfa, b, sfb, d, row_map, max(1, rows // 2))
    got = to_numpy(d.float())
    used = np.isfinite(want)
    assert np.isnan(got[~used]).all(), "a row no group uses was written"
    assert np.isfinite(got[used]).all()
    if used.any():
        assert rel_err(got[used], want[used]) <= GPU_TOL[out]
    calls = blockfp8.stats()["calls"]
    assert sum(calls[b] for b in ("hopper", "cublaslt", "cuda_generic")) == 1 and calls["cpu"] == 0


def test_grouped_bad_contents_are_harmless_on_cuda(rng):
    """The host cannot see CUDA contents without a sync: an index outside [-1, G) is padding (its row untouched),
    masked_m is clamped to [0, max_m]; no error, nothing written out of bounds."""
    groups, rows, n, k = 4, 16, 256, 512
    a, sfa, b, sfb, row_map, want = grouped_case(rng, "contiguous", groups, rows, n, k)
    row_map[[1, 5]] = torch.tensor([groups, -7], dtype=torch.int32, device="cuda")
    want[[1, 5]] = np.nan
    d = poison((rows, n), torch.float32)
    grouped_call("contiguous", a, sfa, b, sfb, d, row_map)
    got = to_numpy(d)
    assert np.isnan(got[[1, 5]]).all()
    used = np.isfinite(want)
    assert rel_err(got[used], want[used]) <= GPU_TOL["float32"]

    a, sfa, b, sfb, counts, _ = grouped_case(rng, "masked", groups, rows, n, k)
    counts.copy_(torch.tensor([rows + 5, -3, rows, 0], dtype=torch.int32))
    guard = poison((groups + 1, rows, n), torch.float32)  # d, then one more group's rows that nothing may reach
    grouped_call("masked", a, sfa, b, sfb, guard[:groups], counts, rows)
    written = ~torch.isnan(guard).all(dim=2).cpu().numpy()  # [G + 1, max_m]: the rows that hold a result
    assert written[0].all() and written[2].all(), "a count above max_m writes max_m rows"
    assert not written[1].any() and not written[3].any() and not written[4].any()


def test_grouped_masked_graph_replays_new_counts(rng):
    """The masked call captured once in a CUDA graph, replayed with other masked_m written into the same tensor
    between replays (DeepEP's low-latency decode): each replay writes exactly the rows below the new counts, with
    the eager call's bytes."""
    groups, max_m, n, k = 8, 32, 512, 1024
    a, sfa, b, sfb, counts, _ = grouped_case(rng, "masked", groups, max_m, n, k)
    d = poison((groups, max_m, n), torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        grouped_call("masked", a, sfa, b, sfb, d, counts, max_m // 2)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grouped_call("masked", a, sfa, b, sfb, d, counts, max_m // 2)
    for step in range(4):
        new = rng.integers(0, max_m + 1, groups).astype(np.int32)
        new[step % groups] = 0
        counts.copy_(torch.from_numpy(new))
        d.fill_(float("nan"))
        graph.replay()
        want = poison((groups, max_m, n), torch.bfloat16)
        grouped_call("masked", a, sfa, b, sfb, want, counts, max_m // 2)
        torch.cuda.synchronize()
        same(d, want)
        rows_written = (~torch.isnan(d.float()).all(dim=2)).sum(dim=1).cpu().numpy()
        np.testing.assert_array_equal(rows_written, new)


def test_grouped_runs_on_the_current_stream(rng):
    """Issued on a side stream whose inputs are written late: the calls are ordered on that stream and nothing
    waits for the host (masked_m and m_indices are read by the kernels)."""
    groups, rows, n, k = 4, 16, 256, 512
    a, sfa, b, sfb, counts, _ = grouped_case(rng, "masked", groups, rows, n, k)
    want = poison((groups, rows, n), torch.bfloat16)
    grouped_call("masked", a, sfa, b, sfb, want, counts, rows)
    ca, csfa, cb, csfb, idx, _ = grouped_case(rng, "contiguous", groups, 4 * rows, n, k)
    want_c = poison((4 * rows, n), torch.bfloat16)
    grouped_call("contiguous", ca, csfa, cb, csfb, want_c, idx)
    late_counts, late_idx = torch.zeros_like(counts), torch.zeros_like(idx)
    d, dc = poison((groups, rows, n), torch.bfloat16), poison((4 * rows, n), torch.bfloat16)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the row maps are written
        late_counts.copy_(counts)
        late_idx.copy_(idx)
        torch.cuda.set_sync_debug_mode("error")
        try:
            grouped_call("masked", a, sfa, b, sfb, d, late_counts, rows)
            grouped_call("contiguous", ca, csfa, cb, csfb, dc, late_idx)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    side.synchronize()
    same(d, want)
    same(dc, want_c)


def test_grouped_unaligned_d_keeps_unused_rows(rng):
    """d at an address that is not 16-byte aligned is written through an aligned copy: the same bytes, and the
    rows no group uses keep theirs."""
    groups, rows, n, k = 3, 24, 256, 512
    a, sfa, b, sfb, idx, _ = grouped_case(rng, "contiguous", groups, rows, n, k)
    want = poison((rows, n), torch.bfloat16)
    grouped_call("contiguous", a, sfa, b, sfb, want, idx)
    d = torch.full((rows * n + 1,), float("nan"), dtype=torch.bfloat16, device="cuda")[1:].view(rows, n)
    assert d.data_ptr() % 16
    grouped_call("contiguous", a, sfa, b, sfb, d, idx)
    same(d, want)


def test_grouped_mixed_devices_refused(rng):
    a, sfa, b, sfb, counts, _ = grouped_case(rng, "masked", 2, 4, 128, 256)
    d = poison((2, 4, 128), torch.bfloat16)
    with pytest.raises(ValueError, match="masked_m is on cpu"):
        grouped_call("masked", a, sfa, b, sfb, d, counts.cpu(), 4)
    with pytest.raises(ValueError, match="d is on cpu"):
        grouped_call("masked", a, sfa, b, sfb, d.cpu(), counts, 4)
    with pytest.raises(ValueError, match="sfb is on cpu"):
        grouped_call("masked", a, sfa, b, sfb.cpu(), d, counts, 4)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_grouped_torch_compile_on_cuda(rng, mode):
    torch._dynamo.reset()
    groups, max_m, n, k = 4, 16, 512, 1024
    qb, sb = blockfp8.per_block_quant_fp8(torch.randn(groups, n, k, device="cuda") / 32)

    def f(x, counts):
        q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
        d = torch.zeros(groups, max_m, n, dtype=torch.bfloat16, device="cuda")
        blockfp8.m_grouped_fp8_gemm_nt_masked((q, s), (qb, sb), d, counts, max_m // 2)
        return d

    g = torch.compile(f, fullgraph=True, mode=mode)
    for _ in range(4):
        x = torch.randn(groups, max_m, k, dtype=torch.bfloat16, device="cuda")
        counts = torch.from_numpy(rng.integers(0, max_m + 1, groups).astype(np.int32)).to("cuda")
        same(g(x, counts).clone(), f(x, counts))
