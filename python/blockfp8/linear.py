"""blockfp8.Linear: a block-FP8 layer whose weight the library holds, prepared once for the backends of its device
(bfp8_weight_prepare: the scale layouts each reads, the device copies), and run by bfp8_linear (the activations
quantized in the call, then the dispatched GEMM, bias fused)."""
import itertools
import math
import os

import numpy as np

from . import _common as _c
from . import _native as N
from . import _numpy_path as _np

_handles = itertools.count(1)


def _torch():
    from . import _T, _torch

    return _T, _torch


_RAW = {_c.F32: np.float32, _c.F16: np.float16, _c.E4M3: np.uint8, _c.I32: np.int32, _c.BF16: np.uint16}


def _host_array(t, what):
    """(contiguous host copy or view of an array or tensor as raw numpy bits (bf16 as uint16, fp8 as uint8), its
    library dtype)."""
    T, torch = _torch()
    if T is not None and isinstance(t, torch.Tensor):
        e = T.DTYPES.get(t.dtype)
        if e is None:
            raise TypeError(f"{what}: dtype {t.dtype} is not supported")
        host = t.detach().to("cpu").contiguous()
        if e == _c.BF16:
            host = host.view(torch.int16)
        elif e == _c.E4M3:
            host = host.view(torch.uint8)
        return host.numpy().view(_RAW[e]), e
    e = _np.enum_of(t, what)
    return np.ascontiguousarray(t).view(_RAW[e]), e


class Linear:
    """y = x @ W^T (+ bias) with W block-FP8 ([N, K] E4M3 and one scale per 128x128 block), held and prepared by
    the library for the backends of `device`. Build one with from_safetensors, from_tensors or from_float; call it
    on torch tensors (on its device) or numpy arrays (device 'cpu'). Under torch it is the op blockfp8::linear, so
    torch.compile traces it and CUDA graphs capture it."""

    def __init__(self, native, device="cpu", bias=None):
        """Internal: use from_safetensors, from_tensors or from_float."""
        self.native = native
        self.out_features, self.in_features, fmt, _, _ = N.weight_info(native)
        self.scale_format = N.NAMES["formats"][fmt]
        self._dev, index = _c.device_enum(device)
        T, torch = _torch()
        if self._dev == _c.CUDA:
            _c.need(T is not None, "a CUDA Linear needs torch (its inputs are CUDA tensors)", RuntimeError)
            self.device = torch.device("cuda", index if index is not None else torch.cuda.current_device())
            with torch.cuda.device(self.device):
                N.weight_prepare(native, _c.CUDA)
        else:
            self.device = torch.device("cpu") if T is not None else "cpu"
            N.weight_prepare(native, _c.CPU)
        # the bias for numpy calls (bf16 as ml_dtypes.bfloat16, else its raw bits), as a torch tensor on the layer's
        # device where torch is, and its library dtype
        self.bias_numpy, self.bias, self._bias_enum = bias_forms(bias, self.out_features, self.device)
        self.handle = next(_handles)
        if T is not None:
            T.LINEARS[self.handle] = self

    # -- construction ----------------------------------------------------------------------------------------
    @classmethod
    def from_safetensors(cls, path, name, device="cpu", bias=None):
        """Loads NAME (F8_E4M3 [N, K]) and NAME_scale_inv (F32 or F8_E8M0 [ceil(N/128), ceil(K/128)]; DeepSeek
        naming) from a safetensors file or a sharded checkpoint (its model.safetensors.index.json, or the directory
        holding it: the two may sit in different shards), and optionally the tensor named `bias` ([N]) from it."""
        _c.need(isinstance(path, (str, bytes)) or hasattr(path, "__fspath__"), "path must be a file path",
                TypeError)
        _c.need(isinstance(name, str) and name, "name must be the weight's tensor name", TypeError)
        _c.need(bias is None or isinstance(bias, str), "bias must be a tensor name of the same checkpoint", TypeError)
        native, extra = N.weight_load(os.fsdecode(path), name, bias)
        return cls(native, device, None if extra is None else bias_bits(bias, *extra))

    @classmethod
    def from_tensors(cls, weight, weight_scale, bias=None, device=None):
        """From a quantized weight: weight [N, K] float8_e4m3fn (or uint8 codes), weight_scale float32
        [ceil(N/128), ceil(K/128)] in any layout its strides describe (or int32 packed UE8M0). Copied; device
        defaults to the weight's."""
        hw = HostWeight(weight, weight_scale)
        native = N.weight_create(_np.ptr(hw.q), hw.n, hw.k, _np.ptr(hw.s), hw.fmt, hw.layout)
        return cls(native, cls._device_of(weight) if device is None else device, bias)

    @classmethod
    def from_float(cls, w, scale_ue8m0=False, bias=None, device=None):
        """Quantizes w [N, K] (float32, bfloat16 or float16) in 128x128 blocks (bfp8_weight_quantize)."""
        host, e = _host_array(w, "w")
        _c.check_float(e, "w")
        if host.ndim != 2:
            raise ValueError(f"w must be 2-D [N, K], got shape {host.shape}")
        native, _ = N.weight_quantize(_np.ptr(host), e, host.shape[0], host.shape[1],
                                      _c.UE8M0_SCALES if scale_ue8m0 else _c.FP32_SCALES)
        return cls(native, cls._device_of(w) if device is None else device, bias)

    @staticmethod
    def _device_of(t):
        return str(getattr(t, "device", "cpu"))

    # -- use -------------------------------------------------------------------------------------------------
    def check_input(self, shape, device):
        if not shape or shape[-1] != self.in_features:
            raise ValueError(f"x must be [..., {self.in_features}], got shape {tuple(shape)}")
        if device != self.device:
            raise ValueError(f"x is on {device}, this layer on {self.device}")

    def __call__(self, x, out_dtype=None):
        """y [..., N] = x [..., K] @ W^T (+ bias); out_dtype defaults to x's dtype."""
        T, torch = _torch()
        if T is not None and isinstance(x, torch.Tensor):
            return self._torch_call(T, torch, x, out_dtype)
        xe = _np.enum_of(x, "x")
        _c.check_float(xe, "x")
        if self._dev != _c.CPU:
            raise ValueError(f"numpy inputs need a CPU layer, this one is on {self.device}")
        self.check_input(x.shape, self.device)
        m = math.prod(x.shape[:-1])
        out_e = xe if out_dtype is None else _c.out_dtype_enum(out_dtype)
        x = np.ascontiguousarray(x)
        y = np.empty(x.shape[:-1] + (self.out_features,), _np.np_dtype(out_e))
        bias_ptr, bias_e = (None, _c.F32) if self.bias_numpy is None else (_np.ptr(self.bias_numpy), self._bias_enum)
        _c.note_fallbacks(N.linear(self.native, _np.ptr(x), xe, m, bias_ptr, bias_e, _np.ptr(y), out_e, _c.CPU, None))
        return y

    forward = __call__

    def _torch_call(self, T, torch, x, out_dtype):
        shape = x.shape
        self.check_input(shape, x.device)
        out = x.dtype if out_dtype is None else T.TORCH_DTYPES[_c.out_dtype_enum(out_dtype)]
        x2 = x if len(shape) == 2 else x.reshape(math.prod(shape[:-1]), shape[-1])
        if T.eager(x):
            y = T.linear_impl(x2, self.handle, self.out_features, self.bias, out)
        else:
            y = T.linear(x2, self.handle, self.out_features, self.bias, out)
        return y if len(shape) == 2 else y.view(*shape[:-1], self.out_features)

    def layouts(self):
        """The scale layouts the library holds for this weight: {"host": [...], "device": [...]}."""
        _, _, _, host, dev = N.weight_info(self.native)
        return {"host": _c._names(host, _c.LAYOUT_NAMES), "device": _c._names(dev, _c.LAYOUT_NAMES)}

    def weight(self):
        """(codes [N, K] float8_e4m3fn (uint8 without ml_dtypes), scales float32 [ceil(N/128), ceil(K/128)]):
        a host copy of the weight the library holds."""
        q = np.empty((self.out_features, self.in_features), _np.FP8)
        s = np.empty((_c.ceil_div(self.out_features, _c.BLOCK), _c.ceil_div(self.in_features, _c.BLOCK)), np.float32)
        N.weight_read(self.native, _np.ptr(q), _np.ptr(s))
        return q, s

    def explain(self, m, out_dtype="bf16"):
        """The dispatcher's table for a call of this layer on m tokens (the layouts it holds on its device)."""
        _, _, fmt, host, dev = N.weight_info(self.native)
        has_bias = self.bias_numpy is not None
        device = "cuda" if self._dev == _c.CUDA else "cpu"
        if self._dev == _c.CUDA:
            _, torch = _torch()
            with torch.cuda.device(self.device):
                return self._explain(m, out_dtype, fmt, dev, has_bias, device)
        return self._explain(m, out_dtype, fmt, host, has_bias, device)

    def _explain(self, m, out_dtype, fmt, b_layouts, has_bias, device):
        return _c.explain_problem(m, self.out_features, self.in_features, out_dtype, N.NAMES["formats"][fmt], device,
                                  _c.DTYPE_NAMES[self._bias_enum] if has_bias else None, None, None, b_layouts, None)

    def __repr__(self):
        return (f"blockfp8.Linear(in_features={self.in_features}, out_features={self.out_features}, "
                f"scale_format={self.scale_format!r}, device={str(self.device)!r}, bias={self.bias_numpy is not None})")


class HostWeight:
    """A quantized weight given as arrays or tensors, checked and in host memory for the library: q [n, k] E4M3
    codes, s its scales (fmt, layout): row-major fp32, or the packed layout of int32 UE8M0 words."""

    def __init__(self, weight, weight_scale):
        self.q, qe = _host_array(weight, "weight")
        self.n, self.k = _c.check_weight(self.q.shape, qe, None)
        s_host, _ = _host_array(weight_scale, "weight_scale")
        # The host copy is contiguous, so its layout is row-major (fp32) or the packed words' own order.
        self.fmt = _c.check_scale_shape(s_host.shape, _c.dtype_enum(s_host.dtype), _c.ceil_div(self.n, _c.BLOCK),
                                        _c.ceil_div(self.k, _c.BLOCK), "weight_scale")
        if self.fmt == _c.UE8M0_SCALES:  # [rows, words] row-major -> the packed layout [words][ld]
            rows, words = s_host.shape
            buf = np.zeros((words, _c.round_up(rows, 4)), np.int32)
            buf[:, :rows] = s_host.T
            s_host, self.layout = buf, _c.PACKED
        else:
            self.layout = _c.ROW
        self.s = s_host


def bias_forms(bias, n, device):
    """(numpy form, torch form on `device` or None without torch, library dtype) of a bias [n] given as an array, a
    tensor or bits read from a file; (None, None, F32) for no bias."""
    if bias is None:
        return None, None, _c.F32
    T, torch = _torch()
    raw, e = (bias.raw, bias.dtype_enum) if isinstance(bias, _BiasBits) else _host_array(bias, "bias")
    _c.check_bias(raw.shape, e, n)
    raw = np.ascontiguousarray(raw)
    as_numpy = raw.view(_np.np_dtype(e)) if e != _c.BF16 or _c.ml_dtypes is not None else raw
    if T is None:
        return as_numpy, None, e
    t = torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16) if e == _c.BF16 else torch.from_numpy(raw)
    return as_numpy, t.to(device), e


def bias_bits(name, dtype, shape, data):
    """A bias read from a file (a tensor's dtype, shape and bytes) as bits the layers take."""
    if dtype not in _c.FLOATS:
        raise TypeError(f"bias '{name}' must be F32, BF16 or F16")
    return _BiasBits(np.frombuffer(data, _RAW[dtype]).reshape(shape).copy(), dtype)


class _BiasBits:
    """A bias read from a file as raw bits (bf16 has no numpy dtype without ml_dtypes)."""

    def __init__(self, raw, dtype):
        self.raw, self.dtype_enum = raw, dtype
