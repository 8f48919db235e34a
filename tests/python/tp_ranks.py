"""The ranks of tests/python/test_tp.py's distributed tests: the processes of one torch.distributed group, gloo on
CPU tensors (every machine) or NCCL on one GPU each (where there are two or more), each running
blockfp8.tp.ParallelLinear over subgroups of 1..world ranks against the unsharded layer.

Every process builds the same data from the seed it is given and records each failed check (scenario, message) in
OUT_DIR/rank<r>.json, so that the test reports every failure of every rank instead of the first exception. A check
never skips a collective: a rank that left one early would leave the others waiting (the test's timeout ends that)."""
import json
import os
import traceback

import numpy as np
import torch
import torch.distributed as dist

import blockfp8
from blockfp8 import tp
from oracle import BF16, BLOCK, FP8, calc_diff, from_numpy, quantize, rel_err, to_numpy

M = 5
# DeepSeek-R1 shapes scaled down, so that R = 1..4 gives aligned splits, splits that cut a 128-block (refused,
# then shared), ragged last blocks and uneven splits (refused): q_b-like, a ragged N (8.25 blocks) with UE8M0
# scales, and down_proj-like with K/4 = 576, the slice DeepSeek-R1's down_proj gets at TP32.
SHAPES = [(768, 1536, False), (1056, 1024, True), (512, 2304, False)]


def whole_layer(rng, n, k, ue8m0):
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    q, s, _ = quantize(w, BLOCK, ue8m0)
    bias = (rng.standard_normal(n) * 0.5).astype(BF16)
    return w, q.view(FP8), s, bias


class Checks:
    def __init__(self):
        self.failures = []

    def check(self, ok, scenario, msg):
        if not ok:
            self.failures.append([scenario, msg])

    def run(self, scenario, fn):
        try:
            fn()
        except Exception:  # noqa: BLE001 (recorded with its traceback; the other scenarios still run)
            self.failures.append([scenario, traceback.format_exc()])


def plan_or_shared(n, k, mode, ranks):
    """The split's share_blocks flag: False where it is aligned, True where it cuts a block, None where it is
    uneven (refused either way). The refusals carry the library's messages."""
    try:
        tp.shard_plan(n, k, mode, ranks, 0)
        return False
    except blockfp8.UnsupportedError as e:
        if "does not split evenly" in str(e):
            return None
        assert "128-wide scale blocks" in str(e) and "share_blocks=True" in str(e), str(e)
        return True


def bits(t):
    return t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t.view(torch.int32)


def same_on_every_rank(y, group, ranks):
    got = [torch.empty_like(y) for _ in range(ranks)]
    dist.all_gather(got, y.contiguous(), group=group)
    return all(torch.equal(bits(g), bits(y)) for g in got)


def layer_checks(c, rank, groups, rng, dev):
    for n, k, ue8m0 in SHAPES:
        w, q, s, bias = whole_layer(rng, n, k, ue8m0)
        x = rng.standard_normal((M, k)).astype(np.float32).astype(BF16)
        qt, st, bt, xt = (from_numpy(a, dev) for a in (q, s, bias, x))
        ref = blockfp8.Linear.from_tensors(qt, st, bias=bt)(xt)  # the unsharded layer, bf16
        exact = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
        for ranks in groups:
            if rank >= ranks:
                continue
            group = groups[ranks]
            for mode in ("column", "row"):
                name = f"{mode} N={n} K={k} R={ranks}"
                share = plan_or_shared(n, k, mode, ranks)
                if share is None:
                    continue

                def one(mode=mode, ranks=ranks, group=group, share=share, name=name):
                    layer = tp.ParallelLinear.from_tensors(qt, st, mode, group=group, share_blocks=share, bias=bt)
                    sh = layer.shard
                    assert (sh.rank, sh.ranks) == (rank, ranks), (sh.rank, sh.ranks)
                    xin = xt if mode == "column" else xt[:, sh.begin:sh.end]
                    y = layer(xin)
                    c.check(y.shape == (M, n) and y.dtype == torch.bfloat16, name, f"y {tuple(y.shape)} {y.dtype}")
                    c.check(same_on_every_rank(y, group, ranks), name, "the ranks' y differ")
                    yn = to_numpy(y).astype(np.float64)
                    if mode == "column" or ranks == 1:
                        c.check(torch.equal(bits(y), bits(ref)), name,
                                "not bit-identical to the unsharded layer")
                    elif not share:  # only the order of the fp32 sums differs
                        e = rel_err(yn, to_numpy(ref).astype(np.float64))
                        c.check(e < 8e-3, name, f"rel {e:.3g} vs the unsharded layer")
                    # Shared blocks quantize a straddling activation group per rank: still a faithful W8A8 layer.
                    cd = calc_diff(yn, exact)
                    c.check(cd < 1.5e-3, name, f"calc_diff {cd:.3g} vs the exact product")
                    if mode == "row" and ranks == 2:
                        # Two fp32 partials sum to one value in either order: y must be exactly the one rounding of
                        # p0 + p1 (a partial rounded before the sum, or a second rounding, would show).
                        parts = []
                        for r in range(2):
                            other = tp.ParallelLinear.from_tensors(qt, st, "row", r, 2, share_blocks=share, bias=bt)
                            parts.append(other.local(xt[:, other.shard.begin:other.shard.end]))
                        want = (parts[0] + parts[1]).to(torch.bfloat16)
                        c.check(torch.equal(bits(y), bits(want)), name,
                                "y is not the fp32 sum of the partials rounded once")

                c.run(name, one)


def option_checks(c, rank, groups, rng, dev):
    """Leading dimensions, output dtypes, gather_output=False, input_is_parallel=False, bias-free, and the MLP of
    an engine: gate_up column-parallel without the gather, then down row-parallel on the rank's columns."""
    n, k = 1024, 1536  # aligned at R = 2 and 4 in both modes
    w, q, s, bias = whole_layer(rng, n, k, False)
    qt, st, bt = (from_numpy(a, dev) for a in (q, s, bias))
    x = from_numpy(rng.standard_normal((2, 3, k)).astype(np.float32), dev)
    whole = blockfp8.Linear.from_tensors(qt, st, bias=bt)
    for ranks in (2, 4):
        if rank >= ranks or ranks not in groups:
            continue
        group = groups[ranks]

        def options(ranks=ranks, group=group):
            name = f"options R={ranks}"
            col = tp.ParallelLinear.from_tensors(qt, st, "column", group=group, bias=bt)
            y = col(x)
            c.check(y.shape == (2, 3, n) and y.dtype == torch.float32, name, f"leading dims: {tuple(y.shape)}")
            c.check(torch.equal(y, whole(x)), name, "column with leading dims differs from the unsharded layer")
            y16 = col(x, out_dtype="float16")
            c.check(y16.dtype == torch.float16 and torch.equal(y16, whole(x, out_dtype=torch.float16)), name,
                    "column fp16 output differs")
            part = tp.ParallelLinear.from_tensors(qt, st, "column", group=group, bias=bt, gather_output=False)
            sh = part.shard
            yl = part(x)
            c.check(torch.equal(yl, whole(x)[..., sh.begin:sh.end]), name, "gather_output=False: not y's columns")
            row = tp.ParallelLinear.from_tensors(qt, st, "row", group=group, bias=bt)
            row_whole = tp.ParallelLinear.from_tensors(qt, st, "row", group=group, bias=bt, input_is_parallel=False)
            a = row(x[..., row.shard.begin:row.shard.end], out_dtype=torch.bfloat16)
            b = row_whole(x, out_dtype=torch.bfloat16)
            c.check(a.shape == (2, 3, n) and torch.equal(a, b), name, "input_is_parallel=False differs")
            f32 = row(x[..., row.shard.begin:row.shard.end])
            c.check(f32.dtype == torch.float32, name, f"row output {f32.dtype}")
            e = rel_err(to_numpy(f32).astype(np.float64), to_numpy(whole(x)).astype(np.float64))
            c.check(e < 1e-5, name, f"row fp32 output: rel {e:.3g} vs the unsharded layer")
            nobias = tp.ParallelLinear.from_tensors(qt, st, "row", group=group)
            y0 = nobias(x[..., row.shard.begin:row.shard.end])
            y0_whole = blockfp8.Linear.from_tensors(qt, st)(x)
            e = rel_err(to_numpy(y0).astype(np.float64), to_numpy(y0_whole).astype(np.float64))
            c.check(e < 1e-5, name, f"row without bias: rel {e:.3g}")
            empty = row(x[:0, 0, row.shard.begin:row.shard.end])
            c.check(empty.shape == (0, n), name, f"M=0: {tuple(empty.shape)}")

        c.run(f"options R={ranks}", options)

    # The MLP: [M, 512] -> gate_up [1536 x 512] (column, no gather) -> down [512 x 1536] (row, parallel input).
    _, q1, s1, _ = whole_layer(rng, 1536, 512, False)
    _, q2, s2, b2 = whole_layer(rng, 512, 1536, False)
    h = from_numpy(rng.standard_normal((M, 512)).astype(np.float32).astype(BF16), dev)
    q1, s1, q2, s2, b2 = (from_numpy(a, dev) for a in (q1, s1, q2, s2, b2))
    want = blockfp8.Linear.from_tensors(q2, s2, bias=b2)(blockfp8.Linear.from_tensors(q1, s1)(h))
    for ranks in groups:
        if rank >= ranks:
            continue
        group = groups[ranks]

        def mlp(ranks=ranks, group=group):
            name = f"mlp R={ranks}"
            gate_up = tp.ParallelLinear.from_tensors(q1, s1, "column", group=group, gather_output=False)
            down_p = tp.ParallelLinear.from_tensors(q2, s2, "row", group=group, bias=b2)
            got = down_p(gate_up(h))
            e = rel_err(to_numpy(got).astype(np.float64), to_numpy(want).astype(np.float64))
            c.check(e < 8e-3, name, f"rel {e:.3g} vs the unsharded MLP")

        c.run(f"mlp R={ranks}", mlp)


def error_checks(c, rank, world, rng, dev):
    _, q, s, _ = whole_layer(rng, 256, 1920, False)  # K splits over 2..5 ranks (with shared blocks)
    q, s = from_numpy(q, dev), from_numpy(s, dev)

    def wrong_group():
        # Sharded for one rank more than the world has: refused before any collective, on every rank.
        layer = tp.ParallelLinear.from_tensors(q, s, "row", rank, world + 1, share_blocks=True)
        try:
            layer(from_numpy(np.ones((1, layer.shard.size), np.float32), dev))
            c.check(False, "errors", f"a layer of {world + 1} ranks ran on a group of {world}")
        except ValueError as e:
            want = f"the process group is rank {rank} of {world}, the shard rank {rank} of {world + 1}"
            c.check(want in str(e), "errors", f"message: {e}")

    def default_group():
        layer = tp.ParallelLinear.from_tensors(q, s, "row", share_blocks=True)  # the world's rank and size
        c.check((layer.shard.rank, layer.shard.ranks) == (rank, world), "errors", f"default group: {layer.shard}")

    c.run("errors", wrong_group)
    c.run("errors", default_group)


def worker(rank, world, backend, store, seed, out_dir):
    """Rank `rank` of `world`: backend 'gloo' (CPU tensors) or 'nccl' (CUDA tensors on GPU `rank`)."""
    torch.set_num_threads(1)
    blockfp8.set_num_threads(1)
    dev = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        dev = f"cuda:{rank}"
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=world)
    c = Checks()
    try:
        # Every process creates every group, in the same order (torch.distributed requires it).
        groups = {r: dist.new_group(list(range(r))) for r in range(1, world + 1)}
        rng = np.random.default_rng(seed)
        layer_checks(c, rank, groups, rng, dev)
        option_checks(c, rank, groups, rng, dev)
        error_checks(c, rank, world, rng, dev)
        dist.barrier()
    except Exception:  # noqa: BLE001
        c.failures.append(["worker", traceback.format_exc()])
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(c.failures, f)
        dist.destroy_process_group()
