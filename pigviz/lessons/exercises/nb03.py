"""Notebook 03, centring: the mean MagicPIG subtracts, cosines with centred keys, softmax's
shift invariance."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import ARRAY, Case, Exercise, Wrong

# --------------------------------------------------------------------------- references


def centring_mean(keys, sinks, recent):
    k = np.asarray(keys, dtype=np.float64)
    n = k.shape[0]
    hashed = k[sinks : n - recent]  # not k[sinks:-recent]: that is empty when recent == 0
    return hashed.mean(axis=0)


def cos_centred(q, keys, mu):
    q = np.asarray(q, dtype=np.float64)
    centred = np.asarray(keys, dtype=np.float64) - np.asarray(mu, dtype=np.float64)  # the query stays as is
    return centred @ q / (np.linalg.norm(centred, axis=-1) * np.linalg.norm(q))


def softmax(scores):
    s = np.asarray(scores, dtype=np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))  # any shift gives the same weights; the max avoids overflow
    return e / e.sum(axis=-1, keepdims=True)


# --------------------------------------------------------------------------- cases


def _keys_with_sink(rng, n, d):
    direction = rng.standard_normal(d)
    keys = 3.0 * direction / np.linalg.norm(direction) + rng.standard_normal((n, d))
    keys[0] = 20.0 * rng.standard_normal(d)  # a long sink key
    keys[-3:] += 5.0  # recent keys that differ from the rest
    return keys


def _mean_cases():
    rng = np.random.default_rng(301)
    small = np.arange(12, dtype=np.float64).reshape(6, 2) ** 2
    keys = _keys_with_sink(rng, 200, 8)
    return [
        Case(
            "6 keys, sinks=1, recent=2",
            (small, 1, 2),
            "average rows 1..3: skip the first `sinks` and the last `recent`",
        ),
        Case("200 keys with a sink, sinks=4, recent=64", (keys, 4, 64)),
        Case(
            "recent = 0",
            (keys, 4, 0),
            "with recent = 0 every key after the sinks is hashed; keys[sinks:-0] is empty, use keys[sinks:n - recent]",
        ),
        Case("sinks = 0", (keys, 0, 16), "with sinks = 0 the first key is hashed too"),
        Case("sinks = 0 and recent = 0", (keys, 0, 0), "nothing is read exactly: the mean of all keys"),
        Case("one hashed key", (small, 2, 3), "a single hashed key is its own mean"),
    ]


def _cos_cases():
    rng = np.random.default_rng(302)
    d = 16
    keys = _keys_with_sink(rng, 50, d)
    mu = keys[4:-8].mean(axis=0)
    q = -keys[10:].mean(axis=0) + rng.standard_normal(d)
    return [
        Case(
            "2-D, |q| = 2, mu = (1, 1)",
            (np.array([0.0, 2.0]), np.array([[1.0, 2.0], [2.0, 0.0], [0.0, -3.0]]), np.array([1.0, 1.0])),
            "centre the keys (k - mu), then take the cosine with q",
        ),
        Case("50 keys in a cone, d = 16", (q, keys, mu)),
        Case("mu = 0 (nothing to centre)", (q, keys, np.zeros(d)), "with mu = 0 this is the plain cosine"),
        Case(
            "a query far from the origin",
            (100.0 * q + 50.0 * mu, keys, mu),
            "only the keys are centred: the query is hashed as it is",
        ),
        Case("keys and mean scaled by 1000", (q, 1000.0 * keys, 1000.0 * mu), "cosines ignore length"),
    ]


def _softmax_cases():
    rng = np.random.default_rng(303)
    s = rng.standard_normal(20)
    rows = rng.standard_normal((4, 7))
    return [
        Case("three scores", (np.array([1.0, 2.0, 3.0]),)),
        Case("20 scores", (s,)),
        Case(
            "large scores (around 1000)",
            (s + 1000.0,),
            "exp(1000) overflows: subtract the largest score first; a shift changes nothing else",
        ),
        Case(
            "scores 1000 apart",
            (np.array([1000.0, 0.0, -1000.0]),),
            "subtract the maximum (not the mean): exp(score - max) <= 1 never overflows",
        ),
        Case("very negative scores", (s - 2000.0,), "exp(-2000) underflows to 0: subtract the largest score first"),
        Case("a masked key (-inf)", (np.array([0.5, -np.inf, 1.5]),), "exp(-inf) = 0: a masked key gets weight 0"),
        Case("one score", (np.array([7.0]),)),
        Case(
            "a (4, 7) batch: softmax over the last axis",
            (rows,),
            "each row is one query's scores: normalise along the last axis, row by row",
        ),
        Case(
            "a (4, 7) batch, each row shifted by its own constant (1000, -1000, 0, 500)",
            (rows + np.array([1000.0, -1000.0, 0.0, 500.0])[:, None],),
            "a constant added to one row changes none of its weights, whatever the other rows get: "
            "shift each row by its own max",
        ),
        Case(
            "a batch of two rows 1000 apart",
            (np.array([[0.0, 1.0, 2.0], [-1000.0, -999.0, -998.0]]),),
            "subtract each row's own max, not the batch's: shifted by the batch's max, every exp of the "
            "second row underflows to 0 and that row becomes 0 / 0 = NaN",
        ),
    ]


# --------------------------------------------------------------------------- wrong versions


def _mean_negative_slice(keys, sinks, recent):
    return np.asarray(keys, float)[sinks:-recent].mean(axis=0)


def _mean_all_keys(keys, sinks, recent):
    return np.asarray(keys, float).mean(axis=0)


def _mean_skips_sinks_only(keys, sinks, recent):
    return np.asarray(keys, float)[sinks:].mean(axis=0)


def _mean_off_by_one(keys, sinks, recent):
    k = np.asarray(keys, float)
    return k[sinks + 1 : len(k) - recent].mean(axis=0)  # skips one key too many


def _mean_wrong_axis(keys, sinks, recent):
    k = np.asarray(keys, float)
    return k[sinks : len(k) - recent].mean(axis=1)  # each key's coordinates averaged


def _cos_one_norm_for_all(q, keys, mu):
    q = np.asarray(q, float)
    centred = np.asarray(keys, float) - np.asarray(mu, float)
    return centred @ q / (np.linalg.norm(centred) * np.linalg.norm(q))  # the whole matrix's norm


def _cos_centres_query(q, keys, mu):
    return cos_centred(np.asarray(q, float) - np.asarray(mu, float), keys, mu)


def _cos_not_centred(q, keys, mu):
    return cos_centred(q, keys, np.zeros_like(np.asarray(mu, float)))


def _cos_raw_key_length(q, keys, mu):
    q, k = np.asarray(q, float), np.asarray(keys, float)
    return (k - np.asarray(mu, float)) @ q / (np.linalg.norm(k, axis=-1) * np.linalg.norm(q))  # |k_i|, not |k_i - mu|


def _cos_without_q_length(q, keys, mu):
    centred = np.asarray(keys, float) - np.asarray(mu, float)
    return centred @ np.asarray(q, float) / np.linalg.norm(centred, axis=-1)


def _cos_dot_only(q, keys, mu):
    return (np.asarray(keys, float) - np.asarray(mu, float)) @ np.asarray(q, float)


def _softmax_naive(scores):
    e = np.exp(np.asarray(scores, float))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_minus_mean(scores):
    s = np.asarray(scores, float)
    e = np.exp(s - s.mean(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_batch_max(scores):
    s = np.asarray(scores, float)
    e = np.exp(s - s.max())  # the batch's max, not each row's
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_axis0(scores):
    s = np.asarray(scores, float)
    e = np.exp(s - s.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def _softmax_whole_array(scores):
    s = np.asarray(scores, float)
    e = np.exp(s - s.max())
    return e / e.sum()


EXERCISES = [
    Exercise(
        name="03.centring_mean",
        signature="centring_mean(keys, sinks, recent) -> ndarray",
        task="The mean key MagicPIG subtracts: the mean over the keys it hashes, i.e. all rows of "
        "keys (n, d) except the first `sinks` and the last `recent`. Either may be 0 (then nothing "
        "is left out at that end), and a single key may be left to hash. Returns shape (d,).",
        reference=centring_mean,
        make_cases=_mean_cases,
        output=ARRAY,
        rtol=1e-6,
        atol=1e-12,
        nudge="Picture the rows in order: the first `sinks` and the last `recent` are read exactly, the "
        "ones in between are hashed. Where does the hashed stretch end when nothing is read at the end?",
        hint="Before you write the slice, try `np.arange(6)[1:-2]` and `np.arange(6)[1:-0]` in a cell: a "
        "negative end counts from the back, and one of the two is not what you want.",
        difficulty=2,
        importance=3,
        minutes=5,
        wrong=(
            Wrong("keys[sinks:-recent]", _mean_negative_slice, "keys[sinks:-0] is empty: write the end as n - recent"),
            Wrong(
                "mean of all keys",
                _mean_all_keys,
                "you averaged every key: leave out the exact set, the first `sinks` and the last `recent` "
                "rows (MagicPIG reads them exactly, and odd ones such as the sink could pull the mean off "
                "the hashed cloud)",
            ),
            Wrong(
                "leaves out the sinks only",
                _mean_skips_sinks_only,
                "the last `recent` keys are read exactly too: leave them out",
            ),
            Wrong(
                "one key too many left out (keys[sinks + 1:])",
                _mean_off_by_one,
                "rows count from 0: the first hashed key is keys[sinks], so the slice starts at sinks",
            ),
            Wrong(
                "mean over axis 1",
                _mean_wrong_axis,
                "average over the keys (axis 0), which gives one d-vector; axis 1 averages each key's own coordinates",
            ),
        ),
    ),
    Exercise(
        name="03.cos_centred",
        signature="cos_centred(q, keys, mu) -> ndarray",
        task="What the hash sees: the cosine between the query q (d,), as it is (never centred), and "
        "each centred key k_i - mu, for keys (n, d) and the mean mu (d,), which may be zero. Each key "
        "has its own length |k_i - mu|. Returns shape (n,).",
        reference=cos_centred,
        make_cases=_cos_cases,
        output=ARRAY,
        rtol=1e-6,
        atol=1e-10,
        nudge="Only the keys move; the query is hashed as it is. A cosine divides by two lengths, and every "
        "centred key has its own.",
        hint="Your `cos_to_mean_direction` of notebook 02 already turned dot products into one cosine per row; "
        "here other vectors go in.",
        difficulty=2,
        importance=4,
        minutes=5,
        wrong=(
            Wrong(
                "centres the query too",
                _cos_centres_query,
                "only the keys are centred; the query is hashed as it is (a shift of q would change its scores)",
            ),
            Wrong("keys not centred", _cos_not_centred, "subtract mu from every key first"),
            Wrong(
                "dot product without the lengths",
                _cos_dot_only,
                "a cosine divides by both lengths: |k - mu| per key and |q|",
            ),
            Wrong(
                "divides by the raw key's length",
                _cos_raw_key_length,
                "the numerator uses the centred key, so the length must be the centred key's too: |k_i - mu|, "
                "not |k_i|",
            ),
            Wrong(
                "forgets the query's length",
                _cos_without_q_length,
                "a cosine divides by both lengths: |q| as well as |k_i - mu|",
            ),
            Wrong(
                "one norm for all keys",
                _cos_one_norm_for_all,
                "divide by each key's own length |k_i - mu| (norm along axis=-1), not by the norm of the "
                "whole matrix of centred keys",
            ),
        ),
    ),
    Exercise(
        name="03.softmax",
        signature="softmax(scores) -> ndarray",
        task="Softmax over the last axis of `scores`, a batch of rows (m, n), one row per query (or one "
        "row (n,)), each row normalised on its own. Centring shifted each row by its own constant, and "
        "softmax ignores any constant added to a row: use that freedom row by row, so that the result is "
        "exact for any scores, even rows that sit 1000 apart from each other. -inf marks a masked key "
        "(weight 0). Returns the shape of `scores`.",
        reference=softmax,
        make_cases=_softmax_cases,
        output=ARRAY,
        rtol=1e-6,
        atol=1e-15,
        nudge="Centring moved each query's scores by its own amount, one constant per row, and the weights "
        "did not change. If you may add any constant to a row, which one, chosen row by row, keeps every "
        "exp at most 1?",
        hint="Your `attention_weights` of notebook 02 did this for one row. In a batch the shift is one number "
        "per row: print the shape of what you subtract, and check that it broadcasts against `scores` row by row.",
        difficulty=2,
        importance=4,
        minutes=5,
        wrong=(
            Wrong("no shift before exp", _softmax_naive, "exp(1000) is inf: subtract each row's maximum first"),
            Wrong(
                "shifts by the mean",
                _softmax_minus_mean,
                "the mean still leaves scores 1000 above it: shift by the maximum",
            ),
            Wrong(
                "normalises the whole array at once",
                _softmax_whole_array,
                "each row is one query: take its max and its sum row by row, not over the whole batch",
            ),
            Wrong(
                "subtracts the batch's max",
                _softmax_batch_max,
                "subtract each row's own max, not the batch's: one max per row, shaped to broadcast against the row",
            ),
            Wrong(
                "softmax down the columns (axis 0)",
                _softmax_axis0,
                "each row is one query: normalise along the last axis (axis=-1), not down the columns (axis 0)",
            ),
        ),
    ),
]
