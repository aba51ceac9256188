"""Notebook 06, sampled attention: log u from the centred-key angle, MagicPIG's estimator, and
MagicPIG assembled from those pieces and SimHash.

The conventions are those of ``pigviz.lsh.reference.magicpig_reference`` (and of the engine,
``pigviz.lsh.magicpig.attend``): the query is hashed as it is, the keys after subtracting the
mean mu of the sampleable keys, so p = 1 - angle(q, k - mu) / pi; u is the chance of colliding
in at least 2 of L tables of K bits; one softmax runs over
[q.k_S / sqrt(d) - log u ; q.k_exact / sqrt(d)] and mixes [v_S ; v_exact]. The learner's own
``log_inclusion_probability`` (04) and ``softmax`` (03) stand in for the references' helpers.
"""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import ARRAY, Case, Exercise, Wrong
from pigviz.lessons.exercises.nb03 import softmax
from pigviz.lessons.exercises.nb04 import log_inclusion_probability
from pigviz.lsh.reference import simhash_codes

# --------------------------------------------------------------------------- references


def log_u(q, keys, mu, K, L):
    q = np.asarray(q, dtype=np.float64)
    centred = np.asarray(keys, dtype=np.float64) - np.asarray(mu, dtype=np.float64)  # keys centred, q as is
    cos = centred @ q / (np.linalg.norm(centred, axis=-1) * np.linalg.norm(q))
    p = 1.0 - np.arccos(np.clip(cos, -1.0, 1.0)) / np.pi  # one bit agrees
    return log_inclusion_probability(p, K, L)  # yours from notebook 04 (ex.mine.log_inclusion_probability)


def sampled_estimate(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    q = np.asarray(q, dtype=np.float64)
    K_S, K_exact = np.asarray(K_S, dtype=np.float64), np.asarray(K_exact, dtype=np.float64)
    d = len(q)
    # the sampled keys' scores minus log u (w / u after the exp), the exact keys' plain scores
    scores = np.concatenate([K_S @ q / np.sqrt(d) - log_u(q, K_S, mu, K, L), K_exact @ q / np.sqrt(d)])
    values = np.concatenate([np.asarray(V_S, dtype=np.float64), np.asarray(V_exact, dtype=np.float64)])
    return softmax(scores) @ values  # one softmax (yours from notebook 03) over both sets


def magicpig_estimate(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    q, keys, values = (np.asarray(a, dtype=np.float64) for a in (q, keys, values))
    planes = np.asarray(planes, dtype=np.float64)
    n = len(keys)
    exact = np.r_[0:sinks, n - recent : n]  # the sinks and the window: read exactly
    mu = keys[sinks : n - recent].mean(axis=0)  # the mean of the keys that can be sampled
    # in how many of the L tables each centred key shares the query's bucket (same planes)
    hits = (simhash_codes(keys - mu, planes, K, L) == simhash_codes(q, planes, K, L)).sum(axis=1)
    hits[exact] = 0  # read anyway: never sampled as well
    sampled = np.flatnonzero(hits >= min_hits)
    out = sampled_estimate(q, keys[sampled], values[sampled], mu, keys[exact], values[exact], K, L)
    return out, np.r_[exact, sampled]  # every key whose score and value enter the output


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


# --------------------------------------------------------------------------- the assembly


def output_and_read(got, expected) -> str | None:
    """06.magicpig_estimate's comparison: ``got`` must be a pair (output, read) whose output is
    the reference's to the check's tolerance and whose read holds the same positions, in any
    order (a position listed twice counts once; a boolean mask of length n works too)."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return "returned one value: return the pair (output, read)"
    out, read = got
    want_out, want_read = expected
    try:
        out = np.asarray(out, dtype=np.float64)
        read = np.asarray(read)
    except (TypeError, ValueError):
        return "output must be numbers and read an array of positions"
    if out.shape != np.shape(want_out):
        return f"output has shape {out.shape}, expected {np.shape(want_out)} (one value vector)"
    if np.isnan(out).any():
        return "output holds NaN"
    if read.dtype == bool:
        read = np.flatnonzero(read)
    elif read.size and not np.issubdtype(read.dtype, np.integer):
        if not np.issubdtype(read.dtype, np.number) or not np.all(read == np.round(read)):
            return f"read must hold integer positions, got dtype {read.dtype}"
    read = np.unique(read.astype(np.int64).ravel())
    want_read = np.unique(np.asarray(want_read, dtype=np.int64))
    if not np.array_equal(read, want_read):
        extra, missing = np.setdiff1d(read, want_read), np.setdiff1d(want_read, read)
        return (
            f"read holds {read.size} positions, the reference {len(want_read)}: {extra.size} extra"
            + (f" (first {extra[0]})" if extra.size else "")
            + f", {missing.size} missing"
            + (f" (first {missing[0]})" if missing.size else "")
        )
    if not np.allclose(out, want_out, rtol=1e-3, atol=1e-5):
        return "the same keys read, but the output differs"
    return None


def _planes(seed, d, K, L):
    return np.random.default_rng(seed).standard_normal((d, K * L))


def _synthetic(seed, n=300, d=16, dv=4, sink=False):
    """Keys in a narrow cone (as real keys are), optionally a large first key (a sink)."""
    rng = np.random.default_rng(seed)
    cone = rng.standard_normal(d)
    keys = 3.0 * cone / np.linalg.norm(cone) * np.sqrt(d) + rng.standard_normal((n, d))
    if sink:
        keys[0] = 12.0 * keys[0]
    q = rng.standard_normal(d) * 2.0
    return q, keys, rng.standard_normal((n, dv))


def _assembly_cases():
    from pigviz.lsh.index import build_index  # heavy: imports torch
    from pigviz.study.estimators import shipped_row  # heavy: study.estimators loads torch and the shipped capture

    q, k, v = _synthetic(621, n=40, d=4, dv=2)
    cases = [Case("40 keys, d = 4, K = 2, L = 6, 2 sinks and 4 recent", (q, k, v, _planes(1, 4, 2, 6), 2, 6, 2, 4))]
    q, k, v = _synthetic(622)
    cases.append(Case("300 keys in a cone, d = 16, K = 4, L = 20", (q, k, v, _planes(2, 16, 4, 20), 4, 20, 4, 16)))
    q, k, v = _synthetic(623, sink=True)
    cases.append(
        Case(
            "a large first key (a sink), K = 4, L = 20",
            (q, k, v, _planes(3, 16, 4, 20), 4, 20, 4, 16),
            "the mean is over the sampleable keys only: keys[sinks : n - recent], not the sinks and the window",
        )
    )
    cases.append(
        Case(
            "no recent window: recent = 0",
            (q, k, v, _planes(3, 16, 4, 20), 4, 20, 4, 0),
            "with recent = 0 the window is empty: keys[-0:] is every key, keys[n - recent:] none",
        )
    )
    cases.append(
        Case(
            "nothing reaches 2 hits (K = 14, L = 3)",
            (q[:], k, v, _planes(4, 16, 14, 3), 14, 3, 4, 16),
            "with nothing sampled, the output is plain attention over the exact set",
        )
    )
    for row, head, position in ((0, 0, 63), (3, 1, 20)):  # layers 2 and 25 of the shipped capture
        q, k, v = shipped_row(row, head, position)
        planes = build_index(_torch_keys(k[:128]), K=10, L=150, seed=0).planes.double().numpy()
        cases.append(
            Case(
                f"a real row: shipped layer {(2, 13, 19, 25)[row]}, {len(k):,} keys, (K, L) = (10, 150)",
                (q, k, v, planes, 10, 150, 4, 64),
            )
        )
    return cases


def _torch_keys(k):
    import torch  # heavy: only the real rows' planes need it

    return torch.from_numpy(np.ascontiguousarray(k, dtype=np.float32))[None]


def _assemble(q, keys, values, planes, K, L, sinks, recent, min_hits=2, *, mistake=""):
    """The reference with one mistake made (the wrong versions below)."""
    q, keys, values = (np.asarray(a, dtype=np.float64) for a in (q, keys, values))
    planes = np.asarray(planes, dtype=np.float64)
    n, d = keys.shape
    exact = np.r_[0:sinks, n - recent : n]
    if mistake == "window from the end":
        exact = np.unique(np.r_[0:sinks, np.arange(n)[-recent:]])  # every key when recent = 0
    mu = keys.mean(axis=0) if mistake == "mean of all" else keys[sinks : n - recent].mean(axis=0)
    if mistake == "not centred":
        mu = np.zeros(d)
    query = q - mu if mistake == "query centred" else q
    if mistake == "per bit":
        bits_k = (keys - mu) @ planes > 0
        bits_q = query @ planes > 0
        hits = (bits_k == bits_q).sum(axis=1) // K  # matching bits, in tables' worth
    else:
        codes_k, codes_q = simhash_codes(keys - mu, planes, K, L), simhash_codes(query, planes, K, L)
        hits = (codes_k == (codes_q[0] if mistake == "one table" else codes_q)).sum(axis=1)
    if mistake != "exact sampled":
        hits[exact] = 0
    sampled = np.flatnonzero(hits >= (1 if mistake == "min_hits ignored" else min_hits))
    out = sampled_estimate(q, keys[sampled], values[sampled], mu, keys[exact], values[exact], K, L)
    return out, np.r_[exact, sampled]


def _mp_per_bit(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    return _assemble(q, keys, values, planes, K, L, sinks, recent, min_hits, mistake="per bit")


def _mp_exact_sampled(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    return _assemble(q, keys, values, planes, K, L, sinks, recent, min_hits, mistake="exact sampled")


def _mp_not_centred(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    return _assemble(q, keys, values, planes, K, L, sinks, recent, min_hits, mistake="not centred")


def _mp_one_table(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    return _assemble(q, keys, values, planes, K, L, sinks, recent, min_hits, mistake="one table")


def _mp_min_hits_ignored(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    return _assemble(q, keys, values, planes, K, L, sinks, recent, min_hits, mistake="min_hits ignored")


def _mp_mean_of_all(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    return _assemble(q, keys, values, planes, K, L, sinks, recent, min_hits, mistake="mean of all")


def _mp_query_centred(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    return _assemble(q, keys, values, planes, K, L, sinks, recent, min_hits, mistake="query centred")


def _mp_window_from_the_end(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    return _assemble(q, keys, values, planes, K, L, sinks, recent, min_hits, mistake="window from the end")


EXERCISES = [
    Exercise(
        name="06.log_u",
        signature="log_u(q, keys, mu, K, L) -> ndarray",
        task="The natural log of each key's inclusion probability u: p = 1 - angle(q, k - mu) / pi "
        "(keys centred, the query as it is), u = P(at least 2 of L tables of K bits collide). "
        "q (d,), keys (n, d), mu (d,) -> shape (n,). log_inclusion_probability(p, K, L), yours from "
        "notebook 04, gives log u from p: mind the order, K bits per table, then L tables. A cosine "
        "computed in floating point can round a hair past 1 (a key along q): clip it to [-1, 1] before "
        "arccos. mu may be 0 and q may be long.",
        difficulty=2,
        importance=4,
        minutes=8,
        reference=log_u,
        make_cases=_log_u_cases,
        output=ARRAY,
        rtol=1e-3,
        atol=1e-3,
        helpers=(log_inclusion_probability,),
        nudge="Notebook 04 turned p, the chance that one bit agrees, into log u. What is new is which angle "
        "gives p: the tables hash the centred keys and the query as it is. And a cosine computed in floating "
        "point is not always inside the range arccos accepts.",
        hint="np.linalg.norm(c, axis=1) gives the lengths of the centred keys c = keys - mu; np.clip(cos, -1, 1) "
        "before np.arccos; log_inclusion_probability takes p, then K, then L",
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
        "K_S (m, d) and of the exact keys K_exact (e, d), d = len(q); subtract log u (your log_u) from the "
        "sampled scores only; one softmax (yours from notebook 03) over both sets; the weighted sum of "
        "[V_S ; V_exact] (values (m, dv) and (e, dv)). Returns shape (dv,). m or e may be 0; scores "
        "may be in the hundreds; mu may be 0.",
        difficulty=3,
        importance=5,
        minutes=12,
        reference=sampled_estimate,
        make_cases=_estimate_cases,
        output=ARRAY,
        rtol=1e-3,
        atol=1e-5,
        helpers=(log_u, log_inclusion_probability, softmax),
        nudge="Notebook 01 weighed each drawn stick by w / u. After the exp of a softmax, dividing a weight by u "
        "is subtracting log u from its score. Which keys were drawn by chance, and which were read for sure?",
        hint="np.concatenate joins the two score vectors, and the two value blocks in the same order; "
        "log_u(q, K_S, mu, K, L) is the correction; softmax(scores) @ values mixes",
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
    Exercise(
        name="06.magicpig_estimate",
        signature="magicpig_estimate(q, keys, values, planes, K, L, sinks, recent, min_hits=2) -> (output, read)",
        task="MagicPIG for one query q (d,) over keys (n, d) and values (n, dv), built from your pieces. The "
        "exact set: the first `sinks` and the last `recent` positions. Centre every key by mu, the mean of "
        "the keys between them (the sampleable ones); hash the centred keys and q, as it is, with the same "
        "planes (d, K*L): simhash_codes(x, planes, K, L) gives one bucket per table. A key outside the exact "
        "set is sampled when it shares the query's bucket in at least min_hits of the L tables (2 here, as "
        "your sampled_estimate's u assumes). Return (output, read): your sampled_estimate of the output, and "
        "the positions of every key read, exact set and sample, in any order.",
        difficulty=4,
        importance=5,
        minutes=20,
        reference=magicpig_estimate,
        helpers=(sampled_estimate, log_u, log_inclusion_probability, softmax),
        make_cases=_assembly_cases,
        compare=output_and_read,
        rtol=1e-3,
        atol=1e-5,
        nudge="Four steps come before your sampled_estimate: which keys are read for sure, the mean the others "
        "are centred by, in how many tables each key lands in the query's bucket, and which keys clear the "
        "bar. A table is one bucket of K bits, not K separate bits; and a key that is read for sure must not "
        "be drawn again.",
        hint="np.r_[0:sinks, n - recent : n] lists the exact positions (keys[-recent:] is every key when "
        "recent = 0); simhash_codes gives (n, L) buckets for the keys and (L,) for q, so == compares each "
        "table with its own, and .sum(axis=1) counts the tables; np.flatnonzero(hits >= min_hits)",
        wrong=(
            Wrong(
                "hits counted per bit",
                _mp_per_bit,
                "a table counts as a hit only when all K bits of the key's bucket match the query's: compare "
                "buckets (simhash_codes), then count tables, not bits",
            ),
            Wrong(
                "exact keys sampled again",
                _mp_exact_sampled,
                "the sinks and the window are read exactly already: leave them out of the sample (their hits "
                "do not count), or they enter the softmax twice",
            ),
            Wrong(
                "centring forgotten",
                _mp_not_centred,
                "real keys sit in a narrow cone: hash k - mu (and take u's angle from it), with mu the mean of "
                "the sampleable keys",
            ),
            Wrong(
                "one table's bucket for all tables",
                _mp_one_table,
                "compare each table's bucket of a key with the query's bucket in the same table (codes_k == "
                "codes_q, both with L columns)",
            ),
            Wrong(
                "min_hits ignored",
                _mp_min_hits_ignored,
                "a key is sampled when it shares the query's bucket in at least min_hits tables (2), not in one",
            ),
            Wrong(
                "mean of every key",
                _mp_mean_of_all,
                "centre by the mean of the sampleable keys only, keys[sinks : n - recent]: a sink key would "
                "drag the mean of all keys off the cloud",
            ),
            Wrong(
                "query centred too",
                _mp_query_centred,
                "MagicPIG hashes the query as it is; only the keys are centred",
            ),
            Wrong(
                "window from the end",
                _mp_window_from_the_end,
                "with recent = 0 there is no window, but keys[-0:] is every key: count the window from n - recent",
            ),
        ),
    ),
]
