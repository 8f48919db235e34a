"""The torch path: CPU and CUDA tensors, outputs allocated by torch on the input's device, CUDA work on
torch.cuda.current_stream() of that device, no host synchronization (per_block_quant_fp8 on CUDA excepted: the
library quantizes weights on the host).

Every operation is an op of the `blockfp8` torch.library namespace with a fake implementation, so that
torch.compile(fullgraph=True) traces callers and CUDA graphs capture them. The ops return contiguous tensors; the
public functions (python/blockfp8/__init__.py) make the strided views engines expect (column-major scales) around
them, in traceable torch code. In eager mode the public functions call the kernels directly, which skips the
dispatcher but runs the very same code; before that they offer the call to the fast lane of _native.c, which runs
it when the tensors need nothing done to them and declines (None) otherwise.

Tensor arguments of other layouts are copied into one the library reads (contiguous operands; scales whose strides
match no library layout; on CUDA, operands at addresses that are not 16-byte aligned); outputs written in place
(fp8_gemm_nt's d) must be contiguous.

The kernels run on every call, so they read each tensor attribute once and compare devices as indices (-1 for the
CPU); the messages are built only when a check fails."""
import inspect
import os
import weakref
from typing import Optional

import torch
from torch import Tensor

from . import _native as N
from ._common import (ALIGNED, BF16, BLOCK, CONTIGUOUS, CPU, CUDA, DTYPES, E4M3, F16, F32, FLOATS, FP32_SCALES, I32,
                      MASKED, PACKED, ROW, UE8M0_SCALES, ceil_div, check_activation, check_bias, check_expected_m,
                      check_float, check_grouped_operands, check_row_map, check_scale_shape, check_weight, dims,
                      layout_storage_shape, layouts_of, note_fallbacks, round_up)

FP8 = torch.float8_e4m3fn
DTYPES.update({torch.float32: F32, torch.bfloat16: BF16, torch.float16: F16, FP8: E4M3, torch.uint8: E4M3,
               torch.int32: I32})
TORCH_DTYPES = {F32: torch.float32, BF16: torch.bfloat16, F16: torch.float16}
# What the checks compare on every call, bound once (a dict of torch dtypes only, and module attributes read once).
_FP8_DTYPES = (FP8, torch.uint8)
_F32 = torch.float32
_OUT_ENUMS = {t: e for e, t in TORCH_DTYPES.items()}

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_get_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or torch._dynamo.is_compiling
_PLAIN = (torch.Tensor, torch.nn.Parameter)
# BFP8_TORCH_OPS=1: eager calls go through torch.ops.blockfp8 too (the path compiled graphs take).
_ALWAYS_OPS = os.environ.get("BFP8_TORCH_OPS", "") not in ("", "0")
# The fast lane (_native.c): eager calls on plain tensors read and checked in C through torch's DLPack exchange API
# (DLPack 1.3's capsule), the Python path below for everything else. False where torch has no such API.
FAST_LANE = N.use_torch(Tensor, torch.nn.Parameter, getattr(Tensor, "__dlpack_c_exchange_api__", None), _get_device)


def fast_lane():
    """Whether a public function may offer its call to the fast lane (eager, not tracing)."""
    return FAST_LANE and not (_ALWAYS_OPS or _is_compiling())


def eager(*tensors):
    """Whether a public function may call a kernel directly: not under torch.compile / export tracing, and only
    plain CPU or CUDA tensors (fake, meta and subclass tensors go through the op)."""
    if _ALWAYS_OPS or _is_compiling():
        return False
    plain = True
    for t in tensors:
        if type(t) not in _PLAIN:
            if t is None:
                continue
            if not isinstance(t, Tensor):
                raise TypeError(f"every operand must be a torch tensor like the first, got {type(t).__name__}")
            plain = False
        elif t.is_meta:
            plain = False
    return plain


def _stream(d):
    """The library device and stream (the current one of CUDA device d; d = -1: the CPU)."""
    if d < 0:
        return CPU, None
    return CUDA, (_raw_stream(d) if _raw_stream else torch.cuda.current_stream(d).cuda_stream)


def _enum(t, what):
    e = DTYPES.get(t.dtype) if isinstance(t, Tensor) else None
    if e is None:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what} must be a torch tensor, got {type(t).__name__}")
        raise TypeError(f"{what}: dtype {t.dtype} is not supported")
    return e


def _same_device(t, d, what, ref):
    if t.get_device() != d:
        raise ValueError(f"{what} is on {t.device}, {ref} on {ref_device(d)}")


def ref_device(d):
    return "cpu" if d < 0 else f"cuda:{d}"


def _aligned(t):
    """t, or a contiguous copy of it at a fresh address where its own is not 16-byte aligned (the TMA kernels need
    aligned bases; an offset view of a tensor may not be)."""
    return t.clone(memory_format=torch.contiguous_format) if t.data_ptr() & 15 else t


def _fresh_scales(s, rows, cols, packed, want):
    """A copy of [..., rows, cols] scales in a new buffer of the layout `want` (the packed one for int32 words),
    its matrices back to back."""
    if packed or want == ALIGNED:
        buf = torch.zeros(s.shape[:-2] + (cols, round_up(rows, 4)), dtype=torch.int32 if packed else torch.float32,
                          device=s.device)
        buf[..., :rows].copy_(s.transpose(-1, -2))
        return buf, 1 << (PACKED if packed else ALIGNED)
    return s.clone(memory_format=torch.contiguous_format), 1 << ROW


def _scale_arg(s, rows, fmt, d, want):
    """(tensor to keep alive, address, layout set) for checked scales of format fmt on device d: [rows, cols], or
    [G, rows, cols] (grouped: G matrices the library reads back to back). Scales in no layout their strides
    describe (or, on CUDA, at an unaligned address) are copied into the layout `want`."""
    st = s.stride()
    if len(st) == 2:
        groups, sg, (s0, s1) = 1, 0, st
        cols = s.shape[1]
    else:
        (sg, s0, s1), (groups, _, cols) = st, s.shape
    avail = 0
    if rows and cols:
        avail = 1 + (groups - 1) * sg + (rows - 1) * s0 + (cols - 1) * s1
        if rows % 4 and (rows == 1 or s0 == 1):  # an aligned layout's padding lies beyond the view: is it there?
            avail = s.untyped_storage().nbytes() // 4 - s.storage_offset()
    packed = fmt == UE8M0_SCALES
    bits = layouts_of(rows, cols, s0, s1, packed, avail, groups, sg)
    ptr = s.data_ptr()
    if not bits or (d >= 0 and ptr & 15):
        s, bits = _fresh_scales(s, rows, cols, packed, want)
        ptr = s.data_ptr()
    return s, ptr, bits


def _scales_fmt(s, rows, kblocks, what, d, ref, groups=None):
    """The scale format of valid scales of [rows x K] operands on device d ([groups, rows, ...] with groups), or a
    clear error."""
    if (s.dtype is _F32 and s.shape == ((rows, kblocks) if groups is None else (groups, rows, kblocks))
            and s.get_device() == d):
        return FP32_SCALES
    fmt = check_scale_shape(s.shape, _enum(s, what), rows, kblocks, what, groups)
    _same_device(s, d, what, ref)
    return fmt


def _check_bias(bias, n, d):
    if bias is not None:
        check_bias(bias.shape, _enum(bias, "bias"), n)
        _same_device(bias, d, "bias", "the other operands")


def _bias_arg(bias):
    """(tensor to keep alive, address, dtype) of a checked bias or None."""
    if bias is None:
        return None, None, F32
    bias = bias.contiguous()
    return bias, bias.data_ptr(), DTYPES[bias.dtype]


def check_out(d, shape, device_index):
    """The library dtype of a valid output d of `shape` written in place, on device device_index, or a clear
    error."""
    e = _OUT_ENUMS.get(d.dtype) if isinstance(d, Tensor) else None
    if e is not None and d.shape == shape and d.get_device() == device_index and d.is_contiguous():
        return e
    if not isinstance(d, Tensor):
        raise TypeError("d must be a torch tensor")
    e = _out_enum(d.dtype)
    if tuple(d.shape) != tuple(shape):
        raise ValueError(f"d must be {dims(shape)}, got {tuple(d.shape)}")
    _same_device(d, device_index, "d", "the operands")
    raise ValueError("d must be contiguous (it is written in place)")


def _out_enum(dtype):
    e = _OUT_ENUMS.get(dtype)
    if e is None:
        raise TypeError(f"output dtype {dtype} is not supported: bfloat16, float16 or float32")
    return e


_LIB = torch.library.Library("blockfp8", "DEF")


def _one_kind(names, args):
    """Refuses meta tensors mixed with real ones. torch dispatches such a call to the Meta key, that is to the fake
    implementation, and get_device() is -1 for a meta tensor as for a CPU one: the call would compute nothing and
    return an uninitialized output, or leave an in-place one as it was."""
    meta = real = None
    for name, t in zip(names, args):
        if isinstance(t, Tensor):
            if t.is_meta:
                meta = meta or name
            elif real is None:
                real = (name, t.device)
    if meta and real:
        raise ValueError(f"{meta} is on meta, {real[0]} on {real[1]}: every operand must be on one device")


def _op(name, impl, fake, mutates_args=()):
    """Defines the op blockfp8::name with the schema of impl's annotations, impl (run with its first tensor's CUDA
    device current) as its CPU and CUDA kernel and `fake` as its fake/meta implementation. Returns the op overload
    and the kernel. Registered straight to the CPU and CUDA dispatch keys: torch.library.custom_op's autograd
    wrapper would add ~7 us to every call through the dispatcher (a compiled graph's path)."""
    def run(*args):
        d = args[0].get_device()
        if d >= 0 and _get_device() != d:  # the library launches on the current CUDA device
            with torch.cuda.device(d):
                return impl(*args)
        return impl(*args)

    names = list(inspect.signature(impl).parameters)

    def checked_fake(*args):
        _one_kind(names, args)
        return fake(*args)

    _LIB.define(name + torch.library.infer_schema(impl, mutates_args=mutates_args))
    for key in ("CPU", "CUDA"):
        _LIB.impl(name, run, key)
    # Inference only: the outputs never require grad, through the dispatcher as in the eager path.
    _LIB.impl(name, torch.library.fallthrough_kernel, "Autograd")
    torch.library.register_fake(f"blockfp8::{name}", checked_fake, lib=_LIB)
    return getattr(torch.ops.blockfp8, name).default, run


# ---------------------------------------------------------------------------------------------------------------
# blockfp8::quant_act: x [rows * batch, K] -> (q [rows * batch, K] fp8, s) with s the contiguous storage of the
# layout, per matrix: ROW [rows * batch, kb]; MN [batch, kb, rows]; ALIGNED [batch, kb, ld]; PACKED int32
# [batch, ceil(kb/4), ld] (ld = rows rounded up to 4).
# ---------------------------------------------------------------------------------------------------------------
def _quant_act_shapes(x, layout, batch):
    check_float(_enum(x, "x"), "x")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [rows, K] here, got {x.dim()} dimensions")
    if batch < 1 or x.shape[0] % batch:
        raise ValueError(f"batch={batch} does not divide the {x.shape[0]} rows")
    if not 0 <= layout < N.LAYOUT_COUNT:
        raise ValueError(f"unknown scale layout {layout}")
    total, k = x.shape
    kb = ceil_div(k, BLOCK)
    if layout == ROW:
        return (total, kb), torch.float32
    shape, is_int = layout_storage_shape(layout, total // batch, kb)
    return (batch,) + shape, torch.int32 if is_int else torch.float32


def _quant_act(x: Tensor, layout: int, ue8m0: bool, batch: int) -> tuple[Tensor, Tensor]:
    s_shape, s_dtype = _quant_act_shapes(x, layout, batch)
    dev, stream = _stream(x.get_device())
    xe = DTYPES[x.dtype]
    x = x.contiguous()
    if dev == CUDA:
        x = _aligned(x)
    total, k = x.shape
    q = torch.empty((total, k), dtype=FP8, device=x.device)
    s = torch.empty(s_shape, dtype=s_dtype, device=x.device)
    fmt = UE8M0_SCALES if ue8m0 else FP32_SCALES
    if layout == ROW:
        batch = 1
    rows = total // batch
    per = s[0].numel() * 4 if layout != ROW else 0
    for b in range(batch):  # each matrix has its own column-major scales
        N.quantize_act(x.data_ptr() + b * rows * k * x.element_size(), xe, rows, k, q.data_ptr() + b * rows * k,
                       s.data_ptr() + b * per, fmt, layout, dev, stream)
    return q, s


def _quant_act_fake(x, layout, ue8m0, batch):
    s_shape, s_dtype = _quant_act_shapes(x, layout, batch)
    return torch.empty(x.shape, dtype=FP8, device=x.device), torch.empty(s_shape, dtype=s_dtype, device=x.device)


quant_act, quant_act_impl = _op("quant_act", _quant_act, _quant_act_fake)


# ---------------------------------------------------------------------------------------------------------------
# blockfp8::quant_weight: w [batch, N, K] -> (q fp8 [batch, N, K], s fp32 [batch, ceil(N/128), ceil(K/128)])
# ---------------------------------------------------------------------------------------------------------------
def _quant_weight_shapes(w):
    check_float(_enum(w, "w"), "w")
    if w.dim() != 3:
        raise ValueError(f"w must be 3-D [batch, N, K] here, got {w.dim()} dimensions")
    batch, n, k = w.shape
    return (batch, ceil_div(n, BLOCK), ceil_div(k, BLOCK))


def _quant_weight(w: Tensor, ue8m0: bool) -> tuple[Tensor, Tensor]:
    s_shape = _quant_weight_shapes(w)
    we = DTYPES[w.dtype]
    # The library quantizes weights on the host: a CUDA weight makes one round trip (weight preparation, not a
    # per-step call, and not capturable in a CUDA graph).
    host = w.detach().to("cpu").contiguous()
    batch, n, k = host.shape
    q = torch.empty(host.shape, dtype=FP8)
    s = torch.empty(s_shape, dtype=torch.float32)
    nb, kb = s_shape[1:]
    fmt = UE8M0_SCALES if ue8m0 else FP32_SCALES
    for b in range(batch):
        N.quantize_weight(host.data_ptr() + b * n * k * host.element_size(), we, n, k, q.data_ptr() + b * n * k,
                          s.data_ptr() + b * nb * kb * 4, fmt, ROW)
    if w.device.type != "cpu":
        q, s = q.to(w.device), s.to(w.device)
    return q, s


def _quant_weight_fake(w, ue8m0):
    return (torch.empty(w.shape, dtype=FP8, device=w.device),
            torch.empty(_quant_weight_shapes(w), dtype=torch.float32, device=w.device))


quant_weight, quant_weight_impl = _op("quant_weight", _quant_weight, _quant_weight_fake)


# ---------------------------------------------------------------------------------------------------------------
# blockfp8::gemm: a [M, K] fp8, sa [M, kb] fp32 (any strides) or int32 packed, b [N, K] fp8, sb [nb, kb] -> y
# [M, N] of out_dtype. blockfp8::gemm_out writes d [M, N] instead.
# ---------------------------------------------------------------------------------------------------------------
def _gemm_check(a, sa, b, sb, bias):
    """(m, n, k, device index, A's scale format, B's scale format) of valid operands, or a clear error."""
    ash, bsh = a.shape, b.shape
    d = a.get_device()
    if not (len(ash) == 2 and len(bsh) == 2 and ash[1] == bsh[1] and a.dtype in _FP8_DTYPES
            and b.dtype in _FP8_DTYPES and b.get_device() == d):
        if len(ash) != 2:
            raise ValueError(f"A must be 2-D [M, K] here, got {len(ash)} dimensions")
        check_activation(ash, _enum(a, "A"), "A", fp8=True)
        check_weight(bsh, _enum(b, "B"), ash[1], "B")
        _same_device(b, d, "B", "A")
    m, k = ash
    n = bsh[0]
    kb = (k + BLOCK - 1) // BLOCK
    sa_fmt = _scales_fmt(sa, m, kb, "As", d, "A")
    sb_fmt = _scales_fmt(sb, (n + BLOCK - 1) // BLOCK, kb, "Bs", d, "A")
    if bias is not None:
        _check_bias(bias, n, d)
    return m, n, k, d, sa_fmt, sb_fmt


def _run_gemm(a, sa, b, sb, bias, out_e, checked, y):
    """The checked GEMM (checked: _gemm_check's result) into y."""
    m, n, k, d, sa_fmt, sb_fmt = checked
    dev, stream = (CPU, None) if d < 0 else _stream(d)
    sa_keep, sa_ptr, sa_bits = _scale_arg(sa, m, sa_fmt, d, ALIGNED)
    sb_keep, sb_ptr, sb_bits = _scale_arg(sb, (n + BLOCK - 1) // BLOCK, sb_fmt, d, ROW)
    bias_keep, bias_ptr, bias_e = _bias_arg(bias)
    a, b = a.contiguous(), b.contiguous()
    if d >= 0:
        a, b = _aligned(a), _aligned(b)
    note_fallbacks(N.gemm(m, n, k, a.data_ptr(), sa_ptr, sa_fmt, sa_bits, b.data_ptr(), sb_ptr, sb_fmt, sb_bits,
                          bias_ptr, bias_e, y.data_ptr(), out_e, dev, stream))


def _gemm(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, bias: Optional[Tensor], out_dtype: torch.dtype) -> Tensor:
    out_e = _out_enum(out_dtype)
    checked = _gemm_check(a, sa, b, sb, bias)
    y = torch.empty((checked[0], checked[1]), dtype=out_dtype, device=a.device)
    _run_gemm(a, sa, b, sb, bias, out_e, checked, y)
    return y


def _gemm_fake(a, sa, b, sb, bias, out_dtype):
    _out_enum(out_dtype)
    m, n = _gemm_check(a, sa, b, sb, bias)[:2]
    return torch.empty((m, n), dtype=out_dtype, device=a.device)


gemm, gemm_impl = _op("gemm", _gemm, _gemm_fake)


def _in_place(d, device_index, run, *args):
    """run(*args, y) with y = d, or, on CUDA where d's address is not 16-byte aligned (the TMA kernels need aligned
    bases), a copy of d copied back after: every byte the call does not write keeps its value."""
    if device_index >= 0 and d.data_ptr() & 15:
        y = d.clone()
        run(*args, y)
        d.copy_(y)
    else:
        run(*args, d)


def _gemm_out(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, d: Tensor) -> None:
    checked = _gemm_check(a, sa, b, sb, None)
    out_e = check_out(d, (checked[0], checked[1]), checked[3])
    _in_place(d, checked[3], _run_gemm, a, sa, b, sb, None, out_e, checked)


def _gemm_out_fake(a, sa, b, sb, d):
    m, n, k, dev = _gemm_check(a, sa, b, sb, None)[:4]
    check_out(d, (m, n), dev)


gemm_out, gemm_out_impl = _op("gemm_out", _gemm_out, _gemm_out_fake, mutates_args=("d",))


# ---------------------------------------------------------------------------------------------------------------
# blockfp8::grouped_gemm: DeepGEMM's m_grouped_fp8_gemm_nt_{contiguous,masked} (layout CONTIGUOUS or MASKED) into
# d. Contiguous: a [m, K], sa [m, kb], d [m, N], row_map = m_indices int32 [m]; masked: a [G, max_m, K],
# sa [G, max_m, kb], d [G, max_m, N], row_map = masked_m int32 [G]; b [G, N, K] fp8, sb [G, nb, kb].
# ---------------------------------------------------------------------------------------------------------------
def _grouped_check(a, sa, b, sb, d, row_map, layout, expected_m):
    """(groups, rows, n, k, device index, sa's format, sb's format, d's dtype) of a valid grouped call (rows: m or
    max_m), or a clear error."""
    if layout not in (CONTIGUOUS, MASKED):
        raise ValueError(f"unknown grouped layout {layout}")
    check_expected_m(expected_m)
    groups, rows, n, k = check_grouped_operands(layout, a.shape, _enum(a, "a"), b.shape, _enum(b, "b"))
    dev = a.get_device()
    _same_device(b, dev, "b", "a")
    masked = layout == MASKED
    kb = (k + BLOCK - 1) // BLOCK
    sa_fmt = _scales_fmt(sa, rows, kb, "sfa", dev, "a", groups if masked else None)
    sb_fmt = _scales_fmt(sb, (n + BLOCK - 1) // BLOCK, kb, "sfb", dev, "a", groups)
    out_e = check_out(d, (groups, rows, n) if masked else (rows, n), dev)
    check_row_map(row_map.shape, DTYPES.get(row_map.dtype), row_map.dtype, masked, groups if masked else rows)
    _same_device(row_map, dev, "masked_m" if masked else "m_indices", "a")
    return groups, rows, n, k, dev, sa_fmt, sb_fmt, out_e


def _run_grouped(a, sa, b, sb, row_map, layout, expected_m, checked, y):
    """The checked grouped GEMM (checked: _grouped_check's result) into y."""
    groups, rows, n, k, d, sa_fmt, sb_fmt, out_e = checked
    dev, stream = (CPU, None) if d < 0 else _stream(d)
    sa_keep, sa_ptr, sa_bits = _scale_arg(sa, rows, sa_fmt, d, ALIGNED)
    sb_keep, sb_ptr, sb_bits = _scale_arg(sb, (n + BLOCK - 1) // BLOCK, sb_fmt, d, ROW)
    a, b, row_map = a.contiguous(), b.contiguous(), row_map.contiguous()
    if d >= 0:
        a, b = _aligned(a), _aligned(b)
    note_fallbacks(N.grouped_gemm(layout, groups, rows, n, k, a.data_ptr(), sa_ptr, sa_fmt, sa_bits,
                                  row_map.data_ptr(), expected_m, b.data_ptr(), sb_ptr, sb_fmt, sb_bits, y.data_ptr(),
                                  out_e, dev, stream))


def _grouped_gemm(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, d: Tensor, row_map: Tensor, layout: int,
                  expected_m: int) -> None:
    checked = _grouped_check(a, sa, b, sb, d, row_map, layout, expected_m)
    _in_place(d, checked[4], _run_grouped, a, sa, b, sb, row_map, layout, expected_m, checked)


def _grouped_gemm_fake(a, sa, b, sb, d, row_map, layout, expected_m):
    _grouped_check(a, sa, b, sb, d, row_map, layout, expected_m)


grouped_gemm, grouped_gemm_impl = _op("grouped_gemm", _grouped_gemm, _grouped_gemm_fake, mutates_args=("d",))


# ---------------------------------------------------------------------------------------------------------------
# blockfp8::linear_dyn: x [M, K] float, weight [N, K] fp8 with its scales -> y [M, N] of x's dtype
# (apply_w8a8_block_fp8_linear: x quantized in the call, then the GEMM; the scratch is torch's on CUDA).
# ---------------------------------------------------------------------------------------------------------------
def _linear_dyn_check(x, w, ws, bias):
    """(m, n, k, device index, x's dtype, the weight's scale format) of valid operands, or a clear error."""
    xsh, wsh = x.shape, w.shape
    d = x.get_device()
    xe = DTYPES.get(x.dtype)
    if not (len(xsh) == 2 and len(wsh) == 2 and xsh[1] == wsh[1] and xe in FLOATS and w.dtype in _FP8_DTYPES
            and w.get_device() == d):
        if len(xsh) != 2:
            raise ValueError(f"input must be 2-D [M, K] here, got {len(xsh)} dimensions")
        check_activation(xsh, _enum(x, "input"), "input")
        check_weight(wsh, _enum(w, "weight"), xsh[1])
        _same_device(w, d, "weight", "the input")
    m, k = xsh
    n = wsh[0]
    ws_fmt = _scales_fmt(ws, (n + BLOCK - 1) // BLOCK, (k + BLOCK - 1) // BLOCK, "weight_scale", d, "the input")
    if bias is not None:
        _check_bias(bias, n, d)
    return m, n, k, d, xe, ws_fmt


def _linear_dyn(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor]) -> Tensor:
    m, n, k, d, xe, ws_fmt = _linear_dyn_check(x, weight, weight_scale, bias)
    ws_keep, ws_ptr, ws_bits = _scale_arg(weight_scale, (n + BLOCK - 1) // BLOCK, ws_fmt, d, ROW)
    bias_keep, bias_ptr, bias_e = _bias_arg(bias)
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if d < 0:  # the host call quantizes x into memory of its own
        dev, stream, scratch, nbytes = CPU, None, None, 0
    else:
        dev, stream = _stream(d)
        x, weight = _aligned(x), _aligned(weight)
        nbytes = N.linear_scratch_bytes(m, k)
        scratch_keep = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
        scratch = scratch_keep.data_ptr()
    note_fallbacks(N.linear_dyn(x.data_ptr(), xe, m, k, scratch, nbytes, n, weight.data_ptr(), ws_ptr, ws_fmt, ws_bits,
                                bias_ptr, bias_e, y.data_ptr(), xe, dev, stream))
    return y


def _linear_dyn_fake(x, weight, weight_scale, bias):
    m, n = _linear_dyn_check(x, weight, weight_scale, bias)[:2]
    return torch.empty((m, n), dtype=x.dtype, device=x.device)


linear_dyn, linear_dyn_impl = _op("linear_dyn", _linear_dyn, _linear_dyn_fake)


# ---------------------------------------------------------------------------------------------------------------
# blockfp8::linear: a prepared weight (a blockfp8.Linear, by its handle) -> bfp8_linear.
# ---------------------------------------------------------------------------------------------------------------
LINEARS = weakref.WeakValueDictionary()


def _linear_check(x, handle, n, bias, out_dtype):
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K] here, got {x.dim()} dimensions")
    check_float(_enum(x, "x"), "x")
    _out_enum(out_dtype)
    _check_bias(bias, n, x.get_device())


def _linear(x: Tensor, handle: int, n: int, bias: Optional[Tensor], out_dtype: torch.dtype) -> Tensor:
    _linear_check(x, handle, n, bias, out_dtype)
    layer = LINEARS.get(handle)
    if layer is None:
        raise RuntimeError(f"blockfp8.Linear handle {handle} is unknown or its layer was freed")
    layer.check_input(x.shape, x.device)
    dev, stream = _stream(x.get_device())
    x = x.contiguous()
    if dev == CUDA:
        x = _aligned(x)
    bias_keep, bias_ptr, bias_e = _bias_arg(bias)
    y = torch.empty((x.shape[0], n), dtype=out_dtype, device=x.device)
    count = N.linear(layer.native, x.data_ptr(), DTYPES[x.dtype], x.shape[0], bias_ptr, bias_e, y.data_ptr(),
                     DTYPES[out_dtype], dev, stream)
    note_fallbacks(count)
    return y


def _linear_fake(x, handle, n, bias, out_dtype):
    _linear_check(x, handle, n, bias, out_dtype)
    return torch.empty((x.shape[0], n), dtype=out_dtype, device=x.device)


linear, linear_impl = _op("linear", _linear, _linear_fake)
