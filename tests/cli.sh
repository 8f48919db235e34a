#!/bin/sh
# End-to-end tests of the blockfp8 CLI: --help everywhere, usage errors (exit 2), runtime errors (exit 1 with
# "blockfp8 <cmd>: ..."), missing and malformed files (never a crash), quantize -> linear on real files, explain,
# demo and check. Input files are written by a small python3 script (standard library only).
# Usage: sh tests/cli.sh BUILD_DIR     Closing line: "cli: N passed, N failed"; exit 1 on any failure.
set -u
build=${1:-build}
cli=$build/blockfp8
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bfp8-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
passed=0
failed=0

pass() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL: $*"
    [ -s "$tmp/err" ] && sed -n '1,6s/^/    stderr: /p' "$tmp/err"
    return 0
}
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
    shape_mismatch bad_dtype truncated_data; do
    expect 1 "$cli" quantize --kind act --in "$tmp/$bad.safetensors" --out "$tmp/o.safetensors"
    has err "blockfp8 quantize: $tmp/$bad.safetensors: "
    expect 1 "$cli" linear --weights "$tmp/$bad.safetensors" --weight t --in "$tmp/input.safetensors" --input x \
        --out "$tmp/y.safetensors"
    has err "blockfp8 linear: "
done
[ ! -e "$tmp/o.safetensors" ] && pass || fail "a failed quantize left an output file"

# --- quantize ----------------------------------------------------------------------------------------------------
expect 1 "$cli" quantize --kind weight --in "$tmp/model.safetensors" --out "$tmp/model.safetensors"
has err "refusing to overwrite the input"
ln -s "$tmp/model.safetensors" "$tmp/link.safetensors"
expect 1 "$cli" quantize --kind weight --in "$tmp/model.safetensors" --out "$tmp/link.safetensors"
has err "refusing to overwrite the input"
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
has err "want 1-D [130]"
expect 1 lin --bias missing_bias
has err "no bias tensor 'missing_bias'"
expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input x_narrow \
    --out "$tmp/y.safetensors"
has err "K=299"
expect 1 "$cli" linear --weights "$tmp/wq.safetensors" --weight w --in "$tmp/input.safetensors" --input x_3d \
    --out "$tmp/y.safetensors"
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
expect 0 env BFP8_LOG=dispatch "$cli" linear --weights "$tmp/wq.safetensors" --weight w \
    --in "$tmp/input.safetensors" --input x --out "$tmp/y.safetensors"
expect 1 env BFP8_BACKEND=no_such_backend "$cli" linear --weights "$tmp/wq.safetensors" --weight w \
    --in "$tmp/input.safetensors" --input x --out "$tmp/y.safetensors"
has err "BFP8_BACKEND"

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
expect 1 "$cli" explain --m 16 --n 2112 --k 7168 --device cuda --arch 90 --gemm --backend cpu --strict
has out "problem: device=cuda m=16 n=2112 k=7168 out=bf16 scales=fp32 bias=none arch=sm_90"
lacks out "acts=prior-kernel"
# On cuda the measured table's cell ranks it (a DeepSeek-R1 cell), or the priorities where none covers it.
has out "ranking: measured: sm_90 bf16 N=2112 K=7168 M=16, run "
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
has err "no tensor 'nope'"
expect 1 "$cli" shard --ranks 5 --mode column --n 2112 --k 7168
has err "does not split evenly"

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
