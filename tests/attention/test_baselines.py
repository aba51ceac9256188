"""Decode-step baselines in pigviz.attention: dense, TopK, oracle sampling, hybrid,
StreamingLLM and Quest, on one layer with grouped-query attention."""

import math

import numpy as np
import pytest
import torch

from pigviz.attention import baselines as attention
from pigviz.attention import (
    dense_attention,
    hybrid_attention,
    oracle_sampling_attention,
    quest_attention,
    quest_rank_all_attention,
    softmax_attention_torch,
    streaming_attention,
    topk_attention,
)
from pigviz.lsh.magicpig import synthetic_decode_step


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


def test_race_counts_match_drawing_until_an_extra_key_would_be_needed():
    """The vectorised sampler must reproduce the plain loop: draw i.i.d. from w, keep every
    draw, and stop at (without keeping) the first draw that needs an (m+1)-th distinct key."""
    w = np.array([0.5, 0.3, 0.12, 0.05, 0.03])
    m, trials = 3, 20_000
    rng = np.random.default_rng(0)
    loop_counts = np.zeros(len(w))
    for _ in range(trials):
        seen = {}
        while True:
            i = rng.choice(len(w), p=w)
            if i not in seen and len(seen) == m:
                break
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
    log_counts = attention._race_log_counts(log_w, 3, torch.Generator().manual_seed(0))
    assert torch.isfinite(log_counts[0, :3]).all() and log_counts[0, 3] == -math.inf
    assert log_counts[0, 0] > 900  # astronomically many draws of the heavy key


def test_race_with_every_drawable_key_in_budget_returns_the_weights():
    # Nothing can end the run (3 keys of positive weight, m = 3): unlimited draws.
    log_w = torch.log(torch.tensor([[0.6, 0.3, 0.1, 0.0, 0.0]], dtype=torch.float64))
    for m in (3, 4, 5):
        log_counts = attention._race_log_counts(log_w, m, torch.Generator().manual_seed(0))
        assert torch.equal(log_counts, log_w)


def sink_step(runs: int, sinks: int = 1, n: int = 32, seed: int = 0):
    """``runs`` identical query heads on one KV head: each head is an independent run of a
    sampler. The first ``sinks`` tokens are sinks, each holding as much weight as all the
    other keys together, at values near 0; the other keys are about equally weighted, with
    values in [0.36, 0.96]. Keys are the unit vectors, so q·k_i / sqrt(d) is the chosen
    score i. Returns (q, k, v, exact output)."""
    rng = np.random.default_rng(seed)
    rest = 0.05 * rng.standard_normal(n - sinks)
    scores = np.concatenate([np.full(sinks, math.log(np.exp(rest).sum())), rest])
    values = np.concatenate([0.02 * np.arange(1, sinks + 1), rng.uniform(0.36, 0.96, n - sinks)])
    q = torch.tensor(scores * math.sqrt(n)).expand(runs, n).contiguous()
    k = torch.eye(n, dtype=torch.float64)[None]
    v = torch.tensor(values)[None, :, None]
    weights = np.exp(scores - scores.max())
    return q, k, v, float(weights @ values / weights.sum())


def zscore(estimates: torch.Tensor, truth: float) -> float:
    est = estimates.double().flatten()
    return float((est.mean() - truth) / (est.std() / math.sqrt(est.numel())))


@pytest.mark.parametrize("fn", [oracle_sampling_attention, hybrid_attention])
@pytest.mark.parametrize("budget", [4, 12])
def test_samplers_are_unbiased_on_a_sink(fn, budget):
    """20,000 runs against the dense output. The hybrid reads floor(m/2) keys exactly, so
    it gets one sink more than that: its sampled tail is a sink case too. Stopping right
    after the m-th new key instead gave z = +25 for the oracle at m = 12."""
    sinks = 1 if fn is oracle_sampling_attention else budget // 2 + 1
    q, k, v, truth = sink_step(20_000, sinks)
    dense, _ = dense_attention(q[:1], k, v)
    assert float(dense) == pytest.approx(truth, abs=1e-12)
    out, stats = fn(q, k, v, budget / 32, seed=budget)
    assert stats["keys_read"].tolist() == [budget] * 20_000
    assert out.std() > 0.01  # the runs differ: a real sample
    assert abs(zscore(out, truth)) < 4


def test_oracle_sampling_counts_distinct_keys_and_is_reproducible(step):
    q, k, v = step
    out, stats = oracle_sampling_attention(q, k, v, 0.03, seed=0)
    assert stats["keys_read"].tolist() == [30] * 6
    again, _ = oracle_sampling_attention(q, k, v, 0.03, seed=0)
    other, _ = oracle_sampling_attention(q, k, v, 0.03, seed=1)
    assert torch.equal(out, again) and not torch.equal(out, other)


def test_samplers_are_exact_when_the_budget_covers_every_key(step):
    q, k, v = step
    dense, _ = dense_attention(q.double(), k.double(), v.double())
    for fn in (oracle_sampling_attention, hybrid_attention):
        out, stats = fn(q.double(), k.double(), v.double(), 1.0, seed=3)
        assert torch.allclose(out, dense, atol=1e-12) and stats["budget"] == 1.0


def test_hybrid_is_exact_on_the_top_half_and_samples_the_tail_mass():
    # One-hot values turn the output into the weight each key received.
    q, k, _ = synthetic_decode_step(heads=2, kv_heads=1, n=10, d=8, peaks=2, seed=4)
    v = torch.eye(10)[None]
    true = torch.softmax(attention._grouped_scores(q, k), dim=-1)
    for seed in range(5):
        out, stats = hybrid_attention(q, k, v, 0.4, seed=seed)  # m = 4: 2 exact + 2 sampled
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


@pytest.mark.parametrize("n", [1000, 1003])  # a partial last page too
def test_quest_bound_never_below_a_true_score_and_budget_respected(n):
    q, k, v = synthetic_decode_step(heads=4, kv_heads=2, n=n, d=16, seed=5)
    out, stats = quest_attention(q, k, v, 0.1, page=16)
    assert (stats["keys_read"] <= round(0.1 * n)).all()
    assert stats["pages_kept"].tolist() == [6] * 4 and stats["metadata_vectors"] == 2 * math.ceil(n / 16)
    dense, _ = dense_attention(q, k, v)
    assert torch.allclose(quest_attention(q, k, v, 1.0, page=16)[0], dense, atol=1e-6)
    kept_pages = quest_attention(q, k, v, 16 / n, page=16)[1]["pages_kept"]
    assert kept_pages.tolist() == [1] * 4  # at least one page, even below a page of budget
    # At a budget below one page the current page alone is read (the authors' rule) or the
    # page with the highest bound (rank-all).
    assert quest_attention(q, k, v, 1 / n, page=16)[1]["keys_read"].tolist() == [n - (n - 1) // 16 * 16] * 4
    assert quest_rank_all_attention(q, k, v, 1 / n, page=16)[1]["keys_read"].tolist() == [16] * 4


@pytest.mark.parametrize("current_page", [True, False])
@pytest.mark.parametrize("n", [1000, 1003])
def test_quest_keeps_the_pages_with_the_highest_brute_force_bound(n, current_page):
    """Bound each page by looping over its keys, keep pages in bound order while their
    tokens fit (at least one), and compare with the tokens Quest attends over. The authors'
    rule (quest_attention) puts the page holding the current token first, whatever its
    bound; quest_rank_all_attention ranks it with the others."""
    q, k, _ = synthetic_decode_step(heads=4, kv_heads=2, n=n, d=16, seed=5)
    q, k = q.double(), k.double()
    v = torch.eye(n, dtype=torch.float64).expand(2, n, n)  # output = weight of each token
    page, m = 16, round(0.1 * n)
    fn = quest_attention if current_page else quest_rank_all_attention
    out, stats = fn(q, k, v, 0.1, page=page)
    for h in range(4):
        keys = k[h // 2]
        bounds, spans = [], []
        for start in range(0, n, page):
            block = keys[start : start + page]
            lo, hi = block.min(0).values, block.max(0).values
            bound = sum(max(float(q[h, i] * lo[i]), float(q[h, i] * hi[i])) for i in range(16))
            assert float((block @ q[h]).max()) <= bound + 1e-9  # an upper bound
            bounds.append(bound)
            spans.append(range(start, min(n, start + page)))
        expected = torch.zeros(n, dtype=torch.bool)
        used = 0
        last = len(bounds) - 1
        for p in sorted(range(len(bounds)), key=lambda p: (not (current_page and p == last), -bounds[p])):
            if used and used + len(spans[p]) > m:
                break
            used += len(spans[p])
            expected[list(spans[p])] = True
        assert torch.equal(out[h] > 0, expected), h
        assert int(stats["keys_read"][h]) == used


def test_quest_with_one_token_pages_is_topk(step):
    q, k, v = step
    a, sa = quest_rank_all_attention(q, k, v, 0.04, page=1)
    b, sb = topk_attention(q, k, v, 0.04)
    assert torch.allclose(a, b, atol=1e-6) and torch.equal(sa["keys_read"], sb["keys_read"])
    # The authors' rule: the current token, then TopK over the others with one key less.
    c, sc = quest_attention(q, k, v, 0.04, page=1)
    m = round(0.04 * k.shape[1])
    scores = (q.double().view(2, 3, -1) @ k.double().transpose(1, 2)).reshape(6, -1)
    keep = torch.zeros_like(scores, dtype=torch.bool)
    keep.scatter_(1, scores[:, :-1].topk(m - 1, dim=-1).indices, True)
    keep[:, -1] = True
    assert torch.allclose(c, per_head_reference(q, k, v, keep), atol=1e-5)
    assert sc["keys_read"].tolist() == [m] * 6


@pytest.mark.parametrize("n", [1000, 1003, 1008])
def test_quest_always_reads_the_current_page_and_counts_it(n):
    """Make the current page's bound the lowest of all: the authors' rule reads it anyway,
    inside the same budget; the rank-all rule drops it."""
    q, k, v = synthetic_decode_step(heads=2, kv_heads=2, n=n, d=16, seed=5, dtype=torch.float64)
    last = (n - 1) // 16 * 16
    k = k.clone()
    k[:, last:] = -2.0 * k[:, :last].abs().amax(1, keepdim=True) * torch.sign(q)[:, None]
    _, authors = quest_attention(q, k, v, 0.1, page=16)
    w = torch.eye(n, dtype=torch.float64).expand(2, n, n)  # float64: tiny weights stay > 0
    read_authors = quest_attention(q, k, w, 0.1, page=16)[0] > 0
    read_all = quest_rank_all_attention(q, k, w, 0.1, page=16)[0] > 0
    assert read_authors[:, last:].all() and not read_all[:, last:].any()
    assert (authors["keys_read"] <= round(0.1 * n)).all()
    assert authors["keys_read"].tolist() == [int(x.sum()) for x in read_authors]


@pytest.mark.parametrize("fn", [topk_attention, quest_attention, quest_rank_all_attention])
def test_gqa_groups_read_their_own_kv_head(fn):
    q, k, v = synthetic_decode_step(heads=6, kv_heads=3, n=400, d=8, seed=7)
    together, _ = fn(q, k, v, 0.1)
    for g in range(3):
        alone, _ = fn(q[2 * g : 2 * g + 2], k[g : g + 1], v[g : g + 1], 0.1)
        assert torch.allclose(together[2 * g : 2 * g + 2], alone, atol=1e-6)
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
    for fn, args in [
        (dense_attention, ()),
        (topk_attention, (0.1,)),
        (quest_attention, (0.1,)),
        (oracle_sampling_attention, (0.1,)),
        (hybrid_attention, (0.1,)),
        (streaming_attention, (4, 64)),
    ]:
        out, _ = fn(q.to(dtype), k.to(dtype), v.to(dtype), *args)
        assert out.dtype == dtype and torch.isfinite(out.float()).all()
    low, _ = dense_attention(q.to(dtype), k.to(dtype), v.to(dtype))
    assert rel_err(low, dense) < 0.02


def test_degenerate_inputs_stay_finite():
    q = torch.zeros(2, 8)
    k = torch.ones(1, 50, 8)  # duplicate keys
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


def test_softmax_attention_torch_names_a_numpy_argument(step):
    q, k, v = step
    for args, name in [((q.numpy(), k[0], v[0]), "q"), ((q, k[0].numpy(), v[0]), "k"), ((q, k[0], v[0].numpy()), "v")]:
        with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor"):
            softmax_attention_torch(*args)
    with pytest.raises(TypeError, match="q must be a floating-point"):
        softmax_attention_torch(q.long(), k[0], v[0])
    with pytest.raises(TypeError, match="mask must be a boolean"):
        softmax_attention_torch(q, k[0], v[0], mask=np.ones((6, 1000), dtype=bool))
    with pytest.raises(ValueError, match="at least 2-D"):
        softmax_attention_torch(q[0], k[0, 0], v[0, 0])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu(step):
    q, k, v = step
    for fn, args in [
        (dense_attention, ()),
        (topk_attention, (0.1,)),
        (quest_attention, (0.1,)),
        (streaming_attention, (4, 64)),
        (oracle_sampling_attention, (0.1,)),
    ]:
        cpu, _ = fn(q, k, v, *args)
        gpu, _ = fn(q.cuda(), k.cuda(), v.cuda(), *args)
        assert torch.allclose(cpu, gpu.cpu(), atol=1e-4), fn.__name__
