#!/usr/bin/env python3
"""Times DeepGEMM's fp8_gemm_nt and torch's block-scaled _scaled_mm on the DeepSeek-R1 table, for comparison with
`blockfp8 bench` in the same run, and (--baselines ...,blockfp8) blockfp8 itself in the same process on the same
operands.

    python3 bench/deepgemm_baseline.py --json OUT.json [--baselines deepgemm,scaled_mm,blockfp8] [--l2 clean|dirty]
                                       [--m 1,16,...] [--shapes NxK,...] [--iters 50] [--warmup 5]

Three baselines, each skipped with a message when this machine cannot run it (the script then exits 0):
- deepgemm: DeepGEMM's dense Hopper kernel, `deep_gemm.fp8_gemm_nt((a, sfa), (w, sfw), y)`, when `deep_gemm` can be
  imported. The activation scales are handed over in the MN-major, TMA-aligned layout it reads (so it runs no
  layout kernel inside the timed call), the weight scales row-major, bf16 out. Nothing of DeepGEMM is in this
  repository: bring and build it on the machine.
- scaled_mm: cuBLASLt's block-scaled GEMM as torch calls it, `torch._scaled_mm(a, w.t(), scale_a, scale_b)` with
  1x128 activation scales (outer-dim-major) and 128x128 weight scales (their rows 16-byte aligned, as newer torch
  requires). cuBLASLt refuses M % 4 != 0, and torch passes that on, so the operands are padded to round_up(M, 4)
  rows before timing, as in the anchor of bench/data/anchors-h200-2026-11-30.csv: records "torch_scaled_mm". Where M % 4 != 0 the same call is
  also timed with the copy of A into the padded buffer that a caller has to make: "torch_scaled_mm_pad" (the
  output needs no copy: its first M rows are a view). blockfp8's cublaslt backend pays that padding inside its call,
  so it is the like-for-like record there.
- blockfp8: the Python package's `blockfp8.fp8_gemm_nt` (DeepGEMM's calling convention, the same operands and scale
  layouts as DeepGEMM's call) three ways: "blockfp8_hopper" and "blockfp8_cublaslt" under the strict policy for that
  backend, "blockfp8_auto" under the default dispatcher. A backend that cannot run a cell says n/a with the reason.
  Needs the package importable (PYTHONPATH=python after `python3 setup.py build_ext --inplace`).

Timing mirrors cli_cuda_time (tools/cuda_timer.c), the method of `blockfp8 bench`: --warmup untimed
calls, then before each of --iters timed calls the L2 is flushed by reading (clean, bench's default) or writing
(dirty) twice its size, the GPU spins ~100 us so that the Python launch is enqueued before the start event, CUDA
events around the call; the median. A cell's methods are timed interleaved (bench/gpu_timer.py), so that all meet
the same conditions. Each cell's output is checked against an fp32 product of the dequantized operands (relative
Frobenius error under 1e-2 for bf16 output) before it is timed. Records are those of
`blockfp8 bench --json` (backend, m, n, k, out_dtype, median_us, tflops, gbs) plus config, rel_err and l2 (and, for
blockfp8_auto, auto_choice: the backend its untimed call ran, from blockfp8.stats()), so that
scripts/compare-anchors.py BENCH_JSON --against OUT.json --against-backend torch_scaled_mm (or deepgemm) compares
them with blockfp8's records of the same run.
"""
import argparse
import json
import math
import sys

try:
    import torch
    from gpu_timer import Timer  # bench/gpu_timer.py: the method of blockfp8 bench
except ImportError as e:  # nothing can be timed without it: say so and leave (exit status 0)
    torch = None
    TORCH_MISSING = f"torch cannot be imported ({e})"

DSR1 = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (36864, 7168), (7168, 18432), (4096, 7168),
        (7168, 2048)]
BLOCK = 128  # the quantization block: 1x128 activation groups, 128x128 weight blocks
E4M3_MAX = 448.0


def round_up(x, m):
    return (x + m - 1) // m * m


def quantize_act(x):
    """1x128 groups along K (K a multiple of 128): s = max(amax, 1e-10) / 448, q = e4m3(x / s)."""
    m, k = x.shape
    g = x.view(m, k // BLOCK, BLOCK)
    s = (g.abs().amax(dim=2).clamp(min=1e-10) / E4M3_MAX)
    q = (g / s.unsqueeze(2)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(m, k)
    return q, s.contiguous()


def quantize_weight(w):
    """128x128 blocks; a partial last row block counts only the rows that exist (the zero padding cannot raise an
    amax)."""
    n, k = w.shape
    nb = (n + BLOCK - 1) // BLOCK
    wp = torch.zeros(nb * BLOCK, k, device=w.device, dtype=w.dtype)
    wp[:n] = w
    g = wp.view(nb, BLOCK, k // BLOCK, BLOCK)
    s = g.abs().amax(dim=(1, 3)).clamp(min=1e-10) / E4M3_MAX
    q = (g / s[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(nb * BLOCK, k)[:n]
    return q.contiguous(), s.contiguous()


def reference(a, sa, w, sw):
    """fp32 product of the dequantized operands (TF32 off)."""
    n = w.shape[0]
    a_f = a.float() * sa.repeat_interleave(BLOCK, dim=1)
    w_f = w.float() * sw.repeat_interleave(BLOCK, dim=0)[:n].repeat_interleave(BLOCK, dim=1)
    return a_f @ w_f.t()


def rel_err(y, ref):
    return (torch.linalg.norm(y.float() - ref) / torch.linalg.norm(ref)).item()


def mn_major(s, ld):
    """[rows, kb] scales stored kb-major with leading dimension ld >= rows: element (r, j) at j * ld + r."""
    rows, kb = s.shape
    out = torch.empty(kb, ld, device=s.device, dtype=s.dtype).t()[:rows]
    out.copy_(s)
    return out


class ScaledMM:
    """torch._scaled_mm on operands padded to a multiple of 4 rows. make() finds the weight-scale stride and the
    calling convention this torch accepts; False (with .error) when it has no block-scaled call."""

    name = "torch_scaled_mm"

    def __init__(self, m, a, sa, w, sw):
        self.m, self.mp = m, round_up(m, 4)
        k = a.shape[1]
        self.a_src = a
        self.a_pad = torch.zeros(self.mp, k, device="cuda", dtype=a.dtype)
        self.a_pad[:m] = a
        sa_pad = torch.zeros(self.mp, sa.shape[1], device="cuda", dtype=torch.float32)
        sa_pad[:m] = sa
        self.sa = mn_major(sa_pad, self.mp)  # outer-dim-major, leading dimension exactly M as posed
        self.w_t = w.t()  # [K, N] column-major: what _scaled_mm takes as mat2
        # 128x128 scales: rows of ceil(K/128) with a stride rounded up to 4 (16 bytes), which newer torch requires;
        # older torch wanted the stride ceil(K/128) itself (the same tensor whenever it is a multiple of 4).
        kb = sw.shape[1]
        sw_pad = torch.zeros(sw.shape[0], round_up(kb, 4), device="cuda", dtype=torch.float32)
        sw_pad[:, :kb] = sw
        self.sw_candidates = [sw_pad[:, :kb].t(), sw.t()]
        self.sw_t = None
        self.use_out = True
        self.y = torch.empty(self.mp, w.shape[0], device="cuda", dtype=torch.bfloat16)
        self.error = None

    def call(self):
        if self.use_out:
            torch._scaled_mm(self.a_pad, self.w_t, scale_a=self.sa, scale_b=self.sw_t, out_dtype=torch.bfloat16,
                             out=self.y)
        else:
            self.y = torch._scaled_mm(self.a_pad, self.w_t, scale_a=self.sa, scale_b=self.sw_t,
                                      out_dtype=torch.bfloat16)

    def call_with_pad(self):
        self.a_pad[:self.m].copy_(self.a_src)
        self.call()

    def output(self):
        return self.y[:self.m]

    def make(self):
        errors = []
        for use_out in (True, False):
            for cand in self.sw_candidates:
                self.use_out, self.sw_t = use_out, cand
                try:
                    self.call()
                    torch.cuda.synchronize()
                    return True
                except (RuntimeError, TypeError, AttributeError) as e:
                    errors.append(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        self.error = "; ".join(dict.fromkeys(errors))
        return False


class DeepGEMMCall:
    """A call in DeepGEMM's convention, fn((a, sfa), (w, sfw), y): DeepGEMM's own, or blockfp8's. The activation
    scales are handed over MN-major and TMA-aligned (16-byte columns), what DeepGEMM reads, so that it runs no layout
    kernel inside the timed call."""

    def __init__(self, name, fn, m, a, sa, w, sw):
        self.name, self.fn = name, fn
        self.a, self.w, self.sw = a, w, sw
        self.sa = mn_major(sa, round_up(m, 4))
        self.y = torch.empty(m, w.shape[0], device="cuda", dtype=torch.bfloat16)

    def call(self):
        self.fn((self.a, self.sa), (self.w, self.sw), self.y)

    def output(self):
        return self.y


def blockfp8_call(lib, backend):
    """blockfp8.fp8_gemm_nt under the strict policy for `backend`, or under the default dispatcher (None)."""
    if backend is None:
        return lib.fp8_gemm_nt

    def call(a, b, y):
        with lib.policy("strict", backend):
            lib.fp8_gemm_nt(a, b, y)
    return call


def backend_that_ran(before, after):
    """The one backend whose call count grew between two blockfp8.stats()["calls"], or None: the dispatcher's
    choice for a call, so that auto can be judged by the time of the backend it picked (its strict run), apart from
    the noise between two timings of one kernel."""
    grew = [b for b, n in after.items() if n > before.get(b, 0)]
    return grew[0] if len(grew) == 1 else None


def load_blockfp8():
    """The blockfp8 package with its CUDA backends, or (None, why)."""
    try:
        import blockfp8
    except Exception as e:  # noqa: BLE001 - any failure to import means "not available here"
        return None, f"blockfp8 cannot be imported ({type(e).__name__}: {e})"
    ok, why = blockfp8.cuda_available()
    if not ok:
        return None, f"blockfp8 has no CUDA backend here ({why})"
    return blockfp8, f"blockfp8 {getattr(blockfp8, '__version__', '?')}"


def load_deepgemm():
    """DeepGEMM's dense FP8 entry point, or (None, why)."""
    try:
        import deep_gemm
    except Exception as e:  # noqa: BLE001 - any failure to import means "not available here"
        return None, f"deep_gemm cannot be imported ({type(e).__name__}: {e})"
    for name in ("fp8_gemm_nt", "gemm_fp8_fp8_bf16_nt"):
        fn = getattr(deep_gemm, name, None)
        if fn is not None:
            return fn, f"deep_gemm {getattr(deep_gemm, '__version__', '?')} {name}"
    return None, "deep_gemm has neither fp8_gemm_nt nor gemm_fp8_fp8_bf16_nt"


def write_json(path, records):
    with open(path, "w") as f:
        json.dump(records, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--baselines", default="deepgemm,scaled_mm",
                    help="comma list of deepgemm, scaled_mm, blockfp8")
    ap.add_argument("--l2", choices=["clean", "dirty"], default="clean")
    ap.add_argument("--m", default="1,16,64,128,512,4096")
    ap.add_argument("--shapes", help="N x K pairs (default: the eight DeepSeek-R1 layers)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0x7C1)
    a = ap.parse_args()
    wanted = [b for b in a.baselines.split(",") if b]
    if not wanted or any(b not in ("deepgemm", "scaled_mm", "blockfp8") for b in wanted):
        sys.exit(f"deepgemm_baseline: --baselines {a.baselines!r}: expected a list of deepgemm, scaled_mm, blockfp8")
    try:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in a.shapes.split(",")] if a.shapes else DSR1
    except ValueError:
        sys.exit(f"deepgemm_baseline: --shapes {a.shapes!r}: expected N x K pairs such as 2112x7168,7168x2048")
    if any(len(s) != 2 or s[0] <= 0 or s[1] <= 0 or s[1] % BLOCK for s in shapes):
        sys.exit(f"deepgemm_baseline: --shapes {a.shapes!r}: each K must be a positive multiple of {BLOCK}")
    try:
        ms = [int(x) for x in a.m.split(",")]
    except ValueError:
        ms = []
    if not ms or min(ms) <= 0:
        sys.exit(f"deepgemm_baseline: --m {a.m!r}: expected positive token counts such as 1,16,128")
    if a.iters <= 0 or a.warmup < 0:
        sys.exit("deepgemm_baseline: --iters must be positive and --warmup not negative")

    records = []
    if torch is None:
        print(f"deepgemm_baseline: {TORCH_MISSING}; nothing timed")
        write_json(a.json, records)
        return
    if not torch.cuda.is_available():
        print("deepgemm_baseline: no CUDA device; nothing timed")
        write_json(a.json, records)
        return
    dg_fn, dg_note = (None, "not asked for")
    if "deepgemm" in wanted:
        dg_fn, dg_note = load_deepgemm()
        if dg_fn is None:
            print(f"deepgemm_baseline: {dg_note}; DeepGEMM not timed")
    use_mm = "scaled_mm" in wanted
    bf8, bf8_note = (None, "not asked for")
    if "blockfp8" in wanted:
        bf8, bf8_note = load_blockfp8()
        if bf8 is None:
            print(f"deepgemm_baseline: {bf8_note}; blockfp8 not timed")
    if dg_fn is None and not use_mm and bf8 is None:
        write_json(a.json, records)
        return

    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda")
    gen.manual_seed(a.seed)
    timer = Timer(a.l2)
    failures, mm_error = 0, None
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {dg_note}, {bf8_note}; L2 flushed {a.l2}, "
          f"median of {a.iters} after {a.warmup}")
    print(f"{'backend':<20} {'M':>6} {'N':>6} {'K':>6} {'median_us':>10} {'TFLOP/s':>8} {'rel_err':>9}")
    for m in ms:
        for n, k in shapes:
            x = torch.randn(m, k, device="cuda", generator=gen)
            w = torch.randn(n, k, device="cuda", generator=gen) * 0.02
            qa, sa = quantize_act(x)
            qw, sw = quantize_weight(w)
            ref = reference(qa, sa, qw, sw)
            runs = []
            if dg_fn is not None:
                runs.append((DeepGEMMCall("deepgemm", dg_fn, m, qa, sa, qw, sw), "call", "deepgemm", dg_note))
            if use_mm and mm_error is None:
                mm = ScaledMM(m, qa, sa, qw, sw)
                if not mm.make():
                    mm_error = mm.error
                    print(f"deepgemm_baseline: torch {torch.__version__} has no block-scaled _scaled_mm here "
                          f"({mm_error}); torch not timed")
                else:
                    note = f"torch {torch.__version__} _scaled_mm, M padded to {mm.mp}"
                    runs.append((mm, "call", ScaledMM.name, note))
                    if m % 4:
                        runs.append((mm, "call_with_pad", ScaledMM.name + "_pad", note + " inside the call"))
            for backend in (("hopper", "cublaslt", None) if bf8 is not None else ()):
                name = "blockfp8_" + (backend or "auto")
                obj = DeepGEMMCall(name, blockfp8_call(bf8, backend), m, qa, sa, qw, sw)
                runs.append((obj, "call", name, bf8_note + (f" strict {backend}" if backend else " auto")))
            auto_choice = None
            timed = []  # (fn, name, note, rel_err) of the runs that ran and matched the reference
            for obj, method, name, note in runs:
                fn = getattr(obj, method)
                obj.output().fill_(float("nan"))  # poison: every element must be written
                try:
                    before = bf8.stats()["calls"] if name == "blockfp8_auto" else None
                    fn()  # DeepGEMM compiles its kernel for the shape here
                    torch.cuda.synchronize()
                    if before is not None:
                        auto_choice = backend_that_ran(before, bf8.stats()["calls"])
                except (RuntimeError, AssertionError) as e:  # (blockfp8.Error derives from RuntimeError)
                    print(f"{name:<20} {m:6d} {n:6d} {k:6d} n/a: {str(e).strip().splitlines()[0]}", flush=True)
                    continue
                err = rel_err(obj.output(), ref)
                if not (math.isfinite(err) and err < 1e-2):
                    failures += 1
                    print(f"{name:<20} {m:6d} {n:6d} {k:6d} {'-':>10} {'-':>8} {err:9.2e}  WRONG", flush=True)
                    continue
                timed.append((fn, name, note, err))
            medians = timer.medians_us([fn for fn, _, _, _ in timed], a.warmup, a.iters) if timed else []
            for (fn, name, note, err), t in zip(timed, medians):
                flops = 2.0 * m * n * k
                nbytes = n * k + m * k + 2 * m * n
                print(f"{name:<20} {m:6d} {n:6d} {k:6d} {t:10.1f} {flops / t / 1e6:8.0f} {err:9.2e}", flush=True)
                rec = dict(backend=name, m=m, n=n, k=k, out_dtype="bf16", median_us=t, tflops=flops / t / 1e6,
                           gbs=nbytes / t / 1e3, config=note, rel_err=err, l2=a.l2)
                if name == "blockfp8_auto":
                    rec["auto_choice"] = auto_choice
                records.append(rec)
            del runs, x, w, qa, sa, qw, sw, ref
            write_json(a.json, records)  # after every cell: a run cut short keeps what it measured
    if failures:
        print(f"deepgemm_baseline: {failures} cells missed the fp32 reference", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
