"""Notebook 06, sampled attention: log u from the centred-key angle, MagicPIG's estimator, and
MagicPIG assembled from those pieces and SimHash.

The conventions are those of ``pigviz.lsh.reference.magicpig_reference`` (and of the engine,
``pigviz.lsh.magicpig.attend``): the query is hashed as it is, the keys after subtracting the
mean mu of the sampleable keys, so p = 1 - angle(q, k - mu) / pi; u is the chance of colliding
in at least 2 of L tables of K bits; one softmax runs over
[q.k_S / sqrt(d) - log u ; q.k_exact / sqrt(d)] and mixes [v_S ; v_exact]. The learner's own
``cos_centred`` and ``softmax`` (03), ``bit_agreement`` (04a) and ``log_inclusion_probability``
(04b) stand in for the references' helpers.
"""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import ARRAY, Case, Exercise, Wrong, show
from pigviz.lessons.exercises.nb03 import cos_centred, softmax
from pigviz.lessons.exercises.nb04 import bit_agreement, inclusion_probability, log_inclusion_probability
from pigviz.lsh.reference import simhash_codes

# --------------------------------------------------------------------------- references


def log_u(q, keys, mu, K, L):
    cos = cos_centred(q, keys, mu)  # yours from notebook 03: the angle of k - mu to q as it is
    p = bit_agreement(cos)  # yours from notebook 04a: one hyperplane puts them on the same side
    return log_inclusion_probability(p, K, L)  # yours from notebook 04b: at least 2 of L tables of K bits


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


def _far_keys(degrees, seed=603, d=6):
    """Keys at the given angles (degrees) from q after centring, at lengths 1 to 3: nearly opposite q,
    u runs from about e^-20 down to e^-62 at (K, L) = (10, 150)."""
    rng = np.random.default_rng(seed)
    q, mu = 2.0 * rng.standard_normal(d), rng.standard_normal(d)
    along = q / np.linalg.norm(q)
    across = rng.standard_normal(d)
    across -= (across @ along) * along
    across /= np.linalg.norm(across)
    t, r = np.radians(np.asarray(degrees, dtype=np.float64)), np.linspace(1.0, 3.0, len(degrees))
    return q, mu + r[:, None] * (np.cos(t)[:, None] * along + np.sin(t)[:, None] * across), mu


_FAR_HINT = (
    "u this small (below 1e-13) is lost to rounding in 1 - P(no table) - P(one table): the two "
    "subtractions cancel, and the log of what is left is off or NaN. Work in log space from the start"
)


def _log_u_cases():
    q, k_s, _, mu, _, _ = _step(601)
    q_far, k_far, mu_far = _far_keys([140, 146, 150, 153, 155, 157])
    q_opp, k_opp, mu_opp = _far_keys([160, 163, 166, 170, 173, 175])
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
        Case("keys 140 to 157 degrees from q: log u from about -21 to -32", (q_far, k_far, mu_far, 10, 150), _FAR_HINT),
        Case("keys 160 to 175 degrees from q: log u down to about -62", (q_opp, k_opp, mu_opp, 10, 150), _FAR_HINT),
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


def _log_u_closed_form(q, keys, mu, K, L):
    with np.errstate(divide="ignore", invalid="ignore"):  # as a learner's np.log would warn, then go on
        return np.log(inclusion_probability(bit_agreement(cos_centred(q, keys, mu)), K, L))


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


# --------------------------------------------------------------------------- the toy index


def build_tables(codes, K):
    codes = np.asarray(codes, dtype=np.int64)
    n, L = codes.shape
    # per table, the token ids in bucket order; a stable sort keeps ids ascending within a bucket
    ids = np.argsort(codes.T, axis=1, kind="stable")
    counts = np.stack([np.bincount(codes[:, t], minlength=2**K) for t in range(L)])  # (L, 2**K)
    offsets = np.zeros((L, 2**K + 1), dtype=np.int64)
    offsets[:, 1:] = np.cumsum(counts, axis=1)  # bucket b of table t: ids[t, offsets[t, b] : offsets[t, b + 1]]
    return offsets, ids


def query_hits(tables, q_codes):
    offsets, ids = (np.asarray(a, dtype=np.int64) for a in tables)
    q_codes = np.asarray(q_codes, dtype=np.int64)
    L, n = ids.shape
    hits = np.zeros(n, dtype=np.int64)
    for t in range(L):  # one bucket per table: the query's
        b = q_codes[t]
        hits[ids[t, offsets[t, b] : offsets[t, b + 1]]] += 1  # no id twice within one table
    return hits


def _as_int_array(name, value):
    """A learner's array (numpy, torch, lists) as int64, or why it is not one."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        return None, f"{name} must be an array of integers"
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number) or arr.dtype == bool:
        return None, f"{name} must be an array of integers, got dtype {arr.dtype}"
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            return None, f"{name} must hold whole numbers (token ids, positions), got dtype {arr.dtype}"
    return arr.astype(np.int64), None


def csr_tables(got, expected) -> str | None:
    """06.build_tables' comparison: ``got`` must be the pair (offsets, ids) equal to the
    reference's (any integer dtype, numpy or torch or lists); when it is not, say what is off in
    the learner's terms: shapes, the first and last offset, which bucket holds what."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return "return the pair (offsets, ids)"
    offsets, problem = _as_int_array("offsets", got[0])
    if problem:
        return problem
    ids, problem = _as_int_array("ids", got[1])
    if problem:
        return problem
    want_offsets, want_ids = (np.asarray(a, dtype=np.int64) for a in expected)
    L, n = want_ids.shape
    if ids.shape != want_ids.shape:
        turned = " (one row per table: transpose?)" if ids.shape == (n, L) and n != L else ""
        return f"ids has shape {ids.shape}, expected (L, n) = {want_ids.shape}{turned}"
    if offsets.shape != want_offsets.shape:
        return (
            f"offsets has shape {offsets.shape}, expected (L, 2**K + 1) = {want_offsets.shape}: one start per "
            "bucket of every table, empty ones included, and the end of the last"
        )
    if np.array_equal(offsets, want_offsets) and np.array_equal(ids, want_ids):
        return None
    for t in range(L):
        if not np.array_equal(np.sort(ids[t]), np.arange(n)):
            return (
                f"ids[{t}] is not the token ids 0 .. {n - 1}, each once ({show(ids[t])}): each table files every "
                "key once, by its position, not its bucket id"
            )
    if not (offsets[:, 0] == 0).all():
        return "offsets[t, 0] must be 0: bucket 0 starts where its table's row starts"
    if not (offsets[:, -1] == n).all():
        return f"offsets[t, -1] must be n = {n}: the last bucket ends where the row ends"
    if (np.diff(offsets, axis=1) < 0).any():
        return "offsets must never decrease: bucket b runs from offsets[t, b] to offsets[t, b + 1]"
    if not np.array_equal(offsets, want_offsets):
        t, b = (int(i) for i in np.argwhere(offsets != want_offsets)[0])
        return (
            f"offsets[{t}, {b}] is {offsets[t, b]}, expected {want_offsets[t, b]}: the start of bucket {b} in table {t}"
        )
    for t in range(L):
        for b in range(want_offsets.shape[1] - 1):
            lo, hi = want_offsets[t, b], want_offsets[t, b + 1]
            if np.array_equal(ids[t, lo:hi], want_ids[t, lo:hi]):
                continue
            mine, want = ids[t, lo:hi], want_ids[t, lo:hi]
            if np.array_equal(np.sort(mine), want):
                return (
                    f"bucket {b} of table {t} holds the right ids in the wrong order ({show(mine)}): ascending "
                    "within a bucket, as a stable sort leaves them"
                )
            return f"bucket {b} of table {t} holds {show(mine)}, expected {show(want)}"
    return "the tables differ from the reference"


def _codes(seed, n, K, L, d=8):
    """Bucket ids as SimHash gives them: keys in a loose cone hashed with random planes."""
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((n, d)) + 0.5 * rng.standard_normal(d)
    return simhash_codes(keys - keys.mean(axis=0), rng.standard_normal((d, K * L)), K, L)


def _build_cases():
    uneven = np.array([[5, 0], [1, 0], [5, 7], [1, 0], [5, 3], [6, 0]])  # buckets 0, 2, 3, 4 and 7 empty in table 0
    return [
        Case(
            "6 keys, K = 3, L = 2, by hand: several buckets empty",
            (uneven, 3),
            "an empty bucket still has its offset: offsets[t, b] == offsets[t, b + 1]",
        ),
        Case("40 keys hashed by SimHash, K = 3, L = 6", (_codes(631, 40, 3, 6), 3)),
        Case(
            "one key, K = 2, L = 3",
            (np.array([[3, 0, 2]]), 2),
            "with one key every table has one full bucket and the others empty",
        ),
        Case(
            "every key in one bucket, K = 3, L = 2",
            (np.full((9, 2), 4), 3),
            "one bucket holds all 9 keys, in token order; the others are empty",
        ),
        Case(
            "the top buckets unused: no code reaches 2**K - 1",
            (np.array([[0, 1], [2, 0], [1, 1], [0, 2], [2, 2]]), 3),
            "K, not the largest code, says how many buckets a table has",
        ),
        Case("one table: L = 1, K = 4", (_codes(632, 50, 4, 1), 4)),
        Case("300 keys, K = 4, L = 20", (_codes(633, 300, 4, 20), 4)),
        Case("K = 1: two buckets per table", (_codes(634, 25, 1, 5), 1)),
    ]


def _tables_from(codes, K, order):
    codes = np.asarray(codes, dtype=np.int64)
    counts = np.stack([np.bincount(codes[:, t], minlength=2**K) for t in range(codes.shape[1])])
    return np.c_[np.zeros(len(counts), dtype=np.int64), counts.cumsum(axis=1)], order


def _bt_unstable(codes, K):
    codes = np.asarray(codes, dtype=np.int64)
    return _tables_from(codes, K, np.argsort(codes.T, axis=1, kind="heapsort"))


def _bt_ends(codes, K):
    offsets, ids = build_tables(codes, K)
    return np.c_[offsets[:, 1:], offsets[:, -1:]], ids  # offsets[t, b] = the end of bucket b


def _bt_counts(codes, K):
    offsets, ids = build_tables(codes, K)
    return np.c_[np.zeros(len(offsets), dtype=np.int64), np.diff(offsets, axis=1)], ids


def _bt_sorted_codes(codes, K):
    offsets, _ = build_tables(codes, K)
    return offsets, np.sort(np.asarray(codes, dtype=np.int64).T, axis=1)


def _bt_buckets_from_data(codes, K):
    codes = np.asarray(codes, dtype=np.int64)
    buckets = int(codes.max()) + 1  # as many buckets as the codes reach, not 2**K
    counts = np.stack([np.bincount(codes[:, t], minlength=buckets) for t in range(codes.shape[1])])
    return np.c_[np.zeros(len(counts), dtype=np.int64), counts.cumsum(axis=1)], np.argsort(
        codes.T, axis=1, kind="stable"
    )


def _hits_cases():
    def tables(codes, K):
        return build_tables(codes, K)

    uneven = np.array([[5, 0], [1, 0], [5, 7], [1, 0], [5, 3], [6, 0]])
    c40 = _codes(641, 40, 3, 6)
    q40 = np.random.default_rng(642).integers(0, 2**3, 6)
    c300, q300 = _codes(643, 300, 4, 20), np.random.default_rng(644).integers(0, 2**4, 20)
    every = np.full((9, 2), 4)
    return [
        Case(
            "6 keys, K = 3, L = 2, by hand",
            (tables(uneven, 3), np.array([5, 0])),
            "in table 0 the query's bucket 5 holds keys 0, 2 and 4; in table 1 its bucket 0 holds 0, 1, 3 and 5",
        ),
        Case("40 keys, K = 3, L = 6", (tables(c40, 3), q40)),
        Case(
            "the query's bucket empty in one table",
            (tables(uneven, 3), np.array([2, 0])),
            "an empty bucket adds no hit: offsets[t, b] == offsets[t, b + 1]",
        ),
        Case("one key, K = 2, L = 3", (tables(np.array([[3, 0, 2]]), 2), np.array([3, 1, 2]))),
        Case(
            "every key in the query's bucket, K = 3, L = 2",
            (tables(every, 3), np.array([4, 4])),
            "each key is in the query's bucket in both tables: 2 hits each",
        ),
        Case("every key in a bucket the query is not in", (tables(every, 3), np.array([4, 5]))),
        Case(
            "one table: L = 1, K = 4",
            (tables(_codes(645, 50, 4, 1), 4), np.random.default_rng(646).integers(0, 2**4, 1)),
        ),
        Case("300 keys, K = 4, L = 20", (tables(c300, 4), q300)),
        Case(
            "the query in the last bucket, 2**K - 1",
            (tables(c40, 3), np.full(6, 7)),
            "the last bucket ends at offsets[t, 2**K], the row's end",
        ),
    ]


def _qh_whole_row(tables, q_codes):
    _, ids = (np.asarray(a) for a in tables)
    return np.full(ids.shape[1], ids.shape[0], dtype=np.int64)


def _qh_end_plus_one(tables, q_codes):
    offsets, ids = (np.asarray(a, dtype=np.int64) for a in tables)
    hits = np.zeros(ids.shape[1], dtype=np.int64)
    for t, b in enumerate(np.asarray(q_codes, dtype=np.int64)):
        hits[ids[t, offsets[t, b] : offsets[t, b + 1] + 1]] += 1
    return hits


def _qh_next_bucket(tables, q_codes):
    offsets, ids = (np.asarray(a, dtype=np.int64) for a in tables)
    hits = np.zeros(ids.shape[1], dtype=np.int64)
    for t, b in enumerate(np.asarray(q_codes, dtype=np.int64)):
        hits[ids[t, offsets[t, b + 1] : offsets[t, min(b + 2, offsets.shape[1] - 1)]]] += 1
    return hits


def _qh_fancy_repeats(tables, q_codes):
    offsets, ids = (np.asarray(a, dtype=np.int64) for a in tables)
    hits = np.zeros(ids.shape[1], dtype=np.int64)
    read = [ids[t, offsets[t, b] : offsets[t, b + 1]] for t, b in enumerate(np.asarray(q_codes, dtype=np.int64))]
    hits[np.concatenate(read)] += 1  # a key in several of the query's buckets is counted once
    return hits


def _qh_positions(tables, q_codes):
    offsets, ids = (np.asarray(a, dtype=np.int64) for a in tables)
    hits = np.zeros(ids.shape[1], dtype=np.int64)
    for t, b in enumerate(np.asarray(q_codes, dtype=np.int64)):
        hits[np.arange(offsets[t, b], offsets[t, b + 1])] += 1  # positions in the row, not the ids there
    return hits


def _qh_bits(tables, q_codes):
    offsets, ids = (np.asarray(a, dtype=np.int64) for a in tables)
    L, n = ids.shape
    K = int(np.log2(offsets.shape[1] - 1))
    agree = np.zeros(n, dtype=np.int64)
    for t in range(L):
        codes = np.empty(n, dtype=np.int64)
        codes[ids[t]] = np.repeat(np.arange(2**K), np.diff(offsets[t]))  # each key's bucket, from the table
        same = ~(codes ^ np.asarray(q_codes, dtype=np.int64)[t])
        agree += sum((same >> j) & 1 for j in range(K))  # agreeing bits
    return agree // K  # in tables' worth


EXERCISES = [
    Exercise(
        name="06.log_u",
        notebook_key="06a",
        signature="log_u(q, keys, mu, K, L) -> ndarray",
        task="For each key, the natural log of u, the chance that it is sampled at (K, L): that it shares "
        "the query's bucket in at least 2 of L tables of K bits, tables that hash the centred keys k - mu "
        "and the query as it is. q (d,), keys (n, d), mu (d,) -> shape (n,). mu may be 0, q may be long, a "
        "key may lie along q, and a key nearly opposite q has a u far below 1e-13.",
        difficulty=2,
        importance=4,
        minutes=3,
        reference=log_u,
        make_cases=_log_u_cases,
        output=ARRAY,
        rtol=1e-3,
        atol=1e-3,
        helpers=(log_inclusion_probability, cos_centred, bit_agreement),
        nudge="Two questions you have answered before: how likely one hyperplane is to put the query and a "
        "centred key on the same side, and what turns that into the chance that the tables sample the key.",
        hint="Notebooks 03, 04a and 04b each wrote one step of this, and ex.mine keeps yours; for far keys, "
        "notebook 04b section 1's way, not notebook 04a's closed form.",
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
                "log of 04a's closed form",
                _log_u_closed_form,
                "this is the log of notebook 04a's closed form for u, whose subtractions cancel for keys far from q: "
                "take log u as notebook 04b computes it, summed in log space",
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
        notebook_key="06a",
        signature="sampled_estimate(q, K_S, V_S, mu, K_exact, V_exact, K, L) -> ndarray",
        task="MagicPIG's estimate of one attention output, shape (dv,), from two sets of keys: the sampled "
        "keys K_S (m, d) with values V_S (m, dv), each drawn with the chance u your log_u gives at (K, L), "
        "and the exact set K_exact (e, d) with values V_exact (e, dv), read for sure. A key's score is "
        "q.k / sqrt(d), d = len(q); your log_u and your softmax (notebook 03) are at hand. m or e may be 0; "
        "scores may be in the hundreds; mu may be 0.",
        difficulty=3,
        importance=5,
        minutes=10,
        reference=sampled_estimate,
        make_cases=_estimate_cases,
        output=ARRAY,
        rtol=1e-3,
        atol=1e-5,
        helpers=(log_u, log_inclusion_probability, cos_centred, bit_agreement, softmax),
        nudge="Notebook 01 weighed each drawn stick by w / u. After the exp of a softmax, dividing a weight by u "
        "is subtracting log u from its score. Which keys were drawn by chance, and which were read for sure?",
        hint="np.concatenate puts arrays end to end; keep the scores and the values in the same order.",
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
        notebook_key="06a",
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
        helpers=(sampled_estimate, log_u, log_inclusion_probability, cos_centred, bit_agreement, softmax),
        make_cases=_assembly_cases,
        compare=output_and_read,
        rtol=1e-3,
        atol=1e-5,
        nudge="Four steps come before your sampled_estimate: which keys are read for sure, the mean the others "
        "are centred by, in how many tables each key lands in the query's bucket, and which keys clear the "
        "bar. A table is one bucket of K bits, not K separate bits; and a key that is read for sure must not "
        "be drawn again.",
        hint="simhash_codes hashes a batch, (n, L), or one vector, (L,): broadcasting compares each table "
        "with its own. Mind recent = 0, which the checks try: a slice from the end by -recent is not empty then.",
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
    Exercise(
        name="06.build_tables",
        notebook_key="06b",
        signature="build_tables(codes, K) -> (offsets, ids)",
        task="The L hash tables of an LSH index, laid out as the engine holds them (CSR). codes (n, L): "
        "codes[i, t] is key i's bucket in table t, an integer in 0 .. 2**K - 1 (what simhash_codes gives for "
        "n keys). Return (offsets, ids), integer arrays. ids (L, n): row t lists the token ids 0 .. n-1 "
        "grouped by their bucket in table t, buckets in order 0, 1, ..., 2**K - 1, ids ascending within a "
        "bucket. offsets (L, 2**K + 1): bucket b of table t is ids[t, offsets[t, b] : offsets[t, b + 1]], so "
        "offsets[t, 0] = 0, offsets[t, 2**K] = n, and an empty bucket has two equal offsets. K is passed "
        "because a table has 2**K buckets whether or not any key lands in the last ones. n may be 1; one "
        "bucket may hold every key.",
        difficulty=3,
        importance=4,
        minutes=15,
        reference=build_tables,
        make_cases=_build_cases,
        compare=csr_tables,
        nudge="Filing the keys of one table is sorting them by bucket: the ids come out in bucket order, and a "
        "bucket's run starts where the buckets before it end, so the starts are a running total of the bucket "
        "sizes. Two keys in the same bucket must keep their token order, and a bucket no key landed in still "
        "needs its start.",
        hint="numpy has a sort that returns positions rather than values, a count of how often each integer occurs"
        " and a running total; the sort and the running total take an axis, the count one row. Check their arguments"
        " for ties and for buckets no key reached.",
        wrong=(
            Wrong(
                "unstable order within a bucket",
                _bt_unstable,
                "the ids of one bucket must stay in token order: sort the codes with a stable sort "
                '(np.argsort(..., kind="stable")); numpy\'s default sort may swap equal codes',
            ),
            Wrong(
                "offsets at the ends of the buckets",
                _bt_ends,
                "offsets[t, b] is where bucket b starts, so offsets[t, 0] = 0: the running total of the "
                "sizes of the buckets before b, not up to and including b",
            ),
            Wrong(
                "bucket sizes, not offsets",
                _bt_counts,
                "offsets are where each bucket starts in the row: the running total of the bucket sizes "
                "(a cumulative sum), not the sizes themselves",
            ),
            Wrong(
                "the sorted codes, not the ids",
                _bt_sorted_codes,
                "ids lists token ids (positions 0 .. n-1) in bucket order, not the bucket ids themselves: "
                "sort the positions by their codes (an argsort)",
            ),
            Wrong(
                "buckets counted from the codes",
                _bt_buckets_from_data,
                "a table has 2**K buckets even when no key lands in the last ones: size offsets from K, "
                "(L, 2**K + 1), not from the largest code",
            ),
        ),
    ),
    Exercise(
        name="06.query_hits",
        notebook_key="06b",
        signature="query_hits(tables, q_codes) -> ndarray",
        task="For each key, in how many of the L tables it shares the query's bucket, read from the tables "
        "your build_tables returns: tables = (offsets, ids), offsets (L, 2**K + 1) and ids (L, n); q_codes "
        "(L,) the query's bucket in each table. Read only the query's bucket in each table, the run of ids "
        "its two offsets bound, not every key. Return an (n,) integer array of hit counts, each in 0 .. L. "
        "The query's bucket may be empty or hold every key; L may be 1.",
        difficulty=3,
        importance=4,
        minutes=12,
        reference=query_hits,
        make_cases=_hits_cases,
        output=ARRAY,
        rtol=0.0,
        atol=0.0,
        nudge="In each table the query's bucket is one run of the row, and the offsets say where it starts and "
        "ends; every id in that run is a key that collides with the query in that table, once. A key can be in "
        "the query's bucket in several tables, and each of them counts.",
        hint="Section 1's layout says where a bucket's run sits in its row. Across tables the same id comes back: "
        "look up how np.bincount (with minlength) and np.add.at treat an index that repeats, and how a fancy-"
        "indexed `+=` does.",
        wrong=(
            Wrong(
                "every key counted in every table",
                _qh_whole_row,
                "read only the query's bucket in each table, ids[t, offsets[t, b] : offsets[t, b + 1]] with "
                "b = q_codes[t], not the whole row",
            ),
            Wrong(
                "one entry past the bucket",
                _qh_end_plus_one,
                "bucket b ends before offsets[t, b + 1]: a slice's end is excluded, so the run is "
                "offsets[t, b] : offsets[t, b + 1], with no + 1",
            ),
            Wrong(
                "the next bucket read",
                _qh_next_bucket,
                "bucket b starts at offsets[t, b], not offsets[t, b + 1]: offsets has a leading 0",
            ),
            Wrong(
                "repeats counted once",
                _qh_fancy_repeats,
                "hits[idx] += 1 adds 1 once per distinct index even when idx repeats, so a key in the query's "
                "bucket in several tables gets 1: count table by table, or with np.bincount(idx, minlength=n) "
                "or np.add.at(hits, idx, 1)",
            ),
            Wrong(
                "positions counted, not the ids there",
                _qh_positions,
                "offsets[t, b] : offsets[t, b + 1] are places in the row ids[t]; the keys are the ids stored "
                "there, ids[t, offsets[t, b] : offsets[t, b + 1]]",
            ),
            Wrong(
                "agreeing bits counted",
                _qh_bits,
                "a table counts as a hit only when the key's whole bucket (all K bits) is the query's: count "
                "tables, the keys in the query's bucket, not agreeing bits",
            ),
        ),
    ),
]
