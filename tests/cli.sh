#!/bin/sh
# End-to-end tests of the blockfp8 CLI: --help everywhere, usage errors (exit 2), runtime errors (exit 1 with
# "blockfp8 <cmd>: ..."), missing and malformed files (never a crash), quantize's selection of tensors, quantize ->
# linear on real files (scale formats, leading dimensions, a two-shard checkpoint with its index, --device), outputs
# that would destroy an input, modes, long names and temp files on failures and signals, explain, demo and check.
# Input files are written by small python3 scripts (standard library only).
# Usage: sh tests/cli.sh BUILD_DIR     Closing line: "cli: N passed, N failed"; exit 1 on any failure.
set -u
build=${1:-build}
cli=$build/blockfp8
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bfp8-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$(dirname "$0")/harness.sh"
fail_show=$tmp/err
fail_prefix="stderr: "
# expect STATUS COMMAND...: runs it (stdout -> $tmp/out, stderr -> $tmp/err) and checks the exit status. A status
# of 128 or more is a signal (a crash), never what a test wants.
expect() {
    want=$1
    shift
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq "$want" ]; then pass; else fail "exit $rc (want $want): $*"; fi
}
# has out|err TEXT: the last command's stdout/stderr contains TEXT (fixed string).
has() {
    if grep -qF -- "$2" "$tmp/$1"; then pass; else fail "std$1 lacks '$2'"; fi
}
lacks() {
    if grep -qF -- "$2" "$tmp/$1"; then fail "std$1 has '$2'"; else pass; fi
}
empty() {
    if [ -s "$tmp/$1" ]; then fail "std$1 is not empty"; else pass; fi
}

if [ ! -x "$cli" ]; then
    echo "cli: $cli is not built"
    echo "cli: 0 passed, 1 failed"
    exit 1
fi

# --- input files -----------------------------------------------------------------------------------------------
python3 - "$tmp" <<'EOF' || { echo "cli: cannot write the input files"; echo "cli: 0 passed, 1 failed"; exit 1; }
import json, math, os, random, struct, sys
tmp = sys.argv[1]
rnd = random.Random()

def f32(vals): return struct.pack("<%df" % len(vals), *vals)
def bf16(vals):  # truncation is enough for test inputs
    return b"".join(struct.pack("<f", v)[2:] for v in vals)
def write(name, tensors, raw_header=None, tail=b""):
    header, blobs, off = {}, [], 0
    for tname, (dtype, shape, data) in tensors.items():
        header[tname] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data); off += len(data)
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    with open(os.path.join(tmp, name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs) + tail)

N, K, M = 130, 300, 3
w = [rnd.gauss(0, 1 / math.sqrt(K)) for _ in range(N * K)]
x = [rnd.gauss(0, 1) for _ in range(M * K)]
write("model.safetensors", {
    "w": ("F32", [N, K], f32(w)),
    "bias": ("F32", [N], f32([rnd.gauss(0, 1) for _ in range(N)])),
    "bias_short": ("F32", [N - 1], f32([0.5] * (N - 1))),
    "ids": ("I32", [2, 2], struct.pack("<4i", 1, 2, 3, 4)),
})
write("input.safetensors", {
    "x": ("BF16", [M, K], bf16(x)),
    "x_narrow": ("BF16", [M, K - 1], bf16(x[: M * (K - 1)])),
    "x_3d": ("F32", [1, M, K], f32(x)),
})
write("nonfinite.safetensors", {"a": ("F32", [2, 130], f32([float("nan"), float("inf"), -float("inf")] + [0.25] * 257))})
write("collide.safetensors", {"h": ("F32", [2, 4], f32([1.0] * 8)), "h_scale": ("F32", [2, 1], f32([2.0] * 2))})
# A DeepSeek-format weight whose scale shape does not match it, and one whose scales are not F32.
fp8 = bytes(rnd.randrange(256) & 0x7E for _ in range(N * K))  # finite E4M3 codes
write("bad_scale_shape.safetensors", {"w": ("F8_E4M3", [N, K], fp8), "w_scale_inv": ("F32", [1, 3], f32([1.0] * 3))})
write("bad_scale_dtype.safetensors", {"w": ("F8_E4M3", [N, K], fp8), "w_scale_inv": ("BF16", [2, 3], bf16([1.0] * 6))})
# Well-formed weights whose values are not finite: NaN scales, NaN codes (0x7F), and a NaN bias beside them.
nan = float("nan")
write("nan_scale.safetensors", {"w": ("F8_E4M3", [N, K], fp8), "w_scale_inv": ("F32", [2, 3], f32([nan] + [1.0] * 5)),
                                "bias_nan": ("F32", [N], f32([nan] * N))})
write("nan_codes.safetensors", {"w": ("F8_E4M3", [N, K], b"\x7f" * 5 + fp8[5:]),
                                "w_scale_inv": ("F32", [2, 3], f32([1.0] * 6))})
# Malformed files.
open(os.path.join(tmp, "empty.safetensors"), "wb").close()
with open(os.path.join(tmp, "short.safetensors"), "wb") as f: f.write(b"\x10\x00\x00")
with open(os.path.join(tmp, "header_past_eof.safetensors"), "wb") as f: f.write(struct.pack("<Q", 1 << 20) + b"{}")
with open(os.path.join(tmp, "huge_header.safetensors"), "wb") as f: f.write(struct.pack("<Q", 1 << 62) + b"{}")
write("not_json.safetensors", {}, raw_header=b"{this is not json")
write("array.safetensors", {}, raw_header=b"[1, 2, 3]")
write("offsets_out_of_range.safetensors", {}, raw_header=json.dumps(
    {"t": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 4096]}}).encode(), tail=b"\0" * 16)
write("reversed_offsets.safetensors", {}, raw_header=json.dumps(
    {"t": {"dtype": "F32", "shape": [1, 1], "data_offsets": [4, 0]}}).encode(), tail=b"\0" * 8)
write("shape_mismatch.safetensors", {}, raw_header=json.dumps(
    {"t": {"dtype": "F32", "shape": [3, 3], "data_offsets": [0, 16]}}).encode(), tail=b"\0" * 16)
write("bad_dtype.safetensors", {}, raw_header=json.dumps(
    {"t": {"dtype": "Q4_WHAT", "shape": [2, 2], "data_offsets": [0, 16]}}).encode(), tail=b"\0" * 16)
write("truncated_data.safetensors", {"t": ("F32", [4, 4], f32([1.0] * 16)[:40])})
# Strictness the Hugging Face reader has: a gap in the data section, a BOM, a key twice in the metadata.
write("gap.safetensors", {}, raw_header=json.dumps(
    {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}).encode(), tail=b"\0" * 8)
write("bom.safetensors", {}, raw_header=b"\xef\xbb\xbf{}")
write("dup_metadata.safetensors", {}, raw_header=b'{"__metadata__": {"k": "a", "k": "b"}}')
# A name that would drive a terminal ("\u001b[2J" clears the screen).
write("control_name.safetensors", {"\x1b[2Jw": ("F32", [2, 4], f32([1.0] * 8))})
# The same activations in other shapes: [1, M, K] is x_3d above; [K] one row; [2, 2, K] (rows 0..3 of x2d4).
write("shapes.safetensors", {
    "row": ("BF16", [K], bf16(x[:K])),
    "x4": ("BF16", [4, K], bf16(x[:K] * 4)),
    "x224": ("BF16", [2, 2, K], bf16(x[:K] * 4)),
    "scalar": ("F32", [], f32([1.0])),
})
# A DeepSeek-like file: what quantize converts by default and what it keeps.
def fp8_codes(n): return bytes(rnd.randrange(0x7E) for _ in range(n))
g = lambda n: [rnd.gauss(0, 1) for _ in range(n)]
write("deepseek.safetensors", {
    "model.embed_tokens.weight": ("BF16", [N, K], bf16(g(N * K))),
    "model.layers.0.mlp.gate.weight": ("BF16", [N, K], bf16(g(N * K))),
    "model.layers.0.mlp.gate_proj.weight": ("BF16", [N, K], bf16(g(N * K))),
    "model.layers.0.mlp.experts.0.up_proj.weight": ("F32", [N, K], f32(g(N * K))),
    "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", [N, K], fp8_codes(N * K)),
    "model.layers.0.mlp.down_proj.weight_scale_inv": ("F32", [2, 3], f32([0.01] * 6)),
    "model.layers.0.input_layernorm.weight": ("BF16", [K], bf16(g(K))),
    "model.layers.0.self_attn.kv_a_layernorm.weight": ("BF16", [1, K], bf16(g(K))),
    "model.norm.weight": ("BF16", [K], bf16(g(K))),
    "lm_head.weight": ("BF16", [N, K], bf16(g(N * K))),
    "model.layers.61.shared_head.head.weight": ("BF16", [N, K], bf16(g(N * K))),
    "hidden": ("F32", [2, K], f32(g(2 * K))),
})
EOF

# Prints "name dtype shape" for every tensor of a file (independent of the library).
tensors() {
    python3 - "$1" <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
for name, info in sorted(json.loads(raw[8 : 8 + n]).items()):
    if name != "__metadata__":
        print(name, info["dtype"], ",".join(str(d) for d in info["shape"]))
EOF
}

# --- help, version, usage --------------------------------------------------------------------------------------
expect 0 "$cli" --help
has out "usage: blockfp8"
expect 0 "$cli" --version
has out "blockfp8 0."
expect 2 "$cli"
has err "usage: blockfp8"
expect 2 "$cli" frobnicate
has err "unknown command"
for cmd in demo explain quantize linear check bench; do
    expect 0 "$cli" "$cmd" --help
    has out "usage: blockfp8 $cmd"
    empty err
    expect 2 "$cli" "$cmd" --no-such-option
    has err "blockfp8 $cmd: unknown option '--no-such-option'"
done

# --- bad numbers, missing values, missing required options -> exit 2 ---------------------------------------------
expect 2 "$cli" explain --m 1 --n 2112
has err "required"
expect 2 "$cli" explain --m
has err "--m needs a value"
expect 2 "$cli" explain --m --n 5 --k 5
has err "--m needs a value"
expect 2 "$cli" explain --m abc --n 1 --k 1
has err "bad --m 'abc'"
expect 2 "$cli" explain --m -1 --n 1 --k 1
expect 2 "$cli" explain --m 12x --n 1 --k 1
expect 2 "$cli" explain --m 99999999999999999999999 --n 1 --k 1
expect 2 "$cli" explain --m 1 --n 1 --k 1 --out-dtype e4m3
has err "bad --out-dtype"
expect 2 "$cli" explain --m 1 --n 1 --k 1 --scale-format ue4m3
expect 2 "$cli" explain --m 1 --n 1 --k 1 --device tpu
expect 2 "$cli" explain --m 1 --n 1 --k 1 --strict
has err "--strict needs --backend"
expect 2 "$cli" demo --seed banana
expect 2 "$cli" demo --k 0
expect 2 "$cli" demo --device tpu
expect 2 "$cli" demo --m 100000 --n 100000 --k 100000
expect 2 "$cli" check --seed
expect 2 "$cli" quantize --in a --out b
has err "--kind, --in and --out are required"
expect 2 "$cli" quantize --kind both --in a --out b
expect 2 "$cli" quantize --kind act --in a --out b --scale-format fp8
expect 2 "$cli" linear --weights w --weight w --in x --input x
expect 2 "$cli" linear --weights w --weight w --in x --input x --out y --out-dtype int8
expect 2 "$cli" linear --weights w --weight w --in x --input x --out y --strict

# --- missing and malformed files -> exit 1 with "blockfp8 <cmd>: ..." ----------------------------------------------
expect 1 "$cli" quantize --kind act --in "$tmp/does-not-exist.safetensors" --out "$tmp/o.safetensors"
has err "blockfp8 quantize: "
expect 1 "$cli" linear --weights "$tmp/nope.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
    --out "$tmp/y.safetensors"
has err "blockfp8 linear: "
for bad in empty short header_past_eof huge_header not_json array offsets_out_of_range reversed_offsets \
    shape_mismatch bad_dtype truncated_data gap bom dup_metadata control_name; do
    expect 1 "$cli" quantize --kind act --in "$tmp/$bad.safetensors" --out "$tmp/o.safetensors"
    has err "blockfp8 quantize: $tmp/$bad.safetensors: "
    expect 1 "$cli" linear --weights "$tmp/$bad.safetensors" --weight t --in "$tmp/input.safetensors" --input x \
        --out "$tmp/y.safetensors"
    has err "blockfp8 linear: "
done
[ ! -e "$tmp/o.safetensors" ] && pass || fail "a failed quantize left an output file"
expect 1 "$cli" quantize --kind act --in "$tmp/control_name.safetensors" --out "$tmp/o.safetensors"
has err "tensor name '\\x1b[2Jw' holds a control character (0x1b at byte 0)"
if LC_ALL=C grep -q "$(printf '\033')" "$tmp/err"; then fail "an escape character reached stderr"; else pass; fi

# --- quantize ----------------------------------------------------------------------------------------------------
expect 1 "$cli" quantize --kind weight --in "$tmp/model.safetensors" --out "$tmp/model.safetensors"
has err "refusing to write $tmp/model.safetensors: it is an input file"
ln -s "$tmp/model.safetensors" "$tmp/link.safetensors"
expect 1 "$cli" quantize --kind weight --in "$tmp/model.safetensors" --out "$tmp/link.safetensors"
has err "refusing to write $tmp/link.safetensors: it is the input file $tmp/model.safetensors"
expect 1 "$cli" quantize --kind weight --in "$tmp/model.safetensors" --out "$tmp/q.safetensors" --tensor nope
has err "no tensor named 'nope'"
expect 1 "$cli" quantize --kind weight --in "$tmp/model.safetensors" --out "$tmp/q.safetensors" --tensor bias
has err "want a 2-D"

expect 0 "$cli" quantize --kind weight --in "$tmp/model.safetensors" --out "$tmp/wq.safetensors" --tensor w
tensors "$tmp/wq.safetensors" >"$tmp/out"
has out "w F8_E4M3 130,300"
has out "w_scale_inv F32 2,3"
has out "bias F32 130"
has out "ids I32 2,2"
expect 0 "$cli" quantize --kind act --in "$tmp/input.safetensors" --out "$tmp/xq.safetensors" --scale-format ue8m0
tensors "$tmp/xq.safetensors" >"$tmp/out"
has out "x F8_E4M3 3,300"
has out "x_scale F32 3,3"
has out "x_narrow_scale F32 3,3"
has out "x_3d F32 1,3,300"
expect 0 "$cli" quantize --kind act --in "$tmp/nonfinite.safetensors" --out "$tmp/nq.safetensors"
has err "warning: a: 3 non-finite"
# h's scale would be named like the existing tensor h_scale.
expect 1 "$cli" quantize --kind act --in "$tmp/collide.safetensors" --out "$tmp/cq.safetensors"
has err "'h_scale' would collide"
expect 0 "$cli" quantize --kind act --in "$tmp/collide.safetensors" --out "$tmp/cq.safetensors" --tensor h_scale

# --- linear on the quantized weight ------------------------------------------------------------------------------
lin() { # common arguments, then extras
    "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
        --out "$tmp/y.safetensors" "$@"
}
expect 0 lin --bias bias --stats
has err "dispatch stats"
has err "calls:"
tensors "$tmp/y.safetensors" >"$tmp/out"
has out "y BF16 3,130"
for dt in fp16:F16 fp32:F32 bf16:BF16; do
    expect 0 lin --out-dtype "${dt%%:*}" --backend ref --strict
    tensors "$tmp/y.safetensors" >"$tmp/out"
    has out "y ${dt##*:} 3,130"
done
expect 0 lin --backend cpu --strict --stats
has err "fallbacks: none"
expect 1 lin --backend no_such_backend
has err "no backend named 'no_such_backend'"
expect 1 lin --bias bias_short
has err "bias 'bias_short' is f32 [129]; want 1-D [130]"
expect 1 lin --bias missing_bias
has err "no bias tensor 'missing_bias'"
expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input x_narrow \
    --out "$tmp/y.safetensors"
has err "K=299"
expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight nope --in "$tmp/input.safetensors" --input x \
    --out "$tmp/y.safetensors"
has err "blockfp8 linear: nope"
expect 1 "$cli" linear --weights "$tmp/model.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
    --out "$tmp/y.safetensors"
has err "w_scale_inv"
for bad in bad_scale_shape bad_scale_dtype; do
    expect 1 "$cli" linear --weights "$tmp/$bad.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
        --out "$tmp/y.safetensors"
    has err "w_scale_inv"
done
expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input nope \
    --out "$tmp/y.safetensors"
has err "no tensor named 'nope'"
# Non-finite weight scales, weight codes and bias values make a NaN y: never in silence.
expect 0 "$cli" linear --weights "$tmp/nan_scale.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
    --bias bias_nan --out "$tmp/y_nan.safetensors" --device cpu
has err "warning: weight 'w' has 1 non-finite scale(s) in w_scale_inv"
has err "warning: bias 'bias_nan' holds 130 non-finite value(s)"
expect 0 "$cli" linear --weights "$tmp/nan_codes.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
    --out "$tmp/y_nan.safetensors" --device cpu
has err "warning: weight 'w' holds 5 NaN code(s)"
lacks err "scale(s)"
expect 0 env BFP8_LOG=dispatch "$cli" linear --weights "$tmp/wq.safetensors" --weight w \
    --in "$tmp/input.safetensors" --input x --out "$tmp/y.safetensors"
expect 1 env BFP8_BACKEND=no_such_backend "$cli" linear --weights "$tmp/wq.safetensors" --weight w \
    --in "$tmp/input.safetensors" --input x --out "$tmp/y.safetensors"
has err "BFP8_BACKEND"

# --- quantize: what a default run converts and keeps --------------------------------------------------------------
expect 0 "$cli" quantize --kind weight --in "$tmp/deepseek.safetensors" --out "$tmp/dq.safetensors"
has err "converted 2 of 12 tensor(s)"
has err "2 converted: model.layers.0.mlp.gate_proj.weight, model.layers.0.mlp.experts.0.up_proj.weight"
has err "1 an embedding (*embed*), which DeepSeek keeps in bf16: model.embed_tokens.weight"
has err "1 the MoE router (*.gate.weight, *router*), which DeepSeek keeps in bf16: model.layers.0.mlp.gate.weight"
has err "1 a scale tensor (*_scale_inv, *_scale): model.layers.0.mlp.down_proj.weight_scale_inv"
has err "1 not f32, bf16 or f16 (already FP8, integers or scale exponents): model.layers.0.mlp.down_proj.weight"
has err "2 the output head (lm_head, *shared_head.head*), which DeepSeek keeps in bf16: lm_head.weight, model.layers.61.shared_head.head.weight"
has err "1 a norm (*norm*): model.layers.0.self_attn.kv_a_layernorm.weight"
has err "2 not 2-D (norms, biases, higher-rank tensors)"
has err "1 not named *.weight: hidden"
tensors "$tmp/dq.safetensors" >"$tmp/out"
has out "model.layers.0.mlp.gate_proj.weight F8_E4M3 130,300"
has out "model.layers.0.mlp.gate_proj.weight_scale_inv F32 2,3"
has out "model.layers.0.mlp.experts.0.up_proj.weight F8_E4M3 130,300"
has out "model.embed_tokens.weight BF16 130,300"
has out "model.layers.0.mlp.gate.weight BF16 130,300"
has out "model.layers.0.mlp.down_proj.weight_scale_inv F32 2,3"
has out "lm_head.weight BF16 130,300"
has out "model.layers.61.shared_head.head.weight BF16 130,300"
has out "model.layers.0.self_attn.kv_a_layernorm.weight BF16 1,300"
has out "hidden F32 2,300"
lacks out "scale_inv_scale_inv"
lacks out "gate.weight_scale_inv"
# --skip (repeatable globs), --tensor (every repeat honoured), and the two contradicting each other.
expect 0 "$cli" quantize --kind weight --in "$tmp/deepseek.safetensors" --out "$tmp/dq.safetensors" \
    --skip '*.experts.*' --skip 'model.layers.0.mlp.gate_proj*'
has err "converted 0 of 12"
has err "2 matched by --skip: model.layers.0.mlp.gate_proj.weight, model.layers.0.mlp.experts.0.up_proj.weight"
has err "warning: nothing in"
expect 0 "$cli" quantize --kind weight --in "$tmp/deepseek.safetensors" --out "$tmp/dq.safetensors" \
    --tensor model.embed_tokens.weight --tensor hidden --tensor hidden
has err "converted 2 of 12"
has err "10 not listed by --tensor"
tensors "$tmp/dq.safetensors" >"$tmp/out"
has out "model.embed_tokens.weight F8_E4M3 130,300"
has out "hidden F8_E4M3 2,300"
has out "hidden_scale_inv F32 1,3"
has out "model.layers.0.mlp.gate_proj.weight BF16 130,300"
expect 2 "$cli" quantize --kind weight --in "$tmp/deepseek.safetensors" --out "$tmp/dq.safetensors" \
    --tensor hidden --skip 'hid*'
has err "--tensor 'hidden' is also matched by --skip 'hid*'"
expect 2 "$cli" quantize --kind weight --in "$tmp/deepseek.safetensors" --out "$tmp/dq.safetensors" --skip
# --kind act never re-quantizes a scale tensor either.
expect 0 "$cli" quantize --kind act --in "$tmp/deepseek.safetensors" --out "$tmp/dq.safetensors"
has err "1 a scale tensor (*_scale_inv, *_scale): model.layers.0.mlp.down_proj.weight_scale_inv"
tensors "$tmp/dq.safetensors" >"$tmp/out"
has out "model.layers.0.mlp.down_proj.weight_scale_inv F32 2,3"
lacks out "weight_scale_inv_scale"

# --- linear: inputs of any leading dimensions --------------------------------------------------------------------
expect 0 lin --input x_3d
has out "y bf16 [1, 3, 130]"
tensors "$tmp/y.safetensors" >"$tmp/out"
has out "y BF16 1,3,130"
for shape in x4:4,130 x224:2,2,130 row:130; do
    expect 0 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/shapes.safetensors" \
        --input "${shape%%:*}" --out "$tmp/y_${shape%%:*}.safetensors" --backend ref --strict
    tensors "$tmp/y_${shape%%:*}.safetensors" >"$tmp/out"
    has out "y BF16 ${shape##*:}"
done
# The same rows give the same bytes whatever the leading dimensions (row 0 repeated in x4 and x224).
data_of() { python3 -c 'import struct,sys; r=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",r[:8])[0]; sys.stdout.buffer.write(r[8+n:])' "$1"; }
data_of "$tmp/y_x4.safetensors" >"$tmp/d_x4"
data_of "$tmp/y_x224.safetensors" >"$tmp/d_x224"
data_of "$tmp/y_row.safetensors" >"$tmp/d_row"
cmp -s "$tmp/d_x4" "$tmp/d_x224" && pass || fail "y of [2, 2, K] differs from y of [4, K]"
head -c 260 "$tmp/d_x4" | cmp -s - "$tmp/d_row" && pass || fail "y of [K] differs from row 0 of y of [4, K]"
expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/shapes.safetensors" --input scalar \
    --out "$tmp/y.safetensors"
has err "want f32, bf16 or f16 [..., K]"

# --- linear: --scale-format and the UE8M0 pipeline ---------------------------------------------------------------
expect 0 "$cli" quantize --kind weight --in "$tmp/model.safetensors" --out "$tmp/wq8.safetensors" --tensor w \
    --scale-format ue8m0
lin8() {
    "$cli" linear --weights "$tmp/wq8.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
        --out "$tmp/y8.safetensors" "$@"
}
expect 0 lin8 --scale-format ue8m0
has out "ue8m0 scales"
data_of "$tmp/y8.safetensors" >"$tmp/d_ue8m0"
expect 0 lin8
has out "fp32 scales"
expect 0 lin8 --scale-format fp32
has out "fp32 scales"
data_of "$tmp/y8.safetensors" >"$tmp/d_fp32"
cmp -s "$tmp/d_ue8m0" "$tmp/d_fp32" && fail "declared ue8m0 gave the bytes of the fp32 pipeline" || pass
expect 1 lin --scale-format ue8m0
has err "is declared UE8M0, but [0, 0]"
expect 2 lin --scale-format fp8
has err "bad --scale-format 'fp8'"
# The same scales as F8_E8M0 exponents are UE8M0 without a declaration, and give the same bytes.
python3 - "$tmp/wq8.safetensors" "$tmp/wq8e.safetensors" <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header, data = json.loads(raw[8 : 8 + n]), raw[8 + n :]
out, blobs, off = {}, [], 0
for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    b, e = info["data_offsets"]
    blob, dtype = data[b:e], info["dtype"]
    if name.endswith("_scale_inv"):
        blob, dtype = bytes((v >> 23) & 0xFF for v in struct.unpack("<%dI" % (len(blob) // 4), blob)), "F8_E8M0"
    out[name] = {"dtype": dtype, "shape": info["shape"], "data_offsets": [off, off + len(blob)]}
    blobs.append(blob)
    off += len(blob)
text = json.dumps(out).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
EOF
expect 0 "$cli" linear --weights "$tmp/wq8e.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
    --out "$tmp/y8.safetensors"
has out "ue8m0 scales"
data_of "$tmp/y8.safetensors" | cmp -s - "$tmp/d_ue8m0" && pass || fail "F8_E8M0 scales differ from declared ue8m0"

# --- linear: --device ----------------------------------------------------------------------------------------------
expect 2 lin --device tpu
has err "bad --device 'tpu'"
if "$cli" explain --m 1 --n 128 --k 128 --device cuda >/dev/null 2>&1; then
    expect 0 lin --device cuda --bias bias
    has out "(on cuda,"
    data_of "$tmp/y.safetensors" >"$tmp/d_cuda"
    expect 0 lin --device cpu --bias bias
    has out "(on cpu,"
    python3 - "$tmp/d_cuda" "$tmp/y.safetensors" <<'EOF' && pass || fail "linear on cuda differs from cpu"
import math, struct, sys
def bf16(b): return [struct.unpack("<f", b"\0\0" + b[i:i + 2])[0] for i in range(0, len(b), 2)]
a = bf16(open(sys.argv[1], "rb").read())
raw = open(sys.argv[2], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
c = bf16(raw[8 + n:])
num = sum((x - y) ** 2 for x, y in zip(a, c))
den = sum(y * y for y in c)
sys.exit(0 if len(a) == len(c) and math.sqrt(num / den) <= 8e-3 else 1)
EOF
    expect 0 lin
    has out "(on cuda,"
else
    expect 1 lin --device cuda
    has err "--device cuda: "
    expect 0 lin
    has out "(on cpu,"
fi
expect 0 lin --backend ref
has out "(on cpu,"

# --- linear: a sharded checkpoint through its index --------------------------------------------------------------
mkdir "$tmp/ckpt"
python3 - "$tmp/wq.safetensors" "$tmp/model.safetensors" "$tmp/ckpt" <<'EOF'
import json, struct, sys
def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8 : 8 + n]), raw[8 + n :]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in header.items()}
def write(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
q, m = read(sys.argv[1]), read(sys.argv[2])
d = sys.argv[3]
# The weight in the first shard, its scales and the bias in the second.
write(d + "/model-00001-of-00002.safetensors", {"w": q["w"], "ids": q["ids"]})
write(d + "/model-00002-of-00002.safetensors", {"w_scale_inv": q["w_scale_inv"], "bias": m["bias"]})
index = {"metadata": {"total_size": 0}, "weight_map": {"w": "model-00001-of-00002.safetensors",
         "ids": "model-00001-of-00002.safetensors", "w_scale_inv": "model-00002-of-00002.safetensors",
         "bias": "model-00002-of-00002.safetensors"}}
open(d + "/model.safetensors.index.json", "w").write(json.dumps(index, indent=2))
EOF
expect 0 lin --bias bias --backend cpu --strict
data_of "$tmp/y.safetensors" >"$tmp/d_single"
for weights in "$tmp/ckpt/model.safetensors.index.json" "$tmp/ckpt"; do
    expect 0 "$cli" linear --weights "$weights" --weight w --in "$tmp/input.safetensors" --input x \
        --out "$tmp/y_sharded.safetensors" --bias bias --backend cpu --strict
    data_of "$tmp/y_sharded.safetensors" | cmp -s - "$tmp/d_single" && pass || fail "sharded y differs ($weights)"
done
expect 1 "$cli" linear --weights "$tmp/ckpt/model-00001-of-00002.safetensors" --weight w \
    --in "$tmp/input.safetensors" --input x --out "$tmp/y.safetensors"
has err "no tensor 'w_scale_inv' in $tmp/ckpt/model-00001-of-00002.safetensors"
printf '{"weight_map": {"w": "../model.safetensors"}}' >"$tmp/ckpt/evil.index.json"
expect 1 "$cli" linear --weights "$tmp/ckpt/evil.index.json" --weight w --in "$tmp/input.safetensors" --input x \
    --out "$tmp/y.safetensors"
has err "not a relative file name"
printf '{"weight_map": {"w": "gone.safetensors"}}' >"$tmp/ckpt/gone.index.json"
expect 1 "$cli" linear --weights "$tmp/ckpt/gone.index.json" --weight w --in "$tmp/input.safetensors" --input x \
    --out "$tmp/y.safetensors"
has err "gone.safetensors: No such file"
# A FIFO (no writer) as the index or the input is refused at once, not waited on.
mkfifo "$tmp/ckpt/fifo.index.json" "$tmp/fifo.safetensors"
expect 1 timeout 20 "$cli" linear --weights "$tmp/ckpt/fifo.index.json" --weight w --in "$tmp/input.safetensors" \
    --input x --out "$tmp/y.safetensors"
has err "fifo.index.json: not a regular file"
expect 1 timeout 20 "$cli" quantize --kind act --in "$tmp/fifo.safetensors" --out "$tmp/y.safetensors"
has err "fifo.safetensors: not a regular file"
rm -f "$tmp/ckpt/fifo.index.json" "$tmp/fifo.safetensors"

# --- no output may destroy an input ------------------------------------------------------------------------------
cp "$tmp/input.safetensors" "$tmp/input.orig"
cp "$tmp/wq.safetensors" "$tmp/wq.orig"
cp "$tmp/ckpt/model-00002-of-00002.safetensors" "$tmp/shard2.orig"
cp "$tmp/ckpt/model.safetensors.index.json" "$tmp/index.orig"
ln "$tmp/input.safetensors" "$tmp/hardlink.safetensors"
ln -s "$tmp/wq.safetensors" "$tmp/wlink.safetensors"
for out in "$tmp/input.safetensors" "$tmp/wq.safetensors" "$tmp/hardlink.safetensors" "$tmp/wlink.safetensors" \
    "$tmp/./input.safetensors" "$tmp/ckpt/../wq.safetensors"; do
    expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
        --out "$out"
    has err "refusing to write $out"
done
for out in "$tmp/ckpt/model-00002-of-00002.safetensors" "$tmp/ckpt/model.safetensors.index.json"; do
    expect 1 "$cli" linear --weights "$tmp/ckpt" --weight w --in "$tmp/input.safetensors" --input x --out "$out"
    has err "refusing to write $out"
done
abs_cli=$(cd "$(dirname "$cli")" && pwd)/blockfp8
(cd "$tmp" && "$abs_cli" linear --weights wq.safetensors --weight w --in "$tmp/input.safetensors" --input x \
    --out input.safetensors >"$tmp/out" 2>"$tmp/err") && fail "a relative output naming the input was written" || pass
has err "refusing to write input.safetensors: it is the input file"
expect 1 "$cli" quantize --kind act --in "$tmp/input.safetensors" --out "$tmp/hardlink.safetensors"
has err "refusing to write"
cmp -s "$tmp/input.safetensors" "$tmp/input.orig" && cmp -s "$tmp/wq.safetensors" "$tmp/wq.orig" &&
    cmp -s "$tmp/ckpt/model-00002-of-00002.safetensors" "$tmp/shard2.orig" &&
    cmp -s "$tmp/ckpt/model.safetensors.index.json" "$tmp/index.orig" && pass || fail "an input file changed"
[ -L "$tmp/wlink.safetensors" ] && pass || fail "the symlink to an input was replaced"

# --- writes: modes kept, long names, temp files removed on failure and on signals ------------------------------
expect 0 lin
chmod 600 "$tmp/y.safetensors"
expect 0 lin
[ "$(stat -c %a "$tmp/y.safetensors")" = 600 ] && pass || fail "overwriting a 0600 file left $(stat -c %a "$tmp/y.safetensors")"
name255=$(python3 -c 'print("y" * 243 + ".safetensors")')
expect 0 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
    --out "$tmp/$name255"
[ -f "$tmp/$name255" ] && pass || fail "no file with a 255-byte name"
rm -f "$tmp/$name255"
name256=$(python3 -c 'print("y" * 244 + ".safetensors")')
expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
    --out "$tmp/$name256"
has err "$tmp/$name256: rename failed: File name too long"
mkdir "$tmp/outdir"
expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
    --out "$tmp/outdir"
has err "it is a directory"
if [ "$(id -u)" != 0 ]; then
    mkdir "$tmp/ro" && chmod 500 "$tmp/ro"
    expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input x \
        --out "$tmp/ro/y.safetensors"
    has err "cannot create a temp file in $tmp/ro"
    chmod 700 "$tmp/ro"
fi
# A signal while the output is being written removes the temp file and ends the process by that signal.
signal_test() {
    python3 - "$cli" "$tmp" "$1" <<'EOF'
import glob, os, signal, subprocess, sys, time
cli, tmp, name = sys.argv[1], sys.argv[2], sys.argv[3]
sig = getattr(signal, name)
out_dir = os.path.join(tmp, "sig_" + name)
os.makedirs(out_dir)
env = dict(os.environ, BFP8_CLI_TEST_WRITE_DELAY_MS="30000")
proc = subprocess.Popen([cli, "quantize", "--kind", "act", "--in", os.path.join(tmp, "input.safetensors"),
                         "--out", os.path.join(out_dir, "q.safetensors")], env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
deadline = time.time() + 30
while time.time() < deadline and not glob.glob(os.path.join(out_dir, ".bfp8.tmp.*")) and proc.poll() is None:
    time.sleep(0.01)
seen = glob.glob(os.path.join(out_dir, ".bfp8.tmp.*"))
proc.send_signal(sig)
rc = proc.wait(timeout=30)
left = os.listdir(out_dir)
if not (seen and rc == -sig and not left):
    print(f"{name}: temp file seen {seen}, exit {rc}, left {left}")
    sys.exit(1)
EOF
}
for sig in SIGINT SIGTERM SIGHUP; do
    expect 0 signal_test "$sig"
done
leftover=$(find "$tmp" -name '.bfp8.tmp.*' | head -3)
[ -z "$leftover" ] && pass || fail "temp files left behind: $leftover"

# --- smaller slips ---------------------------------------------------------------------------------------------
expect 0 "$cli" check --help
has out "N % 128 = 64"
lacks out "%%"
expect 1 "$cli" explain --m 1 --n 1 --k 1 --device cuda --arch 10
lacks err "explain: explain:"
has err "blockfp8 explain: the dispatcher: unsupported"
if ! "$cli" explain --m 1 --n 128 --k 128 --device cuda >/dev/null 2>&1; then
    expect 1 "$cli" explain --m 1 --n 128 --k 128 --device cuda
    has err "no CUDA device here"
    has err "its backends stay unavailable here"
    lacks out "sm_0"
    # What the message offers: the problem and the ranking for sm_90, and no choice (exit 1).
    expect 1 "$cli" explain --m 16 --n 2112 --k 7168 --device cuda --arch 90
    has out "problem: device=cuda m=16 n=2112 k=7168"
    has out "ranking: measured on NVIDIA H200"
    has out "choice:  none"
fi
expect 0 "$cli" explain --help
has out "with --arch, none, so the"
lacks out "--arch none"
expect 1 env BFP8_NUM_THREADS=abc "$cli" demo --m 1 --n 128 --k 128
has err "BFP8_NUM_THREADS='abc' is not an integer in [1, 256]"
expect 1 env BFP8_CPU_ISA=bogus "$cli" quantize --kind act --in "$tmp/input.safetensors" --out "$tmp/xq.safetensors"
has err "BFP8_CPU_ISA='bogus' is not auto, portable or avx2"
expect 0 env BFP8_NUM_THREADS=abc "$cli" demo --help
expect 0 env BFP8_NUM_THREADS=1 BFP8_CPU_ISA=portable "$cli" explain --m 1 --n 128 --k 128

# --- explain -----------------------------------------------------------------------------------------------------
expect 0 "$cli" explain --m 16 --n 2112 --k 7168
has out "problem: device=cpu m=16 n=2112 k=7168 out=bf16"
has out "policy:  auto"
has out "ranking: caps priority (the measured table ranks CUDA backends)"
has out "  ref "
has out "choice:  "
expect 0 "$cli" explain --m 1 --n 2112 --k 300 --out-dtype fp16 --scale-format ue8m0 --bias --backend ref
has out "policy:  prefer ref"
has out "choice:  ref"
expect 0 "$cli" explain --m 0 --n 7 --k 1 --out-dtype fp32 --backend cpu --strict
has out "choice:  cpu"
# An impossible case on any machine: a CPU backend, strictly, for data on the GPU.
expect 1 "$cli" explain --m 16 --n 2112 --k 7168 --device cuda --arch 90 --backend cpu --strict
has out "cpu "
has err "blockfp8 explain: strict cpu cannot run this problem: "
has err "cuda"
has out "problem: device=cuda m=16 n=2112 k=7168 out=bf16 scales=fp32 bias=none acts=prior-kernel"
# --gemm: a plain GEMM call's problem (activations arrive quantized; no kernel for hopper to start behind).
expect 1 "$cli" explain --m 16 --n 2112 --k 7168 --device cuda --arch 90 --gemm --card "NVIDIA H200" --backend cpu --strict
has out "problem: device=cuda m=16 n=2112 k=7168 out=bf16 scales=fp32 bias=none arch=sm_90 card='NVIDIA H200'"
lacks out "acts=prior-kernel"
# On cuda the measured table's cell ranks it (a DeepSeek-R1 cell), or the priorities where none covers it.
has out "ranking: measured on NVIDIA H200: sm_90 bf16 N=2112 K=7168 M=16, run "
# --card: another card's cells where the table has them, else the reference card's, said so.
expect 1 "$cli" explain --m 128 --n 7168 --k 16384 --device cuda --arch 90 --gemm --card "NVIDIA H100 80GB HBM3" --backend cpu --strict
has out "arch=sm_90 card='NVIDIA H100 80GB HBM3'"
has out "ranking: measured on NVIDIA H100 80GB HBM3: sm_90 bf16 N=7168 K=16384 M=128, run bench-h100-"
expect 1 "$cli" explain --m 128 --n 7168 --k 16384 --device cuda --arch 90 --gemm --card "NVIDIA H800" --backend cpu --strict
has out "ranking: measured on NVIDIA H200 (NVIDIA H800 has no cells of this shape and dtype): sm_90 bf16 N=7168 K=16384 M=128"
expect 2 "$cli" explain --m 1 --n 1 --k 1 --card ""
has err "--card needs a name"
expect 2 "$cli" explain --m 1 --n 1 --k 1 --card "NVIDIA H200"
has err "--card needs --device cuda"
expect 1 "$cli" explain --m 16 --n 2112 --k 7200 --device cuda --arch 90 --gemm --backend cpu --strict
has out "ranking: caps priority (no measured cell for sm_90 N=2112 K=7200)"
expect 1 "$cli" explain --m 1 --n 1 --k 1 --backend no_such_backend
has err "no backend named"

# --- demo and check ----------------------------------------------------------------------------------------------
expect 0 "$cli" demo --m 3 --n 320 --k 300 --out-dtype fp32 --scale-format ue8m0 --seed 7 --device cpu
has out "decision: "
has out "PASS"
expect 0 "$cli" demo --m 1 --n 129 --k 255 --out-dtype fp16 --seed 11
has out "PASS"
expect 0 "$cli" demo
has out "M=16 N=2112 K=7168"
has out "vs ref"
has out "calc_diff"
has out "PASS"
lacks out "FAIL"
expect 0 env BFP8_BACKEND=ref "$cli" demo --m 2 --n 256 --k 256 --device cpu
has out "decision: ref"
expect 0 "$cli" check
has out "check: OK"
has out "  ref "
lacks out "FAIL"
expect 1 "$cli" check --backend no_such_backend

# shard: each rank's slice, or the reason (docs/tensor-parallel.md)
expect 0 "$cli" shard --help
has out "--share-blocks"
expect 2 "$cli" shard --ranks 2
expect 2 "$cli" shard --ranks 2 --mode diagonal --n 256 --k 256
expect 2 "$cli" shard --ranks 0 --mode row --n 256 --k 256
expect 0 "$cli" shard --ranks 8 --mode row --n 7168 --k 18432
has out "rank 7: columns [16128, 18432), scale blocks [126, 144), local weight [7168, 2304]"
expect 1 "$cli" shard --ranks 32 --mode row --n 7168 --k 18432
has err "576 columns of K=18432"
has err "--share-blocks"
expect 0 "$cli" shard --ranks 32 --mode row --n 7168 --k 18432 --share-blocks
has out "rank 1: columns [576, 1152), scale blocks [4, 9), local weight [7168, 640], 64 pad columns in front"
expect 0 "$cli" shard --ranks 1 --mode column --weights "$tmp/wq.safetensors" --weight w
has out "rank 0: rows [0, "
expect 1 "$cli" shard --ranks 2 --mode row --weights "$tmp/wq.safetensors" --weight nope
has err "shard: $tmp/wq.safetensors: "
has err "no tensor 'nope'"
# A shape with a file, or half a shape: which one was meant is not guessed.
expect 2 "$cli" shard --ranks 1 --mode column --weights "$tmp/wq.safetensors" --weight w --n 5
has err "give either --weights FILE --weight NAME, or --n N --k K"
expect 2 "$cli" shard --ranks 1 --mode column --n 256
expect 2 "$cli" shard --ranks 2 --mode row --n 256 --k 256 --weight w
has err "give either --weights FILE --weight NAME, or --n N --k K"
expect 1 "$cli" shard --ranks 5 --mode column --n 2112 --k 7168
has err "does not split evenly"
# --- grouped (MoE) ---------------------------------------------------------------------------------------------
expect 0 "$cli" explain --m 1024 --n 4096 --k 7168 --grouped contiguous --groups 8
has out "grouped=contiguous groups=8 expected_m=128"
has out "choice:  cpu"
# (strict cpu: a CUDA problem it can never run, so the exit status is 1 on a machine with a GPU too)
expect 1 "$cli" explain --m 128 --n 4096 --k 7168 --grouped masked --groups 8 --expected-m 16 --device cuda --arch 90 --backend cpu --strict
has out "grouped=masked groups=8 expected_m=16"
expect 2 "$cli" explain --m 128 --n 4096 --k 7168 --grouped masked
has err "--grouped and --groups go together"
expect 2 "$cli" explain --m 128 --n 4096 --k 7168 --grouped sideways --groups 2
has err "bad --grouped"
expect 0 "$cli" check
has out "grouped results"
has out "check: OK"
expect 0 "$cli" demo --moe --device cpu --seed 5 --stats
has out "contiguous layout"
has out "(2 grouped)"
has out "PASS"
expect 0 "$cli" demo --moe --layout masked --experts 5 --top-k 3 --tokens 9 --hidden 300 --inter 256 --device cpu
has out "masked layout"
has out "PASS"
expect 2 "$cli" demo --moe --inter 200
has err "not a multiple of 128"
expect 0 "$cli" demo --moe --help
has out "usage: blockfp8 demo --moe"
expect 0 "$cli" bench --grouped masked --experts 2 --tokens 1,3 --layer down --iters 1 --warmup 0 --baseline none
has out "masked      down        2      1  cpu"
has out "masked      down        2      3  cpu"
expect 0 "$cli" bench --grouped contiguous --experts 2 --tokens 5 --layer down --iters 1 --warmup 0 --json "$tmp/grouped.json"
has out "contiguous  down        2      5  cpu"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r and r[0]['layout']=='contiguous' and r[0]['tokens']==5" "$tmp/grouped.json" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: bench --grouped --json"; }
# A --json that cannot be written (a full disk) is an error, not a quiet exit 0 with the records lost.
if [ -w /dev/full ]; then
    expect 1 "$cli" bench --grouped masked --experts 2 --tokens 1 --layer down --iters 1 --warmup 0 --baseline none \
        --json /dev/full
    has err "--json: writing '/dev/full' failed"
fi
# bench --json: a run that fails leaves no records under FILE (a complete-looking JSON of the cells before the
# failure) and keeps the FILE that was there; a run that succeeds replaces it, keeping its mode. The second shape
# cannot be allocated (4 * 2^31 * (2^31 - 1) bytes), so the run fails after the first cell.
printf '[{"old": 1}]\n' >"$tmp/bench.json"
chmod 640 "$tmp/bench.json"
expect 1 env ASAN_OPTIONS=allocator_may_return_null=1 "$cli" bench --shapes 128x128,2147483648x2147483647 --m 1 \
    --iters 1 --json "$tmp/bench.json"
has out "cpu             1    128    128"
has err "out of memory"
has err "--json: '$tmp/bench.json' not written (the run failed)"
grep -qF '[{"old": 1}]' "$tmp/bench.json" && pass || fail "a failed bench changed the --json file"
# Sizes whose buffers' byte counts would wrap (4 * 2^31 * 2^31 = 2^64) are refused before anything is allocated.
expect 1 "$cli" bench --shapes 2147483648x2147483648 --m 1 --iters 1
has err "M=1 N=2147483648 K=2147483648: the buffers overflow"
# Empty items in a list are refused, not skipped.
for list in ",128x128" "128x128,,256x256" "128x128,"; do
    expect 2 "$cli" bench --shapes "$list" --m 1 --iters 1
    has err "--shapes: '$list' has an empty item"
done
expect 2 "$cli" bench --shapes 128x128 --m 1, --iters 1
expect 0 "$cli" bench --shapes 128x128 --m 1 --iters 1 --json "$tmp/bench.json"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert len(r)==1 and r[0]['n']==128" "$tmp/bench.json" \
    && pass || fail "bench --json: records"
[ "$(stat -c %a "$tmp/bench.json")" = 640 ] && pass || fail "bench --json: the replaced file lost its mode"
expect 1 "$cli" bench --shapes 128x128 --m 1 --iters 1 --json "$tmp"
has err "--json: cannot write '$tmp': it is a directory"
expect 1 "$cli" bench --shapes 128x128 --m 1 --iters 1 --json "$tmp/nodir/"
has err "--json: '$tmp/nodir/' is not a file name"
empty out
leftover=$(find "$tmp" -name '.bfp8.tmp.*' | head -3)
[ -z "$leftover" ] && pass || fail "bench --json left temp files: $leftover"
expect 2 "$cli" bench --grouped sideways
has err "bad --grouped"
expect 2 "$cli" bench --grouped masked --baseline cublaslt
has err "does not run on cpu"
expect 0 "$cli" bench --grouped masked --help
has out "usage: blockfp8 bench --grouped"
# --- bench --model: a DeepSeek-R1 decoder layer, the routed experts through the grouped GEMM -------------------
# Small and fast: batch 1-2, one timed run, 4-6 experts resident (the dense layers keep their real shapes).
expect 0 "$cli" bench --model dsr1 --batch 1,2 --iters 1 --experts 4 --skew 1 --json "$tmp/model.json"
has out "routed experts: 4 resident, top-4 per token, routing Zipf(1)"
has out "scaled down (--experts, --top-k)"
has out "layout: masked [4, 128, K], masked_m = the counts below, expected_m 1 (batch <= 128: decode)"
has out "experts    experts.gate_up    4096   7168  cpu"
has out "experts    experts.down       7168   2048  cpu"
has out "shared     shared.down        7168   2048  cpu"
has out "  routed experts (grouped)"
has out "  dense part (attention + shared)"
has out "  61 layers (3 dense + 58 MoE)"
lacks out "FAIL"
python3 - "$tmp/model.json" <<'EOF2' && pass || fail "bench --model --json: records"
import json, sys
recs = json.load(open(sys.argv[1]))
steps = [r for r in recs if r["layer"] == "step"]
assert [s["batch"] for s in steps] == [1, 2], steps
for s in steps:  # each token's top-4 experts, all four here: 4 per token, every expert once per token
    assert s["tokens_per_expert"] == [s["batch"]] * 4 and s["routed_rows"] == 4 * s["batch"], s
    assert s["moe_layout"] == "masked" and s["experts"] == 4 and s["top_k"] == 4, s
    parts = s["attention_us"] + s["shared_expert_us"] + s["routed_experts_us"]
    assert abs(parts - s["median_us"]) <= 1e-3 * s["median_us"], s
layers = [r for r in recs if r["layer"] != "step"]
assert len(layers) == 20 and {r["part"] for r in layers} == {"attention", "dense_mlp", "shared_expert", "routed_experts"}
assert all(r["rel_err_vs_ref"] <= 8e-3 and r["median_us"] > 0 for r in layers), layers
assert all(r["groups"] == 4 and r["layout"] == "masked" for r in layers if r["part"] == "routed_experts")
EOF2
# Contiguous (forced), fewer experts per token than held, and every layer on ref beside it.
expect 0 "$cli" bench --model dsr1 --batch 3 --iters 1 --experts 6 --top-k 2 --moe-layout contiguous --compare
has out "routed experts: 6 resident, top-2 per token"
has out "routing: 6 rows (batch x top-2) to "
has out "layout: contiguous, "
has out "(--moe-layout)"
has out "experts    experts.down       7168   2048  cpu"
has out "ref"
has out "all-fallback: "
lacks out "FAIL"
# The routing of a batch depends on the seed and the batch alone.
expect 0 "$cli" bench --model dsr1 --batch 5 --iters 1 --experts 12 --top-k 3 --seed 9
grep -A1 "tokens per expert" "$tmp/out" >"$tmp/counts1"
expect 0 "$cli" bench --model dsr1 --batch 2,5 --iters 1 --experts 12 --top-k 3 --seed 9
grep -A1 "tokens per expert" "$tmp/out" | tail -2 >"$tmp/counts2"
cmp -s "$tmp/counts1" "$tmp/counts2" && pass || fail "bench --model: batch 5 routed differently beside batch 2"
expect 0 "$cli" bench --model dsr1 --help
has out "usage: blockfp8 bench --model dsr1"
has out "--moe-layout L"
has out "Zipf"
for bad in "--experts 0" "--experts 257" "--experts x" "--top-k 0" "--skew -1" "--skew abc" "--skew nan" \
    "--skew 17" "--moe-layout sideways" "--moe-layout" "--batch 0" "--iters 0"; do
    # shellcheck disable=SC2086 # $bad is an option and its value
    expect 2 "$cli" bench --model dsr1 $bad
    has err "blockfp8 bench: "
done
expect 2 "$cli" bench --model dsr1 --experts 4 --top-k 5
has err "--top-k 5 exceeds the 4 experts"
expect 2 "$cli" bench --model dsr1 --skew -0.5
has err "bad --skew"
expect 2 "$cli" bench --model dsr1 --moe-layout none
has err "bad --moe-layout 'none' (auto, masked or contiguous)"
expect 2 "$cli" bench --model llama
has err "--model must be dsr1"

# bench --tp: the plans and bytes without a GPU (--dry-run), usage errors, and the refusal where R GPUs or NCCL
# are missing (exit 1, naming what is missing, nothing on stdout); a host with two GPUs and NCCL runs one small
# cell of each split instead, whose check (TP vs the unsharded layer) must pass
expect 0 "$cli" bench --tp 2 --help
has out "usage: blockfp8 bench --tp R"
expect 0 "$cli" bench --tp 2 --dry-run --m 16
has out "mlp.gate_up     column      16  36864   7168  [18432, 7168]    all-gather        294912 bf16       1179648"
has out "mlp.down        row         16   7168  18432  [7168, 9216]     all-reduce        114688 f32         458752"
expect 0 "$cli" bench --tp 3 --layer all --m 1 --out-dtype fp32 --dry-run
has out "kv_b            column  n/a: shard: column-parallel: N=32768 does not split evenly over 3 ranks"
has out "q_b             column       1  24576   1536  [8192, 1536]     all-gather          8192 f32          98304"
expect 0 "$cli" bench --tp 8 --layer mlp.down --m 4 --dry-run
has out "[7168, 2304]"
expect 2 "$cli" bench --tp 1
has err "bad --tp '1'"
expect 2 "$cli" bench --tp 9
expect 2 "$cli" bench --tp 2 --layer q_a+kv_a
has err "replicated"
expect 2 "$cli" bench --tp 2 --layer mlp.up
has err "'mlp.up' is not a DeepSeek-R1 layer"
expect 2 "$cli" bench --tp 2 --m 0
expect 2 "$cli" bench --tp 2 --l2 warm
expect 2 "$cli" bench --tp 2 --iters 0
"$cli" bench --tp 2 --m 1,5 --iters 2 --warmup 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
if grep -qF "needs 2 CUDA GPUs" "$tmp/err"; then
    if [ "$rc" -eq 1 ]; then pass; else fail "bench --tp 2 refused with exit $rc (want 1)"; fi
    has err "blockfp8 bench: --tp 2 needs 2 CUDA GPUs in this host and NCCL (libnccl.so.2); missing: "
    empty out
else
    if [ "$rc" -eq 0 ]; then pass; else fail "bench --tp 2 on this host: exit $rc"; fi
    has out "mlp.down        row          5"
    lacks out "FAIL"
fi

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
