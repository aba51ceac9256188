"""MagicPIG's sampled attention: against a brute-force reading of the estimator, its
statistics, what it never reads, GQA, determinism, numerics and bad input."""

import math

import numpy as np
import pytest
import torch

from pigviz.attention import dense_attention, streaming_attention
from pigviz.lsh import magicpig
from pigviz.lsh.index import build_index
from pigviz.lsh.magicpig import attend, sampled_attention, synthetic_decode_step
from pigviz.lsh.simhash import (
    collision_probability,
    inclusion_probability,
    log_inclusion_probability,
    log_inclusion_probability_torch,
)


@pytest.fixture(scope="module")
def step():
    return synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1)


@pytest.fixture(scope="module")
def index(step):
    return build_index(step[1], K=8, L=40, sinks=4, recent=32, seed=0)


def rel_err(a, b):
    return float(((a.float() - b.float()).norm(dim=-1) / b.float().norm(dim=-1)).mean())


def brute_force(index, q, k, v, min_hits=2):
    """The estimator written out per head in float64: compare the query's bucket with every
    key's bucket in every table, then the seed's five lines."""
    H, Hkv, n = q.shape[0], k.shape[0], k.shape[1]
    exact = np.r_[0 : index.sinks, n - index.recent : n]
    outs, sampled_sets = [], []
    for h in range(H):
        g = h // (H // Hkv)
        centred = k[g].double() - index.mean[g].double()
        key_buckets = index.bucket_ids(k[g] - index.mean[g])  # (n, L)
        hits = (key_buckets == index.bucket_ids(q[h])[None, :]).sum(1).numpy()
        hits[exact] = 0
        S = np.flatnonzero(hits >= min_hits)
        sampled_sets.append(S)
        qd, kd, vd = q[h].double().numpy(), k[g].double().numpy(), v[g].double().numpy()
        c = centred.numpy()[S]
        cos = c @ qd / np.maximum(np.linalg.norm(c, axis=1) * np.linalg.norm(qd), 1e-300)
        log_u = log_inclusion_probability(collision_probability(cos), index.K, index.L, min_hits)
        s = kd[S] @ qd / math.sqrt(len(qd)) - log_u
        s_exact = kd[exact] @ qd / math.sqrt(len(qd))
        scores = np.concatenate([s, s_exact])
        w = np.exp(scores - scores.max())
        outs.append((w / w.sum()) @ np.concatenate([vd[S], vd[exact]]))
    return torch.tensor(np.array(outs)), sampled_sets


def test_attend_matches_the_brute_force_estimator(step, index):
    q, k, v = step
    out, stats = attend(index, q, k, v, return_read_mask=True)
    reference, sampled_sets = brute_force(index, q, k, v)
    assert torch.allclose(out.double(), reference, rtol=1e-4, atol=1e-4)
    assert stats["sampled"].tolist() == [len(S) for S in sampled_sets]
    exact = torch.zeros(4000, dtype=torch.bool)
    exact[:4] = exact[-32:] = True
    for h, S in enumerate(sampled_sets):
        assert torch.equal(stats["read_mask"][h] & ~exact, torch.isin(torch.arange(4000), torch.tensor(S)))


def test_stats_count_distinct_keys_exact_set_included(step, index):
    q, k, v = step
    _, stats = attend(index, q, k, v, return_read_mask=True)
    assert stats["exact"] == 36 and stats["n"] == 4000
    assert torch.equal(stats["keys_read"], stats["read_mask"].sum(1))
    assert torch.equal(stats["keys_read"], stats["sampled"] + 36)
    assert stats["budget"] == pytest.approx(float(stats["keys_read"].double().mean()) / 4000)
    # Candidates: every entry in the query's bucket of each table, counted by brute force.
    for h in range(6):
        g = h // 3
        same = index.bucket_ids(k[g] - index.mean[g]) == index.bucket_ids(q[h])[None, :]
        assert int(stats["candidates"][h]) == int(same.sum())


def test_nothing_outside_the_read_set_is_ever_loaded(step, index):
    q, k, v = step
    out, stats = attend(index, q, k, v, return_read_mask=True)
    poisoned_k, poisoned_v = k.clone(), v.clone()
    for g in range(2):
        read_by_group = stats["read_mask"][3 * g : 3 * g + 3].any(0)
        poisoned_k[g, ~read_by_group] = float("nan")
        poisoned_v[g, ~read_by_group] = float("nan")
    assert bool(torch.isnan(poisoned_k).any())
    again, _ = attend(index, q, poisoned_k, poisoned_v)
    assert torch.isfinite(again).all() and torch.equal(again, out)
    # Half-precision values take the gather path rather than embedding_bag: same promise.
    again16, _ = attend(index, q, poisoned_k, poisoned_v.half())
    assert torch.isfinite(again16).all()


def test_without_exact_set_only_sampled_keys_are_loaded(step):
    q, k, v = step
    bare = build_index(k, K=8, L=40, sinks=0, recent=0)
    out, stats = attend(bare, q, k, v, return_read_mask=True)
    assert stats["exact"] == 0 and (stats["sampled"] > 0).all()
    poisoned_k, poisoned_v = k.clone(), v.clone()
    for g in range(2):
        unread = ~stats["read_mask"][3 * g : 3 * g + 3].any(0)
        poisoned_k[g, unread] = poisoned_v[g, unread] = float("nan")
    again, _ = attend(bare, q, poisoned_k, poisoned_v)
    assert torch.equal(again, out)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_key_or_value_that_is_read_is_refused(step, index, bad):
    """Before: a NaN in one exact key turned into all-zero outputs for its whole group."""
    q, k, v = step
    for name, token in [("k", 0), ("k", 3999), ("v", 1), ("v", 3990)]:  # in the exact set
        kk, vv = k.clone(), v.clone()
        (kk if name == "k" else vv)[1, token, 5] = bad
        with pytest.raises(ValueError, match=f"^{name} holds a non-finite number.*query head 3"):
            attend(index, q, kk, vv)
    _, stats = attend(index, q, k, v, return_read_mask=True)
    sampled = int((stats["read_mask"][0] & ~stats["read_mask"][1:3].any(0)).nonzero()[-1])
    kk = k.clone()
    kk[0, sampled] = bad  # a key only head 0 samples
    with pytest.raises(ValueError, match="query head 0"):
        attend(index, q, kk, v)


def test_error_is_small_on_a_planted_peak_and_shrinks_as_l_grows():
    q, k, v = synthetic_decode_step(heads=9, kv_heads=3, n=8192, d=64, seed=0)
    dense, _ = dense_attention(q, k, v)
    errors, budgets = [], []
    for L in (25, 75, 300):
        out, stats = sampled_attention(q, k, v, K=10, L=L)
        errors.append(rel_err(out, dense))
        budgets.append(stats["budget"])
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.05
    assert budgets[0] < budgets[1] < budgets[2] < 0.15


def test_certain_sampling_reproduces_dense_attention(step):
    # One bit per table and many tables: every key collides in >= 1 table with u = 1 - 2^-L
    # ~ 1, so the estimator is plain softmax attention over all keys.
    q, k, v = step
    out, stats = sampled_attention(q, k, v, K=1, L=120, min_hits=1, sinks=0, recent=0)
    assert stats["budget"] == 1.0
    assert torch.allclose(out, dense_attention(q, k, v)[0], atol=1e-5)


def test_gqa_head_h_uses_kv_head_h_over_group(step):
    q, k, v = step
    together, stats = sampled_attention(q, k, v, K=8, L=40, seed=3)
    for g in range(2):
        alone, alone_stats = sampled_attention(q[3 * g : 3 * g + 3], k[g : g + 1], v[g : g + 1], K=8, L=40, seed=3)
        assert torch.allclose(together[3 * g : 3 * g + 3], alone, atol=1e-6)
        assert torch.equal(stats["sampled"][3 * g : 3 * g + 3], alone_stats["sampled"])


def test_same_seed_same_answer_other_seed_other_sample(step):
    q, k, v = step
    a, sa = sampled_attention(q, k, v, K=8, L=40, seed=5)
    b, sb = sampled_attention(q, k, v, K=8, L=40, seed=5)
    c, sc = sampled_attention(q, k, v, K=8, L=40, seed=6)
    assert torch.equal(a, b) and torch.equal(sa["sampled"], sb["sampled"])
    assert not torch.equal(sa["sampled"], sc["sampled"])


def test_empty_sampled_set_falls_back_to_the_exact_set(step):
    q, k, v = step
    # 16 bits and 2 tables that must both agree: essentially nothing is sampled.
    out, stats = sampled_attention(q, k, v, K=16, L=2, min_hits=2, sinks=4, recent=32)
    assert int(stats["sampled"].sum()) == 0
    assert torch.allclose(out, streaming_attention(q, k, v, 4, 32)[0], atol=1e-6)


def test_nothing_to_read_gives_zeros_not_nan(step):
    q, k, v = step
    out, stats = sampled_attention(q, k, v, K=16, L=2, sinks=0, recent=0)
    assert int(stats["keys_read"].sum()) == 0
    assert torch.equal(out, torch.zeros_like(out))


def test_interpolated_log_u_matches_the_exact_formula(index):
    p = torch.linspace(0.05, 1.0, 997)
    table = magicpig._log_inclusion(index, p, 2).double()
    exact = log_inclusion_probability_torch(p.double(), index.K, index.L, 2)
    assert torch.allclose(table, exact, atol=2e-4, rtol=1e-4)


def test_zero_norm_query_duplicate_and_zero_keys_stay_finite():
    q = torch.zeros(4, 16)
    q[1] = 1.0
    k = torch.ones(2, 300, 16)  # all keys equal: centred keys are zero
    v = torch.randn(2, 300, 16, generator=torch.Generator().manual_seed(0))
    out, stats = sampled_attention(q, k, v, K=6, L=20, sinks=2, recent=4)
    assert torch.isfinite(out).all()
    # Centred keys are all zero, so cos is taken as 0 (p = 1/2) and every sampled key gets
    # the same 1/u boost over the equally scored exact keys.
    _, s = sampled_attention(q, k, v, K=6, L=20, sinks=2, recent=4, return_read_mask=True)
    boost = 1.0 / inclusion_probability(0.5, 6, 20)
    exact = torch.zeros(300, dtype=torch.bool)
    exact[:2] = exact[-4:] = True
    # Zero query and zero centred keys all hash to bucket 0: every middle key is sampled.
    assert s["sampled"][0] == 294
    for h in range(4):
        sampled = s["read_mask"][h] & ~exact
        values = v[h // 2].double()
        expected = (values[exact].sum(0) + boost * values[sampled].sum(0)) / (6 + boost * int(sampled.sum()))
        assert torch.allclose(out[h].double(), expected, atol=1e-5)
    zeros = torch.zeros(2, 300, 16)
    out, _ = sampled_attention(q, zeros, v, K=6, L=20)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(step, index, dtype):
    q, k, v = step
    ref, ref_stats = attend(index, q, k, v)
    out, stats = attend(index, q.to(dtype), k.to(dtype), v.to(dtype))
    assert out.dtype == dtype and torch.isfinite(out.float()).all()
    assert rel_err(out, ref) < 0.05
    assert abs(stats["budget"] - ref_stats["budget"]) < 0.01


def test_bad_inputs_name_the_parameter(step, index):
    q, k, v = step
    with pytest.raises(ValueError, match="min_hits must be in"):
        attend(index, q, k, v, min_hits=0)
    with pytest.raises(ValueError, match="min_hits must be in"):
        attend(index, q, k, v, min_hits=41)
    with pytest.raises(ValueError, match="min_hits must be in"):
        sampled_attention(q, k, v, K=10, L=10, min_hits=11)
    with pytest.raises(ValueError, match="K must be in"):
        sampled_attention(q, k, v, K=0, L=10)
    with pytest.raises(ValueError, match="L must be in"):
        sampled_attention(q, k, v, K=10, L=0)
    with pytest.raises(ValueError, match="sinks \\+ recent"):
        sampled_attention(q, k, v, K=10, L=10, sinks=2000, recent=2000)
    with pytest.raises(ValueError, match="multiple of the KV heads"):
        sampled_attention(q[:5], k, v, K=10, L=10)
    with pytest.raises(ValueError, match="same kv_heads and n"):
        sampled_attention(q, k, v[:, :100], K=10, L=10)
    with pytest.raises(ValueError, match="index was built for"):
        attend(index, q, k[:, :100], v[:, :100])
    with pytest.raises(ValueError, match="finite"):
        attend(index, torch.full_like(q, float("nan")), k, v)
    with pytest.raises(TypeError, match="LSHIndex"):
        attend("index", q, k, v)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu(step):
    q, k, v = step
    cpu, cpu_stats = sampled_attention(q, k, v, K=8, L=40, seed=0, return_read_mask=True)
    gpu, gpu_stats = sampled_attention(q.cuda(), k.cuda(), v.cuda(), K=8, L=40, seed=0, return_read_mask=True)
    assert gpu.device.type == "cuda" and torch.isfinite(gpu).all()
    # A projection within rounding of zero may flip one bit on the other device.
    agree = (cpu_stats["read_mask"] == gpu_stats["read_mask"].cpu()).double().mean()
    assert agree > 0.999
    assert rel_err(gpu.cpu(), cpu) < 0.02


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_never_reads_outside_the_read_set(step):
    q, k, v = (t.cuda() for t in step)
    index = build_index(k, K=8, L=40)
    out, stats = attend(index, q, k, v, return_read_mask=True)
    pk, pv = k.clone(), v.clone()
    for g in range(2):
        unread = ~stats["read_mask"][3 * g : 3 * g + 3].any(0)
        pk[g, unread] = pv[g, unread] = float("nan")
    again, _ = attend(index, q, pk, pv)
    assert torch.isfinite(again).all() and torch.allclose(again, out)


@pytest.mark.slow
def test_benchmark_script_runs_and_reports_consistent_rows(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_attend.py"
    spec = importlib.util.spec_from_file_location("bench_attend", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    threads = torch.get_num_threads()
    try:
        rows = bench.main(["--quick", "--repeats", "3", "--stages"])
    finally:
        torch.set_num_threads(threads)
    assert [r["shape"] for r in rows] == list(bench.SHAPES)
    for r in rows:
        assert 0 < r["budget"] < 0.2 and 0 < r["bytes_ratio"] < 0.5
        # uint16 ids at these 8k tokens, int32 offsets
        assert r["table_bytes"] == r["kv_heads"] * r["L"] * (2 * r["n"] + 4 * (2 ** r["K"] + 1))
        assert r["attend_ms"] > 0 and r["sdpa_ms"] > 0 and math.isfinite(r["err_magicpig"])
        assert r["dense_best_ms"] == min(r["sdpa_ms"], r["sdpa_bf16_ms"])
        for dtype in ("fp32", "bf16"):  # the stages, run apart, compute the fused step's output
            stages = r[f"stages_{dtype}"]
            assert stages["out_rel_diff"] < 1e-6 and set(stages["stages"]) == {"hash", "walk", "hits", "K", "mix"}
            assert all(x["ms"] > 0 and x["floor_ms"] > 0 for x in stages["stages"].values())
        # The yardstick: dense's bf16 byte floor is half its fp32 one; MagicPIG per token counts
        # the step, the upkeep and the build, so it is above the step and falls as the build is
        # spread over more tokens; the fastest dense is the least of the three measured.
        assert r["dense_bf16_floor_ms"] == pytest.approx(r["sdpa_floor_ms"] / 2)
        assert r["fastest_dense_ms"] == min(r["sdpa_ms"], r["sdpa_bf16_ms"], r["sdpa_gqa_ms"])
        upkeep = r["upkeep_bf16_ms_per_token_4096"]
        assert r["attend_bf16_ms"] + upkeep < r["mp_token_4096_ms"] < r["mp_token_256_ms"]
        build = 1e3 * (r["build_bf16_s"] + r["upkeep_bf16_room_s"])
        assert r["recentre_ms_per_token"] == pytest.approx(2 * build / r["n"])
        assert r["mp_token_256_ms"] - r["attend_bf16_ms"] - upkeep - r["recentre_ms_per_token"] == pytest.approx(
            build / 256
        )
        assert r["mp_token_256_over_dense_floor"] == pytest.approx(r["mp_token_256_ms"] / r["dense_bf16_floor_ms"])
        # What the floors allow: the step no less than its K and V gathers, and per token no
        # less than those plus the index's hashing; each verdict follows its ratio and target.
        reach, st = r["reach_bf16"], r["stages_bf16"]["stages"]
        assert reach["step_floors_ms"] == pytest.approx(sum(x["floor_ms"] for x in st.values()))
        assert reach["gather_floors_ms"] == pytest.approx(st["K"]["floor_ms"] + st["mix"]["floor_ms"])
        assert 0 < reach["gather_floors_ms"] < reach["step_floors_ms"]
        assert reach["gather_floors_ms"] < reach["token_4096_bound_ms"]
        assert reach["build_hashing_ms"] == pytest.approx(
            1e3 * r["n"] * r["kv_heads"] * r["L"] * r["K"] * r["d"] / r["gemm_macs_per_s"]
        )
        assert reach["token_4096_bound_over_dense_floor"] == pytest.approx(
            reach["token_4096_bound_ms"] / r["dense_bf16_floor_ms"]
        )
        text = bench.reach_text(r)
        step_ok = reach["gather_floors_over_own_floor"] <= bench.TARGET_STEP_OVER_FLOOR
        token_ok = reach["token_4096_bound_over_dense_floor"] <= bench.TARGET_SHARE_OF_DENSE_FLOOR
        verdicts = [part for part in text.split("target ")[1:]]
        assert [("within reach" in v) for v in verdicts] == [step_ok, token_ok]
    out = capsys.readouterr().out
    assert "SDPA/att" in out and "x floor" in out and "fused step" in out
