#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/fuzz_safetensors.c into fuzz/corpus/ (small valid and malformed files).

Pure Python (struct + json), deterministic: rerunning it rewrites the same bytes.
Usage: python3 scripts/make-fuzz-corpus.py [OUT_DIR]   (default fuzz/corpus)
"""
import json
import os
import struct
import sys

ELEM_SIZE = {"F8_E4M3": 1, "BF16": 2, "F16": 2, "F32": 4, "I32": 4}


def pattern(n, seed):
    """n deterministic pseudo-random bytes."""
    x = seed * 2654435761 + 1
    out = bytearray()
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(x >> 16 & 0xFF)
    return bytes(out)


def pack(header_obj, data, pad=True, header_text=None):
    """header length (u64 LE) + JSON (space-padded to 8 unless pad=False) + data."""
    text = header_text if header_text is not None else json.dumps(header_obj, separators=(",", ":"))
    raw = text.encode("utf-8")
    if pad:
        raw += b" " * (-(8 + len(raw)) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def tensors_file(specs, metadata=None, pad=True, gap=0):
    """specs: [(name, dtype, shape)], laid out in order with `gap` bytes between tensors."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for i, (name, dtype, shape) in enumerate(specs):
        n = ELEM_SIZE[dtype]
        for d in shape:
            n *= d
        if i:
            data += pattern(gap, 99 + i)
        begin = len(data)
        data += pattern(n, i + 1)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [begin, len(data)]}
    return pack(header, data, pad)


def seeds():
    s = {}
    for dtype in ELEM_SIZE:
        s[f"valid_{dtype.lower()}"] = tensors_file([(f"t.{dtype.lower()}", dtype, [3, 5])])
    s["valid_scalar"] = tensors_file([("scalar", "F32", [])])
    s["valid_empty_tensor"] = tensors_file([("empty", "BF16", [4, 0]), ("one", "F16", [1])])
    s["valid_metadata"] = tensors_file([("w", "I32", [2])], metadata={"format": "pt", "note": "x"})
    s["valid_unpadded_misaligned"] = tensors_file(
        [("a", "F8_E4M3", [3]), ("b", "F32", [2]), ("c", "BF16", [1, 1, 2])], pad=False)
    s["valid_gaps"] = tensors_file([("a", "F16", [3]), ("b", "F32", [2]), ("c", "I32", [1])], gap=3)
    s["valid_deepseek_pair"] = tensors_file(
        [("layer.weight", "F8_E4M3", [20, 30]), ("layer.weight_scale_inv", "F32", [1, 1])])
    s["valid_no_tensors"] = pack({}, b"")
    s["valid_8dims"] = tensors_file([("d8", "F8_E4M3", [1, 2, 1, 2, 1, 2, 1, 2])])

    e = '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
    s["bad_duplicate_name"] = pack(None, pattern(16, 7), header_text=e + '"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}')
    s["bad_overlap"] = pack(None, pattern(12, 7), header_text=e + '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}')
    s["bad_dtype_f64"] = pack({"x": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}}, pattern(8, 3))
    s["bad_byte_count"] = pack({"x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}, pattern(24, 3))
    s["bad_offsets_fraction"] = pack(None, pattern(8, 3), header_text='{"x":{"dtype":"F32","shape":[1],"data_offsets":[0.5,4.5]}}')
    s["bad_end_past_data"] = pack({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, pattern(8, 3))
    s["bad_not_object"] = pack(None, b"", header_text="[1,2]")
    s["bad_header_past_eof"] = struct.pack("<Q", 1000) + b'{"a":1}'
    s["bad_short"] = b"\x02\x00\x00"
    s["bad_metadata_value"] = pack({"__metadata__": {"k": 1}}, b"")
    s["bad_name_control"] = pack({"\x1b[31mred": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, pattern(8, 3))
    return s


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(seeds().items()):
        assert len(data) < 4096, name
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds())} seeds to {out}")


if __name__ == "__main__":
    main()
