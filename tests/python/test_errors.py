"""Bad arguments: a clear exception naming what is wrong, for the numpy and the torch path alike, and the
library's own message where the library refuses."""
import numpy as np
import pytest

import blockfp8
from conftest import torch
from oracle import BF16, FP8, from_numpy, grouped_operands, quantized_operands

FRAMEWORKS = ["numpy"] + (["torch"] if torch is not None else [])


def conv(framework, a):
    if a is None or framework == "numpy":
        return a
    return from_numpy(a) if a.dtype in (BF16, FP8) else torch.from_numpy(np.ascontiguousarray(a))


@pytest.fixture(params=FRAMEWORKS)
def fw(request):
    return lambda a: conv(request.param, a)


@pytest.fixture
def ops(rng):
    return quantized_operands(rng, 4, 200, 300)


def test_quant_act_bad_arguments(fw):
    x = fw(np.ones((4, 256), np.float32))
    with pytest.raises(ValueError, match="group_size=64"):
        blockfp8.per_token_group_quant_fp8(x, 64)
    with pytest.raises(ValueError, match="eps"):
        blockfp8.per_token_group_quant_fp8(x, eps=1e-6)
    with pytest.raises(ValueError, match="scale_tma_aligned"):
        blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_ue8m0=True)
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        blockfp8.per_token_group_quant_fp8(fw(np.ones((4, 256), np.int32)))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        blockfp8.per_token_group_quant_fp8(fw(np.ones(256, np.float32)), column_major_scales=True)
    with pytest.raises(TypeError):
        blockfp8.per_token_group_quant_fp8([1.0, 2.0])
    if torch is not None:
        with pytest.raises(TypeError, match="dtype torch.float64 is not supported"):
            blockfp8.per_token_group_quant_fp8(torch.ones(2, 128, dtype=torch.float64))


def test_quant_weight_bad_arguments(fw):
    with pytest.raises(ValueError, match="128x128 blocks only"):
        blockfp8.per_block_quant_fp8(fw(np.ones((4, 256), np.float32)), (64, 128))
    with pytest.raises(TypeError, match="pair"):
        blockfp8.per_block_quant_fp8(fw(np.ones((4, 256), np.float32)), 128)
    with pytest.raises(ValueError, match=r"\[..., N, K\]"):
        blockfp8.per_block_quant_fp8(fw(np.ones(256, np.float32)))
    with pytest.raises(TypeError, match="w must be float32"):
        blockfp8.per_block_quant_fp8(fw(np.ones((2, 2), np.uint8)))


def test_matmul_bad_arguments(fw, ops):
    qa, sa, qb, sb, _, _ = ops
    A, B, As, Bs = fw(qa), fw(qb), fw(sa), fw(sb)
    with pytest.raises(ValueError, match="block"):
        blockfp8.w8a8_block_fp8_matmul(A, B, As, Bs, [128, 64])
    with pytest.raises(TypeError, match="A must be float8_e4m3fn"):
        blockfp8.w8a8_block_fp8_matmul(fw(sa), B, As, Bs)
    with pytest.raises(ValueError, match="B has K=300, the activations have K=256"):
        blockfp8.w8a8_block_fp8_matmul(fw(qa[:, :256]), B, fw(sa[:, :2]), Bs)
    with pytest.raises(ValueError, match=r"Bs must be float32 \[2, 3\]"):
        blockfp8.w8a8_block_fp8_matmul(A, B, As, fw(sb[:1]))
    with pytest.raises(ValueError, match="As"):
        blockfp8.w8a8_block_fp8_matmul(A, B, fw(sa[:3]), Bs)
    with pytest.raises(TypeError, match="As must be float32"):
        blockfp8.w8a8_block_fp8_matmul(A, B, fw(sa.astype(np.float16)), Bs)
    with pytest.raises(ValueError, match="packed UE8M0 scales must be int32 \\[4, 1\\]"):
        blockfp8.w8a8_block_fp8_matmul(A, B, fw(np.zeros((4, 3), np.int32)), Bs)
    with pytest.raises(ValueError, match="output dtype"):
        blockfp8.w8a8_block_fp8_matmul(A, B, As, Bs, output_dtype="float64")
    with pytest.raises(TypeError, match="B must be 2-D|B must be float8"):
        blockfp8.w8a8_block_fp8_matmul(A, fw(sb), As, Bs)


def test_linear_bad_arguments(fw, ops):
    qa, sa, qb, sb, x, _ = ops
    X, W, WS = fw(x), fw(qb), fw(sb)
    with pytest.raises(ValueError, match="input_scale must be None"):
        blockfp8.apply_w8a8_block_fp8_linear(X, W, [128, 128], WS, input_scale=fw(sa))
    with pytest.raises(TypeError, match="input must be float32"):
        blockfp8.apply_w8a8_block_fp8_linear(fw(qa), W, [128, 128], WS)
    with pytest.raises(ValueError, match=r"bias must be 1-D \[200\]"):
        blockfp8.apply_w8a8_block_fp8_linear(X, W, [128, 128], WS, bias=fw(np.ones(100, np.float32)))
    with pytest.raises(ValueError, match="weight must be 2-D"):
        blockfp8.apply_w8a8_block_fp8_linear(X, fw(qb.reshape(2, 100, 300)), [128, 128], WS)


def test_fp8_gemm_nt_bad_arguments(fw, ops):
    qa, sa, qb, sb, _, _ = ops
    a, b = (fw(qa), fw(sa)), (fw(qb), fw(sb))
    d = fw(np.zeros((4, 200), BF16))
    with pytest.raises(TypeError, match="pair"):
        blockfp8.fp8_gemm_nt(fw(qa), b, d)
    with pytest.raises(ValueError, match=r"d must be \[4, 200\]"):
        blockfp8.fp8_gemm_nt(a, b, fw(np.zeros((4, 199), BF16)))
    with pytest.raises(TypeError, match="float32"):
        blockfp8.fp8_gemm_nt(a, b, d, c=fw(np.zeros((4, 200), np.float32)))
    with pytest.raises(ValueError, match="recipe"):
        blockfp8.fp8_gemm_nt(a, b, d, recipe=(1, 1, 128))
    with pytest.raises(TypeError, match="d must be bfloat16|d must be float32|not supported"):
        blockfp8.fp8_gemm_nt(a, b, fw(np.zeros((4, 200), np.int32)))


def test_lists_are_refused_with_type_errors(ops):
    """A Python list where an array belongs, or a block size that is no pair of numbers: TypeError naming the
    argument, not an AttributeError from deep inside."""
    qa, sa, qb, sb, x, _ = ops
    with pytest.raises(TypeError, match="weight must be a numpy array"):
        blockfp8.apply_w8a8_block_fp8_linear(x, qb.tolist(), [128, 128], sb)
    with pytest.raises(TypeError, match="weight_scale must be a numpy array"):
        blockfp8.apply_w8a8_block_fp8_linear(x, qb, [128, 128], sb.tolist())
    with pytest.raises(TypeError, match="block_size must be a pair"):
        blockfp8.apply_w8a8_block_fp8_linear(x, qb, "ab", sb)
    with pytest.raises(TypeError, match="Bs must be a numpy array"):
        blockfp8.w8a8_block_fp8_matmul(qa, qb, sa, sb.tolist())
    d = np.zeros((qa.shape[0], qb.shape[0]), np.float32)
    with pytest.raises(TypeError, match="c must be a numpy array as d is"):
        blockfp8.fp8_gemm_nt((qa, sa), (qb, sb), d, c=d.tolist())


def test_grouped_bad_arguments(fw, rng):
    """m_grouped_fp8_gemm_nt_{contiguous,masked}: G = 3, max_m / m = 4, N = 200, K = 300."""
    qa, sa, qb, sb = grouped_operands(rng, 3, 4, 200, 300, masked=True)
    a, b, d = (fw(qa), fw(sa)), (fw(qb), fw(sb)), fw(np.zeros((3, 4, 200), BF16))
    counts = fw(np.array([4, 0, 2], np.int32))

    def masked(a=a, b=b, d=d, counts=counts, expected_m=2, **kw):
        blockfp8.m_grouped_fp8_gemm_nt_masked(a, b, d, counts, expected_m, **kw)

    masked()  # the valid call
    with pytest.raises(TypeError, match="pair"):
        masked(a=fw(qa))
    with pytest.raises(TypeError, match="a must be float8_e4m3fn"):
        masked(a=(fw(qa.astype(np.float32)), fw(sa)))
    with pytest.raises(ValueError, match=r"b must be \[G, N, K\]"):
        masked(b=(fw(qb[0]), fw(sb[0])))
    with pytest.raises(ValueError, match="b has K=300, a has K=256"):
        masked(a=(fw(qa[..., :256]), fw(sa[..., :2])))
    with pytest.raises(ValueError, match="a has 2 groups, b has 3"):
        masked(a=(fw(qa[:2]), fw(sa[:2])), d=fw(np.zeros((2, 4, 200), BF16)))
    with pytest.raises(ValueError, match=r"sfa must be float32 \[3, 4, 3\]"):
        masked(a=(fw(qa), fw(sa[:, :3])))
    with pytest.raises(ValueError, match=r"sfb must be float32 \[3, 2, 3\]"):
        masked(b=(fw(qb), fw(sb[:, :1])))
    with pytest.raises(TypeError, match="sfb must be float32"):
        masked(b=(fw(qb), fw(sb.astype(np.float16))))
    with pytest.raises(ValueError, match=r"d must be \[3, 4, 200\]"):
        masked(d=fw(np.zeros((3, 4, 199), BF16)))
    with pytest.raises(TypeError, match="d must be float32|not supported"):
        masked(d=fw(np.zeros((3, 4, 200), np.int32)))
    with pytest.raises(ValueError, match="contiguous"):
        masked(d=fw(np.zeros((3, 200, 4), BF16)).swapaxes(1, 2))
    with pytest.raises(TypeError, match="masked_m must be int32"):
        masked(counts=fw(np.array([4, 0, 2], np.float32)))
    with pytest.raises(ValueError, match=r"masked_m must be int32 \[3\] \(one count per group\)"):
        masked(counts=fw(np.array([4, 0], np.int32)))
    with pytest.raises(ValueError, match="expected_m=-1 must be >= 0"):
        masked(expected_m=-1)
    with pytest.raises(TypeError, match="expected_m must be an int"):
        masked(expected_m=2.5)
    with pytest.raises(ValueError, match="recipe"):
        masked(recipe=(1, 128, 64))

    qa, sa, qb, sb = grouped_operands(rng, 3, 4, 200, 300, masked=False)
    d = fw(np.zeros((4, 200), np.float32))
    with pytest.raises(ValueError, match=r"a must be \[m, K\]"):
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((fw(qa[None]), fw(sa)), (fw(qb), fw(sb)), d,
                                                  fw(np.zeros(4, np.int32)))
    with pytest.raises(TypeError, match="m_indices must be int32, got .*int64"):
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((fw(qa), fw(sa)), (fw(qb), fw(sb)), d, fw(np.zeros(4, np.int64)))
    with pytest.raises(ValueError, match=r"m_indices must be int32 \[4\]"):
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((fw(qa), fw(sa)), (fw(qb), fw(sb)), d, fw(np.zeros(5, np.int32)))
    with pytest.raises(ValueError, match=r"sfa must be float32 \[4, 3\]"):
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((fw(qa), fw(sa[None])), (fw(qb), fw(sb)), d,
                                                  fw(np.zeros(4, np.int32)))


def test_mixed_frameworks_refused(ops):
    if torch is None:
        pytest.skip("needs torch")
    qa, sa, qb, sb, _, _ = ops
    with pytest.raises(TypeError, match="torch tensor"):
        blockfp8.w8a8_block_fp8_matmul(from_numpy(qa), qb, torch.from_numpy(sa), sb)
    qa, sa, qb, sb = grouped_operands(np.random.default_rng(0), 2, 3, 128, 256, masked=False)
    with pytest.raises(TypeError, match="torch tensor"):
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((from_numpy(qa), torch.from_numpy(sa)),
                                                  (from_numpy(qb), torch.from_numpy(sb)), torch.zeros(3, 128),
                                                  np.zeros(3, np.int32))
    with pytest.raises(TypeError, match="m_indices must be a numpy array"):
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((qa, sa), (qb, sb), np.zeros((3, 128), np.float32),
                                                  torch.zeros(3, dtype=torch.int32))


def test_meta_mixed_with_real_refused(ops):
    """A meta operand among CPU ones sends the op to its fake implementation (get_device() is -1 for both): that
    must raise, not return an uninitialized output or leave d unwritten. All-meta calls still give shapes."""
    if torch is None:
        pytest.skip("needs torch")
    qa, sa, qb, sb, x, _ = ops
    qa, qb, sa, sb, x = from_numpy(qa), from_numpy(qb), torch.from_numpy(sa), torch.from_numpy(sb), torch.from_numpy(x)
    meta = lambda t: t.to("meta")  # noqa: E731
    with pytest.raises(ValueError, match="is on meta, .* on cpu"):
        blockfp8.apply_w8a8_block_fp8_linear(x, meta(qb), [128, 128], sb)
    with pytest.raises(ValueError, match="is on meta, .* on cpu"):
        blockfp8.apply_w8a8_block_fp8_linear(x, qb, [128, 128], sb, bias=torch.zeros(200, device="meta"))
    with pytest.raises(ValueError, match="is on meta, .* on cpu"):
        blockfp8.w8a8_block_fp8_matmul(qa, qb, meta(sa), sb)
    d = torch.full((4, 200), float("nan"))
    with pytest.raises(ValueError, match="is on meta, .* on cpu"):
        blockfp8.fp8_gemm_nt((meta(qa), sa), (qb, sb), d)
    qa3, sa3, qb3, sb3 = (from_numpy(t) if t.dtype == FP8 else torch.from_numpy(t)
                          for t in grouped_operands(np.random.default_rng(0), 2, 3, 128, 256, masked=False))
    with pytest.raises(ValueError, match="is on meta, .* on cpu"):
        blockfp8.m_grouped_fp8_gemm_nt_contiguous((qa3, sa3), (qb3, sb3), torch.zeros(3, 128),
                                                  torch.zeros(3, dtype=torch.int32, device="meta"))
    y = blockfp8.apply_w8a8_block_fp8_linear(meta(x), meta(qb), [128, 128], meta(sb))
    assert y.is_meta and tuple(y.shape) == (4, 200)


def test_library_messages_name_the_call_once():
    """The library's message already names the call ("gemm: y overlaps ..."): the exception does not repeat it."""
    rng = np.random.default_rng(5)
    a, sa = blockfp8.per_token_group_quant_fp8(rng.standard_normal((4, 256)).astype(np.float32), 128)
    b, sb = blockfp8.per_block_quant_fp8(rng.standard_normal((256, 256)).astype(np.float32))
    arena = np.zeros(4 * 256, np.float32)
    d = arena.reshape(4, 256)
    shared = arena[:sa.size].reshape(sa.shape)
    shared[:] = sa
    with pytest.raises(blockfp8.InvalidArgumentError) as info:
        blockfp8.fp8_gemm_nt((a, shared), (b, sb), d)
    assert str(info.value).startswith("gemm: y overlaps the A scales"), str(info.value)


def test_library_errors_carry_the_library_message(tmp_path):
    with pytest.raises(blockfp8.FileError) as info:
        blockfp8.Linear.from_safetensors(tmp_path / "missing.safetensors", "w")
    assert isinstance(info.value, OSError) and "missing.safetensors" in str(info.value)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(blockfp8.FormatError):
        blockfp8.Linear.from_safetensors(bad, "w")
    with pytest.raises(blockfp8.InvalidArgumentError, match="threads|thread"):
        blockfp8.set_num_threads(1 << 20)


def test_check_env(monkeypatch):
    """A BFP8_* value the library would ignore: check_env raises naming it; import warns (a fresh interpreter)."""
    import subprocess
    import sys
    monkeypatch.setenv("BFP8_LOG", "dispach")
    with pytest.raises(blockfp8.InvalidArgumentError, match="BFP8_LOG='dispach'"):
        blockfp8.check_env()
    monkeypatch.setenv("BFP8_LOG", "dispatch,hopper")
    blockfp8.check_env()
    env = dict(__import__("os").environ, BFP8_HOPPER_TILE="64x48", BFP8_NO_TORCH="1")
    proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", "import blockfp8"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "BFP8_HOPPER_TILE='64x48'" in proc.stderr, proc.stderr
    env["BFP8_HOPPER_TILE"] = "64x32"
    proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", "import blockfp8"], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
