"""Notebook 02, the key cone: cosine with the mean direction, cone tightness, attention weights."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import ARRAY, FLOAT, Case, Exercise, Wrong

# --------------------------------------------------------------------------- references


def cos_to_mean_direction(keys):
    k = np.asarray(keys, dtype=np.float64)
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)  # each key's direction
    mean_dir = unit.mean(axis=0)  # the keys' mean direction ...
    mean_dir = mean_dir / np.linalg.norm(mean_dir)  # ... as a unit vector
    return unit @ mean_dir


def cone_tightness(keys):
    k = np.asarray(keys, dtype=np.float64)
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)
    return float(np.linalg.norm(unit.mean(axis=0)))  # length of the average unit key


def attention_weights(q, keys):
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(keys, dtype=np.float64)
    scores = k @ q / np.sqrt(q.shape[-1])  # q.k / sqrt(d)
    e = np.exp(scores - scores.max())  # subtract the max: no overflow
    return e / e.sum()


# --------------------------------------------------------------------------- cases


def _cone(rng, n, d, spread=1.0, centre=3.0):
    direction = rng.standard_normal(d)
    direction /= np.linalg.norm(direction)
    return centre * direction + spread * rng.standard_normal((n, d))


def _geometry_cases():
    rng = np.random.default_rng(201)
    easy = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    lengths = np.array([[4.0, 0.0], [0.0, 1.0]])
    cone = _cone(rng, 300, 16)
    sink = cone.copy()
    sink[0] = -25.0 * cone.mean(axis=0) / np.linalg.norm(cone.mean(axis=0)) + rng.standard_normal(16)
    return [
        Case("three keys in 2-D", (easy,)),
        Case(
            "two orthogonal keys of lengths 4 and 1",
            (lengths,),
            "use each key's direction (divide by its length) before averaging: a long key must not "
            "pull the mean direction its way",
        ),
        Case("300 keys in a cone, d = 16", (cone,)),
        Case(
            "a cone plus one long key pointing the other way",
            (sink,),
            "average the unit vectors, not the raw keys: the long key would dominate a raw mean",
        ),
        Case("isotropic random keys, d = 64", (rng.standard_normal((500, 64)),)),
        Case("keys scaled by 1000", (1000.0 * cone,), "cosines do not depend on the keys' lengths"),
        Case("one key", (np.array([[0.3, -0.4, 1.2]]),), "a single key is its own mean direction"),
    ]


def _attention_cases():
    rng = np.random.default_rng(202)
    d = 16
    keys = rng.standard_normal((40, d))
    q = rng.standard_normal(d)
    return [
        Case(
            "two keys, d = 4",
            (np.array([1.0, 0.0, 0.0, 0.0]), np.array([[2.0, 0, 0, 0], [0.0, 1, 0, 0]])),
            "scores are q.k / sqrt(d) = [1, 0]",
        ),
        Case("40 keys, d = 16", (q, keys)),
        Case("d = 64", (rng.standard_normal(64), rng.standard_normal((100, 64))), "scale by 1 / sqrt(d), d = len(q)"),
        Case(
            "large scores (q.k up to ~5000)",
            (40.0 * q, 40.0 * keys),
            "exp of a large score overflows: subtract the largest score first (softmax is shift invariant)",
        ),
        Case("one key", (q, keys[:1]), "with one key all the weight goes to it"),
        Case(
            "very negative scores",
            (-40.0 * q, 40.0 * keys[:5] + 40.0 * q),
            "exp of very negative scores underflows to 0: subtract the largest score first",
        ),
    ]


# --------------------------------------------------------------------------- wrong versions


def _cos_raw_mean(keys):
    k = np.asarray(keys, float)
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)
    m = k.mean(axis=0)
    return unit @ (m / np.linalg.norm(m))


def _cos_unnormalised_keys(keys):
    k = np.asarray(keys, float)
    m = (k / np.linalg.norm(k, axis=-1, keepdims=True)).mean(axis=0)
    return k @ (m / np.linalg.norm(m))


def _cos_mean_not_unit(keys):
    k = np.asarray(keys, float)
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)
    return unit @ unit.mean(axis=0)


def _cos_columns_normalised(keys):
    k = np.asarray(keys, float)
    unit = k / np.linalg.norm(k, axis=0, keepdims=True)  # each column scaled, not each key
    m = unit.mean(axis=0)
    return unit @ (m / np.linalg.norm(m))


def _cone_raw_mean(keys):
    k = np.asarray(keys, float)
    return float(np.linalg.norm(k.mean(axis=0)) / np.linalg.norm(k, axis=-1).mean())


def _cone_mean_cos_to_mean_key(keys):
    return float(np.mean(_cos_raw_mean(keys)))


def _cone_norm_of_mean_key(keys):
    return float(np.linalg.norm(np.asarray(keys, float).mean(axis=0)))


def _cone_mean_over_coordinates(keys):
    k = np.asarray(keys, float)
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)
    return float(np.linalg.norm(unit.mean(axis=1)))  # averages each key's coordinates instead


def _attention_no_scale(q, keys):
    s = np.asarray(keys, float) @ np.asarray(q, float)
    e = np.exp(s - s.max())
    return e / e.sum()


def _attention_divide_by_d(q, keys):
    q = np.asarray(q, float)
    s = np.asarray(keys, float) @ q / len(q)
    e = np.exp(s - s.max())
    return e / e.sum()


def _attention_sqrt_n(q, keys):
    k = np.asarray(keys, float)
    s = k @ np.asarray(q, float) / np.sqrt(k.shape[0])  # the number of keys, not d
    e = np.exp(s - s.max())
    return e / e.sum()


def _attention_naive_exp(q, keys):
    q = np.asarray(q, float)
    e = np.exp(np.asarray(keys, float) @ q / np.sqrt(len(q)))
    return e / e.sum()


EXERCISES = [
    Exercise(
        name="02.cos_to_mean_direction",
        signature="cos_to_mean_direction(keys) -> ndarray",
        task="For keys of shape (n, d), each key's cosine with the keys' mean direction (the average of "
        "the keys' directions, rescaled to unit length). Only directions count: keys may have very different "
        "lengths (the checks include one about 5 times longer than the rest, of length 25, and all keys a "
        "thousand times larger). n may be 1 (a single key is its own mean direction). Returns shape (n,).",
        reference=cos_to_mean_direction,
        make_cases=_geometry_cases,
        output=ARRAY,
        rtol=1e-6,
        atol=1e-10,
        nudge="A key five times longer than the rest must not get five votes on where the cone points: each key "
        "votes with its direction alone. And a cosine divides a dot product by the lengths of both vectors.",
        hint="Mind the shapes when you divide: an `(n, d)` array divided by `n` lengths of shape `(n,)` is lined up "
        "against the `d` columns, not the rows (an error, or silently wrong when `n == d`). The lengths must be a "
        "column, shape `(n, 1)`.",
        difficulty=2,
        importance=3,
        minutes=6,
        wrong=(
            Wrong(
                "mean of the raw keys as the direction",
                _cos_raw_mean,
                "average the unit vectors, not the raw keys: one long key would drag a raw mean its way",
            ),
            Wrong(
                "keys not normalised",
                _cos_unnormalised_keys,
                "a cosine needs both vectors of length 1: divide each key by its length",
            ),
            Wrong(
                "mean direction not normalised",
                _cos_mean_not_unit,
                "the average of unit vectors is shorter than 1: divide it by its length",
            ),
            Wrong(
                "each column normalised instead of each key",
                _cos_columns_normalised,
                "a key is a row: divide each row by its own length (norm along axis=-1, keepdims=True), "
                "not each column (axis 0)",
            ),
        ),
    ),
    Exercise(
        name="02.cone_tightness",
        signature="cone_tightness(keys) -> float",
        task="How tightly the keys (n, d) bunch around their mean direction: the mean cosine of the keys "
        "with their mean direction. Averaging cos_to_mean_direction works; find a shorter way that computes "
        "no cosine. Only directions count, whatever the keys' lengths; n may be 1. Returns one float.",
        reference=cone_tightness,
        make_cases=_geometry_cases,
        output=FLOAT,
        rtol=1e-6,
        atol=1e-10,
        nudge="The mean of the dot products with one fixed vector is the dot product of the mean with that "
        "vector. Which mean is that here, and how was the mean direction made from it?",
        hint="Your `cos_to_mean_direction` already computes this number on its way to the cosines. Look for it there.",
        difficulty=2,
        importance=3,
        minutes=4,
        wrong=(
            Wrong(
                "raw mean key over the mean length",
                _cone_raw_mean,
                "normalise each key first; long keys must not count more",
            ),
            Wrong(
                "mean cosine with the mean raw key",
                _cone_mean_cos_to_mean_key,
                "the mean direction is the average of the unit keys, not the direction of the mean key",
            ),
            Wrong(
                "length of the mean raw key",
                _cone_norm_of_mean_key,
                "the tightness is a cosine, between 0 and 1: average unit vectors, not raw keys",
            ),
            Wrong(
                "averaged over the coordinates instead of the keys",
                _cone_mean_over_coordinates,
                "average the unit keys over the keys (axis 0), which gives one d-vector, then take its "
                "length; axis 1 averages each key's own coordinates",
            ),
        ),
    ),
    Exercise(
        name="02.attention_weights",
        signature="attention_weights(q, keys) -> ndarray",
        task="The attention weights of one query q (d,) over keys (n, d): softmax of the scores "
        "q.k / sqrt(d), with d = len(q). Scores can be large (the checks use thousands above and below 0), "
        "where exp overflows or loses every weight to underflow: the result must be right whatever they are. "
        "n may be 1. Returns shape (n,), summing to 1.",
        reference=attention_weights,
        make_cases=_attention_cases,
        output=ARRAY,
        rtol=1e-6,
        atol=1e-15,
        nudge="First the scores, one per key, scaled by the square root of d, the length of q. Then the softmax: "
        "adding the same number to every score does not change it, so pick a number that keeps every exp finite.",
        hint="One matrix-vector product (`@`) scores every key at once. Try your softmax on scores in the "
        "thousands, all positive and all negative: `np.exp` overflows to `inf` for one and underflows to `0.0` "
        "for the other, unless your shift prevents both.",
        difficulty=2,
        importance=4,
        minutes=5,
        wrong=(
            Wrong("no 1/sqrt(d) scaling", _attention_no_scale, "the scores are q.k / sqrt(d), with d = len(q)"),
            Wrong("divided by d instead of sqrt(d)", _attention_divide_by_d, "scale by 1 / sqrt(d), not 1 / d"),
            Wrong(
                "sqrt of the number of keys instead of sqrt(d)",
                _attention_sqrt_n,
                "d is the length of q (keys.shape[1]), not the number of keys (keys.shape[0])",
            ),
            Wrong(
                "exp without subtracting the max",
                _attention_naive_exp,
                "exp(5000) is inf in float64: subtract the largest score before exp (the result is the same)",
            ),
        ),
    ),
]
