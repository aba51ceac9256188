"""Softmax attention, written so that it never overflows, and the decode-time baselines
that MagicPIG is compared with.

``softmax_attention`` (numpy) and ``softmax_attention_torch`` compute, for queries ``q``
(..., m, d) and keys/values ``k`` (..., n, d), ``v`` (..., n, dv):

    weights = softmax(q @ k.T * scale)      scale defaults to 1/sqrt(d)
    output  = weights @ v

The largest score of each row is subtracted before exponentiating (softmax ignores a shift
common to a row), so scores in the thousands are fine.

Decode-step baselines (torch, any device). Each takes one query per head and one layer's
cache, ``q`` (H, d), ``k`` (Hkv, n, d), ``v`` (Hkv, n, dv), and returns ``(output, stats)``
with ``output`` (H, dv) in ``q``'s dtype, ``stats["budget"]`` the mean fraction of the n
keys a head reads and ``stats["read_mask"]`` (H, n) which ones. Grouped-query attention:
query head ``h`` reads KV head ``h // (H // Hkv)``; the cache is viewed per group, never
copied per query head. Scores are computed in float32 (float64 if given).

``budget`` arguments are the fraction of the n keys read, m = max(1, round(budget·n)),
counting DISTINCT keys. No exact set is forced into TopK, the oracle sampler or the hybrid:
if the sink deserves a place it wins one on its score. Quest, as its authors run it, always
reads the page holding the current token and counts it in the budget. The oracles ("may see every
score") compute all n scores to choose their keys; their budget counts the keys whose
values enter the output, which is what a real index would have to fetch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only; torch itself loads lazily
    import torch

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_array, check_float, check_int

__all__ = [
    "stable_softmax",
    "softmax_attention",
    "softmax_attention_torch",
    "dense_attention",
    "topk_attention",
    "oracle_sampling_attention",
    "hybrid_attention",
    "streaming_attention",
    "quest_attention",
    "quest_rank_all_attention",
]


def stable_softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis`` with the row maximum subtracted first. Rows of -inf stay
    finite: a row with no finite score gets weights of 0 rather than NaN.

    Parameters
    ----------
    scores : array-like of float, any shape
        The scores (read as float64); -inf for a key that gets no weight.
    axis : int
        The axis along which the weights sum to 1.

    Returns
    -------
    numpy.ndarray, float64, the shape of scores
        The weights: each row sums to 1, or is all 0 where no score is finite.
    """
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
    """Softmax attention in float64 numpy: softmax(q @ k.T * scale) @ v.

    A single query may be passed as a 1-D vector; the output then drops that axis too.

    Parameters
    ----------
    q : array-like of float, (..., m, d) or (d,)
        The queries.
    k, v : array-like of float, (..., n, d) and (..., n, dv), n >= 1
        The keys and values; leading axes broadcast with ``q``'s.
    scale : float, optional
        Multiplies the scores; default 1 / sqrt(d).

    Returns
    -------
    output : numpy.ndarray, float64, (..., m, dv), or (dv,) for a 1-D q
        The attention output of each query.
    weights : numpy.ndarray, float64, (..., m, n), or (n,) for a 1-D q
        The softmax weights.

    Raises
    ------
    TypeError
        An argument that is not an array of numbers.
    ValueError
        A NaN or inf in ``q``, ``k`` or ``v``; ``k`` or ``v`` not at least 2-D; ``q`` and ``k``
        with different last dimensions, or ``k`` and ``v`` with different token counts; no key.
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
    """Torch version of :func:`softmax_attention`: computes in float32 (or float64 if given),
    returns in the input dtype. ``q``, ``k`` and ``v`` must be floating-point torch tensors
    (numpy arrays go to :func:`softmax_attention`).

    Parameters
    ----------
    q : torch.Tensor, floating point, (..., m, d) or (d,)
        The queries.
    k, v : torch.Tensor, floating point, (..., n, d) and (..., n, dv), n >= 1
        The keys and values.
    scale : float, optional
        Multiplies the scores; default 1 / sqrt(d).
    mask : torch.Tensor, bool, optional
        Broadcastable to the scores (..., m, n): True where a key is visible. A row with no
        visible key gets weights of 0 (and an output of 0).

    Returns
    -------
    output : torch.Tensor, (..., m, dv), q's dtype
        The attention output of each query.
    weights : torch.Tensor, (..., m, n), q's dtype
        The softmax weights.

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` not a floating-point ``torch.Tensor``, or ``mask`` not a boolean one.
    ValueError
        ``q`` not at least 1-D or ``k``, ``v`` not at least 2-D; ``q`` and ``k`` with different
        last dimensions, or ``k`` and ``v`` with different token counts; no key.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(
                f"{name} must be a torch.Tensor (use softmax_attention for numpy arrays), got {type(t).__name__}"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if q.ndim < 1 or k.ndim < 2 or v.ndim < 2:
        raise ValueError(
            f"q must be at least 1-D and k, v at least 2-D (tokens, dim), "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if mask is not None and not (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool):
        raise TypeError(
            f"mask must be a boolean torch.Tensor, got {type(mask).__name__}"
            f"{' of dtype ' + str(mask.dtype) if isinstance(mask, torch.Tensor) else ''}"
        )
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


# --------------------------------------------------------------------------- decode baselines


def check_decode_shapes(q, k, v) -> tuple[int, int, int, int]:
    """Validate one decode step's tensors (every decode baseline checks its arguments here).

    Parameters
    ----------
    q : torch.Tensor, floating point, (H, d)
        One query per head.
    k, v : torch.Tensor, floating point, (Hkv, n, d) and (Hkv, n, dv)
        One layer's cache, on ``q``'s device; n >= 1 and H a multiple of Hkv.

    Returns
    -------
    H, Hkv, n, d : int
        Query heads, KV heads, tokens and head dimension.

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` not a floating-point ``torch.Tensor``.
    ValueError
        Shapes that do not match each other, tensors on different devices, no head or no key.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if q.ndim != 2:
        raise ValueError(f"q must have shape (heads, d), got {tuple(q.shape)}")
    if k.ndim != 3 or v.ndim != 3:
        raise ValueError(f"k and v must have shape (kv_heads, n, d), got k {tuple(k.shape)} and v {tuple(v.shape)}")
    H, d = q.shape
    Hkv, n, dk = k.shape
    if dk != d:
        raise ValueError(f"q and k must share the head dimension d, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if v.shape[:2] != k.shape[:2]:
        raise ValueError(f"k and v must have the same kv_heads and n, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if n < 1 or Hkv < 1 or H < 1:
        raise ValueError(f"need at least one head and one key, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if H % Hkv:
        raise ValueError(f"the number of query heads H={H} must be a multiple of the KV heads Hkv={Hkv}")
    if q.device != k.device or v.device != k.device:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    return H, Hkv, n, d


def _work_dtype(t):
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _grouped_scores(q, k):
    """Scaled scores (H, n): each group of H/Hkv query heads against its own KV head."""
    H, d = q.shape
    Hkv = k.shape[0]
    work = _work_dtype(q)
    qg = q.to(work).view(Hkv, H // Hkv, d)
    return (qg @ k.to(work).transpose(1, 2)).reshape(H, -1) / math.sqrt(d)


def _grouped_mix(weights, v):
    """Weighted sum of values (H, dv) for weights (H, n), one KV head per group."""
    H, n = weights.shape
    Hkv = v.shape[0]
    return (weights.view(Hkv, H // Hkv, n) @ v.to(weights.dtype)).reshape(H, -1)


def _num_keys(budget, n: int) -> int:
    budget = check_float("budget", budget, 0.0, 1.0, lo_open=True)
    return min(n, max(1, round(budget * n)))


def _finish(out, q, keys_read, n: int, read_mask=None, **extra):
    """``(output in q's dtype, stats)``. ``read_mask`` (H, n) bool, the keys each head read,
    is kept as ``stats["read_mask"]`` (on the keys' device): what the estimator protocol's
    wrappers (:mod:`pigviz.attention.protocol`) return as the indices read."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    keys_read = keys_read.to("cpu", torch.int64)
    stats = {"budget": float(keys_read.double().mean()) / n, "keys_read": keys_read, "n": n}
    if read_mask is not None:
        stats["read_mask"] = read_mask
    stats.update(extra)
    return out.to(q.dtype), stats


def _masked_softmax(scores, keep):
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
    return torch.nan_to_num(weights, nan=0.0)


def dense_attention(q, k, v):
    """Read every key: the reference every approximation is measured against.

    Parameters
    ----------
    q : torch.Tensor, floating point, (H, d)
        One query per head.
    k, v : torch.Tensor, floating point, (Hkv, n, d) and (Hkv, n, dv)
        One layer's cache, on ``q``'s device; n >= 1 and H a multiple of Hkv.

    Returns
    -------
    output : torch.Tensor, (H, dv), q's dtype
        The attention output of each head.
    stats : dict
        ``budget`` (float: the mean over heads of keys read / n), ``keys_read`` ((H,) int64, on the
        CPU), ``n`` and ``read_mask`` ((H, n) bool, on the keys' device: the keys each head read).
        ``budget`` is 1.0 and ``read_mask`` all True.

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` not a floating-point ``torch.Tensor``.
    ValueError
        Shapes that do not match each other (``check_decode_shapes``), tensors on different devices.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, Hkv, n, d = check_decode_shapes(q, k, v)
    weights = torch.softmax(_grouped_scores(q, k), dim=-1)
    every = torch.ones((H, n), dtype=torch.bool, device=k.device)
    return _finish(_grouped_mix(weights, v), q, torch.full((H,), n), n, read_mask=every)


def topk_attention(q, k, v, budget):
    """Exact softmax over the m keys with the highest scores, renormalised (TopK): the
    oracle of Quest's and MagicPIG's papers (MagicPIG's evaluations/RULER/pred/topk_cache.py
    keeps the top fraction of every query head's scores, as here).

    Parameters
    ----------
    q : torch.Tensor, floating point, (H, d)
        One query per head.
    k, v : torch.Tensor, floating point, (Hkv, n, d) and (Hkv, n, dv)
        One layer's cache, on ``q``'s device; n >= 1 and H a multiple of Hkv.
    budget : float in (0, 1]
        Fraction of the n keys read: m = max(1, round(budget * n)) distinct keys.

    Returns
    -------
    output : torch.Tensor, (H, dv), q's dtype
        The attention output of each head.
    stats : dict
        ``budget`` (float: the mean over heads of keys read / n), ``keys_read`` ((H,) int64, on the
        CPU), ``n`` and ``read_mask`` ((H, n) bool, on the keys' device: the keys each head read). Every
        head reads m keys.

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` not a floating-point ``torch.Tensor``.
    ValueError
        Shapes that do not match each other (``check_decode_shapes``), tensors on different devices, or
        ``budget`` outside (0, 1].
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, Hkv, n, d = check_decode_shapes(q, k, v)
    m = _num_keys(budget, n)
    scores = _grouped_scores(q, k)
    keep = torch.zeros_like(scores, dtype=torch.bool)
    keep.scatter_(1, scores.topk(m, dim=-1).indices, True)
    out = _grouped_mix(_masked_softmax(scores, keep), v)
    return _finish(out, q, torch.full((H,), m), n, read_mask=keep)


def streaming_attention(q, k, v, sinks: int = DEFAULTS.sinks, recent: int = DEFAULTS.recent):
    """StreamingLLM: exact softmax over the first ``sinks`` and last ``recent`` keys only.

    As in Xiao et al. (ICLR 2024): 4 attention sinks plus a rolling window of recent keys.
    Their cache re-numbers positions inside the cache (so that a model can run past its
    trained length); here the keys keep the positions they were encoded at, which within
    the trained context isolates what dropping the middle of the cache costs.

    Parameters
    ----------
    q : torch.Tensor, floating point, (H, d)
        One query per head.
    k, v : torch.Tensor, floating point, (Hkv, n, d) and (Hkv, n, dv)
        One layer's cache, on ``q``'s device; n >= 1 and H a multiple of Hkv.
    sinks : int in [0, n]
        The first keys read (the attention sinks).
    recent : int in [0, n]
        The last keys read (the window); sinks + recent >= 1. Where the two overlap, a key is
        read once.

    Returns
    -------
    output : torch.Tensor, (H, dv), q's dtype
        The attention output of each head.
    stats : dict
        ``budget`` (float: the mean over heads of keys read / n), ``keys_read`` ((H,) int64, on the
        CPU), ``n`` and ``read_mask`` ((H, n) bool, on the keys' device: the keys each head read).

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` not a floating-point ``torch.Tensor``.
    ValueError
        Shapes that do not match each other (``check_decode_shapes``), tensors on different devices,
        ``sinks`` or ``recent`` outside its range, or sinks + recent = 0.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, Hkv, n, d = check_decode_shapes(q, k, v)
    sinks = check_int("sinks", sinks, 0, n)
    recent = check_int("recent", recent, 0, n)
    if not 1 <= sinks + recent:
        raise ValueError(f"sinks + recent must be at least 1, got {sinks} + {recent}")
    positions = torch.arange(n, device=k.device)
    keep = (positions < sinks) | (positions >= n - recent)
    work = _work_dtype(q)
    qg = q.to(work).view(Hkv, H // Hkv, d)
    kk, vv = k[:, keep].to(work), v[:, keep].to(work)
    weights = torch.softmax((qg @ kk.transpose(1, 2)) / math.sqrt(d), dim=-1)
    out = (weights @ vv).reshape(H, -1)
    return _finish(out, q, torch.full((H,), int(keep.sum())), n, read_mask=keep[None, :].expand(H, n))


def _race_log_counts(log_w, m: int, generator):
    """Draw with replacement from each row of weights exp(log_w) while the draws need at most
    m distinct keys; return log(kept draw count) per key (-inf for keys never read).

    The draw that would need an (m+1)-th distinct key ends the run and is not kept. Stopping
    right AFTER the m-th new key instead would make the last draw always a fresh key and
    over-count rarely drawn ones (see pigviz.toy.stick_balance, whose rule this is).

    The draws are simulated all at once. Let key i fire at the times of a Poisson process of
    rate w_i; merged, the processes fire at rate sum(w) = 1 and each firing picks key i with
    probability w_i, i.e. i.i.d. draws. Key i first fires at T_i = E_i / w_i (E_i ~ Exp(1)).
    The run stops at T_(m+1), the (m+1)-th smallest T_i; a key first seen at T_i < T_(m+1)
    was then drawn 1 + Poisson(w_i (T_(m+1) - T_i)) times. A row with at most m keys of
    positive weight never stops: its unlimited draws converge to the weights themselves, so
    it gets log_w on those keys (the exact answer once normalised).
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    dev = log_w.device
    log_w = log_w.to(torch.float64)
    drawable = torch.isfinite(log_w)
    exact = torch.where(drawable, log_w, -math.inf)
    if m >= log_w.shape[-1]:
        return exact
    exp1 = torch.empty(log_w.shape, dtype=torch.float64).exponential_(generator=generator).to(dev)
    log_t = torch.log(exp1) - log_w  # +inf where w_i = 0
    arrival = (-log_t).topk(m + 1, dim=-1)  # m + 1 earliest first arrivals
    chosen = arrival.indices[:, :m]
    chosen_log_t = -arrival.values[:, :m]
    log_stop = -arrival.values[:, m:]  # log T_(m+1); +inf: never stops
    bounded = torch.isfinite(log_stop)  # (rows, 1)
    first = torch.isfinite(chosen_log_t) & bounded
    log_a = log_w.gather(1, chosen) + log_stop  # log(w_i · T_(m+1)) >= log E_i
    e_i = exp1.gather(1, chosen)
    safe_a = torch.where(first, log_a, 0.0).clamp(max=700.0)
    rate = (torch.exp(safe_a) - e_i).clamp(min=0.0)
    noise_src = torch.empty(rate.shape, dtype=torch.float64)
    poisson_part = torch.poisson(rate.clamp(max=1e6).cpu(), generator=generator).to(dev)
    normal_part = rate + rate.sqrt() * noise_src.normal_(generator=generator).to(dev)
    count = torch.where(rate < 1e6, 1.0 + poisson_part, normal_part.clamp(min=1.0))
    # Past e^40 draws the Poisson noise is below 1e-8 relative: keep the mean, in log space,
    # so that a key with an astronomically large draw count does not overflow.
    log_count = torch.where(
        log_a > 40.0, log_a + torch.log1p(-e_i * torch.exp(-log_a.clamp(max=700))), torch.log(count)
    )
    log_count = torch.where(first, log_count, -math.inf)
    out = torch.full_like(log_w, -math.inf).scatter_(1, chosen, log_count)
    return torch.where(bounded, out, exact)


def _generator(seed) -> "torch.Generator":
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    return torch.Generator().manual_seed(check_int("seed", seed, 0))


def oracle_sampling_attention(q, k, v, budget, seed: int = 0):
    """Sample keys with replacement from the TRUE attention weights and average their
    values (each draw counts once). Drawing goes on while it needs at most m distinct keys;
    the draw that would need an (m+1)-th ends the run unread. Unbiased. If m covers every key
    of positive weight, nothing ends the run and the output is exact.

    Parameters
    ----------
    q : torch.Tensor, floating point, (H, d)
        One query per head.
    k, v : torch.Tensor, floating point, (Hkv, n, d) and (Hkv, n, dv)
        One layer's cache, on ``q``'s device; n >= 1 and H a multiple of Hkv.
    budget : float in (0, 1]
        Fraction of the n keys read: m = max(1, round(budget * n)) distinct keys.
    seed : int >= 0
        Seed of the draws (a CPU ``torch.Generator``): the same seed draws the same keys.

    Returns
    -------
    output : torch.Tensor, (H, dv), q's dtype
        The attention output of each head.
    stats : dict
        ``budget`` (float: the mean over heads of keys read / n), ``keys_read`` ((H,) int64, on the
        CPU), ``n`` and ``read_mask`` ((H, n) bool, on the keys' device: the keys each head read).
        ``keys_read`` counts the distinct keys drawn (at most m).

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` not a floating-point ``torch.Tensor``.
    ValueError
        Shapes that do not match each other (``check_decode_shapes``), tensors on different devices,
        ``budget`` outside (0, 1] or ``seed`` < 0.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, Hkv, n, d = check_decode_shapes(q, k, v)
    m = _num_keys(budget, n)
    gen = _generator(seed)
    log_w = torch.log_softmax(_grouped_scores(q, k).to(torch.float64), dim=-1)
    log_counts = _race_log_counts(log_w, m, gen)
    weights = torch.nan_to_num(torch.softmax(log_counts, dim=-1), nan=0.0)
    out = _grouped_mix(weights.to(_work_dtype(q)), v)
    read = torch.isfinite(log_counts)
    return _finish(out, q, read.sum(1), n, read_mask=read)


def hybrid_attention(q, k, v, budget, seed: int = 0):
    """Read the top half of the budget exactly (floor(m/2) keys) and estimate the rest of
    the weight by oracle sampling from the remaining keys with a budget of m - floor(m/2)
    distinct keys (the stopping rule of :func:`oracle_sampling_attention`), scaled by the
    remaining weight. Exact for the head, unbiased for the tail.

    Parameters
    ----------
    q : torch.Tensor, floating point, (H, d)
        One query per head.
    k, v : torch.Tensor, floating point, (Hkv, n, d) and (Hkv, n, dv)
        One layer's cache, on ``q``'s device; n >= 1 and H a multiple of Hkv.
    budget : float in (0, 1]
        Fraction of the n keys read: m = max(1, round(budget * n)) distinct keys.
    seed : int >= 0
        Seed of the draws (a CPU ``torch.Generator``): the same seed draws the same keys.

    Returns
    -------
    output : torch.Tensor, (H, dv), q's dtype
        The attention output of each head.
    stats : dict
        ``budget`` (float: the mean over heads of keys read / n), ``keys_read`` ((H,) int64, on the
        CPU), ``n`` and ``read_mask`` ((H, n) bool, on the keys' device: the keys each head read).
        ``keys_read`` counts the keys read exactly and the distinct keys drawn (at most m).

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` not a floating-point ``torch.Tensor``.
    ValueError
        Shapes that do not match each other (``check_decode_shapes``), tensors on different devices,
        ``budget`` outside (0, 1] or ``seed`` < 0.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, Hkv, n, d = check_decode_shapes(q, k, v)
    m = _num_keys(budget, n)
    gen = _generator(seed)
    log_w = torch.log_softmax(_grouped_scores(q, k).to(torch.float64), dim=-1)
    top = torch.zeros_like(log_w, dtype=torch.bool)
    top.scatter_(1, log_w.topk(m // 2, dim=-1).indices, True)
    log_tail = log_w.masked_fill(top, -math.inf)
    log_tail_mass = torch.logsumexp(log_tail, dim=-1, keepdim=True)  # -inf if nothing left
    # neginf too: nan_to_num would otherwise turn the head's -inf into the lowest float, a
    # "drawable" key that keeps the sampler from ever seeing it has run out of keys.
    tail_dist = torch.nan_to_num(log_tail - log_tail_mass, nan=-math.inf, neginf=-math.inf)
    log_counts = _race_log_counts(tail_dist, m - m // 2, gen)
    sample_weights = torch.nan_to_num(torch.softmax(log_counts, dim=-1), nan=0.0)
    weights = torch.where(top, log_w.exp(), 0.0) + log_tail_mass.exp() * sample_weights
    out = _grouped_mix(weights.to(_work_dtype(q)), v)
    read = top | torch.isfinite(log_counts)
    return _finish(out, q, read.sum(1), n, read_mask=read)


def quest_attention(q, k, v, budget, page: int = 16):
    """Quest as its authors' decode path runs it: split the cache into pages of ``page``
    tokens, ALWAYS read the page that holds the current token (the last page, full or
    partial) and count it in the budget, rank the other pages by an upper bound on their
    best score, and add them in bound order while their tokens fit in the rest of the
    budget. Attend exactly over the tokens read.

    For each dimension, max(q_i·min_i, q_i·max_i) is the largest q_i·k_i any key of the
    page can reach, so the sum bounds every score in the page from above. Besides the keys,
    a query reads the 2 vectors of metadata per page (``stats["metadata_vectors"]``).

    The authors' kernels (mit-han-lab/Quest, quest/utils/controller.py and the "manually
    appended last page" in kernels/include/decode/decode_page.cuh) pass the page budget
    minus one page to top-k and append the last page unranked. The paper also runs the
    first two layers densely; that is a per-layer choice made by the caller (the study's
    ``quest_dense_layers``, the decoder's ``dense_layers``). :func:`quest_rank_all_attention`
    ranks every page, the current one included.

    Parameters
    ----------
    q : torch.Tensor, floating point, (H, d)
        One query per head.
    k, v : torch.Tensor, floating point, (Hkv, n, d) and (Hkv, n, dv)
        One layer's cache, on ``q``'s device; n >= 1 and H a multiple of Hkv.
    budget : float in (0, 1]
        Fraction of the n keys read: pages are added while their tokens fit in
        m = max(1, round(budget * n)) keys (the current page is read even when it alone does not).
    page : int in [1, n]
        Tokens per page; the last page holds the n % page left over, if any.

    Returns
    -------
    output : torch.Tensor, (H, dv), q's dtype
        The attention output of each head.
    stats : dict
        ``budget`` (float: the mean over heads of keys read / n), ``keys_read`` ((H,) int64, on the
        CPU), ``n`` and ``read_mask`` ((H, n) bool, on the keys' device: the keys each head read). Also
        ``pages_kept`` ((H,) int64, on the CPU: the pages each head read) and ``metadata_vectors`` (int:
        2 per page, the min and max vectors a query reads).

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` not a floating-point ``torch.Tensor``.
    ValueError
        Shapes that do not match each other (``check_decode_shapes``), tensors on different devices,
        ``budget`` outside (0, 1] or ``page`` outside [1, n].
    """
    return _quest(q, k, v, budget, page, current_page=True)


def quest_rank_all_attention(q, k, v, budget, page: int = 16):
    """Quest without the always-read current page: every page, the partial last one
    included, competes on its bound alone; keep the highest-bound pages while their tokens
    fit in the budget (at least one page). pigviz's first Quest, kept to show what the
    current page is worth: the bound is loose and often drops the page whose tokens the
    query leans on most.

    Parameters
    ----------
    q : torch.Tensor, floating point, (H, d)
        One query per head.
    k, v : torch.Tensor, floating point, (Hkv, n, d) and (Hkv, n, dv)
        One layer's cache, on ``q``'s device; n >= 1 and H a multiple of Hkv.
    budget : float in (0, 1]
        Fraction of the n keys read: m = max(1, round(budget * n)) distinct keys.
    page : int in [1, n]
        Tokens per page; the last page holds the n % page left over, if any.

    Returns
    -------
    output : torch.Tensor, (H, dv), q's dtype
        As :func:`quest_attention`'s.
    stats : dict
        As :func:`quest_attention`'s.

    Raises
    ------
    TypeError
        ``q``, ``k`` or ``v`` not a floating-point ``torch.Tensor``.
    ValueError
        Shapes that do not match each other (``check_decode_shapes``), tensors on different devices,
        ``budget`` outside (0, 1] or ``page`` outside [1, n].
    """
    return _quest(q, k, v, budget, page, current_page=False)


def _quest(q, k, v, budget, page: int, current_page: bool):
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, Hkv, n, d = check_decode_shapes(q, k, v)
    m = _num_keys(budget, n)
    page = check_int("page", page, 1, n)
    work = _work_dtype(q)
    full = n // page
    kw = k.to(work)
    chunks_min, chunks_max = [], []
    if full:
        pages = kw[:, : full * page].reshape(Hkv, full, page, d)
        chunks_min.append(pages.amin(2))
        chunks_max.append(pages.amax(2))
    if n % page:
        chunks_min.append(kw[:, full * page :].amin(1, keepdim=True))
        chunks_max.append(kw[:, full * page :].amax(1, keepdim=True))
    kmin, kmax = torch.cat(chunks_min, 1), torch.cat(chunks_max, 1)  # (Hkv, P, d)
    qg = q.to(work).view(Hkv, H // Hkv, d)
    bound = (qg.clamp(min=0) @ kmax.transpose(1, 2) + qg.clamp(max=0) @ kmin.transpose(1, 2)).reshape(H, -1)
    num_pages = bound.shape[1]
    page_len = torch.full((num_pages,), page, device=k.device)
    page_len[-1] = n - (num_pages - 1) * page
    if current_page:
        # The current page goes first, whatever its bound; the others follow in bound order.
        bound[:, -1] = math.inf
    order = bound.argsort(dim=1, descending=True)
    used = page_len[order].cumsum(1)
    keep_sorted = used <= m
    keep_sorted[:, 0] = True
    keep_page = torch.zeros_like(keep_sorted).scatter_(1, order, keep_sorted)
    keep = keep_page.repeat_interleave(page, dim=1)[:, :n]
    scores = _grouped_scores(q, k)
    out = _grouped_mix(_masked_softmax(scores, keep), v)
    return _finish(
        out, q, keep.sum(1), n, read_mask=keep, pages_kept=keep_page.sum(1).cpu(), metadata_vectors=2 * num_pages
    )
