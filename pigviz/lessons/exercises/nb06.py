"""Notebook 06, sampled attention: log u from the centred-key angle, and MagicPIG's estimator.

The conventions are those of ``pigviz.lsh.magicpig.attend``: the query is hashed as it is, the
keys after subtracting the mean key mu, so p = 1 - angle(q, k - mu) / pi; u is the chance of
colliding in at least 2 of L tables of K bits; one softmax runs over
[q.k_S / sqrt(d) - log u ; q.k_exact / sqrt(d)] and mixes [v_S ; v_exact].
"""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import ARRAY, Case, Exercise, Wrong
from pigviz.lessons.exercises.nb04 import log_inclusion_probability

# --------------------------------------------------------------------------- references


def log_u(q, keys, mu, K, L):
    q = np.asarray(q, dtype=np.float64)
    centred = np.asarray(keys, dtype=np.float64) - np.asarray(mu, dtype=np.float64)  # keys centred, q as is
    cos = centred @ q / (np.linalg.norm(centred, axis=-1) * np.linalg.norm(q))
    p = 1.0 - np.arccos(np.clip(cos, -1.0, 1.0)) / np.pi  # one bit agrees
    return log_inclusion_probability(p, K, L)  # as pigviz.lsh.simhash.log_inclusion_probability(p, K, L)


def sampled_estimate(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    q = np.asarray(q, dtype=np.float64)
    K_S, V_S = np.asarray(K_S, dtype=np.float64), np.asarray(V_S, dtype=np.float64)
    K_exact, V_exact = np.asarray(K_exact, dtype=np.float64), np.asarray(V_exact, dtype=np.float64)
    d = q.shape[-1]
    # 1. scores of the sampled and the exact keys
    s_sampled = K_S @ q / np.sqrt(d)
    s_exact = K_exact @ q / np.sqrt(d)
    # 2. log u from the angle between q and each centred sampled key
    c = K_S - np.asarray(mu, dtype=np.float64)
    p = 1.0 - np.arccos(np.clip(c @ q / (np.linalg.norm(c, axis=-1) * np.linalg.norm(q)), -1.0, 1.0)) / np.pi
    s_sampled = s_sampled - log_inclusion_probability(p, K, L)
    # 3. one softmax over both sets  4. mix their values
    scores = np.concatenate([s_sampled, s_exact])
    w = np.exp(scores - scores.max())
    return (w / w.sum()) @ np.concatenate([V_S, V_exact])


# --------------------------------------------------------------------------- cases


def _step(seed, d=16, m=30, e=6, dv=4, q_scale=1.0, mu_zero=False):
    """A decode step shaped like notebook 06's: keys in a cone around mu, a query that likes a
    few of them, the keys nearest the query as the sample, a handful read exactly."""
    rng = np.random.default_rng(seed)
    cone = rng.standard_normal(d)
    cone *= 2.0 * np.sqrt(d) / np.linalg.norm(cone)
    keys = cone + rng.standard_normal((m + 200, d))
    mu = np.zeros(d) if mu_zero else keys.mean(axis=0)
    q = q_scale * (rng.standard_normal(d) * 1.5 - 0.3 * cone)
    cos = (keys - mu) @ q / (np.linalg.norm(keys - mu, axis=1) * np.linalg.norm(q))
    sampled = np.argsort(-cos)[:m]
    values = rng.standard_normal((m + e, dv)) + 0.5
    exact_keys = cone + rng.standard_normal((e, d))
    return q, keys[sampled], values[:m], mu, exact_keys, values[m:]


# A query and two keys along it whose computed cosine rounds to 1.0000000000000002, in numpy, in
# math and in torch alike (tests/lessons/test_nb06.py checks it): an unclipped arccos gives NaN.
_q_edge = np.array([1.46, 0.28, -0.25])
_keys_edge = np.vstack([0.3 * _q_edge, 0.6 * _q_edge, [1.0, -0.5, 0.0], [-0.2, 1.0, 0.4]])


def _log_u_cases():
    q, k_s, _, mu, _, _ = _step(601)
    q2, k2, _, mu2, _, _ = _step(602, d=64, m=50)
    return [
        Case(
            "2-D: keys at 0, 90 and 135 degrees from q after centring, K = 2, L = 4",
            (np.array([1.0, 0.0]), np.array([[1.5, 1.0], [0.5, 2.0], [-0.5, 2.0]]), np.array([0.5, 1.0]), 2, 4),
            "after centring, the three keys sit at 0, 90 and 135 degrees from q: p = 1, 1/2 and 1/4",
        ),
        Case("30 sampled keys, d = 16, K = 10, L = 150", (q, k_s, mu, 10, 150)),
        Case("d = 64, K = 8, L = 300", (q2, k2, mu2, 8, 300)),
        Case("mu = 0", (q, k_s, np.zeros_like(mu), 10, 150), "with mu = 0 the angle is the raw angle"),
        Case("a long query", (1000.0 * q, k_s, mu, 10, 150), "u depends on the angle only, not on |q|"),
        Case(
            "two keys along q: computed cosines that round a hair past 1",
            (_q_edge, _keys_edge, np.zeros(3), 10, 150),
            "a cosine computed in floating point can land just outside [-1, 1], where arccos gives NaN: "
            "clip it to [-1, 1] first",
        ),
    ]


def _estimate_cases():
    cases = [
        Case(
            "2-D, two sampled keys and one exact key, K = 2, L = 4",
            (
                np.array([1.0, 0.5]),
                np.array([[2.0, 1.0], [1.0, 2.5]]),
                np.array([[1.0, 0.0], [0.0, 1.0]]),
                np.array([0.5, 1.0]),
                np.array([[0.5, 0.5]]),
                np.array([[-1.0, -1.0]]),
                2,
                4,
            ),
            "after centring, the two sampled keys sit at 26.6 and 45 degrees from q (p = 0.85 and 0.75); "
            "the exact key keeps its plain score",
        )
    ]
    q, k_s, v_s, mu, k_e, v_e = _step(611)
    cases.append(Case("30 sampled + 6 exact keys, d = 16, K = 10, L = 150", (q, k_s, v_s, mu, k_e, v_e, 10, 150)))
    cases.append(Case("K = 8, L = 300", (q, k_s, v_s, mu, k_e, v_e, 8, 300)))
    q, k_s, v_s, mu, k_e, v_e = _step(612, d=64, m=80, e=10, dv=8)
    cases.append(Case("80 sampled + 10 exact keys, d = 64", (q, k_s, v_s, mu, k_e, v_e, 10, 150)))
    cases.append(
        Case(
            "nothing sampled: the exact keys alone",
            (q, k_s[:0], v_s[:0], mu, k_e, v_e, 10, 150),
            "with no sampled keys the output is plain attention over the exact keys",
        )
    )
    cases.append(
        Case(
            "no exact keys",
            (q, k_s, v_s, mu, k_e[:0], v_e[:0], 10, 150),
            "with no exact keys the softmax runs over the sampled keys alone",
        )
    )
    cases.append(
        Case(
            "a long query: scores in the hundreds",
            (40.0 * q, k_s, v_s, mu, k_e, v_e, 10, 150),
            "subtract the largest score before exp",
        )
    )
    q, k_s, v_s, mu, k_e, v_e = _step(613, mu_zero=True)
    cases.append(Case("mu = 0 (keys not centred)", (q, k_s, v_s, mu, k_e, v_e, 10, 150)))
    return cases


# --------------------------------------------------------------------------- wrong versions


def _log_u_centres_query(q, keys, mu, K, L):
    return log_u(np.asarray(q, float) - np.asarray(mu, float), keys, mu, K, L)


def _log_u_raw_keys(q, keys, mu, K, L):
    return log_u(q, keys, np.zeros_like(np.asarray(mu, float)), K, L)


def _log_u_at_least_one(q, keys, mu, K, L):
    q = np.asarray(q, float)
    c = np.asarray(keys, float) - np.asarray(mu, float)
    p = 1 - np.arccos(np.clip(c @ q / (np.linalg.norm(c, axis=-1) * np.linalg.norm(q)), -1, 1)) / np.pi
    return np.log(-np.expm1(L * np.log1p(-(p**K))))


def _log_u_linear_p(q, keys, mu, K, L):
    q = np.asarray(q, float)
    c = np.asarray(keys, float) - np.asarray(mu, float)
    cos = c @ q / (np.linalg.norm(c, axis=-1) * np.linalg.norm(q))
    return log_inclusion_probability((1 + cos) / 2, K, L)


def _log_u_log2(q, keys, mu, K, L):
    return log_u(q, keys, mu, K, L) / np.log(2.0)


def _log_u_k_l_swapped(q, keys, mu, K, L):
    return log_u(q, keys, mu, L, K)


def _mix(q, K_S, V_S, K_exact, V_exact, correction, scale=None):
    q = np.asarray(q, float)
    scale = np.sqrt(len(q)) if scale is None else scale
    s = np.concatenate([np.asarray(K_S, float) @ q / scale - correction, np.asarray(K_exact, float) @ q / scale])
    w = np.exp(s - s.max())
    return (w / w.sum()) @ np.concatenate([np.asarray(V_S, float), np.asarray(V_exact, float)])


def _est_no_correction(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    return _mix(q, K_S, V_S, K_exact, V_exact, 0.0)


def _est_plus_log_u(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    return _mix(q, K_S, V_S, K_exact, V_exact, -log_u(q, K_S, mu, K, L))


def _est_raw_angle(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    return _mix(q, K_S, V_S, K_exact, V_exact, _log_u_raw_keys(q, K_S, mu, K, L))


def _est_centred_query(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    return _mix(q, K_S, V_S, K_exact, V_exact, _log_u_centres_query(q, K_S, mu, K, L))


def _est_no_sqrt_d(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    return _mix(q, K_S, V_S, K_exact, V_exact, log_u(q, K_S, mu, K, L), scale=1.0)


def _est_log2(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    return _mix(q, K_S, V_S, K_exact, V_exact, log_u(q, K_S, mu, K, L) / np.log(2.0))


def _est_k_l_swapped(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    return _mix(q, K_S, V_S, K_exact, V_exact, log_u(q, K_S, mu, L, K))


def _est_exact_corrected(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    q = np.asarray(q, float)
    K_exact = np.asarray(K_exact, float)
    d = np.sqrt(len(q))
    s = np.concatenate(
        [
            np.asarray(K_S, float) @ q / d - log_u(q, K_S, mu, K, L),
            K_exact @ q / d - (log_u(q, K_exact, mu, K, L) if len(K_exact) else np.zeros(0)),
        ]
    )
    w = np.exp(s - s.max())
    return (w / w.sum()) @ np.concatenate([np.asarray(V_S, float), np.asarray(V_exact, float)])


EXERCISES = [
    Exercise(
        name="06.log_u",
        signature="log_u(q, keys, mu, K, L) -> ndarray",
        task="The natural log of each key's inclusion probability u: p = 1 - angle(q, k - mu) / pi "
        "(keys centred, the query as it is), u = P(at least 2 of L tables of K bits collide). "
        "q (d,), keys (n, d), mu (d,) -> shape (n,). log_inclusion_probability(p, K, L) (imported) gives "
        "log u from p: mind the order, K bits per table, then L tables. A cosine computed in floating "
        "point can round a hair past 1 (a key along q): clip it to [-1, 1] before arccos. mu may be 0 "
        "and q may be long.",
        difficulty=2,
        importance=4,
        minutes=8,
        reference=log_u,
        make_cases=_log_u_cases,
        output=ARRAY,
        rtol=1e-3,
        atol=1e-3,
        helpers=(log_inclusion_probability,),
        hint="c = keys - mu; cos = c @ q / (|c| |q|); p = 1 - arccos(clip(cos, -1, 1)) / pi; "
        "log u = log_inclusion_probability(p, K, L)",
        wrong=(
            Wrong(
                "centres the query too",
                _log_u_centres_query,
                "MagicPIG hashes the query as it is; only the keys are centred",
            ),
            Wrong("raw keys", _log_u_raw_keys, "the tables hash k - mu: take the angle with the centred key"),
            Wrong("at least 1 table", _log_u_at_least_one, "a key is sampled when it collides in at least 2 tables"),
            Wrong(
                "p linear in the cosine",
                _log_u_linear_p,
                "one bit agrees with probability 1 - angle / pi, angle = arccos(cos)",
            ),
            Wrong(
                "log base 2",
                _log_u_log2,
                "this is log2 u: the correction needs the natural log (np.log), as log_inclusion_probability "
                "returns it; dividing by log(2) changes the unit",
            ),
            Wrong(
                "K and L swapped",
                _log_u_k_l_swapped,
                "K and L are swapped: log_inclusion_probability(p, K, L) takes the bits per table first, "
                "then the number of tables",
            ),
        ),
    ),
    Exercise(
        name="06.sampled_estimate",
        signature="sampled_estimate(q, K_S, V_S, mu, K_exact, V_exact, K, L) -> ndarray",
        task="MagicPIG's estimate of one attention output: scores q.k / sqrt(d) of the sampled keys "
        "K_S (m, d) and of the exact keys K_exact (e, d), d = len(q); subtract the natural log u from the "
        "sampled scores only (u from the angle between q and k - mu, at least 2 of L tables of K bits, "
        "as in log_u; clip the cosine to [-1, 1]); one softmax over both sets; the weighted sum of "
        "[V_S ; V_exact] (values (m, dv) and (e, dv)). Returns shape (dv,). m or e may be 0; scores "
        "may be in the hundreds (subtract the largest before exp); mu may be 0.",
        difficulty=3,
        importance=5,
        minutes=12,
        reference=sampled_estimate,
        make_cases=_estimate_cases,
        output=ARRAY,
        rtol=1e-3,
        atol=1e-5,
        helpers=(log_inclusion_probability,),
        hint="scores = [K_S @ q / sqrt(d) - log u ; K_exact @ q / sqrt(d)], log u from the centred sampled "
        "keys; w = exp(scores - max) / sum; return w @ [V_S ; V_exact]",
        wrong=(
            Wrong(
                "no -log u correction",
                _est_no_correction,
                "keys that are likely to be sampled are over-represented: subtract log u from their scores",
            ),
            Wrong(
                "adds log u",
                _est_plus_log_u,
                "dividing the weight by u means subtracting log u from the score, not adding it",
            ),
            Wrong(
                "u from the raw key's angle",
                _est_raw_angle,
                "the tables hash centred keys: the angle is between q and k - mu",
            ),
            Wrong(
                "u from the centred query's angle",
                _est_centred_query,
                "only the keys are centred: the angle is between q itself and k - mu",
            ),
            Wrong("no 1/sqrt(d)", _est_no_sqrt_d, "the scores are q.k / sqrt(d)"),
            Wrong(
                "log base 2",
                _est_log2,
                "this subtracts log2 u: the softmax's exp undoes a natural log, so subtract np.log(u), the natural log",
            ),
            Wrong(
                "K and L swapped",
                _est_k_l_swapped,
                "u was computed with K and L swapped: K bits per table, L tables, as "
                "log_inclusion_probability(p, K, L)",
            ),
            Wrong(
                "exact keys corrected too",
                _est_exact_corrected,
                "the exact keys are read with certainty (u = 1): subtract log u from the sampled scores only",
            ),
        ),
    ),
]
