"""The torch path: CPU and CUDA tensors, outputs allocated by torch on the input's device, CUDA work on
torch.cuda.current_stream() of that device, no host synchronization (per_block_quant_fp8 on CUDA excepted: the
library quantizes weights on the host).

Every operation is an op of the `blockfp8` torch.library namespace with a fake implementation, so that
torch.compile(fullgraph=True) traces callers and CUDA graphs capture them. The ops return contiguous tensors; the
public functions (python/blockfp8/__init__.py) make the strided views engines expect (column-major scales) around
them, in traceable torch code. In eager mode the public functions call the kernels directly, which skips the
dispatcher but runs the very same code.

Tensor arguments of other layouts are copied into one the library reads (contiguous operands; scales whose strides
match no library layout; on CUDA, operands at addresses that are not 16-byte aligned); outputs written in place
(fp8_gemm_nt's d) must be contiguous.

The kernels run on every call, so they read each tensor attribute once and compare devices as indices (-1 for the
CPU); the messages are built only when a check fails."""
import os
import weakref
from typing import Optional

import torch
from torch import Tensor

from . import _native as N
from ._common import (ALIGNED, BF16, BLOCK, CPU, CUDA, DTYPES, E4M3, F16, F32, FLOATS, FP32_SCALES, I32, PACKED, ROW,
                      UE8M0_SCALES, ceil_div, check_activation, check_bias, check_float, check_scale_shape,
                      check_weight, layout_storage_shape, layouts_of, note_fallbacks, round_up)

FP8 = torch.float8_e4m3fn
DTYPES.update({torch.float32: F32, torch.bfloat16: BF16, torch.float16: F16, FP8: E4M3, torch.uint8: E4M3,
               torch.int32: I32})
TORCH_DTYPES = {F32: torch.float32, BF16: torch.bfloat16, F16: torch.float16}

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_get_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or torch._dynamo.is_compiling
_PLAIN = (torch.Tensor, torch.nn.Parameter)
# BFP8_TORCH_OPS=1: eager calls go through torch.ops.blockfp8 too (the path compiled graphs take).
_ALWAYS_OPS = os.environ.get("BFP8_TORCH_OPS", "") not in ("", "0")


def eager(*tensors):
    """Whether a public function may call a kernel directly: not under torch.compile / export tracing, and only
    plain CPU or CUDA tensors (fake, meta and subclass tensors go through the op)."""
    plain = not (_ALWAYS_OPS or _is_compiling())
    for t in tensors:
        if t is None:
            continue
        if type(t) not in _PLAIN:
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
    """A copy of [rows, cols] scales in a new buffer of the layout `want` (the packed one for int32 words)."""
    if packed or want == ALIGNED:
        buf = torch.zeros((cols, round_up(rows, 4)), dtype=torch.int32 if packed else torch.float32, device=s.device)
        buf[:, :rows].copy_(s.t())
        return buf, 1 << (PACKED if packed else ALIGNED)
    return s.clone(memory_format=torch.contiguous_format), 1 << ROW


def _scale_arg(s, rows, cols, fmt, d, want):
    """(tensor to keep alive, address, layout set) for checked [rows, cols] scales (format fmt) on device d. Scales
    in no layout their strides describe (or, on CUDA, at an unaligned address) are copied into the layout `want`."""
    s0, s1 = s.stride()
    if not rows or not cols:
        return s, s.data_ptr(), layouts_of(rows, cols, s0, s1, fmt == UE8M0_SCALES, 0)
    avail = 1 + (rows - 1) * s0 + (cols - 1) * s1
    if rows % 4 and (rows == 1 or s0 == 1):  # an aligned layout's padding lies beyond the view: is it there?
        avail = s.untyped_storage().nbytes() // 4 - s.storage_offset()
    bits = layouts_of(rows, cols, s0, s1, fmt == UE8M0_SCALES, avail)
    ptr = s.data_ptr()
    if not bits or (d >= 0 and ptr & 15):
        s, bits = _fresh_scales(s, rows, cols, fmt == UE8M0_SCALES, want)
        ptr = s.data_ptr()
    return s, ptr, bits


def _scales_fmt(s, rows, kblocks, what, d, ref):
    """The scale format of valid [rows x K] scales on device d, or a clear error."""
    e = DTYPES.get(s.dtype) if isinstance(s, Tensor) else None
    shape = s.shape if e is not None else None
    if e == F32 and len(shape) == 2 and shape[0] == rows and shape[1] == kblocks:
        fmt = FP32_SCALES
    else:
        fmt = check_scale_shape(shape, _enum(s, what), rows, kblocks, what)
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


_LIB = torch.library.Library("blockfp8", "DEF")


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

    _LIB.define(name + torch.library.infer_schema(impl, mutates_args=mutates_args))
    for key in ("CPU", "CUDA"):
        _LIB.impl(name, run, key)
    # Inference only: the outputs never require grad, through the dispatcher as in the eager path.
    _LIB.impl(name, torch.library.fallthrough_kernel, "Autograd")
    torch.library.register_fake(f"blockfp8::{name}", fake, lib=_LIB)
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
    if len(ash) != 2:
        raise ValueError(f"A must be 2-D [M, K] here, got {len(ash)} dimensions")
    if DTYPES.get(a.dtype) != E4M3:
        check_activation(ash, _enum(a, "A"), "A", fp8=True)
    m, k = ash
    if DTYPES.get(b.dtype) != E4M3 or len(bsh) != 2 or bsh[1] != k:
        check_weight(bsh, _enum(b, "B"), k, "B")
    n = bsh[0]
    d = a.get_device()
    _same_device(b, d, "B", "A")
    kb = (k + BLOCK - 1) // BLOCK
    sa_fmt = _scales_fmt(sa, m, kb, "As", d, "A")
    sb_fmt = _scales_fmt(sb, (n + BLOCK - 1) // BLOCK, kb, "Bs", d, "A")
    _check_bias(bias, n, d)
    return m, n, k, d, sa_fmt, sb_fmt


def _run_gemm(a, sa, b, sb, bias, y, out_e):
    m, n, k, d, sa_fmt, sb_fmt = _gemm_check(a, sa, b, sb, bias)
    dev, stream = _stream(d)
    sa_keep, sa_ptr, sa_bits = _scale_arg(sa, m, sa.shape[1], sa_fmt, d, ALIGNED)
    sb_keep, sb_ptr, sb_bits = _scale_arg(sb, (n + BLOCK - 1) // BLOCK, sb.shape[1], sb_fmt, d, ROW)
    bias_keep, bias_ptr, bias_e = _bias_arg(bias)
    a, b = a.contiguous(), b.contiguous()
    if d >= 0:
        a, b = _aligned(a), _aligned(b)
    count = N.gemm(m, n, k, a.data_ptr(), sa_ptr, sa_fmt, sa_bits, b.data_ptr(), sb_ptr, sb_fmt, sb_bits, bias_ptr,
                   bias_e, y.data_ptr(), out_e, dev, stream)
    note_fallbacks(count)


def _out_enum(dtype):
    e = DTYPES.get(dtype)
    if e not in FLOATS:
        raise TypeError(f"output dtype {dtype} is not supported: bfloat16, float16 or float32")
    return e


def _gemm(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, bias: Optional[Tensor], out_dtype: torch.dtype) -> Tensor:
    out_e = _out_enum(out_dtype)
    y = torch.empty((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    _run_gemm(a, sa, b, sb, bias, y, out_e)
    return y


def _gemm_fake(a, sa, b, sb, bias, out_dtype):
    _out_enum(out_dtype)
    m, n = _gemm_check(a, sa, b, sb, bias)[:2]
    return torch.empty((m, n), dtype=out_dtype, device=a.device)


gemm, gemm_impl = _op("gemm", _gemm, _gemm_fake)


def check_out(d, m, n, device_index):
    """The library dtype of a valid output d [m, n] written in place, or a clear error."""
    if not isinstance(d, Tensor):
        raise TypeError("d must be a torch tensor")
    e = _out_enum(d.dtype)
    shape = d.shape
    if len(shape) != 2 or shape[0] != m or shape[1] != n:
        raise ValueError(f"d must be [{m}, {n}], got {tuple(shape)}")
    _same_device(d, device_index, "d", "the operands")
    if not d.is_contiguous():
        raise ValueError("d must be contiguous (it is written in place)")
    return e


def _gemm_out(a: Tensor, sa: Tensor, b: Tensor, sb: Tensor, d: Tensor) -> None:
    out_e = check_out(d, a.shape[0], b.shape[0], a.get_device())
    if d.is_cuda and d.data_ptr() & 15:  # written through an aligned buffer
        tmp = torch.empty(d.shape, dtype=d.dtype, device=d.device)
        _run_gemm(a, sa, b, sb, None, tmp, out_e)
        d.copy_(tmp)
    else:
        _run_gemm(a, sa, b, sb, None, d, out_e)


def _gemm_out_fake(a, sa, b, sb, d):
    m, n = _gemm_check(a, sa, b, sb, None)[:2]
    check_out(d, m, n, a.get_device())


gemm_out, gemm_out_impl = _op("gemm_out", _gemm_out, _gemm_out_fake, mutates_args=("d",))


# ---------------------------------------------------------------------------------------------------------------
# blockfp8::linear_dyn: x [M, K] float, weight [N, K] fp8 with its scales -> y [M, N] of x's dtype
# (apply_w8a8_block_fp8_linear: x quantized in the call, then the GEMM; the scratch is torch's).
# ---------------------------------------------------------------------------------------------------------------
def _linear_dyn_check(x, w, ws, bias):
    """(m, n, k, device index, x's dtype, the weight's scale format) of valid operands, or a clear error."""
    xsh, wsh = x.shape, w.shape
    if len(xsh) != 2:
        raise ValueError(f"input must be 2-D [M, K] here, got {len(xsh)} dimensions")
    xe = DTYPES.get(x.dtype)
    if xe not in FLOATS:
        check_activation(xsh, _enum(x, "input"), "input")
    m, k = xsh
    if DTYPES.get(w.dtype) != E4M3 or len(wsh) != 2 or wsh[1] != k:
        check_weight(wsh, _enum(w, "weight"), k)
    n = wsh[0]
    d = x.get_device()
    _same_device(w, d, "weight", "the input")
    ws_fmt = _scales_fmt(ws, (n + BLOCK - 1) // BLOCK, (k + BLOCK - 1) // BLOCK, "weight_scale", d, "the input")
    _check_bias(bias, n, d)
    return m, n, k, d, xe, ws_fmt


def scratch_size(m, k):
    """Bytes of linear_dyn's activation scratch: the codes, then (from the next multiple of 256) the scales in the
    largest layout, the 16-byte-aligned MN-major one."""
    return round_up(m * k, 256) + round_up(m, 4) * ceil_div(k, BLOCK) * 4


def _linear_dyn(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor]) -> Tensor:
    m, n, k, d, xe, ws_fmt = _linear_dyn_check(x, weight, weight_scale, bias)
    dev, stream = _stream(d)
    ws_keep, ws_ptr, ws_bits = _scale_arg(weight_scale, (n + BLOCK - 1) // BLOCK, weight_scale.shape[1], ws_fmt, d,
                                          ROW)
    bias_keep, bias_ptr, bias_e = _bias_arg(bias)
    x, weight = x.contiguous(), weight.contiguous()
    if d >= 0:
        x, weight = _aligned(x), _aligned(weight)
    device = x.device
    nbytes = scratch_size(m, k)
    scratch = torch.empty(nbytes, dtype=torch.uint8, device=device)
    y = torch.empty((m, n), dtype=x.dtype, device=device)
    count = N.linear_dyn(x.data_ptr(), xe, m, k, scratch.data_ptr(), nbytes, n, weight.data_ptr(), ws_ptr, ws_fmt,
                         ws_bits, bias_ptr, bias_e, y.data_ptr(), xe, dev, stream)
    note_fallbacks(count)
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
