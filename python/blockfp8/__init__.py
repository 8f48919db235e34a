"""blockfp8: DeepSeek-style block-scaled FP8 linear layers (W8A8), the Python binding of libblockfp8.

The functions take numpy arrays (host) or torch tensors (CPU or CUDA; the output on the input's device) and carry
the names and argument orders of the engine functions they can replace:

    per_token_group_quant_fp8(x, group_size=128, ...)          SGLang
    per_block_quant_fp8(w, block_size=(128, 128), ...)
    w8a8_block_fp8_matmul(A, B, As, Bs, block_size, ...)        SGLang / vLLM (the Triton path)
    apply_w8a8_block_fp8_linear(input, weight, block_size, weight_scale, input_scale=None, bias=None)   SGLang
    fp8_gemm_nt((a, sfa), (b, sfb), d, c=None)                  DeepGEMM
    m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices)              DeepGEMM (MoE, prefill)
    m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)       DeepGEMM (MoE, decode)
    Linear.from_safetensors(path, name, device=...)             a prepared layer (bfp8_linear)

Every GEMM goes through the library's dispatcher: explain(), stats(), policy() show and steer it, and a fallback
under policy prefer raises a FallbackWarning once per distinct reason. docs/python.md has the details."""
import math
import os

import numpy as _np_mod

# torch first where it is: its CUDA libraries (libcublasLt among them) are then the ones in the process, and the
# extension binds to them instead of loading a second copy of the same SONAME before torch does.
_torch = None
torch_import_error = None
if os.environ.get("BFP8_NO_TORCH", "") in ("", "0"):
    try:
        import torch as _torch
    except (ImportError, OSError) as e:  # optional; a torch that cannot load leaves the numpy path working
        torch_import_error = e
        _torch = None

from . import _common as _c  # noqa: E402
from . import _native  # noqa: E402
from . import _numpy_path as _np  # noqa: E402
from ._common import (Explanation, FallbackWarning, backends, explain, get_policy, policy,  # noqa: E402
                      reset_stats, set_policy, stats, unavailable_backends)
from ._native import (DeviceError, Error, FileError, FormatError, InvalidArgumentError,  # noqa: E402
                      NotFoundError, OutOfMemoryError, UnsupportedError)

__version__ = _native.VERSION
BLOCK = _native.BLOCK

_T = None
if _torch is not None:
    from . import _torch_path as _T

from .linear import Linear  # noqa: E402  (after the torch path: Linear registers with it)
from . import tp  # noqa: E402  (tensor parallelism: blockfp8.tp, after Linear, which it builds on)

__all__ = [
    "per_token_group_quant_fp8", "per_block_quant_fp8", "w8a8_block_fp8_matmul", "apply_w8a8_block_fp8_linear",
    "fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked", "Linear", "explain",
    "Explanation", "stats", "reset_stats", "policy", "set_policy", "get_policy", "backends", "unavailable_backends",
    "cuda_available", "set_num_threads", "get_num_threads", "check_env", "FallbackWarning", "Error",
    "InvalidArgumentError", "UnsupportedError", "NotFoundError", "OutOfMemoryError", "FileError", "FormatError",
    "DeviceError", "BLOCK", "__version__", "tp",
]

_BLOCK_PAIRS = ((BLOCK, BLOCK), [BLOCK, BLOCK])


def _is_torch(x):
    return _T is not None and isinstance(x, _torch.Tensor)


def _block(block_size):
    if block_size not in _BLOCK_PAIRS:
        _c.check_block_size(block_size)


def cuda_available():
    """(True, "") where the library has the CUDA backends and a device, else (False, why not)."""
    return _native.cuda_available()


def set_num_threads(n):
    """Threads of the CPU backend and quantizers; n <= 0 restores the default (BFP8_NUM_THREADS, else all cores)."""
    _native.set_num_threads(int(n))


def get_num_threads():
    return _native.get_num_threads()


def check_env():
    """Raises InvalidArgumentError naming the first BFP8_* environment variable whose value the library would ignore
    (and use its default instead): BFP8_NUM_THREADS, BFP8_CPU_ISA, BFP8_LOG, hopper's BFP8_HOPPER_* knobs. Import
    runs it and turns a failure into a RuntimeWarning."""
    _native.check_env()


try:
    check_env()
except InvalidArgumentError as _e:
    import warnings
    warnings.warn(f"blockfp8: {_e} (its default applies)", RuntimeWarning, stacklevel=2)


def per_token_group_quant_fp8(x, group_size=128, eps=1e-10, column_major_scales=False, scale_tma_aligned=False,
                              scale_ue8m0=False):
    """Quantizes activations x [..., K] in groups of 128 along K (SGLang's per_token_group_quant_fp8 /
    sglang_per_token_group_quant_fp8): returns (x_q float8_e4m3fn [..., K], x_s).

    x_s is float32 [..., ceil(K/128)], row-major by default; column_major_scales: MN-major (each [M, K] matrix of x
    has its own [M] columns); with scale_tma_aligned the columns are 16-byte aligned (ld = M rounded up to 4), the
    layout the Hopper kernels read. scale_ue8m0: power-of-two scales; with column_major_scales and
    scale_tma_aligned they come packed four per int32, [..., M, ceil(K/512)] (as SGLang's UE8M0 path). group_size
    must be 128 and eps 1e-10 (the library's fixed group and amax floor)."""
    if not _is_torch(x):
        return _np.quant_act(x, group_size, eps, column_major_scales, scale_tma_aligned, scale_ue8m0)
    _c.check_group_size(group_size, eps)
    layout = _c.act_layout_for(column_major_scales, scale_tma_aligned, scale_ue8m0)
    shape = x.shape
    _c.need(len(shape) >= 1, "x must have at least one dimension (its last is K)")
    k = shape[-1]
    m = math.prod(shape[:-1])
    if layout == _c.ROW:
        batch = 1
    else:
        _c.need(len(shape) >= 2, "column-major scales need x with at least 2 dimensions [..., M, K]")
        batch = math.prod(shape[:-2])
    x2 = x if len(shape) == 2 else x.reshape(m, k)
    if _T.eager(x):
        q, s = _T.quant_act_impl(x2, layout, bool(scale_ue8m0), batch)
    else:
        q, s = _T.quant_act(x2, layout, bool(scale_ue8m0), batch)
    if len(shape) != 2:
        q = q.view(shape)
    if layout == _c.ROW:
        return q, (s if len(shape) == 2 else s.view(*shape[:-1], s.shape[-1]))
    rows = shape[-2]
    s = s.transpose(1, 2)[:, :rows, :]
    return q, (s[0] if len(shape) == 2 else s.view(*shape[:-2], rows, s.shape[-1]))


def per_block_quant_fp8(w, block_size=(128, 128), scale_ue8m0=False):
    """Quantizes weights w [..., N, K] in 128x128 blocks: returns (w_q float8_e4m3fn [..., N, K], w_s float32
    [..., ceil(N/128), ceil(K/128)], row-major), DeepSeek's weight / weight_scale_inv. scale_ue8m0: power-of-two
    scales (stored as float32). On CUDA the weight makes a round trip through host memory (the library quantizes
    weights on the host): a preparation step, not for a captured graph."""
    _block(block_size)
    if not _is_torch(w):
        return _np.quant_weight(w, block_size, scale_ue8m0)
    shape = w.shape
    if len(shape) < 2:
        raise ValueError(f"w must be [..., N, K], got shape {tuple(shape)}")
    n, k = shape[-2], shape[-1]
    w3 = w.reshape(math.prod(shape[:-2]), n, k)
    q, s = (_T.quant_weight_impl if _T.eager(w) else _T.quant_weight)(w3, bool(scale_ue8m0))
    return q.view(shape), s.view(*shape[:-2], s.shape[-2], s.shape[-1])


def _act_scales_2d(As, a_shape, m):
    if As.dim() != len(a_shape) or tuple(As.shape[:-1]) != tuple(a_shape[:-1]):
        raise ValueError(f"As must be [..., ceil(K/128)] with A's leading dimensions {tuple(a_shape[:-1])}, "
                         f"got {tuple(As.shape)}")
    return As if As.dim() == 2 else As.reshape(m, As.shape[-1])


def w8a8_block_fp8_matmul(A, B, As, Bs, block_size=(128, 128), output_dtype="float16"):
    """C = A @ B^T with block-scaled FP8 operands (SGLang's and vLLM's w8a8_block_fp8_matmul): A [..., K] fp8 with
    As float32 [..., ceil(K/128)] (any layout its strides describe: row-major, MN-major, MN-major aligned; or int32
    packed UE8M0), B [N, K] fp8 with Bs float32 [ceil(N/128), ceil(K/128)]. Returns C [..., N] of output_dtype
    (a torch or numpy dtype or a name; default float16 as the engines)."""
    out_e = _c.out_dtype_enum(output_dtype)
    _block(block_size)
    if not _is_torch(A):
        return _np.gemm(A, B, As, Bs, None, out_e)
    shape = A.shape
    _c.need(len(shape) >= 1, "A must have at least one dimension (its last is K)")
    k = shape[-1]
    m = math.prod(shape[:-1])
    _c.need(isinstance(As, _torch.Tensor), "As must be a torch tensor like A", TypeError)
    A2 = A if len(shape) == 2 else A.reshape(m, k)
    As2 = _act_scales_2d(As, shape, m)
    out = _T.TORCH_DTYPES[out_e]
    if _T.eager(A, B, As, Bs):
        y = _T.gemm_impl(A2, As2, B, Bs, None, out)
    else:
        y = _T.gemm(A2, As2, B, Bs, None, out)
    return y if len(shape) == 2 else y.view(*shape[:-1], y.shape[-1])


def apply_w8a8_block_fp8_linear(input, weight, block_size, weight_scale, input_scale=None, bias=None):
    """output = input @ dequant(weight)^T (+ bias), SGLang's apply_w8a8_block_fp8_linear: input [..., K] (float32,
    bfloat16 or float16) quantized in the call in 1x128 groups, weight [N, K] fp8, weight_scale float32
    [ceil(N/128), ceil(K/128)] (int32 packed UE8M0 also accepted; then the activations take UE8M0 scales too);
    the output [..., N] has the input's dtype. input_scale must be None (the activations are quantized per call,
    as SGLang requires for block-FP8)."""
    if input_scale is not None:
        raise ValueError("input_scale must be None: block-FP8 activations are quantized in the call (1x128 groups); "
                         "there is no static input scale")
    _block(block_size)
    if _T is not None and _T.fast_lane():
        done = _native.fast_linear_dyn(input, weight, weight_scale, bias)
        if done is not None:
            _c.note_fallbacks(done[1])
            return done[0]
    if not _is_torch(input):
        return _np.linear_dyn(input, weight, weight_scale, bias)
    shape = input.shape
    _c.need(len(shape) >= 1, "input must have at least one dimension (its last is K)")
    k = shape[-1]
    x2 = input if len(shape) == 2 else input.reshape(math.prod(shape[:-1]), k)
    if _T.eager(input, weight, weight_scale, bias):
        y = _T.linear_dyn_impl(x2, weight, weight_scale, bias)
    else:
        y = _T.linear_dyn(x2, weight, weight_scale, bias)
    return y if len(shape) == 2 else y.view(*shape[:-1], y.shape[-1])


def _pair(p, what):
    if not isinstance(p, (tuple, list)) or len(p) != 2:
        raise TypeError(f"{what} must be a pair (tensor, scales)")
    return p


def fp8_gemm_nt(a, b, d, c=None, recipe=None, compiled_dims=None, disable_ue8m0_cast=False):
    """DeepGEMM's fp8_gemm_nt((a, sfa), (b, sfb), d, c=None): writes d [M, N] = a [M, K] @ b [N, K]^T with
    sfa float32 [M, ceil(K/128)] and sfb float32 [ceil(N/128), ceil(K/128)] (or int32 packed UE8M0), plus c when
    given (then d and c are float32, as in DeepGEMM; c may be d itself). d may be bfloat16, float16 or float32 and
    must be contiguous. recipe must be None or (1, 128, 128); compiled_dims and disable_ue8m0_cast are accepted
    and ignored (nothing is compiled per shape; scales are never cast)."""
    if c is None and recipe is None and _T is not None and _T.fast_lane():
        count = _native.fast_gemm_out(a, b, d)
        if count is not None:
            _c.note_fallbacks(count)
            return None
    (a_, sfa), (b_, sfb) = _pair(a, "a"), _pair(b, "b")
    if recipe is not None:
        _c.check_recipe(recipe)
    if not _is_torch(a_):
        m, n, k = _np.gemm_operands(a_, b_)
        if a_.ndim != 2:
            raise ValueError(f"a must be 2-D [M, K], got shape {a_.shape}")
        out_e = _np.check_out(d, (m, n))
        if c is not None:
            _check_c(c, d)
            if _np_mod.shares_memory(c, d):
                c = c.copy()
        _np.gemm(a_, b_, sfa, sfb, None, out_e, d=d, operands=(m, n, k))
        if c is not None:
            _np_mod.add(d, c, out=d)
        return None
    if a_.dim() != 2:
        raise ValueError(f"a must be 2-D [M, K], got shape {tuple(a_.shape)}")
    if c is not None:
        _check_c(c, d)
        # d is written before c is added: a c that may share d's memory (always so where it cannot be told, as
        # through torch.ops or under tracing) is read from a copy.
        if c is d or not _T.eager(c, d) or c.untyped_storage().data_ptr() == d.untyped_storage().data_ptr():
            c = c.clone()
    if _T.eager(a_, sfa, b_, sfb, d):
        _T.gemm_out_impl(a_, sfa, b_, sfb, d)
    else:
        _T.gemm_out(a_, sfa, b_, sfb, d)
    if c is not None:
        d.add_(c)
    return None


def m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, recipe=None, compiled_dims=None, disable_ue8m0_cast=False):
    """DeepGEMM's m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices), the MoE prefill layout: row r
    of d [m, N] = a[r] [K] @ b[m_indices[r]] [N, K]^T, with a [m, K] fp8, sfa float32 [m, ceil(K/128)] (any layout
    its strides describe, or int32 packed UE8M0), b [G, N, K] fp8 with sfb float32 [G, ceil(N/128), ceil(K/128)],
    m_indices int32 [m] on a's device. A row whose index is -1 is padding: its row of d is never written. Any order
    of rows is correct (DeepGEMM requires each group's rows as one segment aligned to 128; that is the fast layout
    on the GPU). d (bfloat16, float16 or float32, contiguous) is written in place; returns None. Host data: an index
    outside [-1, G) raises before anything is written. recipe must be None or (1, 128, 128); compiled_dims and
    disable_ue8m0_cast are accepted and ignored, as in fp8_gemm_nt."""
    _grouped(_c.CONTIGUOUS, a, b, d, m_indices, 0, recipe)


def m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, compiled_dims=None,
                                 disable_ue8m0_cast=False):
    """DeepGEMM's m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m), the MoE decode layout:
    d[g, r] = a[g, r] @ b[g]^T for r < masked_m[g], with a [G, max_m, K] fp8, sfa float32 [G, max_m, ceil(K/128)]
    (e.g. DeepGEMM's MN-major TMA-aligned form, or int32 packed UE8M0), b [G, N, K] fp8 with sfb float32
    [G, ceil(N/128), ceil(K/128)], d [G, max_m, N] (bfloat16, float16 or float32, contiguous; rows at or beyond
    masked_m[g] are never written). masked_m is int32 [G] on a's device, read by the kernel on CUDA (no host sync:
    the call can be captured in a CUDA graph and replayed with new counts); expected_m (an int >= 0, 0: max_m) is
    a hint of the typical count. Host data: a count outside [0, max_m] raises before anything is written."""
    _grouped(_c.MASKED, a, b, d, masked_m, _c.check_expected_m(expected_m), recipe)


def _grouped(layout, a, b, d, row_map, expected_m, recipe):
    if recipe is None and _T is not None and _T.fast_lane():
        count = _native.fast_grouped(layout, a, b, d, row_map, expected_m)
        if count is not None:
            _c.note_fallbacks(count)
            return
    (a_, sfa), (b_, sfb) = _pair(a, "a"), _pair(b, "b")
    if recipe is not None:
        _c.check_recipe(recipe)
    if not _is_torch(a_):
        _np.grouped_gemm(layout, a_, sfa, b_, sfb, d, row_map, expected_m)
    elif _T.eager(a_, sfa, b_, sfb, d, row_map):
        _T.grouped_gemm_impl(a_, sfa, b_, sfb, d, row_map, layout, expected_m)
    else:
        _T.grouped_gemm(a_, sfa, b_, sfb, d, row_map, layout, expected_m)


def _check_c(c, d):
    if _is_torch(c) != _is_torch(d) or not (_is_torch(c) or isinstance(c, _np_mod.ndarray)):
        raise TypeError(f"c must be a {'torch tensor' if _is_torch(d) else 'numpy array'} as d is, "
                        f"got {type(c).__name__}")
    if tuple(c.shape) != tuple(d.shape):
        raise ValueError(f"c must have d's shape {tuple(d.shape)}, got {tuple(c.shape)}")
    _c.need(_c.dtype_enum(c.dtype) == _c.F32 and _c.dtype_enum(d.dtype) == _c.F32,
            "with c, d and c must be float32 (as in DeepGEMM)", TypeError)
