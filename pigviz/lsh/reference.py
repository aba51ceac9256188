"""MagicPIG for one query head, end to end, in one screen of numpy: the teaching tier.

:func:`magicpig_reference` is the estimator of :func:`pigviz.lsh.magicpig.attend` written
as the paper's algorithm, with no tables, buffers or batching: it hashes every key on each
call instead of keeping an index. Same keys read, same output (tests/lsh/test_reference.py
holds it to the engine on every shipped SmolLM2 head). Use the engine to compute; read this.
"""

from __future__ import annotations

import numpy as np

from pigviz._util.validate import check_array, check_int
from pigviz.lsh.simhash import MAX_K, MAX_L, log_inclusion_probability

__all__ = ["magicpig_reference", "simhash_codes", "LOG_U_FLOOR"]

# The engine's floor for log u (pigviz.lsh.magicpig): reached only by a key that collided
# although its angle to the query is (numerically) 180 degrees.
LOG_U_FLOOR = -1.0e4


def simhash_codes(x, planes, K: int, L: int) -> np.ndarray:
    """Bucket of each row of ``x`` in each of the L tables. A vector exactly on a plane gets
    bit 0, as in the engine.

    Parameters
    ----------
    x : array-like, (..., d)
        The vectors to hash.
    planes : array-like, (d, K*L)
        Table l uses columns l*K .. l*K+K-1; bit j of a bucket id is column l*K+j.
    K, L : int
        Bits per table, tables.

    Returns
    -------
    np.ndarray, int64 (..., L)
        The bucket ids.
    """
    bits = (x @ planes).reshape(*np.shape(x)[:-1], L, K) > 0
    return bits @ (np.int64(1) << np.arange(K, dtype=np.int64))


def magicpig_reference(q, keys, values, planes, K, L, sinks, recent, min_hits=2, budget=None):
    """MagicPIG's sampled attention for one query head at one decode step.

    1. Exact set E: the first ``sinks`` and last ``recent`` tokens; the rest can be sampled.
    2. Centre: subtract from every key the mean of the sampleable keys.
    3. Hash the centred keys and the (uncentred) query with the same planes: L buckets each.
    4. Count, per key, the tables where it shares the query's bucket; the sample S is the
       keys outside E with at least ``min_hits`` hits (a ``budget`` may raise min_hits, as
       :class:`~pigviz.lsh.estimators.MagicPIGEstimator` does).
    5. Inclusion probability of each sampled key, from its angle to the query:
       p = 1 - angle(q, k - mean) / pi,  u = P(Binomial(L, p^K) >= min_hits).
    6. One softmax over q·k/sqrt(d) on E and q·k/sqrt(d) - log u on S; mix their values.

    Parameters
    ----------
    q : array-like, (d,)
        The query (every array: any array-like of reals, computed in float64).
    keys : array-like, (n, d)
        The keys it attends to, post-RoPE, oldest first.
    values : array-like, (n, dv)
        Their values.
    planes : array-like, (d, K*L)
        The hyperplanes: table l uses columns l*K .. l*K+K-1 (the engine's ``LSHIndex.planes``).
    K : int in [1, 62]
        Bits per table.
    L : int in [1, 100000]
        Tables.
    sinks, recent : int >= 0
        First and last tokens, always read exactly; 1 <= sinks + recent <= n - 1.
    min_hits : int in [1, L]
        Tables a key must share with the query to be sampled.
    budget : None or int >= sinks + recent
        The most distinct keys to read: ``min_hits`` rises until the read fits. None: what the tables sample.

    Returns
    -------
    output : np.ndarray, float64 (dv,)
        The estimate of the attention output.
    read : np.ndarray, int64
        Sorted positions of every key whose score and value enter the output (E and S): the protocol's ``read``.

    Raises
    ------
    ValueError, TypeError
        An argument of the wrong shape, type or range, or a ``budget`` that even min_hits = L exceeds.
    """
    q, keys, values, planes, K, L, sinks, recent, min_hits, budget = _checked(
        q, keys, values, planes, K, L, sinks, recent, min_hits, budget
    )
    n, d = keys.shape
    # 1. Every query reads its sinks and its window, so they are never left to chance.
    exact = np.r_[0:sinks, n - recent : n]
    # 2. Real keys sit in a narrow cone: raw, nearly all would share a few buckets. The
    #    mean is over the sampleable keys only; the large sink key would drag it off the
    #    cloud. Shifting every key by one vector moves every score by q·mean: free for softmax.
    centred = keys - keys[sinks : n - recent].mean(axis=0)
    # 3. The query is not centred: its score is q·(k - mean) up to a constant, so the angle
    #    that matters, and that shared planes measure, is the one between q and k - mean.
    hits = (simhash_codes(centred, planes, K, L) == simhash_codes(q, planes, K, L)).sum(axis=1)
    # 4. The exact set is read anyway; sampling it too would count it twice.
    hits[exact] = 0
    if budget is not None:
        # Keys with at least t hits, for every t at once: a histogram summed from the top.
        at_least = np.cumsum(np.bincount(hits, minlength=L + 1)[::-1])[::-1]
        fits = (exact.size + at_least <= budget) & (np.arange(L + 1) >= min_hits)
        if not fits.any():
            raise ValueError(f"budget={budget} is too small: even min_hits={L} reads {exact.size + at_least[L]} keys")
        min_hits = int(np.argmax(fits))
    sampled = np.flatnonzero(hits >= min_hits)
    # 5. A random plane splits two directions at angle theta with chance theta/pi; a key is
    #    sampled when at least min_hits of L tables agree on all K bits. 1/u is its weight.
    c = centred[sampled]
    norms = np.linalg.norm(c, axis=1) * np.linalg.norm(q)
    cos = np.divide(c @ q, norms, out=np.zeros(sampled.size), where=norms > 0)
    p = 1.0 - np.arccos(np.clip(cos, -1.0, 1.0)) / np.pi
    log_u = np.maximum(log_inclusion_probability(p, K, L, min_hits), LOG_U_FLOOR)
    # 6. Self-normalised importance sampling: the exact keys enter with weight 1, each
    #    sampled key with 1/u, and one normaliser makes the unknown total cancel.
    read = np.r_[exact, sampled]
    scores = keys[read] @ q / np.sqrt(d) - np.r_[np.zeros(exact.size), log_u]
    weights = np.exp(scores - scores.max())
    return weights @ values[read] / weights.sum(), np.sort(read)


def _checked(q, keys, values, planes, K, L, sinks, recent, min_hits, budget):
    """The arguments as float64 arrays and ints, or a ValueError/TypeError naming the bad one."""
    keys = check_array("keys", keys, ndim=2, min_len=2)
    n, d = keys.shape
    q = check_array("q", q, ndim=1)
    if q.shape != (d,):
        raise ValueError(f"q must have shape (d,) = ({d},) like a key, got {q.shape}")
    values = check_array("values", values, ndim=2)
    if values.shape[0] != n:
        raise ValueError(f"values must have shape (n, dv) with n = {n} like keys, got {values.shape}")
    K = check_int("K", K, 1, MAX_K)
    L = check_int("L", L, 1, MAX_L)
    planes = check_array("planes", planes, ndim=2)
    if planes.shape != (d, K * L):
        raise ValueError(f"planes must have shape (d, K*L) = ({d}, {K * L}), got {planes.shape}")
    sinks = check_int("sinks", sinks, 0)
    recent = check_int("recent", recent, 0)
    if not 1 <= sinks + recent <= n - 1:
        raise ValueError(
            f"sinks + recent must be in [1, n - 1] = [1, {n - 1}]: the exact set anchors the estimate and "
            f"some keys must be left to sample; got sinks={sinks}, recent={recent}"
        )
    min_hits = check_int("min_hits", min_hits, 1, L)
    if budget is not None:
        budget = check_int("budget", budget, 1)
        if budget < sinks + recent:
            raise ValueError(f"budget must be at least sinks + recent = {sinks + recent} (the exact set), got {budget}")
    return q, keys, values, planes, K, L, sinks, recent, min_hits, budget
