"""Decode-step baselines in pigviz.attention: dense, TopK, oracle sampling, hybrid,
StreamingLLM and Quest, on one layer with grouped-query attention."""
import math

import numpy as np
import pytest
import torch

from pigviz import attention
from pigviz.attention import (
    dense_attention,
    hybrid_attention,
    oracle_sampling_attention,
    quest_attention,
    softmax_attention_torch,
    streaming_attention,
    topk_attention,
)
from pigviz.magicpig import synthetic_decode_step


@pytest.fixture(scope="module")
def step():
    return synthetic_decode_step(heads=6, kv_heads=2, n=1000, d=16, peaks=8, seed=2)


def per_head_reference(q, k, v, keep=None):
    """Loop over query heads with K/V picked by h // group: the GQA mapping spelled out."""
    H, Hkv = q.shape[0], k.shape[0]
    outs = []
    for h in range(H):
        g = h // (H // Hkv)
        mask = None if keep is None else keep[h][None, :]
        out, _ = softmax_attention_torch(q[h][None].double(), k[g].double(), v[g].double(), mask=mask)
        outs.append(out[0])
    return torch.stack(outs).float()


def rel_err(a, b):
    return float(((a.float() - b.float()).norm(dim=-1) / b.float().norm(dim=-1)).mean())


def test_dense_matches_softmax_attention_and_sdpa(step):
    q, k, v = step
    out, stats = dense_attention(q, k, v)
    assert torch.allclose(out, per_head_reference(q, k, v), atol=1e-5)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q[None, :, None], k[None], v[None], enable_gqa=True)
    assert torch.allclose(out, sdpa[0, :, 0], atol=1e-5)
    assert stats["budget"] == 1.0 and stats["keys_read"].tolist() == [1000] * 6


def test_topk_is_exact_at_full_budget_and_keeps_the_top_scores(step):
    q, k, v = step
    dense, _ = dense_attention(q, k, v)
    full, stats = topk_attention(q, k, v, 1.0)
    assert torch.allclose(full, dense, atol=1e-6) and stats["budget"] == 1.0
    out, stats = topk_attention(q, k, v, 0.05)
    scores = attention._grouped_scores(q, k)
    keep = scores >= scores.topk(50, dim=-1).values[:, -1:]
    assert torch.allclose(out, per_head_reference(q, k, v, keep), atol=1e-5)
    assert stats["keys_read"].tolist() == [50] * 6 and stats["budget"] == pytest.approx(0.05)


def test_topk_error_falls_with_budget(step):
    q, k, v = step
    dense, _ = dense_attention(q, k, v)
    errors = [rel_err(topk_attention(q, k, v, b)[0], dense) for b in (0.01, 0.05, 0.3)]
    assert errors[0] > errors[1] > errors[2]


def test_race_counts_match_drawing_until_m_distinct():
    """The vectorised sampler must reproduce the plain loop: draw i.i.d. from w until m
    distinct keys were seen, and count how often each key was drawn."""
    w = np.array([0.5, 0.3, 0.12, 0.05, 0.03])
    m, trials = 3, 20_000
    rng = np.random.default_rng(0)
    loop_counts = np.zeros(len(w))
    for _ in range(trials):
        seen = {}
        while len(seen) < m:
            i = rng.choice(len(w), p=w)
            seen[i] = seen.get(i, 0) + 1
        for i, c in seen.items():
            loop_counts[i] += c
    log_w = torch.log(torch.tensor(w)).expand(trials, -1).contiguous()
    counts = attention._race_log_counts(log_w, m, torch.Generator().manual_seed(1)).exp()
    assert torch.equal((counts > 0).sum(1), torch.full((trials,), m))
    race_mean = counts.mean(0).numpy()
    loop_mean = loop_counts / trials
    assert np.allclose(race_mean, loop_mean, rtol=0.05, atol=0.01), (race_mean, loop_mean)


def test_race_counts_survive_extreme_weights():
    log_w = torch.log_softmax(torch.tensor([[0.0, -800.0, -900.0, -1000.0]], dtype=torch.float64), dim=-1)
    log_counts = attention._race_log_counts(log_w, 4, torch.Generator().manual_seed(0))
    assert torch.isfinite(log_counts).all()
    assert log_counts[0, 0] > 1000           # astronomically many draws of the heavy key


def test_oracle_sampling_counts_distinct_keys_and_is_nearly_unbiased(step):
    q, k, v = step
    dense, _ = dense_attention(q, k, v)
    out, stats = oracle_sampling_attention(q, k, v, 0.03, seed=0)
    assert stats["keys_read"].tolist() == [30] * 6
    runs = torch.stack([oracle_sampling_attention(q, k, v, 0.03, seed=s)[0] for s in range(60)])
    single = np.mean([rel_err(r, dense) for r in runs])
    averaged = rel_err(runs.mean(0), dense)
    assert averaged < 0.35 * single       # errors cancel: the estimator is close to unbiased
    again, _ = oracle_sampling_attention(q, k, v, 0.03, seed=0)
    assert torch.equal(out, again)


def test_hybrid_is_exact_on_the_top_half_and_samples_the_tail_mass():
    # One-hot values turn the output into the weight each key received.
    q, k, _ = synthetic_decode_step(heads=2, kv_heads=1, n=10, d=8, peaks=2, seed=4)
    v = torch.eye(10)[None]
    true = torch.softmax(attention._grouped_scores(q, k), dim=-1)
    for seed in range(5):
        out, stats = hybrid_attention(q, k, v, 0.4, seed=seed)       # m = 4: 2 exact + 2 sampled
        assert stats["keys_read"].tolist() == [4, 4]
        for h in range(2):
            top = true[h].topk(2).indices
            assert torch.allclose(out[h, top], true[h, top], atol=1e-6)
            tail = torch.ones(10, dtype=torch.bool)
            tail[top] = False
            assert int((out[h, tail] > 0).sum()) == 2
            assert float(out[h, tail].sum()) == pytest.approx(float(true[h, tail].sum()), rel=1e-5)


def test_streaming_is_softmax_over_sinks_and_recent(step):
    q, k, v = step
    out, stats = streaming_attention(q, k, v, sinks=3, recent=20)
    keep = torch.zeros(6, 1000, dtype=torch.bool)
    keep[:, :3] = True
    keep[:, -20:] = True
    assert torch.allclose(out, per_head_reference(q, k, v, keep), atol=1e-5)
    assert stats["budget"] == pytest.approx(23 / 1000)


@pytest.mark.parametrize("n", [1000, 1003])           # a partial last page too
def test_quest_bound_never_below_a_true_score_and_budget_respected(n):
    q, k, v = synthetic_decode_step(heads=4, kv_heads=2, n=n, d=16, seed=5)
    out, stats = quest_attention(q, k, v, 0.1, page=16)
    assert (stats["keys_read"] <= round(0.1 * n)).all()
    assert stats["pages_kept"].tolist() == [6] * 4 and stats["metadata_vectors"] == 2 * math.ceil(n / 16)
    dense, _ = dense_attention(q, k, v)
    assert torch.allclose(quest_attention(q, k, v, 1.0, page=16)[0], dense, atol=1e-6)
    kept_pages = quest_attention(q, k, v, 16 / n, page=16)[1]["pages_kept"]
    assert kept_pages.tolist() == [1] * 4        # at least one page, even below a page of budget
    assert quest_attention(q, k, v, 1 / n, page=16)[1]["keys_read"].tolist() == [16] * 4


def test_quest_bound_is_an_upper_bound():
    torch.manual_seed(0)
    q = torch.randn(1, 8)
    page = torch.randn(16, 8)
    bound = q.clamp(min=0) @ page.amax(0) + q.clamp(max=0) @ page.amin(0)
    assert bool(((page @ q[0]) <= bound + 1e-6).all())


def test_quest_with_one_token_pages_is_topk(step):
    q, k, v = step
    a, sa = quest_attention(q, k, v, 0.04, page=1)
    b, sb = topk_attention(q, k, v, 0.04)
    assert torch.allclose(a, b, atol=1e-6) and torch.equal(sa["keys_read"], sb["keys_read"])


@pytest.mark.parametrize("fn", [topk_attention, quest_attention])
def test_gqa_groups_read_their_own_kv_head(fn):
    q, k, v = synthetic_decode_step(heads=6, kv_heads=3, n=400, d=8, seed=7)
    together, _ = fn(q, k, v, 0.1)
    for g in range(3):
        alone, _ = fn(q[2 * g:2 * g + 2], k[g:g + 1], v[g:g + 1], 0.1)
        assert torch.allclose(together[2 * g:2 * g + 2], alone, atol=1e-6)
    swapped, _ = fn(q, k.flip(0), v.flip(0), 0.1)
    assert not torch.allclose(swapped, together)


def test_oracle_sampling_uses_the_group_kv_head():
    # With every key certain to be drawn (budget 1, two keys per head), the oracle's
    # output is a convex mix of its own KV head's values only.
    q, k, v = synthetic_decode_step(heads=4, kv_heads=2, n=2, d=4, peaks=0, seed=1)
    v = torch.stack([torch.zeros(2, 4), torch.ones(2, 4)])
    out, _ = oracle_sampling_attention(q, k, v, 1.0)
    assert torch.allclose(out[:2], torch.zeros(2, 4)) and torch.allclose(out[2:], torch.ones(2, 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_compute_in_float32(step, dtype):
    q, k, v = step
    dense, _ = dense_attention(q, k, v)
    for fn, args in [(dense_attention, ()), (topk_attention, (0.1,)), (quest_attention, (0.1,)),
                     (oracle_sampling_attention, (0.1,)), (hybrid_attention, (0.1,)),
                     (streaming_attention, (4, 64))]:
        out, _ = fn(q.to(dtype), k.to(dtype), v.to(dtype), *args)
        assert out.dtype == dtype and torch.isfinite(out.float()).all()
    low, _ = dense_attention(q.to(dtype), k.to(dtype), v.to(dtype))
    assert rel_err(low, dense) < 0.02


def test_degenerate_inputs_stay_finite():
    q = torch.zeros(2, 8)
    k = torch.ones(1, 50, 8)                          # duplicate keys
    v = torch.randn(1, 50, 8)
    for fn in (topk_attention, oracle_sampling_attention, hybrid_attention, quest_attention):
        out, _ = fn(q, k, v, 0.1)
        assert torch.isfinite(out).all()
    big = torch.full((2, 8), 1e4)
    out, _ = oracle_sampling_attention(big, torch.randn(1, 50, 8), v, 0.5)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("budget", [0, -0.1, 1.5, float("nan")])
def test_budget_outside_unit_interval_is_refused(step, budget):
    q, k, v = step
    for fn in (topk_attention, oracle_sampling_attention, hybrid_attention, quest_attention):
        with pytest.raises(ValueError, match="budget"):
            fn(q, k, v, budget)


def test_shape_errors_name_the_problem(step):
    q, k, v = step
    with pytest.raises(ValueError, match="multiple of the KV heads"):
        dense_attention(q[:5], k, v)
    with pytest.raises(ValueError, match="head dimension"):
        dense_attention(q[:, :8], k, v)
    with pytest.raises(ValueError, match="same kv_heads and n"):
        dense_attention(q, k, v[:, :10])
    with pytest.raises(ValueError, match=r"q must have shape \(heads, d\)"):
        dense_attention(q[0], k, v)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        dense_attention(q.numpy(), k, v)
    with pytest.raises(ValueError, match="page"):
        quest_attention(q, k, v, 0.1, page=0)
    with pytest.raises(ValueError, match="sinks \\+ recent"):
        streaming_attention(q, k, v, 0, 0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu(step):
    q, k, v = step
    for fn, args in [(dense_attention, ()), (topk_attention, (0.1,)), (quest_attention, (0.1,)),
                     (streaming_attention, (4, 64)), (oracle_sampling_attention, (0.1,))]:
        cpu, _ = fn(q, k, v, *args)
        gpu, _ = fn(q.cuda(), k.cuda(), v.cuda(), *args)
        assert torch.allclose(cpu, gpu.cpu(), atol=1e-4), fn.__name__
