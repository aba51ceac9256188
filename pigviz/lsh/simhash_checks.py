"""Counting what SimHash does, to check the formulas in ``pigviz.lsh.simhash``.

Monte-Carlo estimates of per-bit agreement and of the "at least min_hits of L" inclusion,
with exact binomial p-values; the 2-D picture of hyperplanes and the query's bucket; and the
claims of notebook 04a, which compare the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz._util.stats import wilson_interval
from pigviz._util.validate import check_array, check_float, check_int
from pigviz.lsh.reference import simhash_codes
from pigviz.lsh.simhash import (
    MAX_K,
    MAX_L,
    _check_kl,
    _log_binomial_tail,
    _Ops,
    collision_probability,
    inclusion_probability,
)

# --------------------------------------------------------------------------- hashing


class SimHash:
    """L tables of K random-hyperplane bits over ``dim``-dimensional vectors.

    The K*L hyperplane normals are independent standard Gaussians from
    ``numpy.random.default_rng(seed)``, so the same seed always gives the same tables.
    A vector on a hyperplane (dot product exactly 0) gets bit 0, as in the reference.
    """

    def __init__(self, dim: int, K: int, L: int, seed: int = 0):
        self.dim = check_int("dim", dim, 1)
        self.K = check_int("K", K, 1, MAX_K)
        self.L = check_int("L", L, 1, MAX_L)
        self.seed = check_int("seed", seed, 0)
        rng = np.random.default_rng(self.seed)
        # planes[:, t, b] is the normal of bit b in table t. Drawn table by table, so table t's
        # hyperplanes do not change when L grows (the 2-D picture stays put as L moves).
        self.planes = np.moveaxis(rng.standard_normal((self.L, self.K, self.dim)), -1, 0)

    def _vectors(self, x, name="x"):
        x = check_array(name, x, ndim=None, min_len=0)
        if x.ndim == 0 or x.shape[-1] != self.dim:
            raise ValueError(f"{name} must have last dimension {self.dim}, got shape {x.shape}")
        return x

    def bucket_ids(self, x) -> np.ndarray:
        """Each table's K bits packed into one int64 bucket id, shape (..., L): the reference's
        coder, :func:`pigviz.lsh.reference.simhash_codes`, on these planes laid out as it reads
        them (table l's bit j in column l*K + j)."""
        x = self._vectors(x)
        return simhash_codes(x, self.planes.reshape(self.dim, self.L * self.K), self.K, self.L)

    def hits(self, query, keys) -> np.ndarray:
        """For each key, in how many of the L tables it shares the query's bucket."""
        query = self._vectors(query, "query")
        keys = self._vectors(keys, "keys")
        if query.ndim != 1:
            raise ValueError(f"query must be one vector of length {self.dim}, got shape {query.shape}")
        return (self.bucket_ids(keys) == self.bucket_ids(query)).sum(axis=-1)

    def included(self, query, keys, min_hits: int = DEFAULTS.min_hits) -> np.ndarray:
        """True for keys that collide with the query in at least ``min_hits`` tables."""
        min_hits = check_int("min_hits", min_hits, 1, self.L)
        return self.hits(query, keys) >= min_hits


# --------------------------------------------------------------------------- Monte Carlo


def pair_at_angle(cos, dim: int = 2, seed: int | None = None):
    """A unit query and unit keys whose cosines with it are ``cos``.

    In 2-D the query is (1, 0). For dim > 2 and a seed, the plane the pair spans is rotated
    at random: Gaussian hyperplanes do not care, which is why the answer depends on the
    angle alone. Returns ``(query (dim,), keys (len(cos), dim))``.
    """
    cos = np.atleast_1d(check_array("cos", cos, ndim=(0, 1), min_len=1))
    if np.any(np.abs(cos) > 1.0):
        raise ValueError("cos must be in [-1, 1]")
    dim = check_int("dim", dim, 2)
    basis = np.eye(dim)[:2]
    if seed is not None and dim > 2:
        q, _ = np.linalg.qr(np.random.default_rng(check_int("seed", seed, 0)).standard_normal((dim, 2)))
        basis = q.T
    query = basis[0]
    keys = np.outer(cos, basis[0]) + np.outer(np.sqrt(1.0 - cos**2), basis[1])
    return query, keys


def _binomial_tail(log_u: float, n: int, c: int) -> float:
    """P(Binomial(n, u) >= c) for 1 <= c <= n, given log u < 0, by the same cancellation-free
    sum as the inclusion probability (one "table" of one "bit" with probability u), but for
    any number of trials: MAX_L bounds the lesson's tables, not a count of hashings."""
    if log_u >= 0.0:  # u rounds to 1: every trial succeeds
        return 1.0
    if log_u == -math.inf:
        return 0.0
    log_u = np.asarray(log_u, dtype=np.float64)
    return float(np.exp(_log_binomial_tail(log_u, 1, n, c, _Ops(np, log_u))))


@dataclass
class MonteCarloEstimate:
    """Observed frequencies next to the formula, with their sampling uncertainty."""

    cos: np.ndarray
    expected: np.ndarray  # the formula
    freq: np.ndarray  # observed fraction
    n_trials: int

    @property
    def angle_deg(self) -> np.ndarray:
        return np.degrees(np.arccos(np.clip(self.cos, -1, 1)))

    @property
    def se(self) -> np.ndarray:
        """Binomial standard error of ``freq`` if the formula is right."""
        return np.sqrt(self.expected * (1.0 - self.expected) / self.n_trials)

    def z_scores(self) -> np.ndarray:
        """(freq - expected) / se; 0 where the formula says the outcome is certain and the
        frequency agrees, inf where it disagrees."""
        diff = self.freq - self.expected
        se = self.se
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.where(np.abs(diff) < 1e-12, 0.0, np.inf))
        return z

    def p_values(self) -> np.ndarray:
        """Exact two-sided binomial test of each count against the formula: the chance of
        a count at least this far out if the formula is right. Unlike z, this stays honest
        for rare events (one hit where 0.03 were expected is a 3% event, not a 5-sigma one)."""
        n = check_int("n_trials", self.n_trials, 1)
        out = np.empty(len(self.freq))
        for i, (u, c) in enumerate(zip(self.expected, np.rint(self.freq * n).astype(int))):
            if u <= 0.0 or u >= 1.0:
                out[i] = 1.0 if c == (0 if u <= 0.0 else n) else 0.0
                continue
            at_least = 1.0 if c == 0 else _binomial_tail(math.log(u), n, int(c))
            at_most = 1.0 if c == n else _binomial_tail(math.log1p(-u), n, int(n - c))
            out[i] = min(1.0, 2.0 * min(at_least, at_most))
        return out

    def wilson_interval(self, z: float = 1.96):
        """95% Wilson score interval of each frequency (``pigviz._util.stats.wilson_interval``);
        unlike freq +- 2 se it stays inside [0, 1] and is not zero-width when the count is 0."""
        n = check_int("n_trials", self.n_trials, 1)
        return wilson_interval(np.rint(np.asarray(self.freq) * n).astype(int), n, z)


def monte_carlo_inclusion(
    cos,
    K: int,
    L: int,
    min_hits: int = DEFAULTS.min_hits,
    n_trials: int = 200,
    seed: int = 0,
    dim: int = 2,
    chunk_elements: int = 4_000_000,
) -> MonteCarloEstimate:
    """Build ``n_trials`` independent sets of L tables of K hyperplanes, hash a query and keys
    at the given cosines with each, and count how often each key reaches ``min_hits``.

    Vectorised over trials, tables and bits; trials are processed in chunks so at most about
    ``chunk_elements`` sign bits are held at once.
    """
    cos = np.atleast_1d(check_array("cos", cos, ndim=(0, 1)))
    K, L, min_hits = _check_kl(K, L, min_hits)
    n_trials = check_int("n_trials", n_trials, 1, 1_000_000)
    dim = check_int("dim", dim, 2, 4096)
    seed = check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    query, keys = pair_at_angle(cos, dim, seed=seed)
    per_trial = (len(cos) + 1) * L * K
    step = max(1, chunk_elements // per_trial)
    count = np.zeros(len(cos), dtype=np.int64)
    done = 0
    while done < n_trials:
        t = min(step, n_trials - done)
        normals = rng.standard_normal((t, dim, L, K))
        q_bits = np.einsum("d,tdlk->tlk", query, normals) >= 0
        k_bits = np.einsum("ad,tdlk->atlk", keys, normals) >= 0
        collide = (k_bits == q_bits).all(axis=-1)  # (keys, trials, tables)
        count += (collide.sum(axis=-1) >= min_hits).sum(axis=-1)
        done += t
    expected = inclusion_probability(collision_probability(cos), K, L, min_hits)
    return MonteCarloEstimate(cos, np.atleast_1d(expected), count / n_trials, n_trials)


# --------------------------------------------------------------------------- 2-D picture


def bucket_wedge(query, normals) -> tuple[float, float]:
    """The query's bucket in 2-D: K lines through the origin cut the plane into 2K wedges,
    one per sign pattern. Returns the (start, end) angles in radians, end > start."""
    query = check_array("query", query, ndim=1)
    normals = check_array("normals", normals, ndim=2)
    if query.shape != (2,) or normals.shape[1] != 2:
        raise ValueError(f"bucket_wedge works in 2-D, got query {query.shape} and normals {normals.shape}")
    line = np.arctan2(normals[:, 1], normals[:, 0]) + np.pi / 2
    bounds = np.sort(np.mod(np.concatenate([line, line + np.pi]), 2 * np.pi))
    alpha = math.atan2(query[1], query[0]) % (2 * math.pi)
    after = np.searchsorted(bounds, alpha)
    start = bounds[after - 1] if after > 0 else bounds[-1] - 2 * np.pi
    end = bounds[after] if after < len(bounds) else bounds[0] + 2 * np.pi
    return float(start), float(end)


@dataclass
class PlaneDemo:
    """Everything the 2-D picture draws: keys, the query, table 0's hyperplanes and who
    shares the query's bucket there, plus hit counts over all L tables."""

    keys: np.ndarray  # (n, 2)
    query: np.ndarray  # (2,)
    normals: np.ndarray  # (K, 2) table 0's hyperplane normals
    same_bucket: np.ndarray  # (n,) bool, table 0
    hits: np.ndarray  # (n,) tables (of L) where the key shares the query's bucket
    included: np.ndarray  # (n,) hits >= min_hits
    wedge: tuple[float, float]
    K: int
    L: int
    min_hits: int


def plane_demo(
    K: int,
    L: int,
    min_hits: int = DEFAULTS.min_hits,
    seed: int = 0,
    n_keys: int = 30,
    query_angle_deg: float = 35.0,
) -> PlaneDemo:
    """Hash a toy 2-D query and ``n_keys`` keys scattered around the origin with L tables of
    K hyperplanes (``seed`` picks both the keys and the hyperplanes)."""
    K, L, min_hits = _check_kl(K, L, min_hits)
    n_keys = check_int("n_keys", n_keys, 1, 10_000)
    query_angle_deg = check_float("query_angle_deg", query_angle_deg, -360.0, 360.0)
    seed = check_int("seed", seed, 0)
    rng = np.random.default_rng(seed)
    angle = rng.uniform(0, 2 * np.pi, n_keys)
    radius = rng.uniform(0.35, 1.0, n_keys)
    keys = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    query = np.array([math.cos(math.radians(query_angle_deg)), math.sin(math.radians(query_angle_deg))])
    table = SimHash(2, K, L, seed=seed)
    ids = table.bucket_ids(keys)
    q_ids = table.bucket_ids(query)
    hits = (ids == q_ids).sum(axis=1)
    normals = table.planes[:, 0, :].T
    return PlaneDemo(
        keys,
        query,
        normals,
        ids[:, 0] == q_ids[0],
        hits,
        hits >= min_hits,
        bucket_wedge(query, normals),
        K,
        L,
        min_hits,
    )
