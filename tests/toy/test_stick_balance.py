"""Stick-balance toy: scenarios, estimators, error curves, claims and figures."""

import math
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pigviz.attention import softmax_attention
from pigviz.plots.stick_balance import error_curves_figure, estimate_spread_figure, sticks_figure
from pigviz.toy import stick_balance as sb

PROPERTY = settings(max_examples=40, deadline=None, derandomize=True)


@st.composite
def sticks(draw, max_n=12):
    n = draw(st.integers(1, max_n))
    values = draw(st.lists(st.floats(-5, 5), min_size=n, max_size=n))
    weights = draw(st.lists(st.floats(0, 10), min_size=n, max_size=n))
    if sum(weights) <= 0:
        weights[draw(st.integers(0, n - 1))] = 1.0
    budget = draw(st.integers(1, n))
    return np.array(values), np.array(weights), budget


def zscore(samples, target):
    return (samples.mean() - target) / (samples.std(ddof=1) / math.sqrt(samples.size) + 1e-300)


# ---------------------------------------------------------------------------- scenarios


@pytest.mark.parametrize("name", sb.SCENARIOS)
def test_scenarios_are_reproducible_softmax_weights(name):
    s = sb.make_scenario(name, n=40, seed=3)
    assert s.n == 40 and s.name == name and s.description
    np.testing.assert_allclose(s.weights.sum(), 1.0)
    np.testing.assert_allclose(s.weights, np.exp(s.scores) / np.exp(s.scores).sum())
    again = sb.make_scenario(name, n=40, seed=3)
    np.testing.assert_array_equal(s.values, again.values)
    assert not np.array_equal(s.values, sb.make_scenario(name, n=40, seed=4).values)


def test_sink_holds_half_the_weight_near_zero():
    s = sb.make_scenario("sink")
    assert s.sink_index == 0
    assert s.weights[0] == pytest.approx(0.5)
    assert abs(s.values[0]) < 0.05
    assert s.weights[1:].max() < 0.05  # the rest is flat


def test_peaked_and_flat_differ_in_weight_spread():
    peaked, flat = sb.make_scenario("peaked"), sb.make_scenario("flat")
    assert np.sort(peaked.weights)[-4:].sum() > 0.5
    assert flat.weights.max() < 2 / flat.n


def test_truth_matches_softmax_attention():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal(8), rng.standard_normal((20, 8))
    v = rng.uniform(-1, 1, (20, 1))
    out, _ = softmax_attention(q, k, v)
    s = sb.custom_scenario(v[:, 0], k @ q / math.sqrt(8))
    assert s.truth == pytest.approx(out[0])
    assert sb.exact(s.values, s.weights).value == pytest.approx(out[0])


# ---------------------------------------------------------------------------- TopK


@PROPERTY
@given(sticks())
def test_topk_exact_when_budget_is_every_key(case):
    values, weights, _ = case
    est = sb.topk(values, weights, values.size)
    assert est.value == pytest.approx(weights @ values / weights.sum(), abs=1e-9)
    assert est.keys_read == values.size


def test_topk_keeps_the_tallest_sticks():
    values = np.array([0.0, 1.0, 2.0, 3.0])
    weights = np.array([0.1, 0.4, 0.2, 0.3])
    est = sb.topk(values, weights, 2)
    assert set(est.read) == {1, 3}
    assert est.value == pytest.approx((0.4 * 1 + 0.3 * 3) / 0.7)


def test_sink_scenario_shows_topk_bias():
    s = sb.make_scenario("sink")
    top = sb.topk(s.values, s.weights, sb.DEFAULT_BUDGET).value
    assert 0.30 < s.truth < 0.40
    assert s.truth - top > 0.1  # pulled down towards the sink's value


# ---------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("name", sb.SCENARIOS)
@pytest.mark.parametrize("budget", [1, 5, 20])
def test_sampling_is_unbiased(name, budget):
    s = sb.make_scenario(name)
    est = sb._sampling_batch(s.values, s.weights, budget, np.random.default_rng(budget), 20000)[0]
    assert abs(zscore(est, s.truth)) < 4


@PROPERTY
@given(sticks(max_n=6))
@example((np.array([0.0, 1.0]), np.array([1.0, 1e-5]), 1))  # a key too rare to be drawn in any run
def test_sampling_unbiased_on_random_sticks(case):
    values, weights, budget = case
    p = weights / weights.sum()
    est, read, _ = sb._sampling_batch(values, p, budget, np.random.default_rng(0), 20000)
    # A key no run drew moves the mean of the runs off the truth by up to its mass times the
    # spread of the values, a bias the runs' own spread cannot show (with every other key read,
    # the estimate is even constant). Unbiasedness is asserted up to that unseen part.
    unseen = p[~read.any(axis=0)].sum() * np.ptp(values)
    se = est.std(ddof=1) / math.sqrt(est.size)
    assert abs(est.mean() - p @ values) <= 4.5 * se + unseen + 1e-9


def _stop_right_after_bth_new_key(values, p, budget, rng, runs, horizon=400):
    """The tempting rule the module avoids: the draw that reads the B-th key ends the run."""
    draws = rng.choice(p.size, size=(runs, horizon), p=p)
    first_seen = np.zeros_like(draws, dtype=bool)
    for r in range(runs):
        _, idx = np.unique(draws[r], return_index=True)
        first_seen[r, idx] = True
    distinct = np.cumsum(first_seen, axis=1)
    end = np.argmax(distinct >= budget, axis=1) + 1
    keep = np.arange(horizon)[None, :] < end[:, None]
    return (values[draws] * keep).sum(axis=1) / end


def test_the_unbiasedness_test_can_fail():
    # Evidence the test above has teeth: the naive stopping rule is measurably biased.
    s = sb.make_scenario("sink")
    est = _stop_right_after_bth_new_key(s.values, s.weights, 12, np.random.default_rng(0), 4000)
    assert abs(zscore(est, s.truth)) > 5


def test_sampling_spends_the_budget_on_distinct_keys():
    s = sb.make_scenario("sink")
    est = sb.sampling(s.values, s.weights, 12, rng=1)
    assert est.keys_read == 12 == len(est.read)
    assert est.draws >= 12  # the sink gets drawn again and again for free
    one = sb.sampling(s.values, s.weights, 1, rng=2)
    assert one.value == s.values[one.read[0]]  # every kept draw is that one key


def test_sampling_at_full_budget_is_exact_with_unlimited_draws():
    s = sb.make_scenario("peaked")
    est = sb.sampling(s.values, s.weights, s.n, rng=0)
    assert est.value == pytest.approx(s.truth) and math.isinf(est.draws)
    # Keys with weight 0 can never be drawn, so the run cannot stop once the rest are read.
    w = np.array([0.5, 0.5, 0.0])
    est = sb.sampling([1.0, 3.0, 100.0], w, 2, rng=0)
    assert est.value == pytest.approx(2.0) and est.keys_read == 2


def test_sampling_rms_follows_value_spread_over_sqrt_budget():
    flat = sb.make_scenario("flat", n=1024)
    curves = sb.error_curves(flat, [4, 16, 64], n_seeds=800, seed=1, methods=("sampling",))
    ratio = curves.errors["sampling"] / curves.reference
    assert np.all((ratio > 0.85) & (ratio < 1.1))
    assert -0.6 < sb.loglog_slope(curves.budgets, curves.errors["sampling"]) < -0.4


def test_sampling_error_scales_with_value_disagreement_not_weights():
    s = sb.make_scenario("flat")
    squeezed = sb.custom_scenario(s.truth + 0.1 * (s.values - s.truth), s.scores)
    a = sb.error_curves(s, [8], n_seeds=500, seed=7, methods=("sampling",)).errors["sampling"][0]
    b = sb.error_curves(squeezed, [8], n_seeds=500, seed=7, methods=("sampling",)).errors["sampling"][0]
    assert b == pytest.approx(0.1 * a, rel=1e-9)


# ---------------------------------------------------------------------------- importance sampling


def test_importance_with_true_weights_as_proposal_is_plain_sampling():
    s = sb.make_scenario("peaked")
    a = sb.importance_sampling(s.values, s.weights, 9, s.weights, rng=5)
    b = sb.sampling(s.values, s.weights, 9, rng=5)
    assert a.value == pytest.approx(b.value) and a.keys_read == b.keys_read


def test_importance_is_biased_at_one_key_towards_the_proposal():
    s = sb.make_scenario("sink")
    u = sb.rough_proposal(s.scores)
    est = sb._importance_batch(s.values, s.weights, u, 1, np.random.default_rng(0), 20000)[0]
    assert abs(zscore(est, u @ s.values)) < 4  # one key: the ratio cancels, you get its value
    assert abs(zscore(est, s.truth)) > 10


@pytest.mark.parametrize("name", sb.SCENARIOS)
def test_importance_converges(name):
    s = sb.make_scenario(name, n=64)
    curves = sb.error_curves(s, [2, 8, 32, 63, 64], n_seeds=600, seed=2, methods=("importance",))
    err = curves.errors["importance"]
    assert err[0] > err[1] > err[2] > err[3]
    assert err[4] < 1e-12


@PROPERTY
@given(sticks(), st.floats(0.0, 2.0))
def test_importance_exact_at_full_budget(case, sharpness):
    values, weights, _ = case
    u = sb.rough_proposal(np.log(weights + 1e-3), sharpness)
    est = sb.importance_sampling(values, weights, values.size, u, rng=0)
    assert est.value == pytest.approx(weights @ values / weights.sum(), abs=1e-9)


# ---------------------------------------------------------------------------- hybrid


@PROPERTY
@given(sticks())
def test_hybrid_exact_at_full_budget(case):
    values, weights, _ = case
    est = sb.hybrid(values, weights, values.size, rng=0)
    assert est.value == pytest.approx(weights @ values / weights.sum(), abs=1e-9)


@pytest.mark.parametrize("name", sb.SCENARIOS)
def test_hybrid_is_unbiased_and_reads_its_budget(name):
    s = sb.make_scenario(name)
    est, read, _ = sb._hybrid_batch(s.values, s.weights, 10, np.random.default_rng(3), 20000)
    assert abs(zscore(est, s.truth)) < 4
    assert np.all(read.sum(axis=1) == 10)
    top5 = np.argsort(-s.weights)[:5]
    assert read[:, top5].all()  # the top half of the budget is read exactly, every time


def test_hybrid_beats_sampling_on_peaked():
    s = sb.make_scenario("peaked")
    c = sb.error_curves(s, [6, 12], n_seeds=1000, seed=0, methods=("sampling", "hybrid"))
    assert np.all(c.errors["hybrid"] < c.errors["sampling"])


# ---------------------------------------------------------------------------- all estimators


@PROPERTY
@given(sticks(), st.integers(0, 2**32))
def test_estimates_are_convex_combinations_and_respect_the_budget(case, seed):
    values, weights, budget = case
    s_est = {
        "topk": sb.topk(values, weights, budget),
        "sampling": sb.sampling(values, weights, budget, rng=seed),
        "importance": sb.importance_sampling(values, weights, budget, np.ones_like(weights), rng=seed),
        "hybrid": sb.hybrid(values, weights, budget, rng=seed),
    }
    for est in s_est.values():
        assert values.min() - 1e-9 <= est.value <= values.max() + 1e-9
        assert 1 <= est.keys_read <= budget
        assert est.draws >= est.keys_read


@PROPERTY
@given(sticks(), st.floats(-100, 100))
def test_shifting_every_value_shifts_every_balance_point(case, shift):
    values, weights, budget = case
    for fn in (sb.sampling, sb.hybrid):
        a = fn(values, weights, budget, rng=11).value
        b = fn(values + shift, weights, budget, rng=11).value
        assert b == pytest.approx(a + shift, abs=1e-7)


def test_estimate_all_names_every_method():
    est = sb.estimate_all(sb.make_scenario("flat"), 4, rng=0)
    assert set(est) == {"exact", *sb.METHODS}
    assert all(e.method == name for name, e in est.items())


# ---------------------------------------------------------------------------- bad input

V, W = np.array([0.1, 0.5, 0.9]), np.array([0.2, 0.3, 0.5])


@pytest.mark.parametrize(
    "call, param",
    [
        (lambda: sb.topk(V, W, 0), "budget"),
        (lambda: sb.topk(V, W, 4), "budget"),
        (lambda: sb.sampling(V, W, 2.5, rng=0), "budget"),
        (lambda: sb.hybrid(V, W, -1, rng=0), "budget"),
        (lambda: sb.topk([], [], 1), "values"),
        (lambda: sb.sampling(V, W[:2], 1, rng=0), "weights"),
        (lambda: sb.exact([0.1, np.nan, 0.2], W), "values"),
        (lambda: sb.exact(V, [0.1, np.inf, 0.2]), "weights"),
        (lambda: sb.exact(V, [0.5, -0.1, 0.6]), "weights"),
        (lambda: sb.exact(V, [0.0, 0.0, 0.0]), "weights"),
        (lambda: sb.exact(np.ones((2, 2)), np.ones((2, 2))), "values"),
        (lambda: sb.importance_sampling(V, W, 2, [0.5, 0.0, 0.5], rng=0), "proposal"),
        (lambda: sb.importance_sampling(V, W, 2, [0.5, 0.5], rng=0), "proposal"),
        (lambda: sb.importance_sampling(V, W, 2, [0.5, -0.5, 1.0], rng=0), "proposal"),
        (lambda: sb.importance_sampling(V, W, 2, [0.5, np.nan, 1.0], rng=0), "proposal"),
        (lambda: sb.sampling(V, W, 2, rng="seed"), "rng"),
        (lambda: sb.make_scenario("spiky"), "name"),
        (lambda: sb.make_scenario("flat", n=1), "n"),
        (lambda: sb.make_scenario("flat", seed=-1), "seed"),
        (lambda: sb.error_curves(sb.make_scenario("flat", n=8), [0, 3]), "budgets"),
        (lambda: sb.error_curves(sb.make_scenario("flat", n=8), [9]), "budgets"),
        (lambda: sb.error_curves(sb.make_scenario("flat", n=8), [1.5]), "budgets"),
        (lambda: sb.error_curves(sb.make_scenario("flat", n=8), [2], n_seeds=0), "n_seeds"),
        (lambda: sb.error_curves(sb.make_scenario("flat", n=8), [2], methods=("exactish",)), "methods"),
        (lambda: sb.error_curves("flat", [2]), "scenario"),
        (lambda: sb.loglog_slope([1, 2], [0.1, 0.0]), "errors"),
        (lambda: sb.rough_proposal([0.0, 1.0], sharpness=-1), "sharpness"),
        (lambda: sb.custom_scenario([0.1, 0.2], [1.0]), "scores"),
    ],
)
def test_bad_input_names_the_parameter(call, param):
    with pytest.raises((ValueError, TypeError), match=param):
        call()


# ---------------------------------------------------------------------------- curves, claims


def test_error_curves_shapes_reference_and_topk_entry():
    s = sb.make_scenario("sink")
    c = sb.error_curves(s, [1, 4, 32], n_seeds=50, seed=0)
    assert set(c.errors) == set(sb.METHODS)
    np.testing.assert_allclose(c.reference, c.spread / np.sqrt([1, 4, 32]))
    assert c.spread == pytest.approx(sb.value_spread(s.values, s.weights))
    assert c.errors["topk"][1] == pytest.approx(abs(sb.topk(s.values, s.weights, 4).value - s.truth))
    assert c.errors["sampling"][-1] < 1e-12 and c.errors["hybrid"][-1] < 1e-12
    again = sb.error_curves(s, [1, 4, 32], n_seeds=50, seed=0)
    np.testing.assert_array_equal(c.errors["importance"], again.errors["importance"])


def test_loglog_slope_recovers_a_power_law():
    b = np.array([1, 2, 4, 8, 16])
    assert sb.loglog_slope(b, 3.0 / np.sqrt(b)) == pytest.approx(-0.5)


# ---------------------------------------------------------------------------- figures


def _all_numbers(fig):
    for trace in fig.data:
        for key in ("x", "y"):
            arr = getattr(trace, key, None)
            if arr is not None and len(arr) and not isinstance(arr[0], str):
                yield np.asarray(arr, dtype=float)


@pytest.mark.parametrize("name", sb.SCENARIOS)
def test_sticks_figure_places_each_balance_point(name):
    s = sb.make_scenario(name)
    est = sb.estimate_all(s, 6, rng=0)
    fig = sticks_figure(s, est, budget=6)
    assert len(fig.data) == 2 + len(est)
    np.testing.assert_allclose(np.concatenate([fig.data[0].x, fig.data[1].x]).size, s.n)
    markers = {tr.name: tr.x[0] for tr in fig.data[2:]}
    assert markers["TopK"] == pytest.approx(est["topk"].value)
    assert markers["hybrid (oracle)"] == pytest.approx(est["hybrid"].value)
    assert fig.layout.title.text and fig.layout.xaxis2.title.text and fig.layout.yaxis.title.text
    assert all(np.isfinite(a).all() for a in _all_numbers(fig))
    assert (len(fig.data[1].x) == 1) == (name == "sink")


def test_error_curves_figure_drops_zero_errors_and_is_log_log():
    s = sb.make_scenario("flat", n=16)
    c = sb.error_curves(s, [1, 4, 16], n_seeds=30, seed=0)
    fig = error_curves_figure(c, budget=4)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert len(fig.data) == len(sb.METHODS) + 1
    assert all(np.all(a > 0) and np.isfinite(a).all() for a in _all_numbers(fig))
    assert 16 not in list(fig.data[1].x)  # sampling is exact at B = n: no zero on a log axis
    with pytest.raises(TypeError, match="curves"):
        error_curves_figure(s)
    with pytest.raises(TypeError, match="scenario"):
        sticks_figure(c)


# ---------------------------------------------------------------------------- B draws against B distinct keys


def test_spread_figure_names_a_lone_histogram_with_its_runs():
    s = sb.make_scenario("sink")
    runs = sb.repeat_estimates(s, 12, runs=300, seed=1, methods=("topk", "sampling"))
    fig = estimate_spread_figure(runs, s.truth, 12, "sink")
    (hist,) = [t for t in fig.data if t.type == "histogram"]
    assert hist.showlegend is True and np.array_equal(hist.x, runs["sampling"])
    # its legend entry counts the runs drawn and gives their mean
    ((count, mean),) = re.findall(r"(\d+) runs \(mean ([\d.]+)\)", hist.name)
    assert int(count) == len(hist.x) == 300 and float(mean) == pytest.approx(runs["sampling"].mean(), abs=5e-4)


@pytest.mark.parametrize("weight", [5e-324, 1e-310])
def test_subnormal_weights_keep_every_estimate_on_the_values(weight):
    """A weight of 5e-324 times a value rounds to a multiple of 5e-324: unless the weights are
    scaled up first, one key at 1.5 "balances" at 2.0 (found by the property test above)."""
    values, weights = np.array([1.5, -0.5]), np.array([2.0, 1.0]) * weight
    for est in (
        sb.exact(values, weights),
        sb.topk(values, weights, 1),
        sb.sampling(values, weights, 1, rng=0),
        sb.importance_sampling(values, weights, 1, np.ones(2), rng=0),
        sb.hybrid(values, weights, 2, rng=0),
    ):
        assert -0.5 <= est.value <= 1.5
    assert sb.topk(values[:1], weights[:1], 1).value == 1.5
    assert sb.exact(values, weights).value == pytest.approx((2 * 1.5 - 0.5) / 3)


# ---------------------------------------------------------------------------- hybrid split, rows, studies


def test_hybrid_n_exact_defaults_to_half_and_replays_the_same_stream():
    s = sb.make_scenario("sink")
    half = sb.error_curves(s, [12], n_seeds=500, seed=5, methods=("sampling", "hybrid"))
    same = sb.error_curves(s, [12], n_seeds=500, seed=5, methods=("sampling", "hybrid"), n_exact=6)
    quarter = sb.error_curves(s, [12], n_seeds=500, seed=5, methods=("sampling", "hybrid"), n_exact=3)
    assert same.errors["hybrid"][0] == half.errors["hybrid"][0]
    assert quarter.errors["sampling"][0] == half.errors["sampling"][0]  # the same stream up to the hybrid
    assert quarter.errors["hybrid"][0] != half.errors["hybrid"][0]


def test_hybrid_with_n_exact_reads_that_many_tallest_sticks_and_stays_unbiased():
    s = sb.make_scenario("peaked")
    est = sb.hybrid(s.values, s.weights, 12, rng=0, n_exact=3)
    tallest = np.argsort(-s.weights, kind="stable")[:3]
    assert set(tallest) <= set(est.read.tolist()) and est.keys_read <= 12
    runs = sb.repeat_estimates(s, 12, runs=20000, seed=1, methods=("hybrid",), n_exact=3)["hybrid"]
    assert abs(runs.mean() - s.truth) < 4 * runs.std() / np.sqrt(runs.size)
    # n_exact = 0 is plain oracle sampling of every key (the keys in another order): the same error
    plain = sb.error_curves(s, [12], n_seeds=4000, seed=2, methods=("sampling",)).errors["sampling"][0]
    zero = sb.error_curves(s, [12], n_seeds=4000, seed=3, methods=("hybrid",), n_exact=0).errors["hybrid"][0]
    assert zero == pytest.approx(plain, rel=0.08)


@pytest.mark.parametrize("n_exact", [-1, 12, 2.5])
def test_hybrid_n_exact_must_be_below_the_budget(n_exact):
    s = sb.make_scenario("sink")
    with pytest.raises((ValueError, TypeError), match="n_exact"):
        sb.hybrid(s.values, s.weights, 12, rng=0, n_exact=n_exact)
    with pytest.raises((ValueError, TypeError), match="n_exact"):
        sb.error_curves(s, [12, 20], n_seeds=2, n_exact=n_exact if n_exact != 12 else 12)
