"""MagicPIG's hash tables for one layer, built once from the prefill keys and then kept up to
date by inserting the keys decoding caches (:func:`insert_tokens`: only the new keys are
hashed, with the build's planes and mean; each id is written at its bucket's end).

Every key of every KV head goes into L tables. Table ``l`` files a key under a K-bit bucket
id: bit ``j`` says on which side of random hyperplane ``l*K + j`` the *centred* key lies.
The keys of a real model sit in a narrow cone, so hashing them raw would put nearly all of
them in the same few buckets; subtracting their mean first spreads them around the origin.
The mean is taken over the keys that can be sampled (the first ``sinks`` and last
``recent`` tokens are always read exactly and, like the large-norm sink key, would only
drag the mean away from the cloud).

Storage is CSR-like, per (KV head, table):

* ``entries[g, l]``  — the n token ids sorted by bucket: uint16 (2 bytes each) while every
  id fits in 16 bits (n <= 65,536) on the CPU, int32 otherwise (and on a GPU)
* ``offsets[g, l]``  — 2^K + 1 positions (int32): bucket ``b`` holds
  ``entries[g, l, offsets[g, l, b]:offsets[g, l, b + 1]]``

so a query finds its bucket's tokens with two reads of ``offsets`` and never compares
its code against all n codes. Memory, per KV head and layer::

    index bytes = id_bytes · L · n  +  4 · L · (2^K + 1)     (+ the shared planes and means)

with id_bytes = 2 up to 65,536 tokens, else 4. At the paper's (K, L) = (10, 150) that is
300 bytes of token ids per key at 8k tokens (600 past 64k): more than half a key–value pair
in fp16 for d = 128 (512 bytes). While it builds, one KV head at a time, the index also holds
about 20 · L · n bytes of int64 bucket ids and sort order (:func:`build_scratch_bytes`); the
memory guard counts both.
"""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_float, check_int
from pigviz.lsh import kernels

__all__ = [
    "bucket_ids",
    "LSHIndex",
    "build_index",
    "grow_index",
    "insert_tokens",
    "make_room",
    "packed_tables",
    "UPKEEP_COUNTS",
    "index_bytes",
    "build_scratch_bytes",
    "expected_candidates",
    "MAX_K",
    "SHORT_IDS",
    "token_id_dtype",
    "DEFAULT_MEMORY_FRACTION",
]

# Bucket ids are packed into int64; the top bit stays clear so ids are never negative.
MAX_K = 62
# Refuse to build tables that would take more than this share of the free memory.
DEFAULT_MEMORY_FRACTION = 0.5
# Keys hashed per block while building: bounds the (block, K·L) projection buffer.
_BUILD_BLOCK = 8192
# Keys per matmul on the compiled build path: (L*K, 256) float32 projections stay in cache.
_HASH_BLOCK = 256
# float32 holds every integer below 2^24 exactly.
_EXACT_FLOAT_BITS = 24
# Token ids fit in uint16 up to this many tokens.
SHORT_IDS = 2**16


def bucket_ids(x: torch.Tensor, planes: torch.Tensor, K: int, L: int) -> torch.Tensor:
    """Bucket of each row of ``x`` in each of the L tables.

    The torch twin of :func:`pigviz.lsh.reference.simhash_codes`, with its layout: table l uses
    columns l*K .. l*K+K-1 of ``planes``, bit j of a bucket id is column l*K+j, and a vector
    exactly on a plane gets bit 0 (a zero vector: bucket 0 everywhere, never a NaN). Every torch
    path that hashes calls this one (the index, the offloaded step, the study of real keys); the
    compiled build packs the same bits in :func:`pigviz.lsh.kernels.pack_buckets`.

    Parameters
    ----------
    x : torch.Tensor, (..., d)
        The vectors to hash, any float dtype (hashed in float32).
    planes : torch.Tensor, (d, K*L)
        The hyperplanes (moved to ``x``'s device).
    K, L : int
        Bits per table, tables.

    Returns
    -------
    torch.Tensor, int64 (..., L)
        The bucket ids, on ``x``'s device.
    """
    proj = x.to(torch.float32) @ planes.to(device=x.device, dtype=torch.float32)
    bits = (proj > 0).view(*x.shape[:-1], L, K)
    if K <= _EXACT_FLOAT_BITS:
        # A float32 matmul against powers of two packs the bits exactly at this K
        # and is ~10x faster on CPU than an int64 multiply-and-sum.
        weights = torch.exp2(torch.arange(K, device=x.device, dtype=torch.float32))
        return (bits.to(torch.float32) @ weights).to(torch.int64)
    weights = torch.bitwise_left_shift(
        torch.ones((), dtype=torch.int64, device=x.device), torch.arange(K, device=x.device)
    )
    return (bits.to(torch.int64) * weights).sum(-1)


def token_id_dtype(n: int, device="cpu") -> torch.dtype:
    """How ``entries`` stores the token ids of an n-token index: uint16 on the CPU while they fit
    (half the bytes a query scans), else int32. On a GPU always int32 (torch's CUDA kernels
    index with few 16-bit unsigned types).

    Parameters
    ----------
    n : int
        Tokens in the index.
    device : torch.device or str
        Where the index lives.

    Returns
    -------
    torch.dtype
        ``torch.uint16`` or ``torch.int32``.
    """
    return torch.uint16 if n <= SHORT_IDS and torch.device(device).type == "cpu" else torch.int32


def index_bytes(n: int, K: int, L: int, num_kv_heads: int = 1, device="cpu") -> int:
    """Bytes of token ids plus bucket offsets (the module's formula).

    Parameters
    ----------
    n : int
        Tokens in the index.
    K, L : int
        Bits per table, tables.
    num_kv_heads : int
        KV heads, each with its own tables.
    device : torch.device or str
        Where the index lives: it decides the width of a token id (:func:`token_id_dtype`).

    Returns
    -------
    int
        id_bytes · L · n + 4 · L · (2^K + 1), times ``num_kv_heads``.
    """
    id_bytes = torch.empty((), dtype=token_id_dtype(n, device)).element_size()
    return num_kv_heads * (id_bytes * L * n + 4 * L * (2**K + 1))


def build_scratch_bytes(n: int, K: int, L: int) -> int:
    """Temporaries :func:`build_index` holds on top of the tables (one KV head at a time): the
    int64 bucket ids (L, n), their sort order (int64, then an int32 copy) or the bincount input
    (int64): about 20·L·n bytes; plus the hashing buffer of one block of keys against all L·K
    planes (float32 projections, their sign bits as bool and float32).

    Parameters
    ----------
    n : int
        Tokens in the index.
    K, L : int
        Bits per table, tables.

    Returns
    -------
    int
        Bytes.
    """
    return 20 * L * n + 9 * min(n, _BUILD_BLOCK) * L * K


def _free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    # MemAvailable counts reclaimable page cache; "free" pages alone can be tiny on a busy box.
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # neither: assume a modest machine
        return 8 * 2**30


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


@dataclass
class LSHIndex:
    """Hash tables of one layer. Build with :func:`build_index`; query with
    :func:`pigviz.lsh.magicpig.attend`. All tensors live on the keys' device.

    Parameters
    ----------
    K, L : int
        Bits per table, tables.
    sinks, recent : int
        The first and last tokens: read exactly, never sampled.
    seed : int
        The seed the hyperplanes were drawn from.
    centred : bool
        Whether the keys were centred on ``mean`` before hashing.
    planes : torch.Tensor, float32 (d, L*K)
        The hyperplanes: table l uses columns l*K .. l*K+K-1.
    mean : torch.Tensor, float32 (Hkv, d)
        What the keys were centred on: the mean of the sampleable keys (zeros if not centred).
    entries : torch.Tensor, uint16 or int32 (Hkv, L, >= n)
        Token ids sorted by bucket: uint16 while n <= 65,536 on the CPU, int32 otherwise.
    offsets : torch.Tensor, int32 (Hkv, L, 2^K + 1)
        Where bucket b starts in its row of ``entries``; ``offsets[..., 2^K]`` is the row's used length.
    centred_norms : torch.Tensor, float32 (Hkv, n)
        |k - mean| of every key: saves a pass per sampled key.
    ends, limits : torch.Tensor, int32 (Hkv, L, 2^K), optional
        Tables with room to grow (:func:`insert_tokens`): where each bucket's run ends and where its
        room ends. None for packed CSR tables, where bucket b ends where b + 1 starts.
    upkeep_stats : dict
        Work done by :func:`insert_tokens`, counted (not timed), under the names of ``UPKEEP_COUNTS``.
    cache : dict
        Lookup tables and scratch buffers that attend keeps between calls (not in :attr:`nbytes`).
    """

    K: int
    L: int
    sinks: int
    recent: int
    seed: int
    centred: bool
    planes: torch.Tensor  # (d, L*K) float32, table l uses columns l*K .. l*K+K-1
    mean: torch.Tensor  # (Hkv, d) float32, mean of the sampleable keys
    entries: torch.Tensor  # (Hkv, L, n) uint16 (n <= 65,536 on the CPU) or int32, token ids sorted by bucket
    offsets: torch.Tensor  # (Hkv, L, 2^K + 1) int32
    centred_norms: torch.Tensor  # (Hkv, n) float32, |k - mean|: saves a pass per sampled key
    # Room to grow (:func:`insert_tokens`): None for packed CSR tables, where bucket b ends where
    # b + 1 starts. Otherwise ``ends`` (Hkv, L, 2^K) int32 is where each bucket's run ends and
    # ``limits`` (Hkv, L, 2^K) int32 where its room ends; ``offsets[..., b]`` is still its start and
    # ``offsets[..., 2^K]`` the used length of the table's row of ``entries``.
    ends: torch.Tensor | None = None
    limits: torch.Tensor | None = None
    # Work done by insert_tokens, counted (not timed) for tests and benchmarks: see upkeep_counts.
    upkeep_stats: dict = field(default_factory=dict, repr=False, compare=False)
    # Lookup tables and scratch buffers that attend keeps between calls (not in nbytes).
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_kv_heads(self) -> int:
        return self.entries.shape[0]

    @property
    def n(self) -> int:
        # Not entries.shape[2]: tables with room to grow hold spare slots.
        return self.centred_norms.shape[1]

    @property
    def head_dim(self) -> int:
        return self.planes.shape[0]

    @property
    def device(self) -> torch.device:
        return self.entries.device

    @property
    def table_bytes(self) -> int:
        """Bytes of ``entries`` and ``offsets`` as stored (equals :func:`index_bytes` for packed
        tables; tables with room to grow also hold their spare slots, ``ends`` and ``limits``)."""
        extra = 0 if self.ends is None else self.ends.nbytes + self.limits.nbytes
        return self.entries.nbytes + self.offsets.nbytes + extra

    @property
    def nbytes(self) -> int:
        """Everything the index holds: tables, planes, means and centred-key norms."""
        return self.table_bytes + self.planes.nbytes + self.mean.nbytes + self.centred_norms.nbytes

    def bucket_ids(self, x: torch.Tensor) -> torch.Tensor:
        """Bucket of ``x`` in each table with this index's planes (:func:`bucket_ids`).

        Parameters
        ----------
        x : torch.Tensor, (..., d)
            The vectors to hash.

        Returns
        -------
        torch.Tensor, int64 (..., L)
            The bucket ids.
        """
        return bucket_ids(x, self.planes, self.K, self.L)

    def token_ids(self) -> torch.Tensor:
        """The token ids of every table sorted by bucket (a copy): for code that computes with the ids
        rather than reading them through the tables.

        Returns
        -------
        torch.Tensor, int64 (Hkv, L, n)
            The ids, packed (no spare slots).
        """
        if self.ends is None:
            return self.entries.to(torch.int64)
        return packed_tables(self)[0].to(torch.int64)

    def bucket_ends(self) -> torch.Tensor:
        """Where each bucket's run of ids ends in ``entries``: bucket b of table l of KV head g is
        ``entries[g, l, offsets[g, l, b] : bucket_ends()[g, l, b]]``.

        Returns
        -------
        torch.Tensor, int32 (Hkv, L, 2^K)
            The ends (a view, not a copy).
        """
        return self.offsets[..., 1:] if self.ends is None else self.ends

    def bucket_sizes(self) -> torch.Tensor:
        """Tokens per bucket: how evenly the centred keys spread.

        Returns
        -------
        torch.Tensor, int32 (Hkv, L, 2^K)
            The sizes.
        """
        return self.bucket_ends() - self.offsets[..., :-1]

    @property
    def max_bucket(self) -> int:
        """Tokens in the largest bucket of any (KV head, table): the width to which the
        sync-free decode step pads each bucket it reads."""
        return self._bucket_bounds()[0]

    @property
    def max_candidates(self) -> int:
        """The most table entries one query can scan: over KV heads, the sum over tables of
        each table's largest bucket. A query samples at most this / min_hits keys, which
        bounds the sync-free step's read list with a number the host knows."""
        return self._bucket_bounds()[1]

    def _bucket_bounds(self) -> tuple[int, int]:
        # Host ints, read once per index (build_index does it while it builds): on a GPU each
        # read waits for the device, which a decode step must not do.
        bounds = self.cache.get("bucket_bounds")
        if bounds is None:
            sizes = self.bucket_sizes().to(torch.int64)
            largest = sizes.amax(-1) if sizes.shape[-1] else sizes.sum(-1)  # no buckets: zeros
            bounds = (int(largest.max()), int(largest.sum(-1).max()))
            self.cache["bucket_bounds"] = bounds
        return bounds


def build_index(
    k: torch.Tensor,
    *,
    K: int,
    L: int,
    sinks: int = DEFAULTS.sinks,
    recent: int = DEFAULTS.recent,
    seed: int = 0,
    centre: bool = True,
    max_bytes: int | None = None,
    mean: torch.Tensor | None = None,
) -> LSHIndex:
    """Hash the post-RoPE keys ``k`` of one layer into L tables of K bits.

    Parameters
    ----------
    k : torch.Tensor, (Hkv, n, d)
        The keys, finite. The index lives on their device.
    K : int in [1, 62]
        Bits per table, no default: the entry points (``use_attention``, ``magicpig()``, the CLI)
        pass :data:`pigviz.DEFAULTS`'s or the caller's.
    L : int >= 1
        Tables, no default either.
    sinks, recent : int >= 0
        The first and last tokens, read exactly and never sampled; sinks + recent < n.
    seed : int >= 0
        Fixes the hyperplanes: they are drawn on the CPU and moved to ``k``'s device, so CPU and
        CUDA indexes of the same keys share planes.
    centre : bool
        False hashes the raw keys (mean set to zero), to show why MagicPIG centres them.
    max_bytes : number > 0, optional
        Cap on the build's peak memory: the tables plus :func:`build_scratch_bytes` of
        temporaries. Default: half of the memory free on ``k``'s device.
    mean : torch.Tensor, (Hkv, d), optional
        Centre on it instead of the sampleable keys' own mean (an index that :func:`insert_tokens`
        grew keeps its prefill's mean; a build over the same keys with that mean files every token
        in the same buckets, in the same order).

    Returns
    -------
    LSHIndex
        The tables, packed (CSR), with the planes, the mean and the centred keys' norms.

    Raises
    ------
    TypeError
        ``k`` not a tensor, ``centre`` not a bool, or an integer argument not an integer.
    ValueError
        A shape or a range above broken, a key that is not finite, or a build that would take more
        than ``max_bytes`` (the message says how much it needs).
    """
    if not isinstance(k, torch.Tensor):
        raise TypeError(f"k must be a torch.Tensor of shape (kv_heads, n, d), got {type(k).__name__}")
    if k.ndim != 3:
        raise ValueError(f"k must have shape (kv_heads, n, d), got {tuple(k.shape)}")
    num_kv, n, d = k.shape
    if n < 1 or d < 1 or num_kv < 1:
        raise ValueError(f"k must hold at least one head, token and dimension, got {tuple(k.shape)}")
    if n >= 2**31:
        raise ValueError(f"k holds n={n} tokens; token ids are int32, so n must be below 2^31")
    K = check_int("K", K, 1, MAX_K)
    L = check_int("L", L, 1)
    seed = check_int("seed", seed, 0)
    sinks = check_int("sinks", sinks, 0)
    recent = check_int("recent", recent, 0)
    if sinks + recent >= n:
        raise ValueError(
            f"sinks + recent must be below n={n} so that some keys are left to sample, got {sinks} + {recent}"
        )
    tables = index_bytes(n, K, L, num_kv, k.device)
    scratch = build_scratch_bytes(n, K, L)
    if max_bytes is None:
        limit = int(DEFAULT_MEMORY_FRACTION * _free_memory_bytes(k.device))
    else:
        limit = int(check_float("max_bytes", max_bytes, 0, lo_open=True))
    if tables + scratch > limit:
        raise ValueError(
            f"K={K}, L={L} tables for {num_kv} KV head(s) x n={n} tokens would take {_gib(tables + scratch)} "
            f"while building: {_gib(tables)} of tables (id_bytes·L·n + 4·L·(2^K+1) bytes per head) plus "
            f"{_gib(scratch)} of scratch (about 20·L·n bytes of int64 bucket ids and sort order, and the "
            f"hashing buffer), over the limit of {_gib(limit)}; reduce K or L"
        )

    planes = _planes(d, K, L, seed, k.device)
    if not isinstance(centre, bool):
        raise TypeError(f"centre must be True or False, got {centre!r}")
    if mean is not None:
        if not isinstance(mean, torch.Tensor) or tuple(mean.shape) != (num_kv, d):
            raise ValueError(f"mean must be a tensor of shape (kv_heads, d) = {(num_kv, d)}, got {mean!r:.80}")
        mean = mean.to(device=k.device, dtype=torch.float32)
    elif centre:
        mean = k[:, sinks : n - recent].to(torch.float32).mean(dim=1)
    if not centre:
        mean = torch.zeros((num_kv, d), dtype=torch.float32, device=k.device)
    # Checked per block below; a mean that overflows float32 is caught here.
    if not bool(torch.isfinite(mean).all()):
        _refuse_non_finite(k, sinks, n - recent)
    index = LSHIndex(
        K=K,
        L=L,
        sinks=sinks,
        recent=recent,
        seed=seed,
        centred=centre,
        planes=planes,
        mean=mean,
        entries=torch.empty((num_kv, L, n), dtype=token_id_dtype(n, k.device), device=k.device),
        offsets=_huge_page_empty((num_kv, L, 2**K + 1), torch.int32, k.device),
        centred_norms=torch.empty((num_kv, n), dtype=torch.float32, device=k.device),
    )

    table_base = (torch.arange(L, device=k.device) * 2**K)[:, None]
    hasher = _Hasher(index)
    buckets = torch.empty((L, n), dtype=hasher.code_dtype, device=k.device)
    for g in range(num_kv):  # one KV head at a time bounds the temporaries
        for start in range(0, n, _BUILD_BLOCK):
            block = k[g, start : start + _BUILD_BLOCK].to(torch.float32)
            # One NaN key would otherwise land silently in bucket 0 of every table.
            if not bool(torch.isfinite(block).all()):
                _refuse_non_finite(k, start, start + block.shape[0], g)
            block = block - mean[g]
            hasher.codes(block, start, buckets[:, start : start + block.shape[0]])
            index.centred_norms[g, start : start + block.shape[0]] = block.norm(dim=-1)
        if hasher.fast and kernels.build_tables(buckets, index.entries[g], index.offsets[g]):
            continue
        index.entries[g] = _stable_argsort_rows(buckets, K).to(index.entries.dtype)
        per_bucket = torch.bincount((buckets + table_base).view(-1), minlength=L * 2**K).view(L, 2**K)
        index.offsets[g, :, 0] = 0
        index.offsets[g, :, 1:] = per_bucket.cumsum(1)
    index._bucket_bounds()  # read now, once, while the build waits for the device anyway
    return index


_HUGE_PAGE = 2 << 20


def grow_index(prompt_index: LSHIndex, k: torch.Tensor, n: int) -> LSHIndex:
    """The tables of ``prompt_index`` seen by a decode step whose cache holds n >= n0 keys.

    The n - n0 keys written since are appended after every table's last bucket, so no bucket
    lists them and they are never sampled. That changes nothing while they sit in the exact
    recent window, i.e. while n - n0 <= recent: their table hits would be zeroed anyway.

    Parameters
    ----------
    prompt_index : LSHIndex
        Built over the first n0 keys, as at the end of a prefill.
    k : torch.Tensor, (Hkv, >= n, d)
        The cache.
    n : int in [n0, n0 + recent]
        The keys the step sees.

    Returns
    -------
    LSHIndex
        ``prompt_index`` itself when n = n0, else a copy that lists the new ids (and shares the
        planes, the mean and the cache).

    Raises
    ------
    ValueError
        ``n`` outside its range.
    """
    base = prompt_index
    Hkv, L, n0 = base.entries.shape
    check_int("n", n, n0, n0 + base.recent)
    if n == n0:
        return base
    # Made as int32: torch has no arange for the uint16 ids of a short index.
    new = torch.arange(n0, n, dtype=torch.int32, device=base.device).to(base.entries.dtype).expand(Hkv, L, n - n0)
    norms = (k[:, n0:n].float() - base.mean[:, None, :]).norm(dim=-1)
    # The grown index shares the lookup tables the prompt's index cached (they depend on K, L, planes only).
    return dataclasses.replace(
        base,
        entries=torch.cat([base.entries, new], dim=2),
        centred_norms=torch.cat([base.centred_norms, norms], dim=1),
        cache=base.cache,
    )


class _Hasher:
    """The index's bucket coder for keys already centred on its mean: the one routine that both
    :func:`build_index` and :func:`insert_tokens` hash with.

    Keys are hashed ``_HASH_BLOCK`` token positions at a time, in blocks aligned to multiples
    of ``_HASH_BLOCK`` (a part-filled block is padded with zero rows): every key then goes
    through a matrix product of the same shape, at the same column, whether a build hashes it
    with its neighbours or an insertion hashes it alone, so it gets the same bits (a product
    of another shape may sum in another order and flip the sign of a projection near 0).
    Compiled path: projections transposed (planes^T @ keys^T, the same numbers as keys @ planes)
    and bits packed in numba, int32 ids; else :meth:`LSHIndex.bucket_ids`, int64 ids."""

    def __init__(self, index: LSHIndex):
        self.index = index
        device = index.planes.device
        self.fast = device.type == "cpu" and index.K <= 30 and kernels.available()
        self.code_dtype = torch.int32 if self.fast else torch.int64
        self.rows = torch.zeros((_HASH_BLOCK, index.head_dim), dtype=torch.float32, device=device)
        if self.fast:
            self.planes_t = index.planes.T.contiguous()
            # Hashed into one reused buffer that stays in cache while its bits are packed (a
            # single (L*K, n) product would go to DRAM).
            self.proj_t = torch.empty((index.L * index.K, _HASH_BLOCK), dtype=torch.float32)
            self.packed = torch.empty((index.L, _HASH_BLOCK), dtype=torch.int32)

    def codes(self, centred: torch.Tensor, first: int, out: torch.Tensor) -> None:
        """Buckets of the centred keys ``centred`` (m, d) float32, token positions first ..
        first + m - 1, into ``out`` (L, m)."""
        m = centred.shape[0]
        t = first
        while t < first + m:
            base = t - t % _HASH_BLOCK
            stop = min(first + m, base + _HASH_BLOCK)
            if t == base and stop == base + _HASH_BLOCK:
                rows = centred[t - first : stop - first]  # a whole block: hashed in place
            else:
                rows = self.rows
                rows.zero_()
                rows[t - base : stop - base] = centred[t - first : stop - first]
            if self.fast:
                kernels.pack_buckets(torch.mm(self.planes_t, rows.T, out=self.proj_t), 0, self.index.K, self.packed)
                out[:, t - first : stop - first] = self.packed[:, t - base : stop - base]
            else:
                out[:, t - first : stop - first] = self.index.bucket_ids(rows).T[:, t - base : stop - base]
            t = stop


# Room each bucket gets when a table row is laid out with room to grow: size // 8 + 1 slots.
_SLACK_SHIFT = 3
UPKEEP_COUNTS = ("tokens", "written", "moved", "relocations", "relayouts", "grown", "merged", "hashed")


def insert_tokens(index: LSHIndex, k: torch.Tensor, stop: int) -> dict:
    """File the keys cached after the index was built, tokens ``index.n .. stop - 1`` of ``k``, in
    the tables of ``index`` (changed in place).

    Only the new keys are hashed, with the index's own planes and its own ``mean`` (the
    prefill's: the index is not re-centred), by the routine :func:`build_index` uses. The
    tables come out listing exactly the tokens, in the same order within each bucket, that
    ``build_index(k[:, :stop], mean=index.mean, ...)`` with the same seed lists, so every query
    samples the same keys.

    **Upkeep.** On the CPU with the compiled kernels, the first insertion lays each table's row
    of ``entries`` out with room to grow (``size // 16 + 1`` spare slots per bucket, and free
    slots at the row's end). A new id is written at its bucket's end (new ids are the largest,
    so ids stay ascending in a bucket); a full bucket moves to the row's free end with twice
    its size of room, and a row with no free end left is laid out again, compacted (the whole
    ``entries`` grows by at least an eighth when even that does not fit). Each move doubles a
    bucket's room, and a row is laid out again only after its free end (at least an eighth of
    its ids) has been used up by moves, so the ids copied per inserted token stay bounded by a
    constant, whatever the context length and however many tokens came before (no step
    re-sorts or re-hashes a table). Elsewhere (a GPU; no numba) the tables stay packed and each
    insertion merges the new ids in by one stable sort per table: no re-hashing, but a pass
    over the table.

    Parameters
    ----------
    index : LSHIndex
        The tables to grow.
    k : torch.Tensor, (Hkv, >= stop, d)
        The cache, finite; its first ``index.n`` keys are those the index holds.
    stop : int in [index.n, k.shape[1]]
        One past the last token to file.

    Returns
    -------
    dict
        ``index.upkeep_stats``, counts summed over the calls, KV heads and tables (token ids
        unless said): ``tokens`` inserted; ``hashed`` keys hashed (= tokens); ``written`` new ids;
        ``moved`` ids copied by bucket moves and row layouts; ``relocations`` bucket moves;
        ``relayouts`` row layouts; ``grown`` ids copied when ``entries`` grew or widened to int32
        (and by the first layout); ``merged`` ids rewritten by packed merges.

    Raises
    ------
    TypeError
        ``index`` not an :class:`LSHIndex`.
    ValueError
        ``k`` of another shape, ``stop`` outside its range, or a new key that is not finite.
    """
    if not isinstance(index, LSHIndex):
        raise TypeError(f"index must be an LSHIndex, got {type(index).__name__}")
    if (
        not isinstance(k, torch.Tensor)
        or k.ndim != 3
        or k.shape[0] != index.num_kv_heads
        or k.shape[2] != index.head_dim
    ):
        raise ValueError(
            f"k must be a tensor of shape (kv_heads, tokens, d) = ({index.num_kv_heads}, >= stop, {index.head_dim}), "
            f"got {tuple(k.shape) if isinstance(k, torch.Tensor) else type(k).__name__}"
        )
    n0 = index.n
    stop = check_int("stop", stop, n0, k.shape[1])
    stats = index.upkeep_stats
    for name in UPKEEP_COUNTS:
        stats.setdefault(name, 0)
    if stop == n0:
        return stats
    Hkv, L, c = index.num_kv_heads, index.L, stop - n0
    hasher = index.cache.get("upkeep_hasher")
    if hasher is None:
        hasher = index.cache["upkeep_hasher"] = _Hasher(index)
    codes = torch.empty((Hkv, L, c), dtype=hasher.code_dtype, device=index.device)
    norms = _norms_room(index, stop)
    for g in range(Hkv):
        block = k[g, n0:stop].to(device=index.device, dtype=torch.float32)
        if not bool(torch.isfinite(block).all()):
            _refuse_non_finite(k, n0, stop, g)
        block = block - index.mean[g]
        hasher.codes(block, n0, codes[g])
        norms[g, n0:stop] = block.norm(dim=-1)
    if hasher.fast:
        _file_in_room(index, codes, n0, stop, stats)
    else:
        _merge_packed(index, codes, n0, stop, stats)
    index.centred_norms = norms[:, :stop]
    stats["tokens"] += c
    stats["hashed"] += c
    # What the decode step and attend kept for the old tables (views, sizes, scratch sized by n).
    for key in list(index.cache):
        if key in ("fused_decode", "fused_workspace", "bucket_bounds") or (
            isinstance(key, tuple) and key and key[0] == "padded plan"
        ):
            del index.cache[key]
    return stats


def _norms_room(index: LSHIndex, stop: int) -> torch.Tensor:
    """A (Hkv, >= stop) float32 buffer whose first n columns are ``centred_norms``, with room
    to grow by an eighth (appending a token must not copy every norm)."""
    buf = index.cache.get("upkeep_norms")
    n = index.n
    if buf is None or buf.shape[1] < stop or buf.data_ptr() != index.centred_norms.data_ptr():
        cap = max(stop + _HASH_BLOCK, stop + stop // 8)
        buf = torch.empty((index.num_kv_heads, cap), dtype=torch.float32, device=index.device)
        buf[:, :n] = index.centred_norms
        index.cache["upkeep_norms"] = buf
    return buf


def _rows_2d(t: torch.Tensor) -> np.ndarray:
    """(Hkv, L, m) tensor as the kernels' (Hkv * L, m) numpy view (no copy)."""
    view = t.reshape(t.shape[0] * t.shape[1], t.shape[2])
    assert view.data_ptr() == t.data_ptr()
    return view.numpy()


def make_room(index: LSHIndex) -> int:
    """Lay the packed tables of a CPU ``index`` out with room to grow (see :func:`insert_tokens`),
    in place. A decoder calls it right after the build, so that the first insertion does not pay
    for it in a decode step. A no-op where the tables have room already, or stay packed (GPU, no
    numba).

    Parameters
    ----------
    index : LSHIndex
        The tables, changed in place.

    Returns
    -------
    int
        The ids copied (0 for a no-op).
    """
    if index.ends is not None or index.device.type != "cpu" or index.K > 30 or not kernels.available():
        return 0
    Hkv, L, n = index.num_kv_heads, index.L, index.n
    nb = 2**index.K
    sizes = index.bucket_sizes().to(torch.int64)
    caps = sizes + (sizes >> _SLACK_SHIFT) + 1
    need = caps.sum(-1)
    # The same room kernels.relayout asks for: the laid-out ids, a quarter more and two
    # moves of the largest bucket free at the row's end.
    width = int((need + (need >> 2) + 2 * caps.amax(-1) + 2).max())
    entries = torch.zeros((Hkv, L, width), dtype=index.entries.dtype)
    entries[..., :n] = index.entries[..., :n]
    ends = torch.zeros((Hkv, L, nb + 1), dtype=index.offsets.dtype)  # the kernel reads ends[..., :nb]
    ends[..., :nb] = index.offsets[..., 1:]
    limits = index.offsets[..., 1:].clone()
    offsets = index.offsets.clone() if not index.offsets.is_contiguous() else index.offsets
    index.entries, index.ends, index.limits, index.offsets = entries, ends[..., :nb], limits, offsets
    scratch = np.zeros(width, dtype=entries.numpy().dtype)
    moved = kernels.relayout_rows(
        _rows_2d(index.entries), _rows_2d(index.offsets), _rows_2d(ends)[:, :nb], _rows_2d(limits), scratch
    )
    stats = index.upkeep_stats
    for name in UPKEEP_COUNTS:
        stats.setdefault(name, 0)
    stats["grown"] += moved
    index.cache.pop("fused_decode", None)
    index.cache.pop("fused_workspace", None)
    return moved


def _file_in_room(index: LSHIndex, codes: torch.Tensor, n0: int, stop: int, stats: dict) -> None:
    """The compiled insertion (tables with room to grow; see :func:`insert_tokens`)."""
    if index.ends is None:
        make_room(index)
    if stop > SHORT_IDS and index.entries.dtype == torch.uint16:
        stats["grown"] += index.entries.numel()
        index.entries = index.entries.to(torch.int32)
    Hkv, L, c = codes.shape
    nb = 2**index.K
    # ends is a view of a (Hkv, L, 2^K + 1) buffer (strided like offsets[..., 1:]).
    ends_buf = torch.as_strided(index.ends, (Hkv, L, nb + 1), (index.ends.stride(0), index.ends.stride(1), 1))
    counts = np.zeros(5, dtype=np.int64)
    r0 = i0 = 0
    while True:
        width = index.entries.shape[2]
        scratch = np.zeros(width, dtype=index.entries.numpy().dtype)
        resume = kernels.file_tokens(
            _rows_2d(index.entries),
            _rows_2d(index.offsets),
            _rows_2d(ends_buf)[:, :nb],
            _rows_2d(index.limits),
            _rows_2d(codes),
            n0,
            r0,
            i0,
            scratch,
            counts,
        )
        if resume < 0:
            break
        # A row's layout needs more room than entries has: grow every row by at least an eighth.
        r0, i0 = divmod(resume, c)
        grown = torch.zeros((Hkv, L, max(int(counts[4]), width + width // 8)), dtype=index.entries.dtype)
        grown[..., :width] = index.entries
        stats["grown"] += index.entries.numel()
        index.entries = grown
    stats["written"] += int(counts[0])
    stats["moved"] += int(counts[1])
    stats["relocations"] += int(counts[2])
    stats["relayouts"] += int(counts[3])


def _merge_packed(index: LSHIndex, codes: torch.Tensor, n0: int, stop: int, stats: dict) -> None:
    """Packed tables (a GPU, no numba): the new ids merged in by one stable sort per table."""
    Hkv, L, c = codes.shape
    nb = 2**index.K
    dev = index.device
    rows = Hkv * L
    ends = index.offsets[..., 1:].reshape(rows, nb).to(torch.int64)
    positions = torch.arange(n0, device=dev).expand(rows, n0).contiguous()
    old = torch.searchsorted(ends, positions, right=True)  # the bucket of each packed slot
    keys = torch.cat([old, codes.reshape(rows, c).to(torch.int64)], 1)
    order = torch.sort(keys, dim=1, stable=True).indices
    ids = torch.cat(
        [index.entries[..., :n0].reshape(rows, n0).to(torch.int64), torch.arange(n0, stop, device=dev).expand(rows, c)],
        1,
    )
    entries = ids.gather(1, order).to(token_id_dtype(stop, dev)).view(Hkv, L, stop)
    base = (torch.arange(rows, device=dev) * nb)[:, None]
    per_bucket = torch.bincount((keys + base).view(-1), minlength=rows * nb).view(Hkv, L, nb)
    offsets = torch.zeros_like(index.offsets)
    offsets[..., 1:] = per_bucket.cumsum(-1).to(offsets.dtype)
    index.entries, index.offsets = entries, offsets
    stats["merged"] += rows * stop


def packed_tables(index: LSHIndex) -> tuple[torch.Tensor, torch.Tensor]:
    """The tables of ``index`` as packed CSR tables: what a build of the same tokens holds.

    Parameters
    ----------
    index : LSHIndex
        The tables, packed or with room to grow.

    Returns
    -------
    entries : torch.Tensor, (Hkv, L, n)
        Token ids sorted by bucket (a copy where the tables have room to grow).
    offsets : torch.Tensor, int32 (Hkv, L, 2^K + 1)
        Where each bucket starts in ``entries``.
    """
    if index.ends is None:
        return index.entries, index.offsets
    sizes = index.bucket_sizes().to(torch.int64)
    offsets = torch.zeros_like(index.offsets)
    offsets[..., 1:] = sizes.cumsum(-1).to(offsets.dtype)
    Hkv, L, nb = sizes.shape
    entries = torch.empty((Hkv, L, index.n), dtype=index.entries.dtype)
    for g in range(Hkv):
        for table in range(L):
            runs = [
                index.entries[g, table, int(s) : int(e)]
                for s, e in zip(index.offsets[g, table, :nb].tolist(), index.ends[g, table].tolist())
                if e > s
            ]
            used = torch.cat(runs) if runs else entries[g, table, :0]
            entries[g, table, : used.numel()] = used
    return entries, offsets


def _huge_page_empty(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty``, on the CPU in transparent huge pages where the OS offers them (Linux,
    THP in "madvise" or "always" mode); elsewhere, or under 1 MiB, plain ``torch.empty`` (a
    tensor of 1-2 MiB takes a whole 2 MiB page).
    The tensor keeps its mapping alive.

    Used for ``offsets``: a decode step's first read in each table is one random offset per
    query head, and with 4 KiB pages nearly every one was also a TLB miss (about 1 ms of a
    SmolLM2 step at 8k, 29 layers). ``entries`` would gain a little more, but it is 4x
    larger and the kernel's search for free 2 MiB pages at the first touch (direct
    compaction) then added a second to an 8k index build."""
    count = 1
    for size in shape:
        count *= size
    nbytes = count * torch.empty((), dtype=dtype).element_size()
    if device.type != "cpu" or nbytes < _HUGE_PAGE // 2 or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=dtype, device=device)
    try:
        region = mmap.mmap(-1, nbytes + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
        start = (-ctypes.addressof(ctypes.c_char.from_buffer(region))) % _HUGE_PAGE  # 2 MiB aligned
        return torch.frombuffer(region, dtype=dtype, count=count, offset=start).view(shape)
    except (OSError, ValueError, AttributeError):  # no such mapping here: ordinary pages
        return torch.empty(shape, dtype=dtype, device=device)


_PLANES: dict = {}


def _planes(d: int, K: int, L: int, seed: int, device) -> torch.Tensor:
    """The hyperplanes, drawn on the CPU from ``seed`` and kept per (d, K, L, seed, device):
    a decoder that rebuilds its indexes reuses them instead of redrawing and re-uploading.
    Treat as read-only (indexes share it)."""
    key = (d, K, L, seed, str(device))
    if key not in _PLANES:
        if len(_PLANES) > 256:  # one per layer and seed in practice; stay bounded anyway
            _PLANES.clear()
        gen = torch.Generator().manual_seed(seed)
        _PLANES[key] = torch.randn(d, L * K, generator=gen, dtype=torch.float32).to(device)
    return _PLANES[key]


def _refuse_non_finite(k: torch.Tensor, start: int, stop: int, head: int | None = None):
    heads = range(k.shape[0]) if head is None else [head]
    for g in heads:
        bad = (~torch.isfinite(k[g, start:stop].to(torch.float32))).any(-1).nonzero()
        if bad.numel():
            raise ValueError(
                f"k must hold only finite numbers (in float32); key {start + int(bad[0])} of KV head {g} does not"
            )
    raise ValueError("the mean of the sampleable keys k overflows float32; rescale k")


def _stable_argsort_rows(buckets: torch.Tensor, K: int) -> torch.Tensor:
    """Token order by bucket within each table; ties keep token order, so a build is
    reproducible on any device."""
    if buckets.device.type == "cpu" and K <= 15:
        # numpy sorts 16-bit keys with a radix sort: ~3x faster than torch.sort here.
        small = buckets.numpy().astype(np.int16)
        return torch.from_numpy(np.argsort(small, axis=1, kind="stable"))
    return torch.sort(buckets, dim=1, stable=True).indices


def expected_candidates(n: int, K: int, L: int) -> float:
    """Entries one query scans if every bucket held the same number of keys: L·n / 2^K.

    Parameters
    ----------
    n : int
        Tokens in the index.
    K, L : int
        Bits per table, tables.

    Returns
    -------
    float
        The entries.
    """
    return L * n / 2.0**K
