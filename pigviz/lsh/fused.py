"""MagicPIG's decode step as one compiled CPU loop per layer (numba).

:func:`pigviz.lsh.magicpig.attend` is the readable reference: about 80 small torch ops per
layer, each of which allocates, converts or synchronises. :func:`attend` here computes the
same estimator in ONE call per layer, with no intermediate tensors. Per query row:

1. its bucket in each of the L tables, from the signs of ``q @ planes`` (one matmul for all
   rows, done by torch before the loop);
2. a walk over those buckets' token ids, counting hits: for ``min_hits`` <= 2 (the
   paper's 2) in two bit sets, "hit once" and "hit twice" (n/4 bytes, in L1 cache up to
   ~100k tokens), otherwise in a byte per token (``uint8``, saturating at 255) whose first
   hit puts the token on a "touched" list, so that only touched counters are cleared;
3. every token with at least ``min_hits`` hits outside the exact set is sampled (read off
   the bit set's words: in token order); the read list is the exact set (sinks + recent),
   the sample and, for decoding, the exact buffer of tokens cached after the index was built;
4. q·k for every key in that list, each key row read once; for a sampled key also
   |k - mean| from the same row, so cos(q, k - mean) = (q·k - q·mean) / (|q| |k - mean|)
   and log u, interpolated in the same float64 table the reference uses;
5. softmax weights, then the value mix: each value row read once, weighted and added.

The rows run as a pipeline: while one row is walked and mixed, the next row's bucket
offsets and token ids are already being fetched, so the random reads of the tables (cold
in a real model, where each layer's tables were last touched a whole step ago) overlap with
work instead of waiting in turn.

It returns the output AND its log-normaliser ``lse`` = log sum exp(score) per row, so a
caller can merge it with other blocks of keys by log-sum-exp (flash-attention style) instead
of smuggling a marker column through a copy of the values. Keys and values are read in
their stored dtype (float32, or float16/bfloat16 widened by the CPU as they are read): no
converted copy of the cache is ever made.

**Threads.** ``threads=`` (default: ``torch.get_num_threads()``, which ``--threads`` sets)
runs the rows on up to that many threads, one per :func:`work_per_thread` (row, token) pairs
(:func:`threads_for`): the work at which one more thread pays, measured once per machine
(:func:`calibrate`, under a minute, once; stored in pigviz's cache folder; ``PIGVIZ_THREAD_WORK``
sets it instead). The calibration times SmolLM2-sized steps; a larger step that it would keep
on one thread is not decided by extrapolating its line: the step is timed on one thread and on
more, once per size (:func:`pick_by_trial`; on one 2-core Xeon the small steps ran slower on two
threads, and the line kept a 98k-token Llama-like step, 8 ms, on one thread). They run as
numba's OpenMP team (:func:`pigviz.lsh.kernels.team_ready`),
which starts in a few µs: Python threads (the caller's and workers that wait on a queue, the
fallback where numba's layer is not OpenMP or after a fork) took tens of µs to hand over, and
made two threads no faster than one for SmolLM2's 9 rows at 8k tokens. The threads take rows
one at a time from a shared atomic counter, so a thread the OS preempts takes fewer. A row is
computed by one thread, start to finish, in a fixed order, so the output is the same to the
last bit at any thread count.

**Storage.** Token ids are read as uint16 (an index of up to 65,536 tokens) or int32, offsets
as int32 (or int64); keys and values as float32, float16 or bfloat16, from a cache with room
to grow (its heads ``capacity`` rows apart) without a copy.

Per index, the numpy views of its arrays and the kernel's scratch are kept between calls
(``index.cache``). :func:`decode_step` is the decoding loop's entry: one decode position in
the layout transformers hands an attention function, with no per-call checks or tensors
beyond the output. :func:`attend_sampled` reads the LSH sample alone, given each row's
buckets: the CPU half of MagicPIG's own placement (:mod:`pigviz.decode.offload`), which
attends the exact tokens on the GPU.

Without numba, or for tensors on a GPU, :func:`attend` falls back to the torch reference
(same results; the read set is identical and outputs agree to ~1e-6 relative).
``PIGVIZ_NO_NUMBA=1`` forces the fallback.

The compiled loops live in :mod:`pigviz.lsh.kernels`, with the counting sort that
:func:`pigviz.lsh.index.build_index` uses to build its CSR tables when numba is present.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import threading
import time
from pathlib import Path

import numpy as np
import torch

from pigviz._util.config import DEFAULTS
from pigviz._util.io import cache_root, write_json_atomic
from pigviz._util.threads import cpu_model, visible_cpus
from pigviz._util.validate import check_int
from pigviz.attention import check_decode_shapes
from pigviz.lsh import kernels, magicpig
from pigviz.lsh.index import LSHIndex, build_index

__all__ = [
    "available",
    "attend",
    "decode_step",
    "attend_sampled",
    "threads_for",
    "work_per_thread",
    "calibrated_up_to",
    "pick_by_trial",
    "threads_used",
    "calibrate",
    "break_even",
    "stored_calibration",
    "machine_key",
]

available = kernels.available


def _as_kernel_array(x: torch.Tensor) -> np.ndarray:
    """A numpy view of a (kv_heads, N, d) cache the kernel reads: float32, or 16-bit integers
    carrying half-precision bits (numba has no bfloat16).

    A cache kept in storage with room to grow (:mod:`pigviz.decode.cache`) hands out views
    whose heads lie ``capacity`` rows apart: such a view is widened to the whole (kv_heads,
    capacity, d) block, which is C-contiguous, instead of being copied (the kernel reads only
    the rows below ``buffer_end``). Any other layout is copied once."""
    x = _whole_rows(x)
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    if x.dtype == torch.float16:
        return x.view(torch.int16).numpy()
    return x.numpy()


def _whole_rows(x: torch.Tensor) -> torch.Tensor:
    if x.is_contiguous():
        return x
    heads, rows, d = x.shape
    head_stride = x.stride(0)
    if x.stride(2) == 1 and x.stride(1) == d and head_stride % d == 0 and head_stride >= rows * d:
        try:
            # Fails (RuntimeError) if the storage does not hold the last head's spare rows.
            return x.as_strided((heads, head_stride // d, d), (head_stride, d, 1))
        except RuntimeError:
            pass
    return x.contiguous()


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


def resolve_threads(threads) -> int:
    """``threads`` as a count: None means torch's (``torch.get_num_threads()``, which
    ``--threads`` sets), else an int >= 1."""
    if threads is None:
        return torch.get_num_threads()
    return check_int("threads", threads, 1, 1024)


def attend(
    index,
    q,
    k,
    v,
    *,
    min_hits: int = DEFAULTS.min_hits,
    scale: float | None = None,
    buffer_end=None,
    return_read_mask: bool = False,
    threads: int | None = None,
):
    """:func:`pigviz.lsh.magicpig.attend` in one compiled pass, plus the log-normaliser.

    Tokens below ``index.n`` are read through the index (exact set + LSH sample); tokens
    ``index.n .. buffer_end[r] - 1`` are read exactly (the decode buffer). Threads take the rows
    one at a time as they become free, and each row is computed by one thread in a fixed order,
    so every thread count gives the same bits. Falls back to the torch reference when the
    compiled path cannot run (no numba, GPU tensors, exotic dtypes).

    Parameters
    ----------
    index : LSHIndex
        Built over the first ``index.n`` tokens of ``k``.
    q : torch.Tensor, (R, d)
        R query rows, row r reading KV head r // (R / Hkv).
    k, v : torch.Tensor, (Hkv, N, d) and (Hkv, N, dv), N >= index.n
        The cache: float32, float16 or bfloat16, read in its stored dtype.
    min_hits : int in [1, L]
        Tables a key must share with the query to be sampled.
    scale : float, optional
        Multiplies q·k (default 1/sqrt(d), as the reference).
    buffer_end : array-like of int, (R,), optional
        Per row, one past the last buffer token read, in [index.n, N] (default: no buffer).
    return_read_mask : bool
        Add ``read_mask`` (R, n) bool to the stats.
    threads : int in [1, 1024], optional
        At most how many threads share the rows (None: ``torch.get_num_threads()``;
        :func:`threads_for` starts fewer for a small step).

    Returns
    -------
    output : torch.Tensor, (R, dv), q's dtype
        The attention output of each row.
    stats : dict
        The reference's keys (``budget``, ``keys_read``, ``sampled``, ``candidates``, ``exact``,
        ``n``, optional ``read_mask``; counts over the indexed tokens) plus ``lse`` (R,) float32,
        the log of the softmax normaliser of the scores actually mixed (-inf for a row that read
        nothing), and ``buffer`` (R,) int64, the buffer tokens read.

    Raises
    ------
    TypeError
        ``index`` not an :class:`~pigviz.lsh.index.LSHIndex`, or a tensor of the wrong kind.
    ValueError
        Shapes that do not match the index, ``min_hits``, ``threads`` or ``buffer_end`` outside
        its range, or a non-finite query, key or value read.
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
    threads = resolve_threads(threads)
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
    dv = v.shape[2]
    out = torch.empty((R, dv), dtype=torch.float32)
    lse = np.empty(R, dtype=np.float32)
    sampled = np.empty(R, dtype=np.int64)
    candidates = np.empty(R, dtype=np.int64)
    mask = np.zeros((R, n) if return_read_mask else (0, 0), dtype=np.bool_)
    tokens = max(index.n, int(ends.max())) if R else index.n
    ws = _take_workspace(index, dv, tokens)
    kk, vv = _as_kernel_array(k.detach()), _as_kernel_array(v.detach())
    result = _launch(
        compiled[0],
        ws,
        (ws.project(qf), _NO_BUCKETS, qf.numpy(), *ws.layout(R, min_hits), True, *ws.tables(index, min_hits)),
        (kk, vv, ends.numpy(), np.float32(scale), out.numpy(), lse, sampled, candidates, mask, return_read_mask),
        R,
        threads,
    )
    index.cache["fused_workspace"] = ws
    if result < 0:
        # A non-finite key or value was read: the reference names the culprit (ValueError).
        return _reference(index, q, k, v, min_hits, scale, ends, return_read_mask)
    lse, sampled, candidates, mask = (torch.from_numpy(a) for a in (lse, sampled, candidates, mask))
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


def attend_sampled(
    index, q, buckets, k, v, *, min_hits: int = DEFAULTS.min_hits, scale: float, threads: int | None = None, out=None
):
    """Only the LSH sample of each row, for a caller that attends the exact set (sinks and recent
    window) and the decode buffer itself and merges by log-sum-exp: the CPU half of MagicPIG's
    own placement, whose GPU half hashes the queries (``buckets``) and attends the exact tokens.
    The caller has checked shapes and dtypes (this runs once per layer and token).

    Parameters
    ----------
    index : LSHIndex
        The tables.
    q : torch.Tensor, (R, d), CPU
        The query rows (float32 preferred: another dtype is converted).
    buckets : torch.Tensor, integer (R, L), CPU
        Each row's bucket per table, as ``index.bucket_ids(q)``.
    k, v : torch.Tensor, (Hkv, N, d) and (Hkv, N, dv), N >= index.n, CPU
        The cache; the indexed tokens are read through the tables only.
    min_hits : int in [1, min(L, 255)]
        Tables a key must share with the query to be sampled.
    scale : float
        Multiplies q·k.
    threads : int in [1, 1024], optional
        As in :func:`attend`.
    out : torch.Tensor, float32 (R, dv), optional
        Written in place if given (e.g. pinned memory).

    Returns
    -------
    out : torch.Tensor, float32 (R, dv)
        Each row's output over its sample (0 for a row that sampled nothing).
    lse : np.ndarray, float32 (R,)
        Log of each row's softmax normaliser (-inf for a row that sampled nothing).
    sampled : np.ndarray, int64 (R,)
        Keys each row sampled.

    Raises
    ------
    RuntimeError
        No compiled path (:func:`available`).
    ValueError
        A sampled key or value that is not finite.
    """
    compiled = kernels.kernels()
    if compiled is None:
        raise RuntimeError("attend_sampled needs numba (pip install pigviz[fast])")
    R = q.shape[0]
    dv = v.shape[2]
    ws = _take_workspace(index, dv, index.n)
    qf = q if q.dtype == torch.float32 and q.is_contiguous() else q.to(torch.float32).contiguous()
    bk = buckets.numpy() if buckets.dtype == torch.int64 else buckets.to(torch.int64).numpy()
    if out is None:
        out = torch.empty((R, dv), dtype=torch.float32)
    lse, sampled, candidates = ws.row_arrays(R)
    ends = ws.ends
    ends.fill(index.n)
    result = _launch(
        compiled[0],
        ws,
        (_NO_PROJ, bk, qf.numpy(), *ws.layout(R, min_hits), False, *ws.tables(index, min_hits)),
        (
            _as_kernel_array(k),
            _as_kernel_array(v),
            ends,
            np.float32(scale),
            out.numpy(),
            lse,
            sampled,
            candidates,
            _NO_MASK,
            False,
        ),
        R,
        resolve_threads(threads),
    )
    index.cache["fused_workspace"] = ws
    if result < 0:
        raise ValueError(
            "k or v holds a non-finite number among the sampled keys; k and v must hold only finite numbers"
        )
    return out, lse.copy(), sampled.copy()


class _Workspace:
    """What the compiled step keeps per index between calls: numpy views of the index's
    arrays (each conversion costs a few µs, and a decode step calls once per layer), the
    log u tables, and the kernel's scratch (hit counters, read list), one set per thread.
    Held by one call at a time: a call takes it out of ``index.cache`` and puts it back when
    done, so two calls never share scratch (the second one makes its own)."""

    def __init__(self, index: LSHIndex, dv: int, capacity: int):
        self.dv = dv
        self.capacity = capacity  # tokens the read list holds: index + buffer
        self.K, self.L, self.sinks, self.recent, self.n = index.K, index.L, index.sinks, index.recent, index.n
        self.kv_heads = index.num_kv_heads
        self.offsets = index.offsets.numpy()
        # Strided (a view of offsets, or of the (Hkv, L, 2^K + 1) buffer insert_tokens keeps):
        # one layout, so the kernel is compiled once for packed tables and tables with room.
        self.bucket_ends = index.bucket_ends().numpy()
        self.entries = index.entries.numpy()
        self.mean = index.mean.contiguous().numpy()
        self.planes = index.planes.contiguous()
        self.log_u: dict[int, np.ndarray] = {}
        self.stack: tuple | None = None  # the threads' scratch (see stacked)
        self.results = np.zeros(0, dtype=np.int64)
        self.proj = np.empty((0, self.planes.shape[1]), dtype=np.float32)  # (R, L*K) q @ planes
        self.ends = np.empty(0, dtype=np.int64)
        self.rows = (np.empty(0, dtype=np.float32), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))

    def scratch(self, thread: int) -> tuple:
        """The kernel's last arguments, in its order, for one thread (made on first use)."""
        return tuple(a[thread] for a in self.stacked(thread + 1))

    def stacked(self, threads: int) -> tuple:
        """Every thread's scratch, each kind stacked into one array with a leading thread axis
        (:func:`pigviz.lsh.kernels.attend_threads_kernel` takes them so): grown, all zero
        where the kernel needs zeros, when more threads than before ask for it."""
        if self.stack is None or self.stack[0].shape[0] < threads:
            n, cap, T = self.n, self.capacity, threads
            self.stack = (
                np.zeros((T, n), dtype=np.uint8),  # hits: the kernel leaves it all zero again
                np.empty((T, n + 1), dtype=np.int32),  # touched; +1: the branch-free append writes one past
                np.empty((T, cap + 1), dtype=np.int64),  # ids; +1: the branch-free append
                np.empty((T, cap), dtype=np.float32),  # scores
                np.empty((T, max(cap, self.dv)), dtype=np.float32),  # tmp, also the mix's block sums
                np.empty((T, self.dv), dtype=np.float64),  # acc: the value mix sums thousands of rows
                np.empty((T, 2, self.L, 2), dtype=np.int64),  # bounds: two rows in flight
                np.zeros((T, 2, n // 64 + 1), dtype=np.uint64),  # bits: hit once / twice; left all zero
            )
            self.results = np.zeros(T, dtype=np.int64)
        return self.stack

    def table(self, index: LSHIndex, min_hits: int) -> np.ndarray:
        table = self.log_u.get(min_hits)
        if table is None:
            table = self.log_u[min_hits] = magicpig.log_inclusion_table(index, min_hits).numpy()
        return table

    def layout(self, rows: int, min_hits: int) -> tuple:
        """The kernel's arguments from ``mean`` to ``n_idx``."""
        return (self.mean, rows // self.kv_heads, self.K, self.L, min_hits, self.sinks, self.recent, self.n)

    def tables(self, index: LSHIndex, min_hits: int) -> tuple:
        """The kernel's arguments from ``offsets`` to ``grid``."""
        return (self.offsets, self.bucket_ends, self.entries, self.table(index, min_hits), magicpig._GRID)

    def project(self, qf: torch.Tensor) -> np.ndarray:
        """The signs of ``qf @ planes`` give the query's buckets: the same torch product as the
        reference's, written into a reused buffer."""
        rows = qf.shape[0]
        if self.proj.shape[0] != rows:
            self.proj = np.empty((rows, self.planes.shape[1]), dtype=np.float32)
        torch.mm(qf, self.planes, out=torch.from_numpy(self.proj))  # a plain tensor, also in inference mode
        return self.proj

    def row_arrays(self, rows: int):
        """(lse, sampled, candidates) scratch for ``rows`` rows, and ``ends``."""
        if self.ends.shape[0] != rows:
            self.ends = np.empty(rows, dtype=np.int64)
            self.rows = (np.empty(rows, np.float32), np.empty(rows, np.int64), np.empty(rows, np.int64))
        return self.rows


def _take_workspace(index: LSHIndex, dv: int, tokens: int) -> _Workspace:
    ws = index.cache.pop("fused_workspace", None)
    if ws is None or ws.dv != dv or ws.capacity < tokens:
        # Room for a decode buffer beyond the indexed tokens, so that it is not regrown each step.
        ws = _Workspace(index, dv, max(tokens, index.n + 512))
    return ws


_NO_MASK = np.zeros((0, 0), dtype=np.bool_)
_NO_BUCKETS = np.zeros((0, 1), dtype=np.int64)  # "hash the rows from proj"
_NO_PROJ = np.zeros((0, 1), dtype=np.float32)  # "the buckets are given"


class _Worker:
    """A thread that runs one call at a time, handed over through a queue and handed back by
    releasing a lock: a round trip of a few µs (a ThreadPoolExecutor's futures cost about twice
    that, per layer and token)."""

    def __init__(self):
        self.tasks = queue.SimpleQueue()
        self.done = threading.Lock()
        self.done.acquire()
        self.result = self.error = None
        threading.Thread(target=self._loop, name="pigviz-attend", daemon=True).start()

    def _loop(self):
        while True:
            fn, args = self.tasks.get()
            try:
                self.result, self.error = fn(*args), None
            except BaseException as exc:  # handed to the caller, which re-raises it
                self.result, self.error = None, exc
            self.done.release()

    def start(self, fn, args) -> None:
        self.tasks.put((fn, args))

    def wait(self):
        self.done.acquire()
        if self.error is not None:
            raise self.error
        return self.result


class _Pool:
    """Threads that run row chunks of the compiled step beside the calling thread. The
    kernel releases the GIL, so the chunks run in parallel; the caller runs the first chunk
    itself, so one thread costs nothing and two cost one hand-over. A lock keeps two calling
    threads from sharing a worker."""

    def __init__(self):
        self.workers: list[_Worker] = []
        self.lock = threading.Lock()

    def run(self, calls: list) -> list:
        """``calls`` [(fn, args), ...]: the first in this thread, the others on workers."""
        with self.lock:
            while len(self.workers) < len(calls) - 1:
                self.workers.append(_Worker())
            for worker, (fn, args) in zip(self.workers, calls[1:]):
                worker.start(fn, args)
            fn, args = calls[0]
            try:
                first = fn(*args)
            finally:
                rest = [worker.wait() for worker in self.workers[: len(calls) - 1]]
        return [first, *rest]


_POOL = _Pool()


# -- how much work pays for a thread: measured per machine ---------------------------------------
# A second thread costs a hand-over and shares the cores' caches and memory bus with the first;
# it pays only past some work per step, and where that lies differs by machine (SmolLM2's 9 rows
# at 8k tokens ran slower on two threads than on one on one 2-core machine, and faster on
# another). So the threshold is measured, once per machine (:func:`calibrate`), and stored.
CALIBRATION_FORMAT = "pigviz-thread-calibration-v2"  # v2: threads as an OpenMP team
CALIBRATION_FILE = "thread-calibration.json"
NEVER = 2**62
"""Work per thread when a second thread never paid: one thread always."""
# The calibration's step: SmolLM2-135M's decode rows, over indexes of these lengths.
_CALIBRATION_SHAPE = {"heads": 9, "kv_heads": 3, "d": 64, "K": 10, "L": 150}
_CALIBRATION_TOKENS = (2048, 8192, 32768)
# None: read the stored calibration (or measure it) when first needed; tests and calibrate set it.
MIN_WORK_PER_THREAD: int | None = None


def threads_for(rows: int, n: int, threads: int) -> int:
    """How many threads a step runs on: one per :func:`work_per_thread` (row, token) pairs of work,
    at least one, at most one a row.

    Parameters
    ----------
    rows : int
        Query rows of the step.
    n : int
        Tokens in the index.
    threads : int
        The most threads allowed.

    Returns
    -------
    int
        The count, in [1, max(1, min(threads, rows))].
    """
    if threads <= 1 or rows <= 1:
        return 1
    return max(1, min(threads, rows, (rows * n) // max(1, work_per_thread())))


def work_per_thread() -> int:
    """The (row, indexed token) pairs of work for which one more thread pays on this machine:
    ``$PIGVIZ_THREAD_WORK`` if set, else this machine's stored calibration, else measured now
    (under a minute, once; :func:`calibrate`) and stored in pigviz's cache folder.

    Returns
    -------
    int
        The work, >= 1 (:data:`NEVER`: one thread always).

    Raises
    ------
    ValueError
        ``PIGVIZ_THREAD_WORK`` not an integer >= 1.
    """
    global MIN_WORK_PER_THREAD
    if MIN_WORK_PER_THREAD is None:
        raw = os.environ.get("PIGVIZ_THREAD_WORK")
        if raw is not None:
            try:
                MIN_WORK_PER_THREAD = check_int("PIGVIZ_THREAD_WORK", int(raw), 1)
            except ValueError:
                raise ValueError(f"PIGVIZ_THREAD_WORK must be an integer >= 1, got {raw!r}") from None
        else:
            MIN_WORK_PER_THREAD = stored_calibration(measure=True)["work_per_thread"]
    return MIN_WORK_PER_THREAD


def machine_key() -> str:
    """What a calibration is valid for: the CPU model, the cores this process may use, numba's
    and torch's versions (another machine, or another build of the kernel, measures again).

    Returns
    -------
    str
        ``"model | N cores | numba X | torch Y"``.
    """
    model = cpu_model()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    numba = kernels.numba_version() or "no numba"
    return f"{model} | {cores} cores | numba {numba} | torch {torch.__version__}"


def stored_calibration(*, measure: bool = False, path=None) -> dict | None:
    """This machine's calibration from ``path``, or, with ``measure``, one measured now and stored
    there (written atomically; a file that cannot be written is left, and the measurement used).

    Parameters
    ----------
    measure : bool
        Measure (:func:`calibrate`) and store when the file holds none for this machine.
    path : str or Path, optional
        The file (default: ``thread-calibration.json`` in pigviz's cache folder).

    Returns
    -------
    dict or None
        The record :func:`calibrate` made, for this machine (:func:`machine_key`); None when
        there is none and ``measure`` is False.
    """
    path = Path(path) if path is not None else cache_root() / CALIBRATION_FILE
    key = machine_key()
    stored = {}
    with contextlib.suppress(OSError, ValueError):
        stored = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(stored, dict) or stored.get("format") != CALIBRATION_FORMAT:
        stored = {"format": CALIBRATION_FORMAT, "machines": {}}
    record = stored.get("machines", {}).get(key)
    if not measure or (record is not None and isinstance(record.get("work_per_thread"), int)):
        return record
    record = calibrate()
    stored.setdefault("machines", {})[key] = record
    with contextlib.suppress(OSError):
        write_json_atomic(path, stored)
    return record


def break_even(work, one_ms, two_ms) -> int:
    """The work at which two threads beat one, from times measured at several ``work`` sizes: each
    count's times fitted by a line ``t = start + per_pair * work`` (least squares), and the lines
    crossed.

    Parameters
    ----------
    work : array-like of float, (m,), m >= 2
        The work (row, token pairs) of each size timed.
    one_ms, two_ms : array-like of float, (m,)
        The times on one and on two threads.

    Returns
    -------
    int
        The work, >= 1: 1 where the second thread is faster at every size, :data:`NEVER` where it
        does not make a pair cheaper.
    """
    w = np.asarray(work, dtype=np.float64)
    (b1, a1), (b2, a2) = np.polyfit(w, np.asarray(one_ms, float), 1), np.polyfit(w, np.asarray(two_ms, float), 1)
    if not b2 < b1:
        return NEVER
    return int(min(NEVER, max(1, round((a2 - a1) / (b1 - b2)))))


def calibrate(tokens=_CALIBRATION_TOKENS, repeats: int = 15) -> dict:
    """Time SmolLM2-shaped decode steps on one and on two threads at several index lengths,
    interleaved (so a change in the machine's load hits both counts alike), and derive the work
    per thread at which the second thread pays (:func:`break_even`).

    Parameters
    ----------
    tokens : sequence of int
        The index lengths timed.
    repeats : int
        Timings per length and thread count; the best is kept.

    Returns
    -------
    dict
        The record :func:`stored_calibration` keeps: ``machine``, ``rows``, ``tokens``,
        ``repeats``, ``work``, ``one_ms``, ``two_ms`` (best times), ``work_per_thread`` (the
        threshold) and ``seconds`` (its cost); with one core or no compiled kernel no times,
        :data:`NEVER` and ``why``.
    """
    global MIN_WORK_PER_THREAD
    t_start = time.perf_counter()
    cores = len(visible_cpus())
    shape = _CALIBRATION_SHAPE
    record = {"machine": machine_key(), "rows": shape["heads"], "tokens": list(tokens), "repeats": repeats}
    if cores < 2 or kernels.kernels() is None:
        record.update(work=[], one_ms=[], two_ms=[], work_per_thread=NEVER, seconds=0.0)
        record["why"] = "one core" if cores < 2 else "no compiled kernel"
        return record
    saved, MIN_WORK_PER_THREAD = MIN_WORK_PER_THREAD, 1  # every step may split while timing
    one, two = [], []
    try:
        for n in tokens:
            q, k, v = magicpig.synthetic_decode_step(
                heads=shape["heads"], kv_heads=shape["kv_heads"], n=n, d=shape["d"]
            )
            k, v = k.to(torch.bfloat16), v.to(torch.bfloat16)
            index = build_index(k, K=shape["K"], L=shape["L"])
            args = (index, q[None, :, None], k[None], v[None])
            times = {1: [], 2: []}
            for _ in range(2):  # warm: the kernel compiled, the workers started, the rows in cache
                for count in (1, 2):
                    decode_step(*args, min_hits=2, scale=0.125, threads=count)
            for _ in range(repeats):
                for count in (1, 2):
                    t0 = time.perf_counter()
                    decode_step(*args, min_hits=2, scale=0.125, threads=count)
                    times[count].append(1e3 * (time.perf_counter() - t0))
            # The best of the repeats: on a shared machine the others include time the OS gave away.
            one.append(min(times[1]))
            two.append(min(times[2]))
    finally:
        MIN_WORK_PER_THREAD = saved
    work = [shape["heads"] * n for n in tokens]
    record.update(work=work, one_ms=one, two_ms=two, work_per_thread=break_even(work, one, two))
    record["seconds"] = round(time.perf_counter() - t_start, 2)
    return record


def calibrated_up_to() -> int:
    """The most work (row, token pairs) the stored calibration timed. Past it the calibration's
    line is an extrapolation, so a step there that it would keep on one thread is timed on both
    counts instead (:func:`pick_by_trial`). ``PIGVIZ_THREAD_WORK`` (a threshold set by hand)
    is taken as it is: no trial.

    Returns
    -------
    int
        The work (:data:`NEVER` with ``PIGVIZ_THREAD_WORK`` set, or no timed work).
    """
    global CALIBRATED_UP_TO
    if CALIBRATED_UP_TO is None:
        if os.environ.get("PIGVIZ_THREAD_WORK") is not None:
            CALIBRATED_UP_TO = NEVER
        else:
            record = stored_calibration(measure=True) or {}
            CALIBRATED_UP_TO = max(record.get("work") or [NEVER])
    return CALIBRATED_UP_TO


# None: read from the stored calibration when first needed (calibrated_up_to); tests set it.
CALIBRATED_UP_TO: int | None = None
# Thread counts chosen by trial, per (rows, work's power of two, threads asked): a decode loop's steps grow by a
# token at a time, so one trial serves every step until the work doubles.
TRIALS: dict[tuple[int, int], int] = {}


def pick_by_trial(run, counts, repeats: int = 3, clock=time.perf_counter):
    """Time ``run(count)`` for each of ``counts``, interleaved, ``repeats`` times, and keep the count
    with the least best time.

    Parameters
    ----------
    run : callable
        ``run(count)`` runs the step on ``count`` threads and returns its result.
    counts : sequence of int
        The thread counts to try.
    repeats : int
        Runs per count.
    clock : callable
        Seconds now (a test passes its own).

    Returns
    -------
    count : int
        The fastest count (the smallest of a tie).
    result : object
        The last run's result (every count computes the same bits, so any run's result is the answer).
    """
    best = dict.fromkeys(counts, math.inf)
    result = None
    for _ in range(repeats):
        for count in counts:
            t0 = clock()
            result = run(count)
            best[count] = min(best[count], clock() - t0)
    return min(counts, key=lambda c: (best[c], c)), result


def _trial_key(rows: int, n: int, threads: int) -> tuple[int, int, int]:
    """A trial's size class: the rows, the work's power of two and the threads asked."""
    return rows, (rows * n).bit_length(), threads


def threads_used(rows: int, n: int, threads: int) -> int:
    """The threads a step ran on: :func:`threads_for`'s count, or the count a trial chose for a
    step of that size.

    Parameters
    ----------
    rows : int
        Query rows of the step.
    n : int
        Tokens in the index.
    threads : int
        The most threads allowed.

    Returns
    -------
    int
        The count.
    """
    count = threads_for(rows, n, threads)
    if count == 1 and threads > 1 and rows > 1:
        return TRIALS.get(_trial_key(rows, n, threads), 1)
    return count


def _launch(kernel, ws: _Workspace, head: tuple, tail: tuple, rows: int, threads: int) -> int:
    """Run the kernel over ``rows`` rows with :func:`threads_for` threads, which take the rows
    one at a time from a shared counter: arguments ``head + tail + (counter,) + scratch``.
    Several threads run as numba's OpenMP team where it can (:func:`kernels.team_ready`), else
    as Python threads (:class:`_Pool`). A step with more work than the calibration timed, that
    the calibration would keep on one thread, is decided by timing it on one and on more
    (:func:`pick_by_trial`, once per size). Returns the keys sampled over all rows, or -1 if a
    row read a non-finite number."""
    count = threads_for(rows, ws.n, threads)
    if count == 1 and threads > 1 and rows > 1 and rows * ws.n > calibrated_up_to():
        key = _trial_key(rows, ws.n, threads)
        if key not in TRIALS:
            more = min(threads, rows)
            TRIALS[key], done = pick_by_trial(lambda c: _run(kernel, ws, head, tail, c), (1, more))
            return done
        count = TRIALS[key]
    return _run(kernel, ws, head, tail, count)


def _run(kernel, ws: _Workspace, head: tuple, tail: tuple, count: int) -> int:
    args = head + tail + (np.zeros(1, dtype=np.int64),)
    if count == 1:
        return kernel(*args, *ws.scratch(0))
    torch_threads = torch.get_num_threads()
    if kernels.team_ready(count):
        stack = ws.stacked(count)
        kernels.attend_threads_kernel(count, ws.results, *stack, *args)
        if torch.get_num_threads() != torch_threads:
            # numba's OpenMP team (started, and sized, by team_ready and the launch) sets the
            # process's OpenMP thread count, which is also torch's: without this, a step on 2
            # threads would leave torch's own work on 2 as well.
            torch.set_num_threads(torch_threads)
        results = ws.results[:count]
    else:
        results = _POOL.run([(kernel, (*args, *ws.scratch(t))) for t in range(count)])
    return -1 if min(results) < 0 else int(sum(results))


def decode_step(index, query, key, value, *, min_hits: int, scale: float, threads: int | None = None):
    """The decoding loop's fast path: :func:`attend` for one decode position, every query head
    seeing every cached token (the index's and the buffer's), in the layout transformers hands
    an attention function, with none of :func:`attend`'s checks and no per-row stats. For
    :mod:`pigviz.decode.session`, which has validated the arguments. Every layer of every token
    comes through here, so it makes a handful of Python and torch calls and no tensor but the
    output's.

    Parameters
    ----------
    index : LSHIndex
        The tables.
    query : torch.Tensor, (1, H, 1, d)
        The queries.
    key, value : torch.Tensor, (1, Hkv, N, d) and (1, Hkv, N, dv), N >= index.n
        The cache.
    min_hits : int in [1, L]
        Tables a key must share with the query to be sampled.
    scale : float
        Multiplies q·k.
    threads : int, optional
        As in :func:`attend`.

    Returns
    -------
    tuple or None
        ``(output (1, 1, H, dv) float32, keys sampled over all heads)`` (each head also reads the
        exact set and the buffer in full), or None when the compiled path cannot run or a head
        read a non-finite number: then call :func:`attend`, which falls back to the reference and
        names the problem.
    """
    plan = index.cache.pop("fused_decode", None)
    if plan is None or not plan.fits(query, key, value, min_hits, scale):
        plan = _DecodePlan.make(index, query, key, value, min_hits, scale)
        if plan is None:
            return None
    N = key.shape[2]
    if N > plan.ws.capacity:
        plan.ws = _Workspace(index, plan.ws.dv, N + 512)
        plan.ws.row_arrays(plan.H)
        plan.ws.proj = plan.proj.numpy()
        plan.lse, plan.sampled, plan.candidates = plan.ws.rows
    ws = plan.ws
    ws.ends.fill(N)
    probe = STEP_PROBE
    if probe is not None:
        t0 = time.perf_counter()
    qf = query.reshape(plan.H, -1)
    if plan.cast_q:
        qf = qf.to(torch.float32).contiguous()
    torch.mm(qf, ws.planes, out=plan.proj)
    if probe is not None:
        t1 = time.perf_counter()
    k, v = plan.kernel_arrays(key, value)
    out = np.empty(plan.out_shape, dtype=np.float32)
    if probe is not None:
        t2 = time.perf_counter()
    total = _launch(
        plan.kernel,
        ws,
        (ws.proj, _NO_BUCKETS, qf.numpy(), *plan.layout, True, *plan.tables),
        (k, v, ws.ends, plan.scale32, out[0, 0], plan.lse, plan.sampled, plan.candidates, _NO_MASK, False),
        plan.H,
        plan.threads if threads is None else threads,
    )
    index.cache["fused_decode"] = plan
    if probe is not None:
        probe.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
    return None if total < 0 else (torch.from_numpy(out), total)


STEP_PROBE: list | None = None
"""Set to a list to have :func:`decode_step` append, per call, the seconds it spent hashing the
query (``q @ planes``), making the K/V views, and in the compiled kernel (a benchmark's
breakdown of a layer's cost; None, the default, records nothing)."""


def last_candidates(index) -> int:
    """Table entries the last :func:`decode_step` (else :func:`attend_sampled` or
    :func:`attend`) on ``index`` scanned, over all rows: for a caller counting the bytes a
    step reads (0 if none ran)."""
    plan = index.cache.get("fused_decode")
    if plan is not None:
        return int(plan.candidates.sum())
    ws = index.cache.get("fused_workspace")
    return int(ws.rows[2].sum()) if ws is not None else 0


class _DecodePlan:
    """What :func:`decode_step` checked and made once for an index and the tensors' kind
    (dtypes, head counts, min_hits, scale): each later call only confirms that they are
    the same (identity tests) instead of redoing the checks."""

    @classmethod
    def make(cls, index, query, key, value, min_hits, scale):
        compiled = kernels.kernels()
        if (
            compiled is None
            or min_hits > 255
            or not (query.is_cpu and key.is_cpu and value.is_cpu)
            or key.dtype not in _KV_DTYPES
            or value.dtype not in _KV_DTYPES
            or query.requires_grad
            or key.requires_grad
            or value.requires_grad
        ):
            return None
        return cls(compiled[0], index, query, key, value, min_hits, scale)

    def __init__(self, kernel, index, query, key, value, min_hits, scale):
        self.kernel = kernel
        self.cast_q = query.dtype != torch.float32 or not query.reshape(query.shape[1], -1).is_contiguous()
        self.kv32 = key.dtype == value.dtype == torch.float32
        self.key = (query.dtype, key.dtype, value.dtype, query.shape[1], value.shape[3], min_hits, scale)
        self.H, dv = query.shape[1], value.shape[3]
        self.ws = ws = _Workspace(index, dv, max(key.shape[2], index.n + 512))
        ws.row_arrays(self.H)
        self.lse, self.sampled, self.candidates = ws.rows
        ws.proj = np.empty((self.H, ws.planes.shape[1]), dtype=np.float32)
        with torch.inference_mode(False):  # a plain tensor can be written in and out of inference mode
            self.proj = torch.from_numpy(ws.proj)
        self.layout = ws.layout(self.H, min_hits)
        self.tables = ws.tables(index, min_hits)
        self.scale32 = np.float32(scale)
        self.out_shape = (1, 1, self.H, dv)
        self.threads = torch.get_num_threads()
        self.kv_seen = None  # what kernel_arrays last converted, and its result
        self.kv_arrays = None

    def kernel_arrays(self, key, value) -> tuple:
        """The kernel's numpy views of ``key[0]``, ``value[0]``. A cache with room to grow hands
        the same storage, at the same address and strides, step after step (only its length
        grows, and the view covers all the rows it has room for), so the views made at the
        last step are reused: making them costs tens of µs per layer. The views keep that
        storage alive until the next call replaces them."""
        seen = (key.data_ptr(), key.stride(), value.data_ptr(), value.stride())
        if seen != self.kv_seen or key.shape[2] > self.kv_arrays[0].shape[1]:
            if self.kv32 and key.is_contiguous() and value.is_contiguous():
                self.kv_arrays = (key.numpy()[0], value.numpy()[0])
            else:
                self.kv_arrays = (_as_kernel_array(key[0]), _as_kernel_array(value[0]))
            # A copy (a layout the kernel cannot read in place) would miss the next steps' tokens.
            views = (
                self.kv_arrays[0].ctypes.data == key.data_ptr() and self.kv_arrays[1].ctypes.data == value.data_ptr()
            )
            self.kv_seen = seen if views else None
        return self.kv_arrays

    def fits(self, query, key, value, min_hits, scale) -> bool:
        if (query.dtype, key.dtype, value.dtype, query.shape[1], value.shape[3], min_hits, scale) != self.key:
            return False
        self.threads = torch.get_num_threads()  # a cheap read; follows set_num_threads between calls
        return (
            kernels.kernels() is not None
            and not (query.requires_grad or key.requires_grad or value.requires_grad)
            and query.is_cpu
            and key.is_cpu
            and value.is_cpu
        )


_KV_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _reference(index, q, k, v, min_hits, scale, ends, return_read_mask):
    """The same contract through :func:`pigviz.lsh.magicpig.attend` and a dense buffer pass.

    The path a GPU takes, so nothing here waits for the device: ``ends`` is a CPU tensor
    (read on the host for free) and goes to the device from pinned memory, queued like a
    kernel; ``magicpig.attend`` takes its padded formulation there and leaves its stats on the
    device, and so does ``buffer``."""
    R, d = q.shape
    Hkv, N, _ = k.shape
    n = index.n
    # The reference scores q·k / sqrt(d); rescale q so that equals q·k · scale.
    qs = q * (scale * math.sqrt(d)) if scale != 1.0 / math.sqrt(d) else q
    kk, vv = (k, v) if N == n else (k[:, :n], v[:, :n])
    out, stats = magicpig.attend(
        index, qs, kk, vv, min_hits=min_hits, return_read_mask=return_read_mask, return_lse=True
    )
    device_ends = _to_device(ends, q.device)
    stats["buffer"] = (device_ends - n).to(stats["keys_read"].device)  # where the other counts are
    if int(ends.max()) > n if ends.numel() else False:
        out, stats["lse"] = _merge_buffer(q, k, v, out, stats["lse"], n, device_ends, scale)
    return out, stats


def _to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` (a CPU tensor) on ``device`` without waiting for it: a copy from ordinary
    (pageable) memory first waits for all the work queued on the GPU; one from pinned
    memory is queued behind it like a kernel."""
    if device.type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


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
