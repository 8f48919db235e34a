"""Shared fixtures of the Python package's tests. The oracle is independent of the library: tests/numpy_ref.py
(docs/numerics.md in numpy) and the float64 block GEMM and safetensors code of tests/crosscheck_cli.py.

Fresh random data per run; the seed is printed (BFP8_TEST_SEED=S replays). BFP8_CLI names the blockfp8 binary
(default: build/blockfp8 of this checkout)."""
import os
import sys
import zlib

import numpy as np
import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)

import blockfp8  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

_SEED = int(os.environ.get("BFP8_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")


def pytest_report_header(config):
    cuda = blockfp8.cuda_available()
    return [f"blockfp8 {blockfp8.__version__}: seed {_SEED} (BFP8_TEST_SEED={_SEED} replays); "
            f"torch {torch.__version__ if torch else 'absent'}; CUDA: {'yes' if cuda[0] else cuda[1]}"]


@pytest.fixture(params=["fast", "eager", "ops"])
def path(request, monkeypatch):
    """A torch test three times: the public functions through the fast lane of _native.c (where torch has the DLPack
    exchange API), calling the op's implementation directly (the eager Python path), and through torch.ops."""
    if torch is None:
        pytest.skip("needs torch")
    from blockfp8 import _torch_path as T

    if request.param == "fast" and not T.FAST_LANE:
        pytest.skip("this torch has no DLPack exchange API: no fast lane")
    monkeypatch.setattr(T, "FAST_LANE", T.FAST_LANE and request.param == "fast")
    monkeypatch.setattr(T, "_ALWAYS_OPS", request.param == "ops")
    return request.param


@pytest.fixture
def rng(request):
    # One stream per test, derived from the run's seed and the test's name, so a test replays alone.
    return np.random.default_rng([_SEED, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture(autouse=True)
def fresh_dispatch():
    """Every test starts with the auto policy and zeroed stats."""
    blockfp8.set_policy("auto")
    blockfp8.reset_stats()
    yield
    blockfp8.set_policy("auto")


def cli_path():
    return os.environ.get("BFP8_CLI") or os.path.join(ROOT, "build", "blockfp8")


needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
needs_cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available() or not blockfp8.cuda_available()[0],
                                reason="needs torch with a CUDA device and blockfp8 built with CUDA")
