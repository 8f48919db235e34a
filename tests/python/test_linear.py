"""blockfp8.Linear: loading DeepSeek-named weights from safetensors (written by the tests' own code), building from
tensors or float weights, calls on numpy and torch inputs (bfp8_linear), against the independent oracle."""
import json

import numpy as np
import pytest

import blockfp8
from conftest import torch
from oracle import (BF16, BLOCK, FP8, NP_OUT, TOL, block_gemm, calc_diff, codes, from_numpy, quantize, rel_err,
                    st_write, to_numpy, ulp_distance)


def write_layer(path, rng, n, k, bias_dtype=None):
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    qw, sw, _ = quantize(w, BLOCK, False)
    tensors = {"layer.weight": ("F8_E4M3", qw.view(FP8)), "layer.weight_scale_inv": ("F32", sw),
               "other": ("F32", rng.standard_normal(3).astype(np.float32))}
    bias = None
    if bias_dtype:
        bias = (rng.standard_normal(n) * 0.5).astype({"F32": np.float32, "BF16": BF16, "F16": np.float16}[bias_dtype])
        tensors["layer.bias"] = (bias_dtype, bias)
    st_write(str(path), tensors)
    return w, qw, sw, bias


@pytest.mark.parametrize("n,k", [(2112, 384), (129, 1000), (1, 1), (256, 128)])
@pytest.mark.parametrize("bias_dtype", [None, "F32", "BF16"])
def test_from_safetensors(tmp_path, rng, n, k, bias_dtype):
    path = tmp_path / "w.safetensors"
    w, qw, sw, bias = write_layer(path, rng, n, k, bias_dtype)
    layer = blockfp8.Linear.from_safetensors(path, "layer.weight", bias="layer.bias" if bias_dtype else None)
    assert (layer.in_features, layer.out_features, layer.scale_format) == (k, n, "fp32")
    q, s = layer.weight()
    np.testing.assert_array_equal(codes(q), qw)
    np.testing.assert_array_equal(s, sw)
    x = rng.standard_normal((3, 5, k)).astype(BF16)
    y = layer(x)
    assert y.dtype == BF16 and y.shape == (3, 5, n)
    qx, sx, _ = quantize(x.reshape(15, k).astype(np.float32), 1, False)
    want = block_gemm(qx, sx, qw, sw, None if bias is None else bias.astype(np.float64))
    assert rel_err(y.reshape(15, n), want) <= TOL["bfloat16"]
    if k >= 128:
        exact = x.reshape(15, k).astype(np.float64) @ w.astype(np.float64).T
        if bias is not None:
            exact += bias.astype(np.float64)
        # held to the exact product of the same quantized inputs plus 1e-4 (docs/numerics.md), as test_numpy.py
        assert calc_diff(y.reshape(15, n).astype(np.float64), exact) <= calc_diff(want, exact) + 1e-4
    # The layer gives the bytes of apply_w8a8_block_fp8_linear on the same weight.
    same = blockfp8.apply_w8a8_block_fp8_linear(x, q, [128, 128], s, bias=bias)
    np.testing.assert_array_equal(y.view(np.uint16), same.view(np.uint16))
    if torch is not None:
        yt = layer(from_numpy(x))
        np.testing.assert_array_equal(to_numpy(yt).view(np.uint16), y.view(np.uint16))


def test_from_sharded_checkpoint(tmp_path, rng):
    """A DeepSeek checkpoint in shards: the weight in one, its scales and the bias in the other, found through the
    index (the file or its directory) as the CLI's linear finds them."""
    n, k = 300, 260
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    qw, sw, _ = quantize(w, BLOCK, False)
    bias = rng.standard_normal(n).astype(np.float32)
    st_write(str(tmp_path / "model-00001-of-00002.safetensors"), {"m.weight": ("F8_E4M3", qw.view(FP8))})
    st_write(str(tmp_path / "model-00002-of-00002.safetensors"),
             {"m.weight_scale_inv": ("F32", sw), "m.bias": ("F32", bias)})
    index = {"metadata": {}, "weight_map": {"m.weight": "model-00001-of-00002.safetensors",
                                            "m.weight_scale_inv": "model-00002-of-00002.safetensors",
                                            "m.bias": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    x = rng.standard_normal((4, k)).astype(np.float32)
    qx, sx, _ = quantize(x, 1, False)
    want = block_gemm(qx, sx, qw, sw, bias.astype(np.float64))
    for path in (tmp_path, tmp_path / "model.safetensors.index.json"):
        layer = blockfp8.Linear.from_safetensors(path, "m.weight", bias="m.bias")
        q, s = layer.weight()
        np.testing.assert_array_equal(codes(q), qw)
        np.testing.assert_array_equal(s, sw)
        assert rel_err(layer(x), want) <= TOL["float32"]
    with pytest.raises(blockfp8.NotFoundError, match="nope"):
        blockfp8.Linear.from_safetensors(tmp_path, "m.weight", bias="nope")


@pytest.mark.parametrize("out", NP_OUT)
def test_out_dtype_and_ref(rng, out):
    layer = blockfp8.Linear.from_float(rng.standard_normal((300, 260)).astype(np.float32))
    x = rng.standard_normal((4, 260)).astype(np.float32)
    with blockfp8.policy("strict", "ref"):
        y = layer(x, out_dtype=out)
    q, s = layer.weight()
    qx, sx, _ = quantize(x, 1, False)
    assert y.dtype == NP_OUT[out]
    assert ulp_distance(y, block_gemm(qx, sx, codes(q), s, None).astype(NP_OUT[out])).max() <= 1


def test_from_float_ue8m0_and_from_tensors(rng):
    w = rng.standard_normal((200, 300)).astype(np.float32)
    a = blockfp8.Linear.from_float(w, scale_ue8m0=True)
    assert a.scale_format == "ue8m0"
    q, s = a.weight()
    want_q, want_s, _ = quantize(w, BLOCK, True)
    np.testing.assert_array_equal(codes(q), want_q)
    np.testing.assert_array_equal(s, want_s)
    b = blockfp8.Linear.from_tensors(q, np.asfortranarray(s))  # scales in another layout: read by their strides
    x = rng.standard_normal((2, 300)).astype(np.float32)
    y_a, y_b = a(x), b(x)
    assert b.scale_format == "fp32"  # power-of-two values in fp32 are fp32 scales: nothing is inferred from data
    qx, sx, _ = quantize(x, 1, True)  # a: the activations take the weight's UE8M0 format
    assert rel_err(y_a, block_gemm(qx, sx, want_q, want_s, None)) <= TOL["float32"]
    qx, sx, _ = quantize(x, 1, False)
    assert rel_err(y_b, block_gemm(qx, sx, want_q, want_s, None)) <= TOL["float32"]


def test_layouts_prepared_for_the_device(rng):
    layer = blockfp8.Linear.from_float(rng.standard_normal((130, 256)).astype(np.float32))
    assert layer.layouts()["device"] == []
    assert "row_major" in layer.layouts()["host"]
    e = layer.explain(16)
    assert e.choice == "cpu" and e.problem["n"] == 130 and e.problem["k"] == 256


def test_bad_inputs(rng, tmp_path):
    layer = blockfp8.Linear.from_float(rng.standard_normal((130, 256)).astype(np.float32))
    with pytest.raises(ValueError, match=r"x must be \[..., 256\]"):
        layer(np.ones((2, 255), np.float32))
    with pytest.raises(TypeError, match="x must be float32"):
        layer(np.ones((2, 256), np.int32))
    path = tmp_path / "w.safetensors"
    write_layer(path, rng, 130, 256)
    with pytest.raises(blockfp8.NotFoundError, match="nope"):
        blockfp8.Linear.from_safetensors(path, "nope")
    with pytest.raises(blockfp8.NotFoundError, match="layer.bias"):
        blockfp8.Linear.from_safetensors(path, "layer.weight", bias="layer.bias")
    with pytest.raises(blockfp8.NotFoundError, match="other_scale_inv"):
        blockfp8.Linear.from_safetensors(path, "other")
    with pytest.raises(ValueError, match="bias must be 1-D"):
        blockfp8.Linear.from_float(np.ones((130, 256), np.float32), bias=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="device"):
        blockfp8.Linear.from_float(np.ones((130, 256), np.float32), device="tpu")


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_compile_and_handle_lifetime(rng):
    import gc

    layers = [blockfp8.Linear.from_float(torch.randn(130, 256), bias=torch.randn(130))]
    torch._dynamo.reset()
    f = torch.compile(lambda x: layers[0](x) * 2, fullgraph=True, backend="aot_eager")
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    assert torch.equal(f(x), layers[0](x) * 2)
    handle = layers[0].handle
    layers.clear()
    del f
    torch._dynamo.reset()
    gc.collect()
    with pytest.raises(RuntimeError, match="freed"):
        torch.ops.blockfp8.linear(x, handle, 130, None, torch.bfloat16)
