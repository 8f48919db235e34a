"""The torch path on CPU tensors: the same bytes as the numpy path for every function, the custom ops (through
torch.ops, fake tensors, meta tensors), torch.compile(fullgraph=True), non-contiguous inputs."""
import numpy as np
import pytest

import blockfp8
from conftest import needs_torch, torch
from oracle import BF16, from_numpy, to_numpy

pytestmark = needs_torch

if torch is not None:
    from blockfp8 import _torch_path as T

    TORCH_OUT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def same(a, b, what=""):
    """Bitwise equality of two arrays/tensors (values, dtype family, shape)."""
    a, b = to_numpy(a), to_numpy(b)
    assert a.shape == b.shape, what
    assert a.dtype.itemsize == b.dtype.itemsize, what
    np.testing.assert_array_equal(a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}"), err_msg=what)


FLAGS = [(False, False, False), (True, False, False), (True, True, False), (True, True, True), (False, False, True)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("shape,flags", [(shape, flags)
                                         for shape in [(300,), (1, 1), (5, 300), (2, 3, 1000), (2, 1, 129)]
                                         for flags in FLAGS if len(shape) >= 2 or not flags[0]])
def test_act_quant_same_as_numpy(rng, path, dtype, shape, flags):
    x = (rng.standard_normal(shape) * 3).astype({"float32": np.float32, "bfloat16": BF16, "float16": np.float16}[dtype])
    kw = dict(column_major_scales=flags[0], scale_tma_aligned=flags[1], scale_ue8m0=flags[2])
    qn, sn = blockfp8.per_token_group_quant_fp8(x, **kw)
    qt, st = blockfp8.per_token_group_quant_fp8(from_numpy(x), **kw)
    assert qt.dtype == torch.float8_e4m3fn and tuple(qt.shape) == shape
    same(qt, qn)
    same(st, sn)
    # The strides too: a column-major result is column-major in both.
    assert [s // sn.itemsize for s in sn.strides] == list(st.stride()) or min(st.shape[-2:]) <= 1


@pytest.mark.parametrize("shape", [(1, 1), (129, 255), (3, 200, 130)])
@pytest.mark.parametrize("ue8m0", [False, True])
def test_weight_quant_same_as_numpy(rng, path, shape, ue8m0):
    w = rng.standard_normal(shape).astype(BF16)
    qn, sn = blockfp8.per_block_quant_fp8(w, scale_ue8m0=ue8m0)
    qt, st = blockfp8.per_block_quant_fp8(from_numpy(w), (128, 128), scale_ue8m0=ue8m0)
    same(qt, qn)
    same(st, sn)


def operands(rng, m, n, k, ue8m0=False, flags=(False, False, False)):
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=flags[0], scale_tma_aligned=flags[1],
                                              scale_ue8m0=flags[2])
    wq, ws = blockfp8.per_block_quant_fp8(w, scale_ue8m0=ue8m0)
    return q, s, wq, ws


@pytest.mark.parametrize("out", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("mnk", [(1, 1, 1), (5, 129, 300), (16, 256, 1024)])
@pytest.mark.parametrize("flags", FLAGS)
def test_matmul_same_as_numpy(rng, path, out, mnk, flags):
    q, s, wq, ws = operands(rng, *mnk, ue8m0=flags[2], flags=flags)
    yn = blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, [128, 128], output_dtype=out)
    # Scales with the numpy arrays' strides (torch.from_numpy keeps them).
    st = torch.from_numpy(s)
    yt = blockfp8.w8a8_block_fp8_matmul(from_numpy(q), from_numpy(wq), st, torch.from_numpy(ws), [128, 128],
                                        output_dtype=TORCH_OUT[out])
    assert yt.dtype == TORCH_OUT[out]
    same(yt, yn)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(1, 300), (3, 4, 1000)])
def test_apply_linear_same_as_numpy(rng, path, dtype, shape):
    x = rng.standard_normal(shape).astype({"float32": np.float32, "bfloat16": BF16, "float16": np.float16}[dtype])
    wq, ws = blockfp8.per_block_quant_fp8(rng.standard_normal((257, shape[-1])).astype(np.float32))
    bias = rng.standard_normal(257).astype(BF16)
    yn = blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws, None, bias)
    yt = blockfp8.apply_w8a8_block_fp8_linear(from_numpy(x), from_numpy(wq), [128, 128], torch.from_numpy(ws), None,
                                              from_numpy(bias))
    assert yt.dtype == from_numpy(x).dtype and tuple(yt.shape) == shape[:-1] + (257,)
    same(yt, yn)


def test_fp8_gemm_nt_same_as_numpy(rng, path):
    q, s, wq, ws = operands(rng, 6, 300, 700, flags=(True, True, False))
    dn = np.full((6, 300), np.nan, BF16)
    blockfp8.fp8_gemm_nt((q, s), (wq, ws), dn)
    d = torch.full((6, 300), float("nan"), dtype=torch.bfloat16)
    assert blockfp8.fp8_gemm_nt((from_numpy(q), torch.from_numpy(s)), (from_numpy(wq), torch.from_numpy(ws)), d) is None
    same(d, dn)
    c = torch.randn(6, 300)
    d32 = torch.full((6, 300), float("nan"))
    blockfp8.fp8_gemm_nt((from_numpy(q), torch.from_numpy(s)), (from_numpy(wq), torch.from_numpy(ws)), d32, c=c)
    plain = blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, output_dtype="float32")
    same(d32, plain + c.numpy())
    # c may be d, or another view of d's memory (every path, torch.ops included: c is read as it was before the call)
    for view in (lambda t: t, lambda t: t.view(6, 300), lambda t: t[:]):
        d32 = c.clone()
        blockfp8.fp8_gemm_nt((from_numpy(q), torch.from_numpy(s)), (from_numpy(wq), torch.from_numpy(ws)), d32,
                             c=view(d32))
        same(d32, plain + c.numpy())


def test_non_contiguous_inputs_are_copied(rng, path):
    q, s, wq, ws = operands(rng, 8, 200, 384)
    want = blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, output_dtype="float32")
    qt, wt = from_numpy(q), from_numpy(wq)
    a_t = qt.t().contiguous().t()  # column-major memory
    b_wide = torch.zeros(200, 768, dtype=torch.float8_e4m3fn)
    b_wide[:, ::2] = wt
    s_wide = torch.zeros(8, 6)
    s_wide[:, ::2] = torch.from_numpy(s)
    got = blockfp8.w8a8_block_fp8_matmul(a_t, b_wide[:, ::2], s_wide[:, ::2], torch.from_numpy(ws),
                                         output_dtype=torch.float32)
    same(got, want)
    x = torch.randn(6, 2, 384, dtype=torch.bfloat16)
    y1 = blockfp8.apply_w8a8_block_fp8_linear(x[:, 0], wt, [128, 128], torch.from_numpy(ws))
    y2 = blockfp8.apply_w8a8_block_fp8_linear(x[:, 0].contiguous(), wt, [128, 128], torch.from_numpy(ws))
    same(y1, y2)


def test_non_contiguous_d_is_refused(rng, path):
    q, s, wq, ws = operands(rng, 4, 256, 256)
    d = torch.empty(256, 4, dtype=torch.bfloat16).t()
    with pytest.raises(ValueError, match="contiguous"):
        blockfp8.fp8_gemm_nt((from_numpy(q), torch.from_numpy(s)), (from_numpy(wq), torch.from_numpy(ws)), d)


def test_ops_are_registered():
    for name in ["quant_act", "quant_weight", "gemm", "gemm_out", "grouped_gemm", "linear_dyn", "linear"]:
        assert hasattr(torch.ops.blockfp8, name)
    # torch.library's check that the fake implementations agree with the real ones (its test_schema would
    # multiply fp8 tensors, which torch cannot do on the CPU).
    x = torch.randn(4, 256, dtype=torch.bfloat16)
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(130, 256))
    torch.library.opcheck(torch.ops.blockfp8.linear_dyn.default, (x, wq, ws, None),
                          test_utils=("test_faketensor",))
    q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
    torch.library.opcheck(torch.ops.blockfp8.gemm.default, (q, s, wq, ws, None, torch.bfloat16),
                          test_utils=("test_faketensor",))
    torch.library.opcheck(torch.ops.blockfp8.quant_act.default, (x, 2, False, 1), test_utils=("test_faketensor",))


def test_fake_and_meta_tensors():
    """Shapes, dtypes and strides come out of the fake implementations without running anything."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 5, 300, dtype=torch.bfloat16)
        q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
        assert q.shape == (3, 5, 300) and q.dtype == torch.float8_e4m3fn
        assert s.shape == (3, 5, 3) and s.stride()[1:] == (1, 8)
        q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True,
                                                  scale_ue8m0=True)
        assert s.shape == (3, 5, 1) and s.dtype == torch.int32
        w = torch.empty(200, 300, dtype=torch.float8_e4m3fn)
        ws = torch.empty(2, 3)
        y = blockfp8.apply_w8a8_block_fp8_linear(x, w, [128, 128], ws)
        assert y.shape == (3, 5, 200) and y.dtype == torch.bfloat16
    x = torch.empty(7, 256, device="meta")
    q, s = blockfp8.per_token_group_quant_fp8(x)
    assert q.device.type == "meta" and s.shape == (7, 2)


def make_model(rng):
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(256, 384))
    layer = blockfp8.Linear.from_float(torch.randn(130, 256), bias=torch.randn(130, dtype=torch.bfloat16))

    def f(x):
        y = blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws)
        q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
        z = blockfp8.w8a8_block_fp8_matmul(q, wq, s, ws, [128, 128], output_dtype=torch.float32)
        d = torch.empty(x.shape[0], 256, dtype=torch.bfloat16)
        blockfp8.fp8_gemm_nt((q, s), (wq, ws), d)
        q2, s2 = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True,
                                                    scale_ue8m0=True)
        e = blockfp8.w8a8_block_fp8_matmul(q2, wq, s2, ws, output_dtype=torch.bfloat16)
        return torch.relu(y), z, d, e, layer(torch.relu(y)), q.view(torch.uint8), s

    return f


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(rng, backend):
    """A model calling every function traces in one graph and gives the eager bytes (inductor included)."""
    torch._dynamo.reset()
    f = make_model(rng)
    g = torch.compile(f, fullgraph=True, backend=backend, dynamic=False)
    for m in (5, 9):
        x = torch.randn(m, 384, dtype=torch.bfloat16)
        for got, want in zip(g(x), f(x)):
            same(got, want)


def test_compiled_graph_calls_the_ops():
    """The traced graph holds the blockfp8 ops (opaque nodes), not the Python around them."""
    torch._dynamo.reset()
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(256, 384))
    seen = []

    def backend(gm, inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    g = torch.compile(lambda x: blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws), fullgraph=True,
                      backend=backend)
    g(torch.randn(3, 384))
    assert any("blockfp8.linear_dyn" in s for s in seen), seen


def test_fallback_warning_points_at_the_caller(rng, path):
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(130, 256))
    with blockfp8.policy("prefer", "hopper"):
        with pytest.warns(blockfp8.FallbackWarning, match="hopper") as record:
            blockfp8.apply_w8a8_block_fp8_linear(torch.randn(2, 256), wq, [128, 128], ws)
    assert record[0].filename == __file__


def test_inference_only_outputs_never_require_grad(path):
    """The ops are not differentiable: their outputs never require grad, eager, through the ops or compiled."""
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(130, 256))
    x = torch.randn(2, 256, requires_grad=True)
    assert not blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws).requires_grad
    assert not blockfp8.per_token_group_quant_fp8(x)[1].requires_grad
    torch._dynamo.reset()
    g = torch.compile(lambda x: blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws), fullgraph=True,
                      backend="aot_eager")
    assert not g(x).requires_grad


@pytest.mark.skipif(torch is None or not T.FAST_LANE, reason="no DLPack exchange API in this torch: no fast lane")
def test_fast_lane_takes_plain_calls_and_declines_the_rest(rng):
    """The fast lane of _native.c runs the calls that need nothing done to their tensors and returns None for
    everything else (the Python path then copies, or raises with its message)."""
    from blockfp8 import _native as N

    x = torch.randn(3, 4, 300, dtype=torch.bfloat16)
    wq, ws = blockfp8.per_block_quant_fp8(torch.randn(200, 300))
    q, s = blockfp8.per_token_group_quant_fp8(x.view(12, 300), column_major_scales=True, scale_tma_aligned=True)
    d = torch.empty(12, 200, dtype=torch.bfloat16)
    assert isinstance(N.fast_gemm_out((q, s), [wq, ws], d), int)
    y, count = N.fast_linear_dyn(x, wq, ws, torch.randn(200))
    assert y.shape == (3, 4, 200) and y.dtype == torch.bfloat16 and isinstance(count, int) and not y.requires_grad
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(12, 200, dtype=torch.bfloat16)
    declined = {
        "numpy": ((to_numpy(q), to_numpy(s)), (wq, ws), d),
        "not a pair": (q, (wq, ws), d),
        "non-contiguous a": ((q.t().contiguous().t(), s), (wq, ws), d),
        "non-contiguous d": ((q, s), (wq, ws), torch.empty(200, 12, dtype=torch.bfloat16).t()),
        "strides no layout describes": ((q, torch.zeros(12, 6)[:, ::2]), (wq, ws), d),
        "wrong d": ((q, s), (wq, ws), d[:, :100]),
        "int d": ((q, s), (wq, ws), d.to(torch.int32)),
        "K mismatch": ((q[:, :256], s[:, :2]), (wq, ws), d),
        "meta": ((q.to("meta"), s.to("meta")), (wq.to("meta"), ws.to("meta")), d.to("meta")),
        "fake d": ((q, s), (wq, ws), fake),
    }
    for why, args in declined.items():
        assert N.fast_gemm_out(*args) is None, why
    assert N.fast_linear_dyn(x, wq, ws, torch.randn(100)) is None
    assert N.fast_linear_dyn(x.float().numpy(), wq, ws, None) is None
    assert N.fast_linear_dyn(x[..., ::2], wq[:, :150], torch.ones(2, 2), None) is None
    counts = torch.tensor([3, 0, 2], dtype=torch.int32)
    qb, sb = blockfp8.per_block_quant_fp8(torch.randn(3, 200, 300))
    qm, sm = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
    dm = torch.empty(3, 4, 200)
    assert isinstance(N.fast_grouped(blockfp8._c.MASKED, (qm, sm), (qb, sb), dm, counts, 2), int)
    assert N.fast_grouped(blockfp8._c.MASKED, (qm, sm), (qb, sb), dm, counts.long(), 2) is None
    assert N.fast_grouped(blockfp8._c.MASKED, (qm, sm), (qb, sb), dm, counts, -1) is None
    assert N.fast_grouped(blockfp8._c.MASKED, (qm, sm), (qb, sb[:, :1]), dm, counts, 2) is None
    assert N.fast_grouped(blockfp8._c.CONTIGUOUS, (qm, sm), (qb, sb), dm, counts, 0) is None
