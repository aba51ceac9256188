"""MagicPIG's decode step as one compiled CPU loop per layer (numba), and a faster index build.

:func:`pigviz.magicpig.attend` is the readable reference: about 80 small torch ops per
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

:func:`build_tables` builds the CSR tables of :class:`pigviz.lsh_index.LSHIndex` with a
counting sort per (KV head, table) in numba, after hashing every KV head's keys together in
a few large matmuls; :func:`pigviz.lsh_index.build_index` uses it when numba is present.
"""
from __future__ import annotations

import math
import os

import numpy as np
import torch

__all__ = ["available", "attend", "pack_buckets", "build_tables"]

_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}   # vectorised dot products; inf/NaN still honoured


def available() -> bool:
    """True if the compiled CPU path can run (numba importable and not switched off)."""
    return _kernels() is not None


def _kernels():
    """(attend, pack, csr) kernels, or None when numba is missing or PIGVIZ_NO_NUMBA is set."""
    if numba is None or os.environ.get("PIGVIZ_NO_NUMBA", "") not in ("", "0"):
        return None
    return attend_kernel, pack_kernel, csr_kernel


try:
    import numba
except ImportError:      # the torch path runs everything
    numba = None


# The kernels live at module level so that numba can cache their machine code on disk
# (closures would be compiled again in every process).
if numba is not None:
    from numba import njit

    # ``prefetch(a, g, t, j)``: ask the CPU to start loading the cache line holding a[g, t, j].
    # The sampled keys sit at random rows; without a hint the core waits for each row in turn.
    # Issued a few rows ahead, the loads overlap and the loop runs at memory bandwidth.
    from llvmlite import binding, ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    _PREFETCH = "llvm.prefetch.p0" if binding.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"

    def _prefetch_codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = [context.cast(builder, a, t, types.intp) for a, t in zip(args[1:], signature.args[1:])]
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            _PREFETCH)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])   # read, keep in cache, data
        return context.get_dummy_value()

    @intrinsic
    def prefetch(typingctx, arr, i0, i1, i2):
        return types.void(arr, i0, i1, i2), _prefetch_codegen

    @intrinsic
    def prefetch2(typingctx, arr, i0, i1):
        return types.void(arr, i0, i1), _prefetch_codegen

    # ``as_f32(x)``: a stored element as float32. Half-precision caches reach the kernel as
    # 16-bit integer views (numba has no bfloat16): uint16 holds bfloat16 bits (widened by a
    # shift), int16 holds float16 bits (converted by the CPU's half-to-float instruction).
    from numba.extending import overload

    @intrinsic
    def bf16_to_f32(typingctx, x):
        def codegen(context, builder, signature, args):
            wide = builder.shl(builder.zext(args[0], ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
            return builder.bitcast(wide, ir.FloatType())
        return types.float32(x), codegen

    @intrinsic
    def f16_to_f32(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
        return types.float32(x), codegen

    def as_f32(x):
        raise NotImplementedError

    @overload(as_f32, inline="always")
    def _as_f32(x):
        if isinstance(x, types.Float):
            return lambda x: np.float32(x)
        if x == types.uint16:
            return lambda x: bf16_to_f32(x)
        if x == types.int16:
            return lambda x: f16_to_f32(x)
        return None

    ahead = 16    # rows prefetched ahead of the one being read

    @njit(cache=True, nogil=True)
    def _prefetch_row(a, g, t, d):
        step = 64 // a.itemsize         # one hint per 64-byte cache line
        for j in range(0, d, step):
            prefetch(a, g, t, j)

    @njit(cache=True, fastmath=_FASTMATH, nogil=True)
    def _row_dot(q, r, k, g, t, d):
        acc = np.float32(0.0)
        for j in range(d):
            acc += q[r, j] * as_f32(k[g, t, j])
        return acc

    @njit(cache=True, fastmath=_FASTMATH, nogil=True)
    def _add_row(acc, w, v, g, t, dv):
        for j in range(dv):
            acc[j] += np.float64(w * as_f32(v[g, t, j]))

    @njit(cache=True, nogil=True)
    def _dots(q, r, k, g, ids, nread, scores):
        d = q.shape[1]
        for i in range(nread):
            if i + ahead < nread:
                _prefetch_row(k, g, ids[i + ahead], d)
            scores[i] = _row_dot(q, r, k, g, ids[i], d)

    @njit(cache=True, nogil=True)
    def _mix(v, g, ids, weights, nread, acc):
        dv = acc.shape[0]
        for i in range(nread):
            if i + ahead < nread:
                _prefetch_row(v, g, ids[i + ahead], dv)
            _add_row(acc, weights[i], v, g, ids[i], dv)

    @njit(cache=True, nogil=True)
    def attend_kernel(proj, q, mean, rows_per_kv, K, L, min_hits, sinks, recent, n_idx,
                      offsets, entries, cnorm, log_u, grid, k, v,
                      buffer_end, scale, out, lse, sampled_out, candidates_out, bad, mask, want_mask):
        R, d = q.shape
        dv = out.shape[1]
        n_all = max(n_idx, buffer_end.max()) if R else n_idx
        hits = np.zeros(n_idx, dtype=np.uint8)
        touched = np.empty(n_idx + 1, dtype=np.int32)   # +1: the branch-free append writes one past
        ids = np.empty(n_all + 1, dtype=np.int64)        # +1: the branch-free append
        scores = np.empty(n_all, dtype=np.float32)
        acc = np.empty(dv, dtype=np.float64)   # the value mix sums thousands of rows: float64
        bounds = np.empty((L, 2), dtype=np.int64)
        pi = np.float32(math.pi)
        for r in range(R):
            g = r // rows_per_kv
            # 1-2. buckets, hit counting over the candidates
            # Three sweeps over the tables so that their random reads overlap instead of
            # waiting in turn: bucket ids (prefetching the offsets), bucket bounds (prefetching
            # the first token ids), then the walk.
            for l in range(L):
                b = 0
                for j in range(K):
                    if proj[r, l * K + j] > 0:
                        b |= 1 << j
                bounds[l, 0] = b
                prefetch(offsets, g, l, b)
            cand = 0
            for l in range(L):
                b = bounds[l, 0]
                s = offsets[g, l, b]
                e = offsets[g, l, b + 1]
                bounds[l, 0] = s
                bounds[l, 1] = e
                cand += e - s
                if e > s:
                    prefetch(entries, g, l, s)
            ntouched = 0
            for l in range(L):
                for i in range(bounds[l, 0], bounds[l, 1]):
                    t = entries[g, l, i]
                    c = hits[t]
                    touched[ntouched] = t          # kept only on a first hit (branch-free)
                    ntouched += c == 0
                    hits[t] = c + (c < 255)
            candidates_out[r] = cand
            # 3-4. the read list: exact set, sampled set, buffer. Ids first, then one tight
            # loop per pass over the rows, so the CPU overlaps many independent key loads
            # (a branchy loop that mixes them with the hit test mispredicts and stalls).
            nread = 0
            for t in range(sinks):
                ids[nread] = t
                nread += 1
            for t in range(n_idx - recent, n_idx):
                ids[nread] = t
                nread += 1
            first_sampled = nread
            lo_t = sinks
            hi_t = n_idx - recent
            for i in range(ntouched):
                t = touched[i]
                c = hits[t]
                hits[t] = 0
                ids[nread] = t               # kept only if sampled (branch-free)
                nread += (c >= min_hits) & (t >= lo_t) & (t < hi_t)
            end_sampled = nread
            sampled_out[r] = end_sampled - first_sampled
            for t in range(n_idx, buffer_end[r]):
                ids[nread] = t
                nread += 1
            if want_mask:
                for i in range(first_sampled, end_sampled):
                    mask[r, ids[i]] = True
            _dots(q, r, k, g, ids, nread, scores)
            finite = True
            for i in range(nread):
                if not np.isfinite(scores[i]):
                    finite = False
            # log u of each sampled key from cos(q, k - mean) = (q.k - q.mean) / (|q| |k - mean|)
            qm = np.float32(0.0)     # q . mean and |q|, for cos(q, k - mean)
            qq = np.float32(0.0)
            for j in range(d):
                qm += q[r, j] * mean[g, j]
                qq += q[r, j] * q[r, j]
            qn = np.float32(math.sqrt(qq))
            for i in range(first_sampled, end_sampled):
                if i + ahead < end_sampled:     # |k - mean| sits at random rows too
                    prefetch2(cnorm, g, ids[i + ahead])
                dot = scores[i]
                norm = qn * cnorm[g, ids[i]]
                cos = np.float32(0.0)
                if norm > 0:
                    cos = (dot - qm) / max(norm, np.float32(1.1754944e-38))
                if cos > 1:
                    cos = np.float32(1.0)
                elif cos < -1:
                    cos = np.float32(-1.0)
                p = np.float32(1.0) - np.float32(math.acos(cos)) / pi
                pos = min(max(np.float64(p), 0.0), 1.0) * grid
                lo = math.floor(pos)
                if lo > grid - 1:
                    lo = grid - 1
                if not (pos == pos):    # NaN key: flagged as non-finite above
                    lo = 0
                frac = pos - lo
                li = int(lo)
                lu = np.float32(log_u[li] * (1.0 - frac) + log_u[li + 1] * frac)
                scores[i] = dot * scale - lu
            for i in range(first_sampled):
                scores[i] = scores[i] * scale
            for i in range(end_sampled, nread):
                scores[i] = scores[i] * scale
            # 5. softmax and value mix
            for j in range(dv):
                acc[j] = 0.0
            if nread == 0:
                for j in range(dv):
                    out[r, j] = 0.0
                lse[r] = -np.inf
                bad[r] = 0 if finite else 1
                continue
            m = scores[0]
            for i in range(1, nread):
                if scores[i] > m:
                    m = scores[i]
            total = 0.0
            for i in range(nread):
                w = np.float32(math.exp(scores[i] - m))
                scores[i] = w
                total += w
            _mix(v, g, ids, scores, nread, acc)
            inv = 1.0 / total
            for j in range(dv):
                o = np.float32(acc[j] * inv)
                out[r, j] = o
                if not np.isfinite(o):
                    finite = False
            lse[r] = m + np.float32(math.log(total))
            bad[r] = 0 if finite else 1

    @njit(cache=True, nogil=True)
    def pack_kernel(proj_t, row0, K, buckets):
        """Bucket ids of keys row0.. of one KV head from their projections, transposed
        (L*K, B) so that each bit is set for B keys in one vectorised sweep."""
        L = buckets.shape[0]
        B = proj_t.shape[1]
        for l in range(L):
            out = buckets[l, row0:row0 + B]
            for i in range(B):
                out[i] = 0
            for j in range(K):
                p = proj_t[l * K + j]
                for i in range(B):
                    out[i] |= np.int32(p[i] > 0) << j

    @njit(cache=True, nogil=True)
    def csr_kernel(buckets, entries, offsets):
        """Counting sort of each table's bucket ids (L, n) of one KV head: stable, O(n + 2^K)."""
        L, n = buckets.shape
        nb = offsets.shape[1] - 1
        pos = np.empty(nb, dtype=np.int64)
        for l in range(L):
            off = offsets[l]
            for b in range(nb + 1):
                off[b] = 0
            for t in range(n):
                off[buckets[l, t] + 1] += 1
            for b in range(nb):
                off[b + 1] += off[b]
            for b in range(nb):
                pos[b] = off[b]
            row = entries[l]
            for t in range(n):
                b = buckets[l, t]
                row[pos[b]] = t
                pos[b] += 1




def _as_kernel_array(x: torch.Tensor) -> np.ndarray:
    """A numpy view the kernel reads (float32, or 16-bit integers carrying half bits)."""
    x = x.contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    if x.dtype == torch.float16:
        return x.view(torch.int16).numpy()
    return x.numpy()


def _usable(index, q, k, v, min_hits) -> bool:
    return (q.device.type == "cpu" and k.device.type == "cpu" and v.device.type == "cpu"
            and index.device.type == "cpu" and min_hits <= 255 and not q.requires_grad
            and k.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and v.dtype in (torch.float32, torch.float16, torch.bfloat16)
            )


def attend(index, q, k, v, *, min_hits: int = 2, scale: float | None = None, buffer_end=None,
           return_read_mask: bool = False):
    """:func:`pigviz.magicpig.attend` in one compiled pass, plus the log-normaliser.

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
    from pigviz.attention import check_decode_shapes
    from pigviz.lsh_index import LSHIndex
    from pigviz import magicpig

    kernels = _kernels()
    if not isinstance(index, LSHIndex):
        raise TypeError(f"index must be an LSHIndex from pigviz.lsh_index.build_index, got {type(index).__name__}")
    R, Hkv, N, d = check_decode_shapes(q, k, v)
    n = index.n
    if (Hkv, d) != (index.num_kv_heads, index.head_dim) or N < n:
        raise ValueError(f"k has shape {tuple(k.shape)} but the index was built for "
                         f"(kv_heads, n, d) = {(index.num_kv_heads, n, index.head_dim)}")
    from pigviz._validate import check_int

    min_hits = check_int("min_hits", min_hits, 1, index.L)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    if buffer_end is None:
        ends = torch.full((R,), n, dtype=torch.int64)
    else:
        ends = torch.as_tensor(buffer_end, dtype=torch.int64).reshape(-1).cpu()
        if ends.numel() != R or (ends.numel() and (int(ends.min()) < n or int(ends.max()) > N)):
            raise ValueError(f"buffer_end must hold {R} positions between index.n={n} and k's length {N}")
    if kernels is None or not _usable(index, q, k, v, min_hits):
        return _reference(index, q, k, v, min_hits, scale, ends, return_read_mask)
    qf = q.detach().to(torch.float32).contiguous()
    if not bool(torch.isfinite(qf).all()):
        raise ValueError("q must contain only finite numbers")
    # The index's arrays as numpy views, made once per index (each conversion costs a few µs,
    # and a decode step calls this once per layer).
    views = index.cache.get("fused_views")
    if views is None:
        views = index.cache["fused_views"] = (index.offsets.numpy(), index.entries.numpy(),
                                              index.centred_norms.numpy(), index.mean.contiguous().numpy(), {})
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
    kernels[0]((qf @ index.planes).numpy(), qf.numpy(), mean, R // Hkv, index.K, index.L, min_hits, index.sinks,
               index.recent, n, offsets, entries, cnorm, log_u[min_hits], magicpig._GRID,
               _as_kernel_array(k.detach()), _as_kernel_array(v.detach()), ends.numpy(), np.float32(scale),
               out, lse, sampled, candidates, bad, mask, return_read_mask)
    out, lse, sampled, candidates, mask = (torch.from_numpy(a) for a in (out, lse, sampled, candidates, mask))
    if bad.any():
        # A non-finite key or value was read: the reference names the culprit (ValueError).
        return _reference(index, q, k, v, min_hits, scale, ends, return_read_mask)
    num_exact = index.sinks + index.recent
    keys_read = sampled + num_exact
    stats = {"budget": float(keys_read.double().mean()) / n, "keys_read": keys_read, "sampled": sampled,
             "candidates": candidates, "exact": num_exact, "n": n, "lse": lse, "buffer": ends - n}
    if return_read_mask:
        mask[:, :index.sinks] = True
        mask[:, n - index.recent:] = True
        stats["read_mask"] = mask
    return out.to(q.dtype), stats


def _reference(index, q, k, v, min_hits, scale, ends, return_read_mask):
    """The same contract through :func:`pigviz.magicpig.attend` and a dense buffer pass."""
    from pigviz import magicpig

    R, d = q.shape
    Hkv, N, _ = k.shape
    n = index.n
    # The reference scores q·k / sqrt(d); rescale q so that equals q·k · scale.
    qs = q * (scale * math.sqrt(d)) if scale != 1.0 / math.sqrt(d) else q
    kk, vv = (k, v) if N == n else (k[:, :n], v[:, :n])
    out, stats = magicpig.attend(index, qs, kk, vv, min_hits=min_hits, return_read_mask=return_read_mask,
                                 return_lse=True)
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
    scores = (qf @ kb.transpose(1, 2)) * scale                                   # (Hkv, R/Hkv, nb)
    visible = torch.arange(N - n, device=q.device)[None, :] < (ends - n).view(Hkv, -1, 1)
    scores = scores.masked_fill(~visible, -math.inf)
    lse_b = torch.logsumexp(scores, -1)
    out_b = torch.nan_to_num(torch.softmax(scores, -1), nan=0.0) @ vb
    both = torch.stack([lse.view(Hkv, -1).to(torch.float32), lse_b])
    mix = torch.nan_to_num(torch.softmax(both, 0), nan=0.0)
    merged = mix[0, ..., None] * out.view(Hkv, R // Hkv, -1).to(torch.float32) + mix[1, ..., None] * out_b
    return merged.view(R, -1).to(out.dtype), torch.logsumexp(both, 0).view(R)


def pack_buckets(proj_t: torch.Tensor, row0: int, K: int, buckets: torch.Tensor) -> bool:
    """Write the bucket ids of keys ``row0..`` of one KV head, from their projections on the
    hyperplanes transposed, ``proj_t`` (L*K, B), into ``buckets`` (L, n) int32; False (nothing
    written) if the compiled path is unavailable."""
    kernels = _kernels()
    if kernels is None or proj_t.device.type != "cpu" or buckets.dtype != torch.int32:
        return False
    kernels[1](proj_t.contiguous().numpy(), row0, K, buckets.numpy())
    return True


def build_tables(buckets: torch.Tensor, entries: torch.Tensor, offsets: torch.Tensor) -> bool:
    """Fill one KV head's ``entries`` (L, n) int32 and ``offsets`` (L, 2^K + 1) int64 from its
    ``buckets`` (L, n) by a stable counting sort per table; False if unavailable."""
    kernels = _kernels()
    if kernels is None or buckets.device.type != "cpu":
        return False
    kernels[2](buckets.numpy(), entries.numpy(), offsets.numpy())
    return True
