"""Notebook 01, stick balance: the balance point, TopK, self-normalised importance sampling."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import FLOAT, Case, Exercise, Wrong

# --------------------------------------------------------------------------- references


def balance_point(weights, values):
    w = np.asarray(weights, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    return float(w @ v / w.sum())  # the weights need not sum to 1


def topk_estimate(weights, values, budget):
    w = np.asarray(weights, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    keep = np.argsort(-w, kind="stable")[:budget]  # the `budget` heaviest keys (all if budget >= n)
    return float(w[keep] @ v[keep] / w[keep].sum())  # renormalised over the kept keys


def importance_estimate(weights, values, proposal, drawn):
    w = np.asarray(weights, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    u = np.asarray(proposal, dtype=np.float64)
    i = np.asarray(drawn, dtype=np.int64)  # one entry per draw, repeats included
    ratio = w[i] / u[i]  # each draw weighed by w / u
    return float(ratio @ v[i] / ratio.sum())  # self-normalised


def inclusion_estimate(weights, values, u, seed):
    w = np.asarray(weights, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    coins = np.random.default_rng(seed).random(u.size)  # one uniform number per key, in key order
    read = coins < u  # each key flips its own coin: read with probability u, at most once
    ratio = w[read] / u[read]  # a key read with probability u stands for 1/u keys like it
    return float(ratio @ v[read] / ratio.sum())  # self-normalised over the keys read


# --------------------------------------------------------------------------- cases


def _softmax(s):
    e = np.exp(s - s.max())
    return e / e.sum()


def _balance_cases():
    rng = np.random.default_rng(101)
    cases = [
        Case("three keys, weights summing to 1", (np.array([0.5, 0.3, 0.2]), np.array([1.0, 2.0, 4.0]))),
        Case(
            "weights that do not sum to 1 (exp of scores)",
            (np.array([2.0, 6.0, 2.0]), np.array([0.0, 1.0, 3.0])),
            "divide by the sum of the weights: the balance point of sticks 2, 6, 2 tall is not sum(w v)",
        ),
    ]
    v = rng.uniform(-1, 1, 40)
    cases.append(Case("40 keys, softmax weights", (_softmax(3 * rng.standard_normal(40)), v)))
    cases.append(
        Case(
            "40 keys, unnormalised weights exp(scores)",
            (np.exp(rng.standard_normal(40)), v),
            "weights = exp(scores) do not sum to 1",
        )
    )
    cases.append(Case("one key", (np.array([0.7]), np.array([-2.5])), "one stick balances at its own position"))
    cases.append(
        Case(
            "some weights exactly 0",
            (np.array([0.0, 3.0, 0.0, 1.0]), np.array([9.0, 1.0, -9.0, 2.0])),
            "a stick of height 0 does not pull the balance point",
        )
    )
    return cases


def _topk_cases():
    rng = np.random.default_rng(102)
    w3, v3 = np.array([0.5, 0.3, 0.2]), np.array([1.0, 2.0, 4.0])
    cases = [
        Case(
            "three keys, budget 2",
            (w3, v3, 2),
            "keep the 2 heaviest keys (0.5 and 0.3) and divide by their total weight 0.8",
        ),
        Case(
            "keys in no particular order, budget 2",
            (np.array([0.1, 0.6, 0.05, 0.25]), np.array([5.0, 1.0, -3.0, 2.0]), 2),
            "the heaviest keys are not the first ones: sort by weight",
        ),
        Case("budget 1", (w3, v3, 1), "with one key kept the estimate is that key's value"),
    ]
    w = _softmax(2.5 * rng.standard_normal(64))
    v = rng.uniform(0, 1, 64)
    cases += [
        Case("64 keys, budget 8", (w, v, 8)),
        Case("64 keys, budget 63", (w, v, 63)),
        Case("budget = n (every key kept)", (w3, v3, 3), "keeping every key gives the exact balance point"),
        Case("budget > n", (w3, v3, 10), "a budget larger than n keeps every key; do not index past the end"),
    ]
    ws = np.exp(0.05 * rng.standard_normal(31))
    cases.append(
        Case(
            "sink: token 0 holds half the weight, weights unnormalised",
            (np.concatenate([[ws.sum()], ws]), np.concatenate([[0.02], rng.uniform(0.36, 0.96, 31)]), 4),
            "the weights need not sum to 1; renormalise over the kept keys",
        )
    )
    return cases


def _importance_cases():
    rng = np.random.default_rng(103)
    w, v = np.array([0.5, 0.3, 0.2]), np.array([1.0, 2.0, 4.0])
    cases = [
        Case("three keys, three distinct draws", (w, v, np.array([0.4, 0.4, 0.2]), np.array([0, 1, 2]))),
        Case(
            "some keys never drawn",
            (w, v, np.array([0.4, 0.4, 0.2]), np.array([0, 1])),
            "keys that were not drawn enter neither sum: both sums run over the draws only",
        ),
        Case(
            "draws with repeats",
            (w, v, np.array([0.2, 0.3, 0.5]), np.array([2, 2, 0, 2, 1])),
            "a key drawn twice counts twice",
        ),
        Case(
            "proposal equal to the weights",
            (w, v, w.copy(), np.array([0, 0, 1, 2, 0])),
            "when u = w every ratio is 1 and the estimate is the plain mean of the drawn values",
        ),
        Case(
            "unnormalised weights and proposal",
            (10 * w, v, np.array([4.0, 4.0, 2.0]), np.array([0, 1, 1])),
            "self-normalising makes the scale of w and u irrelevant: divide by the sum of the ratios",
        ),
        Case(
            "a single draw",
            (w, v, np.array([0.2, 0.3, 0.5]), np.array([1])),
            "with one draw the estimate is that key's value",
        ),
    ]
    n = 50
    w = np.exp(2 * rng.standard_normal(n))
    u = _softmax(0.5 * np.log(w))
    drawn = rng.choice(n, size=30, p=u)
    cases.append(Case("50 keys, 30 draws from a rough proposal", (w, rng.uniform(-1, 1, n), u, drawn)))
    return cases


def _inclusion_cases():
    rng = np.random.default_rng(104)
    w4, v4 = np.array([0.4, 0.3, 0.2, 0.1]), np.array([1.0, 2.0, 4.0, -1.0])
    cases = [
        Case("four keys, each with its own u", (w4, v4, np.array([0.9, 0.5, 0.3, 0.6]), 7)),
        Case(
            "u = 1 for every key: every key is read",
            (w4, v4, np.ones(4), 0),
            "with u = 1 every key is read once and counts by its true weight: the exact balance point",
        ),
        Case(
            "u = 0 for some keys: they are never read",
            (
                np.array([0.3, 0.2, 0.1, 0.25, 0.15]),
                np.array([1.0, 9.0, 2.0, -9.0, 3.0]),
                np.array([1.0, 0.0, 0.7, 0.0, 0.4]),
                1,
            ),
            "a key with u = 0 is never read, and its u must not divide anything",
        ),
    ]
    n = 40
    scores = rng.standard_normal(n)
    u = np.minimum(1.0, 8 * _softmax(0.5 * scores))
    cases.append(
        Case(
            "40 keys, unnormalised weights exp(scores), u from a rough guess",
            (np.exp(scores), rng.uniform(-1, 1, n), u, 2),
            "the weights need not sum to 1: normalise by the corrected weights of the keys read",
        )
    )
    rest = np.exp(0.05 * rng.standard_normal(31))
    weights = np.concatenate([[rest.sum()], rest])
    values = np.concatenate([[0.02], rng.uniform(0.36, 0.96, 31)])
    u = np.concatenate([[1.0], np.full(31, 11 / 31)])
    cases.append(
        Case(
            "sink: token 0 read for sure (u = 1), the other 31 with u = 11/31",
            (weights, values, u, 3),
            "the sink, read with u = 1, counts by its true weight; each other key read stands for 31/11 of them",
        )
    )
    scores = 2 * rng.standard_normal(300)
    u = np.clip(40 * _softmax(0.7 * scores), 1e-3, 1.0)
    cases.append(Case("300 keys, some u tiny", (np.exp(scores), rng.uniform(0, 1, 300), u, 4)))
    return cases


# --------------------------------------------------------------------------- wrong versions


def _balance_no_division(weights, values):
    return float(np.dot(weights, values))


def _balance_plain_mean(weights, values):
    return float(np.mean(values))


def _balance_divide_by_n(weights, values):
    return float(np.dot(weights, values) / len(values))


def _balance_over_sum_of_values(weights, values):
    return float(np.dot(weights, values) / np.sum(values))


def _balance_softmax_of_weights(weights, values):
    e = np.exp(np.asarray(weights, float))
    return float(e @ np.asarray(values, float) / e.sum())


def _topk_not_renormalised(weights, values, budget):
    w, v = np.asarray(weights, float), np.asarray(values, float)
    keep = np.argsort(-w)[:budget]
    return float(w[keep] @ v[keep])


def _topk_lightest(weights, values, budget):
    w, v = np.asarray(weights, float), np.asarray(values, float)
    keep = np.argsort(w)[:budget]
    return float(w[keep] @ v[keep] / w[keep].sum())


def _topk_unweighted_mean(weights, values, budget):
    w, v = np.asarray(weights, float), np.asarray(values, float)
    return float(v[np.argsort(-w)[:budget]].mean())


def _topk_first_keys(weights, values, budget):
    w, v = np.asarray(weights, float), np.asarray(values, float)
    return float(w[:budget] @ v[:budget] / w[:budget].sum())


def _topk_one_short(weights, values, budget):
    w, v = np.asarray(weights, float), np.asarray(values, float)
    keep = np.argsort(w)[:-budget:-1]  # a reversed slice that stops one key short
    return float(w[keep] @ v[keep] / w[keep].sum())


def _importance_unique(weights, values, proposal, drawn):
    i = np.unique(np.asarray(drawn))
    r = np.asarray(weights, float)[i] / np.asarray(proposal, float)[i]
    return float(r @ np.asarray(values, float)[i] / r.sum())


def _importance_times_u(weights, values, proposal, drawn):
    i = np.asarray(drawn)
    r = np.asarray(weights, float)[i] * np.asarray(proposal, float)[i]
    return float(r @ np.asarray(values, float)[i] / r.sum())


def _importance_not_normalised(weights, values, proposal, drawn):
    i = np.asarray(drawn)
    r = np.asarray(weights, float)[i] / np.asarray(proposal, float)[i]
    return float(np.mean(r * np.asarray(values, float)[i]))


def _importance_all_keys_denominator(weights, values, proposal, drawn):
    i = np.asarray(drawn)
    r = np.asarray(weights, float) / np.asarray(proposal, float)
    return float(r[i] @ np.asarray(values, float)[i] / r.sum())


def _importance_unweighted(weights, values, proposal, drawn):
    return float(np.mean(np.asarray(values, float)[np.asarray(drawn)]))


def _inclusion_parts(weights, values, u):
    return np.asarray(weights, float), np.asarray(values, float), np.asarray(u, float)


def _inclusion_weight_w(weights, values, u, seed):
    w, v, u = _inclusion_parts(weights, values, u)
    rng = np.random.default_rng(seed)
    read = rng.random(u.size) < u
    return float(w[read] @ v[read] / w[read].sum())


def _inclusion_with_replacement(weights, values, u, seed):
    w, v, u = _inclusion_parts(weights, values, u)
    rng = np.random.default_rng(seed)
    drawn = rng.choice(u.size, size=max(1, round(u.sum())), p=u / u.sum())  # section 6's sampler
    ratio = w[drawn] / u[drawn]
    return float(ratio @ v[drawn] / ratio.sum())


def _inclusion_total_weight(weights, values, u, seed):
    w, v, u = _inclusion_parts(weights, values, u)
    rng = np.random.default_rng(seed)
    read = rng.random(u.size) < u
    return float((w[read] / u[read]) @ v[read] / w.sum())


def _inclusion_binomial_coins(weights, values, u, seed):
    w, v, u = _inclusion_parts(weights, values, u)
    read = np.random.default_rng(seed).binomial(1, u).astype(bool)  # right odds, other random numbers
    ratio = w[read] / u[read]
    return float(ratio @ v[read] / ratio.sum())


def _inclusion_all_keys_denominator(weights, values, u, seed):
    w, v, u = _inclusion_parts(weights, values, u)
    read = np.random.default_rng(seed).random(u.size) < u
    with np.errstate(divide="ignore"):
        ratio = w / u  # every key's corrected weight, read or not
    return float(ratio[read] @ v[read] / ratio.sum())


def _inclusion_one_minus_u(weights, values, u, seed):
    w, v, u = _inclusion_parts(weights, values, u)
    rng = np.random.default_rng(seed)
    read = rng.random(u.size) >= u
    ratio = w[read] / u[read]
    return float(ratio @ v[read] / ratio.sum())


def _inclusion_one_coin(weights, values, u, seed):
    w, v, u = _inclusion_parts(weights, values, u)
    rng = np.random.default_rng(seed)
    read = rng.random() < u  # one number for every key
    ratio = w[read] / u[read]
    return float(ratio @ v[read] / ratio.sum())


def _inclusion_times_u(weights, values, u, seed):
    w, v, u = _inclusion_parts(weights, values, u)
    rng = np.random.default_rng(seed)
    read = rng.random(u.size) < u
    ratio = w[read] * u[read]
    return float(ratio @ v[read] / ratio.sum())


EXERCISES = [
    Exercise(
        name="01.balance_point",
        signature="balance_point(weights, values) -> float",
        task="Where sticks as tall as `weights`, standing at `values`, balance: the position o about which "
        "their turning forces cancel. `weights` and `values` are 1-D arrays of the same length (a single key "
        "is possible). The weights are >= 0, some may be exactly 0 (at least one is not), and they need not "
        "sum to 1 (exp(scores), say). Return one number.",
        reference=balance_point,
        make_cases=_balance_cases,
        output=FLOAT,
        nudge="Section 1 wrote the balance condition as an equation in o. Solve it for o yourself, without "
        "assuming that the weights add up to one.",
        hint="which numpy operation sums the products of two arrays entry by entry? Return a plain "
        "`float(...)`, not a numpy scalar or array",
        wrong=(
            Wrong(
                "no division by the total weight",
                _balance_no_division,
                "sum(w * v) is the balance point only when the weights sum to 1; divide by sum(w)",
            ),
            Wrong(
                "plain mean of the values",
                _balance_plain_mean,
                "every stick counts by its height: weigh each value by its weight",
            ),
            Wrong("divided by n", _balance_divide_by_n, "divide by the total weight sum(w), not by the number of keys"),
            Wrong(
                "divided by the sum of the values",
                _balance_over_sum_of_values,
                "the arguments are mixed up: divide by the total weight sum(w), not by sum(v)",
            ),
            Wrong(
                "softmax applied to the weights",
                _balance_softmax_of_weights,
                "the weights are already stick heights, not scores: do not pass them through exp or a softmax again",
            ),
        ),
        difficulty=1,
        importance=3,
        minutes=3,
    ),
    Exercise(
        name="01.topk_estimate",
        signature="topk_estimate(weights, values, budget) -> float",
        task="TopK's estimate: keep the `budget` heaviest keys and return where their sticks balance, as if "
        "the keys left out were not there. The keys come in no particular order; the weights are >= 0 and "
        "need not sum to 1; `budget` is an int >= 1 that may equal or exceed n (then every key is kept). "
        "Return one number.",
        reference=topk_estimate,
        make_cases=_topk_cases,
        output=FLOAT,
        nudge="Two steps: find which keys are the heaviest when they come unsorted, then balance those sticks "
        "alone. What should happen when `budget` is larger than the number of keys?",
        hint="numpy can give the order of an array's entries instead of the sorted values (the arg- family of "
        "functions); your `balance_point` balances any set of sticks you hand it",
        wrong=(
            Wrong(
                "not renormalised", _topk_not_renormalised, "the kept weights sum to less than 1: divide by their sum"
            ),
            Wrong(
                "keeps the lightest keys", _topk_lightest, "sort by decreasing weight (np.argsort(-w) or torch.topk)"
            ),
            Wrong(
                "unweighted mean of the kept values",
                _topk_unweighted_mean,
                "the kept sticks still have different heights: weigh each value by its weight",
            ),
            Wrong(
                "keeps the first `budget` keys",
                _topk_first_keys,
                "the heaviest keys can be anywhere: select them by weight, not by position",
            ),
            Wrong(
                "keeps budget - 1 keys",
                _topk_one_short,
                "off by one: you kept budget - 1 keys. A reversed slice a[:-budget:-1] stops one short; "
                "np.argsort(-w)[:budget] keeps exactly budget",
            ),
        ),
        difficulty=2,
        importance=4,
        minutes=5,
    ),
    Exercise(
        name="01.importance_estimate",
        signature="importance_estimate(weights, values, proposal, drawn) -> float",
        task="Self-normalised importance sampling. `weights` (w), `values` (v) and `proposal` (u) are 1-D "
        "arrays over all n keys; `drawn` is a 1-D int array with the key index of each draw from u, repeats "
        "included (a key drawn twice counts twice; a single draw is possible; some keys may never be drawn). "
        "Correct each draw for how much more or less often u draws its key than w would, and return where "
        "the corrected draws balance. Use only the keys drawn (a sampler knows nothing else). Neither w nor "
        "u need sum to 1. Return one number.",
        reference=importance_estimate,
        make_cases=_importance_cases,
        output=FLOAT,
        nudge="A key the guess draws too often must count less on each draw, one it draws too rarely more: by "
        "how much, in terms of w and u? Then treat every draw as a stick, repeats included.",
        hint="indexing an array with an array of indices keeps the repeats (`a[[2, 2, 0]]` has three entries); "
        "section 1's `balance_point` does the balancing",
        wrong=(
            Wrong(
                "drops repeated draws", _importance_unique, "a key drawn twice counts twice: do not deduplicate `drawn`"
            ),
            Wrong(
                "multiplies by u instead of dividing",
                _importance_times_u,
                "the correction is w / u: keys the proposal favours are drawn often, so each draw counts less",
            ),
            Wrong(
                "not self-normalised",
                _importance_not_normalised,
                "divide by the sum of the ratios, not by the number of draws: w and u need not sum to 1",
            ),
            Wrong(
                "ignores the weights",
                _importance_unweighted,
                "a plain mean of the drawn values estimates the proposal's balance point, not the attention's",
            ),
            Wrong(
                "denominator summed over every key",
                _importance_all_keys_denominator,
                "the denominator sums r over the draws (repeats included), not r = w/u over all n keys",
            ),
        ),
        difficulty=2,
        importance=5,
        minutes=7,
    ),
    Exercise(
        name="01.inclusion_estimate",
        signature="inclusion_estimate(weights, values, u, seed) -> float",
        task="MagicPIG's sampler. `weights` (w), `values` (v) and `u` are 1-D arrays over n keys; u[i] in "
        "[0, 1] is the probability that key i is read. Keys are read independently of one another, each at "
        "most once. `seed` (an int) makes the coins: take one uniform number per key, in key order, from "
        "`rng = np.random.default_rng(seed)` with `rng.random` (all at once or one by one), so that the check "
        "can repeat your draw. Return where the keys read balance, each corrected "
        "for how likely it was to be read, using only the keys read. A key with u = 1 is always read, one "
        "with u = 0 never; every case reads at least one key. w need not sum to 1. Return one number.",
        reference=inclusion_estimate,
        make_cases=_inclusion_cases,
        output=FLOAT,
        nudge="Each key needs its own coin that comes up 'read' with probability u[i]. Then ask, as in the "
        "importance exercise: how much should a key that is read only rarely count, against its true weight? "
        "The sum of the weights over all keys is not known to the sampler.",
        hint="an array comparison gives a boolean mask, and one mask selects the keys read from `weights`, "
        "`values` and `u` alike; the correction and the balancing are what your `importance_estimate` did",
        wrong=(
            Wrong(
                "weighted by w instead of w/u",
                _inclusion_weight_w,
                "a key read with a small u stands for many keys like it that were not read: divide its weight by u",
            ),
            Wrong(
                "draws with replacement from u",
                _inclusion_with_replacement,
                "here u is not a distribution to draw from: each key flips its own coin with probability u[i] "
                "and is read once or not at all",
            ),
            Wrong(
                "divided by the total weight of every key",
                _inclusion_total_weight,
                "the sampler knows the weights of the keys it read, not the total: self-normalise, dividing by "
                "the sum of the corrected weights of the keys read",
            ),
            Wrong(
                "coins from rng.binomial, not rng.random",
                _inclusion_binomial_coins,
                "the keys you read differ from the check's draw: the odds are right, but the check repeats your "
                "coins only if they are one `rng.random` number per key, in key order, each compared with u[i]",
            ),
            Wrong(
                "denominator summed over every key",
                _inclusion_all_keys_denominator,
                "the denominator sums the corrected weights of the keys read only: the sampler does not know the "
                "weights of the keys it did not read",
            ),
            Wrong(
                "kept with probability 1 - u",
                _inclusion_one_minus_u,
                "a uniform number in [0, 1) falls below u[i] with probability u[i]",
            ),
            Wrong(
                "one coin for every key",
                _inclusion_one_coin,
                "the keys are read independently: draw one uniform number per key, not one for all",
            ),
            Wrong(
                "multiplies by u instead of dividing",
                _inclusion_times_u,
                "a key that is rarely read must count more when it is read: divide by u",
            ),
        ),
        difficulty=3,
        importance=5,
        minutes=10,
    ),
]
