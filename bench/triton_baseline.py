#!/usr/bin/env python3
"""Times a Triton block-FP8 GEMM on the DeepSeek-R1 table, for comparison with `blockfp8 bench` in the same run.

    python3 bench/triton_baseline.py --json OUT.json [--l2 dirty|clean] [--m 1,16,...] [--shapes NxK,...]
                                     [--iters 20] [--warmup 3] [--config BM16_BN64_w4_s3]

The portable CUDA kernel (cuda_generic) is held to the block-FP8 Triton kernel that SGLang and vLLM fall back to. The
anchor figures of that kernel (bench/data/anchors-h200-2026-11-30.csv, column triton_us: best of a small config sweep)
come from another run with a flush we cannot inspect, so this script measures such a kernel next to blockfp8 on the
same GPU. Shapes and token counts default to the DeepSeek-R1 table of bench/data (dsr1_shapes.csv, dsr1_m.csv).

The kernel is written here (not copied from an engine), in the form those engines use: one program per BM x BN output
tile in grouped order; per 128-deep K block, an fp8 tl.dot into fp32 (wgmma on Hopper), multiplied by the block's
activation scales (per row) and weight scale (per 128 columns) and added to an fp32 accumulator; bf16 out. No split-K
and no swap-AB, as in the engines' kernel. Each cell takes the fastest of a config sweep (BM, BN, warps, stages),
which is also how the anchor column was made.

Timing mirrors the timer of `blockfp8 bench --device cuda`: before each timed call the L2 is flushed by
writing (dirty, the default: the same as triton.testing.do_bench's zero_()) or reading (clean) twice its size; CUDA
events around the call; the median of --iters calls after --warmup. One difference: a ~100 µs GPU spin between the
flush and the first event, so that the Python launch (tens of µs of host time, where blockfp8's C launch takes a few)
is enqueued before the GPU reaches the event and is not timed. Every cell's output is checked against an fp32
product of the dequantized operands (relative Frobenius error, tolerance 1e-2 for bf16 output) before it is timed.
Records are those of `blockfp8 bench --json` with backend "triton" and the winning config.
"""
import argparse
import csv
import json
import math
import os
import sys

import torch
import triton
import triton.language as tl
from gpu_timer import Timer  # bench/gpu_timer.py: the method of blockfp8 bench

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def dsr1_table():
    """The DeepSeek-R1 table of bench/data: [(N, K)] of its eight layers, and its token counts as "1,16,..."."""
    with open(os.path.join(DATA, "dsr1_shapes.csv"), newline="", encoding="utf-8") as f:
        shapes = [(int(r["n"]), int(r["k"])) for r in csv.DictReader(f)]
    with open(os.path.join(DATA, "dsr1_m.csv"), newline="", encoding="utf-8") as f:
        ms = ",".join(r["m"] for r in csv.DictReader(f))
    return shapes, ms


BLOCK = 128  # the quantization block: 1x128 activation groups, 128x128 weight blocks


@triton.jit
def blockfp8_gemm_kernel(a_ptr, sa_ptr, w_ptr, sw_ptr, y_ptr, M, N, K, KB,
                         BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """y[M, N] = sum_kb sa[m, kb] * sw[n // 128, kb] * (a[m, kb-block] . w[n, kb-block]); a [M, K], w [N, K] e4m3
    row-major, sa [M, KB] and sw [ceil(N / 128), KB] fp32 row-major, y [M, N] bf16. K is a multiple of 128."""
    BK: tl.constexpr = 128
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    # Grouped order: GROUP_M row tiles walk the column tiles together, so their weight tiles are reused from L2.
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    # Rows and columns past the matrix are wrapped onto real ones for the loads (no masks in the loop) and
    # dropped at the store.
    load_m = offs_m % M
    load_n = offs_n % N
    a_ptrs = a_ptr + load_m[:, None] * K + offs_k[None, :]
    w_ptrs = w_ptr + load_n[None, :] * K + offs_k[:, None]
    sa_ptrs = sa_ptr + load_m * KB
    sw_ptrs = sw_ptr + (load_n // 128) * KB

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, KB):
        a = tl.load(a_ptrs)
        w = tl.load(w_ptrs)
        sa = tl.load(sa_ptrs + kb)
        sw = tl.load(sw_ptrs + kb)
        acc += tl.dot(a, w) * sa[:, None] * sw[None, :]
        a_ptrs += BK
        w_ptrs += BK

    y_ptrs = y_ptr + offs_m[:, None] * N + offs_n[None, :]
    tl.store(y_ptrs, acc.to(tl.bfloat16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def config_name(cfg):
    return "BM{BM}_BN{BN}_w{num_warps}_s{num_stages}".format(**cfg)


def parse_config(name):
    """BM16_BN64_w4_s3 -> the config dict (the names this script prints)."""
    try:
        bm, bn, w, s = name.split("_")
        cfg = dict(BM=int(bm[2:]), BN=int(bn[2:]), GROUP_M=8, num_warps=int(w[1:]), num_stages=int(s[1:]))
    except ValueError:
        cfg = None
    if cfg is None or config_name(cfg) != name:
        sys.exit(f"triton_baseline: --config {name!r}: expected a name like BM16_BN64_w4_s3")
    return cfg


def configs(m):
    """The sweep: row tiles that fit M (tl.dot needs at least 16), 64/128-wide column tiles, warps, stages."""
    bms = [16, 32, 64] if m <= 64 else [64, 128]
    bms = [b for b in bms if b <= max(16, triton.next_power_of_2(m))] or [16]
    for bm in bms:
        for bn in (64, 128):
            for warps in (4, 8):
                for stages in (3, 4):
                    yield dict(BM=bm, BN=bn, GROUP_M=8, num_warps=warps, num_stages=stages)


def launch(cfg, a, sa, w, sw, y):
    m, k = a.shape
    n = w.shape[0]
    grid = (triton.cdiv(m, cfg["BM"]) * triton.cdiv(n, cfg["BN"]),)
    blockfp8_gemm_kernel[grid](a, sa, w, sw, y, m, n, k, k // BLOCK, BM=cfg["BM"], BN=cfg["BN"],
                               GROUP_M=cfg["GROUP_M"], num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


def operands(m, n, k, gen):
    """Random e4m3 operands with random positive fp32 scales (never zeros: they would hide unwritten outputs)."""
    kb = k // BLOCK
    a = (torch.randn(m, k, device="cuda", generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda", generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    sa = torch.rand(m, kb, device="cuda", generator=gen) * 1e-3 + 1e-4
    sw = torch.rand((n + BLOCK - 1) // BLOCK, kb, device="cuda", generator=gen) * 1e-3 + 1e-4
    return a, sa, w, sw


def reference(a, sa, w, sw):
    """fp32 product of the dequantized operands (TF32 off)."""
    n = w.shape[0]
    a_f = a.float() * sa.repeat_interleave(BLOCK, dim=1)
    w_f = w.float() * sw.repeat_interleave(BLOCK, dim=0)[:n].repeat_interleave(BLOCK, dim=1)
    return a_f @ w_f.t()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--l2", choices=["dirty", "clean"], default="dirty")
    dsr1_shapes, dsr1_ms = dsr1_table()
    ap.add_argument("--m", default=dsr1_ms)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--shapes", help="N x K pairs (default: the eight DeepSeek-R1 layers)")
    ap.add_argument("--config", help="time this config only, no sweep (e.g. BM16_BN64_w4_s3)")
    ap.add_argument("--sweep-iters", type=int, default=7, help="timed calls per config during the sweep")
    a = ap.parse_args()
    try:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in a.shapes.split(",")] if a.shapes else dsr1_shapes
    except ValueError:
        sys.exit(f"triton_baseline: --shapes {a.shapes!r}: expected N x K pairs such as 2112x7168,7168x2048")
    if any(len(s) != 2 or s[0] <= 0 or s[1] <= 0 or s[1] % BLOCK for s in shapes):
        sys.exit(f"triton_baseline: --shapes {a.shapes!r}: each K must be a positive multiple of {BLOCK}")
    forced = parse_config(a.config) if a.config else None
    try:
        ms = [int(x) for x in a.m.split(",")]
    except ValueError:
        ms = []
    if not ms or min(ms) <= 0:
        sys.exit(f"triton_baseline: --m {a.m!r}: expected positive token counts such as 1,16,128")
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0x7C1)
    timer = Timer(a.l2)
    records, failures = [], 0
    print(f"# triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"L2 flushed {a.l2}, median of {a.iters}")
    print(f"{'M':>6} {'N':>6} {'K':>6} {'median_us':>10} {'TFLOP/s':>8} {'rel_err':>9}  config")
    for m in ms:
        for n, k in shapes:
            ops = operands(m, n, k, gen)
            y = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            best = None
            for cfg in [forced] if forced else configs(m):
                try:
                    t = timer.median_us(lambda: launch(cfg, *ops, y), 1, a.sweep_iters)
                except triton.runtime.errors.OutOfResources:
                    continue  # e.g. shared memory for BM=BN=128 at 4 stages: the config does not exist
                if best is None or t < best[0]:
                    best = (t, cfg)
            if best is None:
                print(f"{m:6d} {n:6d} {k:6d} no config ran", flush=True)
                failures += 1
                continue
            cfg = best[1]
            y.fill_(float("nan"))  # poison: every element must be written
            launch(cfg, *ops, y)
            ref = reference(*ops)
            err = (torch.linalg.norm(y.float() - ref) / torch.linalg.norm(ref)).item()
            ok = math.isfinite(err) and err < 1e-2
            failures += not ok
            t = timer.median_us(lambda: launch(cfg, *ops, y), a.warmup, a.iters)
            flops = 2.0 * m * n * k
            nbytes = n * k + m * k + 2 * m * n
            name = config_name(cfg)
            print(f"{m:6d} {n:6d} {k:6d} {t:10.1f} {flops / t / 1e6:8.0f} {err:9.2e}  {name}"
                  + ("" if ok else "  WRONG"), flush=True)
            records.append(dict(backend="triton", m=m, n=n, k=k, out_dtype="bf16", median_us=t,
                                tflops=flops / t / 1e6, gbs=nbytes / t / 1e3, config=name, rel_err=err,
                                l2=a.l2))
            del ops, y, ref
    with open(a.json, "w") as f:
        json.dump(records, f, indent=1)
    if failures:
        print(f"triton_baseline: {failures} cells failed (no config ran, or the output missed the fp32 reference)",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
