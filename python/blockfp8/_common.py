"""What the numpy and the torch paths share: dtype and device names, argument checks, the scale layouts a tensor's
strides describe, and the dispatch made visible (policy, stats, explain, a warning per new fallback).

Nothing here knows torch: the torch path registers its dtypes into DTYPES when it is imported."""
import math
import os
import sys
import threading
import warnings

import numpy as np

from . import _native as N

try:
    import ml_dtypes
except ImportError:  # optional: without it FP8 arrays are uint8 codes and bf16 arrays cannot be made
    ml_dtypes = None

BLOCK = N.BLOCK
F32, BF16, F16, E4M3, I32 = N.DTYPE_F32, N.DTYPE_BF16, N.DTYPE_F16, N.DTYPE_E4M3, N.DTYPE_I32
FLOATS = (F32, BF16, F16)
DTYPE_NAMES = {F32: "float32", BF16: "bfloat16", F16: "float16", E4M3: "float8_e4m3fn", I32: "int32"}

ROW, MN, ALIGNED, PACKED = N.LAYOUT_ROW_MAJOR, N.LAYOUT_MN_MAJOR, N.LAYOUT_MN_MAJOR_ALIGNED, N.LAYOUT_PACKED_UE8M0
LAYOUT_NAMES = N.NAMES["layouts"]
FP32_SCALES, UE8M0_SCALES = N.SCALE_FP32, N.SCALE_UE8M0
CPU, CUDA = N.DEVICE_CPU, N.DEVICE_CUDA
CONTIGUOUS, MASKED = N.GROUPED_CONTIGUOUS, N.GROUPED_MASKED

# dtype object (numpy dtype, torch dtype) -> library dtype. uint8 is accepted as E4M3 codes.
DTYPES = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.uint8): E4M3, np.dtype(np.int32): I32}
if ml_dtypes is not None:
    DTYPES[np.dtype(ml_dtypes.bfloat16)] = BF16
    DTYPES[np.dtype(ml_dtypes.float8_e4m3fn)] = E4M3

_OUT_NAMES = {"f32": F32, "fp32": F32, "float32": F32, "float": F32, "bf16": BF16, "bfloat16": BF16,
              "f16": F16, "fp16": F16, "float16": F16, "half": F16}
_out_cache = {}


def ceil_div(a, b):
    return -(-a // b)


def round_up(a, b):
    return ceil_div(a, b) * b


def dtype_enum(dt):
    """The library dtype of a numpy or torch dtype, or None."""
    return DTYPES.get(dt)


def out_dtype_enum(spec):
    """An output dtype given as a torch dtype, a numpy dtype (or type) or a name: 'bf16', 'float16', ..."""
    # Names and torch dtypes first, without the cache: under torch.compile, Dynamo cannot look a torch dtype up in a
    # dict that holds numpy dtypes (it cannot tell whether they hash: seen with torch 2.11).
    if isinstance(spec, str):
        name = spec.lower()
    elif type(spec).__name__ == "dtype" and type(spec).__module__ == "torch":
        name = str(spec).rsplit(".", 1)[-1]
    else:
        try:
            return _out_cache[spec]
        except (KeyError, TypeError):
            pass
        try:
            name = np.dtype(spec).name
        except TypeError:
            raise TypeError(f"output dtype {spec!r} is not a dtype (use bfloat16, float16 or float32)") from None
    enum = _OUT_NAMES.get(name)
    if enum is None:
        raise ValueError(f"output dtype {spec!r} is not supported: blockfp8 writes bfloat16, float16 or float32")
    if not isinstance(spec, str) and type(spec).__module__ != "torch":
        try:
            _out_cache[spec] = enum
        except TypeError:
            pass
    return enum


def need(cond, msg, exc=ValueError):
    """Raises exc(msg) unless cond. (Hot paths test first and build their message only on failure.)"""
    if not cond:
        raise exc(msg)


def check_float(enum, what):
    if enum not in FLOATS:
        raise TypeError(f"{what} must be float32, bfloat16 or float16")


def check_fp8(enum, what):
    if enum != E4M3:
        raise TypeError(f"{what} must be float8_e4m3fn (or uint8 E4M3 codes)")


def check_group_size(group_size, eps):
    if group_size != BLOCK:
        raise ValueError(f"group_size={group_size!r}: blockfp8 quantizes in groups of {BLOCK} only")
    if eps != 1e-10:
        raise ValueError(f"eps={eps!r}: blockfp8's amax floor is fixed at 1e-10 (docs/numerics.md)")


def check_block_size(block_size, what="block_size"):
    try:
        pair = tuple(int(v) for v in block_size)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a pair [{BLOCK}, {BLOCK}], got {block_size!r}") from None
    if pair != (BLOCK, BLOCK):
        raise ValueError(f"{what}={list(block_size)!r}: blockfp8 supports {BLOCK}x{BLOCK} blocks only")


def check_activation(shape, enum, what, fp8=False):
    """[..., K] activations -> (M, K) with M the product of the leading dimensions."""
    if fp8:
        if enum != E4M3:
            check_fp8(enum, what)
    elif enum not in FLOATS:
        check_float(enum, what)
    nd = len(shape)
    if nd == 2:
        return shape[0], shape[1]
    if nd == 0:
        raise ValueError(f"{what} must have at least one dimension (its last is K)")
    return math.prod(shape[:-1]), shape[-1]


def check_weight(shape, enum, k, what="weight"):
    if enum != E4M3:
        check_fp8(enum, what)
    if len(shape) != 2:
        raise ValueError(f"{what} must be 2-D [N, K], got shape {tuple(shape)}")
    if k is not None and shape[1] != k:
        raise ValueError(f"{what} has K={int(shape[1])}, the activations have K={k}")
    return shape[0], shape[1]


def dims(shape):
    """A shape as the messages write it: [2, 3]."""
    return "[" + ", ".join(str(int(v)) for v in shape) + "]"


def check_scale_shape(shape, enum, rows, kblocks, what, groups=None):
    """The scales of a [rows x K] operand: fp32 [rows, ceil(K/128)], or int32 [rows, ceil(K/512)] holding UE8M0
    exponents packed four to a word; with groups, G such matrices [groups, rows, ...]. Returns the scale format."""
    lead = () if groups is None else (groups,)
    if enum == F32:
        if tuple(shape) != lead + (rows, kblocks):
            raise ValueError(f"{what} must be float32 {dims(lead + (rows, kblocks))}, got shape {tuple(shape)}")
        return FP32_SCALES
    if enum == I32:
        words = ceil_div(kblocks, 4)
        if tuple(shape) != lead + (rows, words):
            raise ValueError(f"{what}: packed UE8M0 scales must be int32 {dims(lead + (rows, words))}, got shape "
                             f"{tuple(shape)}")
        return UE8M0_SCALES
    raise TypeError(f"{what} must be float32 (or int32 packed UE8M0), got {DTYPE_NAMES.get(enum, 'another dtype')}")


def check_grouped_operands(layout, a_shape, a_enum, b_shape, b_enum):
    """(groups, rows, n, k) of a grouped GEMM's a (contiguous [m, K], masked [G, max_m, K]) and b [G, N, K], both
    fp8; rows is m or max_m."""
    if a_enum != E4M3:
        check_fp8(a_enum, "a")
    if b_enum != E4M3:
        check_fp8(b_enum, "b")
    masked = layout == MASKED
    if len(a_shape) != (3 if masked else 2):
        raise ValueError(f"a must be {'[G, max_m, K]' if masked else '[m, K]'}, got shape {tuple(a_shape)}")
    if len(b_shape) != 3:
        raise ValueError(f"b must be [G, N, K] (one weight per group), got shape {tuple(b_shape)}")
    groups, n, k = b_shape
    if groups < 1:
        raise ValueError(f"b must hold at least one group, got shape {tuple(b_shape)}")
    if a_shape[-1] != k:
        raise ValueError(f"b has K={int(k)}, a has K={int(a_shape[-1])}")
    if masked and a_shape[0] != groups:
        raise ValueError(f"a has {int(a_shape[0])} groups, b has {int(groups)}")
    return groups, a_shape[-2], n, k


def check_row_map(shape, enum, dtype, masked, length):
    """m_indices (contiguous: int32 [m]) or masked_m (masked: int32 [G])."""
    name = "masked_m" if masked else "m_indices"
    if enum != I32:
        raise TypeError(f"{name} must be int32, got {dtype}")
    if len(shape) != 1 or shape[0] != length:
        what = "one count per group" if masked else "one group index per row of a"
        raise ValueError(f"{name} must be int32 [{length}] ({what}), got shape {tuple(shape)}")


def check_expected_m(expected_m):
    if not isinstance(expected_m, (int, np.integer)) or isinstance(expected_m, bool):
        raise TypeError(f"expected_m must be an int (the typical rows per group), got {expected_m!r}")
    if expected_m < 0:
        raise ValueError(f"expected_m={expected_m} must be >= 0 (0: max_m)")
    return int(expected_m)


def check_recipe(recipe):
    if recipe is not None and tuple(recipe) != (1, BLOCK, BLOCK):
        raise ValueError(f"recipe={recipe!r}: blockfp8 runs 1x128 activation and 128x128 weight scales only")


def check_bias(shape, enum, n):
    if enum not in FLOATS:
        check_float(enum, "bias")
    if len(shape) != 1 or shape[0] != n:
        raise ValueError(f"bias must be 1-D [{n}], got shape {tuple(shape)}")


# ---------------------------------------------------------------------------------------------------------------
# Scale layouts from strides
# ---------------------------------------------------------------------------------------------------------------
# The set (BFP8_BIT bits) of library layouts that [rows, cols] scale matrices with element strides (s0, s1) satisfy:
# layouts_of(rows, cols, s0, s1, packed, avail[, groups, sg]), where `avail` elements from the first one belong to the
# tensor and `groups` matrices lie sg elements apart. One rule for the numpy path, the torch path and the torch fast
# lane: scale_layouts in _native.c says what counts.
layouts_of = N.layouts_of


def layout_storage_shape(layout, rows, kblocks):
    """The contiguous buffer a layout is stored in, as (shape, is_int32); the [rows, kblocks] view of it is
    layout_view's."""
    if layout == ROW:
        return (rows, kblocks), False
    if layout == MN:
        return (kblocks, rows), False
    if layout == ALIGNED:
        return (kblocks, round_up(rows, 4)), False
    return (ceil_div(kblocks, 4), round_up(rows, 4)), True


def act_layout_for(column_major_scales, scale_tma_aligned, scale_ue8m0):
    """SGLang's per_token_group_quant_fp8 flags -> the library layout of the scales it returns."""
    if scale_ue8m0 and column_major_scales:
        need(scale_tma_aligned, "scale_ue8m0 with column_major_scales needs scale_tma_aligned=True (the scales "
             "are then packed four per int32, MN-major, 16-byte aligned), as in SGLang")
        return PACKED
    if column_major_scales:
        return ALIGNED if scale_tma_aligned else MN
    return ROW


# ---------------------------------------------------------------------------------------------------------------
# Dispatch made visible: policy, stats, fallback warnings, explain
# ---------------------------------------------------------------------------------------------------------------
class FallbackWarning(UserWarning):
    """A call ran on another backend than the preferred one (policy prefer, or BFP8_BACKEND). Raised once per
    distinct (preferred, chosen, reason); stats() counts every call."""


_fallback_lock = threading.Lock()
_fallback_seen_count = 0
_fallback_warned = set()


def note_fallbacks(count):
    """Called with the dispatcher's count of distinct fallbacks after each call: warns for the new ones."""
    global _fallback_seen_count
    if count == _fallback_seen_count:
        return
    with _fallback_lock:
        _fallback_seen_count = count
        fresh = []
        for preferred, chosen, reason, _ in N.stats()[1]:
            key = (preferred, chosen, reason)
            if key not in _fallback_warned:
                _fallback_warned.add(key)
                fresh.append(key)
    for preferred, chosen, reason in fresh:
        warnings.warn(f"blockfp8: {preferred} cannot run this call, it ran on {chosen}: {reason}",
                      FallbackWarning, stacklevel=_caller_level())


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH_DIR = os.sep + "torch" + os.sep


def _caller_level():
    """The stack level of the first frame outside this package and torch: the user's call."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE_DIR) or
                                 _TORCH_DIR in frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def stats():
    """Calls per backend and every fallback with its reason, as counted by the library's default dispatcher:
    {"calls": {backend: n}, "fallbacks": [{"preferred", "chosen", "reason", "count"}], "nonfinite_inputs": n}.
    nonfinite_inputs counts the non-finite activations that Linear calls on the CPU met (each encoded as NaN)."""
    calls, fallbacks, nonfinite = N.stats()
    return {
        "calls": calls,
        "fallbacks": [{"preferred": p, "chosen": c, "reason": r, "count": n} for p, c, r, n in fallbacks],
        "nonfinite_inputs": nonfinite,
    }


def reset_stats():
    """Zeroes the counters (a fallback seen again after this warns again)."""
    global _fallback_seen_count
    with _fallback_lock:
        N.reset_stats()
        _fallback_seen_count = 0
        _fallback_warned.clear()


_POLICIES = {"auto": N.POLICY_AUTO, "prefer": N.POLICY_PREFER, "strict": N.POLICY_STRICT}
_policy_lock = threading.Lock()
_env_backend = os.environ.get("BFP8_BACKEND") or None
_policy_state = ("prefer", _env_backend) if _env_backend else ("auto", None)


def get_policy():
    """The process-wide policy as (mode, backend): ('auto', None), ('prefer', NAME) or ('strict', NAME). It starts
    as ('prefer', $BFP8_BACKEND) when that is set."""
    return _policy_state


def set_policy(mode, backend=None):
    """Sets the process-wide dispatch policy: 'auto' (best capable backend), 'prefer' NAME (NAME when it can run
    the call, else auto with a FallbackWarning and a recorded fallback) or 'strict' NAME (NAME or an
    UnsupportedError carrying the reason). Returns the previous (mode, backend)."""
    global _policy_state
    if mode not in _POLICIES:
        raise ValueError(f"policy {mode!r}: use 'auto', 'prefer' or 'strict'")
    if mode == "auto":
        need(backend is None, "policy 'auto' takes no backend name")
    else:
        need(isinstance(backend, str) and backend != "", f"policy {mode!r} needs a backend name", TypeError)
    with _policy_lock:
        previous = _policy_state
        N.set_policy(_POLICIES[mode], backend)
        _policy_state = (mode, backend)
    return previous


class policy:
    """The dispatch policy, as a function or a context manager:

        blockfp8.policy("prefer", "hopper")          # from now on
        with blockfp8.policy("strict", "cpu"): ...   # inside the block only, then the previous one again

    The policy belongs to the process (the library's default dispatcher), not to a thread."""

    def __init__(self, mode, backend=None):
        self.mode, self.backend = mode, backend
        self.previous = set_policy(mode, backend)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        set_policy(*self.previous)
        return False

    def __repr__(self):
        return f"blockfp8.policy({self.mode!r}, {self.backend!r})"


def _names(bits, names):
    return [names[i] for i in range(len(names)) if bits & (1 << i)]


_DTYPE_LIB_NAMES = N.NAMES["dtypes"] + ["i32"]


def backends():
    """The registered backends and their declared capabilities (bfp8_caps), in registration order."""
    out = []
    for (name, summary, device, min_arch, max_arch, out_dtypes, formats, a_layouts, b_layouts, bias_dtypes, min_k,
         m_mult, pads_m, n_mult, k_mult, max_m, max_n, max_k, priority) in N.backends():
        out.append({
            "name": name, "summary": summary, "device": N.NAMES["devices"][device],
            "min_arch": min_arch, "max_arch": max_arch,
            "out_dtypes": _names(out_dtypes, _DTYPE_LIB_NAMES), "scale_formats": _names(formats, N.NAMES["formats"]),
            "a_layouts": _names(a_layouts, LAYOUT_NAMES), "b_layouts": _names(b_layouts, LAYOUT_NAMES),
            "bias_dtypes": _names(bias_dtypes, _DTYPE_LIB_NAMES), "min_k": min_k, "m_multiple": m_mult,
            "pads_m": pads_m, "n_multiple": n_mult, "k_multiple": k_mult, "max_m": max_m, "max_n": max_n,
            "max_k": max_k, "priority": priority,
        })
    return out


def unavailable_backends():
    """Backends built in but unusable here, with why: [(name, why)]."""
    return list(N.unavailable())


class Explanation:
    """The dispatcher's table for one problem. str() is the text `blockfp8 explain` prints; the attributes are
    the same table as data: problem, policy, backends (each {name, ok, reason, priority, summary, device} in the
    order auto considers them), unavailable, choice (backend name or None), preferred, fallback, reason, error."""

    def __init__(self, text, problem, policy_, rows, unavailable, choice, preferred, fallback, reason, error):
        self.text, self.problem, self.policy = text, problem, policy_
        self.backends, self.unavailable = rows, unavailable
        self.choice, self.preferred, self.fallback, self.reason, self.error = choice, preferred, fallback, reason, error

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"<blockfp8.Explanation choice={self.choice!r} fallback={self.fallback}>"

    def as_dict(self):
        return {"problem": self.problem, "policy": {"mode": self.policy[0], "backend": self.policy[1]},
                "backends": self.backends, "unavailable": self.unavailable, "choice": self.choice,
                "preferred": self.preferred, "fallback": self.fallback, "reason": self.reason, "error": self.error}


def device_enum(device):
    """'cpu', 'cuda', 'cuda:1' or a torch.device -> (library device, CUDA index or None)."""
    text = str(device)
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index:
        return CPU, None
    if kind == "cuda":
        return CUDA, int(index) if index else None
    raise ValueError(f"device {device!r}: blockfp8 runs on 'cpu' or 'cuda'")


def bias_spec(bias):
    """explain's bias argument: None/False (none), True (fp32) or a dtype."""
    if bias is None or bias is False:
        return False, F32
    if bias is True:
        return True, F32
    return True, out_dtype_enum(bias)


def explain_problem(m, n, k, out_dtype, scale_format, device, bias, arch, a_layouts, b_layouts, prior, card=None):
    for name, v in (("m", m), ("n", n), ("k", k)):
        need(isinstance(v, (int, np.integer)) and not isinstance(v, bool), f"{name} must be an int, got {v!r}",
             TypeError)
        need(v >= 0, f"{name} must be >= 0, got {v}")
    out = out_dtype_enum(out_dtype)
    fmt = {"fp32": FP32_SCALES, "ue8m0": UE8M0_SCALES}.get(str(scale_format).lower())
    need(fmt is not None, f"scale_format {scale_format!r}: use 'fp32' or 'ue8m0'")
    dev, _ = device_enum(device)
    has_bias, bias_dtype = bias_spec(bias)
    need(arch is None or (isinstance(arch, int) and arch >= 0), f"arch must be an int like 90 (sm_90), got {arch!r}")
    need(card is None or isinstance(card, str), f"card must be a str (a GPU's name), got {card!r}", TypeError)
    need(card != "", "card must name a GPU, e.g. 'NVIDIA H200'")
    need(card is None or dev == CUDA, "card needs device='cuda'")
    all_layouts = N.layouts_for_format(fmt)
    a_set = all_layouts if a_layouts is None else a_layouts
    b_set = all_layouts if b_layouts is None else b_layouts
    text, got_arch, got_card, rows, choice, preferred, fallback, reason, error = N.explain(
        dev, -1 if arch is None else arch, int(m), int(n), int(k), out, fmt, a_set, b_set, int(has_bias), bias_dtype,
        int(prior if prior is not None else dev == CUDA), card)
    info = {b["name"]: b for b in backends()}
    table = sorted(({"name": name, "ok": ok, "reason": why, "priority": prio,
                     "summary": info[name]["summary"], "device": info[name]["device"]}
                    for name, ok, why, prio in rows), key=lambda r: -r["priority"])
    problem = {"m": int(m), "n": int(n), "k": int(k), "out_dtype": DTYPE_NAMES[out],
               "scale_format": N.NAMES["formats"][fmt], "device": N.NAMES["devices"][dev], "arch": got_arch,
               "card": got_card,
               "bias": DTYPE_NAMES[bias_dtype] if has_bias else None,
               "a_layouts": _names(a_set, LAYOUT_NAMES), "b_layouts": _names(b_set, LAYOUT_NAMES)}
    return Explanation(text, problem, get_policy(), table,
                       [{"name": u, "why": w} for u, w in N.unavailable()],
                       choice, preferred, fallback, reason if (fallback or choice is None) else "", error)


def explain(m, n, k, out_dtype="bf16", scale_format="fp32", device="cpu", bias=None, arch=None, gemm=False,
            card=None):
    """The dispatcher's table for a linear layer of M tokens, N outputs, K inputs (as `blockfp8 explain` prints it):
    every backend with "ok" or the reason it cannot run the problem, the unavailable ones, and the choice of the
    current policy. Returns an Explanation: print() it for the text, or read its attributes / as_dict().

    device 'cuda' asks about the current CUDA device, its arch and its card (whose measured cells rank the
    backends), unless arch (compute capability x10, e.g. 90) is given: then a device of that arch, ranked by the
    reference card's cells (docs/dispatch.md, "Which card"); card (the driver's name, e.g. "NVIDIA H100 80GB HBM3")
    names another card.
    gemm=True poses a plain GEMM call (activations already quantized) instead of a linear call."""
    return explain_problem(m, n, k, out_dtype, scale_format, device, bias, arch, None, None, False if gemm else None,
                           card)
