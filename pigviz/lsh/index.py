"""MagicPIG's hash tables for one layer, built once from the prefill keys.

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

from pigviz._util.validate import check_float, check_int
from pigviz.lsh import kernels

__all__ = [
    "LSHIndex",
    "build_index",
    "grow_index",
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


def token_id_dtype(n: int, device="cpu") -> torch.dtype:
    """How ``entries`` stores the token ids of an n-token index: uint16 on the CPU while they
    fit (half the bytes a query scans), else int32. On a GPU always int32 (torch's CUDA
    kernels index with few 16-bit unsigned types)."""
    return torch.uint16 if n <= SHORT_IDS and torch.device(device).type == "cpu" else torch.int32


def index_bytes(n: int, K: int, L: int, num_kv_heads: int = 1, device="cpu") -> int:
    """Bytes of token ids plus bucket offsets for ``num_kv_heads`` heads (formula above)."""
    id_bytes = torch.empty((), dtype=token_id_dtype(n, device)).element_size()
    return num_kv_heads * (id_bytes * L * n + 4 * L * (2**K + 1))


def build_scratch_bytes(n: int, K: int, L: int) -> int:
    """Temporaries :func:`build_index` holds on top of the tables (one KV head at a time):
    the int64 bucket ids (L, n), their sort order (int64, then an int32 copy) or the
    bincount input (int64): about 20·L·n bytes; plus the hashing buffer of one block of
    keys against all L·K planes (float32 projections, their sign bits as bool and float32)."""
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
    :func:`pigviz.lsh.magicpig.attend`. All tensors live on the keys' device."""

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
    # Lookup tables and scratch buffers that attend keeps between calls (not in nbytes).
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_kv_heads(self) -> int:
        return self.entries.shape[0]

    @property
    def n(self) -> int:
        return self.entries.shape[2]

    @property
    def head_dim(self) -> int:
        return self.planes.shape[0]

    @property
    def device(self) -> torch.device:
        return self.entries.device

    @property
    def table_bytes(self) -> int:
        """Bytes of ``entries`` and ``offsets`` as stored (equals :func:`index_bytes`)."""
        return self.entries.nbytes + self.offsets.nbytes

    @property
    def nbytes(self) -> int:
        """Everything the index holds: tables, planes, means and centred-key norms."""
        return self.table_bytes + self.planes.nbytes + self.mean.nbytes + self.centred_norms.nbytes

    def bucket_ids(self, x: torch.Tensor) -> torch.Tensor:
        """Bucket of ``x`` (..., d) in each table: int64 tensor (..., L).

        A coordinate exactly on a hyperplane counts as the negative side, so a zero vector
        gets bucket 0 everywhere rather than a NaN.
        """
        proj = x.to(torch.float32) @ self.planes
        bits = (proj > 0).view(*x.shape[:-1], self.L, self.K)
        if self.K <= _EXACT_FLOAT_BITS:
            # A float32 matmul against powers of two packs the bits exactly at this K
            # and is ~10x faster on CPU than an int64 multiply-and-sum.
            weights = torch.exp2(torch.arange(self.K, device=x.device, dtype=torch.float32))
            return (bits.to(torch.float32) @ weights).to(torch.int64)
        weights = torch.bitwise_left_shift(
            torch.ones((), dtype=torch.int64, device=x.device),
            torch.arange(self.K, device=x.device),
        )
        return (bits.to(torch.int64) * weights).sum(-1)

    def token_ids(self) -> torch.Tensor:
        """``entries`` as int64 (a copy): for code that computes with the ids rather than
        reading them through the tables."""
        return self.entries.to(torch.int64)

    def bucket_sizes(self) -> torch.Tensor:
        """Tokens per bucket, (Hkv, L, 2^K): how evenly the centred keys spread."""
        return self.offsets[..., 1:] - self.offsets[..., :-1]

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
    K: int = 10,
    L: int = 150,
    sinks: int = 4,
    recent: int = 64,
    seed: int = 0,
    centre: bool = True,
    max_bytes: int | None = None,
) -> LSHIndex:
    """Hash the post-RoPE keys ``k`` (Hkv, n, d) of one layer into L tables of K bits.

    ``seed`` fixes the hyperplanes: they are drawn on the CPU and moved to ``k``'s device,
    so CPU and CUDA indexes of the same keys share planes. ``centre=False`` hashes the raw
    keys (mean set to zero), to show why MagicPIG centres them. ``max_bytes`` caps the peak
    memory of the build: the tables plus :func:`build_scratch_bytes` of temporaries; by
    default it is half of the memory free on ``k``'s device. A larger request raises
    ValueError saying how much the build would need. Keys must be finite (ValueError).
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
    mean = k[:, sinks : n - recent].to(torch.float32).mean(dim=1)
    if not centre:
        mean = torch.zeros_like(mean)
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
    # Compiled path: projections transposed (planes^T @ keys^T, the same numbers as
    # keys @ planes), bits packed and tables counting-sorted in numba; int32 bucket ids.
    fast = k.device.type == "cpu" and K <= 30 and kernels.available()
    planes_t = index.planes.T.contiguous() if fast else None
    proj_t = torch.empty((L * K, _HASH_BLOCK), dtype=torch.float32) if fast else None
    buckets = torch.empty((L, n), dtype=torch.int32 if fast else torch.int64, device=k.device)
    for g in range(num_kv):  # one KV head at a time bounds the temporaries
        for start in range(0, n, _BUILD_BLOCK):
            block = k[g, start : start + _BUILD_BLOCK].to(torch.float32)
            # One NaN key would otherwise land silently in bucket 0 of every table.
            if not bool(torch.isfinite(block).all()):
                _refuse_non_finite(k, start, start + block.shape[0], g)
            block = block - mean[g]
            if fast:
                # Hashed a few hundred keys at a time into one reused buffer that stays in
                # cache while its bits are packed (a single (L*K, n) product would go to DRAM).
                for sub in range(0, block.shape[0], _HASH_BLOCK):
                    rows = block[sub : sub + _HASH_BLOCK]
                    out = proj_t if rows.shape[0] == _HASH_BLOCK else None
                    kernels.pack_buckets(torch.mm(planes_t, rows.T, out=out), start + sub, K, buckets)
            else:
                buckets[:, start : start + block.shape[0]] = index.bucket_ids(block).T
            index.centred_norms[g, start : start + block.shape[0]] = block.norm(dim=-1)
        if fast and kernels.build_tables(buckets, index.entries[g], index.offsets[g]):
            continue
        index.entries[g] = _stable_argsort_rows(buckets, K).to(index.entries.dtype)
        per_bucket = torch.bincount((buckets + table_base).view(-1), minlength=L * 2**K).view(L, 2**K)
        index.offsets[g, :, 0] = 0
        index.offsets[g, :, 1:] = per_bucket.cumsum(1)
    index._bucket_bounds()  # read now, once, while the build waits for the device anyway
    return index


_HUGE_PAGE = 2 << 20


def grow_index(prompt_index: LSHIndex, k: torch.Tensor, n: int) -> LSHIndex:
    """The tables of ``prompt_index`` (built over the first n0 keys, as at the end of a
    prefill) seen by a decode step whose cache ``k`` (Hkv, >= n, d) holds n >= n0 keys.

    The n - n0 keys written since are appended after every table's last bucket, so no bucket
    lists them and they are never sampled. That changes nothing while they sit in the exact
    recent window, i.e. while n - n0 <= recent: their table hits would be zeroed anyway.
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
    """Entries one query scans if every bucket held the same number of keys: L·n / 2^K."""
    return L * n / 2.0**K
