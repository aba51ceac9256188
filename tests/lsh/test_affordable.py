"""Affordable estimators (pigviz.lsh.affordable): MagicPIG plus an exact top, vAttention-style
deterministic set plus uniform sample, and SparQ."""

import math

import numpy as np
import pytest
import torch

from pigviz.attention import dense_attention, topk_attention
from pigviz.lsh.affordable import magicpig_exact_top, sparq, vattention
from pigviz.lsh.index import build_index
from pigviz.lsh.magicpig import attend, synthetic_decode_step


@pytest.fixture(scope="module")
def step():
    return synthetic_decode_step(heads=6, kv_heads=2, n=1000, d=16, peaks=8, seed=2)


def rel(a, b):
    return float(((a.double() - b.double()).norm(dim=-1) / b.double().norm(dim=-1)).max())


def test_exact_top_spans_magicpig_and_plain_softmax_over_its_keys(step):
    q, k, v = step
    index = build_index(k, K=4, L=20, sinks=4, recent=16, seed=0)
    mp, mp_stats = attend(index, q, k, v, return_read_mask=True)
    none, stats = magicpig_exact_top(index, q, k, v, top_fraction=0.0)
    assert rel(none, mp) < 1e-4 and torch.equal(stats["keys_read"], mp_stats["keys_read"])
    assert stats["trusted"].sum() == 0
    every, stats = magicpig_exact_top(index, q, k, v, top_fraction=1.0)
    scores = (q.double().view(2, 3, 16) @ k.double().transpose(1, 2)).reshape(6, -1) / 4.0
    w = torch.softmax(scores.masked_fill(~mp_stats["read_mask"], -math.inf), -1)
    ref = (w.view(2, 3, -1) @ v.double()).reshape(6, -1)
    assert rel(every, ref) < 1e-4 and torch.equal(stats["trusted"], stats["sampled"])
    half, stats = magicpig_exact_top(index, q, k, v)
    assert torch.equal(stats["trusted"], torch.ceil(stats["sampled"] / 2).long())


def test_vattention_is_exact_when_the_budget_covers_everything_and_stays_in_budget(step):
    q, k, v = step
    dense, _ = dense_attention(q, k, v)
    full, _ = vattention(q, k, v, 1.0)
    assert rel(full, dense) < 1e-5
    out, stats = vattention(q, k, v, 0.1, seed=3)
    assert (stats["keys_read"] <= 100).all() and (stats["keys_read"] >= 99).all()
    assert (stats["sampled"] > 0).all() and (stats["deterministic"] >= 68).all()
    # constant values: any convex mix returns them
    const = torch.ones_like(v) * 2.5
    assert torch.allclose(vattention(q, k, const, 0.05, seed=1)[0], torch.full((6, 16), 2.5), atol=1e-5)


def test_vattention_sample_is_nearly_unbiased_and_consistent():
    """Near-flat attention sampled uniformly: the mean over seeds lands on dense attention
    (a ratio estimator is unbiased only as the sample grows, hence the tolerance), and a
    larger sample gives a smaller error. (Peaked attention is where the uniform sample fails
    and the deterministic set has to catch the peaks.)"""
    q, k, v = synthetic_decode_step(heads=2, kv_heads=1, n=300, d=8, peaks=0, seed=4)
    q = 0.05 * q
    dense, _ = dense_attention(q, k, v)
    run = lambda budget, s: vattention(q, k, v, budget, sinks=1, recent=0, page=300, seed=s)[0]  # noqa: E731
    outs = torch.stack([run(0.2, s) for s in range(200)])
    assert rel(outs.mean(0), dense) < 0.05  # one draw: ~0.15
    err = lambda budget: sum(rel(run(budget, s), dense) for s in range(20)) / 20  # noqa: E731
    assert err(0.5) < err(0.1)


def test_sparq_with_every_channel_is_topk_mixed_with_the_mean_value(step):
    q, k, v = step
    out, stats = sparq(q, k, v, 0.05, r=16)
    top, _ = topk_attention(q, k, v, 0.05)
    scores = (q.double().view(2, 3, 16) @ k.double().transpose(1, 2)).reshape(6, -1) / 4.0
    w = torch.softmax(scores, -1)
    alpha = w.topk(50, dim=-1).values.sum(-1, keepdim=True)
    ref = alpha * top.double() + (1 - alpha) * v.double().mean(1).repeat_interleave(3, 0)
    assert rel(out, ref) < 1e-4 and torch.allclose(stats["alpha"].double(), alpha[:, 0], atol=1e-5)
    assert stats["channel_fraction"] == pytest.approx(16 / 32)
    dense, _ = dense_attention(q, k, v)
    assert rel(sparq(q, k, v, 1.0, r=16)[0], dense) < 1e-5


@pytest.mark.parametrize("fn", [lambda q, k, v: vattention(q, k, v, 0.1, seed=0), lambda q, k, v: sparq(q, k, v, 0.1)])
def test_gqa_groups_read_their_own_kv_head(fn):
    q, k, v = synthetic_decode_step(heads=6, kv_heads=3, n=400, d=8, seed=7)
    together, _ = fn(q, k, v)
    for g in range(3):
        alone, _ = fn(q[2 * g : 2 * g + 2], k[g : g + 1], v[g : g + 1])
        assert torch.allclose(together[2 * g : 2 * g + 2], alone, atol=1e-5)


def test_the_study_runs_the_affordable_estimators():
    from pigviz.study import run as study
    from tests.study.test_study import tiny_capture

    cap = tiny_capture(n_layers=1)
    spec = study.StudySpec(
        settings=((4, 12),),
        seeds=2,
        sinks=2,
        recent=8,
        quest_page=4,
        ablations=False,
        methods=("magicpig", "topk", "mp_exact_top", "vattention", "sparq"),
    )
    res = study.run_layer(cap.queries[0].float(), cap.keys[0].float(), cap.values[0].float(), spec, layer=3)
    assert set(res) == {
        "magicpig K4 L12",
        "topk @K4 L12",
        "mp_exact_top @K4 L12",
        "vattention @K4 L12",
        "sparq @K4 L12",
    }
    assert res["mp_exact_top @K4 L12"]["budget"] == res["magicpig K4 L12"]["budget"]
    for name in ("mp_exact_top @K4 L12", "vattention @K4 L12"):
        assert np.asarray(res[name]["error"]).shape == (2, 6)
    assert np.asarray(res["sparq @K4 L12"]["error"]).shape == (1, 6)
    assert study.StudySpec().methods == study.METHODS + study.AFFORDABLE_METHODS  # run by default
