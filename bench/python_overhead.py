#!/usr/bin/env python3
"""Host overhead of the Python binding over the C call, and the time to the first result of a new shape.

Overhead (at M=1 by default, on the DeepSeek-R1 layer shapes): for apply_w8a8_block_fp8_linear, fp8_gemm_nt and the
grouped calls m_grouped_fp8_gemm_nt_masked (G experts of max_m = M rows, every count M: a decode step) and
m_grouped_fp8_gemm_nt_contiguous (G * M rows, M per expert), the host time of one call, from entering the function to
its return (the GPU work is queued, not waited for), median of --iters calls each after a synchronize so that no
launch waits for queue space:
  - python:   the public function on torch tensors (eager: the fast lane of _native.c where it takes the call, else
              the Python path calling the op's implementation directly);
  - torch.ops: the same through torch.ops.blockfp8 (the path a torch.compile graph takes; BFP8_TORCH_OPS=1);
  - numpy:    (--device cpu) the public function on numpy arrays;
  - C:        the extension's call into libblockfp8 with every buffer made beforehand (bfp8_gemm, the activation
              quantization + bfp8_gemm of the linear call, bfp8_grouped_gemm): the library's own host time. The
              linear call's activation scratch is the call's own on the host (as the Python path's), torch's on CUDA;
  - deep_gemm: DeepGEMM's fp8_gemm_nt on the same operands, where the deep_gemm package imports.
The overhead is python - C (numpy - C for numpy_overhead_us).

First result: in a fresh process per case, the wall time from the call to the synchronized result for the first
shape the process sees, then for a second new shape, against the steady-state time of the same call.

Usage: python3 bench/python_overhead.py [--device cuda|cpu] [--m 1] [--shapes dsr1|NxK,...] [--experts 8]
                                        [--iters 200] [--json FILE] [--no-first]
The figures of issue 29 (CPU tensors, tiny shapes so that the GEMM does not hide the overhead):
  python3 bench/python_overhead.py --device cpu --shapes 128x128 --iters 3000 --no-first
The variants of a call take turns in blocks of consecutive calls, so that load from elsewhere moves them alike. The
script also runs against an older tree's package (PYTHONPATH=OLD/python): an A/B of the binding on the same machine."""
import argparse
import json
import statistics
import subprocess
import sys
import time

DSR1 = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (36864, 7168), (7168, 18432), (4096, 7168),
        (7168, 2048)]


def parse_shapes(text):
    if text == "dsr1":
        return DSR1
    return [tuple(int(v) for v in s.lower().split("x")) for s in text.split(",")]


def host_times(fns, sync, iters, warmup=10, rounds=10):
    """The median host time in µs of each of fns (name -> callable) over iters calls, and the errors of those that
    cannot run. The variants take turns in `rounds` blocks of consecutive calls: each block is a hot loop, as a
    variant timed alone, and a change of load on a shared machine falls on every variant alike."""
    times, errors = {}, {}
    for name, fn in fns.items():
        try:
            fn()
            times[name] = []
        except Exception as e:  # a variant that cannot run here is reported, not fatal
            errors[name] = f"{type(e).__name__}: {e}"
    for r in range(rounds):
        for name, samples in times.items():
            fn = fns[name]
            for _ in range(warmup):
                fn()
            sync()
            for _ in range(iters * (r + 1) // rounds - iters * r // rounds):
                t0 = time.perf_counter()
                fn()
                t1 = time.perf_counter()
                samples.append((t1 - t0) * 1e6)
                sync()
    return {name: statistics.median(samples) for name, samples in times.items()}, errors


def overhead(device, m, shapes, iters, experts):
    import numpy as np
    import torch

    import blockfp8
    from blockfp8 import _native as N
    from blockfp8 import _torch_path as T

    try:
        import deep_gemm
    except Exception:  # absent, or present but unusable here
        deep_gemm = None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    dev = N.DEVICE_CUDA if device == "cuda" else N.DEVICE_CPU
    ops = torch.ops.blockfp8
    host = None
    if device == "cpu":  # numpy copies of CPU tensors: fp8 as uint8 codes, bf16 through ml_dtypes
        import ml_dtypes

        def host(t):
            if t.dtype == torch.float8_e4m3fn:
                return t.view(torch.uint8).numpy()
            if t.dtype == torch.bfloat16:
                return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
            return t.numpy()
    rows = []
    for n, k in shapes:
        x = torch.randn(m, k, dtype=torch.bfloat16, device=device)
        wq, ws = blockfp8.per_block_quant_fp8(torch.randn(n, k, device=device) / k ** 0.5)
        q, s = blockfp8.per_token_group_quant_fp8(x, column_major_scales=True, scale_tma_aligned=True)
        d = torch.empty(m, n, dtype=torch.bfloat16, device=device)
        st = torch.cuda.current_stream().cuda_stream if device == "cuda" else None
        # The linear call's scratch as the tree's Python path passes it: torch's on CUDA, the call's own on the host
        # (an older tree, run for an A/B, passes torch's everywhere).
        own_host_scratch = hasattr(N, "linear_scratch_bytes")
        if device == "cuda" or not own_host_scratch:
            scratch_bytes = N.linear_scratch_bytes(m, k) if own_host_scratch else T.scratch_size(m, k)
        else:
            scratch_bytes = 0
        scratch = torch.empty(scratch_bytes, dtype=torch.uint8, device=device)
        y = torch.empty(m, n, dtype=torch.bfloat16, device=device)
        # The experts: G weights, the masked activations [G, M, K] and the contiguous ones [G * M, K], M per expert.
        gq, gs = blockfp8.per_block_quant_fp8(torch.randn(experts, n, k, device=device) / k ** 0.5)
        xm = torch.randn(experts, m, k, dtype=torch.bfloat16, device=device)
        mq, ms = blockfp8.per_token_group_quant_fp8(xm, column_major_scales=True, scale_tma_aligned=True)
        counts = torch.full((experts,), m, dtype=torch.int32, device=device)
        dm = torch.empty(experts, m, n, dtype=torch.bfloat16, device=device)
        cq, cs = mq.view(experts * m, k), blockfp8.per_token_group_quant_fp8(
            xm.view(experts * m, k), column_major_scales=True, scale_tma_aligned=True)[1]
        idx = torch.arange(experts, dtype=torch.int32, device=device).repeat_interleave(m)
        dc = torch.empty(experts * m, n, dtype=torch.bfloat16, device=device)
        row = 1 << N.LAYOUT_ROW_MAJOR
        aligned = 1 << N.LAYOUT_MN_MAJOR_ALIGNED  # what q, s (column-major, TMA-aligned) are
        fp32 = N.SCALE_FP32
        p = {name: t.data_ptr() for name, t in dict(x=x, wq=wq, ws=ws, q=q, s=s, d=d, scratch=scratch, y=y, gq=gq,
                                                     gs=gs, mq=mq, ms=ms, counts=counts, dm=dm, cq=cq, cs=cs, idx=idx,
                                                     dc=dc).items()}
        scratch_ptr = p["scratch"] if scratch_bytes else None
        cases = {
            "apply_w8a8_block_fp8_linear": {
                "python": lambda: blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws),
                "torch.ops": lambda: ops.linear_dyn(x, wq, ws, None),
                "C": lambda: N.linear_dyn(p["x"], N.DTYPE_BF16, m, k, scratch_ptr, scratch_bytes, n, p["wq"], p["ws"],
                                          fp32, row, None, N.DTYPE_F32, p["y"], N.DTYPE_BF16, dev, st),
            },
            "fp8_gemm_nt": {
                "python": lambda: blockfp8.fp8_gemm_nt((q, s), (wq, ws), d),
                "torch.ops": lambda: ops.gemm_out(q, s, wq, ws, d),
                "C": lambda: N.gemm(m, n, k, p["q"], p["s"], fp32, aligned, p["wq"], p["ws"], fp32, row, None,
                                    N.DTYPE_F32, p["d"], N.DTYPE_BF16, dev, st),
            },
            "m_grouped_fp8_gemm_nt_masked": {
                "python": lambda: blockfp8.m_grouped_fp8_gemm_nt_masked((mq, ms), (gq, gs), dm, counts, m),
                "torch.ops": lambda: ops.grouped_gemm(mq, ms, gq, gs, dm, counts, N.GROUPED_MASKED, m),
                "C": lambda: N.grouped_gemm(N.GROUPED_MASKED, experts, m, n, k, p["mq"], p["ms"], fp32, aligned,
                                            p["counts"], m, p["gq"], p["gs"], fp32, row, p["dm"], N.DTYPE_BF16, dev,
                                            st),
            },
            "m_grouped_fp8_gemm_nt_contiguous": {
                "python": lambda: blockfp8.m_grouped_fp8_gemm_nt_contiguous((cq, cs), (gq, gs), dc, idx),
                "torch.ops": lambda: ops.grouped_gemm(cq, cs, gq, gs, dc, idx, N.GROUPED_CONTIGUOUS, 0),
                "C": lambda: N.grouped_gemm(N.GROUPED_CONTIGUOUS, experts, experts * m, n, k, p["cq"], p["cs"], fp32,
                                            aligned, p["idx"], 0, p["gq"], p["gs"], fp32, row, p["dc"], N.DTYPE_BF16,
                                            dev, st),
            },
        }
        if not hasattr(blockfp8, "m_grouped_fp8_gemm_nt_masked"):  # an older tree
            del cases["m_grouped_fp8_gemm_nt_masked"], cases["m_grouped_fp8_gemm_nt_contiguous"]
        if host is not None:  # the same calls on numpy arrays (bf16 and fp8 through ml_dtypes where it is)
            xn = host(x)
            qn, sn, wqn, wsn = (host(t) for t in (q, s, wq, ws))
            dn = host(torch.empty(m, n, dtype=torch.bfloat16))
            cases["apply_w8a8_block_fp8_linear"]["numpy"] = \
                lambda: blockfp8.apply_w8a8_block_fp8_linear(xn, wqn, [128, 128], wsn)
            cases["fp8_gemm_nt"]["numpy"] = lambda: blockfp8.fp8_gemm_nt((qn, sn), (wqn, wsn), dn)
        if host is not None and "m_grouped_fp8_gemm_nt_masked" in cases:
            mqn, msn, gqn, gsn, cqn, csn = (host(t) for t in (mq, ms, gq, gs, cq, cs))
            countsn, idxn = counts.numpy(), idx.numpy()
            dmn = host(torch.empty(experts, m, n, dtype=torch.bfloat16))
            dcn = host(torch.empty(experts * m, n, dtype=torch.bfloat16))
            cases["m_grouped_fp8_gemm_nt_masked"]["numpy"] = \
                lambda: blockfp8.m_grouped_fp8_gemm_nt_masked((mqn, msn), (gqn, gsn), dmn, countsn, m)
            cases["m_grouped_fp8_gemm_nt_contiguous"]["numpy"] = \
                lambda: blockfp8.m_grouped_fp8_gemm_nt_contiguous((cqn, csn), (gqn, gsn), dcn, idxn)
        if deep_gemm is not None and device == "cuda":
            cases["fp8_gemm_nt"]["deep_gemm"] = lambda: deep_gemm.fp8_gemm_nt((q, s), (wq, ws), d)
        for fn_name, variants in cases.items():
            # fast_lane: whether this torch offers the DLPack exchange API that _native.c's fast lane reads.
            result = {"function": fn_name, "m": m, "n": n, "k": k, "device": device, "fast_lane": T.FAST_LANE}
            if fn_name.startswith("m_grouped"):
                result["experts"] = experts
            medians, errors = host_times(variants, sync, iters)
            result.update({variant + "_us": round(t, 3) for variant, t in medians.items()})
            result.update({variant + "_error": e for variant, e in errors.items()})
            if "python_us" in result and "C_us" in result:
                result["overhead_us"] = round(result["python_us"] - result["C_us"], 3)
            if "numpy_us" in result and "C_us" in result:
                result["numpy_overhead_us"] = round(result["numpy_us"] - result["C_us"], 3)
            rows.append(result)
            print("  ".join(f"{key}={value}" for key, value in result.items()), flush=True)
    return rows


FIRST = r"""
import sys, time, json
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import blockfp8
t2 = time.perf_counter()
device, m, shapes = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
if device == "cuda":
    torch.zeros(1, device="cuda"); sync()  # the CUDA context is torch's, not the first call's
out = {"import_torch_s": t1 - t0, "import_blockfp8_s": t2 - t1, "calls": []}
for n, k in shapes:
    x = torch.randn(m, k, dtype=torch.bfloat16, device=device)
    wq = torch.randn(n, k, device=device).to(torch.float8_e4m3fn)
    ws = torch.rand((n + 127) // 128, (k + 127) // 128, device=device) * 1e-2
    sync()
    times = []
    for i in range(6):
        a = time.perf_counter()
        blockfp8.apply_w8a8_block_fp8_linear(x, wq, [128, 128], ws)
        sync()
        times.append(time.perf_counter() - a)
    out["calls"].append({"n": n, "k": k, "first_s": times[0], "steady_s": sorted(times[1:])[2]})
print(json.dumps(out))
"""


def first_result(device, m, shapes):
    """Fresh processes: each runs two new shapes in turn (the first pays the process's first use)."""
    rows = []
    for i in range(0, len(shapes) - 1, 2):
        pair = shapes[i:i + 2]
        proc = subprocess.run([sys.executable, "-c", FIRST, device, str(m), json.dumps(pair)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            continue
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        for j, call in enumerate(got["calls"]):
            row = {"function": "apply_w8a8_block_fp8_linear", "m": m, "n": call["n"], "k": call["k"],
                   "device": device, "which": "first shape of the process" if j == 0 else "a second new shape",
                   "first_call_ms": round(call["first_s"] * 1e3, 3), "steady_ms": round(call["steady_s"] * 1e3, 3),
                   "import_blockfp8_ms": round(got["import_blockfp8_s"] * 1e3, 1)}
            rows.append(row)
            print("  ".join(f"{key}={value}" for key, value in row.items()), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--shapes", default="dsr1")
    parser.add_argument("--experts", type=int, default=8, help="G of the grouped calls")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--no-first", action="store_true", help="skip the time-to-first-result runs")
    opts = parser.parse_args()
    shapes = parse_shapes(opts.shapes)
    print(f"# host time per call, M={opts.m}, {opts.device}, median of {opts.iters} (python - C = overhead)")
    rows = overhead(opts.device, opts.m, shapes, opts.iters, opts.experts)
    if not opts.no_first:
        print("# time to the first result of a new shape (fresh processes)")
        rows += first_result(opts.device, opts.m, shapes)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
