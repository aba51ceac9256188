"""Who holds the KV budget: contiguous reservations, pages, shared prefixes, preemption.

One replica (a Llama-70B shape on 4x H100 with the KV budget of :func:`budget.replica_memory`)
serves one seeded request mix. Admission is first-come-first-served: the paged allocators stop at
the first request that does not fit, as a simple scheduler would; the contiguous one turns away a
request whose prompt alone exceeds a slot and cuts off one whose answer outgrows it (a looser
accounting is one switch away: :data:`CONTIGUOUS_RULES`).
``held`` is physical KV bytes; ``logical`` is what the admitted sequences' tokens occupy,
unshared and unrounded. :func:`simulate_serving` runs the paged allocator through time,
with evictions, to measure what running the pool full costs.
"""

from __future__ import annotations

import functools
import random
from collections import deque
from dataclasses import dataclass

import numpy as np

from pigviz._util.validate import check_array, check_float, check_int
from pigviz.memory.budget import REPLICA_KV_BUDGET_BYTES, decode_step_load, recompute_seconds
from pigviz.memory.model_shapes import get_model_shape

__all__ = [
    "PROMPT_TOKENS_RANGE",
    "OUTPUT_TOKENS_RANGE",
    "KV_BUDGET_BYTES",
    "replica_bytes_per_token",
    "request_mix",
    "Allocation",
    "contiguous_allocation",
    "CONTIGUOUS_RULES",
    "contiguous_rules",
    "paged_allocation",
    "prefix_coverage",
    "OutOfPages",
    "PagedKVAllocator",
    "paged_admission_with_allocator",
    "prefix_sharing",
    "REPLICA_N_PARAMS",
    "PREEMPTION_TARGETS",
    "simulate_serving",
    "preemption_sweep",
    "assembly_table",
    "decode_loads",
    "largest_sharing_gap",
]

KV_BUDGET_BYTES = REPLICA_KV_BUDGET_BYTES
MAX_TOKENS = 10**7


def replica_bytes_per_token(dtype_bytes: int = 2) -> int:
    """KV bytes per token of the Llama-70B shape the replica serves (327,680 at fp16)."""
    return get_model_shape("Llama-3.1-70B").kv_bytes_per_token(dtype_bytes)


PROMPT_TOKENS_RANGE = (16, 128_000)  # request_mix clips its prompt draws to this range
OUTPUT_TOKENS_RANGE = (8, 4_000)  # ... and its output draws to this one


def request_mix(n: int = 4000, seed: int = 5) -> np.ndarray:
    """(prompt, output) token counts: log-normal, mostly short with a heavy tail.

    Prompt ~ lognormal(6.4, 1.0) (median ~600) clipped to [16, 128000]; output ~
    lognormal(5.5, 0.8) (median ~250) clipped to [8, 4000]. Python's ``random`` keeps
    the stream identical on every platform; prompt and output draws alternate."""
    n = check_int("n", n, 1, 10**6)
    rng = random.Random(_seed(seed))
    out = np.empty((n, 2), dtype=np.int64)
    for i in range(n):
        prompt, output = int(rng.lognormvariate(6.4, 1.0)), int(rng.lognormvariate(5.5, 0.8))
        out[i] = (
            min(max(prompt, PROMPT_TOKENS_RANGE[0]), PROMPT_TOKENS_RANGE[1]),
            min(max(output, OUTPUT_TOKENS_RANGE[0]), OUTPUT_TOKENS_RANGE[1]),
        )
    return out


def _seed(seed) -> int:
    # random.Random hashes abs(seed), so a negative seed would silently repeat a positive one.
    return check_int("seed", seed, 0, 2**63 - 1)


def _requests(requests) -> np.ndarray:
    arr = check_array("requests", requests, ndim=2, dtype=np.int64)
    if arr.shape[1] != 2 or np.any(arr < 0):
        raise ValueError(
            f"requests must be an (n, 2) array of non-negative (prompt, output) counts, got shape {arr.shape}"
        )
    return arr


@dataclass(frozen=True)
class Allocation:
    name: str
    batch: int  # sequences admitted
    held_bytes: int  # physical KV the allocator holds for them
    logical_bytes: int  # KV their tokens occupy, unshared and unrounded
    overflow: int = 0  # admitted sequences cut off at their reservation: they cannot finish
    rejected: int = 0  # requests turned away because their prompt alone exceeds the reservation

    @property
    def completed(self) -> int:
        """Admitted sequences that can run to their last token."""
        return self.batch - self.overflow

    @property
    def held_over_logical(self) -> float:
        return self.held_bytes / self.logical_bytes if self.logical_bytes else float("inf")

    @property
    def waste_fraction(self) -> float:
        """Share of held bytes no live token uses (negative when sharing saves memory)."""
        return 1 - self.logical_bytes / self.held_bytes if self.held_bytes else 0.0


def _budget(budget_bytes, bytes_per_token):
    return (check_int("budget_bytes", budget_bytes, 1), check_int("bytes_per_token", bytes_per_token, 1))


def contiguous_allocation(
    requests,
    reserve_tokens: int,
    budget_bytes: int = KV_BUDGET_BYTES,
    bytes_per_token: int | None = None,
    *,
    reject_long_prompts: bool = True,
    cap_at_slot: bool = True,
) -> Allocation:
    """Every sequence reserves ``reserve_tokens`` up front, because its output length is unknown.

    The prompt length is known on arrival, so a request whose prompt alone exceeds the slot is
    rejected and the slot goes to the next request. One whose answer outgrows the slot fills it
    and is cut off there: it holds (and uses) exactly ``reserve_tokens`` and cannot finish.

    A looser accounting counts otherwise: ``reject_long_prompts=False`` gives the first
    ``budget // slot`` requests a slot each, whatever their length, and ``cap_at_slot=False``
    counts every admitted sequence at its full length (prompt + output), even past its slot."""
    reqs = _requests(requests)
    reserve = check_int("reserve_tokens", reserve_tokens, 1, MAX_TOKENS)
    budget, bpt = _budget(budget_bytes, bytes_per_token or replica_bytes_per_token())
    slots = budget // (reserve * bpt)
    fits = reqs[:, 0] <= reserve if reject_long_prompts else np.ones(len(reqs), dtype=bool)
    admitted_idx = np.flatnonzero(fits)[:slots]
    batch = len(admitted_idx)
    # requests seen before the last admitted one (or all, when the slots were never filled)
    seen = int(admitted_idx[-1]) + 1 if batch == slots and batch else len(reqs)
    rejected = int(np.count_nonzero(~fits[:seen]))
    totals = reqs[admitted_idx].sum(axis=1)
    used = np.minimum(totals, reserve) if cap_at_slot else totals
    name = f"contiguous, reserve {reserve:,}"
    if not (reject_long_prompts and cap_at_slot):
        name += (
            " ("
            + ", ".join(
                label
                for label, loose in (("long prompts admitted", not reject_long_prompts), ("uncapped", not cap_at_slot))
                if loose
            )
            + ")"
        )
    return Allocation(
        name,
        int(batch),
        int(batch * reserve * bpt),
        int(used.sum()) * bpt,
        int(np.count_nonzero(totals > reserve)),
        rejected,
    )


# (name, who gets a slot, what a sequence counts, reject_long_prompts, cap_at_slot): from this
# package's accounting to the loosest one (first in line, every sequence at full length)
CONTIGUOUS_RULES = (
    ("strict (this notebook)", "prompts that fit", "up to its slot", True, True),
    ("", "prompts that fit", "full length", True, False),
    ("", "first in line", "up to its slot", False, True),
    ("loose", "first in line", "full length", False, False),
)


def contiguous_rules(requests, reserve_tokens: int, **kwargs) -> list[Allocation]:
    """:func:`contiguous_allocation` under each of :data:`CONTIGUOUS_RULES`, in that order."""
    return [
        contiguous_allocation(requests, reserve_tokens, reject_long_prompts=reject, cap_at_slot=cap, **kwargs)
        for *_, reject, cap in CONTIGUOUS_RULES
    ]


def paged_allocation(
    requests,
    page_tokens: int,
    budget_bytes: int = KV_BUDGET_BYTES,
    bytes_per_token: int | None = None,
    shared_prefix: int = 0,
) -> Allocation:
    """Fixed-size pages on demand; an optional system prompt stored once and shared.

    A sequence shares min(shared_prefix, its prompt) tokens and pays pages only for the
    rest (the seed's accounting; :func:`paged_admission_with_allocator` runs the real
    allocator, where copy-on-write adds a page per partial shared page)."""
    reqs = _requests(requests)
    pt = check_int("page_tokens", page_tokens, 1, 4096)
    prefix = check_int("shared_prefix", shared_prefix, 0, MAX_TOKENS)
    budget, bpt = _budget(budget_bytes, bytes_per_token or replica_bytes_per_token())
    budget_pages = budget // (pt * bpt)
    prefix_pages = -(-prefix // pt)
    totals = reqs.sum(axis=1)
    private = totals - np.minimum(prefix, reqs[:, 0])
    held_pages = prefix_pages + np.cumsum(-(-private // pt))
    batch = int(np.searchsorted(held_pages, budget_pages, side="right"))
    pages = int(held_pages[batch - 1]) if batch else prefix_pages
    name = f"paged, {pt}-token pages" + (f" + shared {prefix:,} prefix" if prefix else "")
    return Allocation(name, batch, pages * pt * bpt, int(totals[:batch].sum()) * bpt)


def prefix_coverage(requests, shared_prefix: int, batch: int | None = None) -> dict:
    """How much of the admitted prompts a shared prefix covers, under :func:`paged_allocation`'s
    assumption that every prompt begins with the same ``shared_prefix`` tokens (a shorter prompt
    counting as the first ``prompt`` tokens of it).

    ``batch`` (default: all requests) takes the first ``batch`` requests, the ones admitted."""
    reqs = _requests(requests)
    prefix = check_int("shared_prefix", shared_prefix, 0, MAX_TOKENS)
    batch = len(reqs) if batch is None else check_int("batch", batch, 1, len(reqs))
    prompts = reqs[:batch, 0]
    private = np.maximum(prompts - prefix, 0)
    return {
        "shared_prefix": prefix,
        "batch": batch,
        "prompts_within_prefix": int(np.count_nonzero(prompts <= prefix)),
        "share_within_prefix": float(np.mean(prompts <= prefix)),
        "private_prompt_token_share": float(private.sum() / prompts.sum()) if prompts.sum() else 0.0,
    }


class OutOfPages(RuntimeError):
    """The page pool cannot satisfy a request; the allocator state is unchanged."""


class PagedKVAllocator:
    """A page pool with per-sequence page tables, refcounts and copy-on-write.

    ``fork`` lets a child share its parent's pages; the first write into a shared,
    partly filled page copies it, so no sequence ever sees another's tokens."""

    def __init__(self, num_pages: int, page_tokens: int = 16):
        self.num_pages = check_int("num_pages", num_pages, 1, 10**8)
        self.page_tokens = check_int("page_tokens", page_tokens, 1, 4096)
        self._refcount = [0] * self.num_pages
        self._free = list(range(self.num_pages - 1, -1, -1))
        self._pages: dict = {}
        self._length: dict = {}
        self.cow_copies = 0

    @property
    def pages_in_use(self) -> int:
        return self.num_pages - len(self._free)

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def refcount(self, page: int) -> int:
        return self._refcount[check_int("page", page, 0, self.num_pages - 1)]

    def page_table(self, seq) -> tuple[int, ...]:
        return tuple(self._pages[self._known(seq)])

    def length(self, seq) -> int:
        return self._length[self._known(seq)]

    def _known(self, seq):
        if seq not in self._pages:
            raise KeyError(f"unknown sequence {seq!r}")
        return seq

    def add_sequence(self, seq, tokens: int = 0) -> None:
        if seq in self._pages:
            raise ValueError(f"sequence {seq!r} already exists")
        self._pages[seq], self._length[seq] = [], 0
        try:
            self.append(seq, tokens)
        except OutOfPages:
            del self._pages[seq], self._length[seq]
            raise

    def fork(self, parent, child, tokens: int | None = None) -> None:
        """``child`` starts with the first ``tokens`` of ``parent`` (all of them by default)."""
        parent_len = self.length(parent)
        tokens = parent_len if tokens is None else check_int("tokens", tokens, 0, parent_len)
        if child in self._pages:
            raise ValueError(f"sequence {child!r} already exists")
        shared = self._pages[parent][: -(-tokens // self.page_tokens)]
        for page in shared:
            self._refcount[page] += 1
        self._pages[child], self._length[child] = list(shared), tokens

    def pages_needed(self, seq, tokens: int) -> int:
        length, pages = self.length(seq), self._pages[seq]
        fill = length % self.page_tokens
        room = self.page_tokens - fill if fill else 0
        copy = 1 if (tokens > 0 and fill and self._refcount[pages[-1]] > 1) else 0
        return copy + -(-max(0, tokens - room) // self.page_tokens)

    def append(self, seq, tokens: int) -> None:
        """Write ``tokens`` new tokens to ``seq``, copying a shared last page first."""
        tokens = check_int("tokens", tokens, 0, MAX_TOKENS)
        need = self.pages_needed(seq, tokens)
        if need > len(self._free):
            raise OutOfPages(f"sequence {seq!r} needs {need} pages, {len(self._free)} free")
        pages = self._pages[seq]
        if tokens and self._length[seq] % self.page_tokens and self._refcount[pages[-1]] > 1:
            self._refcount[pages[-1]] -= 1
            pages[-1] = self._take()
            self.cow_copies += 1
            need -= 1
        for _ in range(need):
            pages.append(self._take())
        self._length[seq] += tokens

    def _take(self) -> int:
        page = self._free.pop()
        self._refcount[page] = 1
        return page

    def free(self, seq) -> None:
        for page in self._pages.pop(self._known(seq)):
            self._refcount[page] -= 1
            if self._refcount[page] == 0:
                self._free.append(page)
        del self._length[seq]


def paged_admission_with_allocator(
    requests,
    page_tokens: int = 16,
    budget_bytes: int = KV_BUDGET_BYTES,
    bytes_per_token: int | None = None,
    shared_prefix: int = 0,
) -> Allocation:
    """:func:`paged_allocation`, run through a real :class:`PagedKVAllocator`."""
    reqs = _requests(requests)
    page_tokens = check_int("page_tokens", page_tokens, 1, 4096)
    budget, bpt = _budget(budget_bytes, bytes_per_token or replica_bytes_per_token())
    prefix = check_int("shared_prefix", shared_prefix, 0, MAX_TOKENS)
    name = f"allocator, {page_tokens}-token pages" + (f" + shared {prefix:,}" if prefix else "")
    n_pages = budget // (page_tokens * bpt)
    if n_pages == 0:  # the budget holds not one page: nothing is admitted, as the formula says
        return Allocation(name, 0, 0, 0)
    pool = PagedKVAllocator(n_pages, page_tokens)
    if prefix:
        pool.add_sequence("system prompt", prefix)
    batch, logical = 0, 0
    for i, (prompt, output) in enumerate(reqs.tolist()):
        shared = min(prefix, prompt)
        try:
            if shared:
                pool.fork("system prompt", i, shared)
            else:
                pool.add_sequence(i)
            pool.append(i, prompt + output - shared)
        except OutOfPages:
            pool.free(i)
            break
        batch, logical = batch + 1, logical + prompt + output
    return Allocation(name, batch, pool.pages_in_use * page_tokens * bpt, logical * bpt)


def prefix_sharing(
    prefix_tokens: int, n_requests: int = 64, page_tokens: int = 16, seed: int = 9, bytes_per_token: int | None = None
) -> dict:
    """``n_requests`` forks of one system prompt, each with its own question and answer.

    The system prompt's sequence is freed once every request has forked it, so its pages
    live exactly as long as some request still points at them."""
    prefix = check_int("prefix_tokens", prefix_tokens, 0, MAX_TOKENS)
    n = check_int("n_requests", n_requests, 1, 100_000)
    pt = check_int("page_tokens", page_tokens, 1, 4096)
    bpt = check_int("bytes_per_token", bytes_per_token or replica_bytes_per_token(), 1)
    rng = random.Random(_seed(seed))
    private = [int(rng.lognormvariate(5.0, 0.9)) + int(rng.lognormvariate(5.5, 0.8)) for _ in range(n)]
    naive_pages = sum(-(-(prefix + x) // pt) for x in private)

    pool = PagedKVAllocator(naive_pages + n + 1, pt)
    pool.add_sequence("system prompt", prefix)
    for i in range(n):
        pool.fork("system prompt", i)
    pool.free("system prompt")
    for i, x in enumerate(private):
        pool.append(i, x)
    shared_pages, copies = pool.pages_in_use, pool.cow_copies
    for i in range(n):
        pool.free(i)

    naive_tokens = n * prefix + sum(private)
    formula_tokens = -(-prefix // pt) * pt + sum(private)  # prefix once, private unrounded
    return {
        "prefix_tokens": prefix,
        "n_requests": n,
        "page_tokens": pt,
        "naive_tokens": naive_tokens,
        "naive_bytes": naive_pages * pt * bpt,
        "shared_bytes": shared_pages * pt * bpt,
        "naive_pages": naive_pages,
        "shared_pages": shared_pages,
        "cow_copies": copies,
        "saved_fraction": 1 - shared_pages / naive_pages,
        "formula_saved_fraction": 1 - formula_tokens / naive_tokens,
        "batch_multiplier": naive_pages / shared_pages,
        "pages_after_free": pool.pages_in_use,
    }


REPLICA_N_PARAMS = 70e9  # the round parameter count the fetch-or-recompute section uses


def simulate_serving(
    target_occupancy: float,
    requests=None,
    page_tokens: int = 16,
    budget_bytes: int = KV_BUDGET_BYTES,
    bytes_per_token: int | None = None,
    n_params: float = REPLICA_N_PARAMS,
    tp: int = 4,
    max_steps: int = 100_000,
) -> dict:
    """Serve a backlog of requests from one :class:`PagedKVAllocator` and count preemptions.

    Every request waits in one queue at the start. Each step the scheduler admits waiting
    requests, oldest first, while the pages in use plus the newcomer's prefill stay within
    ``target_occupancy`` of the pool; then every running sequence decodes one token. A token
    that needs a fresh page when none is free evicts the most recently admitted sequence
    (possibly the writer itself): its pages are freed and it goes back to the head of the
    queue. Re-admitted, it must prefill its prompt *and* the tokens it had generated again;
    those tokens and their prefill time (attention included, at 100% of the dense peak:
    :func:`budget.recompute_seconds`; ``reprefill_s`` is wall time of the ``tp``-GPU replica,
    ``tp`` times as many GPU-seconds) are the cost of the preemption. Re-admission follows the
    same rule as admission: an evicted sequence comes back once enough pages are free for its
    prompt and generated tokens. Nothing random: the outcome follows from the requests.
    """
    target = check_float("target_occupancy", target_occupancy, 0.0, 1.0, lo_open=True)
    reqs = _requests(request_mix() if requests is None else requests)
    pt = check_int("page_tokens", page_tokens, 1, 4096)
    budget, bpt = _budget(budget_bytes, bytes_per_token or replica_bytes_per_token())
    max_steps = check_int("max_steps", max_steps, 1, 10**7)
    n_pages = budget // (pt * bpt)
    if n_pages == 0:
        raise ValueError("the budget holds not one page")
    pool = PagedKVAllocator(n_pages, pt)
    shape = get_model_shape("Llama-3.1-70B")
    prompt, output = reqs[:, 0].tolist(), reqs[:, 1].tolist()
    cap = int(target * n_pages)
    waiting = deque(range(len(reqs)))
    running: list[int] = []  # admission order: the last is evicted first
    generated = [0] * len(reqs)
    length = [0] * len(reqs)  # tokens in the cache now (the pool learns per page)
    preemptions = reprefill_tokens = completed = rejected = steps = 0
    reprefill_s = 0.0
    occupancy_sum = peak = 0.0
    saturated_steps = 0
    batch_sum = 0
    while (waiting or running) and steps < max_steps:
        # admit
        while waiting:
            i = waiting[0]
            tokens = prompt[i] + generated[i]
            need = -(-tokens // pt)
            if need > n_pages:  # can never fit, even alone
                waiting.popleft()
                rejected += 1
                continue
            if pool.pages_in_use + need > (cap if running else n_pages):
                break
            waiting.popleft()
            pool.add_sequence(i, tokens)
            length[i] = tokens
            running.append(i)
            if generated[i]:
                reprefill_tokens += tokens
                reprefill_s += recompute_seconds(shape, tokens, n_params, tp=tp)
        if not running:
            break
        if waiting:  # the backlog is not drained: the replica is saturated
            saturated_steps += 1
            batch_sum += len(running)
            occ = pool.pages_in_use / n_pages
            occupancy_sum += occ
        # decode one token per running sequence, oldest first
        evicted = set()
        for i in list(running):
            if i in evicted:
                continue
            if length[i] % pt == 0:  # the next token opens a fresh page
                while pool.free_pages == 0:
                    victim = running.pop()
                    pool.free(victim)
                    evicted.add(victim)
                    waiting.appendleft(victim)
                    preemptions += 1
                    if victim == i:
                        break
                if i in evicted:
                    continue
                pool.append(i, length[i] + 1 - pool.length(i))
            length[i] += 1
            generated[i] += 1
            if generated[i] == output[i]:
                pool.free(i)
                running.remove(i)
                completed += 1
        peak = max(peak, pool.pages_in_use / n_pages)
        steps += 1
    total_prompt = int(reqs[:, 0].sum())
    return {
        "target_occupancy": target,
        "n_requests": len(reqs),
        "completed": completed,
        "rejected": rejected,
        "steps": steps,
        "preemptions": preemptions,
        "reprefill_tokens": reprefill_tokens,
        # re-prefilled tokens (prompts and generated tokens alike) over the prompt tokens of all requests
        "reprefill_share": reprefill_tokens / total_prompt,
        "reprefill_s": reprefill_s,  # wall time of the tp-GPU replica
        "mean_occupancy": occupancy_sum / saturated_steps if saturated_steps else 0.0,
        "peak_occupancy": peak,
        "mean_batch": batch_sum / saturated_steps if saturated_steps else 0.0,
        "tokens_per_step": int(reqs[:, 1].sum()) / steps if steps else 0.0,
    }


PREEMPTION_TARGETS = (0.6, 0.7, 0.8, 0.9, 0.95, 0.97, 0.99, 0.995, 1.0)


def preemption_sweep(targets=PREEMPTION_TARGETS, **kwargs) -> list[dict]:
    """:func:`simulate_serving` at each admission target (the default mix's runs are cached)."""
    if not kwargs:
        return [dict(r) for r in _default_sweep(tuple(float(t) for t in targets))]
    return [simulate_serving(t, **kwargs) for t in targets]


@functools.lru_cache(maxsize=4)
def _default_sweep(targets: tuple) -> tuple:
    return tuple(simulate_serving(t) for t in targets)


def assembly_table(
    requests=None,
    budget_bytes: int = KV_BUDGET_BYTES,
    bytes_per_token: int | None = None,
    page_tokens: int = 16,
    shared_prefix: int = 2048,
    reserves=(8192, 2048),
) -> list[Allocation]:
    """One mix, one budget, four allocators; the first row is the baseline."""
    reqs = request_mix() if requests is None else requests
    bpt = bytes_per_token or replica_bytes_per_token()
    rows = [contiguous_allocation(reqs, r, budget_bytes, bpt) for r in reserves]
    rows.append(paged_allocation(reqs, page_tokens, budget_bytes, bpt))
    rows.append(paged_allocation(reqs, page_tokens, budget_bytes, bpt, shared_prefix))
    return rows


def _cached_tokens(reqs: np.ndarray, allocation: "Allocation", reserve: int | None, halfway: bool) -> int:
    """Tokens every admitted sequence of an allocation reads per decode step: at its final
    length, or half-way through its answer. Contiguous slots admit the prompts that fit, in
    order, each capped at its slot; a shared prefix counts once per sequence that reads it."""
    if reserve is not None:
        admitted = reqs[np.flatnonzero(reqs[:, 0] <= reserve)[: allocation.batch]]
    else:
        admitted = reqs[: allocation.batch]
    lengths = admitted[:, 0] + (admitted[:, 1] // 2 if halfway else admitted[:, 1])
    if reserve is not None:
        lengths = np.minimum(lengths, reserve)
    return int(lengths.sum())


def decode_loads(requests=None, reserves=(8192, 2048), model="Llama-3.1-70B", n_params: float | None = None):
    """Each allocator of :func:`assembly_table` with what one decode step of its batch reads and
    computes (:func:`~pigviz.memory.budget.decode_step_load`; the shape's own parameter count unless
    ``n_params`` is given), once with every sequence at its final
    length (``"final"``) and once half-way through its answer (``"half"``). No rate enters: a
    roofline floor divides ``bytes`` by a bandwidth and ``flops`` by a FLOP/s and takes the larger."""
    reqs = _requests(request_mix() if requests is None else requests)
    rows = assembly_table(reqs, reserves=reserves)
    caps = list(reserves) + [None] * (len(rows) - len(reserves))
    out = []
    for allocation, reserve in zip(rows, caps):
        row = {"allocator": allocation.name, "batch": allocation.batch, "allocation": allocation}
        for when, halfway in (("final", False), ("half", True)):
            cached = _cached_tokens(reqs, allocation, reserve, halfway)
            row[when] = decode_step_load(model, allocation.batch, cached, n_params)
        out.append(row)
    return out


def largest_sharing_gap(results: list[dict]) -> dict:
    """The :func:`prefix_sharing` row where the real allocator saves least next to the formula."""
    if not results:
        raise ValueError("results must hold at least one prefix_sharing() result")
    worst = max(results, key=lambda r: r["formula_saved_fraction"] - r["saved_fraction"])
    return {
        "prefix_tokens": worst["prefix_tokens"],
        "cow_copies": worst["cow_copies"],
        "saved_fraction": worst["saved_fraction"],
        "formula_saved_fraction": worst["formula_saved_fraction"],
        "gap_points": 100 * (worst["formula_saved_fraction"] - worst["saved_fraction"]),
    }
