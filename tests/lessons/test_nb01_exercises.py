"""Notebook 01's exercises: the contracts say what to return, not how; other correct ways of
writing the inclusion sampler pass its check; and the reference does what MagicPIG's rule says."""

import numpy as np
import pytest

from pigviz.lessons import exercises as ex
from pigviz.lessons.exercises import nb01
from pigviz.toy import stick_balance as sb

NB01 = [e for e in ex.exercises("01")]


def test_01_has_four_exercises_with_stable_names():
    assert [e.name for e in NB01] == [
        "01.balance_point",
        "01.topk_estimate",
        "01.importance_estimate",
        "01.inclusion_estimate",
    ]
    assert ex.get("01.inclusion_estimate").signature == "inclusion_estimate(weights, values, u, seed) -> float"


@pytest.mark.parametrize("exercise", NB01, ids=lambda e: e.name)
def test_no_contract_or_hint_writes_the_formula(exercise):
    """The task (the stub's contract) and both hints leave the body to the learner."""
    given = ("sum_i w_i v_i", "sum(w v)", "sum(r * v)", "r = w/u", "np.argsort(-", "[:budget]", "np.dot(a, b)",
             "w / u", "w/u", "rng.random(n) <", "< u")  # fmt: skip
    for text in (exercise.task, exercise.nudge, exercise.hint):
        assert not [g for g in given if g in text], f"{exercise.name}: {text}"


def test_the_self_test_passes_for_notebook_01():
    assert ex.self_test([e.name for e in NB01]) == []


def inclusion_loop(weights, values, u, seed):
    """One coin at a time, a Python loop."""
    rng = np.random.default_rng(seed)
    num = den = 0.0
    for w, v, p in zip(weights, values, u):
        if rng.random() < p:
            num += w / p * v
            den += w / p
    return num / den


def inclusion_uniform_flatnonzero(weights, values, u, seed):
    """rng.uniform instead of rng.random (the same numbers), indices instead of a mask, and a
    constant factor 1/sum(u) in the correction, which self-normalising cancels."""
    u = np.asarray(u)
    idx = np.flatnonzero(np.random.default_rng(seed).uniform(size=u.size) < u)
    r = np.asarray(weights)[idx] / (u[idx] * u.sum())
    return float(np.sum(r * np.asarray(values)[idx]) / np.sum(r))


@pytest.mark.parametrize("fn", [inclusion_loop, inclusion_uniform_flatnonzero])
def test_other_correct_inclusion_samplers_pass(fn):
    assert ex.check("01.inclusion_estimate", fn, quiet=True)


def test_the_inclusion_sampler_reads_each_key_with_its_own_probability():
    """Over many seeds, key i is read in a share u_i of the runs; with every u = 1 the estimate is
    exact, and with the sink read for sure the runs centre close to the truth."""
    u = np.array([0.9, 0.5, 0.1, 0.0, 1.0])
    read = np.array([np.random.default_rng(s).random(u.size) < u for s in range(4000)])
    assert np.allclose(read.mean(axis=0), u, atol=0.03)
    sink = sb.make_scenario("sink")
    assert nb01.inclusion_estimate(sink.weights, sink.values, np.ones(sink.n), 0) == pytest.approx(sink.truth)
    proposal = np.exp(0.5 * sink.scores) / np.exp(0.5 * sink.scores).sum()
    u_read = np.minimum(1.0, 12 * proposal)
    runs = np.array([nb01.inclusion_estimate(np.exp(sink.scores), sink.values, u_read, s) for s in range(2000)])
    assert abs(runs.mean() - sink.truth) < runs.std() / 5
