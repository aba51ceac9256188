"""Notebook 08, your estimator: the warm-up, a uniform sample corrected by (keys left) / (keys
drawn), and the share of the true attention weight an estimator's read set leaves out.

An estimator reads a few keys exactly (``exact``: the sinks and the recent window) and draws
the rest of its budget uniformly, without replacement, from the other keys (``sampled``). The
drawn keys stand for all the keys they were drawn from: each one's weight exp(score) counts
(n - len(exact)) / len(sampled) times, so that the sample's share of the softmax's sum is
estimated without bias. One softmax then runs over the exact keys and the scaled sample; it
divides by that estimated sum, so the output, a ratio, keeps a small bias at a finite sample.

Both exercises hand the learner's own ``softmax`` (notebook 03, ``ex.mine.softmax``) over: the
stable softmax is not asked for again, the new idea is.
"""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import ARRAY, FLOAT, Case, Exercise, Wrong
from pigviz.lessons.exercises.nb03 import softmax

# --------------------------------------------------------------------------- reference


def corrected_sample(q, keys, values, exact, sampled):
    scores = keys @ q / np.sqrt(len(q))
    left = len(keys) - len(exact)  # the keys the sample was drawn from
    shift = np.log(left / len(sampled)) if len(sampled) else 0.0  # each draw stands for left / drawn keys
    weights = softmax(np.concatenate([scores[exact], scores[sampled] + shift]))  # your softmax, notebook 03
    return weights @ np.concatenate([values[exact], values[sampled]])


def dropped_weight(q, keys, read):
    weights = softmax(keys @ q / np.sqrt(len(q)))  # the true weights, over all n keys
    return float(1.0 - weights[np.unique(read)].sum())  # a key read twice counts once


# --------------------------------------------------------------------------- cases

_SOFTMAX_HINT = "use softmax, yours from notebook 03: it subtracts the largest score before exp (scores pass 709)"


def _row(seed, n=60, d=16, dv=4, exact=(0, 1, 56, 57, 58, 59), drawn=10, q_scale=1.0):
    """A row shaped like a real head: a sink-like first key, values off zero, a uniform draw."""
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((n, d))
    q = q_scale * rng.standard_normal(d)
    keys[0] = 3.0 * q / np.linalg.norm(q) * np.sqrt(np.sqrt(d))  # a key the query likes
    values = rng.standard_normal((n, dv)) + 1.0
    exact = np.asarray(exact, dtype=int)
    rest = np.setdiff1d(np.arange(n), exact)
    sampled = rng.choice(rest, size=drawn, replace=False)
    return q, keys, values, exact, sampled


def _cases():
    q, k, v, e, s = _row(801)
    cases = [
        Case(
            "2-D: two exact keys, one key drawn from the other three",
            (
                np.array([1.0, 0.0]),
                np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0], [0.0, -1.0]]),
                np.array([[1.0], [2.0], [3.0], [4.0], [5.0]]),
                np.array([0, 1]),
                np.array([3]),
            ),
            "the drawn key stands for the 3 keys outside the exact set: its exp(score) counts 3 / 1 times",
        ),
        Case("60 keys, d = 16: 6 exact, 10 drawn from the other 54", (q, k, v, e, s)),
    ]
    q2, k2, v2, e2, s2 = _row(802, n=200, d=64, dv=8, exact=(0, 1, 2, 3, 196, 197, 198, 199), drawn=25)
    cases.append(Case("200 keys, d = 64: 8 exact, 25 drawn", (q2, k2, v2, e2, s2)))
    cases.append(
        Case(
            "nothing drawn: the exact keys alone",
            (q, k, v, e, s[:0]),
            "with nothing drawn there is nothing to scale: attention over the exact keys alone",
        )
    )
    cases.append(
        Case(
            "no exact keys: everything drawn from all 60",
            (q, k, v, e[:0], s),
            "with no exact set the sample was drawn from all n keys",
        )
    )
    cases.append(
        Case(
            "a long query: scores past a thousand",
            (200.0 * q, k, v, e, s),
            _SOFTMAX_HINT,
        )
    )
    return cases


def _dropped_cases():
    q, k, _, _, _ = _row(811)
    q2, k2, _, _, _ = _row(812, n=300, d=64)
    return [
        Case(
            "2-D: three keys, the first one read",
            (np.array([1.0, 0.0]), np.array([[2.0, 0.0], [0.0, 1.0], [-2.0, 0.0]]), np.array([0])),
            "weights softmax([2, 0, -2] / sqrt(2)) over all three keys; the two unread ones are left out",
        ),
        Case("60 keys, d = 16, 5 read", (q, k, np.array([0, 3, 17, 40, 59]))),
        Case("300 keys, d = 64, 12 read", (q2, k2, np.arange(0, 300, 25))),
        Case(
            "a read list with repeats",
            (q, k, np.array([3, 3, 17, 17, 17])),
            "a key read twice counts once: take the distinct indices",
        ),
        Case("nothing read", (q, k, np.array([], dtype=int)), "with nothing read, all the weight is left out: 1"),
        Case("every key read", (q, k, np.arange(60)), "with every key read, nothing is left out: 0"),
        Case(
            "a long query: scores past a thousand",
            (200.0 * q, k, np.array([0, 5])),
            _SOFTMAX_HINT,
        ),
    ]


# --------------------------------------------------------------------------- wrong versions


def _mix(q, keys, values, exact, sampled, shift, scale_by=None):
    q, keys, values = np.asarray(q, float), np.asarray(keys, float), np.asarray(values, float)
    exact, sampled = np.asarray(exact, dtype=int), np.asarray(sampled, dtype=int)
    scores = keys @ q / (np.sqrt(len(q)) if scale_by is None else scale_by)
    weights = softmax(np.concatenate([scores[exact], scores[sampled] + shift]))
    return weights @ np.concatenate([values[exact], values[sampled]])


def _factor(keys, exact, sampled, of_all=False):
    m = len(sampled)
    return ((len(keys) if of_all else len(keys) - len(exact)) / m) if m else 1.0


def _no_correction(q, keys, values, exact, sampled):
    return _mix(q, keys, values, exact, sampled, 0.0)


def _all_n(q, keys, values, exact, sampled):
    return _mix(q, keys, values, exact, sampled, np.log(_factor(keys, exact, sampled, of_all=True)))


def _inverted(q, keys, values, exact, sampled):
    return _mix(q, keys, values, exact, sampled, -np.log(_factor(keys, exact, sampled)))


def _factor_not_log(q, keys, values, exact, sampled):
    return _mix(q, keys, values, exact, sampled, _factor(keys, exact, sampled) if len(sampled) else 0.0)


def _no_sqrt_d(q, keys, values, exact, sampled):
    return _mix(q, keys, values, exact, sampled, np.log(_factor(keys, exact, sampled)), scale_by=1.0)


def _two_softmaxes(q, keys, values, exact, sampled):
    """A softmax over each set, the two outputs averaged by their key counts."""
    q, keys, values = np.asarray(q, float), np.asarray(keys, float), np.asarray(values, float)
    exact, sampled = np.asarray(exact, dtype=int), np.asarray(sampled, dtype=int)
    scores = keys @ q / np.sqrt(len(q))
    parts = [(len(i), softmax(scores[i]) @ values[i]) for i in (exact, sampled) if len(i)]
    return sum(c * out for c, out in parts) / sum(c for c, _ in parts)


def _no_max(q, keys, values, exact, sampled):
    q, keys, values = np.asarray(q, float), np.asarray(keys, float), np.asarray(values, float)
    exact, sampled = np.asarray(exact, dtype=int), np.asarray(sampled, dtype=int)
    scores = keys @ q / np.sqrt(len(q))
    w = np.concatenate([np.exp(scores[exact]), np.exp(scores[sampled]) * _factor(keys, exact, sampled)])
    return w @ np.concatenate([values[exact], values[sampled]]) / w.sum()


def _weights(q, keys, scale=None, shift=True):
    q, keys = np.asarray(q, float), np.asarray(keys, float)
    s = keys @ q / (np.sqrt(len(q)) if scale is None else scale)
    if shift:
        return softmax(s)
    return np.exp(s) / np.exp(s).sum()


def _dropped_repeats(q, keys, read):
    return float(1.0 - _weights(q, keys)[np.asarray(read, dtype=int)].sum())


def _dropped_kept(q, keys, read):
    return float(_weights(q, keys)[np.unique(np.asarray(read, dtype=int))].sum())


def _dropped_no_sqrt_d(q, keys, read):
    return float(1.0 - _weights(q, keys, scale=1.0)[np.unique(np.asarray(read, dtype=int))].sum())


def _dropped_read_only(q, keys, read):
    """The softmax taken over the keys read only: their weights then always sum to 1."""
    read = np.unique(np.asarray(read, dtype=int))
    q, keys = np.asarray(q, float), np.asarray(keys, float)
    if not read.size:
        return 1.0
    return float(1.0 - softmax(keys[read] @ q / np.sqrt(len(q))).sum())


def _dropped_one_based(q, keys, read):
    return float(1.0 - _weights(q, keys)[np.unique(np.asarray(read, dtype=int)) - 1].sum())


def _dropped_no_max(q, keys, read):
    return float(1.0 - _weights(q, keys, shift=False)[np.unique(np.asarray(read, dtype=int))].sum())


EXERCISES = [
    Exercise(
        name="08.corrected_sample",
        signature="corrected_sample(q, keys, values, exact, sampled) -> ndarray",
        task="Attention over the keys read exactly plus a uniform sample of the others, for ONE query q (d,): "
        "keys (n, d), values (n, dv); exact and sampled are integer index arrays (either may be empty, not "
        "both), sampled drawn uniformly without replacement from the n - len(exact) keys outside exact. Scores "
        "q.k / sqrt(d); one softmax over both sets (softmax, yours from notebook 03, is there to use), each "
        "drawn key counting for the keys it stands for (notebook 01's importance weight); return the weighted "
        "mean of their values, shape (dv,); with nothing drawn, attention over exact alone. Checked to a "
        "relative 1e-6.",
        reference=corrected_sample,
        helpers=(softmax,),  # yours from notebook 03, shown with the solution
        make_cases=_cases,
        output=ARRAY,
        rtol=1e-6,
        atol=1e-9,
        nudge="Each drawn key stands for all the keys outside the exact set, shared among the draws: notebook "
        "01's importance weight w/u, with u the chance a key is drawn. Which keys was the sample drawn from, "
        "and how many did it draw? A weight multiplied by a factor is a score plus the log of that factor, so "
        "one softmax can weigh both sets at once.",
        hint="Your softmax takes one array: join the two sets' scores end to end (np.concatenate), and their "
        "values in the same order. Mind a draw of no keys.",
        difficulty=2,
        importance=4,
        minutes=8,
        wrong=(
            Wrong(
                "no n/m correction",
                _no_correction,
                "each drawn key stands for (n - len(exact)) / len(sampled) keys: add the log of that to its score",
            ),
            Wrong(
                "n / m instead of (n - len(exact)) / m",
                _all_n,
                "the sample was drawn from the keys outside the exact set only: "
                "scale by (n - len(exact)) / m, not n / m",
            ),
            Wrong(
                "m / n: the correction upside down",
                _inverted,
                "the correction is (keys it stands for) / (keys drawn), above 1: you divided the other way round",
            ),
            Wrong(
                "the factor added to the score, not its log",
                _factor_not_log,
                "a weight times f is a score plus log(f): add np.log of the factor, not the factor",
            ),
            Wrong("no 1/sqrt(d)", _no_sqrt_d, "the scores are q.k / sqrt(d), as in the model's attention"),
            Wrong(
                "a softmax per set",
                _two_softmaxes,
                "one softmax over the exact and the sampled keys together: the correction sets how the two "
                "sets share the weight",
            ),
            Wrong("exp without subtracting the largest logit", _no_max, _SOFTMAX_HINT),
        ),
    ),
    Exercise(
        name="08.dropped_weight",
        signature="dropped_weight(q, keys, read) -> float",
        task="The share of ONE query's exact attention weight that an estimator leaves out: q (d,), keys (n, d), "
        "read an integer index array of the keys it read (it may be empty, and an index may repeat: a key read "
        "twice counts once). Return the share of exact attention's weight that the keys read leave out, a float "
        "in [0, 1] (softmax, yours from notebook 03, is there to use). Checked to 1e-6.",
        reference=dropped_weight,
        helpers=(softmax,),
        make_cases=_dropped_cases,
        output=FLOAT,
        rtol=1e-6,
        atol=1e-6,
        nudge="Whose scores decide how much weight one key holds: the keys read, or more?",
        hint="Your `softmax` from notebook 03, and numpy's function for the distinct values of an array.",
        difficulty=1,
        importance=3,
        minutes=4,
        wrong=(
            Wrong(
                "repeats counted twice",
                _dropped_repeats,
                "a key read twice counts once: sum the weights of np.unique(read)",
            ),
            Wrong("the weight kept", _dropped_kept, "return what is left out, 1 - (the weight of the keys read)"),
            Wrong(
                "softmax over the keys read only",
                _dropped_read_only,
                "the true weights are a softmax over all n keys; over the keys read alone they always sum to 1",
            ),
            Wrong("no 1/sqrt(d)", _dropped_no_sqrt_d, "the scores are q.k / sqrt(d), as in the model's attention"),
            Wrong(
                "1-based indices", _dropped_one_based, "read holds 0-based positions: keys[read], not keys[read - 1]"
            ),
            Wrong("exp without subtracting the largest score", _dropped_no_max, _SOFTMAX_HINT),
        ),
    ),
]
