"""The independent side of the tests: tests/numpy_ref.py's quantizer, tests/crosscheck_cli.py's float64 block GEMM
and safetensors code, the grouped (MoE) GEMM built from that block GEMM, and small numpy helpers that read and write
the library's scale layouts without the library."""
import ml_dtypes
import numpy as np

from crosscheck_cli import DTYPES as ST_DTYPES  # safetensors dtype names -> numpy
from crosscheck_cli import TOLERANCE_CPU, block_gemm, calc_diff, random_input, st_read, st_write
from numpy_ref import BLOCK, quantize

__all__ = ["ST_DTYPES", "TOLERANCE_CPU", "block_gemm", "calc_diff", "random_input", "st_read", "st_write", "BLOCK",
           "quantize", "BF16", "FP8", "NP_OUT", "TOL", "codes", "to_numpy", "from_numpy", "unpack_ue8m0",
           "ulp_distance", "rel_err", "quantized_operands", "grouped_gemm", "pack_ue8m0", "grouped_operands"]

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
NP_OUT = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16}
TOL = {"bfloat16": TOLERANCE_CPU["BF16"], "float16": TOLERANCE_CPU["F16"], "float32": TOLERANCE_CPU["F32"]}


def codes(a):
    """uint8 codes of an fp8 (or uint8) numpy array or torch tensor."""
    if hasattr(a, "detach"):
        import torch
        return a.detach().cpu().view(torch.uint8).numpy()
    return np.asarray(a).view(np.uint8)


def to_numpy(a):
    """A numpy copy of a torch tensor (bf16 as ml_dtypes.bfloat16, fp8 as ml_dtypes.float8_e4m3fn)."""
    if not hasattr(a, "detach"):
        return np.asarray(a)
    import torch
    t = a.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy().view(FP8)
    return t.numpy()


def from_numpy(a, device="cpu"):
    """A torch tensor of a numpy array (ml_dtypes bf16 / fp8 included)."""
    import torch
    a = np.ascontiguousarray(a)
    if a.dtype == BF16:
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    elif a.dtype == FP8:
        t = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn)
    else:
        t = torch.from_numpy(a)
    return t.to(device)


def unpack_ue8m0(words, kblocks):
    """int32 [rows, ceil(kb/4)] packed exponents (byte kb%4 of word kb/4, little-endian) -> float32 [rows, kb]."""
    w = np.asarray(words).astype(np.int64) & 0xFFFFFFFF
    rows = w.shape[0]
    out = np.empty((rows, kblocks), np.float32)
    for kb in range(kblocks):
        e = (w[:, kb // 4] >> (8 * (kb % 4))) & 0xFF
        out[:, kb] = np.ldexp(np.float32(1), (e - 127).astype(np.int32))
    return out


def ordered(bits, width):
    """Sign-magnitude float bit patterns -> integers in the floats' order (for ulp distances)."""
    b = bits.astype(np.int64)
    sign = 1 << (width - 1)
    return np.where(b & sign, -(b & (sign - 1)), b)


def ulp_distance(a, b):
    """Elementwise distance in units in the last place between two arrays of one float dtype."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype
    width = a.dtype.itemsize * 8
    view = {16: np.uint16, 32: np.uint32}[width]
    return np.abs(ordered(a.view(view), width) - ordered(b.view(view), width))


def rel_err(y, want):
    y = np.asarray(y).astype(np.float64)
    return np.linalg.norm(y - want) / np.linalg.norm(want)


def quantized_operands(rng, m, n, k, ue8m0=False):
    """Random activations and weights quantized by the oracle: (qa, sa, qb, sb, x, w) with codes as fp8 arrays."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) / np.sqrt(max(k, 1))).astype(np.float32)
    qa, sa, _ = quantize(x, 1, ue8m0)
    qb, sb, _ = quantize(w, BLOCK, ue8m0)
    return qa.view(FP8), sa, qb.view(FP8), sb, x, w


def grouped_gemm(qa, sa, qb, sb, m_indices=None, masked_m=None):
    """The grouped GEMM in float64, each group's rows times its weight by block_gemm (docs/grouped.md). Contiguous
    (m_indices int [m], -1 = padding): qa [m, K], sa [m, kb] -> [m, N]. Masked (masked_m int [G]): qa [G, max_m, K],
    sa [G, max_m, kb] -> [G, max_m, N]. qb [G, N, K], sb [G, nb, kb]. Rows no group uses are NaN."""
    groups, n = qb.shape[:2]
    if m_indices is not None:
        y = np.full((qa.shape[0], n), np.nan)
        for g in range(groups):
            rows = np.flatnonzero(np.asarray(m_indices) == g)
            if rows.size:
                y[rows] = block_gemm(codes(qa)[rows], np.asarray(sa)[rows], codes(qb[g]), sb[g], None)
        return y
    y = np.full(qa.shape[:2] + (n,), np.nan)
    for g in range(groups):
        used = int(masked_m[g])
        if used:
            y[g, :used] = block_gemm(codes(qa[g])[:used], np.asarray(sa[g])[:used], codes(qb[g]), sb[g], None)
    return y


def pack_ue8m0(scales):
    """Power-of-two float32 scales [..., rows, kb] -> int32 [..., rows, ceil(kb/4)] holding their exponent bytes
    (byte kb%4 of word kb/4), stored as the packed layout is: MN-major, each column 16-byte aligned (ld = rows rounded
    up to 4), as SGLang and DeepGEMM allocate them."""
    s = np.ascontiguousarray(scales, np.float32)
    *lead, rows, kb = s.shape
    words, ld = -(-kb // 4), -(-rows // 4) * 4
    exps = np.full(tuple(lead) + (rows, words * 4), 127, np.uint32)  # the padding exponents: scale 1, never read
    exps[..., :kb] = (s.view(np.uint32) >> 23) & 0xFF
    packed = exps[..., 0::4] | exps[..., 1::4] << 8 | exps[..., 2::4] << 16 | exps[..., 3::4] << 24
    buf = np.zeros(tuple(lead) + (words, ld), np.int32)
    buf[..., :rows] = np.swapaxes(packed.view(np.int32), -1, -2)
    return np.swapaxes(buf, -1, -2)[..., :rows, :]


def grouped_operands(rng, groups, rows, n, k, masked, ue8m0=False):
    """Random activations (contiguous [rows, K], masked [G, rows, K]) and G weights [G, N, K] quantized by the oracle:
    (qa, sa, qb, sb) with fp8 codes and float32 row-major scales."""
    x = rng.standard_normal(((groups, rows) if masked else (rows,)) + (k,)).astype(np.float32)
    w = (rng.standard_normal((groups, n, k)) / np.sqrt(max(k, 1))).astype(np.float32)
    qa, sa = zip(*(quantize(m, 1, ue8m0)[:2] for m in x.reshape(groups if masked else 1, rows, k)))
    qb, sb = zip(*(quantize(m, BLOCK, ue8m0)[:2] for m in w))
    qa, sa = np.stack(qa).view(FP8), np.stack(sa)
    if not masked:
        qa, sa = qa[0], sa[0]
    return qa, sa, np.stack(qb).view(FP8), np.stack(sb)
