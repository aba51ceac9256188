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

__all__ = [
    "available",
    "kernels",
    "numba_version",
    "pack_buckets",
    "build_tables",
    "team_ready",
    "relayout_rows",
    "file_tokens",
]

_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}  # vectorised dot products; inf/NaN still honoured


def available() -> bool:
    """Whether the compiled CPU path can run.

    Returns
    -------
    bool
        True where numba imports and ``PIGVIZ_NO_NUMBA`` is not set; False otherwise (every
        caller then runs the torch engine, :func:`pigviz.lsh.magicpig.attend`).
    """
    return kernels() is not None


def kernels():
    """(attend, pack, csr) kernels, or None when numba is missing or PIGVIZ_NO_NUMBA is set.
    The attend kernel on several threads is :func:`attend_threads_kernel` (see
    :func:`team_ready`)."""
    if numba is None or os.environ.get("PIGVIZ_NO_NUMBA", "") not in ("", "0"):
        return None
    return attend_kernel, pack_kernel, csr_kernel


try:
    import numba
except ImportError:  # the torch path runs everything
    numba = None


_TEAM = {"pid": None, "ok": None}


def team_ready(threads: int) -> bool:
    """True if :func:`attend_threads_kernel` can run ``threads`` threads here: numba's
    threading layer is OpenMP (measured: its workqueue layer made two threads slower than
    one, TBB is untested) with that many threads, in the process that started it (GNU
    OpenMP cannot be used after a fork: numba would terminate the child). Sets numba's
    thread count for this thread's next launch."""
    if numba is None or _TEAM["ok"] is False and _TEAM["pid"] == os.getpid():
        return False
    if threads > numba.config.NUMBA_NUM_THREADS:
        return False
    if _TEAM["pid"] is None:
        _TEAM["pid"] = os.getpid()
    elif _TEAM["pid"] != os.getpid():
        _TEAM["ok"] = False
        _TEAM["pid"] = os.getpid()
        return False
    if _TEAM["ok"] is None:
        _TEAM["ok"] = _openmp_layer()
        if not _TEAM["ok"]:
            return False
    numba.set_num_threads(threads)
    return True


def _openmp_layer() -> bool:
    """Whether numba's parallel code runs on OpenMP here, choosing it if nothing has chosen
    yet (numba would prefer TBB where it is installed). An environment asking for another
    layer, a process already on another one, or a machine without libgomp gets Python threads."""
    if os.environ.get("NUMBA_THREADING_LAYER", "default") not in ("default", "omp"):
        return False
    try:
        return numba.threading_layer() == "omp"  # a parallel function ran already
    except ValueError:  # none has: the layer is chosen at the first launch
        pass
    try:
        from numba.np.ufunc import omppool  # noqa: F401  # heavy: loads libgomp; fails where there is none
    except ImportError:
        return False
    numba.config.THREADING_LAYER = "omp"
    return True


def numba_version() -> str | None:
    """numba's version, or None without it (a calibration of the kernel is valid for one build)."""
    return None if numba is None else numba.__version__


# The kernels live at module level so that numba can cache their machine code on disk
# (closures would be compiled again in every process).
if numba is not None:
    # ``prefetch(a, g, t, j)``: ask the CPU to start loading the cache line holding a[g, t, j].
    # The sampled keys sit at random rows; without a hint the core waits for each row in turn.
    # Issued a few rows ahead, the loads overlap and the loop runs at memory bandwidth.
    from llvmlite import binding, ir
    from numba import njit, prange
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
    def _cttz(typingctx, x):
        """Trailing zero bits of a uint64 (x != 0)."""

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]), "llvm.cttz.i64"
            )
            return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 1)])

        return types.uint64(x), codegen

    @intrinsic
    def _claim(typingctx, counter):
        """The next row: atomically counter[0] += 1, returning the old value. Threads that
        share ``counter`` take rows as they become free, so one that the OS preempts (a busy
        machine) takes fewer instead of holding the others up."""

        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [context.get_constant(types.intp, 0)])
            one = ir.Constant(ir.IntType(64), 1)
            return builder.atomic_rmw("add", ptr, one, "monotonic")

        return types.int64(counter), codegen

    @intrinsic
    def _f64_from_bits(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.DoubleType())

        return types.float64(x), codegen

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

    def _line_elems(a):
        raise NotImplementedError

    @overload(_line_elems, inline="always")
    def _line_elems_of(a):
        """Elements of ``a``'s dtype in a 64-byte cache line, as a compile-time constant (``a.itemsize``
        is read from the array at run time, which leaves the hint loop below a loop)."""
        n = 64 // (a.dtype.bitwidth // 8)
        return lambda a: n

    @njit(cache=True, nogil=True, inline="always")
    def _prefetch_row(a, g, t, d):
        """One hint per 64-byte cache line of row a[g, t, :d]. The head sizes of the course's models
        get loops of constant length, which compile to straight hints: measured here, a gather of
        random rows runs about 1/6 faster than with a counted loop between its loads."""
        step = _line_elems(a)
        if d == 128:
            for j in range(0, 128, step):
                prefetch(a, g, t, j)
        elif d == 64:
            for j in range(0, 64, step):
                prefetch(a, g, t, j)
        else:
            for j in range(0, d, step):
                prefetch(a, g, t, j)

    @njit(cache=True, fastmath=_FASTMATH, nogil=True)
    def _row_dot(q, r, k, g, t, d):
        acc = np.float32(0.0)
        for j in range(d):
            acc += q[r, j] * as_f32(k[g, t, j])
        return acc

    # arccos and exp in float64 without a call into libm, so that the loops over the read
    # list vectorise (a libm call per key would also cost more than the rest of its work).
    # Both are accurate to double precision's last few bits: rounded to float32 they give
    # libm's float32 result (correctly rounded) but for the rare near-tie.

    @njit(cache=True, nogil=True, inline="always")
    def _acos(x):
        """arccos(x), x float32 in [-1, 1], as float32 (fdlibm's rational asin)."""
        xd = np.float64(x)
        a = abs(xd)
        big = a >= 0.5
        z = 0.5 * (1.0 - a) if big else xd * xd
        t = math.sqrt(z) if big else xd
        num = 3.47933107596021167570e-05
        num = num * z + 7.91534994289814532176e-04
        num = num * z - 4.00555345006794114027e-02
        num = num * z + 2.01212532134862925881e-01
        num = num * z - 3.25565818622400915405e-01
        num = (num * z + 1.66666666666666657415e-01) * z
        den = 7.70381505559019352791e-02
        den = den * z - 6.88283971605453293030e-01
        den = den * z + 2.02094576023350569471e00
        den = den * z - 2.40339491173441421878e00
        den = den * z + 1.0
        asin_t = t + t * (num / den)  # asin(t)
        if big:
            r = 2.0 * asin_t  # acos(|x|)
            r = math.pi - r if xd < 0 else r
        else:
            r = 0.5 * math.pi - asin_t
        return np.float32(r)

    @njit(cache=True, nogil=True, inline="always")
    def _exp(x):
        """exp(x), x float32 <= 0 (a score minus the maximum), as float32."""
        xd = max(np.float64(x), -200.0)  # exp(-200) is 0 in float32; a NaN stays NaN
        n = math.floor(xd * 1.4426950408889634 + 0.5)
        r = (xd - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10  # |r| <= ln2 / 2
        p = 1.0 / 362880  # Taylor to r^9: relative error below 1e-10 for |r| <= ln2 / 2
        for c in (1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0):
            p = p * r + c
        scale = _f64_from_bits((np.int64(n if n == n else 0) + 1023) << 52)  # 2^n
        return np.float32(p * scale)

    @njit(cache=True, fastmath=_FASTMATH, nogil=True)
    def _centred_norm(mean, k, g, t, d):
        """|k - mean| of key t of KV head g (the index stores the same in centred_norms)."""
        acc = np.float32(0.0)
        for j in range(d):
            x = as_f32(k[g, t, j]) - mean[g, j]
            acc += x * x
        return np.float32(math.sqrt(acc))

    @njit(cache=True, nogil=True)
    def _all_finite(scores, nread):
        bad = 0
        for i in range(nread):
            bad |= not np.isfinite(scores[i])
        return bad == 0

    @njit(cache=True, nogil=True)
    def _correct(scores, qn, qm, scale, log_u, grid, tmp):
        """``scores`` (the sampled keys' q·k) become q·k · scale - log u.

        ``tmp`` holds their |k - mean|. Two loops, so that the costly first one (a division and
        an arccos per key) vectorises: p = 1 - arccos(cos(q, k - mean)) / pi, then the table
        lookup. Called on slices, so the loops start at 0 (a loop from an arbitrary
        start makes numba guard each index against negative values, which stops LLVM from
        vectorising it)."""
        n = scores.shape[0]
        _inclusion_p(scores, tmp, qn, qm)
        for i in range(n):
            pos = min(max(np.float64(tmp[i]), 0.0), 1.0) * grid
            pos = pos if pos == pos else 0.0  # a NaN key (flagged as non-finite) reads row 0
            lo = min(math.floor(pos), grid - 1.0)
            frac = pos - lo
            li = int(lo)
            scores[i] = scores[i] * scale - np.float32(log_u[li] * (1.0 - frac) + log_u[li + 1] * frac)

    @njit(cache=True, nogil=True, error_model="numpy")
    def _inclusion_p(dots, cn, qn, qm):
        """cn (|k - mean|) becomes p = 1 - arccos(cos(q, k - mean)) / pi, with
        cos(q, k - mean) = (q·k - q·mean) / (|q| |k - mean|) (0 if that norm is 0)."""
        pi = np.float32(math.pi)
        tiny = np.float32(1.1754944e-38)
        for i in range(dots.shape[0]):
            norm = qn * cn[i]
            cos = (dots[i] - qm) / max(norm, tiny) if norm > 0 else np.float32(0.0)
            cos = min(max(cos, np.float32(-1.0)), np.float32(1.0))
            cn[i] = np.float32(1.0) - _acos(cos) / pi

    @njit(cache=True, nogil=True, fastmath=_FASTMATH)
    def _weights(scores, nread, m):
        """scores[:nread] become exp(score - m); returns their sum (float64)."""
        total = 0.0
        for i in range(nread):
            w = _exp(scores[i] - m)
            scores[i] = w
            total += w
        return total

    @njit(cache=True, nogil=True, inline="always")
    def _mark_hits(run, once, twice):
        """Stage 3 of a row, one bucket's run of token ids: each id's bit set in ``once``, and in
        ``twice`` if ``once`` had it already."""
        for i in range(run.shape[0]):
            t = np.uint32(run[i])
            w = t >> np.uint32(6)
            b = np.uint64(1) << np.uint64(t & np.uint32(63))
            o = once[w]
            twice[w] |= o & b
            once[w] = o | b

    @njit(cache=True, nogil=True, inline="always")
    def _take_sample(hit, once, twice, lo_t, hi_t, ids, nread):
        """Stage 4 of a row: the tokens of ``hit``'s set bits in [lo_t, hi_t) appended to ``ids``
        from ``nread`` on, in token order; both bit sets cleared. Returns the new ``nread``."""
        for w in range(lo_t >> 6, (hi_t + 63) >> 6):
            x = hit[np.uint64(w)]
            while x:
                t = (w << 6) | np.int64(_cttz(x))
                ids[np.uint64(nread)] = t  # kept only inside the sampleable range (branch-free)
                nread += (t >= lo_t) & (t < hi_t)
                x &= x - np.uint64(1)
        for w in range(once.shape[0]):  # words outside the range may hold hits too
            once[w] = 0
            twice[w] = 0
        return nread

    @njit(cache=True, nogil=True)
    def _softmax_mix(v, g, ids, scores, nread, acc, blk):
        """Stage 7 of a row: ``scores[:nread]`` become softmax weights (unnormalised), and
        ``acc`` (dv,) float64 the weighted sum of the V rows ``ids[:nread]`` of KV head g,
        each read once; ``blk`` (dv,) float32 scratch. Returns (max score, sum of weights)."""
        dv = acc.shape[0]
        m = np.float32(-np.inf)
        for i in range(nread):
            m = max(m, scores[i])
        total = _weights(scores, nread, m)
        for j in range(dv):
            acc[j] = 0.0
        # float32 partial sums over blocks of 32 rows, added up in float64: half the
        # vector work of a float64 sum per row, and as accurate for thousands of rows.
        for i0 in range(0, nread, 32):
            for j in range(dv):
                blk[j] = 0.0
            for i in range(i0, min(i0 + 32, nread)):
                if i + ahead < nread:
                    _prefetch_row(v, g, ids[i + ahead], dv)
                w = scores[i]
                t = ids[i]
                for j in range(dv):
                    blk[j] += w * as_f32(v[g, t, j])
            for j in range(dv):
                acc[j] += np.float64(blk[j])
        return m, total

    @njit(cache=True, nogil=True)
    def _hash_row(proj, r, K, L, g, offsets, ends, slot, signs):
        """Stage 1 of a row: its bucket in each table (into slot[:, 0]); starts loading the
        buckets' offsets and ends."""
        _row_buckets(proj, r, K, L, slot, signs)
        for l in range(L):
            prefetch(offsets, g, l, slot[l, 0])
            prefetch(ends, g, l, slot[l, 0])

    @njit(cache=True, nogil=True)
    def _row_buckets(proj, r, K, L, slot, signs):
        """Row r's bucket in each table, into slot[:, 0]. The signs of its L*K projections are
        packed into 64-bit words first (a loop that vectorises), then each table's K bits are
        cut out of them. ``signs`` holds (L*K + 63) // 64 + 1 words."""
        row = proj[r]
        nbits = row.shape[0]
        nw = (nbits + 63) // 64
        for w in range(nw):
            word = np.uint64(0)
            base = w * 64
            for j in range(min(64, nbits - base)):
                word |= np.uint64(row[base + j] > 0) << np.uint64(j)
            signs[w] = word
        signs[nw] = 0
        mask = (np.uint64(1) << np.uint64(K)) - np.uint64(1)
        for l in range(L):
            bit = l * K
            sh = np.uint64(bit & 63)
            word = signs[bit >> 6] >> sh
            if sh + np.uint64(K) > np.uint64(64):  # the table's bits straddle two words
                word |= signs[(bit >> 6) + 1] << (np.uint64(64) - sh)
            slot[l, 0] = np.int64(word & mask)

    @njit(cache=True, nogil=True)
    def _given_row(buckets, r, L, g, offsets, ends, slot):
        """Stage 1 of a row whose buckets were computed elsewhere (the GPU side of the
        offloaded placement hashes the query): copies them into slot[:, 0] and starts
        loading the buckets' offsets and ends."""
        for l in range(L):
            b = buckets[r, l]
            slot[l, 0] = b
            prefetch(offsets, g, l, b)
            prefetch(ends, g, l, b)

    @njit(cache=True, nogil=True)
    def _stage1(proj, buckets, r, K, L, g, offsets, ends, slot, signs):
        if buckets.shape[0] > 0:
            _given_row(buckets, r, L, g, offsets, ends, slot)
        else:
            _hash_row(proj, r, K, L, g, offsets, ends, slot, signs)

    @njit(cache=True, nogil=True)
    def _bucket_bounds(offsets, ends, entries, L, g, slot):
        """Stage 2 of a row: each bucket's [start, end) in ``entries`` (into slot); starts
        loading the buckets' token ids (up to 8 cache lines each). Returns the candidates.
        ``ends`` is ``offsets[..., 1:]`` for packed tables, else where each bucket's run ends
        (tables with room to grow)."""
        cand = 0
        per_line = _line_elems(entries)  # 16 int32 or 32 uint16 ids per 64-byte line
        for l in range(L):
            b = slot[l, 0]
            s = np.int64(offsets[g, l, b])
            e = np.int64(ends[g, l, b])
            slot[l, 0] = s
            slot[l, 1] = e
            cand += e - s
            for i in range(s, min(e, s + 8 * per_line), per_line):
                prefetch(entries, g, l, i)
            if e - 1 > s + per_line - 1:
                prefetch(entries, g, l, e - 1)  # the last line, if the run does not start it
        return cand

    @njit(cache=True, nogil=True)
    def attend_kernel(
        proj,
        buckets,
        q,
        mean,
        rows_per_kv,
        K,
        L,
        min_hits,
        sinks,
        recent,
        n_idx,
        read_exact,
        offsets,
        ends,
        entries,
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
        counter,
        hits,
        touched,
        ids,
        scores,
        tmp,
        acc,
        bounds,
        bits,
    ):
        """One decode step of R query rows, shared with the other threads that hold the same
        ``counter`` ((1,) int64, 0 at the start): each thread takes the next free row
        (:func:`_claim`) until none is left. Returns the keys sampled over the rows this thread
        took, or -1 if one of them read a non-finite number.

        Each row's work and results depend on that row alone (its own buckets, read list,
        softmax and sums, in a fixed order), so it does not matter which thread takes it: any
        thread count gives the same output to the last bit.

        A row's buckets come from ``buckets`` (R, L) when it has rows (hashed elsewhere), else
        from the signs of ``proj`` (R, L*K) = q @ planes. ``read_exact``: the read list starts
        with the exact set (sinks + recent); False reads only the sample (and the buffer), for
        a caller that attends the exact set elsewhere. ``entries`` holds int32 or uint16 ids;
        ``offsets`` int32 or int64; bucket b of table l runs from ``offsets[g, l, b]`` to
        ``ends[g, l, b]`` (``offsets[..., 1:]`` for packed tables).

        Scratch comes from the caller, one set per thread, reused between calls (see
        :class:`pigviz.lsh.fused._Workspace`): ``hits`` (n_idx,) uint8 and ``bits``
        (2, n_idx // 64 + 1) uint64, both all zero (and left all zero), ``touched``
        (n_idx + 1,) int32, ``ids`` (>= max(buffer_end) + 1,) int64, ``scores`` and ``tmp``
        (same,) float32, ``acc`` (dv,) float64, ``bounds`` (2, L, 2) int64.

        The rows run as a pipeline, one row ahead, so that the random reads of the tables
        overlap with work instead of waiting in turn: as a row starts, the next row's buckets
        are found (their offsets start loading); once the row's buckets are walked, the next
        row's bucket bounds are read (its token ids start loading) while this row's keys and
        values are read."""
        R, d = q.shape
        dv = out.shape[1]
        nbad = 0
        total_sampled = 0
        signs = np.empty((L * K + 63) // 64 + 1, dtype=np.uint64)
        r = _claim(counter)
        if r < R:
            _stage1(proj, buckets, r, K, L, r // rows_per_kv, offsets, ends, bounds[0], signs)
            candidates_out[r] = _bucket_bounds(offsets, ends, entries, L, r // rows_per_kv, bounds[0])
        turn = 0
        while r < R:
            g = r // rows_per_kv
            slot = bounds[turn & 1]
            ahead_slot = bounds[(turn + 1) & 1]
            nxt = _claim(counter)
            if nxt < R:
                _stage1(proj, buckets, nxt, K, L, nxt // rows_per_kv, offsets, ends, ahead_slot, signs)
            # 1-2. hit counting over the candidates, then 3-4. the read list: exact set,
            # sampled set (in token order), buffer. Unsigned indices: numba then skips its
            # negative-index guard on every access.
            nread = 0
            if read_exact:
                for t in range(sinks):
                    ids[nread] = t
                    nread += 1
                for t in range(n_idx - recent, n_idx):
                    ids[nread] = t
                    nread += 1
            first_sampled = nread
            lo_t = sinks
            hi_t = n_idx - recent
            if min_hits <= 2:
                # Two bit sets, "hit once" and "hit twice", 1/4 of a byte counter's memory
                # (they stay in L1 up to ~100k tokens); the sample is read off the words of
                # the set that min_hits names, which also clears both.
                once = bits[0]
                twice = bits[1]
                for l in range(L):
                    _mark_hits(entries[g, l, slot[l, 0] : slot[l, 1]], once, twice)
                nread = _take_sample(once if min_hits == 1 else twice, once, twice, lo_t, hi_t, ids, nread)
            else:
                # A byte counter per token; a token's first hit puts it on the touched list
                # (branch-free), so only touched counters are cleared afterwards.
                ntouched = 0
                for l in range(L):
                    run = entries[g, l, slot[l, 0] : slot[l, 1]]
                    for i in range(run.shape[0]):
                        t = np.uint32(run[i])
                        c = hits[t]
                        touched[np.uint64(ntouched)] = t  # kept only on a first hit (branch-free)
                        ntouched += c == 0
                        hits[t] = c + (c < 255)
                for i in range(ntouched):
                    t = np.uint32(touched[i])
                    c = hits[t]
                    hits[t] = 0
                    ids[np.uint64(nread)] = t  # kept only if sampled (branch-free)
                    nread += (c >= min_hits) & (t >= lo_t) & (t < hi_t)
            end_sampled = nread
            if nxt < R:  # the next row's token ids load while this row reads its keys and values
                candidates_out[nxt] = _bucket_bounds(offsets, ends, entries, L, nxt // rows_per_kv, ahead_slot)
            sampled_out[r] = end_sampled - first_sampled
            total_sampled += end_sampled - first_sampled
            for t in range(n_idx, buffer_end[r]):
                ids[nread] = t
                nread += 1
            if want_mask:
                for i in range(first_sampled, end_sampled):
                    mask[r, ids[i]] = True
            # 5. q·k for every key read, each K row requested `ahead` keys before it is used;
            # for a sampled key also |k - mean|, from the row just read (the index's stored
            # norms would be one more scattered read per key, costly at long contexts).
            for i in range(nread):
                a = i + ahead
                if a < nread:
                    _prefetch_row(k, g, ids[a], d)
                t = ids[i]
                scores[i] = _row_dot(q, r, k, g, t, d)
                if i >= first_sampled and i < end_sampled:
                    tmp[i - first_sampled] = _centred_norm(mean, k, g, t, d)
            finite = _all_finite(scores, nread)
            # 6. log u of each sampled key, from cos(q, k - mean) = (q.k - q.mean) / (|q| |k - mean|)
            qm = np.float32(0.0)
            qq = np.float32(0.0)
            for j in range(d):
                qm += q[r, j] * mean[g, j]
                qq += q[r, j] * q[r, j]
            qn = np.float32(math.sqrt(qq))
            lo, hi = first_sampled, end_sampled
            _correct(scores[lo:hi], qn, qm, scale, log_u, grid, tmp[: hi - lo])
            for i in range(first_sampled):
                scores[i] = scores[i] * scale
            for i in range(end_sampled, nread):
                scores[i] = scores[i] * scale
            # 7. softmax weights, then the value mix: each V row read once, weighted, added
            m, total = _softmax_mix(v, g, ids, scores, nread, acc, tmp[:dv])
            if nread == 0:
                for j in range(dv):
                    out[r, j] = 0.0
                lse[r] = -np.inf
            else:
                inv = 1.0 / total
                for j in range(dv):
                    o = np.float32(acc[j] * inv)
                    out[r, j] = o
                    if not np.isfinite(o):
                        finite = False
                lse[r] = m + np.float32(math.log(total))
            nbad += 0 if finite else 1
            r = nxt
            turn += 1
        return -1 if nbad else total_sampled

    @njit(cache=True, nogil=True, parallel=True)
    def attend_threads_kernel(threads, results, hits, touched, ids, scores, tmp, acc, bounds, bits, *args):
        """:func:`attend_kernel` on ``threads`` threads of numba's OpenMP pool: ``args`` are its
        arguments up to ``counter``, which the threads share; thread t uses row t of each
        stacked scratch array (``hits`` (>= threads, n_idx) and so on) and writes its return
        value into ``results[t]``. An OpenMP team starts in a few µs where a Python thread
        takes tens (a wake-up, the GIL, numba's argument checks), which decides whether a
        second thread pays for SmolLM2's 9 rows at 8k tokens."""
        for t in prange(threads):
            results[t] = attend_kernel(
                *args, hits[t], touched[t], ids[t], scores[t], tmp[t], acc[t], bounds[t], bits[t]
            )

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

    @njit(cache=True, nogil=True)
    def _relayout(entries, offsets, ends, limits, r, scratch):
        """Lay row r of the tables out again, compacted, in bucket order: each bucket with
        ``size // 8 + 1`` spare slots, the rest of the row free. Returns the ids copied, or
        minus the row width it needs (nothing changed) when the row is too narrow: the laid-out
        ids, a quarter more and two moves of the largest bucket (see :func:`file_tokens_kernel`)."""
        nb = ends.shape[1]
        width = entries.shape[1]
        need = 0
        largest = 0
        for b in range(nb):
            size = np.int64(ends[r, b]) - np.int64(offsets[r, b])
            cap = size + (size >> 3) + 1
            need += cap
            largest = max(largest, cap)
        room = need + (need >> 2) + 2 * largest + 2
        if room > width:
            return -room
        pos = 0
        moved = 0
        for b in range(nb):
            s = np.int64(offsets[r, b])
            size = np.int64(ends[r, b]) - s
            for i in range(size):
                scratch[pos + i] = entries[r, s + i]
            offsets[r, b] = pos
            ends[r, b] = pos + size
            pos += size + (size >> 3) + 1
            limits[r, b] = pos
            moved += size
        for i in range(pos):
            entries[r, i] = scratch[i]
        offsets[r, nb] = pos
        return moved

    @njit(cache=True, nogil=True)
    def relayout_rows_kernel(entries, offsets, ends, limits, scratch):
        """:func:`_relayout` of every row (they fit: the caller sized them); returns the ids copied."""
        moved = 0
        for r in range(entries.shape[0]):
            moved += max(_relayout(entries, offsets, ends, limits, r, scratch), 0)
        return moved

    @njit(cache=True, nogil=True)
    def file_tokens_kernel(entries, offsets, ends, limits, codes, t0, r0, i0, scratch, counts):
        """File token t0 + i in bucket ``codes[r, i]`` of row r (a (KV head, table) pair), for
        rows r0.. (row r0 from i = i0 on): written at its bucket's end. A full bucket first
        moves to the row's free end with room for twice its size (+2); a row whose free end is
        too short is laid out again (:func:`_relayout`). ``counts`` (5,) int64 adds the ids
        written, the ids moved, the bucket moves and the layouts; returns -1 when done, or,
        where a row needs to be wider, the position r * c + i to resume at once the caller has
        widened every row to at least counts[4].

        Rows: ``entries`` (R, width), ``offsets`` (R, 2^K + 1) (the last column: the used
        width), ``ends`` and ``limits`` (R, 2^K): bucket b holds entries[r, offsets[r, b] :
        ends[r, b]] and has room up to limits[r, b]."""
        R = entries.shape[0]
        width = entries.shape[1]
        nb = ends.shape[1]
        c = codes.shape[1]
        for r in range(r0, R):
            for i in range(i0 if r == r0 else 0, c):
                b = codes[r, i]
                e = np.int64(ends[r, b])
                if e == limits[r, b]:
                    s = np.int64(offsets[r, b])
                    size = e - s
                    cap = 2 * size + 2
                    top = np.int64(offsets[r, nb])
                    if top + cap > width:
                        moved = _relayout(entries, offsets, ends, limits, r, scratch)
                        if moved < 0:
                            counts[4] = -moved
                            return r * c + i
                        counts[1] += moved
                        counts[3] += 1
                        e = np.int64(ends[r, b])  # after a layout every bucket has a spare slot
                    else:
                        for j in range(size):
                            entries[r, top + j] = entries[r, s + j]
                        offsets[r, b] = top
                        e = top + size
                        limits[r, b] = top + cap
                        offsets[r, nb] = top + cap
                        counts[1] += size
                        counts[2] += 1
                entries[r, e] = t0 + i
                ends[r, b] = e + 1
                counts[0] += 1
        return -1


def relayout_rows(entries: np.ndarray, offsets: np.ndarray, ends: np.ndarray, limits: np.ndarray, scratch) -> int:
    """Every row of the tables laid out with room to grow (:func:`pigviz.lsh.index.make_room`);
    returns the ids copied. Needs the compiled kernels."""
    return int(relayout_rows_kernel(entries, offsets, ends, limits, scratch))


def file_tokens(entries, offsets, ends, limits, codes, t0: int, r0: int, i0: int, scratch, counts) -> int:
    """:func:`file_tokens_kernel` (the insertion of :func:`pigviz.lsh.index.insert_tokens`)."""
    return int(file_tokens_kernel(entries, offsets, ends, limits, codes, t0, r0, i0, scratch, counts))


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
