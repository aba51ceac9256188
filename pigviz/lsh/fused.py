"""MagicPIG's decode step as one compiled CPU loop per layer (numba).

:func:`pigviz.lsh.magicpig.attend` is the readable reference: about 80 small torch ops per
layer, each of which allocates, converts or synchronises. :func:`attend` here computes the
same estimator in ONE call per layer, with no intermediate tensors. Per query row:

1. its bucket in each of the L tables, from the signs of ``q @ planes`` (one matmul for all
   rows, done by torch before the loop);
2. a walk over those buckets' token ids, counting hits in a byte per token (``uint8``,
   saturating at 255); a token's first hit puts it on a "touched" list, and only touched
   counters are cleared afterwards, so a row costs O(candidates), not O(n);
3. every touched token with at least ``min_hits`` hits outside the exact set is sampled: its
   key is read once, q·k is formed, cos(q, k - mean) comes from that dot and the stored
   |k - mean|, and log u is interpolated in the same float64 table the reference uses;
4. the exact set (sinks + recent) and, for decoding, the exact buffer of tokens cached after
   the index was built are scored in the same list, uncorrected;
5. softmax and the value mix over that list: each value row is read once, weighted and added.

It returns the output AND its log-normaliser ``lse`` = log sum exp(score) per row, so a
caller can merge it with other blocks of keys by log-sum-exp (flash-attention style) instead
of smuggling a marker column through a copy of the values. Keys and values are read in
their stored dtype (float32, or float16/bfloat16 through a 65536-entry float32 lookup table):
no converted copy of the cache is ever made.

Without numba, or for tensors on a GPU, :func:`attend` falls back to the torch reference
(same results; the read set is identical and outputs agree to ~1e-6 relative).
``PIGVIZ_NO_NUMBA=1`` forces the fallback.

The compiled loops live in :mod:`pigviz.lsh.kernels`, with the counting sort that
:func:`pigviz.lsh.index.build_index` uses to build its CSR tables when numba is present.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pigviz._util.validate import check_int
from pigviz.attention import check_decode_shapes
from pigviz.lsh import kernels, magicpig
from pigviz.lsh.index import LSHIndex

__all__ = ["available", "attend"]

available = kernels.available


def _as_kernel_array(x: torch.Tensor) -> np.ndarray:
    """A numpy view the kernel reads (float32, or 16-bit integers carrying half bits)."""
    x = x.contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    if x.dtype == torch.float16:
        return x.view(torch.int16).numpy()
    return x.numpy()


def _usable(index, q, k, v, min_hits) -> bool:
    return (
        q.device.type == "cpu"
        and k.device.type == "cpu"
        and v.device.type == "cpu"
        and index.device.type == "cpu"
        and min_hits <= 255
        and not q.requires_grad
        and k.dtype in (torch.float32, torch.float16, torch.bfloat16)
        and v.dtype in (torch.float32, torch.float16, torch.bfloat16)
    )


def attend(
    index, q, k, v, *, min_hits: int = 2, scale: float | None = None, buffer_end=None, return_read_mask: bool = False
):
    """:func:`pigviz.lsh.magicpig.attend` in one compiled pass, plus the log-normaliser.

    ``q`` (R, d): R query rows, row r reading KV head r // (R / Hkv). ``k``, ``v`` (Hkv, N, d[v])
    with N >= index.n: tokens below ``index.n`` are read through the index (exact set +
    LSH sample); tokens ``index.n .. buffer_end[r] - 1`` are read exactly (the decode buffer;
    default: none). ``scale`` multiplies q·k (default 1/sqrt(d), as the reference).

    Returns ``(output (R, dv) in q's dtype, stats)``; ``stats`` has the reference's keys
    (``budget``, ``keys_read``, ``sampled``, ``candidates``, ``exact``, ``n``, optional
    ``read_mask``; counts over the indexed tokens) plus ``lse`` (R,) float32, the log of the
    softmax normaliser of the scores actually mixed (-inf for a row that read nothing), and
    ``buffer`` (R,) int64, the buffer tokens read. Falls back to the torch reference when the
    compiled path cannot run (no numba, GPU tensors, exotic dtypes).
    """
    compiled = kernels.kernels()
    if not isinstance(index, LSHIndex):
        raise TypeError(f"index must be an LSHIndex from pigviz.lsh.index.build_index, got {type(index).__name__}")
    R, Hkv, N, d = check_decode_shapes(q, k, v)
    n = index.n
    if (Hkv, d) != (index.num_kv_heads, index.head_dim) or N < n:
        raise ValueError(
            f"k has shape {tuple(k.shape)} but the index was built for "
            f"(kv_heads, n, d) = {(index.num_kv_heads, n, index.head_dim)}"
        )
    min_hits = check_int("min_hits", min_hits, 1, index.L)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if buffer_end is None:
        ends = torch.full((R,), n, dtype=torch.int64)
    else:
        ends = torch.as_tensor(buffer_end, dtype=torch.int64).reshape(-1).cpu()
        if ends.numel() != R or (ends.numel() and (int(ends.min()) < n or int(ends.max()) > N)):
            raise ValueError(f"buffer_end must hold {R} positions between index.n={n} and k's length {N}")
    if compiled is None or not _usable(index, q, k, v, min_hits):
        return _reference(index, q, k, v, min_hits, scale, ends, return_read_mask)
    qf = q.detach().to(torch.float32).contiguous()
    if not bool(torch.isfinite(qf).all()):
        raise ValueError("q must contain only finite numbers")
    # The index's arrays as numpy views, made once per index (each conversion costs a few µs,
    # and a decode step calls this once per layer).
    views = index.cache.get("fused_views")
    if views is None:
        views = index.cache["fused_views"] = (
            index.offsets.numpy(),
            index.entries.numpy(),
            index.centred_norms.numpy(),
            index.mean.contiguous().numpy(),
            {},
        )
    offsets, entries, cnorm, mean, log_u = views
    if min_hits not in log_u:
        log_u[min_hits] = magicpig.log_inclusion_table(index, min_hits).numpy()
    dv = v.shape[2]
    out = np.empty((R, dv), dtype=np.float32)
    lse = np.empty(R, dtype=np.float32)
    sampled = np.empty(R, dtype=np.int64)
    candidates = np.empty(R, dtype=np.int64)
    bad = np.zeros(R, dtype=np.uint8)
    mask = np.zeros((R, n) if return_read_mask else (0, 0), dtype=np.bool_)
    compiled[0](
        (qf @ index.planes).numpy(),
        qf.numpy(),
        mean,
        R // Hkv,
        index.K,
        index.L,
        min_hits,
        index.sinks,
        index.recent,
        n,
        offsets,
        entries,
        cnorm,
        log_u[min_hits],
        magicpig._GRID,
        _as_kernel_array(k.detach()),
        _as_kernel_array(v.detach()),
        ends.numpy(),
        np.float32(scale),
        out,
        lse,
        sampled,
        candidates,
        bad,
        mask,
        return_read_mask,
    )
    out, lse, sampled, candidates, mask = (torch.from_numpy(a) for a in (out, lse, sampled, candidates, mask))
    if bad.any():
        # A non-finite key or value was read: the reference names the culprit (ValueError).
        return _reference(index, q, k, v, min_hits, scale, ends, return_read_mask)
    num_exact = index.sinks + index.recent
    keys_read = sampled + num_exact
    stats = {
        "budget": float(keys_read.double().mean()) / n,
        "keys_read": keys_read,
        "sampled": sampled,
        "candidates": candidates,
        "exact": num_exact,
        "n": n,
        "lse": lse,
        "buffer": ends - n,
    }
    if return_read_mask:
        mask[:, : index.sinks] = True
        mask[:, n - index.recent :] = True
        stats["read_mask"] = mask
    return out.to(q.dtype), stats


def _reference(index, q, k, v, min_hits, scale, ends, return_read_mask):
    """The same contract through :func:`pigviz.lsh.magicpig.attend` and a dense buffer pass."""
    R, d = q.shape
    Hkv, N, _ = k.shape
    n = index.n
    # The reference scores q·k / sqrt(d); rescale q so that equals q·k · scale.
    qs = q * (scale * math.sqrt(d)) if scale != 1.0 / math.sqrt(d) else q
    kk, vv = (k, v) if N == n else (k[:, :n], v[:, :n])
    out, stats = magicpig.attend(
        index, qs, kk, vv, min_hits=min_hits, return_read_mask=return_read_mask, return_lse=True
    )
    stats["buffer"] = (ends - n).to(stats["keys_read"].dtype)
    if int(ends.max()) > n if ends.numel() else False:
        out, stats["lse"] = _merge_buffer(q, k, v, out, stats["lse"], n, ends.to(q.device), scale)
    return out, stats


def _merge_buffer(q, k, v, out, lse, n, ends, scale):
    """Mix rows of ``out`` (normaliser exp(lse)) with exact attention over k[:, n:end_r]."""
    R = q.shape[0]
    Hkv, N, _ = k.shape
    qf = q.to(torch.float32).view(Hkv, R // Hkv, -1)
    kb, vb = k[:, n:].to(torch.float32), v[:, n:].to(torch.float32)
    scores = (qf @ kb.transpose(1, 2)) * scale  # (Hkv, R/Hkv, nb)
    visible = torch.arange(N - n, device=q.device)[None, :] < (ends - n).view(Hkv, -1, 1)
    scores = scores.masked_fill(~visible, -math.inf)
    lse_b = torch.logsumexp(scores, -1)
    out_b = torch.nan_to_num(torch.softmax(scores, -1), nan=0.0) @ vb
    both = torch.stack([lse.view(Hkv, -1).to(torch.float32), lse_b])
    mix = torch.nan_to_num(torch.softmax(both, 0), nan=0.0)
    merged = mix[0, ..., None] * out.view(Hkv, R // Hkv, -1).to(torch.float32) + mix[1, ..., None] * out_b
    return merged.view(R, -1).to(out.dtype), torch.logsumexp(both, 0).view(R)
