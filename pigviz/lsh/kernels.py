"""The compiled (numba) kernels behind MagicPIG's fast CPU path: the fused decode step used by
:mod:`pigviz.lsh.fused`, and the bucket packing and counting sort that
:func:`pigviz.lsh.index.build_index` uses to build its CSR tables.

numba compiles them on first use and caches the machine code on disk (no compiler is needed at
install time). Without numba, or with ``PIGVIZ_NO_NUMBA=1``, :func:`available` is False and every
caller takes its torch path.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

__all__ = ["available", "kernels", "pack_buckets", "build_tables"]

_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}  # vectorised dot products; inf/NaN still honoured


def available() -> bool:
    """True if the compiled CPU path can run (numba importable and not switched off)."""
    return kernels() is not None


def kernels():
    """(attend, pack, csr) kernels, or None when numba is missing or PIGVIZ_NO_NUMBA is set."""
    if numba is None or os.environ.get("PIGVIZ_NO_NUMBA", "") not in ("", "0"):
        return None
    return attend_kernel, pack_kernel, csr_kernel


try:
    import numba
except ImportError:  # the torch path runs everything
    numba = None


# The kernels live at module level so that numba can cache their machine code on disk
# (closures would be compiled again in every process).
if numba is not None:
    # ``prefetch(a, g, t, j)``: ask the CPU to start loading the cache line holding a[g, t, j].
    # The sampled keys sit at random rows; without a hint the core waits for each row in turn.
    # Issued a few rows ahead, the loads overlap and the loop runs at memory bandwidth.
    from llvmlite import binding, ir
    from numba import njit
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    _PREFETCH = "llvm.prefetch.p0" if binding.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"

    def _prefetch_codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = [context.cast(builder, a, t, types.intp) for a, t in zip(args[1:], signature.args[1:])]
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), _PREFETCH
        )
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])  # read, keep in cache, data
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

    ahead = 16  # rows prefetched ahead of the one being read

    @njit(cache=True, nogil=True)
    def _prefetch_row(a, g, t, d):
        step = 64 // a.itemsize  # one hint per 64-byte cache line
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
            acc[j] += np.float64(w * as_f32(v[g, t, j]))  # thousands of rows summed: float64

    @njit(cache=True, nogil=True)
    def _hash_row(proj, r, K, L, g, offsets, slot):
        """Stage 1 of a row: its bucket in each table (into slot[:, 0]); starts loading the
        buckets' offsets."""
        for l in range(L):
            b = 0
            for j in range(K):
                if proj[r, l * K + j] > 0:
                    b |= 1 << j
            slot[l, 0] = b
            prefetch(offsets, g, l, b)

    @njit(cache=True, nogil=True)
    def _bucket_bounds(offsets, entries, L, g, slot):
        """Stage 2 of a row: each bucket's [start, end) in ``entries`` (into slot); starts
        loading the buckets' token ids (up to 8 cache lines each). Returns the candidates."""
        cand = 0
        for l in range(L):
            b = slot[l, 0]
            s = offsets[g, l, b]
            e = offsets[g, l, b + 1]
            slot[l, 0] = s
            slot[l, 1] = e
            cand += e - s
            for i in range(s, min(e, s + 128), 16):  # 16 int32 ids per 64-byte line
                prefetch(entries, g, l, i)
            if e - 1 > s + 15:
                prefetch(entries, g, l, e - 1)  # the last line, if the run does not start it
        return cand

    @njit(cache=True, nogil=True)
    def attend_kernel(
        proj,
        q,
        mean,
        rows_per_kv,
        K,
        L,
        min_hits,
        sinks,
        recent,
        n_idx,
        offsets,
        entries,
        cnorm,
        log_u,
        grid,
        k,
        v,
        buffer_end,
        scale,
        out,
        lse,
        sampled_out,
        candidates_out,
        mask,
        want_mask,
        hits,
        touched,
        ids,
        acc,
        bounds,
    ):
        """One decode step of R query rows; returns the keys sampled over all rows, or -1 if
        a row read a non-finite number.

        Scratch comes from the caller and is reused between calls (see
        :class:`pigviz.lsh.fused._Workspace`): ``hits`` (n_idx,) uint8 all zero (and left all
        zero), ``touched`` (n_idx + 1,) int32, ``ids`` (>= max(buffer_end) + 1,) int64,
        ``acc`` (dv,) float64, ``bounds`` (3, L, 2) int64.

        The rows run as a pipeline, so that the random reads of the tables overlap with work
        instead of waiting in turn: while row r is walked and mixed, row r + 1's bucket
        bounds are read (its token ids start loading) and row r + 2's buckets are hashed
        (its offsets start loading)."""
        R, d = q.shape
        dv = out.shape[1]
        nbad = 0
        total_sampled = 0
        pi = np.float32(math.pi)
        if R > 0:
            _hash_row(proj, 0, K, L, 0, offsets, bounds[0])
        if R > 1:
            _hash_row(proj, 1, K, L, 1 // rows_per_kv, offsets, bounds[1])
        if R > 0:
            candidates_out[0] = _bucket_bounds(offsets, entries, L, 0, bounds[0])
        for r in range(R):
            g = r // rows_per_kv
            if r + 2 < R:
                _hash_row(proj, r + 2, K, L, (r + 2) // rows_per_kv, offsets, bounds[(r + 2) % 3])
            if r + 1 < R:
                candidates_out[r + 1] = _bucket_bounds(offsets, entries, L, (r + 1) // rows_per_kv, bounds[(r + 1) % 3])
            slot = bounds[r % 3]
            # 1-2. hit counting over the candidates. A token's first hit puts it on the
            # touched list (branch-free), so only touched counters are cleared afterwards.
            ntouched = 0
            for l in range(L):
                for i in range(slot[l, 0], slot[l, 1]):
                    t = entries[g, l, i]
                    c = hits[t]
                    touched[ntouched] = t  # kept only on a first hit (branch-free)
                    ntouched += c == 0
                    hits[t] = c + (c < 255)
            # 3-4. the read list: exact set, sampled set, buffer.
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
                ids[nread] = t  # kept only if sampled (branch-free)
                nread += (c >= min_hits) & (t >= lo_t) & (t < hi_t)
            end_sampled = nread
            sampled_out[r] = end_sampled - first_sampled
            total_sampled += end_sampled - first_sampled
            for t in range(n_idx, buffer_end[r]):
                ids[nread] = t
                nread += 1
            if want_mask:
                for i in range(first_sampled, end_sampled):
                    mask[r, ids[i]] = True
            # 5. one pass over the read list: q·k, the log u correction of sampled keys,
            # and the value mix with a running maximum (online softmax). Each key's K row,
            # V row and |k - mean| are requested `ahead` keys before they are used.
            qm = np.float32(0.0)  # q . mean and |q|, for cos(q, k - mean)
            qq = np.float32(0.0)
            for j in range(d):
                qm += q[r, j] * mean[g, j]
                qq += q[r, j] * q[r, j]
            qn = np.float32(math.sqrt(qq))
            for j in range(dv):
                acc[j] = 0.0
            m = np.float32(-np.inf)
            total = 0.0
            finite = True
            for i in range(nread):
                a = i + ahead
                if a < nread:
                    ta = ids[a]
                    _prefetch_row(k, g, ta, d)
                    _prefetch_row(v, g, ta, dv)
                    if a >= first_sampled and a < end_sampled:
                        prefetch2(cnorm, g, ta)
                t = ids[i]
                dot = _row_dot(q, r, k, g, t, d)
                if not np.isfinite(dot):
                    finite = False
                s = dot * scale
                if i >= first_sampled and i < end_sampled:
                    # log u from cos(q, k - mean) = (q.k - q.mean) / (|q| |k - mean|)
                    norm = qn * cnorm[g, t]
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
                    if not (pos == pos):  # NaN key: flagged as non-finite above
                        lo = 0
                    frac = pos - lo
                    li = int(lo)
                    s = s - np.float32(log_u[li] * (1.0 - frac) + log_u[li + 1] * frac)
                if s > m:  # a new maximum: rescale what is summed so far
                    c = math.exp(np.float64(m) - np.float64(s))
                    total *= c
                    for j in range(dv):
                        acc[j] *= c
                    m = s
                w = np.float32(math.exp(s - m))
                total += w
                _add_row(acc, w, v, g, t, dv)
            if nread == 0:
                for j in range(dv):
                    out[r, j] = 0.0
                lse[r] = -np.inf
                nbad += 0 if finite else 1
                continue
            inv = 1.0 / total
            for j in range(dv):
                o = np.float32(acc[j] * inv)
                out[r, j] = o
                if not np.isfinite(o):
                    finite = False
            lse[r] = m + np.float32(math.log(total))
            nbad += 0 if finite else 1
        return -1 if nbad else total_sampled

    @njit(cache=True, nogil=True)
    def pack_kernel(proj_t, row0, K, buckets):
        """Bucket ids of keys row0.. of one KV head from their projections, transposed
        (L*K, B) so that each bit is set for B keys in one vectorised sweep."""
        L = buckets.shape[0]
        B = proj_t.shape[1]
        for l in range(L):
            out = buckets[l, row0 : row0 + B]
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


def pack_buckets(proj_t: torch.Tensor, row0: int, K: int, buckets: torch.Tensor) -> bool:
    """Write the bucket ids of keys ``row0..`` of one KV head, from their projections on the
    hyperplanes transposed, ``proj_t`` (L*K, B), into ``buckets`` (L, n) int32; False (nothing
    written) if the compiled path is unavailable."""
    compiled = kernels()
    if compiled is None or proj_t.device.type != "cpu" or buckets.dtype != torch.int32:
        return False
    compiled[1](proj_t.contiguous().numpy(), row0, K, buckets.numpy())
    return True


def build_tables(buckets: torch.Tensor, entries: torch.Tensor, offsets: torch.Tensor) -> bool:
    """Fill one KV head's ``entries`` (L, n) int32 and ``offsets`` (L, 2^K + 1) int64 from its
    ``buckets`` (L, n) by a stable counting sort per table; False if unavailable."""
    compiled = kernels()
    if compiled is None or buckets.device.type != "cpu":
        return False
    compiled[2](buckets.numpy(), entries.numpy(), offsets.numpy())
    return True
