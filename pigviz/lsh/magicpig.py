"""MagicPIG's sampled attention for one decode step of one layer (torch, CPU or CUDA).

For each query head the step

1. hashes the query (as is) with the index's hyperplanes and reads, in each of the L
   tables, the token ids filed under the query's bucket (two offset reads per table);
2. counts per token in how many tables it turned up, and keeps as the sampled set S the
   tokens with at least ``min_hits`` hits outside the exact set (the first ``sinks`` and
   last ``recent`` tokens, which are always read exactly);
3. gathers only those keys and values, and corrects each sampled score by its inclusion
   probability u, which depends only on the angle between the query and the centred key:
   p = 1 - arccos(cos(q, k - mean)) / pi, u = P(at least min_hits of L tables collide);
4. takes one softmax over [q·k_S/sqrt(d) - log u ; q·k_exact/sqrt(d)] and mixes
   [v_S ; v_exact] with it (self-normalised importance sampling).

Keys and values outside S and the exact set are never touched. Grouped-query attention:
query head h reads KV head h // (H / Hkv) and its tables. If a head samples nothing it
falls back to the exact set alone.

Build the index once per layer with :func:`pigviz.lsh.index.build_index`, then call
:func:`attend` for as many queries as you like; :func:`sampled_attention` does both.

On a GPU, :func:`attend` runs the same steps in a second formulation, :func:`_attend_padded`:
the one above sizes its tensors by what it found (how many keys a head sampled), and each
such size is a number the CPU must wait for the GPU to compute. The padded formulation
sizes everything by bounds the host already knows (the index's largest bucket, the most
keys a query could sample), so a whole decode step is queued without waiting; its
statistics stay on the GPU until someone reads them. Tests pin the two together on the CPU.
"""

from __future__ import annotations

import math
import os

import torch

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_float, check_int
from pigviz.attention import check_decode_shapes
from pigviz.lsh.index import LSHIndex, build_index
from pigviz.lsh.simhash import log_inclusion_probability_torch

__all__ = ["attend", "sampled_attention", "synthetic_decode_step", "log_inclusion_table", "exact_positions"]

# log u depends on the key only through p, so it is tabulated once per (K, L, min_hits) on
# a grid of p and interpolated: the exact binomial tail costs O(L) per key, the table O(1).
_GRID = 8192
# Floor for log u: a key whose bucket collided although its p was (numerically) 0.
_LOG_U_FLOOR = -1.0e4


def exact_positions(n: int, sinks: int, recent: int, device=None) -> torch.Tensor:
    """Token ids always read exactly: 0..sinks-1 and n-recent..n-1.

    Parameters
    ----------
    n : int
        Tokens in the cache.
    sinks, recent : int >= 0
        The first and last tokens read exactly.
    device : torch.device or str, optional
        Where the ids are made (default: torch's default device).

    Returns
    -------
    torch.Tensor, int64 (sinks + recent,)
        The ids, ascending when sinks + recent <= n.
    """
    return torch.cat([torch.arange(sinks, device=device), torch.arange(n - recent, n, device=device)])


_LOG_U_TABLES: dict = {}


def log_inclusion_table(index: LSHIndex, min_hits: int) -> torch.Tensor:
    """log u on the grid p = j / 8192, j = 0..8192, computed once per (K, L, min_hits, device) and
    shared by every index (decoding rebuilds indexes often); :func:`attend` interpolates it.

    Parameters
    ----------
    index : LSHIndex
        Gives K, L and the device.
    min_hits : int in [1, L]
        The tables a sampled key shares with the query.

    Returns
    -------
    torch.Tensor, float64 (8193,)
        log P(at least min_hits of L tables collide) at each p, floored at -1e4; on the index's device.
    """
    key = (index.K, index.L, min_hits, str(index.device))
    if key not in _LOG_U_TABLES:
        grid = torch.linspace(0.0, 1.0, _GRID + 1, dtype=torch.float64)
        table = log_inclusion_probability_torch(grid, index.K, index.L, min_hits).clamp(min=_LOG_U_FLOOR)
        _LOG_U_TABLES[key] = table.to(index.device)
    return _LOG_U_TABLES[key]


def _check_finite(device) -> bool:
    """Finiteness checks cost a host sync each on a GPU: there they run only with PIGVIZ_DEBUG=1."""
    return device.type == "cpu" or os.environ.get("PIGVIZ_DEBUG", "") not in ("", "0")


def _log_inclusion(index: LSHIndex, p: torch.Tensor, min_hits: int) -> torch.Tensor:
    table = log_inclusion_table(index, min_hits)
    # A NaN p (from a NaN key) stays NaN instead of becoming an out-of-range table index.
    pos = p.to(torch.float64).clamp(0.0, 1.0) * _GRID
    lo = pos.nan_to_num(0.0).floor().clamp(max=_GRID - 1)
    frac = pos - lo
    lo = lo.to(torch.int64)
    return (table[lo] * (1.0 - frac) + table[lo + 1] * frac).to(torch.float32)


def _concatenated_ranges(starts: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Which range each entry came from, and the entries
    [starts[0], ..., starts[0]+lengths[0]-1, starts[1], ...], without a Python loop."""
    total = int(lengths.sum())
    range_of_entry = torch.repeat_interleave(lengths, output_size=total).to(starts.dtype)
    shift = starts - (lengths.cumsum(0, dtype=starts.dtype) - lengths)  # start - first slot
    slots = torch.arange(total, device=starts.device, dtype=starts.dtype)
    return range_of_entry, slots + shift.index_select(0, range_of_entry)


def _workspace(store: dict, name: str, numel: int, dtype, device) -> torch.Tensor:
    """A flat scratch tensor kept between calls, grown when too small."""
    buf = store.get(name)
    if buf is None or buf.numel() < numel or buf.dtype != dtype or buf.device != device:
        buf = torch.empty(max(numel, 1), dtype=dtype, device=device)
        store[name] = buf
    return buf


def _gathered_dots(
    qf: torch.Tensor, k_rows: torch.Tensor, rows: torch.Tensor, group: int, workspace: dict
) -> torch.Tensor:
    """q_h · k[rows[h, j]] for every slot, one KV group at a time, into a kept buffer.

    A fresh tens-of-MB gather per step is returned to the OS by the C allocator when freed
    and page-faulted back in on the next step: on the CPU that costs as much as the gather
    itself. One group-sized buffer, reused across groups and steps, avoids it.
    """
    H, width = rows.shape
    d = k_rows.shape[1]
    dots = torch.empty((H, width), dtype=torch.float32, device=qf.device)
    buffer = _workspace(workspace, "keys", group * width * d, k_rows.dtype, k_rows.device)
    for h0 in range(0, H, group):
        picked = rows[h0 : h0 + group].reshape(-1)
        block = torch.index_select(k_rows, 0, picked, out=buffer[: picked.numel() * d].view(-1, d))
        block = block.view(-1, width, d).to(torch.float32)
        # (1, d) x (d, width) per head: ~2x faster on CPU than (width, d) x (d, 1).
        dots[h0 : h0 + group] = torch.bmm(qf[h0 : h0 + group, None, :], block.transpose(1, 2)).squeeze(1)
    return dots


def _mix_values(
    v_rows: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor, valid: torch.Tensor, per_head: torch.Tensor
) -> torch.Tensor:
    """sum_j weights[h, j] · v_rows[rows[h, j]] over the valid slots of each head."""
    if v_rows.dtype == torch.float32:
        # embedding_bag gathers and sums in one pass (no (H, width, dv) copy of the values);
        # it is several times faster than index_select + bmm on CPU.
        starts = per_head.cumsum(0) - per_head
        return torch.nn.functional.embedding_bag(
            rows[valid], v_rows, starts, mode="sum", per_sample_weights=weights[valid]
        )
    H, width = rows.shape
    v_read = v_rows.index_select(0, rows.view(-1)).view(H, width, -1).to(torch.float32)
    return torch.bmm(weights[:, None, :], v_read).squeeze(1)


def _corrected_scores(index, qf, dots, rows, kv_of_head, is_sampled, valid, min_hits, u_offset):
    """q·k / sqrt(d) - log u for every slot of the read lists ``rows`` (H, width) (flat ids
    into the index's (Hkv·n) keys): log u on the sampled slots only, -inf on unused slots.

    cos(q, k - mean) comes from the dot product already taken and the stored |k - mean|,
    so no key is read twice."""
    d = qf.shape[1]
    q_dot_mean = (qf * index.mean[kv_of_head]).sum(-1, keepdim=True)
    key_norms = index.centred_norms.reshape(-1).index_select(0, rows.reshape(-1)).view(rows.shape)
    norms = qf.norm(dim=-1, keepdim=True) * key_norms
    cos = torch.where(norms > 0, (dots - q_dot_mean) / norms.clamp(min=torch.finfo(torch.float32).tiny), 0.0)
    p = 1.0 - torch.arccos(cos.clamp(-1.0, 1.0)) / math.pi
    log_u = _log_inclusion(index, p, min_hits)
    if u_offset > 0:
        # full_like, not torch.tensor(...): a Python number copied to a GPU makes the host wait.
        log_u = torch.logaddexp(log_u, torch.full_like(log_u, math.log(u_offset)))
    log_u = torch.where(is_sampled, log_u, 0.0)
    return (dots / math.sqrt(d) - log_u).masked_fill(~valid, -math.inf)


def _refuse_non_finite_reads(problem: str, finite: torch.Tensor) -> None:
    """ValueError naming the first query head whose read rows are not all finite."""
    bad_heads = (~finite).any(-1)
    if bool(bad_heads.any()):
        head = int(bad_heads.nonzero()[0])
        raise ValueError(
            f"{problem} among the keys/values read by query head {head}; k and v must hold only finite numbers"
        )


def attend(
    index: LSHIndex,
    q,
    k,
    v,
    *,
    min_hits: int = DEFAULTS.min_hits,
    return_read_mask: bool = False,
    return_lse: bool = False,
    u_offset: float = 0.0,
    padded: bool | None = None,
):
    """One decode step of MagicPIG over the cache that ``index`` was built from.

    A non-finite number in a key or value that is read raises ValueError; keys and values
    that are not read are never looked at. On a GPU these checks (each a host sync) run only
    with the environment variable ``PIGVIZ_DEBUG=1``.

    Parameters
    ----------
    index : LSHIndex
        Built from ``k`` (:func:`pigviz.lsh.index.build_index`).
    q : torch.Tensor, (H, d)
        The queries, one row per query head; H a multiple of Hkv (head h reads KV head h // (H / Hkv)).
    k, v : torch.Tensor, (Hkv, n, d) and (Hkv, n, dv)
        The cache, on ``q``'s device.
    min_hits : int in [1, L]
        Tables a key must share with the query to be sampled.
    return_read_mask : bool
        Add ``read_mask`` to the stats.
    return_lse : bool
        Add ``lse`` to the stats.
    u_offset : float >= 0
        The correction becomes - log(u + u_offset). MagicPIG's reference code
        (evaluations/RULER/pred/cache_ref.py) adds 1e-4, which caps the weight of a key sampled
        against the odds; the default 0 keeps the plain 1/u importance weight. The two differ by
        up to ~2e-4 relative in the output on the shipped capture (tests/test_authors_formula.py).
    padded : bool, optional
        Which formulation runs. False: the readable one (this function's body), which sizes its
        tensors by the data (how many keys each head sampled), so a GPU must report those sizes to
        the host before it can go on: a few hundred waits per decoded token over a model's layers. True:
        :func:`_attend_padded`, the same estimator with every shape fixed by numbers the host
        knows, so the GPU is never waited for. None (default): padded on a GPU, the readable
        version on the CPU; the environment variable ``PIGVIZ_PADDED=1`` (or ``0``) overrides
        that default. Same read set, same outputs (to ~1e-6) and same ``stats`` keys.

    Returns
    -------
    output : torch.Tensor, (H, dv), q's dtype
        The attention output of each head.
    stats : dict
        ``budget`` (mean over heads of keys read / n), per-head int64 tensors ``keys_read``
        (distinct keys whose values enter the output, exact set included), ``sampled`` (|S|),
        ``candidates`` (table entries scanned), plus ``exact`` (size of the exact set), ``n`` and,
        if asked, ``read_mask`` (H, n) bool of the keys read and ``lse`` (H,) float32, log sum exp
        of the scores mixed (-inf if nothing was read): the normaliser that lets a caller merge
        this output with attention over other keys. On a GPU the padded path keeps its stats on
        the device: ``keys_read``, ``sampled``, ``candidates`` and ``lse`` are device tensors and
        ``budget`` a 0-d float64 device tensor (``float(stats["budget"])`` waits for the GPU:
        read it once, when needed).

    Raises
    ------
    TypeError
        ``index`` not an :class:`~pigviz.lsh.index.LSHIndex`, a tensor of the wrong kind, or
        ``padded`` not a bool or None.
    ValueError
        Shapes that do not match each other or the index, ``min_hits`` or ``u_offset`` outside
        its range, a non-finite query, key or value read, or a bad ``PIGVIZ_PADDED``.
    """
    H, Hkv, n, d = check_decode_shapes(q, k, v)
    if not isinstance(index, LSHIndex):
        raise TypeError(f"index must be an LSHIndex from pigviz.lsh.index.build_index, got {type(index).__name__}")
    if (Hkv, n, d) != (index.num_kv_heads, index.n, index.head_dim):
        raise ValueError(
            f"k has shape {tuple(k.shape)} but the index was built for "
            f"(kv_heads, n, d) = {(index.num_kv_heads, index.n, index.head_dim)}"
        )
    min_hits = check_int("min_hits", min_hits, 1, index.L)
    u_offset = check_float("u_offset", u_offset, 0.0)
    dev, L = k.device, index.L
    check = _check_finite(dev)
    if check and not bool(torch.isfinite(q).all()):
        raise ValueError("q must contain only finite numbers")
    if _use_padded(dev, padded):
        out, stats = _attend_padded(index, q, k, v, min_hits, return_read_mask, return_lse, u_offset, check)
        if dev.type == "cpu":  # a number, as from the readable version; a GPU would wait for it
            stats["budget"] = float(stats["budget"])
        return out, stats
    kv_of_head = torch.arange(H, device=dev) // (H // Hkv)
    qf = q.to(torch.float32)

    # 1. The query's bucket in every table, and where that bucket's ids lie in `entries`.
    query_buckets = index.bucket_ids(qf)  # (H, L)
    tables = torch.arange(L, device=dev)
    starts = index.offsets[kv_of_head[:, None], tables[None, :], query_buckets]
    lengths = index.bucket_ends()[kv_of_head[:, None], tables[None, :], query_buckets] - starts
    # int32 positions halve the memory traffic of the ~L n / 2^K entries per head scanned.
    small = index.entries.numel() < 2**31 and H * n < 2**31
    idx_dtype = torch.int32 if small else torch.int64
    width = index.entries.shape[2]  # n, or more for tables with room to grow
    flat_starts = ((kv_of_head[:, None] * L + tables[None, :]) * width + starts).to(idx_dtype)
    candidates = lengths.sum(1)
    range_of_entry, positions = _concatenated_ranges(flat_starts.reshape(-1), lengths.reshape(-1).to(idx_dtype))
    # Indexing, not index_select: torch's index_select has no uint16 kernel (short ids).
    tokens = index.entries.view(-1)[positions].to(idx_dtype)
    head_base = (torch.arange(H, device=dev, dtype=idx_dtype) * n).repeat_interleave(L)  # per range
    counter_of_entry = head_base.index_select(0, range_of_entry) + tokens

    # 2. Hits per (head, token) in the narrowest integer type that can count to L; the
    #    exact set is read anyway, so it is never "sampled".
    count_dtype = torch.int32
    if dev.type == "cpu":  # byte counters: 4x less memory traffic than int32 on CPU
        count_dtype = torch.uint8 if L <= 255 else torch.int16 if L < 2**15 else torch.int32
    hits = torch.zeros(H * n, dtype=count_dtype, device=dev)
    hits.index_add_(0, counter_of_entry, torch.ones(tokens.numel(), dtype=count_dtype, device=dev))
    hits = hits.view(H, n)
    hits[:, : index.sinks] = 0
    hits[:, n - index.recent :] = 0
    sampled_head, sampled_token = (hits >= min_hits).nonzero(as_tuple=True)
    sampled = torch.bincount(sampled_head, minlength=H)

    # 3. Each head's read list [exact set, sampled set, padding] as one (H, width) table,
    #    so the rest is two batched matmuls. Padding repeats a token the head reads anyway:
    #    nothing outside the read set is ever loaded.
    exact = exact_positions(n, index.sinks, index.recent, dev)
    num_exact = exact.numel()
    width = max(1, num_exact + int(sampled.max()))
    first_of_head = sampled.cumsum(0) - sampled
    slot = num_exact + torch.arange(sampled_head.numel(), device=dev) - first_of_head[sampled_head]
    if num_exact:
        pad = exact[:1].expand(H)
    elif sampled_token.numel():
        # No exact set: pad with the head's first sampled token. A head that read nothing
        # borrows another head's token; its output is forced to 0 below anyway.
        pad = sampled_token[first_of_head.clamp(max=sampled_token.numel() - 1)]
    else:
        pad = torch.zeros(H, dtype=torch.int64, device=dev)
    read = pad[:, None].expand(H, width).clone()
    read[:, :num_exact] = exact
    read[sampled_head, slot] = sampled_token
    columns = torch.arange(width, device=dev)
    valid = columns[None, :] < (num_exact + sampled)[:, None]
    is_sampled = valid & (columns[None, :] >= num_exact)

    rows = kv_of_head[:, None] * n + read
    workspace = index.cache.setdefault("workspace", {})
    dots = _gathered_dots(qf, k.reshape(Hkv * n, d), rows, H // Hkv, workspace)  # (H, width)
    # Only the gathered keys are checked: scanning all of k would cost as much as dense attention.
    if check:
        _refuse_non_finite_reads(
            "k holds a non-finite number (or q·k overflows float32)", torch.isfinite(dots) | ~valid
        )

    # 4. Scores corrected by log u, then one softmax per head over its read list.
    scores = _corrected_scores(index, qf, dots, rows, kv_of_head, is_sampled, valid, min_hits, u_offset)
    read_any = (num_exact + sampled)[:, None] > 0
    weights = torch.where(read_any, torch.softmax(scores, dim=-1), 0.0)  # nothing read: 0, not NaN
    out = _mix_values(v.reshape(Hkv * n, -1), rows, weights, valid, num_exact + sampled)
    out = torch.where(read_any, out, 0.0)
    # The weights are finite here, so a non-finite output comes from a value that was read.
    if check:
        _refuse_non_finite_reads(
            "v holds a non-finite number (or the weighted sum overflows float32)", torch.isfinite(out)
        )

    keys_read = sampled + num_exact
    stats = {
        "budget": float(keys_read.double().mean()) / n,
        "keys_read": keys_read.cpu(),
        "sampled": sampled.cpu(),
        "candidates": candidates.cpu(),
        "exact": num_exact,
        "n": n,
    }
    if return_lse:
        stats["lse"] = torch.logsumexp(scores, dim=-1)
    if return_read_mask:
        mask = torch.zeros((H, n), dtype=torch.bool, device=dev)
        mask[torch.arange(H, device=dev)[:, None].expand_as(read)[valid], read[valid]] = True
        stats["read_mask"] = mask
    return out.to(q.dtype), stats


def _use_padded(device, padded) -> bool:
    if padded is not None:
        if not isinstance(padded, bool):
            raise TypeError(f"padded must be True, False or None, got {padded!r}")
        return padded
    forced = os.environ.get("PIGVIZ_PADDED", "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    if forced:
        raise ValueError(f"PIGVIZ_PADDED must be 1 or 0 (or unset: padded on a GPU only), got {forced!r}")
    return device.type != "cpu"


# Bytes of gathered float32 keys (or values) held at once; more heads go in several batches.
_GATHER_BYTES = 256 * 2**20


class _PaddedPlan:
    """What the padded step needs besides the query, made once per (index, n, heads,
    min_hits, device): index tensors and masks that depend only on shapes. On a GPU each is
    a kernel launch, so they are kept in ``index.cache`` instead of remade every layer of
    every token."""

    def __init__(self, index: LSHIndex, H: int, min_hits: int, device):
        n, sinks, recent = index.n, index.sinks, index.recent
        self.kv_of_head = torch.arange(H, device=device) // (H // index.num_kv_heads)
        self.group = self.kv_of_head[:, None]
        self.row_base = self.group * n
        self.table = torch.arange(index.L, device=device)[None, :]
        self.slot = torch.arange(index.max_bucket, device=device)
        self.sampleable = torch.ones(n, dtype=torch.bool, device=device)
        self.sampleable[:sinks] = False
        self.sampleable[n - recent :] = False
        self.tokens = torch.arange(n, device=device).expand(H, n)
        exact = exact_positions(n, sinks, recent, device)
        self.num_exact = exact.numel()
        # No head can sample more: each sampled key takes min_hits of the head's candidates.
        self.width = max(1, min(n - self.num_exact, index.max_candidates // min_hits))
        self.spare = self.num_exact + self.width  # the column unsampled tokens are sent to
        # [exact set, padding, spare]: the padding repeats a key every head reads anyway.
        pad = n - recent if recent and not sinks else 0  # exact[0]; with no exact set, filled in per head
        # One row, expanded per call: H copies kept per index would hold hundreds of MB at long contexts.
        self.read_template = torch.full((1, self.spare + 1), pad, dtype=torch.int64, device=device)
        self.read_template[:, : self.num_exact] = exact
        self.columns = torch.arange(self.spare, device=device)
        self.past_exact = self.columns >= self.num_exact

    @classmethod
    def of(cls, index: LSHIndex, H: int, min_hits: int, device) -> _PaddedPlan:
        key = ("padded plan", index.n, H, min_hits, str(device))  # decode_index views share the cache
        plan = index.cache.get(key)
        if plan is None:
            plan = index.cache[key] = cls(index, H, min_hits, device)
        return plan


def _attend_padded(index, q, k, v, min_hits, return_read_mask, return_lse, u_offset, check):
    """:func:`attend` with every tensor shape fixed by host numbers (the index's sizes, its
    :attr:`~pigviz.lsh.index.LSHIndex.max_bucket` and ``max_candidates``), so that on a GPU
    the host queues the whole step without waiting for the device: no scalar reads, no
    ``nonzero``, no boolean-mask selection, no copies to the CPU. Same estimator, same keys
    read. The price is padding: where the readable version sizes its lists by what was
    found, this one sizes them by the most that could be found. Real keys crowd into a few
    large buckets, so that bound is loose: on the shipped SmolLM2 layers at 8k tokens
    (K=10, L=150) W below is 67-99% of n while a head samples 3-8% of it, and the gathered
    (H, W, d) block of keys is nearly as wide as dense attention's scores. Step 1's
    (H, L, max_bucket) slot tensors are not batched: at 8k tokens max_bucket * L is 3-11x n,
    so a teacher-forced call over hundreds of rows at long contexts needs GBs there. Its padding
    repeats one row, so the keys fetched from memory are still only those read.

    1. Each head's L buckets, padded to the longest bucket of the index: (H, L, max_bucket)
       token ids, with a mask of the slots inside their bucket.
    2. Hits counted by scatter-add into (H, n) counters (slots outside a bucket add 0).
    3. The sampled tokens of each head, in token order, packed by a running count into
       W = min(n - exact, max_candidates // min_hits) columns after the exact set: no head
       can sample more, as a sampled key takes min_hits of the head's candidates. Unused
       columns repeat a key the head reads anyway (the exact set's first, or with no exact
       set the head's first sampled key), so nothing outside the read set is loaded; the one
       exception, a head with no exact set that sampled nothing, gathers token 0 and has its
       output set to 0.
    4. One gather of the listed keys and one batched matmul for the scores, the log u
       correction, the softmax, one gather of the values and one batched matmul for the mix.

    The budget comes back as a 0-d tensor (:func:`attend` turns it into a number on the CPU).
    """
    H, d = q.shape
    n, dev = index.n, k.device
    plan = _PaddedPlan.of(index, H, min_hits, dev)
    group, table, slot = plan.group, plan.table, plan.slot
    qf = q.to(torch.float32)

    # 1. The query's bucket in every table, read as max_bucket slots from the bucket's start.
    query_buckets = index.bucket_ids(qf)  # (H, L)
    starts = index.offsets[group, table, query_buckets].to(torch.int64)
    lengths = index.bucket_ends()[group, table, query_buckets].to(torch.int64) - starts
    candidates = lengths.sum(1)
    in_bucket = slot < lengths[..., None]  # (H, L, max_bucket)
    # Slots past a bucket's end read the next buckets' ids (clamped to the table): ids of
    # the index, not keys, and they count 0 hits below.
    positions = (starts[..., None] + slot).clamp(max=index.entries.shape[2] - 1)
    tokens = index.entries[group[..., None], table[..., None], positions].to(torch.int64)

    # 2. Hits per (head, token); the exact set is read anyway, so it is never "sampled".
    hits = torch.zeros((H, n), dtype=torch.int32, device=dev)
    hits.scatter_add_(1, tokens.view(H, -1), in_bucket.view(H, -1).to(torch.int32))
    chosen = (hits >= min_hits) & plan.sampleable  # (H, n)
    sampled = chosen.sum(1)

    # 3. Read lists [exact set, sampled set, padding], (H, exact + W): a sampled token's
    #    column is the number of sampled tokens before it.
    column = torch.where(chosen, chosen.cumsum(1).add_(plan.num_exact - 1), plan.spare)
    read = plan.read_template.expand(H, -1).clone().scatter_(1, column, plan.tokens)[:, : plan.spare]
    valid = plan.columns < (plan.num_exact + sampled)[:, None]
    if not plan.num_exact:  # no sink to pad with: the head's own first sampled key
        read = torch.where(valid, read, read[:, :1])
    is_sampled = valid & plan.past_exact

    # 4. Scores, log u, softmax and the value mix, a batch of heads at a time.
    heads_per_batch = max(1, _GATHER_BYTES // (4 * plan.spare * max(d, v.shape[2])))
    batches = [slice(h0, h0 + heads_per_batch) for h0 in range(0, H, heads_per_batch)]

    def per_batch(fn):
        return fn(batches[0]) if len(batches) == 1 else torch.cat([fn(b) for b in batches])

    # k[group, read] gathers rows straight from a (possibly strided) cache view: no copy of k.
    dots = per_batch(
        lambda b: torch.bmm(qf[b, None, :], k[group[b], read[b]].to(torch.float32).transpose(1, 2)).squeeze(1)
    )
    if check:
        _refuse_non_finite_reads(
            "k holds a non-finite number (or q·k overflows float32)", torch.isfinite(dots) | ~valid
        )
    rows = plan.row_base + read
    scores = _corrected_scores(index, qf, dots, rows, plan.kv_of_head, is_sampled, valid, min_hits, u_offset)
    read_any = valid[:, :1]  # a head that reads anything has its first column valid
    weights = torch.where(read_any, torch.softmax(scores, dim=-1), 0.0)  # nothing read: 0, not NaN
    out = per_batch(lambda b: torch.bmm(weights[b, None, :], v[group[b], read[b]].to(torch.float32)).squeeze(1))
    out = torch.where(read_any, out, 0.0)
    if check:
        _refuse_non_finite_reads(
            "v holds a non-finite number (or the weighted sum overflows float32)", torch.isfinite(out)
        )

    keys_read = sampled + plan.num_exact
    stats = {
        "budget": keys_read.double().mean() / n,
        "keys_read": keys_read,
        "sampled": sampled,
        "candidates": candidates,
        "exact": plan.num_exact,
        "n": n,
    }
    if return_lse:
        stats["lse"] = torch.logsumexp(scores, dim=-1)
    if return_read_mask:
        # Unused slots mark a spare column n, dropped after.
        mask = torch.zeros((H, n + 1), dtype=torch.bool, device=dev)
        mask.scatter_(1, torch.where(valid, read, n), True)
        stats["read_mask"] = mask[:, :n].contiguous()
    return out.to(q.dtype), stats


def sampled_attention(
    q,
    k,
    v,
    *,
    K: int,
    L: int,
    sinks: int = DEFAULTS.sinks,
    recent: int = DEFAULTS.recent,
    min_hits: int = DEFAULTS.min_hits,
    seed: int = 0,
    return_read_mask: bool = False,
):
    """Build an index of ``k`` (:func:`pigviz.lsh.index.build_index`) and run :func:`attend` once.

    Parameters
    ----------
    q : torch.Tensor, (H, d)
        The queries.
    k, v : torch.Tensor, (Hkv, n, d) and (Hkv, n, dv)
        The cache.
    K : int in [1, 62]
        Bits per table, no default: the entry points (``use_attention``, ``magicpig()``, the CLI)
        pass :data:`pigviz.DEFAULTS`'s or the caller's.
    L : int >= 1
        Tables, no default either.
    sinks, recent : int >= 0
        The first and last tokens, read exactly; sinks + recent < n.
    min_hits : int in [1, L]
        Tables a key must share with the query to be sampled.
    seed : int >= 0
        Seed of the hyperplanes.
    return_read_mask : bool
        Add ``read_mask`` to the stats.

    Returns
    -------
    output : torch.Tensor, (H, dv)
        As :func:`attend`'s.
    stats : dict
        As :func:`attend`'s.

    Raises
    ------
    ValueError, TypeError
        As :func:`attend` and :func:`~pigviz.lsh.index.build_index`.
    """
    check_decode_shapes(q, k, v)
    check_int("min_hits", min_hits, 1, check_int("L", L, 1))
    index = build_index(k, K=K, L=L, sinks=sinks, recent=recent, seed=seed)
    return attend(index, q, k, v, min_hits=min_hits, return_read_mask=return_read_mask)


def synthetic_decode_step(
    heads: int = 9,
    kv_heads: int = 3,
    n: int = 8192,
    d: int = 64,
    *,
    peaks: int = 16,
    seed: int = 0,
    dtype=torch.float32,
):
    """A decode step shaped like a real model's, for tests and benchmarks.

    Keys of each KV head sit in a narrow cone around a shared mean direction; token 0 is a
    large-norm sink key that every query leans towards (with a short value, as in real
    models); each query head has ``peaks`` keys planted at random positions that point its
    way on top of the cone, so its attention has a head, a sink and a long flat tail.

    Parameters
    ----------
    heads : int >= 1
        Query heads H, a multiple of ``kv_heads``.
    kv_heads : int >= 1
        KV heads Hkv.
    n : int >= 2
        Tokens.
    d : int >= 2
        Head dimension (of keys and values).
    peaks : int in [0, n - 1]
        Keys planted per query head.
    seed : int >= 0
        Seed of the draw (the same seed gives the same tensors).
    dtype : torch.dtype
        Of the tensors returned.

    Returns
    -------
    q : torch.Tensor, (heads, d)
        The queries.
    k, v : torch.Tensor, (kv_heads, n, d)
        The keys and values.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range, or ``heads`` not a multiple of ``kv_heads``.
    """
    heads = check_int("heads", heads, 1)
    kv_heads = check_int("kv_heads", kv_heads, 1)
    n = check_int("n", n, 2)
    d = check_int("d", d, 2)
    peaks = check_int("peaks", peaks, 0, n - 1)
    if heads % kv_heads:
        raise ValueError(f"heads={heads} must be a multiple of kv_heads={kv_heads}")
    gen = torch.Generator().manual_seed(check_int("seed", seed, 0))
    group = heads // kv_heads
    unit = lambda x: x / x.norm(dim=-1, keepdim=True)  # noqa: E731
    cone = unit(torch.randn(kv_heads, 1, d, generator=gen))
    sink_dir = unit(torch.randn(kv_heads, 1, d, generator=gen))
    k = 2.0 * math.sqrt(d) * cone + torch.randn(kv_heads, n, d, generator=gen)
    k[:, 0] = 6.0 * math.sqrt(d) * sink_dir[:, 0]
    # Values share a mean direction too, so the exact output is not a cancelling average.
    value_mean = 0.5 * math.sqrt(d) * unit(torch.randn(kv_heads, 1, d, generator=gen))
    v = value_mean + torch.randn(kv_heads, n, d, generator=gen)
    v[:, 0] *= 0.1
    peak_dir = unit(torch.randn(heads, d, generator=gen))
    q = 1.2 * math.sqrt(d) * peak_dir + 1.6 * sink_dir.repeat_interleave(group, 0)[:, 0]
    q = q + torch.randn(heads, d, generator=gen)
    if peaks:
        where = torch.stack([torch.randperm(n - 1, generator=gen)[:peaks] + 1 for _ in range(heads)])
        lift = 0.8 * math.sqrt(d) * peak_dir[:, None, :] + 0.3 * torch.randn(heads, peaks, d, generator=gen)
        kv_rows = (torch.arange(heads) // group)[:, None].expand(-1, peaks)
        k[kv_rows, where] += lift
    return q.to(dtype), k.to(dtype), v.to(dtype)
