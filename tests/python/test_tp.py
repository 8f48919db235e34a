"""blockfp8.tp: the shard plans against `blockfp8 shard` (the same shapes, the same refusals with the same
messages), weight slices against numpy indexing, each rank's share simulated in one process, bad arguments; and the
layer over torch.distributed: 4 processes of a gloo group on CPU tensors (tests/python/tp_ranks.py), R = 1..4,
against the unsharded layer (column bit-identical, row within tolerance and exactly one rounding of the fp32 sum);
the same processes on NCCL and CUDA tensors where there are two GPUs or more, and one GPU's checks where one is."""
import json
import os
import re
import subprocess
import tempfile
import time

import numpy as np
import pytest

import blockfp8
from blockfp8 import tp
from conftest import _SEED, cli_path, needs_cuda, needs_torch, torch
from oracle import BF16, BLOCK, FP8, calc_diff, codes, from_numpy, quantize, rel_err, st_write, to_numpy

CLI = cli_path()
needs_cli = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason=f"{CLI} is not built (make cli)")


def quantized(rng, n, k, ue8m0=False):
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    q, s, _ = quantize(w, BLOCK, ue8m0)
    return w, q.view(FP8), s


# ---------------------------------------------------------------------------------------------------------------
# Plans: the C planner's, as `blockfp8 shard` prints them
# ---------------------------------------------------------------------------------------------------------------
CLI_RANK = re.compile(r"rank (\d+): (?:rows|columns) \[(\d+), (\d+)\), scale blocks \[(\d+), (\d+)\), "
                      r"local weight \[(\d+), (\d+)\](?:, (\d+) pad)?")


@needs_cli
@pytest.mark.parametrize("n,k,mode,ranks,share", [
    (7168, 18432, "row", 32, True),     # DeepSeek-R1 down_proj at TP32: 576 columns a rank
    (7168, 18432, "row", 8, False),
    (36864, 7168, "column", 8, False),
    (2112, 7168, "column", 2, True),    # 1056 rows: 8.25 blocks
    (3072, 7168, "column", 16, True),   # 192 rows
    (24576, 1536, "column", 1, False),
])
def test_plans_match_the_cli(n, k, mode, ranks, share):
    cmd = [CLI, "shard", "--ranks", str(ranks), "--mode", mode, "--n", str(n), "--k", str(k)]
    proc = subprocess.run(cmd + (["--share-blocks"] if share else []), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = [m.groups() for m in CLI_RANK.finditer(proc.stdout)]
    assert len(rows) == ranks, proc.stdout
    for rank, begin, end, b0, b1, n_local, k_local, lead in rows:
        p = tp.shard_plan(n, k, mode, ranks, int(rank), share_blocks=share)
        blocks = -(-(p.n_local if mode == "column" else p.k_local) // BLOCK)
        assert (p.begin, p.end, p.block_begin, p.block_begin + blocks, p.n_local, p.k_local, p.lead) == \
            (int(begin), int(end), int(b0), int(b1), int(n_local), int(k_local), int(lead or 0))
        assert (p.mode, p.rank, p.ranks, p.n, p.k, p.size) == (mode, int(rank), ranks, n, k, p.end - p.begin)


@needs_cli
@pytest.mark.parametrize("n,k,mode,ranks,words", [
    (7168, 18432, "row", 32, ["576 columns", "K=18432", "block 4", "share_blocks=True"]),
    (3072, 7168, "column", 16, ["192 rows", "N=3072"]),
    (2112, 7168, "column", 5, ["N=2112 does not split evenly over 5 ranks"]),
    (7168, 2048, "row", 3, ["K=2048 does not split evenly over 3 ranks"]),
])
def test_refusals_carry_the_cli_message(n, k, mode, ranks, words):
    with pytest.raises(blockfp8.UnsupportedError) as e:
        tp.shard_plan(n, k, mode, ranks, 1)
    msg = str(e.value)
    assert e.value.status == "unsupported" and all(w in msg for w in words), msg
    proc = subprocess.run([CLI, "shard", "--ranks", str(ranks), "--mode", mode, "--n", str(n), "--k", str(k)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert msg.split("cannot shard: ", 1)[1] in proc.stderr, (msg, proc.stderr)


@pytest.mark.parametrize("args,exc,words", [
    ((256, 256, "diagonal", 2, 0), blockfp8.InvalidArgumentError, "unknown tensor-parallel mode 'diagonal'"),
    ((256, 256, 0, 2, 0), TypeError, "mode must be 'column' or 'row'"),
    ((256, 256, "row", 0, 0), blockfp8.InvalidArgumentError, "0 ranks (at least 1)"),
    ((256, 256, "row", 2, 2), blockfp8.InvalidArgumentError, "rank 2 is not in [0, 2)"),
    ((256, 256, "row", 2, -1), blockfp8.InvalidArgumentError, "rank -1 is not in [0, 2)"),
    ((256, 256, "row", 2.0, 0), TypeError, "ranks must be an int"),
    ((256, 256, "row", True, 0), TypeError, "ranks must be an int"),
    ((256, 256, "row", 2**40, 0), ValueError, "ranks=1099511627776 is out of range"),
    ((-1, 256, "row", 2, 0), blockfp8.InvalidArgumentError, "shard: weight"),
    (("256", 256, "row", 2, 0), TypeError, "n must be an int"),
    ((256, 2**63, "row", 2, 0), ValueError, "k=9223372036854775808 is out of range"),
])
def test_bad_plan_arguments(args, exc, words):
    with pytest.raises(exc) as e:
        tp.shard_plan(*args)
    assert words in str(e.value)
    with pytest.raises(TypeError, match="share_blocks must be True or False"):
        tp.shard_plan(256, 256, "row", 2, 0, share_blocks=1)


# ---------------------------------------------------------------------------------------------------------------
# Weight slices
# ---------------------------------------------------------------------------------------------------------------
def expected_slice(q, s, p):
    """The rank's local weight by numpy indexing: the slice (after `lead` zero codes) and its scale blocks."""
    qc = codes(q)
    if p.mode == "column":
        want_q = np.zeros((p.n_local, p.k), np.uint8)
        want_q[p.lead:] = qc[p.begin:p.end]
        want_s = s[p.block_begin:p.block_begin + -(-p.n_local // BLOCK)]
    else:
        want_q = np.zeros((p.n, p.k_local), np.uint8)
        want_q[:, p.lead:] = qc[:, p.begin:p.end]
        want_s = s[:, p.block_begin:p.block_begin + -(-p.k_local // BLOCK)]
    return want_q, want_s


@pytest.mark.parametrize("n,k,mode,ranks,ue8m0", [
    (576, 960, "column", 3, False), (576, 960, "row", 3, True), (1056, 1024, "column", 2, True),
    (512, 2304, "row", 4, False), (256, 384, "row", 1, False),
])
def test_shard_weight_numpy(rng, n, k, mode, ranks, ue8m0):
    _, q, s = quantized(rng, n, k, ue8m0)
    share = (n if mode == "column" else k) // ranks % BLOCK != 0
    for rank in range(ranks):
        ql, sl, p = tp.shard_weight(q, s, mode, ranks, rank, share_blocks=share)
        assert p == tp.shard_plan(n, k, mode, ranks, rank, share_blocks=share)
        want_q, want_s = expected_slice(q, s, p)
        assert ql.dtype == q.dtype and sl.dtype == np.float32
        np.testing.assert_array_equal(codes(ql), want_q)
        np.testing.assert_array_equal(sl, want_s)


@needs_torch
def test_shard_weight_torch_and_packed_scales(rng):
    _, q, s = quantized(rng, 1056, 1024, ue8m0=True)
    # The same scales as int32 words, UE8M0 packed four per word in SGLang's MN-major aligned layout.
    exps = (np.log2(s).astype(np.int32) + 127).astype(np.int64)
    rows, kb = s.shape
    words = np.zeros((rows, -(-kb // 4)), np.int64)
    for j in range(kb):
        words[:, j // 4] |= exps[:, j] << (8 * (j % 4))
    ld = -(-rows // 4) * 4
    buf = np.zeros((words.shape[1], ld), np.int32)
    buf[:, :rows] = words.astype(np.uint32).view(np.int32).T
    ws_packed = torch.from_numpy(buf).t()[:rows]
    for rank in range(2):
        ql, sl, p = tp.shard_weight(from_numpy(q), ws_packed, "column", 2, rank, share_blocks=True)
        assert isinstance(ql, torch.Tensor) and ql.dtype == torch.float8_e4m3fn and sl.dtype == torch.float32
        want_q, want_s = expected_slice(q, s, p)
        np.testing.assert_array_equal(codes(ql), want_q)
        np.testing.assert_array_equal(sl.numpy(), want_s)
        q8, s8, _ = tp.shard_weight(from_numpy(q).view(torch.uint8), from_numpy(s), "column", 2, rank, True)
        assert q8.dtype == torch.uint8 and torch.equal(q8, ql.view(torch.uint8)) and torch.equal(s8, sl)


def test_from_safetensors_reads_the_rank_part(tmp_path, rng):
    _, q, s = quantized(rng, 576, 960)
    bias = (rng.standard_normal(576)).astype(BF16)
    path = tmp_path / "w.safetensors"
    st_write(str(path), {"w": ("F8_E4M3", q), "w_scale_inv": ("F32", s), "b": ("BF16", bias)})
    x = rng.standard_normal((3, 960)).astype(np.float32)
    for mode in ("column", "row"):
        for rank in range(3):
            layer = tp.ParallelLinear.from_safetensors(path, "w", mode, rank, 3, share_blocks=True, bias="b")
            ql, sl, p = tp.shard_weight(q, s, mode, 3, rank, share_blocks=True)
            assert layer.shard == p and layer.bias_numpy is not None
            lq, ls = layer.weight()
            np.testing.assert_array_equal(codes(lq), codes(ql))
            np.testing.assert_array_equal(ls, sl)
            same = tp.ParallelLinear.from_tensors(q, s, mode, rank, 3, share_blocks=True, bias=bias)
            xin = x if mode == "column" else x[:, p.begin:p.end]
            np.testing.assert_array_equal(layer.local(xin), same.local(xin))
    with pytest.raises(blockfp8.UnsupportedError, match="192 rows"):
        tp.ParallelLinear.from_safetensors(path, "w", "column", 0, 3)
    with pytest.raises(blockfp8.NotFoundError):
        tp.ParallelLinear.from_safetensors(path, "nope", "column", 0, 1)
    with pytest.raises(blockfp8.NotFoundError):
        tp.ParallelLinear.from_safetensors(path, "w", "column", 0, 1, bias="nope")
    # rank and world_size are judged as shard_plan judges them, whichever constructor takes them.
    for make in (lambda *a: tp.ParallelLinear.from_safetensors(path, "w", *a),
                 lambda *a: tp.ParallelLinear.from_tensors(q, s, *a)):
        with pytest.raises(ValueError, match="world_size=1099511627776 is out of range"):
            make("row", 0, 2**40)
        with pytest.raises(TypeError, match="rank must be an int, got True"):
            make("row", True, 2)
        with pytest.raises(TypeError, match="world_size must be an int, got 2.0"):
            make("row", 0, 2.0)


# ---------------------------------------------------------------------------------------------------------------
# Each rank's share, simulated in one process (numpy): the gather as a concatenation, the all-reduce as a sum
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,k,ue8m0", [(768, 1536, False), (1056, 1024, True), (512, 2304, False)])
def test_simulated_ranks_numpy(rng, n, k, ue8m0):
    w, q, s = quantized(rng, n, k, ue8m0)
    bias = (rng.standard_normal(n) * 0.5).astype(np.float32)
    x = rng.standard_normal((5, k)).astype(np.float32).astype(BF16)
    ref = blockfp8.Linear.from_tensors(q, s, bias=bias)(x)
    exact = x.astype(np.float64) @ w.astype(np.float64).T + bias
    for ranks in range(1, 5):
        for mode in ("column", "row"):
            dim = n if mode == "column" else k
            if dim % ranks:
                continue
            share = dim // ranks % BLOCK != 0
            layers = [tp.ParallelLinear.from_tensors(q, s, mode, r, ranks, share_blocks=share, bias=bias)
                      for r in range(ranks)]
            if mode == "column":
                y = np.concatenate([layer.local(x) for layer in layers], axis=1)
                assert y.dtype == BF16
                np.testing.assert_array_equal(y.view(np.uint16), ref.view(np.uint16))
            else:
                parts = [layer.local(x[:, layer.shard.begin:layer.shard.end]) for layer in layers]
                assert all(p.dtype == np.float32 and p.shape == (5, n) for p in parts)
                y = sum(parts[1:], parts[0]).astype(BF16)
                if ranks == 1:
                    np.testing.assert_array_equal(y.view(np.uint16), ref.view(np.uint16))
                elif not share:
                    assert rel_err(y, ref.astype(np.float64)) < 8e-3
            assert calc_diff(y.astype(np.float64), exact) < 1.5e-3


# ---------------------------------------------------------------------------------------------------------------
# Bad uses of the layer
# ---------------------------------------------------------------------------------------------------------------
def test_layer_errors(rng):
    _, q, s = quantized(rng, 256, 512)
    col = tp.ParallelLinear.from_tensors(q, s, "column", 0, 2)
    row = tp.ParallelLinear.from_tensors(q, s, "row", 1, 2)
    assert "mode='row', rank=1, ranks=2" in repr(row)
    with pytest.raises(TypeError, match="must be a torch tensor"):
        col(np.ones((1, 512), np.float32))
    with pytest.raises(ValueError, match=r"x must be \[\.\.\., 256\] \(the rank's slice of K\)"):
        row.local(np.ones((1, 512), np.float32))
    with pytest.raises(ValueError, match=r"x must be \[\.\.\., 512\] \(K\)"):
        col.local(np.ones((1, 256), np.float32))
    with pytest.raises(TypeError, match="give both rank and world_size"):
        tp.ParallelLinear.from_tensors(q, s, "row", 0)
    with pytest.raises(ValueError, match="gather_output=False is for column-parallel"):
        tp.ParallelLinear.from_tensors(q, s, "row", 0, 2, gather_output=False)
    with pytest.raises(ValueError, match="input_is_parallel=False is for row-parallel"):
        tp.ParallelLinear.from_tensors(q, s, "column", 0, 2, input_is_parallel=False)
    with pytest.raises(TypeError, match="nccl_comm must be the address"):
        tp.ParallelLinear.from_tensors(q, s, "row", 0, 2, nccl_comm="comm")
    with pytest.raises(TypeError, match="with nccl_comm, give rank and world_size"):
        tp.ParallelLinear.from_tensors(q, s, "row", nccl_comm=1234)
    with pytest.raises(blockfp8.UnsupportedError, match="does not split evenly"):
        tp.ParallelLinear.from_tensors(q, s, "row", 0, 3)
    with pytest.raises(ValueError, match="bias must be 1-D"):
        tp.ParallelLinear.from_tensors(q, s, "row", 0, 2, bias=np.ones(128, np.float32))


def test_layer_of_many_ranks(monkeypatch):
    """Building a layer plans no other rank's slice (the gather does, when it needs them): an empty weight over
    2**31 - 1 ranks is built at once, not after billions of plans."""
    calls = []
    plan = tp.shard_plan
    monkeypatch.setattr(tp, "shard_plan", lambda *a, **kw: calls.append(a) or plan(*a, **kw))
    q, s = np.zeros((0, 256), np.uint8).view(FP8), np.zeros((0, 2), np.float32)
    layer = tp.ParallelLinear.from_tensors(q, s, "column", 5, 4096)
    assert not calls and layer.shard.ranks == 4096
    layer = tp.ParallelLinear.from_tensors(q, s, "column", 2**31 - 2, 2**31 - 1)
    assert layer.shard.rank == 2**31 - 2 and layer.local(np.ones((3, 256), np.float32)).shape == (3, 0)


@needs_torch
def test_layer_errors_torch(rng):
    _, q, s = quantized(rng, 256, 512)
    qt, st = from_numpy(q), from_numpy(s)
    if not torch.distributed.is_initialized():
        with pytest.raises(RuntimeError, match="initialize torch.distributed"):
            tp.ParallelLinear.from_tensors(qt, st, "row")
        with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
            tp.ParallelLinear.from_tensors(qt, st, "row", 0, 2)(torch.ones(1, 256))
    with pytest.raises(TypeError, match="not both"):
        tp.ParallelLinear.from_tensors(qt, st, "row", 0, 2, group=object(), nccl_comm=1234)
    # The C path (bfp8_tp_linear on a caller's ncclComm_t) refuses host data, or says it was built without CUDA;
    # the address is never used.
    layer = tp.ParallelLinear.from_tensors(qt, st, "row", 0, 2, nccl_comm=1234)
    with pytest.raises(blockfp8.Error, match="tp_linear: (the data must be on cuda|built without CUDA)"):
        layer(torch.ones(1, 256))
    # One rank (no communication needed): the layer is the unsharded one, with or without torch.distributed.
    one = tp.ParallelLinear.from_tensors(qt, st, "row", 0, 1)
    x = torch.randn(3, 512, dtype=torch.bfloat16)
    assert torch.equal(one(x), blockfp8.Linear.from_tensors(qt, st)(x))


@needs_torch
def test_tp_local_op_traces(rng):
    """The rank's GEMM is the op blockfp8::tp_local (fake implementation included): torch.compile traces it."""
    _, q, s = quantized(rng, 1056, 1024)
    layer = tp.ParallelLinear.from_tensors(from_numpy(q), from_numpy(s), "column", 1, 2, share_blocks=True)
    x = torch.randn(4, 1024)
    f = torch.compile(lambda t: layer.local(t) * 2, fullgraph=True, backend="aot_eager")
    assert torch.equal(f(x), layer.local(x) * 2)
    assert layer.local(x).shape == (4, 528)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        y = torch.ops.blockfp8.tp_local(torch.empty(7, 1024), layer.local_linear.handle, None, torch.bfloat16)
    assert y.shape == (7, 544) and y.dtype == torch.bfloat16  # the lead's 16 pad columns included


# ---------------------------------------------------------------------------------------------------------------
# One GPU: the layer on CUDA tensors, and the C path on a one-rank NCCL communicator of torch's NCCL
# ---------------------------------------------------------------------------------------------------------------
def nccl_comm_address(comm):
    """The ncclComm_t inside torch.cuda.nccl's communicator capsule."""
    import ctypes
    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = ctypes.c_char_p, [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return api.PyCapsule_GetPointer(comm, api.PyCapsule_GetName(comm))


@needs_cuda
def test_one_gpu(rng):
    _, q, s = quantized(rng, 1056, 1024)
    qt, st = from_numpy(q, "cuda"), from_numpy(s, "cuda")
    bias = from_numpy((rng.standard_normal(1056)).astype(BF16), "cuda")
    x = from_numpy(rng.standard_normal((5, 1024)).astype(np.float32).astype(BF16), "cuda")
    want = blockfp8.Linear.from_tensors(qt, st, bias=bias)(x)
    for mode in ("column", "row"):
        layer = tp.ParallelLinear.from_tensors(qt, st, mode, 0, 1, bias=bias)
        assert layer.device.type == "cuda"
        assert torch.equal(layer(x), want), mode
    # Two ranks' shares on one GPU, summed by hand: the row layer's partials.
    parts = [tp.ParallelLinear.from_tensors(qt, st, "row", r, 2, bias=bias) for r in range(2)]
    y = (parts[0].local(x[:, :512]) + parts[1].local(x[:, 512:])).to(torch.bfloat16)
    assert rel_err(to_numpy(y), to_numpy(want).astype(np.float64)) < 8e-3
    # bfp8_tp_linear itself, on a one-rank communicator of the NCCL torch loaded (blockfp8 opens libnccl.so.2 by
    # name, which finds that one), on the current stream.
    nccl = torch.cuda.nccl
    comm = nccl.init_rank(1, nccl.unique_id(), 0)
    for mode in ("column", "row"):
        layer = tp.ParallelLinear.from_tensors(qt, st, mode, 0, 1, bias=bias, nccl_comm=nccl_comm_address(comm))
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            y = layer(x)
        stream.synchronize()
        assert torch.equal(y, want), mode


# ---------------------------------------------------------------------------------------------------------------
# The layer over torch.distributed: 4 gloo processes on CPU tensors; NCCL processes where there are 2+ GPUs
# ---------------------------------------------------------------------------------------------------------------
def run_ranks(backend, world):
    """Runs tests/python/tp_ranks.py's worker in `world` processes; returns {scenario group: [messages]}."""
    import torch.multiprocessing as mp

    import tp_ranks
    seed = _SEED
    with tempfile.TemporaryDirectory() as tmp:
        # A file store: no port to pick (and none to race for).
        ctx = mp.start_processes(tp_ranks.worker, args=(world, backend, os.path.join(tmp, "store"), seed, tmp),
                                 nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + 240
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                pytest.fail(f"the {backend} ranks did not finish in 240 s (a collective left waiting?); seed {seed}")
        failures = {}
        for rank in range(world):
            with open(os.path.join(tmp, f"rank{rank}.json")) as f:
                for scenario, msg in json.load(f):
                    failures.setdefault(scenario.split(" N=")[0].split(" R=")[0], []).append(
                        f"rank {rank}: {scenario}: {msg} (seed {seed})")
    return failures


@pytest.fixture(scope="module")
def gloo_failures():
    if torch is None or not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("needs torch with torch.distributed (gloo)")
    return run_ranks("gloo", 4)


@pytest.fixture(scope="module")
def nccl_failures():
    if torch is None or not torch.cuda.is_available() or torch.cuda.device_count() < 2 or \
            not blockfp8.cuda_available()[0] or not torch.distributed.is_nccl_available():
        pytest.skip("needs 2 or more GPUs, torch.distributed with NCCL and blockfp8 built with CUDA")
    return run_ranks("nccl", min(4, torch.cuda.device_count()))


GROUPS = ["column", "row", "options", "mlp", "errors", "worker"]


@pytest.mark.parametrize("group", GROUPS)
def test_distributed_gloo(gloo_failures, group):
    assert not gloo_failures.get(group), "\n".join(gloo_failures[group])


@pytest.mark.parametrize("group", GROUPS)
def test_distributed_nccl(nccl_failures, group):
    assert not nccl_failures.get(group), "\n".join(nccl_failures[group])
