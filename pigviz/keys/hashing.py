"""SimHash on a real model's keys: how often they share the query's bucket, raw against
centred, and the S-curve over one real query's keys, formula against counting.

The counting hashes real d-dimensional vectors with Gaussian hyperplanes, exactly as
``pigviz.lsh.simhash.SimHash`` does, but answers many (K, L) at once: a table of K bits is the
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
import math
from dataclasses import dataclass

import numpy as np

from pigviz._util.validate import check_choice, check_int
from pigviz.keys.geometry import (
    EXACT_RECENT,
    EXACT_SINKS,
    GRID_K,
    GRID_L,
    SCURVE_HEAD,
    VARIANTS,
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
    "counted_inclusion",
    "CollisionGrid",
    "collision_grid",
    "shipped_collision_grid",
    "format_collision_table",
    "format_layer_gains",
    "RealSCurve",
    "pick_keys",
    "real_scurve",
    "shipped_real_scurve",
    "half_point_cos",
    "DrawScatter",
    "collision_rate_draws",
    "shipped_collision_rate_draws",
    "ScannedEntries",
    "scanned_entries",
    "ScanFormula",
    "scan_formula",
    "shipped_scan_formula",
    "hashed_weight_share",
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


def _queries_and_masks(views, hashed, query_stride: int):
    """The ``query_stride``-th queries of every head in ``views``, stacked, and for each the mask
    of the columns of ``hashed`` (the last query's hashed keys) that it hashes itself."""
    queries = np.concatenate([v.queries[::query_stride] for v in views])
    positions = np.concatenate([v.positions[::query_stride] for v in views])
    return queries, query_hashed_mask(positions, views[0].n)[:, hashed]


# --------------------------------------------------------------------------- hashing real vectors


def _pack(bits):
    """Sign bits ``(..., L, K)`` (torch bool) -> int32 codes ``(..., L)``, bit b worth 2**b.
    A float matrix-vector product is exact here (codes < 2**16) and much faster than shifts."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    weights = 2.0 ** torch.arange(bits.shape[-1], dtype=torch.float32)
    return (bits.to(torch.float32) @ weights).to(torch.int32)


def _codes(x, planes, L, K):
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    return _pack((torch.as_tensor(x, dtype=torch.float32) @ planes >= 0).view(-1, L, K))


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


def sampled_in(agreement: HashAgreement, K: int, L: int, min_hits: int = 2) -> np.ndarray:
    """``(keys, hashings)`` bool: the key shares the query's bucket in at least ``min_hits``
    of the first ``L`` tables of ``K`` bits in that hashing."""
    K = check_int("K", K, 1, agreement.K_max)
    L = check_int("L", L, 1, agreement.L_max)
    min_hits = check_int("min_hits", min_hits, 1, L)
    return (agreement.prefix[:, :, :L] >= K).sum(axis=2, dtype=np.int32) >= min_hits


def counted_inclusion(agreement: HashAgreement, K: int, L: int, min_hits: int = 2) -> np.ndarray:
    """Fraction of the hashings in which each key shares the query's bucket in at least
    ``min_hits`` of the first ``L`` tables of ``K`` bits."""
    return sampled_in(agreement, K, L, min_hits).mean(axis=1)


# --------------------------------------------------------------------------- raw vs centred


@dataclass
class CollisionGrid:
    """Fractions of the hashed keys that share the query's bucket under real hashing, per
    variant ("raw", "centred"), captured layer (all its query heads), K and L.

    ``measured`` and ``formula``: ``(variant, layer, K, L, min_hits - 1)`` for min_hits 1 and 2,
    per query the share of the keys it hashes (``query_hashed_mask``) that are counted sampled, and
    the formula's mean probability over them, averaged over the queries. ``weight_share``:
    ``(variant, layer, K, L)``, the share of the weight on a query's hashed keys that sits on keys
    sampled (>= 2 hits), averaged over queries. ``n_keys``: the keys the last query hashes (the
    most any counted query hashes); ``n_pairs``: the (query, key) pairs counted per layer;
    ``pairs_hit``: shaped as ``measured``, how many of them collided (int)."""

    Ks: tuple
    Ls: tuple
    layers: list
    n_queries: int
    n_keys: int
    measured: np.ndarray
    formula: np.ndarray
    weight_share: np.ndarray
    n_pairs: int
    pairs_hit: np.ndarray

    def _cell(self, K, L):
        if K not in self.Ks or L not in self.Ls:
            raise ValueError(f"(K, L) must be on the grid K in {self.Ks}, L in {self.Ls}; got ({K}, {L})")
        return self.Ks.index(K), self.Ls.index(L)

    def per_layer(
        self, what: str, variant: str, K: int = sh.DEFAULT_K, L: int = sh.DEFAULT_L, min_hits: int = 2
    ) -> np.ndarray:
        """One number per captured layer: ``what`` in measured, formula, weight_share."""
        check_choice("what", what, ("measured", "formula", "weight_share"))
        v = VARIANTS.index(check_choice("variant", variant, VARIANTS))
        ki, li = self._cell(K, L)
        if what == "weight_share":
            return self.weight_share[v, :, ki, li]
        return getattr(self, what)[v, :, ki, li, check_int("min_hits", min_hits, 1, 2) - 1]

    def mean(self, what: str, variant: str, K: int = sh.DEFAULT_K, L: int = sh.DEFAULT_L, min_hits: int = 2) -> float:
        """Average over the captured heads (each layer holds one KV head)."""
        return float(self.per_layer(what, variant, K, L, min_hits).mean())

    def gain(self, min_hits: int = 2) -> np.ndarray:
        """``(K, L)``: the centred rate over the raw rate, each averaged over the heads."""
        m = check_int("min_hits", min_hits, 1, 2) - 1
        return self.measured[1, ..., m].mean(0) / np.maximum(self.measured[0, ..., m].mean(0), 1e-12)


_FORMULA_BINS = 2000


_BIN_CENTRES = np.linspace(-1, 1, _FORMULA_BINS + 1)
_BIN_CENTRES = 0.5 * (_BIN_CENTRES[1:] + _BIN_CENTRES[:-1])


@functools.lru_cache(maxsize=64)
def _formula_on_bins(K: int, L: int, min_hits: int) -> np.ndarray:
    return sh.inclusion_probability(sh.collision_probability(_BIN_CENTRES), K, L, min_hits)


def half_point_cos(K: int, L: int, min_hits: int = 2) -> float:
    """The cosine where u crosses 50%, read off a cached 2,000-point curve (to about 0.001):
    fast enough for a slider, unlike the bisection of ``simhash.crossing_cos``."""
    u = _formula_on_bins(
        check_int("K", K, 1, MAX_PREFIX_BITS), check_int("L", L, 1, sh.MAX_L), check_int("min_hits", min_hits, 1, L)
    )
    return float(np.interp(0.5, u, _BIN_CENTRES))


def collision_grid(cap, Ks=GRID_K, Ls=GRID_L, query_stride: int = 8, seed: int = 0) -> CollisionGrid:
    """Hash every hashed key of every captured head with ``max(Ls)`` tables of ``max(Ks)`` bits
    (one draw per layer, shared by raw and centred keys) and count, for every ``query_stride``-th
    captured query, the keys it hashes (``query_hashed_mask``) that share its bucket; smaller K
    and L use the first bits and tables."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    Ks = tuple(sorted({check_int("Ks entry", k, 1, MAX_PREFIX_BITS) for k in Ks}))
    Ls = tuple(sorted({check_int("Ls entry", x, 1, sh.MAX_L) for x in Ls}))
    query_stride = check_int("query_stride", query_stride, 1)
    K_max, L_max, block = max(Ks), max(Ls), math.gcd(*Ls)
    at = np.array([x // block - 1 for x in Ls])
    n_layers = len(cap.layers)
    measured = np.zeros((2, n_layers, len(Ks), len(Ls), 2))
    formula = np.zeros_like(measured)
    share = np.zeros((2, n_layers, len(Ks), len(Ls)))
    pairs_hit = np.zeros(measured.shape, dtype=np.int64)
    curves = np.array([[[_formula_on_bins(K, L, m) for m in (1, 2)] for L in Ls] for K in Ks])
    groups = _counter_groups(Ks, K_max, L_max)
    n_queries = 0
    for row, layer in enumerate(cap.layers):
        views = [head_view(cap, layer, h) for h in cap.query_heads[row]]
        hashed = non_exact_mask(views[0].n)
        queries, own = _queries_and_masks(views, hashed, query_stride)
        n_own = own.sum(axis=1)
        weights = np.concatenate([v.attention_weights()[::query_stride][:, hashed] for v in views]) * own
        weights /= weights.sum(axis=1, keepdims=True)
        n_queries = len(queries)
        rng = np.random.default_rng(check_int("seed", seed, 0) + layer)
        planes = torch.from_numpy(rng.standard_normal((queries.shape[1], L_max * K_max)).astype(np.float32))
        q_codes = _codes(queries, planes, L_max, K_max)
        for vi, variant in enumerate(VARIANTS):
            keys = views[0].keys_as(variant)[hashed]
            k_codes = _codes(keys, planes, L_max, K_max).T.contiguous()  # (tables, keys)
            for c in range(0, len(queries), 8):
                x = (q_codes[c : c + 8, :, None] ^ k_codes[None]).numpy()  # (queries, tables, keys)
                w = weights[c : c + 8, None, :]
                mine, n_mine = own[c : c + 8, None, :], n_own[c : c + 8, None]
                for members, bits, table in groups:
                    packed = table[x].reshape(x.shape[0], -1, block, x.shape[2]).sum(2)
                    packed = packed.cumsum(1)[:, at]  # (queries, Ls, keys)
                    for j, ki in enumerate(members):
                        hits = (packed >> (bits * j)) & ((1 << bits) - 1)
                        for m in (1, 2):
                            hit = ((hits >= m) & mine).sum(2)  # (queries, Ls)
                            measured[vi, row, ki, :, m - 1] += (hit / n_mine).sum(0)
                            pairs_hit[vi, row, ki, :, m - 1] += hit.sum(0)
                        share[vi, row, ki] += ((hits >= 2) * w).sum((0, 2))
            cos = unit_rows(queries) @ unit_rows(keys).T
            per_query = own / n_own[:, None]  # each query's keys count 1 / (its keys) each
            hist = np.histogram(cos, bins=_FORMULA_BINS, range=(-1.0, 1.0), weights=per_query)[0] / n_queries
            formula[vi, row] = curves @ hist  # (K, L, min_hits)
    measured /= n_queries
    share /= n_queries
    return CollisionGrid(
        Ks, Ls, list(cap.layers), n_queries, int(hashed.sum()), measured, formula, share, int(own.sum()), pairs_hit
    )


def _counter_groups(Ks, K_max: int, L_max: int):
    """Count the tables that collide at several K in one pass: each table adds, through a
    lookup on the xor of its codes, 1 to a ``bits``-wide counter of every K its agreement
    reaches, all counters packed into one int64. Returns (K indices, bits, table) groups."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    bits = L_max.bit_length()
    per_group = 63 // bits
    agree = _trailing_zero_table(K_max).long()
    groups = []
    for start in range(0, len(Ks), per_group):
        members = list(range(start, min(start + per_group, len(Ks))))
        table = torch.zeros(1 << K_max, dtype=torch.int64)
        for j, ki in enumerate(members):
            table += (agree >= Ks[ki]).long() << (bits * j)
        groups.append((members, bits, table.numpy()))
    return groups


@functools.lru_cache(maxsize=1)
def shipped_collision_grid() -> CollisionGrid:
    """``collision_grid`` of the shipped capture at its defaults, computed once per process."""
    return collision_grid(shipped_capture())


@dataclass
class DrawScatter:
    """The collision rate one draw of hyperplanes gives, over many independent draws.

    ``rates``: ``(variant, layer, draw, min_hits - 1)``, per query the share of the keys it
    hashes (``query_hashed_mask``) that share its bucket in at least ``min_hits`` of ``L`` tables
    of ``K`` bits, averaged over the queries, one entry per draw. ``formula``: ``(variant, layer,
    min_hits - 1)``, the formula's mean over the same pairs: what the rates average to over
    draws. The same draw is used for raw and centred keys. ``n_keys``: the keys the last query
    hashes (of the subsample); ``n_pairs``: the (query, key) pairs counted per layer."""

    layers: list
    K: int
    L: int
    n_queries: int
    n_keys: int
    rates: np.ndarray
    formula: np.ndarray
    n_pairs: int

    @property
    def n_draws(self) -> int:
        return self.rates.shape[2]

    def per_layer(self, variant: str, min_hits: int = 1) -> np.ndarray:
        """``(layer, draw)``: each draw's rate, per captured layer."""
        v = VARIANTS.index(check_choice("variant", variant, VARIANTS))
        return self.rates[v, :, :, check_int("min_hits", min_hits, 1, 2) - 1]

    def formula_per_layer(self, variant: str, min_hits: int = 1) -> np.ndarray:
        v = VARIANTS.index(check_choice("variant", variant, VARIANTS))
        return self.formula[v, :, check_int("min_hits", min_hits, 1, 2) - 1]

    def mean_gap_se(self, variant: str, min_hits: int = 1) -> np.ndarray:
        """Per layer, (mean over draws - formula) in standard errors of that mean."""
        r = self.per_layer(variant, min_hits)
        se = r.std(axis=1, ddof=1) / math.sqrt(r.shape[1])
        return (r.mean(axis=1) - self.formula_per_layer(variant, min_hits)) / np.maximum(se, 1e-300)

    def relative_spread(self, variant: str, min_hits: int = 1) -> np.ndarray:
        """Per layer, the standard deviation of one draw's rate over the mean rate."""
        r = self.per_layer(variant, min_hits)
        return r.std(axis=1, ddof=1) / np.maximum(r.mean(axis=1), 1e-300)

    def independent_spread(self, variant: str, min_hits: int = 1) -> np.ndarray:
        """Per layer, the spread (SD / mean) one draw's rate would have if the pairs collided
        independently, each with the formula's mean probability f: binomial, sqrt(f (1 - f) / N) / f
        over the N pairs counted. Pairs with different probabilities spread less, so this is an
        upper bound for independent pairs."""
        f = self.formula_per_layer(variant, min_hits)
        return np.sqrt(f * (1 - f) / self.n_pairs) / np.maximum(f, 1e-300)


def collision_rate_draws(
    cap,
    n_draws: int = 30,
    K: int = sh.DEFAULT_K,
    L: int = sh.DEFAULT_L,
    query_stride: int = 8,
    key_stride: int = 8,
    seed: int = 1000,
) -> DrawScatter:
    """Count, as ``collision_grid`` does at one (K, L), the share of (query, key) pairs that
    collide in >= 1 and >= 2 tables, but for ``n_draws`` independent draws of the hyperplanes
    (fresh ones per layer and draw, shared by raw and centred keys). Every ``query_stride``-th
    captured query of each head of a layer, every ``key_stride``-th hashed key: a subsample of
    the pairs, whose formula mean is reported alongside."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    n_draws = check_int("n_draws", n_draws, 2, 10_000)
    K = check_int("K", K, 1, sh.MAX_K)
    L = check_int("L", L, 1, sh.MAX_L)
    query_stride = check_int("query_stride", query_stride, 1)
    key_stride = check_int("key_stride", key_stride, 1)
    rates = np.zeros((len(VARIANTS), len(cap.layers), n_draws, 2))
    formula = np.zeros((len(VARIANTS), len(cap.layers), 2))
    n_queries = n_keys = 0
    for row, layer in enumerate(cap.layers):
        views = [head_view(cap, layer, h) for h in cap.query_heads[row]]
        hashed = non_exact_mask(views[0].n)
        queries, own = _queries_and_masks(views, hashed, query_stride)
        own = own[:, ::key_stride]
        n_own = own.sum(axis=1)
        if not n_own.all():
            raise ValueError(f"key_stride = {key_stride} leaves a query without a hashed key in the subsample")
        own_t, n_own_t = torch.from_numpy(own), torch.from_numpy(n_own).double()
        keys = {variant: views[0].keys_as(variant)[hashed][::key_stride] for variant in VARIANTS}
        n_queries, n_keys = len(queries), len(keys["raw"])
        rng = np.random.default_rng(check_int("seed", seed, 0) + layer)
        small = torch.int16 if K < 16 else torch.int64  # codes below 2**K: compare fewer bytes
        for draw in range(n_draws):
            planes = torch.from_numpy(rng.standard_normal((queries.shape[1], L * K)).astype(np.float32))
            q_codes = _codes(queries, planes, L, K).to(small)  # (queries, L)
            for vi, variant in enumerate(VARIANTS):
                k_codes = _codes(keys[variant], planes, L, K).to(small)  # (keys, L)
                hits = torch.count_nonzero(q_codes[:, None, :] == k_codes[None], dim=2)  # (queries, keys)
                for m in (1, 2):
                    per_query = ((hits >= m) & own_t).sum(dim=1).double() / n_own_t
                    rates[vi, row, draw, m - 1] = per_query.mean().item()
        curves = np.array([_formula_on_bins(K, L, m) for m in (1, 2)]) if K <= MAX_PREFIX_BITS else None
        for vi, variant in enumerate(VARIANTS):
            cos = unit_rows(queries) @ unit_rows(keys[variant]).T
            per_query = own / n_own[:, None] / n_queries  # the mean over queries of each one's mean
            if curves is not None:  # binned as in collision_grid: bins 0.001 wide
                hist = np.histogram(cos, bins=_FORMULA_BINS, range=(-1.0, 1.0), weights=per_query)[0]
                formula[vi, row] = curves @ hist
            else:
                p = sh.collision_probability(cos)
                formula[vi, row] = [np.sum(sh.inclusion_probability(p, K, L, m) * per_query) for m in (1, 2)]
    return DrawScatter(list(cap.layers), K, L, n_queries, n_keys, rates, formula, int(own.sum()))


@functools.lru_cache(maxsize=1)
def shipped_collision_rate_draws() -> DrawScatter:
    """``collision_rate_draws`` of the shipped capture at its defaults, computed once per process."""
    return collision_rate_draws(shipped_capture())


def format_collision_table(grid: CollisionGrid, K: int = sh.DEFAULT_K, L: int = sh.DEFAULT_L) -> str:
    """Per layer and on average: % of hashed keys colliding in >= 1 and >= 2 tables, raw and
    centred, counted (formula in brackets), and the attention weight the >= 2 keys carry."""
    cols = [(v, m) for v in VARIANTS for m in (1, 2)]
    lines = [
        f"(K, L) = ({K}, {L}); % of keys sharing the query's bucket, counted [formula]",
        "layer " + "".join(f"{v + ' >=' + str(m):>19}" for v, m in cols) + "   weight on >=2: raw  centred",
    ]

    def row(label, pick):
        cells = "".join(f"{100 * pick('measured', v, m):11.2f} [{100 * pick('formula', v, m):5.2f}]" for v, m in cols)
        return (
            f"{label:>5} {cells}   {100 * pick('weight_share', 'raw', 2):17.2f}%"
            f" {100 * pick('weight_share', 'centred', 2):7.2f}%"
        )

    for i, layer in enumerate(grid.layers):
        lines.append(row(str(layer), lambda w, v, m, i=i: grid.per_layer(w, v, K, L, m)[i]))
    lines.append(row("mean", lambda w, v, m: grid.mean(w, v, K, L, m)))
    return "\n".join(lines)


def _two_significant(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{float(f'{x:.2g}'):,.0f}"


def format_layer_gains(grid: CollisionGrid, K: int = sh.DEFAULT_K, L: int = sh.DEFAULT_L, min_hits: int = 2) -> str:
    """Per layer, the centred rate over the raw rate, to two significant figures (the raw rates
    are counts of a few collisions); a layer whose raw keys never collided says so instead."""
    raw = grid.per_layer("measured", "raw", K, L, min_hits)
    centred = grid.per_layer("measured", "centred", K, L, min_hits)
    return ", ".join(
        f"layer {layer}: " + (f"{_two_significant(c / r)}x" if r > 0 else f"no raw collision counted (centred {c:.2%})")
        for layer, r, c in zip(grid.layers, raw, centred)
    )


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
    query_index: int = -1,
    K: int = sh.DEFAULT_K,
    L: int = sh.DEFAULT_L,
    min_hits: int = 2,
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


@functools.lru_cache(maxsize=1)
def shipped_real_scurve() -> RealSCurve:
    """Notebook 04's real S-curve: ``SCURVE_HEAD`` of the shipped capture, 200 hashings."""
    cap = shipped_capture()
    spec = SCURVE_HEAD
    return real_scurve(head_view(cap, spec["layer"], spec["head"]), spec["query_index"])


# --------------------------------------------------------------------------- entries scanned


@dataclass
class ScannedEntries:
    """Table entries one query scans: the sizes of its L buckets, added up (a key found in
    several tables counts once per table), against what evenly filled buckets would give.

    ``counted``: per variant (raw, centred), with one draw of hyperplanes (``SimHash(seed)``).
    ``formula``: per variant, the average over draws, ``L * sum_i p_i**K``: key i shares the
    query's bucket in one table with probability p_i**K. ``even``: ``L n / 2**K``."""

    K: int
    L: int
    n_keys: int
    seed: int
    counted: dict
    formula: dict
    even: float


def scanned_entries(
    view: HeadView, query_index: int = -1, K: int = sh.DEFAULT_K, L: int = sh.DEFAULT_L, seed: int = 0
) -> ScannedEntries:
    """The entries one query of ``view`` scans in L tables of K bits over the hashed keys, raw
    and centred (on the hashed keys' mean, as the engine centres them; the query is not)."""
    T = len(view.queries)
    query_index = check_int("query_index", query_index, -T, T - 1) % T
    table = sh.SimHash(view.keys.shape[-1], K, L, seed)
    q = view.queries[query_index]
    hashed = non_exact_mask(view.n)
    counted, formula = {}, {}
    for variant in VARIANTS:
        keys = view.keys_as(variant)[hashed]
        counted[variant] = int(table.hits(q, keys).sum())
        p = sh.collision_probability(unit_rows(keys) @ unit_rows(q[None])[0])
        formula[variant] = float(L * np.sum(p**K))
    n = int(hashed.sum())
    return ScannedEntries(table.K, table.L, n, table.seed, counted, formula, sh.expected_candidates(n, K, L))


@dataclass
class ScanFormula:
    """Table entries a query scans, averaged over draws of hyperplanes: ``L * sum_i p_i**K`` (key i
    shares the query's bucket in one table with probability p_i**K), over the hashed keys, for the
    queries ``collision_grid`` counts. Unlike ``L n / 2**K`` it needs no evenly filled buckets.

    ``per_query_sum``: ``(variant, layer, K)``, the mean over those queries of ``sum_i p_i**K``, each
    over the keys it hashes (``query_hashed_mask``)."""

    Ks: tuple
    layers: list
    n_queries: int
    n_keys: int
    per_query_sum: np.ndarray

    def per_layer(self, variant: str, K: int, L: int) -> np.ndarray:
        """Entries scanned per query, one number per captured layer."""
        v = VARIANTS.index(check_choice("variant", variant, VARIANTS))
        if K not in self.Ks:
            raise ValueError(f"K must be one of {self.Ks}, got {K}")
        return check_int("L", L, 1) * self.per_query_sum[v, :, self.Ks.index(K)]

    def mean(self, variant: str, K: int, L: int) -> float:
        """Average over the captured heads (each layer holds one KV head), as ``CollisionGrid.mean``."""
        return float(self.per_layer(variant, K, L).mean())


def scan_formula(cap, Ks=GRID_K, query_stride: int = 8) -> ScanFormula:
    """``ScanFormula`` of every captured layer: every ``query_stride``-th query of each of its
    heads (the queries ``collision_grid`` counts) against its hashed keys, raw and centred."""
    Ks = tuple(sorted({check_int("Ks entry", k, 1, sh.MAX_K) for k in Ks}))
    query_stride = check_int("query_stride", query_stride, 1)
    sums = np.zeros((len(VARIANTS), len(cap.layers), len(Ks)))
    n_queries = n_keys = 0
    for row, layer in enumerate(cap.layers):
        views = [head_view(cap, layer, h) for h in cap.query_heads[row]]
        hashed = non_exact_mask(views[0].n)
        queries, own = _queries_and_masks(views, hashed, query_stride)
        queries = unit_rows(queries)
        n_queries, n_keys = len(queries), int(hashed.sum())
        for vi, variant in enumerate(VARIANTS):
            p = sh.collision_probability(np.clip(queries @ unit_rows(views[0].keys_as(variant)[hashed]).T, -1, 1))
            sums[vi, row] = [(p**K * own).sum(axis=1).mean() for K in Ks]
    return ScanFormula(Ks, list(cap.layers), n_queries, n_keys, sums)


@functools.lru_cache(maxsize=1)
def shipped_scan_formula() -> ScanFormula:
    """``scan_formula`` of the shipped capture, computed once per process."""
    return scan_formula(shipped_capture())


def hashed_weight_share(cap, query_stride: int = 8) -> np.ndarray:
    """``(layer, query head)``: the share of the attention weight that falls on the keys a query
    hashes (``query_hashed_mask``: outside its exact set), mean over every ``query_stride``-th
    captured query: the part of the output that hashing has to find at all. The rest sits on the
    sinks and on the query's own window of recent tokens, which it reads exactly."""
    query_stride = check_int("query_stride", query_stride, 1)
    out = []
    for layer, heads in zip(cap.layers, cap.query_heads):
        row = []
        for h in heads:
            view = head_view(cap, layer, h)
            own = query_hashed_mask(view.positions[::query_stride], view.n)
            row.append(float((view.attention_weights()[::query_stride] * own).sum(axis=1).mean()))
        out.append(row)
    return np.array(out)


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


def output_errors(cap, K: int = sh.DEFAULT_K, L: int = sh.DEFAULT_L, seeds=range(5)) -> OutputErrors:
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
    """``output_errors`` of the shipped capture at its defaults (five seeds), computed once per process."""
    return output_errors(shipped_capture())
