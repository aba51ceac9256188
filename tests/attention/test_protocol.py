"""The estimator protocol: what call() accepts and refuses, and the library's methods as
estimators equal to the functions they wrap, row by row."""

import numpy as np
import pytest
import torch

from pigviz.attention import baselines, cost, protocol


def row(n=300, d=16, dv=8, seed=0):
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((n, d))
    keys[0] *= 4.0  # a sink-like key
    return rng.standard_normal(d) * 2.0, keys, rng.standard_normal((n, dv))


def greedy(q, keys, values, budget):
    """Exact attention, claiming it read every key."""
    return protocol.exact_output(q, keys, values), np.arange(len(keys))


def test_over_budget_is_refused_naming_the_estimator_the_count_and_the_budget():
    q, k, v = row()
    with pytest.raises(
        protocol.OverBudget, match=r"estimator 'greedy' read 300 distinct keys, more than its budget of 12"
    ):
        protocol.call(greedy, q, k, v, 12)
    assert issubclass(protocol.OverBudget, ValueError)
    named = protocol.declare(lambda q, k, v, b: greedy(q, k, v, b), name="all of them")
    with pytest.raises(ValueError, match="'all of them' read 300"):
        protocol.call(named, q, k, v, 299)
    out, read = protocol.call(named, q, k, v, 300)  # a budget of every key lets it through
    np.testing.assert_allclose(out, protocol.exact_output(q, k, v))
    assert read.tolist() == list(range(300))


def test_repeats_count_once_and_a_mask_works_as_read():
    q, k, v = row(n=50)

    def twice(q, keys, values, budget):
        return values[:3].mean(0), np.array([0, 1, 2, 2, 1, 0])

    def masked(q, keys, values, budget):
        mask = np.zeros(len(keys), dtype=bool)
        mask[[4, 9]] = True
        return values[mask].mean(0), mask

    assert protocol.call(twice, q, k, v, 3)[1].tolist() == [0, 1, 2]
    assert protocol.call(masked, q, k, v, 2)[1].tolist() == [4, 9]


@pytest.mark.parametrize(
    "result,error,match",
    [
        (None, TypeError, "must return a pair"),
        ((np.zeros(8),), TypeError, "must return a pair"),
        ((np.zeros(7), np.arange(2)), ValueError, r"shape \(7,\); expected \(8,\)"),
        ((np.full(8, np.nan), np.arange(2)), ValueError, "NaN or inf"),
        ((np.zeros(8), np.array([0, 300])), ValueError, "read index 300, outside 0..299"),
        ((np.zeros(8), np.array([-1])), ValueError, "read index -1"),
        ((np.zeros(8), np.array([0.5])), TypeError, "integer indices"),
        ((np.zeros(8), np.zeros(5, dtype=bool)), ValueError, "read mask of shape"),
    ],
)
def test_broken_results_are_refused_naming_the_estimator(result, error, match):
    q, k, v = row()

    def broken(q, keys, values, budget):
        return result

    with pytest.raises(error, match=match):
        protocol.call(broken, q, k, v, 10)
    with pytest.raises(error, match="broken"):
        protocol.call(broken, q, k, v, 10)


def test_inputs_arrive_as_the_estimator_asks():
    q, k, v = row()
    seen = {}

    def numpy_one(q, keys, values, budget):
        seen["numpy"] = (type(q), keys.dtype)
        return values[0], [0]

    @protocol.declare(torch=True)
    def torch_one(q, keys, values, budget):
        seen["torch"] = (type(q), keys.dtype)
        return values[0], torch.tensor([0])

    protocol.call(numpy_one, torch.from_numpy(q).float(), torch.from_numpy(k), torch.from_numpy(v), 1)
    protocol.call(torch_one, q, k, v, 1)
    assert seen["numpy"] == (np.ndarray, np.float64) and seen["torch"] == (torch.Tensor, torch.float64)


def test_bad_calls_name_the_parameter():
    q, k, v = row()
    with pytest.raises(TypeError, match="estimator must be callable"):
        protocol.call("topk", q, k, v, 3)
    with pytest.raises(ValueError, match=r"budget must be in \[1, inf\]"):
        protocol.call(greedy, q, k, v, 0)
    with pytest.raises(ValueError, match=r"q must be \(d,\)"):
        protocol.call(greedy, q[:3], k, v, 3)
    with pytest.raises(ValueError, match="same n"):
        protocol.call(greedy, q, k, v[:5], 3)
    with pytest.raises(ValueError, match="fraction must be in"):
        protocol.keys_for(0.0, 10)
    with pytest.raises(TypeError, match="bytes_read must be callable"):
        protocol.declare(greedy, bytes_read=3)
    with pytest.raises(ValueError, match="method must be one of"):
        protocol.costs_like("nope")


def test_keys_for_is_the_issue_rule():
    assert [protocol.keys_for(0.02, n) for n in (10, 100, 8192)] == [1, 2, 164]
    assert protocol.keys_for(1.0, 77) == 77 and protocol.keys_for(0.5, 3) == 2


# -- the library's methods, as estimators -------------------------------------------------------------
WRAPPED = [
    (protocol.topk(), lambda q, k, v, f, m: baselines.topk_attention(q, k, v, f)),
    # a budget below a page shrinks the pages to the budget, so that the current page fits
    (protocol.quest(page=16), lambda q, k, v, f, m: baselines.quest_attention(q, k, v, f, page=min(16, m))),
    (
        protocol.quest_rank_all(page=8),
        lambda q, k, v, f, m: baselines.quest_rank_all_attention(q, k, v, f, page=min(8, m)),
    ),
    (protocol.oracle(seed=3), lambda q, k, v, f, m: baselines.oracle_sampling_attention(q, k, v, f, seed=3)),
    (protocol.hybrid(seed=1), lambda q, k, v, f, m: baselines.hybrid_attention(q, k, v, f, seed=1)),
]


@pytest.mark.parametrize("estimator,library", WRAPPED, ids=lambda x: getattr(x, "name", ""))
@pytest.mark.parametrize("budget", [1, 12, 60])
def test_each_wrapper_equals_its_library_function_on_the_same_row(estimator, library, budget):
    q, k, v = row()
    qt, kt, vt = (torch.from_numpy(x) for x in (q, k, v))
    out, read = protocol.call(estimator, q, k, v, budget)
    want, stats = library(qt[None], kt[None], vt[None], budget / len(k), budget)
    np.testing.assert_allclose(out, want[0].numpy(), rtol=0, atol=1e-12)
    assert read.size == int(stats["keys_read"][0]) <= budget
    assert read.tolist() == stats["read_mask"][0].nonzero()[:, 0].tolist()


def test_streaming_and_exact_follow_the_budget():
    q, k, v = row()
    out, read = protocol.call(protocol.streaming(sinks=4), q, k, v, 20)
    assert read.tolist() == [0, 1, 2, 3] + list(range(284, 300))
    want, _ = baselines.streaming_attention(*(torch.from_numpy(x)[None] for x in (q, k, v)), sinks=4, recent=16)
    np.testing.assert_allclose(out, want[0].numpy(), atol=1e-12)
    with pytest.raises(protocol.OverBudget, match="'exact' read 300"):
        protocol.call(protocol.exact(), q, k, v, 299)
    out, read = protocol.call(protocol.exact(), q, k, v, 300)
    np.testing.assert_allclose(out, protocol.exact_output(q, k, v), atol=1e-12)


def test_declared_bytes_count_like_the_cost_module():
    n, d, dv = 1000, 64, 64
    assert protocol.topk().bytes_read(n, d, dv, 20) == cost.bytes_read("topk", n=n, d=d, dv=dv, keys_read=20)
    quest = protocol.quest(page=16)
    assert quest.bytes_read(n, d, dv, 20) == cost.bytes_read("quest", n=n, d=d, dv=dv, keys_read=20, page=16)
    q, k, v = row()
    protocol.call(quest, q, k, v, 5)  # pages of 5: five times the page summaries
    assert quest.bytes_read(300, 16, 8, 5) == cost.bytes_read("quest", n=300, d=16, dv=8, keys_read=5, page=5)
    assert protocol.costs_like("streaming")(n, d, dv, 20) == 20 * (d + dv) * 2
    assert protocol.estimator_name(protocol.quest()) == "quest" and protocol.estimator_name(greedy) == "greedy"


def test_costs_like_takes_any_good_option_and_refuses_a_bad_one():
    # SparQ's r may be anything up to the head size: a probe on a 4-wide head refused r = 8.
    assert protocol.costs_like("sparq", r=8)(1024, 64, 64, 32) > 0
    assert protocol.costs_like("quest", page=64)(4096, 64, 64, 256) > 0
    with pytest.raises(ValueError, match="r"):
        protocol.costs_like("sparq", r=0)
