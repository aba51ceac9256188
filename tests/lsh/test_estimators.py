"""MagicPIG and the affordable estimators in the estimator protocol: equal to the library's
functions on the same row, held to the budget, tables built once per prompt."""

import numpy as np
import pytest
import torch

from pigviz.attention import cost, protocol
from pigviz.lsh import affordable, estimators
from pigviz.lsh.index import build_index, grow_index
from pigviz.lsh.magicpig import attend, synthetic_decode_step


@pytest.fixture(scope="module")
def step():
    """One KV head of a synthetic decode step shaped like a real one (cone, sink, planted keys)."""
    q, k, v = synthetic_decode_step(1, 1, 2000, 32, seed=5)
    return q[0].double(), k[0].double(), v[0].double()


def test_magicpig_equals_attend_on_the_same_row_and_tables(step):
    q, k, v = step
    est = estimators.magicpig(8, 40, sinks=4, recent=16)
    out, read = protocol.call(est, q, k, v, budget=2000)  # room for all it samples: min_hits stays 2
    index = build_index(k[None].float(), K=8, L=40, sinks=4, recent=16, seed=0)
    want, stats = attend(index, q[None], k[None], v[None], min_hits=2, return_read_mask=True)
    np.testing.assert_allclose(out, want[0].numpy(), atol=1e-12)
    assert read.tolist() == stats["read_mask"][0].nonzero()[:, 0].tolist()
    assert est.last_call["min_hits"] == 2 and est.last_call["keys_read"] == read.size


def test_magicpig_raises_min_hits_until_it_fits_the_budget(step):
    q, k, v = step
    est = estimators.magicpig(6, 60, sinks=4, recent=16)
    _, loose = protocol.call(est, q, k, v, 2000)
    budget = max(21, loose.size // 3)
    out, read = protocol.call(est, q, k, v, budget)
    used = est.last_call["min_hits"]
    assert read.size <= budget < loose.size and used > 2
    index = est.tables(k)  # the kept tables
    want, stats = attend(index, q[None], k[None], v[None], min_hits=used, return_read_mask=True)
    np.testing.assert_allclose(out, want[0].numpy(), atol=1e-12)
    _, looser = attend(index, q[None], k[None], v[None], min_hits=used - 1)
    assert int(looser["keys_read"][0]) > budget  # the threshold is the lowest that fits


def test_a_budget_below_the_exact_set_reads_sinks_and_recent_keys(step):
    q, k, v = step
    est = estimators.magicpig(8, 40, sinks=4, recent=16)
    _, read = protocol.call(est, q, k, v, 10)
    assert read.tolist() == [0, 1, 2, 3] + list(range(1994, 2000)) and est.last_call["fallback"]
    assert est.bytes_read(2000, 32, 32, 10) == cost.bytes_read("streaming", n=2000, d=32, dv=32, keys_read=10)


def test_tables_are_built_once_per_prompt_and_grow_with_it(step, monkeypatch):
    q, k, v = step
    est = estimators.magicpig(8, 40, sinks=4, recent=16)
    import pigviz.lsh.index

    built = []
    real = pigviz.lsh.index.build_index
    monkeypatch.setattr(pigviz.lsh.index, "build_index", lambda *a, **kw: built.append(1) or real(*a, **kw))
    for n in (1980, 1985, 1996):  # later decode steps of the same prompt, within the recent window
        protocol.call(est, q, k[:n], v[:n], 400)
    assert len(built) == 1
    index = real(k[None, :1980].float(), K=8, L=40, sinks=4, recent=16, seed=0)
    want, _ = attend(grow_index(index, k[None], 1996), q[None], k[None, :1996], v[None, :1996], min_hits=2)
    out, _ = protocol.call(est, q, k[:1996], v[:1996], 2000)
    np.testing.assert_allclose(out, want[0].numpy(), atol=1e-12)
    protocol.call(est, q, k[:1999] * 1.0, v[:1999], 400)  # other keys (a copy): new tables
    assert len(built) == 2


def test_magicpig_bytes_follow_the_last_call(step):
    q, k, v = step
    est = estimators.magicpig(8, 40, sinks=4, recent=16, heads=3)
    _, read = protocol.call(est, q, k, v, 2000)
    last = est.last_call
    want = cost.bytes_read(
        "magicpig",
        n=2000,
        d=32,
        dv=32,
        keys_read=read.size,
        K=8,
        L=40,
        heads=3,
        candidates=last["candidates"],
        sampled=last["sampled"],
    )
    assert est.bytes_read(2000, 32, 32, read.size) == want


def test_exact_top_reads_magicpig_keys_and_equals_its_library_function(step):
    q, k, v = step
    mp, top = estimators.magicpig(8, 40, recent=16), estimators.magicpig_exact_top(8, 40, recent=16)
    _, read_mp = protocol.call(mp, q, k, v, 2000)
    out, read = protocol.call(top, q, k, v, 2000)
    assert read.tolist() == read_mp.tolist() and top.name == "mp_exact_top"
    index = build_index(k[None].float(), K=8, L=40, sinks=4, recent=16, seed=0)
    want, _ = affordable.magicpig_exact_top(index, q[None], k[None], v[None], top_fraction=0.5, min_hits=2)
    np.testing.assert_allclose(out, want[0].numpy(), atol=1e-12)


@pytest.mark.parametrize("budget", [40, 200])
def test_vattention_and_sparq_equal_their_library_functions(step, budget):
    q, k, v = step
    n = len(k)
    out, read = protocol.call(estimators.vattention(seed=2), q, k, v, budget)
    want, stats = affordable.vattention(
        q[None], k[None], v[None], budget / n, sinks=4, recent=36 if budget == 40 else 64, seed=2
    )
    np.testing.assert_allclose(out, want[0].numpy(), atol=1e-12)
    assert read.size == int(stats["keys_read"][0]) <= budget
    out, read = protocol.call(estimators.sparq(), q, k, v, budget)
    want, stats = affordable.sparq(q[None], k[None], v[None], budget / n)
    np.testing.assert_allclose(out, want[0].numpy(), atol=1e-12)
    assert read.size == budget
    assert estimators.sparq().bytes_read(n, 32, 32, budget) == cost.bytes_read(
        "sparq", n=n, d=32, dv=32, keys_read=budget, r=4
    )


def test_bad_options_name_the_parameter():
    with pytest.raises(ValueError, match="sinks \\+ recent must be at least 1"):
        estimators.magicpig(sinks=0, recent=0)
    with pytest.raises(ValueError, match="min_hits must be in"):
        estimators.magicpig(L=4, min_hits=5)
    with pytest.raises(ValueError, match="top_fraction must be in"):
        estimators.magicpig_exact_top(top_fraction=2.0)
    assert isinstance(estimators.magicpig().tables(torch.randn(300, 8, dtype=torch.float64)).n, int)
