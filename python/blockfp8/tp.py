"""blockfp8.tp: tensor-parallel block-FP8 linear layers (docs/tensor-parallel.md).

The sharding is the C library's (include/blockfp8_tp.h): the same plans, the same refusals with the same messages
and the same opt-in shared blocks as `blockfp8 shard`. A ParallelLinear holds its rank's part of the weight,
prepared by the library, and runs its rank's GEMM through blockfp8 (bfp8_tp_linear_local), then the collective
through torch.distributed on the process group given (NCCL on GPUs, gloo on CPUs):

    column  the local outputs all-gathered (all_gather_into_tensor): y bit-identical to the unsharded layer
    row     the fp32 partials summed (all_reduce), then rounded once to the output dtype; the bias added once

Given instead the address of an ncclComm_t (`nccl_comm`: SGLang's and vLLM's PyNcclCommunicator hold one in
`.comm`), the whole layer is one call of the C library (bfp8_tp_linear) on the current stream.

    plan = tp.shard_plan(n, k, "row", ranks, rank)                       the plan only
    q, s, plan = tp.shard_weight(weight, weight_scale, "column", ranks, rank)   rank's slice, numpy or torch
    layer = tp.ParallelLinear.from_safetensors(path, name, "row", device="cuda")  reads only this rank's bytes
    y = layer(x)            GEMM + collective (torch tensors)
    part = layer.local(x)   the rank's share without communication (numpy or torch)
"""
import contextlib
import dataclasses
import functools
import math
import operator
import os
import weakref

import numpy as np

from . import _common as _c
from . import _native as N
from . import _numpy_path as _np
from .linear import HostWeight, Linear, bias_bits, bias_forms

__all__ = ["Shard", "shard_plan", "shard_weight", "ParallelLinear"]

_MODE_NAMES = {N.TP_COLUMN: "column", N.TP_ROW: "row"}


def _torch():
    from . import _T, _torch

    return _T, _torch


def _dist():
    """torch.distributed, or None where torch (or its distributed package) is not there."""
    T, torch = _torch()
    if T is None or not torch.distributed.is_available():
        return None
    return torch.distributed


def _mode(mode):
    """'column' or 'row' -> the library's mode (bfp8_tp_mode_parse: its message for any other name)."""
    _c.need(isinstance(mode, str), f"mode must be 'column' or 'row', got {mode!r}", TypeError)
    return N.tp_mode_parse(mode)


def _int(v, what):
    """An int argument that the library takes as a C int; the library judges its value."""
    try:
        if isinstance(v, bool):
            raise TypeError
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {v!r}") from None
    _c.need(-2**31 <= v < 2**31, f"{what}={v} is out of range")
    return v


def _dim(v, what):
    """A size the library takes as an int64_t; the library judges its value."""
    try:
        if isinstance(v, bool):
            raise TypeError
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {v!r}") from None
    _c.need(-2**63 <= v < 2**63, f"{what}={v} is out of range")
    return v


def _flags(share_blocks):
    _c.need(isinstance(share_blocks, bool), f"share_blocks must be True or False, got {share_blocks!r}", TypeError)
    return N.SHARD_SHARE_BLOCKS if share_blocks else 0


@dataclasses.dataclass(frozen=True)
class Shard:
    """One rank's part of a sharded [n, k] weight, as bfp8_shard_plan made it: column mode splits N (the rank holds
    rows [begin, end) of W and computes those columns of y), row mode splits K (columns [begin, end) of W, and of x).
    With shared blocks, `lead` zero rows (column) or columns (row) pad the slice in front to its 128-block boundary;
    `block_begin` is the first 128-block held; the local weight is [n_local, k_local]."""
    mode: str
    rank: int
    ranks: int
    n: int
    k: int
    begin: int
    end: int
    lead: int
    block_begin: int
    n_local: int
    k_local: int

    @property
    def size(self):
        """The slice's extent: end - begin."""
        return self.end - self.begin

    def native_args(self):
        """(n, k, mode, ranks, rank, flags) for the native calls, which plan again from them. With shared blocks
        allowed the plan is this one: it equals the aligned plan wherever that exists."""
        mode = N.TP_COLUMN if self.mode == "column" else N.TP_ROW
        return (self.n, self.k, mode, self.ranks, self.rank, N.SHARD_SHARE_BLOCKS)


def _shard(mode, ranks, rank, plan):
    n, k, begin, end, lead, block_begin, n_local, k_local = plan
    return Shard(_MODE_NAMES[mode], rank, ranks, n, k, begin, end, lead, block_begin, n_local, k_local)


def shard_plan(n, k, mode, ranks, rank, share_blocks=False):
    """Rank `rank` of `ranks`: its part of an [n, k] block-FP8 weight split column-parallel (N) or row-parallel (K),
    by bfp8_shard_plan. The split must be even; one that cuts a 128-wide scale block raises UnsupportedError naming
    the shapes, unless share_blocks (then each slice is padded to its block boundary and holds the scale block it
    shares with its neighbour). Returns a Shard."""
    m = _mode(mode)
    ranks, rank = _int(ranks, "ranks"), _int(rank, "rank")
    return _shard(m, ranks, rank, N.shard_plan(_dim(n, "n"), _dim(k, "k"), m, ranks, rank, _flags(share_blocks)))


def _local_weight(weight, weight_scale, mode, ranks, rank, share_blocks):
    """(native local weight, Shard) of a whole quantized weight, cut by the library (bfp8_weight_shard)."""
    m = _mode(mode)
    ranks, rank, flags = _int(ranks, "ranks"), _int(rank, "rank"), _flags(share_blocks)
    hw = HostWeight(weight, weight_scale)
    native, plan = N.weight_shard(hw.n, hw.k, m, ranks, rank, flags, _np.ptr(hw.q), _np.ptr(hw.s), hw.fmt, hw.layout)
    return native, _shard(m, ranks, rank, plan)


def shard_weight(weight, weight_scale, mode, ranks, rank, share_blocks=False):
    """Rank `rank` of `ranks`'s slice of a quantized weight: weight [N, K] float8_e4m3fn (or uint8 codes) and
    weight_scale float32 [ceil(N/128), ceil(K/128)] (any layout its strides describe, or int32 packed UE8M0), numpy
    arrays or torch tensors. Returns (weight_local [n_local, k_local] of weight's dtype, weight_scale_local float32
    row-major [ceil(n_local/128), ceil(k_local/128)] (UE8M0 scales as their float32 values), Shard), on weight's
    device. The library cuts the bytes (bfp8_weight_shard): they are exactly what a ParallelLinear of the same
    shard holds, the lead rows or columns zero (code 0 is +0.0)."""
    native, shard = _local_weight(weight, weight_scale, mode, ranks, rank, share_blocks)
    q = np.empty((shard.n_local, shard.k_local), np.uint8)
    s = np.empty((_c.ceil_div(shard.n_local, _c.BLOCK), _c.ceil_div(shard.k_local, _c.BLOCK)), np.float32)
    N.weight_read(native, _np.ptr(q), _np.ptr(s))
    T, torch = _torch()
    if T is not None and isinstance(weight, torch.Tensor):
        return torch.from_numpy(q).view(weight.dtype).to(weight.device), torch.from_numpy(s).to(weight.device), shard
    return q.view(weight.dtype), s, shard


# ---------------------------------------------------------------------------------------------------------------
# The layer
# ---------------------------------------------------------------------------------------------------------------
_LAYERS = weakref.WeakValueDictionary()  # the local Linear's handle -> its ParallelLinear (for the torch op)


class ParallelLinear:
    """One rank's part of a tensor-parallel block-FP8 layer y = x @ W^T (+ bias), W [N, K] split column-parallel
    (N) or row-parallel (K) over the ranks of a torch.distributed process group (or of an NCCL communicator).

    Build it with from_safetensors or from_tensors; call it on torch tensors on its device:
      column: x [..., K] (the whole input on every rank) -> y [..., N] on every rank, gathered; with
              gather_output=False, the rank's columns y[..., begin:end] (the input of a row-parallel layer).
      row:    x [..., end - begin] (the rank's slice; with input_is_parallel=False the whole x [..., K], sliced
              here) -> y [..., N] on every rank: the fp32 partials all-reduced, then rounded once.
    The bias [N] is the whole one: column ranks add their part, row rank 0 adds it to its partial before the sum.
    out_dtype defaults to x's dtype. The collective is torch.distributed's on `group` (default: the world): NCCL
    orders it after the GEMM on the current stream and later work after it, without synchronizing the host."""

    def __init__(self, native, shard, device="cpu", bias=None, group=None, nccl_comm=None, gather_output=True,
                 input_is_parallel=True):
        """Internal: use from_safetensors or from_tensors."""
        _c.need(isinstance(gather_output, bool) and isinstance(input_is_parallel, bool),
                "gather_output and input_is_parallel must be True or False", TypeError)
        _c.need(shard.mode == "column" or gather_output, "gather_output=False is for column-parallel layers")
        _c.need(shard.mode == "row" or input_is_parallel, "input_is_parallel=False is for row-parallel layers")
        _c.need(group is None or nccl_comm is None, "give a torch.distributed group or an NCCL communicator, not both",
                TypeError)
        if nccl_comm is not None:
            nccl_comm = getattr(nccl_comm, "value", nccl_comm)  # a ctypes c_void_p, as PyNcclCommunicator.comm
            _c.need(isinstance(nccl_comm, int) and nccl_comm != 0,
                    f"nccl_comm must be the address of an ncclComm_t (an int), got {nccl_comm!r}", TypeError)
        self.shard = shard
        self.local_linear = Linear(native, device)  # the local weight, prepared for the backends of the device
        self.device = self.local_linear.device
        self.in_features, self.out_features = shard.k, shard.n
        self.bias_numpy, self.bias, self._bias_enum = bias_forms(bias, shard.n, self.device)
        self.group, self.nccl_comm = group, nccl_comm
        self.gather_output, self.input_is_parallel = gather_output, input_is_parallel
        self._group_checked = False
        _LAYERS[self.local_linear.handle] = self

    @functools.cached_property
    def _plans(self):
        """Every rank's plan: where its part of the gather lands (the library's plans, not arithmetic redone here).
        Made by the first gather that needs them, not by the constructor: a layer costs nothing per rank."""
        sh = self.shard
        return [shard_plan(sh.n, sh.k, sh.mode, sh.ranks, r, True) for r in range(sh.ranks)]

    # -- construction ----------------------------------------------------------------------------------------
    @classmethod
    def from_safetensors(cls, path, name, mode, rank=None, world_size=None, *, group=None, nccl_comm=None,
                         share_blocks=False, device="cpu", bias=None, gather_output=True, input_is_parallel=True):
        """Rank `rank` of `world_size`'s part of NAME (F8_E4M3 [N, K]) and NAME_scale_inv from a safetensors file
        (DeepSeek naming), reading only that part's bytes (bfp8_weight_load_shard); `bias` names a tensor [N] of
        the same file. rank and world_size default to the process group's (torch.distributed initialized)."""
        _c.need(isinstance(path, (str, bytes)) or hasattr(path, "__fspath__"), "path must be a file path", TypeError)
        _c.need(isinstance(name, str) and name, "name must be the weight's tensor name", TypeError)
        _c.need(bias is None or isinstance(bias, str), "bias must be a tensor name of the same file", TypeError)
        m = _mode(mode)
        rank, world_size = _world(rank, world_size, group, nccl_comm)
        path = os.fsdecode(path)
        native, plan = N.weight_load_shard(path, name, m, world_size, rank, _flags(share_blocks))
        bias = None if bias is None else bias_bits(bias, *N.safetensors_read(path, bias))
        return cls(native, _shard(m, world_size, rank, plan), device, bias, group, nccl_comm, gather_output,
                   input_is_parallel)

    @classmethod
    def from_tensors(cls, weight, weight_scale, mode, rank=None, world_size=None, *, group=None, nccl_comm=None,
                     share_blocks=False, device=None, bias=None, gather_output=True, input_is_parallel=True):
        """The rank's part of a whole quantized weight (weight [N, K] E4M3, weight_scale [ceil(N/128),
        ceil(K/128)], as Linear.from_tensors takes them; numpy or torch), cut by the library. device defaults to
        the weight's; rank and world_size to the process group's."""
        rank, world_size = _world(rank, world_size, group, nccl_comm)
        native, shard = _local_weight(weight, weight_scale, mode, world_size, rank, share_blocks)
        device = Linear._device_of(weight) if device is None else device
        return cls(native, shard, device, bias, group, nccl_comm, gather_output, input_is_parallel)

    # -- use -------------------------------------------------------------------------------------------------
    def _x_features(self):
        """The width of the x a call takes."""
        return self.shard.k if self.shard.mode == "column" or not self.input_is_parallel else self.shard.size

    def _x_local(self, x):
        """x as the rank's GEMM takes it: row mode with input_is_parallel=False gets its slice of K."""
        if self.shard.mode == "row" and not self.input_is_parallel:
            return x[..., self.shard.begin:self.shard.end]
        return x

    def _check_x(self, shape):
        want = self._x_features()
        if not shape or shape[-1] != want:
            what = "the rank's slice of K" if want != self.shard.k else "K"
            raise ValueError(f"x must be [..., {want}] ({what}), got shape {tuple(shape)}")

    def _torch_x_local(self, x):
        """A torch x checked (width, device) and cut to what the rank's GEMM takes."""
        self._check_x(x.shape)
        if x.device != self.device:
            raise ValueError(f"x is on {x.device}, this layer on {self.device}")
        return self._x_local(x)

    def local(self, x, out_dtype=None):
        """The rank's share without communication (bfp8_tp_linear_local), for numpy arrays or torch tensors:
        column, the rank's columns of y [..., end - begin] in out_dtype (x's dtype by default); row, the fp32
        partial [..., N] (the bias on rank 0 only) that a sum over the ranks turns into y."""
        T, torch = _torch()
        if T is not None and isinstance(x, torch.Tensor):
            y = self._local_torch(T, torch, x, out_dtype)
        else:
            y = self._local_numpy(x, out_dtype)
        return y[..., self.shard.lead:] if self.shard.mode == "column" and self.shard.lead else y

    def _local_numpy(self, x, out_dtype):
        xe = _np.enum_of(x, "x")
        _c.check_float(xe, "x")
        _c.need(self.local_linear._dev == _c.CPU, f"numpy inputs need a CPU layer, this one is on {self.device}")
        self._check_x(x.shape)
        x = np.ascontiguousarray(self._x_local(x))
        m = math.prod(x.shape[:-1])
        out_e = _c.F32 if self.shard.mode == "row" else xe if out_dtype is None else _c.out_dtype_enum(out_dtype)
        width = self.shard.n_local if self.shard.mode == "column" else self.shard.n
        y = np.empty(x.shape[:-1] + (width,), _np.np_dtype(out_e))
        bias_ptr, bias_e = (None, _c.F32) if self.bias_numpy is None else (_np.ptr(self.bias_numpy), self._bias_enum)
        _c.note_fallbacks(N.tp_linear(*self.shard.native_args(), self.local_linear.native, _np.ptr(x), xe, m,
                                      bias_ptr, bias_e, _np.ptr(y), out_e, _c.CPU, None, None))
        return y

    def _local_torch(self, T, torch, x, out_dtype):
        """The op's raw output: column [..., n_local] (lead pad columns first), row [..., N] float32."""
        x = self._torch_x_local(x)
        shape = x.shape
        out = torch.float32 if self.shard.mode == "row" else \
            x.dtype if out_dtype is None else T.TORCH_DTYPES[_c.out_dtype_enum(out_dtype)]
        x2 = x if len(shape) == 2 else x.reshape(math.prod(shape[:-1]), shape[-1])
        op = _tp_local_impl if T.eager(x) else _tp_local
        y = op(x2, self.local_linear.handle, self.bias, out)
        return y if len(shape) == 2 else y.view(*shape[:-1], y.shape[-1])

    def __call__(self, x, out_dtype=None):
        """y [..., N] on every rank (column with gather_output=False: the rank's columns [..., end - begin]): the
        rank's GEMM through blockfp8, then the collective (torch tensors only; numpy arrays take .local())."""
        T, torch = _torch()
        if T is None or not isinstance(x, torch.Tensor):
            raise TypeError("ParallelLinear(x) runs a torch.distributed collective: x must be a torch tensor "
                            "(.local(x) takes numpy arrays and runs the rank's share only)")
        out = x.dtype if out_dtype is None else T.TORCH_DTYPES[_c.out_dtype_enum(out_dtype)]
        if self.nccl_comm is not None:
            return self._nccl_call(T, torch, x, out)
        sh = self.shard
        if sh.mode == "column" and not self.gather_output:
            return self.local(x, out)
        y = self._local_torch(T, torch, x, out)
        lead_shape, m = y.shape[:-1], math.prod(y.shape[:-1])
        y = y.reshape(m, y.shape[-1])
        if sh.ranks > 1 and m > 0:
            self._check_group()
            y = self._gather(torch, y, m) if sh.mode == "column" else self._reduce(torch, y)
        if sh.mode == "row" and out != torch.float32:
            y = y.to(out)  # the one rounding of the fp32 sum (round to nearest even)
        return y.view(*lead_shape, sh.n)

    forward = __call__

    def _gather(self, torch, y_local, m):
        """The column all-gather: every rank sends the same count (bfp8_tp_traffic_get: m rows of the widest local
        output, the section bfp8_tp_linear gathers too), and each section's slice, past its lead, is y's."""
        sh = self.shard
        count, _, _ = N.tp_traffic(*sh.native_args(), m, _c.dtype_enum(y_local.dtype))
        gathered = y_local.new_empty((sh.ranks * count,))
        send = y_local.view(-1)
        if send.numel() != count:  # shared blocks: local outputs of several widths, padded to the widest
            send = y_local.new_zeros((count,))  # (the tail is never read, but NCCL sends it: no uninitialized bytes)
            send[:y_local.numel()].copy_(y_local.view(-1))
        _dist().all_gather_into_tensor(gathered, send, group=self.group)
        if count == m * sh.size:  # whole blocks: every section is [m, size], no lead
            return gathered.view(sh.ranks, m, sh.size).transpose(0, 1).reshape(m, sh.n)
        y = y_local.new_empty((m, sh.n))
        for r, p in enumerate(self._plans):
            section = gathered[r * count:r * count + m * p.n_local].view(m, p.n_local)
            y[:, p.begin:p.end].copy_(section[:, p.lead:])
        return y

    def _reduce(self, torch, partial):
        """The row all-reduce: the fp32 partials summed in place (the rounding follows, once)."""
        _dist().all_reduce(partial, group=self.group)
        return partial

    def _check_group(self):
        """Once: torch.distributed runs and the group is the shard's rank and size (the C call checks its
        communicator the same way)."""
        if self._group_checked:
            return
        dist = _dist()
        _c.need(dist is not None and dist.is_initialized(), "ParallelLinear: torch.distributed is not initialized "
                "(init_process_group), and this layer runs a collective over its ranks", RuntimeError)
        rank, size = dist.get_rank(self.group), dist.get_world_size(self.group)
        _c.need(rank == self.shard.rank and size == self.shard.ranks,
                f"ParallelLinear: the process group is rank {rank} of {size}, the shard rank {self.shard.rank} of "
                f"{self.shard.ranks}")
        self._group_checked = True

    def _nccl_call(self, T, torch, x, out):
        """The whole layer in one C call (bfp8_tp_linear) on the caller's ncclComm_t, on the current stream."""
        x = self._torch_x_local(x)
        shape = x.shape
        x2 = x.reshape(math.prod(shape[:-1]), shape[-1]).contiguous()
        d = x2.get_device()
        dev, stream = T._stream(d)
        if dev == _c.CUDA:
            x2 = T._aligned(x2)
        y = torch.empty((x2.shape[0], self.shard.n), dtype=out, device=x.device)
        bias = self.bias
        with torch.cuda.device(d) if d >= 0 else contextlib.nullcontext():
            _c.note_fallbacks(N.tp_linear(*self.shard.native_args(), self.local_linear.native, x2.data_ptr(),
                                          _c.dtype_enum(x2.dtype), x2.shape[0],
                                          None if bias is None else bias.data_ptr(), self._bias_enum, y.data_ptr(),
                                          _c.dtype_enum(out), dev, stream, self.nccl_comm))
        return y.view(*shape[:-1], self.shard.n)

    # -- inspection ------------------------------------------------------------------------------------------
    def weight(self):
        """(codes [n_local, k_local], scales float32): a host copy of the rank's local weight."""
        return self.local_linear.weight()

    def explain(self, m, out_dtype="bf16"):
        """The dispatcher's table for the rank's GEMM on m tokens (row mode: its fp32 partial)."""
        return self.local_linear.explain(m, "fp32" if self.shard.mode == "row" else out_dtype)

    def __repr__(self):
        sh = self.shard
        return (f"blockfp8.tp.ParallelLinear(mode={sh.mode!r}, rank={sh.rank}, ranks={sh.ranks}, "
                f"in_features={sh.k}, out_features={sh.n}, slice=[{sh.begin}, {sh.end}), lead={sh.lead}, "
                f"device={str(self.device)!r}, bias={self.bias_numpy is not None}, "
                f"collective={'nccl_comm' if self.nccl_comm is not None else 'torch.distributed'})")


def _world(rank, world_size, group, nccl_comm):
    """(rank, world_size): as given, or the process group's."""
    if rank is not None or world_size is not None:
        _c.need(rank is not None and world_size is not None,
                "give both rank and world_size, or neither (then they are the process group's)", TypeError)
        return _int(rank, "rank"), _int(world_size, "world_size")
    _c.need(nccl_comm is None, "with nccl_comm, give rank and world_size (the communicator's; each call checks "
            "them against it)", TypeError)
    dist = _dist()
    _c.need(dist is not None and dist.is_initialized(), "rank and world_size: give them, or initialize "
            "torch.distributed so that the process group's are used", RuntimeError)
    return dist.get_rank(group), dist.get_world_size(group)


# ---------------------------------------------------------------------------------------------------------------
# blockfp8::tp_local: the rank's GEMM as a torch op (traceable by torch.compile, fake implementation included).
# x [M, k_in] float, a ParallelLinear by its local Linear's handle -> column y_local [M, n_local] of out_dtype,
# row the fp32 partial [M, N] (out_dtype float32).
# ---------------------------------------------------------------------------------------------------------------
def _tp_local_check(x, handle, bias, out_dtype):
    layer = _LAYERS.get(handle)
    if layer is None:
        raise RuntimeError(f"blockfp8.tp.ParallelLinear handle {handle} is unknown or its layer was freed")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [M, K] here, got {x.dim()} dimensions")
    T, torch = _torch()
    _c.check_float(T._enum(x, "x"), "x")
    T._out_enum(out_dtype)
    sh = layer.shard
    if sh.mode == "row":
        _c.need(out_dtype == torch.float32, "row-parallel partials are float32", TypeError)
    if x.shape[1] != (sh.k if sh.mode == "column" else sh.size):
        raise ValueError(f"x must be [M, {sh.k if sh.mode == 'column' else sh.size}], got {tuple(x.shape)}")
    T._check_bias(bias, sh.n, x.get_device())
    return layer, (x.shape[0], sh.n_local if sh.mode == "column" else sh.n)


def _tp_local_run(x, handle: int, bias, out_dtype):
    T, torch = _torch()
    layer, shape = _tp_local_check(x, handle, bias, out_dtype)
    dev, stream = T._stream(x.get_device())
    x = x.contiguous()
    if dev == _c.CUDA:
        x = T._aligned(x)
    bias_keep, bias_ptr, bias_e = T._bias_arg(bias)
    y = torch.empty(shape, dtype=out_dtype, device=x.device)
    _c.note_fallbacks(N.tp_linear(*layer.shard.native_args(), layer.local_linear.native, x.data_ptr(),
                                  T.DTYPES[x.dtype], shape[0], bias_ptr, bias_e, y.data_ptr(), T.DTYPES[out_dtype],
                                  dev, stream, None))
    return y


def _tp_local_fake(x, handle, bias, out_dtype):
    _, torch = _torch()
    _, shape = _tp_local_check(x, handle, bias, out_dtype)
    return torch.empty(shape, dtype=out_dtype, device=x.device)


_T0, _torch0 = _torch()
if _T0 is not None:
    from typing import Optional

    def _tp_local_op(x: _torch0.Tensor, handle: int, bias: Optional[_torch0.Tensor],
                     out_dtype: _torch0.dtype) -> _torch0.Tensor:
        return _tp_local_run(x, handle, bias, out_dtype)

    _tp_local, _tp_local_impl = _T0._op("tp_local", _tp_local_op, _tp_local_fake)
else:
    _tp_local = _tp_local_impl = None
