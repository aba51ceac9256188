"""Key geometry and real-key hashing: synthetic data with known answers, then the shipped capture."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pigviz.keys import geometry as kg
from pigviz.keys import hashing as kh
from pigviz.keys import projection as kp
from pigviz.lessons import nb02_key_cone
from pigviz.lsh import simhash as sh
from pigviz.lsh import simhash_checks
from pigviz.model import capture as capmod
from tests.factories import synthetic_metadata


def planted_capture(n=200, t=8, d=16, cone=4.0, seed=0, layers=(3, 5)) -> capmod.Capture:
    """Keys = cone * (a fixed direction) + Gaussian noise; queries are random. Two KV heads
    with two query heads each, so head/KV bookkeeping is exercised."""
    gen = torch.Generator().manual_seed(seed)
    n_layers, n_kv, n_heads = len(layers), 2, 4
    direction = torch.nn.functional.normalize(torch.randn(d, generator=gen), dim=0)
    k = cone * direction + torch.randn(n_layers, n_kv, n, d, generator=gen)
    q = torch.randn(n_layers, n_heads, t, d, generator=gen)
    v = torch.randn(n_layers, n_kv, n, d, generator=gen)
    meta = synthetic_metadata(n, t, d, layers, n_heads, n_kv, n_model_layers=max(layers) + 1)
    cap = capmod.Capture(queries=q, keys=k, values=v, query_positions=torch.arange(n - t, n), metadata=meta)
    cap.outputs = torch.stack([cap.reference_outputs(r) for r in range(n_layers)])
    return cap


@pytest.fixture(scope="module")
def planted():
    return planted_capture()


# --------------------------------------------------------------------------- geometry


def test_cone_width_known_answers():
    rng = np.random.default_rng(0)
    direction = np.eye(32)[0]
    narrow = 20 * direction + rng.standard_normal((4000, 32))
    assert kg.cone_width(narrow) > 0.95
    spread = rng.standard_normal((4000, 32))
    assert kg.cone_width(spread) < 0.05
    same = np.tile(rng.standard_normal(32), (10, 1))
    assert kg.cone_width(same) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="keys"):
        kg.cone_width(np.zeros(5))


def test_head_view_picks_the_right_kv_head(planted):
    v = kg.head_view(planted, 5, 3)  # query head 3 -> KV head 1 (group size 2)
    assert v.kv_head == 1
    np.testing.assert_array_equal(v.keys, planted.keys[1, 1].numpy().astype(np.float64))
    np.testing.assert_array_equal(v.queries, planted.queries[1, 3].numpy().astype(np.float64))
    assert kg.head_pairs(planted) == [(3, h) for h in range(4)] + [(5, h) for h in range(4)]


@pytest.mark.parametrize(
    "layer, head, error, words",
    [
        (4, 0, ValueError, ["layer", "[3, 5]"]),
        (3, 9, ValueError, ["head", "[0, 1, 2, 3]", "layer 3"]),
        ("3", 0, TypeError, ["layer"]),
        (3, 1.5, TypeError, ["head"]),
    ],
)
def test_head_view_bad_input_names_the_parameter(planted, layer, head, error, words):
    with pytest.raises(error) as info:
        kg.head_view(planted, layer, head)
    for word in words:
        assert word in str(info.value)


def test_centring_makes_the_mean_zero_and_kills_the_cone(planted):
    v = kg.head_view(planted, 3, 0)
    centred = v.keys_as("centred")
    hashed = kg.non_exact_mask(v.n)
    np.testing.assert_allclose(centred[hashed].mean(axis=0), 0.0, atol=1e-12)
    assert np.abs(centred.mean(axis=0)).max() > 1e-3  # the exact set is left out of the mean
    geo = kg.head_geometry(v)
    assert geo.cone_raw > 0.6 and geo.cone_centred < 0.2
    with pytest.raises(ValueError, match="variant"):
        v.keys_as("shifted")


def test_centring_mean_is_the_engines(planted):
    from pigviz.lsh.index import build_index

    index = build_index(planted.keys[0], K=4, L=2, sinks=kg.EXACT_SINKS, recent=kg.EXACT_RECENT)
    for kv, head in ((0, 0), (1, 2)):
        v = kg.head_view(planted, 3, head)
        assert v.kv_head == kv
        np.testing.assert_allclose(v.mean_key, index.mean[kv].double().numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="keys must hold more than"):
        kg.centring_mean(np.ones((kg.EXACT_SINKS + kg.EXACT_RECENT, 3)))


def test_sink_scores_only_count_keys_the_query_can_see(planted):
    v = kg.head_view(planted, 3, 0)
    n, d = v.keys.shape
    positions = np.arange(70, 70 + len(v.queries))  # queries far before n - EXACT_RECENT
    keys = v.keys.copy()
    keys[100] = 50.0 * v.queries.mean(axis=0)  # a future key every query would love
    early = kg.HeadView(3, 0, 0, keys, v.values, v.queries, positions, v.scaling)
    geo = kg.head_geometry(early)
    scores = v.queries @ keys.T * v.scaling
    visible = np.arange(n)[None, :] <= positions[:, None]
    visible[:, 0] = False
    visible[:, n - kg.EXACT_RECENT :] = False
    best = np.where(visible, scores, -np.inf).max(axis=1)
    assert geo.best_other_score == pytest.approx(best.mean())
    assert geo.median_score == pytest.approx(np.median(scores[visible]))
    assert geo.sink_wins == pytest.approx(np.mean(scores[:, 0] > best))
    assert geo.best_other_score < scores[:, 100].mean()  # key 100 was not counted


def test_sink_onset_edge_cases_fail_the_claim_instead_of_raising(planted):
    n_layers = max(planted.layers) + 1
    planted.extras["key_norm_pos0"] = torch.ones(n_layers, 2)
    planted.extras["key_norm_median"] = torch.ones(n_layers, 2)
    try:
        for weights in (
            torch.full((n_layers, 4), 0.5),
            torch.zeros(n_layers, 4),
        ):
            planted.extras["sink_weight"] = weights
            claim = next(c for c in nb02_key_cone.claims(planted) if "Weight on token 0" in c.text)
            assert not claim.passed
    finally:
        for name in ("sink_weight", "key_norm_pos0", "key_norm_median"):
            planted.extras.pop(name, None)


def test_shift_invariance_is_exact_in_float64(planted):
    err = kg.shift_invariance(planted)
    assert err["fp64"] < 1e-12
    assert err["fp32"] < 1e-4
    assert err["model"] < 1e-5  # the reference outputs were computed the same way
    assert kg.shift_passes(err)
    assert not kg.shift_passes(dict(err, fp64=1e-9))


def test_sink_weight_and_norm_ratio_on_a_planted_sink():
    cap = planted_capture(cone=0.0, seed=1)
    shared = torch.nn.functional.normalize(torch.randn(16, generator=torch.Generator().manual_seed(9)), dim=0)
    cap.queries[0, :2] += 8 * shared  # both query heads of KV head 0 look one way...
    cap.keys[0, 0, 1:] -= 2 * shared  # ...the other keys lean away (as in the real model)...
    cap.keys[0, 0, 0] = 3 * shared  # ...and key 0, shorter than most keys, points there
    geo = kg.head_geometry(kg.head_view(cap, 3, 0))
    assert geo.sink_weight > 0.3
    assert geo.sink_cos_raw > 0.5
    norms = cap.keys[0, 0].norm(dim=-1)
    assert geo.sink_norm_ratio == pytest.approx(float(norms[0] / norms.median()), rel=0.01)  # torch: lower median
    assert geo.sink_norm_ratio < 1


def test_non_exact_mask():
    mask = kg.non_exact_mask(100)
    assert mask.sum() == 100 - kg.EXACT_SINKS - kg.EXACT_RECENT
    assert not mask[:4].any() and not mask[-64:].any() and mask[4] and mask[35]
    with pytest.raises(ValueError, match="recent"):
        kg.non_exact_mask(50)


def test_key_cloud_query_lies_in_its_plane(planted):
    v = kg.head_view(planted, 3, 1)
    cloud = kp.key_cloud(v, 2, "raw", n_planes=8)
    planes = kp.hyperplanes(v.keys.shape[1], 8)
    # the query's side of each hyperplane is the same in the picture as in d dimensions
    np.testing.assert_array_equal(cloud.normals @ cloud.query_dir >= 0, planes @ v.queries[2] >= 0)
    assert cloud.xy.shape == (len(cloud.drawn), 2) and cloud.extent > 0
    assert 0 <= cloud.share_picture <= 1 and 0 <= cloud.share_real <= 1
    np.testing.assert_allclose(cloud.mean_xy, [np.linalg.norm(v.mean_key), 0.0], atol=1e-9)
    centred = kp.key_cloud(v, 2, "centred", n_planes=8)
    np.testing.assert_allclose(centred.mean_xy, 0.0)
    assert centred.extent == pytest.approx(cloud.extent)  # same axes for both pictures
    np.testing.assert_allclose(centred.xy, cloud.xy - cloud.mean_xy)


def test_key_cloud_shares_agree_when_keys_lie_in_the_plane():
    cap = planted_capture(seed=2)
    v = kg.head_view(cap, 3, 0)
    e1 = v.mean_key / np.linalg.norm(v.mean_key)
    q = v.queries[-1]
    e2 = q - (q @ e1) * e1
    e2 /= np.linalg.norm(e2)
    coef = np.random.default_rng(0).standard_normal((v.n, 2)) * 3 + [5, 0]
    v.keys = coef @ np.stack([e1, e2])  # every key in span(mean key, query): the picture is exact
    v._cache.clear()
    cloud = kp.key_cloud(v, -1, "raw", n_planes=4)
    assert cloud.share_picture == pytest.approx(cloud.share_real)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(query_index=8), "query_index"),
        (dict(variant="both"), "variant"),
        (dict(n_planes=0), "n_planes"),
    ],
)
def test_key_cloud_bad_input(planted, kwargs, word):
    with pytest.raises(ValueError, match=word):
        kp.key_cloud(kg.head_view(planted, 3, 0), **kwargs)


# --------------------------------------------------------------------------- hashing


def test_trailing_zero_table():
    table = kh._trailing_zero_table(6).numpy()
    assert table[0] == 6
    for code in range(1, 64):
        assert table[code] == (code & -code).bit_length() - 1


def test_agreement_prefix_matches_brute_force():
    rng = np.random.default_rng(3)
    keys, query = rng.standard_normal((7, 12)), rng.standard_normal(12)
    agree = kh.agreement_prefix(query, keys, n_hashings=1, K_max=5, L_max=4, seed=11)
    planes = np.random.default_rng(11).standard_normal((12, 4 * 5)).astype(np.float32)
    same = ((keys.astype(np.float32) @ planes >= 0) == (query.astype(np.float32) @ planes >= 0)).reshape(7, 4, 5)
    for K in range(1, 6):
        np.testing.assert_array_equal(agree.prefix[:, 0, :] >= K, same[:, :, :K].all(axis=2))


def test_sampled_in_of_the_query_itself_and_its_opposite():
    q = np.random.default_rng(4).standard_normal(16)
    agree = kh.agreement_prefix(q, np.stack([q, -q, 2 * q]), 20, 8, 30)
    np.testing.assert_array_equal(kh.sampled_in(agree, 8, 30, 2).mean(axis=1), [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="K"):
        kh.sampled_in(agree, 9, 30).mean(axis=1)
    with pytest.raises(ValueError, match="L"):
        kh.sampled_in(agree, 8, 31).mean(axis=1)


def test_sampled_in_matches_the_formula_in_64_dimensions():
    cos = np.array([0.95, 0.8, 0.6, 0.4])
    query, keys = simhash_checks.pair_at_angle(cos, dim=64, seed=5)
    agree = kh.agreement_prefix(query, keys, 400, 10, 150, seed=6)
    counted = kh.sampled_in(agree, 10, 150, 2).mean(axis=1)
    u = sh.inclusion_probability(sh.collision_probability(cos), 10, 150, 2)
    se = np.sqrt(u * (1 - u) / 400) + 1e-3
    assert np.all(np.abs(counted - u) < 4.5 * se)


def test_query_hashed_mask_leaves_out_the_sinks_and_each_querys_window():
    mask = kh.query_hashed_mask([70, 100], 101, sinks=4, recent=64)
    assert mask.shape == (2, 101)
    assert np.flatnonzero(mask[0]).tolist() == list(range(4, 7))  # 7..70: its window of 64
    assert np.flatnonzero(mask[1]).tolist() == list(range(4, 37))
    assert np.array_equal(kh.query_hashed_mask([199], 200)[0], kg.non_exact_mask(200))  # the last query
    with pytest.raises(ValueError, match="hashes no key"):
        kh.query_hashed_mask([67], 101, sinks=4, recent=64)
    with pytest.raises(ValueError, match="query_positions"):
        kh.query_hashed_mask([101], 101)


def test_pick_keys_covers_the_range_and_the_top():
    cos = np.random.default_rng(7).normal(0, 0.1, 5000)
    picked = kh.pick_keys(cos, 200, 30)
    assert len(picked) == 200 == len(np.unique(picked))
    assert set(np.argsort(cos)[-30:]) <= set(picked)
    assert cos[picked].min() == cos.min()


def test_real_scurve_reuses_its_hashing(planted):
    v = kg.head_view(planted, 5, 2)
    fresh = kh.real_scurve(v, -1, K=4, L=20, n_hashings=50, n_keys=40)
    assert len(fresh.keys) == 40 and fresh.n_hashings == 50
    assert fresh.expected_sampled == pytest.approx(
        sh.inclusion_probability(sh.collision_probability(fresh.cos_all), 4, 20, 2).sum(), rel=0.02
    )
    hashed = np.flatnonzero(kg.non_exact_mask(v.n))
    picked = np.searchsorted(hashed, fresh.keys)
    agree = kh.agreement_prefix(v.queries[-1], v.keys_as("centred")[hashed][picked], 50, 6, 30)
    reused = kh.real_scurve(v, -1, K=4, L=20, agreement=agree, picked=picked)
    np.testing.assert_array_equal(reused.counted, kh.sampled_in(agree, 4, 20, 2).mean(axis=1))
    np.testing.assert_allclose(reused.formula, fresh.formula)
    assert 0.0 <= reused.coverage() <= 1.0
    with pytest.raises(ValueError, match="K"):
        kh.real_scurve(v, -1, K=7, L=20, agreement=agree, picked=picked)


def test_real_scurve_se_is_over_hashings_not_keys(planted):
    v = kg.head_view(planted, 5, 2)
    curve = kh.real_scurve(v, -1, K=4, L=20, n_hashings=60, n_keys=40)
    hashed = np.flatnonzero(kg.non_exact_mask(v.n))
    agree = kh.agreement_prefix(
        v.queries[-1], v.keys_as("centred")[hashed][np.searchsorted(hashed, curve.keys)], 60, 4, 20
    )
    sampled = kh.sampled_in(agree, 4, 20, 2)
    np.testing.assert_array_equal(curve.per_hashing, sampled.mean(axis=0))
    np.testing.assert_array_equal(curve.counted, sampled.mean(axis=1))
    assert curve.mean_gap_se() == pytest.approx(sampled.mean(axis=0).std(ddof=1) / np.sqrt(60))
    # forty copies of one key: every hashing samples all or none, so the mean is as noisy as one
    # key's count, far noisier than forty independent keys would make it
    q = np.random.default_rng(1).standard_normal(16)
    key = q + 1.5 * np.random.default_rng(2).standard_normal(16)
    same = kh.sampled_in(kh.agreement_prefix(q, np.tile(key, (40, 1)), 400, 4, 10, seed=3), 4, 10, 2)
    share = same.mean(axis=0)
    assert set(np.unique(share)) <= {0.0, 1.0}
    u = same.mean()
    assert share.std(ddof=1) / np.sqrt(400) > 4 * np.sqrt(u * (1 - u) / 40) / np.sqrt(400)


def test_half_point_cos_matches_bisection():
    for K, L, m in ((10, 150, 2), (6, 50, 1), (12, 300, 2)):
        assert kh.half_point_cos(K, L, m) == pytest.approx(sh.crossing_cos(K, L, m), abs=2e-3)


# --------------------------------------------------------------------------- shipped capture


@pytest.fixture(scope="module")
def shipped():
    return kg.shipped_capture()


def test_shipped_summaries_and_geometry(shipped):
    table = kg.sink_table(shipped)
    assert table["sink_weight"].shape == (30, 9) and table["norm_ratio"].shape == (30, 3)
    rows = kg.geometry_table(shipped)
    assert len(rows) == 12 and {r.layer for r in rows} == set(shipped.layers)
    for r in rows:  # the per-head sink weight agrees with the shipped all-layer summary
        assert r.sink_weight == pytest.approx(table["sink_weight"][r.layer, r.head], abs=0.02)


def test_sink_table_needs_the_summaries(planted):
    with pytest.raises(ValueError, match="summaries"):
        kg.sink_table(planted)
