"""Dispatch seen from Python: explain (text and structure), stats, the policy as a function and a context manager,
and a FallbackWarning once per distinct fallback reason under prefer."""
import warnings

import numpy as np
import pytest

import blockfp8
from oracle import quantized_operands


def call(rng, m=3, n=130, k=256, out="bfloat16"):
    qa, sa, qb, sb, _, _ = quantized_operands(rng, m, n, k)
    return blockfp8.w8a8_block_fp8_matmul(qa, qb, sa, sb, output_dtype=out)


def test_explain_text_and_structure():
    e = blockfp8.explain(16, 2112, 7168)
    text = str(e)
    assert text.startswith("problem: device=cpu m=16 n=2112 k=7168 out=bf16 scales=fp32 bias=none")
    assert "choice:  cpu" in text and e.choice == "cpu" and not e.fallback and e.error is None
    names = [b["name"] for b in e.backends]
    # by priority, as the text lists them (the CUDA backends, higher, come first where there is a GPU)
    assert [n for n in names if n in ("cpu", "ref")] == ["cpu", "ref"]
    assert [b["priority"] for b in e.backends] == sorted((b["priority"] for b in e.backends), reverse=True)
    for b in e.backends:
        assert (f"{b['name']:<14} {'ok' if b['ok'] else 'no':<4} priority {b['priority']:<3} {b['reason']}".rstrip()
                in text)
    for u in e.unavailable:
        assert u["name"] in text and u["why"] in text
    d = e.as_dict()
    assert d["problem"]["m"] == 16 and d["problem"]["out_dtype"] == "bfloat16" and d["choice"] == "cpu"


def test_explain_cuda_problem_on_this_machine():
    """A CUDA problem on a machine whose CUDA backends are unavailable (or absent) has no choice, and says why."""
    e = blockfp8.explain(1, 2112, 7168, device="cuda", arch=90, bias="bfloat16")
    assert e.problem["arch"] == 90 and e.problem["bias"] == "bfloat16"
    assert "acts=prior-kernel" in str(e)
    assert "acts=prior-kernel" not in str(blockfp8.explain(1, 2112, 7168, device="cuda", arch=90, gemm=True))
    cpu_rows = [b for b in e.backends if b["device"] == "cpu"]
    assert all(not b["ok"] and "runs on cpu" in b["reason"] for b in cpu_rows)
    if not blockfp8.cuda_available()[0]:
        assert e.choice is None and "no backend can run" in e.error


def test_explain_current_device():
    """device="cuda" without arch asks about this machine's GPU: its arch and its card (whose measured cells rank
    the backends); with arch, a GPU of that arch and no card."""
    text = str(blockfp8.explain(128, 7168, 16384, device="cuda"))
    e = blockfp8.explain(128, 7168, 16384, device="cuda")
    if blockfp8.cuda_available()[0]:
        assert e.problem["arch"] >= 70 and " card='" in text
    else:
        assert e.problem["arch"] == 0 and "card=" not in text
    assert "card=" not in str(blockfp8.explain(128, 7168, 16384, device="cuda", arch=90))
    assert blockfp8.explain(128, 7168, 16384, device="cuda", arch=90).problem["card"] is None


def test_explain_card():
    """card= poses the problem on a named card: its own measured cells where the table has them, else the
    reference card's, said so; as `blockfp8 explain --card`."""
    e = blockfp8.explain(128, 7168, 16384, device="cuda", arch=90, gemm=True, card="NVIDIA H100 80GB HBM3")
    assert e.problem["card"] == "NVIDIA H100 80GB HBM3"
    assert "ranking: measured on NVIDIA H100 80GB HBM3: sm_90 bf16 N=7168 K=16384 M=128, run " in str(e)
    e = blockfp8.explain(128, 7168, 16384, device="cuda", arch=90, gemm=True, card="NVIDIA H800")
    assert "ranking: measured on NVIDIA H200 (NVIDIA H800 has no cells of this shape and dtype)" in str(e)
    with pytest.raises(ValueError, match="device='cuda'"):
        blockfp8.explain(16, 2112, 7168, card="NVIDIA H200")
    with pytest.raises(ValueError, match="name a GPU"):
        blockfp8.explain(16, 2112, 7168, device="cuda", arch=90, card="")
    with pytest.raises(TypeError, match="card must be a str"):
        blockfp8.explain(16, 2112, 7168, device="cuda", arch=90, card=90)


def test_explain_reports_fallback_and_strict_failure():
    with blockfp8.policy("prefer", "hopper"):
        e = blockfp8.explain(4, 256, 256)
        assert e.choice == "cpu" and e.fallback and e.preferred in (None, "hopper") and e.reason
        assert "fallback from hopper" in str(e)
    with blockfp8.policy("strict", "hopper"):
        e = blockfp8.explain(4, 256, 256)
        assert e.choice is None and "hopper" in e.error


def test_stats_count_calls_per_backend(rng):
    for _ in range(3):
        call(rng)
    with blockfp8.policy("strict", "ref"):
        call(rng)
    s = blockfp8.stats()
    assert s["calls"]["cpu"] == 3 and s["calls"]["ref"] == 1 and s["fallbacks"] == []
    blockfp8.reset_stats()
    assert blockfp8.stats()["calls"]["cpu"] == 0


def test_policy_function_and_context_manager(rng):
    assert blockfp8.get_policy() == ("auto", None)
    previous = blockfp8.set_policy("strict", "ref")
    assert previous == ("auto", None) and blockfp8.get_policy() == ("strict", "ref")
    with blockfp8.policy("prefer", "cpu") as p:
        assert blockfp8.get_policy() == ("prefer", "cpu") and p.previous == ("strict", "ref")
        with pytest.raises(RuntimeError):
            with blockfp8.policy("auto"):
                raise RuntimeError("restored even on an exception")
        assert blockfp8.get_policy() == ("prefer", "cpu")
    assert blockfp8.get_policy() == ("strict", "ref")
    call(rng)
    assert blockfp8.stats()["calls"]["ref"] == 1
    blockfp8.policy("auto")  # as a plain call it stays
    assert blockfp8.get_policy() == ("auto", None)


def test_policy_errors():
    with pytest.raises(ValueError, match="auto"):
        blockfp8.set_policy("fastest")
    with pytest.raises(TypeError, match="backend name"):
        blockfp8.set_policy("prefer")
    with pytest.raises(ValueError):
        blockfp8.set_policy("auto", "cpu")
    with pytest.raises(blockfp8.NotFoundError, match="no backend named 'cpuu'") as info:
        blockfp8.set_policy("strict", "cpuu")
    assert info.value.status == "not found"  # bfp8_status_name(BFP8_ERR_NOT_FOUND)
    assert blockfp8.get_policy() == ("auto", None)  # unchanged by the failed call


def test_strict_policy_raises_with_the_reason(rng):
    with blockfp8.policy("strict", "hopper"):
        with pytest.raises(blockfp8.UnsupportedError, match="hopper") as info:
            call(rng)
    assert isinstance(info.value, blockfp8.Error) and isinstance(info.value, RuntimeError)


def test_fallback_warns_once_per_reason(rng):
    with blockfp8.policy("prefer", "hopper"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                y = call(rng)
            assert np.isfinite(y.astype(np.float32)).all()
        fallbacks = [w for w in caught if issubclass(w.category, blockfp8.FallbackWarning)]
        assert len(fallbacks) == 1, [str(w.message) for w in caught]
        assert "hopper" in str(fallbacks[0].message) and "cpu" in str(fallbacks[0].message)
        assert fallbacks[0].filename == __file__  # points at the caller's line
    s = blockfp8.stats()
    assert s["calls"]["cpu"] == 3
    (f,) = s["fallbacks"]
    assert f["preferred"] == "hopper" and f["chosen"] == "cpu" and f["count"] == 3 and f["reason"]
    # Another preferred backend is another (preferred, chosen, reason): warned again, once.
    with blockfp8.policy("prefer", "cuda_generic"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call(rng)
            call(rng)
        assert len([w for w in caught if issubclass(w.category, blockfp8.FallbackWarning)]) == 1


def test_backends_declare_capabilities():
    rows = {b["name"]: b for b in blockfp8.backends()}
    assert {"cpu", "ref"} <= set(rows)
    assert rows["ref"]["device"] == "cpu" and set(rows["ref"]["out_dtypes"]) == {"f32", "bf16", "f16"}
    assert "row_major" in rows["cpu"]["a_layouts"]
    if blockfp8.cuda_available()[0]:
        assert rows["hopper"]["a_layouts"] == ["mn_major_aligned"] and rows["hopper"]["b_layouts"] == ["row_major"]
    else:
        assert {u for u, _ in blockfp8.unavailable_backends()} >= {"hopper"} or "hopper" not in rows
