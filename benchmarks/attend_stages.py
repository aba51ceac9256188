"""The stages of MagicPIG's compiled decode step run one after another, each timed on its own
and set against a floor measured in the same run (``bench_attend.py --stages``).

The fused kernel (:func:`pigviz.lsh.kernels.attend_kernel`) interleaves its stages row by row so
that one row's memory reads overlap another's work; that makes its stages impossible to time
apart. Here the same steps, built from the kernel's own compiled pieces, run stage by stage
over all query rows, each stage's results kept in arrays for the next:

1. **hash**: q @ planes (torch) and the signs cut into one bucket id per table;
2. **walk**: each bucket's bounds from ``offsets``, its run of token ids from ``entries``
   copied into a per-row candidate list (the fused kernel reads them in place; the copy is
   the price of timing the walk apart, and is counted in its bytes);
3. **hits**: the "hit once / hit twice" bit sets over the candidates, the sample read off
   them in token order, after the exact set (sinks + recent window);
4. **K**: q·k of every key read, and |k - mean| of every sampled one, from its K row;
5. **mix**: the sampling correction (-log u), the softmax and the value mix, from the V rows.

Floors, measured on the same arrays' sizes and in the same process:

* **stream**: bytes / the sequential read bandwidth (a 1 GiB float32 sum);
* **gather**: the simplest loop (a sum) over random rows of the same size, as many per query
  row as the stage reads, in ascending order as the read list is (the better of with and
  without prefetch hints), on an array of the cache's size;
* **runs**: the same sum over runs of token ids of the walk's lengths at random places of a
  table of the same size;
* **bit test**: one read of the bit sets per candidate (the same ids), no update: the least
  any counting of hits must do;
* **gemm**: q @ planes's multiply-adds at the rate of a large one-thread float32 matmul, or
  the planes' bytes streamed, whichever is longer.
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np
import torch

from pigviz.lsh import kernels, magicpig

if kernels.numba is None:  # pragma: no cover - the benchmark reports this
    raise ImportError("bench_attend --stages needs numba (pip install pigviz[fast])")

from numba import njit  # noqa: E402

from pigviz.lsh.kernels import (  # noqa: E402
    _FASTMATH,
    _bucket_bounds,
    _centred_norm,
    _correct,
    _mark_hits,
    _prefetch_row,
    _row_buckets,
    _row_dot,
    _softmax_mix,
    _take_sample,
    ahead,
    as_f32,
    prefetch,
)

STAGES = ("hash", "walk", "hits", "K", "mix")


@njit(cache=True, nogil=True)
def hash_rows(proj, K, L, slots, signs):
    # Without the kernel's prefetch of each bucket's offsets: issued for every row at once, the
    # hints would queue behind one another here; the walk pays for those misses instead.
    for r in range(proj.shape[0]):
        _row_buckets(proj, r, K, L, slots[r], signs)


@njit(cache=True, nogil=True)
def walk_rows(offsets, ends, entries, L, rows_per_kv, slots, cand, ncand):
    R = slots.shape[0]
    if R:
        _bucket_bounds(offsets, ends, entries, L, 0, slots[0])
    for r in range(R):
        if r + 1 < R:  # one row ahead, as the kernel: the next row's ids load while this one copies
            _bucket_bounds(offsets, ends, entries, L, (r + 1) // rows_per_kv, slots[r + 1])
        g = r // rows_per_kv
        c = 0
        for l in range(L):
            run = entries[g, l, slots[r, l, 0] : slots[r, l, 1]]
            for i in range(run.shape[0]):
                cand[r, c + i] = np.uint32(run[i])
            c += run.shape[0]
        ncand[r] = c


@njit(cache=True, nogil=True)
def count_hits(cand, ncand, sinks, recent, n, min_hits, bits, ids, nread, first, end):
    once = bits[0]
    twice = bits[1]
    lo_t, hi_t = sinks, n - recent
    for r in range(cand.shape[0]):
        row = ids[r]
        k = 0
        for t in range(sinks):
            row[k] = t
            k += 1
        for t in range(n - recent, n):
            row[k] = t
            k += 1
        first[r] = k
        _mark_hits(cand[r, : ncand[r]], once, twice)
        k = _take_sample(once if min_hits == 1 else twice, once, twice, lo_t, hi_t, row, k)
        end[r] = k
        nread[r] = k


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def score_keys(q, k, mean, rows_per_kv, ids, nread, first, end, scores, norms):
    d = q.shape[1]
    for r in range(q.shape[0]):
        g = r // rows_per_kv
        nr = nread[r]
        lo, hi = first[r], end[r]
        for i in range(nr):
            if i + ahead < nr:
                _prefetch_row(k, g, ids[r, i + ahead], d)
            t = ids[r, i]
            scores[r, i] = _row_dot(q, r, k, g, t, d)
            if i >= lo and i < hi:
                norms[r, i - lo] = _centred_norm(mean, k, g, t, d)


@njit(cache=True, nogil=True)
def mix_values(q, mean, rows_per_kv, v, ids, nread, first, end, scores, norms, scale, log_u, grid, out, acc, blk):
    d = q.shape[1]
    dv = v.shape[2]
    for r in range(q.shape[0]):
        g = r // rows_per_kv
        nr = nread[r]
        lo, hi = first[r], end[r]
        qm = np.float32(0.0)
        qq = np.float32(0.0)
        for j in range(d):
            qm += q[r, j] * mean[g, j]
            qq += q[r, j] * q[r, j]
        s = scores[r]
        _correct(s[lo:hi], np.float32(math.sqrt(qq)), qm, scale, log_u, grid, norms[r, : hi - lo])
        for i in range(lo):
            s[i] = s[i] * scale
        for i in range(hi, nr):
            s[i] = s[i] * scale
        _, total = _softmax_mix(v, g, ids[r], s, nr, acc, blk)
        for j in range(dv):
            out[r, j] = np.float32(acc[j] / total)


# --- floors -------------------------------------------------------------------------------


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def gather_floor(a, ids, nread, rows_per_kv, hint):
    d = a.shape[2]
    acc = np.float32(0.0)
    for r in range(ids.shape[0]):
        g = r // rows_per_kv
        nr = nread[r]
        for i in range(nr):
            if hint and i + ahead < nr:
                _prefetch_row(a, g, ids[r, i + ahead], d)
            t = ids[r, i]
            for j in range(d):
                acc += as_f32(a[g, t, j])
    return acc


@njit(cache=True, nogil=True)
def runs_floor(entries, starts, lengths, rows_per_kv, hint):
    R, L = starts.shape
    acc = np.uint64(0)
    for r in range(R):
        g = r // rows_per_kv
        if hint:
            for l in range(L):
                prefetch(entries, g, l, starts[r, l])
        for l in range(L):
            run = entries[g, l, starts[r, l] : starts[r, l] + lengths[r, l]]
            for i in range(run.shape[0]):
                acc += np.uint64(run[i])
    return acc


@njit(cache=True, nogil=True)
def bit_test_floor(cand, ncand, bits):
    once = bits[0]
    acc = np.uint64(0)
    for r in range(cand.shape[0]):
        c = cand[r, : ncand[r]]
        for i in range(c.shape[0]):
            t = c[i]
            acc += (once[t >> np.uint32(6)] >> np.uint64(t & np.uint32(63))) & np.uint64(1)
    return acc


def gemm_rate(clock, size: int = 768, repeats: int = 5) -> float:
    """Multiply-adds per second of a one-thread float32 matmul (size³), best of ``repeats``."""
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    torch.mm(a, b)
    best = math.inf
    for _ in range(repeats):
        t0 = clock()
        torch.mm(a, b)
        best = min(best, clock() - t0)
    return size**3 / best


class Stages:
    """The arrays one decode step's stages pass along, for an index and its K/V."""

    def __init__(self, index, k, v, heads: int, min_hits: int = 2):
        self.index = index
        self.K, self.L, self.n = index.K, index.L, index.n
        self.sinks, self.recent = index.sinks, index.recent
        self.min_hits = min_hits
        self.R = heads
        self.rows_per_kv = heads // index.num_kv_heads
        self.offsets = index.offsets.numpy()
        self.ends = index.bucket_ends().numpy()  # offsets[..., 1:] for packed tables
        self.entries = index.entries.numpy()
        self.mean = index.mean.contiguous().numpy()
        self.planes = index.planes.contiguous()
        self.log_u = magicpig.log_inclusion_table(index, min_hits).numpy()
        self.grid = magicpig._GRID
        self.k = _kernel_array(k)
        self.v = _kernel_array(v)
        R, L, n = self.R, self.L, self.n
        self.proj = np.empty((R, self.planes.shape[1]), dtype=np.float32)
        self.signs = np.empty((L * self.K + 63) // 64 + 1, dtype=np.uint64)
        self.slots = np.empty((R, L, 2), dtype=np.int64)
        self.cand = np.empty((R, 0), dtype=np.uint32)  # grown to the longest row's candidates
        self.ncand = np.empty(R, dtype=np.int64)
        self.bits = np.zeros((2, n // 64 + 1), dtype=np.uint64)
        self.ids = np.empty((R, n + 1), dtype=np.int64)
        self.nread = np.empty(R, dtype=np.int64)
        self.first = np.empty(R, dtype=np.int64)
        self.end = np.empty(R, dtype=np.int64)
        self.scores = np.empty((R, n + 1), dtype=np.float32)
        self.norms = np.empty((R, n + 1), dtype=np.float32)
        self.dv = self.v.shape[2]
        self.out = np.empty((R, self.dv), dtype=np.float32)
        self.acc = np.empty(self.dv, dtype=np.float64)
        self.blk = np.empty(self.dv, dtype=np.float32)
        self.scale = np.float32(1.0 / math.sqrt(self.planes.shape[0]))

    def run(self, q: torch.Tensor, clock) -> dict:
        """One step, stage by stage: seconds per stage (and the output in ``self.out``)."""
        qf = q.to(torch.float32).contiguous()
        qn = qf.numpy()
        times = {}
        t0 = clock()
        torch.mm(qf, self.planes, out=torch.from_numpy(self.proj))
        tm = clock()
        hash_rows(self.proj, self.K, self.L, self.slots, self.signs)
        t1 = clock()
        times["hash"] = t1 - t0
        times["hash_mm"] = tm - t0
        # Outside the stage's time: the same product again, its planes now in cache, to tell a
        # slow product from planes that had to come from memory.
        tw = clock()
        torch.mm(qf, self.planes, out=torch.from_numpy(self.proj))
        times["hash_mm_warm"] = clock() - tw
        t1 = clock()
        # Outside the timing: room for the row with most candidates.
        g = np.arange(self.R)[:, None] // self.rows_per_kv
        b = self.slots[:, :, 0]
        tables = np.arange(self.L)[None, :]
        most = int((self.ends[g, tables, b] - self.offsets[g, tables, b]).sum(1).max())
        if self.cand.shape[1] < most:
            self.cand = np.empty((self.R, most), dtype=np.uint32)
        t1 = clock()
        walk_rows(self.offsets, self.ends, self.entries, self.L, self.rows_per_kv, self.slots, self.cand, self.ncand)
        t2 = clock()
        count_hits(
            self.cand,
            self.ncand,
            self.sinks,
            self.recent,
            self.n,
            self.min_hits,
            self.bits,
            self.ids,
            self.nread,
            self.first,
            self.end,
        )
        t3 = clock()
        score_keys(
            qn, self.k, self.mean, self.rows_per_kv, self.ids, self.nread, self.first, self.end, self.scores, self.norms
        )
        t4 = clock()
        mix_values(
            qn,
            self.mean,
            self.rows_per_kv,
            self.v,
            self.ids,
            self.nread,
            self.first,
            self.end,
            self.scores,
            self.norms,
            self.scale,
            self.log_u,
            self.grid,
            self.out,
            self.acc,
            self.blk,
        )
        t5 = clock()
        times.update(walk=t2 - t1, hits=t3 - t2, K=t4 - t3, mix=t5 - t4)
        return times

    def bytes(self) -> dict:
        """Bytes each stage must read, from the last step's counts."""
        kv_item = self.k.itemsize
        rows = int(self.nread.sum())
        cands = int(self.ncand.sum())
        return {
            "hash": self.planes.nbytes + self.R * self.planes.shape[0] * 4,
            "walk": cands * self.entries.itemsize + self.R * self.L * 2 * self.offsets.itemsize,
            "hits": cands * 4 + self.R * self.bits.nbytes,  # the candidate list, and the bit sets cleared
            "K": rows * self.k.shape[2] * kv_item,
            "mix": rows * self.dv * kv_item,
        }

    def floors(self, clock, bandwidth: float, gemm: float, rng) -> dict:
        """Seconds of each stage's floor for the last step's counts (see the module's
        docstring): one run each, on fresh random rows and runs, so that, timed after each
        step, a floor finds the caches as the step found them (the same rows read again
        would come from the last-level cache, which on some machines holds tens of MB)."""
        n, R = self.n, self.R
        lengths = self.slots[:, :, 1] - self.slots[:, :, 0]

        def fresh_ids():
            ids = np.zeros((R, int(self.nread.max()) + 1), dtype=np.int64)
            for r in range(R):
                ids[r, : self.nread[r]] = np.sort(rng.choice(n, int(self.nread[r]), replace=False))
            return ids

        def timed(fn, *args):
            t0 = clock()
            fn(*args)
            return clock() - t0

        def either(fn, fresh, *args):  # the better of with and without prefetch hints, each on fresh data
            return min(timed(fn, *fresh(), *args, hint) for hint in (True, False))

        def fresh_runs():
            starts = (rng.random(lengths.shape) * (n - lengths + 1)).astype(np.int64)
            return self.entries, starts, lengths

        sizes = self.bytes()
        flops = R * self.planes.shape[0] * self.planes.shape[1]
        return {
            "hash": (max(flops / gemm, sizes["hash"] / bandwidth), "gemm"),
            "walk": (either(runs_floor, fresh_runs, self.rows_per_kv), "runs"),
            "hits": (timed(bit_test_floor, self.cand, self.ncand, self.bits), "bit test"),
            "K": (either(gather_floor, lambda: (self.k, fresh_ids(), self.nread), self.rows_per_kv), "gather"),
            "mix": (either(gather_floor, lambda: (self.v, fresh_ids(), self.nread), self.rows_per_kv), "gather"),
        }


def _kernel_array(x: torch.Tensor) -> np.ndarray:
    x = x.contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


def measure(index, k, v, queries, heads: int, clock, bandwidth: float, gemm: float, fused_ms: float) -> dict:
    """Every stage's median time over ``queries``, its bytes and its floor (each floor timed
    right after its step, median over the steps), and the stages' output set against the
    fused kernel's (``out_rel_diff``), for one row of the table."""
    from pigviz.lsh import fused

    st = Stages(index, k, v, heads)
    rng = np.random.default_rng(0)
    for _ in range(2):  # compile, then warm the freshly allocated arrays
        st.run(queries[0], clock)
        st.floors(clock, bandwidth, gemm, rng)
    runs, floor_runs = [], []
    for q in queries:
        runs.append(st.run(q, clock))
        floor_runs.append(st.floors(clock, bandwidth, gemm, rng))
    times = {s: statistics.median(t[s] for t in runs) for s in (*STAGES, "hash_mm", "hash_mm_warm")}
    floors = {s: statistics.median(f[s][0] for f in floor_runs) for s in STAGES}
    kinds = {s: floor_runs[0][s][1] for s in STAGES}
    st.run(queries[0], clock)
    ref, _ = fused.attend(index, queries[0], k, v, threads=1)
    diff = float((torch.from_numpy(st.out) - ref.float()).norm() / ref.float().norm())
    sizes = st.bytes()
    stages = {}
    for s in STAGES:
        stages[s] = {
            "ms": 1e3 * times[s],
            "bytes": sizes[s],
            "floor_kind": kinds[s],
            "floor_ms": 1e3 * floors[s],
            "stream_ms": 1e3 * sizes[s] / bandwidth,
            "x_floor": times[s] / floors[s],
        }
    stages["hash"]["mm_ms"] = 1e3 * times["hash_mm"]
    stages["hash"]["mm_warm_ms"] = 1e3 * times["hash_mm_warm"]
    stages["hash"]["planes_bytes"] = st.planes.nbytes
    cands = int(st.ncand.sum())
    stages["hits"]["ns_per_candidate"] = 1e9 * times["hits"] / max(1, cands)
    stages["hits"]["floor_ns_per_candidate"] = 1e9 * floors["hits"] / max(1, cands)
    total = sum(times[s] for s in STAGES)
    return {
        "stages": stages,
        "stages_ms": 1e3 * total,
        "fused_ms": fused_ms,
        "stream_floor_ms": 1e3 * sum(sizes.values()) / bandwidth,
        "out_rel_diff": diff,
        "gather_over_stream": floors["K"] / (sizes["K"] / bandwidth),
        "keys_read_per_row": float(st.nread.mean()),
        "candidates_per_row": float(st.ncand.mean()),
    }


def print_stages(rows) -> None:
    head = (
        f"{'shape':<18}{'n':>7}{'K,L':>8}{'dtype':>6}{'stage':>6}{'ms':>8}{'MB':>7}"
        f"{'floor':>9}{'floor ms':>9}{'x floor':>8}{'stream ms':>10}{'x stream':>9}"
    )
    print("\n" + head)
    print("-" * len(head))
    for r in rows:
        s = r["stages_row"]
        for name in STAGES:
            x = s["stages"][name]
            print(
                f"{r['shape']:<18}{r['n']:>7}{r['K']:>4},{r['L']:<3}{r['dtype']:>6}{name:>6}{x['ms']:>8.2f}"
                f"{x['bytes'] / 1e6:>7.2f}{x['floor_kind']:>9}{x['floor_ms']:>9.2f}{x['x_floor']:>7.1f}x"
                f"{x['stream_ms']:>10.2f}{x['ms'] / x['stream_ms']:>8.1f}x"
            )
        print(
            f"{'':<18}{'':>7}{'':>8}{'':>6}{'sum':>6}{s['stages_ms']:>8.2f}{'':>7}{'':>9}{'':>9}{'':>8}"
            f"{s['stream_floor_ms']:>10.2f}{s['stages_ms'] / s['stream_floor_ms']:>8.1f}x"
            f"   fused step {s['fused_ms']:.2f} ms = {s['fused_ms'] / s['stream_floor_ms']:.1f}x stream"
        )
    print("\nWhere a stage is over 2x its own floor, what the measurement says:")
    for r in rows:
        s = r["stages_row"]
        where = f"{r['shape']} {r['n']} {r['dtype']}"
        for name in STAGES:
            x = s["stages"][name]
            if x["x_floor"] <= 2:
                continue
            if name == "hits":
                why = (
                    f"{x['ns_per_candidate']:.2f} ns per candidate against the bit test's "
                    f"{x['floor_ns_per_candidate']:.2f}: each candidate reads and writes two words (hit once, "
                    "hit twice), where the floor reads one"
                )
            elif name == "hash":
                why = (
                    f"q @ planes (torch.mm) takes {x['mm_ms']:.2f} of its {x['ms']:.2f} ms, and "
                    f"{x['mm_warm_ms']:.2f} ms run again at once: "
                    + (
                        f"the {x['planes_bytes'] / 1e3:.0f} KB of hyperplanes come from beyond the core's caches "
                        "after the step's K/V reads"
                        if x["mm_warm_ms"] < 0.6 * x["mm_ms"]
                        else f"a matmul of {r['heads']} rows does not reach a large one's rate"
                    )
                    + f" (gemm floor {x['floor_ms']:.2f} ms)"
                )
            else:
                why = f"{x['ms']:.2f} ms against {x['floor_ms']:.2f} ({x['floor_kind']})"
            print(f"  {where} {name}: {x['x_floor']:.1f}x; {why}")
        print(
            f"  {where}: the gather floor itself is {s['gather_over_stream']:.1f}x the stream floor "
            "(random rows against one sequential read)"
        )
    print(
        "The step's stages run one after another over all query rows (the fused kernel interleaves them), one\n"
        "thread; ms = median per step; MB = bytes the stage reads; floor = its own floor, measured in this run:\n"
        "gemm (q @ planes at a large matmul's rate, or the planes streamed), runs (random runs of token ids of\n"
        "the same lengths), bit test (one bit read per candidate), gather (random rows of the same size and\n"
        "count, ascending); stream ms = its bytes at the sequential read bandwidth; sum = the stages' total,\n"
        "against all bytes streamed, beside the fused kernel's step.",
        flush=True,
    )


def timer(name: str):
    return {"wall": time.perf_counter, "cpu": time.thread_time}[name]
