"""The capstone's estimators (notebook 08), in the protocol of :mod:`pigviz.attention.protocol`.

    estimator(q, keys, values, budget) -> (output, read)

* :func:`uniform_sample`: the warm-up. The sinks and the recent window read exactly, the rest
  of the budget drawn uniformly without replacement from the keys in between, each draw
  counting (keys left) / (keys drawn) times in the softmax's sum (:func:`corrected_mix`);
  ``correct=False`` is the ablation without that factor (:func:`no_correction`).
* :func:`top_plus_sample`: the worked example of the open exercise. The top half of the budget
  by score read exactly (chosen by the index, every score, as TopK chooses), the other half a
  corrected uniform sample of the rest. Every key whose score or value enters its output is in
  ``read``, as the protocol defines a read.
* :func:`topk_plus_tail`: TopK's keys plus the weight TopK drops, given to the dropped keys'
  mean value. Its output uses every key's score and a running sum of every value, so by the
  protocol's definition it reads every key, yet its ``read`` names only TopK's keys (so that
  :func:`pigviz.attention.protocol.call` lets it run at TopK's budget): compare it with TopK in
  bytes, never in keys read.

Draws are seeded by ``n`` (the row's length), so every run draws the same keys. The notebook
writes the warm-up's two estimators in view, on the learner's own functions; these are the
library's copies that ``pigviz verify`` re-derives the notebook's numbers with, held equal to
them by the tests.
"""

from __future__ import annotations

import numpy as np

from pigviz._util.validate import check_array, check_int
from pigviz.attention import protocol

__all__ = [
    "SINKS",
    "RECENT",
    "corrected_mix",
    "exact_window",
    "uniform_sample",
    "no_correction",
    "top_plus_sample",
    "topk_plus_tail",
]

SINKS = 4  # the first keys, read exactly (the attention sinks)
RECENT = 64  # the last keys, read exactly (the recent window)


def _row(q, keys, values):
    q = check_array("q", q, ndim=1)
    keys = check_array("keys", keys, ndim=2)
    values = check_array("values", values, ndim=2)
    if keys.shape[1] != q.shape[0] or len(values) != len(keys):
        raise ValueError(f"keys must be (n, {q.shape[0]}) and values (n, dv), got {keys.shape} and {values.shape}")
    return q, keys, values


def _indices(name, idx, n):
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"{name} must hold indices in 0 .. {n - 1}, got {idx.min()} .. {idx.max()}")
    return idx


def corrected_mix(q, keys, values, exact, sampled, *, correct: bool = True) -> np.ndarray:
    """Attention (dv,) over the keys ``exact`` plus ``sampled``, a uniform draw from the
    ``n - len(exact)`` others: each drawn key's exp(score) counts (n - len(exact)) /
    len(sampled) times (its log is added to its score); one softmax over both sets.
    ``correct=False``: the plain softmax over the same keys."""
    q, keys, values = _row(q, keys, values)
    exact, sampled = _indices("exact", exact, len(keys)), _indices("sampled", sampled, len(keys))
    if exact.size + sampled.size == 0:
        raise ValueError("exact and sampled are both empty: there is nothing to average")
    scores = keys @ q / np.sqrt(len(q))
    shift = np.log((len(keys) - exact.size) / sampled.size) if (correct and sampled.size) else 0.0
    logits = np.concatenate([scores[exact], scores[sampled] + shift])
    w = np.exp(logits - logits.max())
    return w @ np.concatenate([values[exact], values[sampled]]) / w.sum()


def exact_window(n: int, budget: int, sinks: int = SINKS, recent: int = RECENT) -> np.ndarray:
    """The keys read exactly: the first ``sinks`` and the last ``recent`` of ``n``, cut to
    the budget (sinks first)."""
    n, budget = check_int("n", n, 1), check_int("budget", budget, 1)
    sinks = min(check_int("sinks", sinks, 0), budget, n)
    recent = min(check_int("recent", recent, 0), budget - sinks, n - sinks)
    return np.r_[np.arange(sinks), np.arange(n - recent, n)].astype(np.int64)


def _draw(n, exclude, size):
    rest = np.setdiff1d(np.arange(n), exclude)
    return np.random.default_rng(n).choice(rest, size=min(size, len(rest)), replace=False)


def uniform_sample(q, keys, values, budget, sinks: int = SINKS, recent: int = RECENT, *, correct: bool = True):
    """The warm-up: the sinks and the recent window exactly, the rest of the budget drawn
    uniformly from the keys in between, corrected by (keys left) / (keys drawn)."""
    n = len(keys)
    exact = exact_window(n, budget, sinks, recent)
    drawn = _draw(n, exact, budget - exact.size)
    return corrected_mix(q, keys, values, exact, drawn, correct=correct), np.r_[exact, drawn]


uniform_sample.bytes_read = protocol.costs_like("streaming")  # it reads its keys and values, nothing else


def no_correction(q, keys, values, budget):
    """The warm-up's keys (the same draws) without the (keys left) / (keys drawn) factor."""
    return uniform_sample(q, keys, values, budget, correct=False)


no_correction.bytes_read = protocol.costs_like("streaming")


def top_plus_sample(q, keys, values, budget):
    """The worked example: the top half of the budget by score exactly, the other half a
    uniform sample of the rest, corrected by (keys left) / (keys drawn)."""
    scores = keys @ q / np.sqrt(len(q))  # the index: every score, as TopK computes them
    n, m = len(keys), min(budget // 2, len(keys))
    top = np.argpartition(scores, n - m)[n - m :]  # the m highest scores
    drawn = _draw(n, top, budget - m)
    return corrected_mix(q, keys, values, top, drawn), np.r_[top, drawn]


top_plus_sample.bytes_read = protocol.costs_like("topk")  # every key scored, the values of the keys read


def topk_plus_tail(q, keys, values, budget):
    """TopK, plus the weight TopK drops given to the mean value of the keys it drops. The
    output uses every score and a running sum of every value; ``read`` names only TopK's keys
    (the protocol counts every key: compare it with TopK in bytes)."""
    scores = keys @ q / np.sqrt(len(q))
    n, m = len(keys), min(budget, len(keys))
    top = np.argpartition(scores, n - m)[n - m :]
    w = np.exp(scores - scores.max())
    tail_weight = w.sum() - w[top].sum()  # what TopK leaves out of the softmax's sum
    tail_mean = (values.sum(axis=0) - values[top].sum(axis=0)) / max(n - m, 1)  # from a running sum
    return (w[top] @ values[top] + tail_weight * tail_mean) / w.sum(), top


def _topk_plus_tail_bytes(n, d, dv, keys_read):
    """TopK's bytes (every key scored, the kept values read) plus the running sum, one vector."""
    return protocol.costs_like("topk")(n, d, dv, keys_read) + 2 * dv


topk_plus_tail.bytes_read = _topk_plus_tail_bytes
