"""Softmax attention, written so that it never overflows.

``softmax_attention`` (numpy) and ``softmax_attention_torch`` compute, for queries ``q``
(..., m, d) and keys/values ``k`` (..., n, d), ``v`` (..., n, dv):

    weights = softmax(q @ k.T * scale)      scale defaults to 1/sqrt(d)
    output  = weights @ v

The largest score of each row is subtracted before exponentiating (softmax ignores a shift
common to a row), so scores in the thousands are fine.
"""
from __future__ import annotations

import math

import numpy as np

from pigviz._validate import check_array

__all__ = ["stable_softmax", "softmax_attention", "softmax_attention_torch"]


def stable_softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis`` with the row maximum subtracted first. Rows of -inf stay
    finite: a row with no finite score gets weights of 0 rather than NaN."""
    scores = np.asarray(scores, dtype=np.float64)
    top = np.max(scores, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(scores - top)
    total = e.sum(axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def _check_qkv_shapes(q, k, v):
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last (head) dimension, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must hold the same number of tokens, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if k.shape[-2] == 0:
        raise ValueError("k must hold at least one key")


def softmax_attention(q, k, v, scale: float | None = None):
    """Return ``(output, weights)`` of softmax attention in float64 numpy.

    A single query may be passed as a 1-D vector; the output then drops that axis too.
    """
    q = check_array("q", q, ndim=None)
    k = check_array("k", k, ndim=None)
    v = check_array("v", v, ndim=None)
    single = q.ndim == 1
    if single:
        q = q[None, :]
    if k.ndim < 2 or v.ndim < 2:
        raise ValueError(f"k and v must be at least 2-D (tokens, dim), got k {k.shape} and v {v.shape}")
    _check_qkv_shapes(q, k, v)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    weights = stable_softmax(scores, axis=-1)
    out = weights @ v
    if single:
        return out[0], weights[0]
    return out, weights


def softmax_attention_torch(q, k, v, scale: float | None = None, mask=None):
    """Torch version: computes in float32 (or float64 if given), returns in the input dtype.

    ``mask`` is a boolean tensor broadcastable to the scores, True where a key is visible.
    """
    import torch

    _check_qkv_shapes(q, k, v)
    out_dtype = q.dtype
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    qf, kf, vf = q.to(work), k.to(work), v.to(work)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (qf @ kf.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)  # fully masked rows -> zero weights
    return (weights @ vf).to(out_dtype), weights.to(out_dtype)
