"""SimHash on a real model's keys: the S-curve over one real query's keys, formula against
counting, and the output error of MagicPIG's step on every captured head, raw against centred.

The counting hashes real d-dimensional vectors with Gaussian hyperplanes, exactly as
``pigviz.lsh.reference.simhash_codes`` does, but answers many (K, L) at once: a table of K bits is the
first K bits of a table of ``K_max`` bits, and L tables are the first L of ``L_max``. Every
(K, L) on a grid is therefore an honest SimHash of its own; neighbouring cells share
hyperplanes, which correlates them but does not bias any of them.

Each query hashes its own keys (``query_hashed_mask``): those after the first 4 sinks and before
its own window, the 64 positions ending at the query, which it reads exactly (MagicPIG keeps the
sinks, the recent tokens and every generated token out of its tables). For the last captured
query these are ``key_geometry.non_exact_mask``'s keys; an earlier query hashes up to 63 fewer.
Keys are centred on the mean of the last query's hashed keys, as ``pigviz.lsh.index.build_index``
centres them (``key_geometry.centring_mean``). The query is never centred.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_choice, check_int
from pigviz.keys.geometry import (
    EXACT_RECENT,
    EXACT_SINKS,
    HeadView,
    head_view,
    non_exact_mask,
    shipped_capture,
    unit_rows,
)
from pigviz.lsh import simhash as sh

__all__ = [
    "MAX_PREFIX_BITS",
    "query_hashed_mask",
    "HashAgreement",
    "agreement_prefix",
    "sampled_in",
    "RealSCurve",
    "pick_keys",
    "real_scurve",
    "half_point_cos",
    "OutputErrors",
    "output_errors",
    "shipped_output_errors",
]

# Most bits per table the counting supports: agreement lengths come from a 2**bits lookup table.
MAX_PREFIX_BITS = 16


# --------------------------------------------------------------------------- which keys a query hashes


def query_hashed_mask(query_positions, n: int, sinks: int = EXACT_SINKS, recent: int = EXACT_RECENT) -> np.ndarray:
    """``(queries, n)`` bool: the keys that the query at each position hashes, the ones after the
    first ``sinks`` and before its own window of the ``recent`` positions ending at it (it reads
    the sinks and that window exactly; keys after it are its future). ValueError if a query would
    hash no key."""
    n = check_int("n", n, 1)
    pos = np.asarray(query_positions, dtype=np.int64).reshape(-1)
    if pos.size and (pos.min() < 0 or pos.max() >= n):
        raise ValueError(f"query_positions must lie in [0, {n - 1}], got {pos.min()} to {pos.max()}")
    key = np.arange(n)[None, :]
    mask = (key >= check_int("sinks", sinks, 0)) & (key <= pos[:, None] - check_int("recent", recent, 0))
    empty = ~mask.any(axis=1)
    if empty.any():
        raise ValueError(
            f"the query at position {int(pos[empty][0])} hashes no key: it needs more than sinks + recent = "
            f"{sinks + recent} keys before it"
        )
    return mask


# --------------------------------------------------------------------------- hashing real vectors


def _codes(x, planes, L, K):
    """Each row's bucket in every table, int32 (n, L): the index's own coder
    (:func:`pigviz.lsh.index.bucket_ids`), narrowed because these codes are xor-ed in bulk."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    from pigviz.lsh.index import bucket_ids  # heavy: imports torch

    return bucket_ids(torch.as_tensor(x, dtype=torch.float32), planes, K, L).to(torch.int32)


@dataclass
class HashAgreement:
    """``prefix[key, hashing, table]``: how many leading bits of that table agree with the
    query's (at most ``K_max``). A key shares the query's bucket in a table of K bits exactly
    when the count is >= K, so one array answers every K <= K_max and L <= its tables."""

    prefix: np.ndarray  # (keys, hashings, L_max) int8
    K_max: int

    @property
    def L_max(self) -> int:
        return self.prefix.shape[2]

    @property
    def n_hashings(self) -> int:
        return self.prefix.shape[1]


def agreement_prefix(query, keys, n_hashings: int, K_max: int, L_max: int, seed: int = 0) -> HashAgreement:
    """Hash ``query`` and ``keys`` with ``n_hashings`` independent sets of ``L_max`` tables of
    ``K_max`` Gaussian hyperplanes (all drawn from ``numpy.random.default_rng(seed)``)."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    keys = np.atleast_2d(np.asarray(keys, dtype=np.float64))
    query = np.asarray(query, dtype=np.float64)
    if query.shape != (keys.shape[1],):
        raise ValueError(f"query must be one vector of length {keys.shape[1]}, got shape {query.shape}")
    n_hashings = check_int("n_hashings", n_hashings, 1, 100_000)
    K_max = check_int("K_max", K_max, 1, MAX_PREFIX_BITS)
    L_max = check_int("L_max", L_max, 1, sh.MAX_L)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    out = np.empty((len(keys), n_hashings, L_max), dtype=np.int8)
    step = max(1, 4_000_000 // (L_max * K_max * (len(keys) + 1)))  # sign bits held at once
    for start in range(0, n_hashings, step):
        t = min(step, n_hashings - start)
        planes = torch.from_numpy(rng.standard_normal((keys.shape[1], t * L_max * K_max)).astype(np.float32))
        x = _codes(keys, planes, t * L_max, K_max) ^ _codes(query[None], planes, t * L_max, K_max)
        out[:, start : start + t] = _trailing_zeros(x, K_max).view(len(keys), t, L_max).numpy()
    return HashAgreement(out, K_max)


@functools.lru_cache(maxsize=MAX_PREFIX_BITS)
def _trailing_zero_table(bits: int):
    """int8 table: for every ``bits``-bit code, its trailing zero bits (``bits`` for code 0)."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    codes = torch.arange(1 << bits, dtype=torch.int64)
    lowest = (codes & -codes).clamp(min=1).double()
    return torch.where(codes == 0, bits, torch.log2(lowest).round().long()).to(torch.int8)


def _trailing_zeros(x, bits: int):
    """Trailing zero bits of codes ``x`` below 2**bits (``bits`` where x == 0), as int8: the
    number of leading bits of a table on which two vectors agree, when ``x`` is their xor."""
    return _trailing_zero_table(bits)[x.long()]


def sampled_in(agreement: HashAgreement, K: int, L: int, min_hits: int = DEFAULTS.min_hits) -> np.ndarray:
    """``(keys, hashings)`` bool: the key shares the query's bucket in at least ``min_hits``
    of the first ``L`` tables of ``K`` bits in that hashing."""
    K = check_int("K", K, 1, agreement.K_max)
    L = check_int("L", L, 1, agreement.L_max)
    min_hits = check_int("min_hits", min_hits, 1, L)
    return (agreement.prefix[:, :, :L] >= K).sum(axis=2, dtype=np.int32) >= min_hits


# --------------------------------------------------------------------------- raw vs centred


_FORMULA_BINS = 2000


_BIN_CENTRES = np.linspace(-1, 1, _FORMULA_BINS + 1)
_BIN_CENTRES = 0.5 * (_BIN_CENTRES[1:] + _BIN_CENTRES[:-1])


@functools.lru_cache(maxsize=64)
def _formula_on_bins(K: int, L: int, min_hits: int) -> np.ndarray:
    return sh.inclusion_probability(sh.collision_probability(_BIN_CENTRES), K, L, min_hits)


def half_point_cos(K: int, L: int, min_hits: int = DEFAULTS.min_hits) -> float:
    """The cosine where u crosses 50%, read off a cached 2,000-point curve (to about 0.001):
    fast enough for a slider, unlike the bisection of ``simhash.crossing_cos``."""
    u = _formula_on_bins(
        check_int("K", K, 1, MAX_PREFIX_BITS), check_int("L", L, 1, sh.MAX_L), check_int("min_hits", min_hits, 1, L)
    )
    return float(np.interp(0.5, u, _BIN_CENTRES))


def _two_significant(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{float(f'{x:.2g}'):,.0f}"


# --------------------------------------------------------------------------- one real S-curve


def pick_keys(cos: np.ndarray, n_keys: int = 300, n_top: int = 40) -> np.ndarray:
    """Indices of the keys to count: the ``n_top`` closest to the query (the ones a sampler
    really takes) and the rest spread evenly over the cosine range, so the whole S is covered
    although most keys crowd near cos 0."""
    cos = np.asarray(cos, dtype=np.float64)
    n_keys = check_int("n_keys", n_keys, 1, len(cos))
    n_top = check_int("n_top", n_top, 0, n_keys)
    order = np.argsort(cos, kind="stable")
    targets = np.linspace(cos.min(), cos.max(), n_keys - n_top)
    spread = order[np.clip(np.searchsorted(cos[order], targets), 0, len(cos) - 1)]
    picked = np.unique(np.concatenate([spread, order[len(cos) - n_top :]]))
    if len(picked) < n_keys:  # sparse stretches gave duplicates: fill by rank
        rest = np.setdiff1d(order, picked, assume_unique=True)
        rest = rest[np.argsort(cos[rest], kind="stable")]
        extra = rest[np.linspace(0, len(rest) - 1, n_keys - len(picked)).round().astype(int)]
        picked = np.unique(np.concatenate([picked, extra]))
    return picked


@dataclass
class RealSCurve:
    """One query's keys: the formula's inclusion probability against counted frequencies."""

    layer: int
    head: int
    query_index: int
    position: int
    K: int
    L: int
    min_hits: int
    n_hashings: int
    cos_all: np.ndarray  # cos(query, centred key), every hashed key
    keys: np.ndarray  # positions of the counted keys
    cos: np.ndarray  # their cosines
    formula: np.ndarray  # their inclusion probability u
    counted: np.ndarray  # fraction of the hashings that sampled them
    expected_sampled: float  # sum of u over every hashed key
    per_hashing: np.ndarray  # (n_hashings,) share of the counted keys sampled in each hashing

    def mean_gap_se(self) -> float:
        """Standard error of ``counted.mean()``. Within one hashing every key shares the same
        hyperplanes, so keys are not independent draws: the hashings are, and the SE is that
        of the mean of the per-hashing shares."""
        n = len(self.per_hashing)
        return float(self.per_hashing.std(ddof=1) / np.sqrt(n)) if n > 1 else float("inf")

    def interval(self, z: float = 2.576):
        """Wilson interval of each counted frequency (99% by default)."""
        n, f = self.n_hashings, self.counted
        centre = (f + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(f * (1 - f) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)

    def coverage(self, z: float = 2.576) -> float:
        """Fraction of counted keys whose interval contains the formula's u."""
        lo, hi = self.interval(z)
        return float(np.mean((self.formula >= lo - 1e-12) & (self.formula <= hi + 1e-12)))


def real_scurve(
    view: HeadView,
    query_index: int,
    K: int,
    L: int,
    min_hits: int = DEFAULTS.min_hits,
    n_hashings: int = 200,
    n_keys: int = 300,
    seed: int = 0,
    agreement: HashAgreement | None = None,
    picked=None,
) -> RealSCurve:
    """Hash one query and its centred keys ``n_hashings`` times and count how often each of
    ``n_keys`` picked keys is sampled. ``agreement``/``picked`` (from an earlier call with at
    least this K and L) skip the hashing: a widget moving K and L recounts in milliseconds."""
    T = len(view.queries)
    query_index = check_int("query_index", query_index, -T, T - 1) % T
    K = check_int("K", K, 1, MAX_PREFIX_BITS)
    L = check_int("L", L, 1, sh.MAX_L)
    min_hits = check_int("min_hits", min_hits, 1, L)
    hashed = np.flatnonzero(non_exact_mask(view.n))
    q = view.queries[query_index]
    keys = view.keys_as("centred")[hashed]
    cos_all = unit_rows(keys) @ unit_rows(q[None])[0]
    picked = pick_keys(cos_all, n_keys) if picked is None else np.asarray(picked)
    if agreement is None:
        agreement = agreement_prefix(q, keys[picked], n_hashings, K, L, seed)
    elif len(agreement.prefix) != len(picked):
        raise ValueError("agreement must come from the same picked keys")
    sampled = sampled_in(agreement, K, L, min_hits)
    hist = np.histogram(cos_all, bins=_FORMULA_BINS, range=(-1.0, 1.0))[0]
    return RealSCurve(
        view.layer,
        view.head,
        query_index,
        int(view.positions[query_index]),
        K,
        L,
        min_hits,
        agreement.n_hashings,
        cos_all,
        hashed[picked],
        cos_all[picked],
        np.atleast_1d(sh.inclusion_probability(sh.collision_probability(cos_all[picked]), K, L, min_hits)),
        sampled.mean(axis=1),
        float(hist @ _formula_on_bins(K, L, min_hits)),
        sampled.mean(axis=0),
    )


# --------------------------------------------------------------------------- entries scanned


@dataclass
class OutputErrors:
    """MagicPIG's attention output against the exact one, for the last captured query of every
    captured head (it sees every key), with the index built on raw or on centred keys.

    ``error``: ``{"exact only", "raw", "centred"}`` -> ``(layer, query head, seed)`` relative error
    ``|o_est - o| / |o|``; "exact only" reads the sinks and the recent tokens alone (no hashing, so
    no seed dependence). ``keys_read``: ``{"raw", "centred"}`` -> ``(layer, query head, seed)``,
    the exact set included."""

    layers: list
    query_heads: list
    K: int
    L: int
    seeds: tuple
    exact: int
    error: dict
    keys_read: dict

    def mean_error(self, method: str) -> np.ndarray:
        """``(layer, query head)``: the error averaged over the seeds (draws of hyperplanes)."""
        check_choice("method", method, tuple(self.error))
        return self.error[method].mean(axis=2)


def output_errors(cap, K: int, L: int, seeds=range(5)) -> OutputErrors:
    """Run ``pigviz.lsh.magicpig.attend`` (min_hits 2, the exact set of ``EXACT_SINKS`` +
    ``EXACT_RECENT`` read exactly) for the last query of each captured head, once per seed, with
    the index built on raw keys (``centre=False``) and on centred keys, and compare each output
    with exact attention over all keys."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    from pigviz.lsh.index import build_index  # heavy: pulls torch in at import
    from pigviz.lsh.magicpig import attend  # heavy: pulls torch in at import

    K = check_int("K", K, 1, sh.MAX_K)
    L = check_int("L", L, 1, sh.MAX_L)
    seeds = tuple(check_int("seeds entry", s, 0) for s in seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    shape = (len(cap.layers), len(cap.query_heads[0]), len(seeds))
    error = {m: np.zeros(shape) for m in ("exact only", "raw", "centred")}
    read = {m: np.zeros(shape, dtype=np.int64) for m in ("raw", "centred")}
    exact_n = 0
    for row, layer in enumerate(cap.layers):
        views = [head_view(cap, layer, h) for h in cap.query_heads[row]]
        if any(int(v.positions[-1]) != v.n - 1 for v in views):
            raise ValueError("the last captured query must sit at the last position, so that it sees every key")
        exact = ~non_exact_mask(views[0].n)
        exact_n = int(exact.sum())
        true = np.stack([v.attention_weights()[-1] @ v.values for v in views])
        scale = np.linalg.norm(true, axis=1)
        only = []
        for v in views:
            s = v.keys[exact] @ v.queries[-1] * v.scaling
            w = np.exp(s - s.max())
            only.append(w / w.sum() @ v.values[exact])
        error["exact only"][row] = (np.linalg.norm(np.stack(only) - true, axis=1) / scale)[:, None]
        indexes = {}  # (KV head, seed, centred): the heads that share a KV head share its index
        for j, v in enumerate(views):
            k = torch.from_numpy(v.keys).float()[None]
            vals = torch.from_numpy(v.values).float()[None]
            q = torch.from_numpy(v.queries[-1:]).float()
            for si, seed in enumerate(seeds):
                for variant, centre in (("raw", False), ("centred", True)):
                    key = (v.kv_head, seed, centre)
                    if key not in indexes:
                        indexes[key] = build_index(
                            k, K=K, L=L, sinks=EXACT_SINKS, recent=EXACT_RECENT, seed=seed, centre=centre
                        )
                    out, stats = attend(indexes[key], q, k, vals)
                    error[variant][row, j, si] = float(np.linalg.norm(out[0].double().numpy() - true[j]) / scale[j])
                    read[variant][row, j, si] = int(stats["keys_read"][0])
    return OutputErrors(list(cap.layers), [list(h) for h in cap.query_heads], K, L, seeds, exact_n, error, read)


@functools.lru_cache(maxsize=1)
def shipped_output_errors() -> OutputErrors:
    """``output_errors`` of the shipped capture at MagicPIG's defaults (five seeds), computed once per process."""
    return output_errors(shipped_capture(), DEFAULTS.K, DEFAULTS.L)
