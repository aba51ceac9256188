"""Estimators a real system can afford, to set beside TopK at a matched budget.

TopK and oracle sampling look at every score to choose their keys: they show what is
possible, not what a system can run. Each estimator here chooses its keys from something it
can afford to compute, reads those keys and values, and nothing else:

* :func:`magicpig_exact_top` -- MagicPIG plus an exact top. The tables return a candidate
  set S whose scores MagicPIG computes anyway (to correct them by 1/u). Rank S by those
  scores, keep the best ``top_fraction`` of S at their plain softmax weight (as if read
  exactly) and importance-correct only the rest by 1/u. Same keys read as MagicPIG. The 1/u
  weight is what makes MagicPIG's estimate consistent (self-normalised, so biased at a finite
  budget), and also what lets a high-scoring key sampled against the odds (small u) swamp the
  sum; trusting the top of S as exact was meant to trade bias for less variance. Measured on
  the study (finding 2, notebooks/findings/f2_affordable.ipynb) it loses to MagicPIG at every
  budget: the top keys of S no longer stand in for the heavy keys the tables missed, so their weight is undercounted.
* :func:`vattention` -- after vAttention (Desai et al., "vAttention: Verified Sparse
  Attention", 2025, arXiv:2510.05688): a deterministic set (sinks, recent window and the
  pages an affordable retriever ranks highest -- here Quest's page bound, with the current
  page read as Quest's authors do) plus keys drawn uniformly at random, without
  replacement, from everything else; the sampled part of the softmax's numerator and
  denominator is scaled by (keys left) / (keys drawn), which makes both unbiased.
* :func:`sparq` -- SparQ Attention (Ribar et al., "SparQ Attention: Bandwidth-Efficient LLM
  Inference", ICML 2024, arXiv:2312.04985): approximate every score from the ``r``
  channels where |q| is largest (reading r of the d channels of every key), take the top
  keys under those approximate scores, attend exactly over them, and mix in the mean value
  of the whole cache with the approximate weight the top keys leave over. Its first pass
  reads r/(2d) of the cache's key+value bytes on top of the keys it reads in full
  (``stats["channel_fraction"]``).

All take one decode step like :mod:`pigviz.attention`'s baselines -- ``q`` (H, d), ``k``
(Hkv, n, d), ``v`` (Hkv, n, dv), grouped-query attention with query head h reading KV head
h // (H / Hkv) -- and return ``(output (H, dv), stats)`` with ``stats["budget"]`` the mean
fraction of the n keys whose values enter the output and ``stats["keys_read"]`` per head.
"""

from __future__ import annotations

import math

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_float, check_int
from pigviz.attention.baselines import (
    _finish,
    _grouped_mix,
    _grouped_scores,
    _num_keys,
    _work_dtype,
    check_decode_shapes,
)
from pigviz.lsh.magicpig import _log_inclusion, attend, exact_positions

__all__ = ["magicpig_exact_top", "vattention", "sparq", "sparq_channels", "METHODS", "VATTENTION_SAMPLE_FRACTION"]

METHODS = ("mp_exact_top", "vattention", "sparq")
VATTENTION_SAMPLE_FRACTION = 0.25  # share of the budget vattention spends on its uniform sample


def sparq_channels(d: int) -> int:
    """SparQ's default r: the d // 8 query channels it reads of every key (at least 1)."""
    return max(1, d // 8)


def magicpig_exact_top(index, q, k, v, *, top_fraction: float = 0.5, min_hits: int = DEFAULTS.min_hits):
    """MagicPIG's read set, with the best ``top_fraction`` of the sampled keys (by the scores
    MagicPIG computes anyway) weighted as exact and only the rest corrected by 1/u.
    ``top_fraction=0`` is MagicPIG itself; 1 is a plain softmax over the keys it read."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, Hkv, n, d = check_decode_shapes(q, k, v)
    top_fraction = check_float("top_fraction", top_fraction, 0.0, 1.0)
    _, stats = attend(index, q, k, v, min_hits=min_hits, return_read_mask=True)
    read = stats["read_mask"]  # (H, n)
    exact = torch.zeros(n, dtype=torch.bool, device=k.device)
    exact[exact_positions(n, index.sinks, index.recent, k.device)] = True
    sampled = read & ~exact
    scores = _grouped_scores(q, k)  # (H, n); only read ones are used
    group = H // Hkv
    kv_of_head = torch.arange(H, device=k.device) // group
    qf = q.to(scores.dtype)
    # cos(q, k - mean), as attend computes it, for the 1/u correction
    centred_dots = scores * math.sqrt(d) - (qf * index.mean[kv_of_head].to(qf.dtype)).sum(-1, keepdim=True)
    norms = qf.norm(dim=-1, keepdim=True) * index.centred_norms[kv_of_head].to(qf.dtype)
    cos = torch.where(norms > 0, centred_dots / norms.clamp(min=1e-30), 0.0)
    log_u = _log_inclusion(index, 1.0 - torch.arccos(cos.clamp(-1.0, 1.0)) / math.pi, min_hits).to(scores.dtype)
    # rank each head's sampled keys by score; the first ceil(top_fraction * |S|) are trusted
    count = sampled.sum(1)
    keep_top = torch.ceil(top_fraction * count.to(torch.float64)).to(torch.int64)
    ranked = scores.masked_fill(~sampled, -math.inf).argsort(dim=1, descending=True)
    rank = torch.empty_like(ranked).scatter_(1, ranked, torch.arange(n, device=k.device).expand(H, n))
    trusted = sampled & (rank < keep_top[:, None])
    corrected = scores - torch.where(sampled & ~trusted, log_u, 0.0)
    weights = torch.nan_to_num(torch.softmax(corrected.masked_fill(~read, -math.inf), dim=-1), nan=0.0)
    out = _grouped_mix(weights, v)
    return _finish(out, q, read.sum(1), n, read_mask=read, sampled=count.cpu(), trusted=trusted.sum(1).cpu())


def vattention(
    q,
    k,
    v,
    budget,
    *,
    sinks: int = DEFAULTS.sinks,
    recent: int = DEFAULTS.recent,
    sample_fraction: float = VATTENTION_SAMPLE_FRACTION,
    page: int = 16,
    seed: int = 0,
):
    """Deterministic set + uniform sample of the rest, after vAttention (module docstring).

    Of the m = round(budget * n) keys, ``sample_fraction`` go to the uniform sample and the
    rest to the deterministic set: the sinks, the recent window, then whole pages in Quest's
    bound order (the current page first) while they fit. The draw is without replacement
    from the keys outside the deterministic set; each drawn key's exp(score) and value count
    (keys left) / (keys drawn) times.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, Hkv, n, d = check_decode_shapes(q, k, v)
    m = _num_keys(budget, n)
    sinks = check_int("sinks", sinks, 0, n)
    recent = check_int("recent", recent, 0, n)
    sample_fraction = check_float("sample_fraction", sample_fraction, 0.0, 1.0)
    page = check_int("page", page, 1, n)
    gen = torch.Generator().manual_seed(check_int("seed", seed, 0))
    dev = k.device
    positions = torch.arange(n, device=dev)
    base = (positions < sinks) | (positions >= n - recent)
    m_sample = int(round(sample_fraction * m))
    room = max(0, m - m_sample - int(base.sum()))
    det = base[None, :].expand(H, n).clone()
    if room > 0:
        # Quest's page bounds as the affordable retriever, over the keys outside the exact set
        det |= _quest_pages(q, k, room, page, exclude=base)
    scores = _grouped_scores(q, k)
    rest = ~det
    left = rest.sum(1)  # (H,)
    draw = torch.minimum(left, (m - det.sum(1)).clamp(min=0))  # the rest of the budget
    # uniform draw without replacement: the `draw` keys of smallest random keys among the rest
    noise = torch.rand((H, n), generator=gen).to(dev).masked_fill(~rest, math.inf)
    order = noise.argsort(dim=1)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(n, device=dev).expand(H, n))
    picked = rest & (rank < draw[:, None])
    scale = torch.where(draw > 0, left.to(scores.dtype) / draw.clamp(min=1).to(scores.dtype), 0.0)
    log_w = torch.where(picked, scores + torch.log(scale)[:, None], scores).masked_fill(~(det | picked), -math.inf)
    weights = torch.nan_to_num(torch.softmax(log_w, dim=-1), nan=0.0)
    out = _grouped_mix(weights, v)
    read = det | picked
    return _finish(out, q, read.sum(1), n, read_mask=read, deterministic=det.sum(1).cpu(), sampled=picked.sum(1).cpu())


def _quest_pages(q, k, room: int, page: int, exclude):
    """(H, n) mask of the pages Quest's bound ranks highest, the current page first, while
    their tokens outside ``exclude`` fit in ``room`` (a page may straddle the exact set)."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, d = q.shape
    Hkv, n, _ = k.shape
    work = _work_dtype(q)
    P = -(-n // page)
    pad = P * page - n
    kw = k.to(work)
    if pad:
        kw = torch.cat([kw, kw[:, -1:].expand(Hkv, pad, d)], 1)  # repeat the last key: min/max unchanged
    pages = kw.view(Hkv, P, page, d)
    kmin, kmax = pages.amin(2), pages.amax(2)
    qg = q.to(work).view(Hkv, H // Hkv, d)
    bound = (qg.clamp(min=0) @ kmax.transpose(1, 2) + qg.clamp(max=0) @ kmin.transpose(1, 2)).reshape(H, P)
    bound[:, -1] = math.inf
    new_tokens = torch.zeros(P * page, dtype=torch.long, device=k.device)
    new_tokens[:n] = (~exclude).long()
    cost = new_tokens.view(P, page).sum(1)  # tokens each page adds
    order = bound.argsort(dim=1, descending=True)
    keep_sorted = cost[order].cumsum(1) <= room
    keep_page = torch.zeros_like(keep_sorted).scatter_(1, order, keep_sorted)
    return keep_page.repeat_interleave(page, dim=1)[:, :n] & ~exclude[None, :]


def sparq(q, k, v, budget, *, r: int | None = None, mean_value=None):
    """SparQ Attention (module docstring): ``budget`` is the fraction of keys read in full,
    ``r`` the query channels used to approximate the scores (default d // 8, at least 1).
    ``mean_value`` (Hkv, dv): the cache's mean value, kept as a running sum by a real system
    (computed here when not given)."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    H, Hkv, n, d = check_decode_shapes(q, k, v)
    m = _num_keys(budget, n)
    r = check_int("r", sparq_channels(d) if r is None else r, 1, d)
    work = _work_dtype(q)
    qf = q.to(work)
    group = H // Hkv
    kv_of_head = torch.arange(H, device=k.device) // group
    # 1. the r channels of largest |q| per head, and approximate scores from them alone
    channels = qf.abs().topk(r, dim=-1).indices  # (H, r)
    k_ch = torch.gather(k.to(work)[kv_of_head], 2, channels[:, None, :].expand(H, n, r))  # (H, n, r)
    q_ch = torch.gather(qf, 1, channels)  # (H, r)
    # SparQ's temperature: sqrt(d * share of |q|'s L1 norm in the chosen channels)
    temp = torch.sqrt(d * q_ch.abs().sum(-1) / qf.abs().sum(-1).clamp(min=1e-30))  # (H,)
    approx = (k_ch @ q_ch[:, :, None])[..., 0] / temp[:, None].clamp(min=1e-30)  # (H, n)
    approx_w = torch.softmax(approx, dim=-1)
    top = approx.topk(m, dim=-1).indices
    keep = torch.zeros((H, n), dtype=torch.bool, device=k.device).scatter_(1, top, True)
    alpha = (approx_w * keep).sum(-1, keepdim=True)  # (H, 1)
    # 2. exact attention over the chosen keys, mixed with the mean value
    scores = _grouped_scores(q, k)
    weights = torch.nan_to_num(torch.softmax(scores.masked_fill(~keep, -math.inf), dim=-1), nan=0.0)
    exact_part = _grouped_mix(weights, v)
    if mean_value is None:
        mean_value = v.to(work).mean(1)
    out = alpha * exact_part + (1 - alpha) * mean_value.to(work)[kv_of_head]
    return _finish(
        out, q, torch.full((H,), m), n, read_mask=keep, alpha=alpha[:, 0].cpu(), r=r, channel_fraction=r / (2 * d)
    )
