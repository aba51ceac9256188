"""SimHash formulas against exact arithmetic, against real hashing, and at their extremes."""

from __future__ import annotations

import math
import warnings
from decimal import Decimal, localcontext

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pigviz.lsh import simhash as sh
from pigviz.lsh import simhash_checks


def exact_inclusion(p: float, K: int, L: int, min_hits: int) -> float:
    """P(Binomial(L, p^K) >= min_hits) in 80-digit decimal arithmetic."""
    with localcontext() as ctx:
        ctx.prec = 80
        q = Decimal(p) ** K
        one = Decimal(1)

        def power(x, k):
            return one if k == 0 else x**k

        return float(
            sum(Decimal(math.comb(L, k)) * power(q, k) * power(one - q, L - k) for k in range(min_hits, L + 1))
        )


def not_above(a: float, b: float) -> bool:
    """a <= b up to rounding in the last ~12 digits (and exactly when either is -inf)."""
    return a <= b or (math.isfinite(b) and a - b <= 1e-12 * max(1.0, abs(b)))


EXTREME_P = [0.0, 1e-300, 1e-12, 0.01, 0.3, 0.5, 0.8, 0.95, 0.999, 1 - 1e-12, 1.0]


# ----------------------------------------------------------------- collision probability


def test_collision_probability_known_values():
    cos = np.array([1.0, 0.5, 0.0, -0.5, -1.0])
    np.testing.assert_allclose(sh.collision_probability(cos), [1.0, 2 / 3, 0.5, 1 / 3, 0.0], atol=1e-15)
    assert isinstance(sh.collision_probability(0.0), float)


def test_collision_probability_clips_rounding_and_rejects_nan():
    assert sh.collision_probability(1.0 + 1e-15) == 1.0
    assert sh.collision_probability(-1.0 - 1e-15) == 0.0
    with pytest.raises(ValueError, match="cos"):
        sh.collision_probability([0.1, float("nan")])


# ----------------------------------------------------------------- inclusion: exact values


@pytest.mark.parametrize(
    "K,L,min_hits", [(10, 150, 2), (10, 150, 1), (3, 8, 2), (1, 1, 1), (20, 500, 2), (5, 300, 7), (2, 50, 50)]
)
def test_inclusion_matches_exact_decimal_arithmetic(K, L, min_hits):
    for p in EXTREME_P:
        want = exact_inclusion(p, K, L, min_hits)
        got = sh.inclusion_probability(p, K, L, min_hits)
        if want == 0.0:
            assert got == 0.0
        else:
            assert abs(got - want) <= 1e-12 * want, (p, got, want)


def test_min_hits_2_is_the_papers_closed_form_where_that_form_is_accurate():
    p = np.linspace(0.6, 0.99, 50)  # below ~0.5 the closed form itself cancels
    K, L = 10, 150
    q = p**K
    closed = 1 - (1 - q) ** L - L * q * (1 - q) ** (L - 1)
    np.testing.assert_allclose(sh.inclusion_probability(p, K, L, 2), closed, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(sh.inclusion_probability(p, K, L, 1), 1 - (1 - q) ** L, rtol=1e-9, atol=1e-15)


def test_log_is_accurate_where_u_itself_underflows():
    # p = 0.05, K = 20: P1 = 9.5e-27, so u ~ C(L,2) P1^2 ~ 1e-48 -- and smaller for tinier p
    p, K, L = 1e-12, 20, 150
    expected = math.log(math.comb(L, 2)) + 2 * K * math.log(p)  # leading term of the tail
    assert sh.log_inclusion_probability(p, K, L, 2) == pytest.approx(expected, rel=1e-12)
    assert sh.inclusion_probability(p, K, L, 2) == 0.0  # the plain value underflows; the log does not


# ----------------------------------------------------------------- stability


@pytest.mark.parametrize("L", [1, 2, 150, 500])
@pytest.mark.parametrize("min_hits", [1, 2])
def test_extremes_give_no_nan_and_no_warnings(L, min_hits):
    if min_hits > L:
        pytest.skip("min_hits > L is rejected")
    p = np.array([0.0, 1e-12, 0.5, 1 - 1e-12, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for K in (1, 10, 62):
            log_u = sh.log_inclusion_probability(p, K, L, min_hits)
            assert log_u[0] == -np.inf and log_u[-1] == 0.0
            assert np.all(np.isfinite(log_u[1:-1]))
            assert np.all(log_u <= 0.0)
            u = sh.inclusion_probability(p, K, L, min_hits)
            assert np.all((u >= 0) & (u <= 1))
            t = sh.log_inclusion_probability_torch(torch.tensor(p), K, L, min_hits)
            assert not torch.isnan(t).any()


def test_monotone_in_p_on_a_dense_grid_including_the_ends():
    p = np.concatenate([[0.0, 1e-300, 1e-12], np.linspace(1e-6, 1 - 1e-6, 4001), [1 - 1e-12, 1.0]])
    for K, L, m in [(10, 150, 2), (10, 150, 1), (20, 500, 2), (4, 300, 10)]:
        log_u = sh.log_inclusion_probability(p, K, L, m)
        assert np.all(np.diff(log_u) >= -1e-12 * np.maximum(1.0, np.abs(log_u[1:]))), (K, L, m)


def test_u_near_one_keeps_its_log_accurate():
    # 1 - u = (1-P1)^L + L P1 (1-P1)^(L-1) with P1 = p^K close to 1
    p, K, L = 1 - 1e-12, 10, 150
    q = p**K
    miss = (1 - q) ** L + L * q * (1 - q) ** (L - 1)
    assert sh.log_inclusion_probability(p, K, L, 2) == pytest.approx(math.log1p(-miss), abs=1e-15)
    # u for a cos=0.9 key at (10, 150) is 1 - 1e-14; log u must be that tiny negative number
    p09 = sh.collision_probability(0.9)
    q = p09**10
    miss = (1 - q) ** 150 + 150 * q * (1 - q) ** 149
    assert sh.log_inclusion_probability(p09, 10, 150) == pytest.approx(math.log1p(-miss), rel=1e-6)


# ----------------------------------------------------------------- torch twin


@pytest.mark.parametrize("K,L,min_hits", [(10, 150, 2), (10, 150, 1), (20, 500, 2), (3, 8, 3)])
def test_torch_float64_agrees_with_numpy(K, L, min_hits):
    p = np.concatenate([EXTREME_P, np.random.default_rng(0).random(500)])
    want = sh.log_inclusion_probability(p, K, L, min_hits)
    got = sh.log_inclusion_probability_torch(torch.tensor(p), K, L, min_hits)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-14)


def test_torch_float32_keeps_dtype_shape_and_agrees():
    p = torch.rand(4, 33, generator=torch.Generator().manual_seed(1))
    got = sh.log_inclusion_probability_torch(p, 10, 150)
    assert got.dtype == torch.float32 and got.shape == p.shape and got.device == p.device
    want = sh.log_inclusion_probability(p.double().numpy(), 10, 150)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-30)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.cuda
def test_torch_stays_on_cuda():
    p = torch.rand(1000, device="cuda")
    got = sh.log_inclusion_probability_torch(p, 10, 150)
    assert got.device == p.device
    want = sh.log_inclusion_probability(p.double().cpu().numpy(), 10, 150)
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-6)


def test_torch_rejects_bad_input():
    with pytest.raises(ValueError, match="p must be in"):
        sh.log_inclusion_probability_torch(torch.tensor([0.5, float("nan")]), 10, 150)
    with pytest.raises(ValueError, match="p must be in"):
        sh.log_inclusion_probability_torch(torch.tensor([1.5]), 10, 150)
    with pytest.raises(TypeError, match="p must be a torch.Tensor"):
        sh.log_inclusion_probability_torch([0.5], 10, 150)
    with pytest.raises(TypeError, match="floating-point"):
        sh.log_inclusion_probability_torch(torch.tensor([1]), 10, 150)


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(K=0), "K must be in"),
        (dict(K=63), "K must be in"),
        (dict(L=0), "L must be in"),
        (dict(min_hits=0), "min_hits must be in"),
        (dict(L=3, min_hits=4), r"min_hits must be in \[1, 3\]"),
    ],
)
def test_bad_parameters_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sh.inclusion_probability(0.5, **{"K": 10, "L": 150, **kwargs})


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan"), [0.2, float("inf")]])
def test_bad_p_is_rejected(p):
    with pytest.raises(ValueError, match="p must"):
        sh.log_inclusion_probability(p, 10, 150)


def test_non_integer_k_is_a_type_error():
    with pytest.raises(TypeError, match="K must be an integer"):
        sh.inclusion_probability(0.5, K=2.5, L=150)


# ----------------------------------------------------------------- properties

probs = st.floats(0.0, 1.0, allow_nan=False)
ks = st.integers(1, 30)
ls = st.integers(1, 400)


@settings(max_examples=60, deadline=None)
@given(p1=probs, p2=probs, K=ks, L=ls, m=st.integers(1, 3))
def test_property_monotone_in_p(p1, p2, K, L, m):
    m = min(m, L)
    lo, hi = sorted((p1, p2))
    a = sh.log_inclusion_probability(lo, K, L, m)
    b = sh.log_inclusion_probability(hi, K, L, m)
    assert not_above(a, b)


@settings(max_examples=60, deadline=None)
@given(p=probs, K=ks, L=st.integers(2, 300), m=st.integers(1, 3))
def test_property_more_tables_never_lower_u(p, K, L, m):
    m = min(m, L - 1)
    a = sh.log_inclusion_probability(p, K, L - 1, m)
    b = sh.log_inclusion_probability(p, K, L, m)
    assert not_above(a, b)


@settings(max_examples=60, deadline=None)
@given(p=probs, K=st.integers(1, 40), L=ls, m=st.integers(1, 3))
def test_property_more_bits_never_raise_u_and_u_is_a_probability(p, K, L, m):
    m = min(m, L)
    a = sh.log_inclusion_probability(p, K, L, m)
    b = sh.log_inclusion_probability(p, K + 1, L, m)
    assert not_above(b, a)
    u = sh.inclusion_probability(p, K, L, m)
    assert 0.0 <= u <= 1.0


@settings(max_examples=40, deadline=None)
@given(p=probs, K=ks, L=ls)
def test_property_two_hits_never_more_likely_than_one(p, K, L):
    if L < 2:
        return
    assert sh.inclusion_probability(p, K, L, 2) <= sh.inclusion_probability(p, K, L, 1) + 1e-15


# ----------------------------------------------------------------- hashing


def test_bucket_ids_pack_the_codes_and_depend_only_on_the_seed():
    h = simhash_checks.SimHash(dim=6, K=5, L=7, seed=3)
    x = np.random.default_rng(0).standard_normal((4, 6))
    codes = np.einsum("nd,dlk->nlk", x, h.planes) > 0  # bit j of table l: the sign against planes[:, l, j]
    ids = h.bucket_ids(x)
    assert codes.shape == (4, 7, 5) and ids.shape == (4, 7) and ids.dtype == np.int64
    np.testing.assert_array_equal(ids, (codes * (2 ** np.arange(5))).sum(-1))
    assert ids.min() >= 0 and ids.max() < 2**5
    np.testing.assert_array_equal(ids, simhash_checks.SimHash(6, 5, 7, seed=3).bucket_ids(x))
    assert not np.array_equal(ids, simhash_checks.SimHash(6, 5, 7, seed=4).bucket_ids(x))


def test_hits_for_identical_scaled_and_opposite_keys():
    h = simhash_checks.SimHash(dim=8, K=10, L=20, seed=1)
    q = np.random.default_rng(2).standard_normal(8)
    hits = h.hits(q, np.stack([q, 3.0 * q, -q]))
    np.testing.assert_array_equal(hits, [20, 20, 0])
    np.testing.assert_array_equal(h.included(q, np.stack([q, -q]), min_hits=2), [True, False])


def test_simhash_validation():
    with pytest.raises(ValueError, match="K must be in"):
        simhash_checks.SimHash(dim=4, K=63, L=2)
    h = simhash_checks.SimHash(dim=4, K=2, L=3)
    with pytest.raises(ValueError, match="last dimension 4"):
        h.bucket_ids(np.ones(5))
    with pytest.raises(ValueError, match="min_hits must be in"):
        h.included(np.ones(4), np.ones((2, 4)), min_hits=4)


@pytest.mark.parametrize("min_hits", [1, 2])
def test_formula_matches_frequency_over_real_simhash_tables(min_hits):
    """Build 600 independent SimHash objects in 12 dimensions and count inclusions."""
    cos = np.cos(np.radians([0, 20, 40, 60, 80, 100, 140]))
    K, L, trials = 3, 6, 600
    query, keys = simhash_checks.pair_at_angle(cos, dim=12, seed=5)
    count = np.zeros(len(cos))
    for seed in range(trials):
        count += simhash_checks.SimHash(12, K, L, seed=seed).included(query, keys, min_hits)
    u = sh.inclusion_probability(sh.collision_probability(cos), K, L, min_hits)
    check = simhash_checks.MonteCarloEstimate(cos, u, count / trials, trials)
    assert np.min(check.p_values()) > 1e-4, (count / trials, u)


def test_real_hashing_separates_pairs_at_rate_theta_over_pi():
    h = simhash_checks.SimHash(dim=5, K=1, L=40_000, seed=0)
    query, keys = simhash_checks.pair_at_angle(np.cos(np.radians([30.0, 90.0, 150.0])), dim=5, seed=1)
    agree = (h.bucket_ids(keys) == h.bucket_ids(query)).mean(axis=1)  # K = 1: a bucket id is one bit
    p = sh.collision_probability(np.cos(np.radians([30.0, 90.0, 150.0])))
    assert np.all(np.abs(agree - p) < 4.5 * np.sqrt(p * (1 - p) / 40_000))


# ----------------------------------------------------------------- Monte Carlo helpers


def test_pair_at_angle_has_the_requested_cosines():
    cos = np.array([1.0, 0.3, -0.7])
    q, k = simhash_checks.pair_at_angle(cos, dim=9, seed=2)
    np.testing.assert_allclose(np.linalg.norm(k, axis=1), 1.0)
    np.testing.assert_allclose(k @ q, cos, atol=1e-12)


@pytest.mark.parametrize("min_hits", [1, 2])
def test_monte_carlo_inclusion_within_error_and_chunking_does_not_matter(min_hits):
    cos = np.cos(np.radians(np.arange(0, 181, 20)))
    a = simhash_checks.monte_carlo_inclusion(cos, 6, 40, min_hits, n_trials=400, seed=7)
    assert np.min(a.p_values()) > 1e-4
    b = simhash_checks.monte_carlo_inclusion(cos, 6, 40, min_hits, n_trials=400, seed=7, chunk_elements=1)
    np.testing.assert_array_equal(a.freq, b.freq)
    low, high = a.wilson_interval()
    assert np.all((low <= a.freq) & (a.freq <= high)) and np.all(high - low > 0)


def test_z_scores_and_p_values_flag_a_wrong_formula():
    cos = np.array([0.6])
    mc = simhash_checks.monte_carlo_inclusion(cos, 5, 30, 2, n_trials=2000, seed=0)
    wrong = simhash_checks.MonteCarloEstimate(cos, mc.expected * 0.8, mc.freq, mc.n_trials)
    assert abs(wrong.z_scores()[0]) > 4
    assert wrong.p_values()[0] < 1e-6


def test_p_values_are_exact_two_sided_binomial_tests():
    from fractions import Fraction

    def two_sided(u, n, c):
        u = Fraction(u)
        pmf = [math.comb(n, k) * u**k * (1 - u) ** (n - k) for k in range(n + 1)]
        return min(1.0, 2 * float(min(sum(pmf[c:]), sum(pmf[: c + 1]))))

    n = 40
    cases = [(0.001, 1), (0.03, 0), (0.5, 27), (0.9, 40), (0.2, 3)]
    est = simhash_checks.MonteCarloEstimate(
        np.zeros(len(cases)), np.array([u for u, _ in cases]), np.array([c / n for _, c in cases]), n
    )
    np.testing.assert_allclose(est.p_values(), [two_sided(u, n, c) for u, c in cases], rtol=1e-10)
    # one hit where 0.001 x 40 = 0.04 were expected: z calls it ~5 sigma, but it is an 8% event
    assert est.z_scores()[0] > 4.5 and 0.05 < est.p_values()[0] < 0.1
    certain = simhash_checks.MonteCarloEstimate(np.zeros(3), np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.1, 1.0]), 10)
    np.testing.assert_array_equal(certain.p_values(), [1.0, 0.0, 1.0])


def test_p_values_beyond_max_l_trials():
    """More trials than the lesson allows tables: still an exact test, no complaint about L."""
    n = sh.MAX_L * 2 + 1
    u, c = 0.3, int(0.3 * n) + 700  # about 3.4 standard deviations high
    est = simhash_checks.MonteCarloEstimate(np.zeros(2), np.array([u, 1e-20]), np.array([c / n, 0.0]), n)

    def log_term(k):
        log_comb = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        return log_comb + k * math.log(u) + (n - k) * math.log1p(-u)

    upper = math.fsum(math.exp(log_term(k)) for k in range(c, n + 1))
    p = est.p_values()
    assert p[0] == pytest.approx(2 * upper, rel=1e-8)
    assert 1e-5 < p[0] < 0.01 and p[1] == 1.0


@pytest.mark.parametrize(
    "call",
    [
        lambda: simhash_checks.plane_demo(3, 4, seed=-1),
        lambda: simhash_checks.monte_carlo_inclusion([0.5], 3, 4, n_trials=2, seed=-1),
        lambda: simhash_checks.pair_at_angle([0.5], dim=4, seed=-1),
        lambda: simhash_checks.SimHash(4, 2, 2, seed=-1),
    ],
)
def test_negative_seeds_are_named(call):
    with pytest.raises(ValueError, match=r"seed must be in \[0, "):
        call()


# ----------------------------------------------------------------- headline numbers


def test_candidates_and_crossing():
    assert sh.expected_candidates(98_304, 10, 150) == 14_400
    for m in (1, 2):
        c = sh.crossing_cos(10, 150, m)
        assert sh.inclusion_probability(sh.collision_probability(c), 10, 150, m) == pytest.approx(0.5, abs=1e-9)
    assert sh.transition_width_deg(10, 150, 2) < sh.transition_width_deg(10, 150, 1)


# ----------------------------------------------------------------- 2-D picture and figures


@pytest.mark.parametrize("K,seed", [(1, 0), (2, 3), (3, 0), (7, 5), (20, 1)])
def test_wedge_holds_exactly_the_keys_in_the_querys_bucket(K, seed):
    demo = simhash_checks.plane_demo(K=K, L=5, min_hits=2, seed=seed, n_keys=400)
    start, end = demo.wedge
    assert 0 < end - start <= np.pi + 1e-12  # K lines make 2K wedges; K = 1 gives a half-plane
    angle = np.arctan2(demo.keys[:, 1], demo.keys[:, 0])
    inside = np.mod(angle - start, 2 * np.pi) < end - start
    np.testing.assert_array_equal(inside, demo.same_bucket)
    q_angle = math.atan2(demo.query[1], demo.query[0])
    assert np.mod(q_angle - start, 2 * np.pi) < end - start
    np.testing.assert_array_equal(demo.included, demo.hits >= 2)


def test_table_one_does_not_move_when_l_grows():
    a = simhash_checks.plane_demo(K=4, L=10, seed=2)
    b = simhash_checks.plane_demo(K=4, L=200, seed=2)
    np.testing.assert_array_equal(a.normals, b.normals)
    np.testing.assert_array_equal(a.same_bucket, b.same_bucket)


def test_figures_have_titles_axis_units_and_no_nan():
    from pigviz.plots import simhash as plots

    angles = np.linspace(0, 180, 37)
    p = sh.collision_probability(np.cos(np.radians(angles)))
    mc = simhash_checks.monte_carlo_inclusion(np.cos(np.radians([0.0, 60.0, 120.0])), 4, 20, 2, n_trials=50)
    u = sh.inclusion_probability(p, 4, 20)
    figs = [
        plots.plane_figure(simhash_checks.plane_demo(K=3, L=20)),
        plots.one_table_figure(angles, {1: p, 4: p**4}, highlight=4),
        plots.scurve_figure(
            angles,
            [("u", u, "#000", "solid")],
            [("counted", mc, "#f00")],
            K=4,
            L=20,
        ),
    ]
    for fig in figs:
        assert fig.layout.title.text
        assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
        for trace in fig.data:
            for axis in ("x", "y"):
                raw = getattr(trace, axis)
                values = np.asarray([v for v in (() if raw is None else raw) if v is not None], dtype=float)
                assert not np.any(np.isnan(values))
    # the S-curves run over the angle in degrees, 0 to 180; the counted markers sit at their angles
    assert tuple(figs[2].layout.xaxis.range) == (0, 180)
    assert list(figs[2].data[0].x) == list(angles) and list(figs[2].data[1].x) == pytest.approx([0, 60, 120])
