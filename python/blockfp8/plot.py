"""python -m blockfp8.plot BENCH.json [--out BENCH.png]: draws the table `blockfp8 bench --json` writes.

One column per layer shape (N x K); rows: the time per call against the floor, the bandwidth achieved (TB/s)
against the memory roof, the compute achieved (TFLOP/s) against the FP8 peak; x is M (tokens). Every backend of
the file is a line, the baseline (cublaslt on cuda, openblas on cpu) dashed beside them. The floor is the larger of
the bytes that must move (N*K + M*K + 2*M*N, the floor of bench/data/README.md) at the roof and 2*M*N*K at the peak; on
cuda files the H200's 4.25 TB/s and 1979 TFLOP/s (dense FP8) are the defaults, elsewhere give --bandwidth and
--peak or the floors are left out. Needs matplotlib (pip install matplotlib)."""
import argparse
import collections
import importlib.util
import json
import os
import statistics
import sys

CUDA_BACKENDS = {"hopper", "cublaslt", "cuda_generic"}
BASELINES = ("cublaslt", "openblas")
H200_TBS, H200_TFLOPS = 4.25, 1979.0


def load(path):
    """The GEMM records of a bench JSON file: [{backend, m, n, k, out_dtype, median_us, ...}]."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"{path}: not a bench table (a JSON list of records)")
    need = ("backend", "m", "n", "k", "median_us")
    records = [r for r in data if isinstance(r, dict) and all(key in r for key in need)]
    if not records:
        raise ValueError(f"{path}: no GEMM records with {', '.join(need)} (is it `blockfp8 bench --json`?)")
    return records


OUT_BYTES = {"bf16": 2, "f16": 2, "fp16": 2, "bfloat16": 2, "float16": 2, "f32": 4, "fp32": 4, "float32": 4}


def table(records, out_dtype=None):
    """{(n, k): {backend: {m: (median_us, TB/s, TFLOP/s)}}}, duplicates (several runs) reduced to their median, for
    one output dtype (the baseline's records, fp32 for openblas, are kept whatever their dtype); and that dtype."""
    dtypes = collections.Counter(r.get("out_dtype") for r in records if r["backend"] not in BASELINES)
    if out_dtype is None and dtypes:
        out_dtype = dtypes.most_common(1)[0][0]
    cells = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
    for r in records:
        if r["backend"] not in BASELINES and out_dtype is not None and r.get("out_dtype") != out_dtype:
            continue
        us = float(r["median_us"] or 0)
        if us <= 0:
            continue
        m, n, k = r["m"], r["n"], r["k"]
        # The bench's own figures where it wrote them, else the bytes and flops of the floor (bench/data/README.md).
        out_bytes = OUT_BYTES.get(str(r.get("out_dtype")), 2)
        tbs = r["gbs"] / 1000 if "gbs" in r else (n * k + m * k + out_bytes * m * n) / us * 1e-6
        tflops = r["tflops"] if "tflops" in r else 2.0 * m * n * k / us * 1e-6
        cells[(n, k)][r["backend"]][m].append((us, tbs, tflops))
    med = lambda rows, i: statistics.median(row[i] for row in rows)  # noqa: E731
    return {shape: {b: {m: (med(v, 0), med(v, 1), med(v, 2)) for m, v in sorted(ms.items())} for b, ms in bs.items()}
            for shape, bs in sorted(cells.items())}, out_dtype


def floor_us(m, n, k, out_bytes, tbs, tflops):
    times = []
    if tbs:
        times.append((n * k + m * k + out_bytes * m * n) / (tbs * 1e12) * 1e6)
    if tflops:
        times.append(2.0 * m * n * k / (tflops * 1e12) * 1e6)
    return max(times) if times else None


def plot(records, out, title="", tbs=None, tflops=None, out_dtype=None):
    """Draws the records into the PNG `out`; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    cells, out_dtype = table(records, out_dtype)
    if not cells:
        raise ValueError("no records to draw")
    out_bytes = OUT_BYTES.get(str(out_dtype), 2)
    backends = sorted({b for bs in cells.values() for b in bs}, key=lambda b: (b in BASELINES, b))
    colors = {b: plt.get_cmap("tab10")(i % 10) for i, b in enumerate(backends)}
    cols = len(cells)
    fig, axes = plt.subplots(3, cols, figsize=(3.0 * cols + 1, 9), squeeze=False)
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for col, ((n, k), per_backend) in enumerate(cells.items()):
        ax_t, ax_bw, ax_fl = axes[0][col], axes[1][col], axes[2][col]
        ms_all = sorted({m for ms in per_backend.values() for m in ms})
        for b in backends:
            ms = per_backend.get(b)
            if not ms:
                continue
            xs = list(ms)
            style = dict(color=colors[b], marker="o", markersize=3, label=b,
                         linestyle="--" if b in BASELINES else "-", linewidth=1.2)
            for row, ax in enumerate((ax_t, ax_bw, ax_fl)):
                ax.plot(xs, [ms[m][row] for m in xs], **style)
        floors = [floor_us(m, n, k, out_bytes, tbs, tflops) for m in ms_all]
        if floors and floors[0] is not None:
            ax_t.plot(ms_all, floors, color="black", linestyle=":", linewidth=1, label="floor")
        if tbs:
            ax_bw.axhline(tbs, color="black", linestyle="-.", linewidth=0.8, label=f"memory roof {tbs:g} TB/s")
        if tflops:
            ax_fl.axhline(tflops, color="black", linestyle="-.", linewidth=0.8, label=f"FP8 peak {tflops:g} TFLOP/s")
        ax_t.set_title(f"N={n} K={k}", fontsize=9)
        for ax in (ax_t, ax_bw, ax_fl):
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(FixedLocator(ms_all))
            ax.xaxis.set_major_formatter(plain)
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.grid(True, which="major", linewidth=0.3)
            ax.tick_params(labelsize=7)
        for ax in (ax_t, ax_fl):
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax_bw.set_ylim(bottom=0)
        ax_fl.set_xlabel("M (tokens)", fontsize=8)
    axes[0][0].set_ylabel("time per call (µs)", fontsize=8)
    axes[1][0].set_ylabel("TB/s", fontsize=8)
    axes[2][0].set_ylabel("TFLOP/s", fontsize=8)
    handles = {}
    for row in axes:
        for ax in row:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
    fig.suptitle(f"{title}: output {out_dtype}" if title else f"output {out_dtype}", fontsize=10, y=0.99)
    fig.legend(list(handles.values()), list(handles), loc="upper center", bbox_to_anchor=(0.5, 0.965),
               ncol=min(len(handles), 8), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m blockfp8.plot", description=__doc__.splitlines()[0])
    parser.add_argument("json", help="a file written by `blockfp8 bench --json`")
    parser.add_argument("--out", help="the PNG to write (default: the JSON's name with .png)")
    parser.add_argument("--bandwidth", type=float, help="memory roof in TB/s (default 4.25 on cuda files)")
    parser.add_argument("--peak", type=float, help="compute peak in TFLOP/s (default 1979 on cuda files)")
    parser.add_argument("--out-dtype", help="the output dtype to draw where a file has several (default: the most "
                        "common)")
    opts = parser.parse_args(argv)
    if importlib.util.find_spec("matplotlib") is None:
        print("blockfp8.plot: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return 2
    try:
        records = load(opts.json)
    except (OSError, ValueError) as e:
        print(f"blockfp8.plot: {e}", file=sys.stderr)
        return 1
    cuda = any(r["backend"] in CUDA_BACKENDS for r in records)
    tbs = opts.bandwidth if opts.bandwidth is not None else (H200_TBS if cuda else None)
    tflops = opts.peak if opts.peak is not None else (H200_TFLOPS if cuda else None)
    out = opts.out or os.path.splitext(opts.json)[0] + ".png"
    plot(records, out, title=os.path.basename(opts.json), tbs=tbs, tflops=tflops, out_dtype=opts.out_dtype)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
