"""The numpy path: host arrays in, new host arrays out (fp8_gemm_nt writes its d), the library called directly.
Non-contiguous inputs are copied first; the checks are _common's, shared with the torch path."""
import math

import numpy as np

from . import _native as N
from ._common import (BF16, BLOCK, CPU, E4M3, F16, F32, FP32_SCALES, I32, MASKED, PACKED, ROW, UE8M0_SCALES,
                      act_layout_for, ceil_div, check_activation, check_bias, check_float, check_group_size,
                      check_grouped_operands, check_row_map, check_scale_shape, check_weight, dims, dtype_enum,
                      layout_storage_shape, layouts_of, ml_dtypes, need, note_fallbacks, round_up)

FP8 = np.dtype(ml_dtypes.float8_e4m3fn) if ml_dtypes is not None else np.dtype(np.uint8)
_NP = {F32: np.dtype(np.float32), F16: np.dtype(np.float16), E4M3: FP8, I32: np.dtype(np.int32)}
if ml_dtypes is not None:
    _NP[BF16] = np.dtype(ml_dtypes.bfloat16)


_byte_bounds = getattr(getattr(np.lib, "array_utils", None), "byte_bounds", None) or np.byte_bounds


def np_dtype(enum):
    dt = _NP.get(enum)
    if dt is None:
        raise TypeError("bfloat16 numpy arrays need ml_dtypes (pip install ml_dtypes)")
    return dt


# The address of an array's first element (the buffer protocol: __array_interface__ builds a dict per call).
ptr = N.address


def enum_of(a, what):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what} must be a numpy array (or a torch tensor), got {type(a).__name__}")
    e = dtype_enum(a.dtype)
    if e is None:
        raise TypeError(f"{what}: dtype {a.dtype} is not supported")
    return e


def contiguous(a):
    return np.ascontiguousarray(a)


def _available(a, own):
    """Elements from a's first one that lie inside the memory a's base array covers (at least a's own extent)."""
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root is a:
        return own
    start = ptr(root)  # a contiguous base covers [start, start + nbytes); numpy's byte_bounds is slower Python
    end = start + root.nbytes if root.flags.c_contiguous or root.flags.f_contiguous else _byte_bounds(root)[1]
    return max(own, (end - ptr(a)) // a.itemsize)


def scale_arg(s, rows, kblocks, what, groups=None):
    """(array to keep alive, its address, scale format, layout set) for a [rows x K] operand's scales ([groups,
    rows, ...] with groups: G matrices, which the library reads back to back)."""
    e = enum_of(s, what)  # (before s.shape: a list gets a TypeError, not an AttributeError)
    fmt = check_scale_shape(s.shape, e, rows, kblocks, what, groups)
    packed = fmt == UE8M0_SCALES
    cols, item, st = s.shape[-1], s.itemsize, s.strides
    bits = 0
    if not (st[-2] % item or st[-1] % item or (groups and st[0] % item)):
        s0, s1, sg = st[-2] // item, st[-1] // item, st[0] // item if groups else 0
        avail = 0
        if rows and cols:
            avail = 1 + ((groups or 1) - 1) * sg + (rows - 1) * s0 + (cols - 1) * s1
            if rows % 4 and (rows == 1 or s0 == 1):  # an aligned layout's padding lies beyond the view: is it there?
                avail = _available(s, avail)
        bits = layouts_of(rows, cols, s0, s1, packed, avail, groups or 1, sg)
    if not bits:  # strides no layout describes: a copy in one that does
        if packed:
            buf = np.zeros(s.shape[:-2] + (cols, round_up(rows, 4)), np.int32)
            buf[..., :rows] = np.swapaxes(s, -1, -2)
            s, bits = np.swapaxes(buf, -1, -2)[..., :rows, :], 1 << PACKED
        else:
            s, bits = np.ascontiguousarray(s), 1 << ROW
    return s, ptr(s), fmt, bits


def bias_arg(bias, n):
    if bias is None:
        return None, None, F32
    e = enum_of(bias, "bias")
    check_bias(bias.shape, e, n)
    bias = contiguous(bias)
    return bias, ptr(bias), e


def quant_act(x, group_size, eps, column_major_scales, scale_tma_aligned, scale_ue8m0):
    check_group_size(group_size, eps)
    xe = enum_of(x, "x")
    m, k = check_activation(x.shape, xe, "x")
    layout = act_layout_for(column_major_scales, scale_tma_aligned, scale_ue8m0)
    fmt = UE8M0_SCALES if scale_ue8m0 else FP32_SCALES
    kb = ceil_div(k, BLOCK)
    x = contiguous(x)
    q = np.empty(x.shape, FP8)
    if layout == ROW:
        s = np.empty(x.shape[:-1] + (kb,), np.float32)
        N.quantize_act(ptr(x), xe, m, k, ptr(q), ptr(s), fmt, ROW, CPU, None)
        return q, s
    need(x.ndim >= 2, "column-major scales need x with at least 2 dimensions [..., M, K]")
    rows, batch = x.shape[-2], math.prod(x.shape[:-2])
    shape, is_int = layout_storage_shape(layout, rows, kb)
    buf = np.empty((batch,) + shape, np.int32 if is_int else np.float32)
    per = math.prod(shape) * 4
    for b in range(batch):  # each [M, K] matrix of x has its own column-major scales, as in SGLang
        N.quantize_act(ptr(x) + b * rows * k * x.itemsize, xe, rows, k, ptr(q) + b * rows * k, ptr(buf) + b * per,
                       fmt, layout, CPU, None)
    s = buf.transpose(0, 2, 1)[:, :rows, :]
    return q, s.reshape(x.shape[:-2] + s.shape[1:])


def quant_weight(w, block_size, scale_ue8m0):
    we = enum_of(w, "w")
    check_float(we, "w")
    if w.ndim < 2:
        raise ValueError(f"w must be [..., N, K], got shape {w.shape}")
    n, k = w.shape[-2:]
    nb, kb = ceil_div(n, BLOCK), ceil_div(k, BLOCK)
    w = contiguous(w)
    q = np.empty(w.shape, FP8)
    s = np.empty(w.shape[:-2] + (nb, kb), np.float32)
    fmt = UE8M0_SCALES if scale_ue8m0 else FP32_SCALES
    for b in range(math.prod(w.shape[:-2])):
        N.quantize_weight(ptr(w) + b * n * k * w.itemsize, we, n, k, ptr(q) + b * n * k, ptr(s) + b * nb * kb * 4,
                          fmt, ROW)
    return q, s


def _act_scales_2d(As, a_shape, m, what):
    if not isinstance(As, np.ndarray):
        raise TypeError(f"{what} must be a numpy array")
    if As.ndim != len(a_shape) or As.shape[:-1] != tuple(a_shape[:-1]):
        raise ValueError(f"{what} must be [..., ceil(K/128)] with A's leading dimensions {tuple(a_shape[:-1])}, "
                         f"got {As.shape}")
    return As.reshape(m, As.shape[-1])


def gemm_operands(A, B):
    """(m, n, k) of valid A [..., K] and B [N, K], both fp8."""
    ae, be = enum_of(A, "A"), enum_of(B, "B")
    m, k = check_activation(A.shape, ae, "A", fp8=True)
    n, _ = check_weight(B.shape, be, k, "B")
    return m, n, k


def gemm(A, B, As, Bs, bias, out_enum, d=None, operands=None):
    """C = A @ B^T block-scaled, into a new array of out_enum or into d (operands: gemm_operands' result where the
    caller has it)."""
    m, n, k = operands or gemm_operands(A, B)
    kb = ceil_div(k, BLOCK)
    sa = scale_arg(_act_scales_2d(As, A.shape, m, "As"), m, kb, "As")
    sb = scale_arg(Bs, ceil_div(n, BLOCK), kb, "Bs")
    keep_bias, bias_ptr, bias_e = bias_arg(bias, n)
    A, B = contiguous(A), contiguous(B)
    y = np.empty(A.shape[:-1] + (n,), np_dtype(out_enum)) if d is None else d
    count = N.gemm(m, n, k, ptr(A), sa[1], sa[2], sa[3], ptr(B), sb[1], sb[2], sb[3], bias_ptr, bias_e, ptr(y),
                   out_enum, CPU, None)
    note_fallbacks(count)
    return y


def linear_dyn(x, weight, weight_scale, bias):
    xe = enum_of(x, "input")
    m, k = check_activation(x.shape, xe, "input")
    we = enum_of(weight, "weight")
    n, _ = check_weight(weight.shape, we, k)
    kb = ceil_div(k, BLOCK)
    sb = scale_arg(weight_scale, ceil_div(n, BLOCK), kb, "weight_scale")
    keep_bias, bias_ptr, bias_e = bias_arg(bias, n)
    x, weight = contiguous(x), contiguous(weight)
    y = np.empty(x.shape[:-1] + (n,), x.dtype)
    # scratch None: the call quantizes x into host memory of its own
    count = N.linear_dyn(ptr(x), xe, m, k, None, 0, n, ptr(weight), sb[1], sb[2], sb[3], bias_ptr, bias_e, ptr(y), xe,
                         CPU, None)
    note_fallbacks(count)
    return y


def grouped_gemm(layout, a, sfa, b, sfb, d, row_map, expected_m):
    """m_grouped_fp8_gemm_nt_{contiguous,masked} on host arrays: writes the rows of d in use (the library checks
    row_map's contents before it writes)."""
    ae, be = enum_of(a, "a"), enum_of(b, "b")
    groups, rows, n, k = check_grouped_operands(layout, a.shape, ae, b.shape, be)
    masked = layout == MASKED
    out_e = check_out(d, a.shape[:-1] + (n,))
    name = "masked_m" if masked else "m_indices"
    need(isinstance(row_map, np.ndarray), f"{name} must be a numpy array like a", TypeError)
    check_row_map(row_map.shape, dtype_enum(row_map.dtype), row_map.dtype, masked, groups if masked else rows)
    kb = ceil_div(k, BLOCK)
    sa = scale_arg(sfa, rows, kb, "sfa", groups if masked else None)
    sb = scale_arg(sfb, ceil_div(n, BLOCK), kb, "sfb", groups)
    a, b, row_map = contiguous(a), contiguous(b), contiguous(row_map)
    count = N.grouped_gemm(layout, groups, rows, n, k, ptr(a), sa[1], sa[2], sa[3], ptr(row_map), expected_m, ptr(b),
                           sb[1], sb[2], sb[3], ptr(d), out_e, CPU, None)
    note_fallbacks(count)


def check_out(d, shape):
    """The library dtype of a valid output d of `shape`, written in place."""
    need(isinstance(d, np.ndarray), "d must be a numpy array", TypeError)
    e = dtype_enum(d.dtype)
    check_float(e, "d")
    if d.shape != tuple(shape):
        raise ValueError(f"d must be {dims(shape)}, got {d.shape}")
    need(d.flags.c_contiguous and d.flags.writeable, "d must be C-contiguous and writeable (it is written in place)")
    return e
