"""The numpy implementation of docs/numerics.md that the cross-checks (tests/crosscheck_*.py) compare libblockfp8
with, and their pass/fail tally. Nothing here touches the library: E4M3 encoding is ml_dtypes.float8_e4m3fn after
clipping to +-448 (its cast gives NaN rather than saturating), with the sign of NaN kept as docs/numerics.md says."""
import sys

import ml_dtypes
import numpy as np

BLOCK = 128
E4M3_MAX = np.float32(448.0)
AMAX_FLOOR = np.float32(1e-10)


def e4m3_codes(x):
    """float32 array -> uint8 E4M3 codes: saturating beyond +-448, RNE; NaN -> 0x7F with the sign bit kept."""
    x = np.asarray(x, dtype=np.float32)
    sign = np.signbit(x).astype(np.uint8) << 7
    a = np.minimum(np.abs(np.nan_to_num(x, nan=0.0, posinf=np.inf, neginf=np.inf)), E4M3_MAX)
    codes = a.astype(ml_dtypes.float8_e4m3fn).view(np.uint8) | sign
    return np.where(np.isnan(x), np.uint8(0x7F) | sign, codes).astype(np.uint8)


def ue8m0_ceil(s):
    """float32 array -> float32 powers of two: exponent of s, +1 if any mantissa bit, clamped to [1, 254]."""
    bits = np.asarray(s, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.int64) + ((bits & 0x7FFFFF) != 0)
    return (np.clip(exponent, 1, 254).astype(np.uint32) << 23).view(np.float32)


def quantize(x, group_rows, ue8m0):
    """x float32 [rows, k] in groups of group_rows x 128 (1 for activations, 128 for weights).
    Returns (codes uint8 [rows, k], scales float32 [ceil(rows/group_rows), ceil(k/128)], non-finite count)."""
    x = np.asarray(x, dtype=np.float32)
    rows, k = x.shape
    srows, kblocks = -(-rows // group_rows), -(-k // BLOCK)
    finite = np.isfinite(x)
    # Missing elements of edge groups count as 0, which never exceeds a real |x| (>= 0) nor the 1e-10 floor.
    padded = np.zeros((srows * group_rows, kblocks * BLOCK), dtype=np.float32)
    padded[:rows, :k] = np.where(finite, np.abs(x), np.float32(0))
    amax = np.maximum(padded.reshape(srows, group_rows, kblocks, BLOCK).max(axis=(1, 3)), AMAX_FLOOR)
    scales = (amax / E4M3_MAX).astype(np.float32)
    if ue8m0:
        scales = ue8m0_ceil(scales)
    full = np.repeat(np.repeat(scales, group_rows, axis=0), BLOCK, axis=1)[:rows, :k]
    with np.errstate(invalid="ignore", over="ignore"):
        codes = e4m3_codes((x / full).astype(np.float32))
    # A non-finite input encodes as NaN with its sign and never reaches a scale.
    codes = np.where(finite, codes, np.where(np.signbit(x), 0xFF, 0x7F)).astype(np.uint8)
    return codes, scales, int((~finite).sum())


class Tally:
    """Counts checks; prints each failure to stderr."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL: {what}", file=sys.stderr)
        return ok
