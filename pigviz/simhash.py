"""SimHash: random hyperplanes, K-bit buckets, L tables, and the odds that a key is sampled.

A random hyperplane through the origin separates two vectors at angle theta with probability
theta/pi, so one sign bit agrees with probability ``p = 1 - theta/pi``. A table concatenates K
bits, so a key lands in the query's bucket with probability ``p**K``. With L tables built from
independent hyperplanes the number of tables in which it collides is Binomial(L, p**K), and
MagicPIG samples a key when that count reaches ``min_hits`` (2 by default):

    u = 1 - (1 - p**K)**L - L p**K (1 - p**K)**(L - 1)

``log_inclusion_probability`` evaluates log u without ever subtracting two nearly equal
numbers, because the attention correction needs -log u for keys whose u is 1e-30 as well as
for keys whose u is 1 - 1e-12. The same arithmetic is written for numpy and torch.

The second half hashes real vectors (``SimHash``) and counts, so tests and the notebook can
check every formula against what hashing actually does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pigviz._validate import check_array, check_float, check_int

__all__ = [
    "DEFAULT_K",
    "DEFAULT_L",
    "MAX_K",
    "collision_probability",
    "collision_probability_torch",
    "inclusion_probability",
    "log_inclusion_probability",
    "log_inclusion_probability_torch",
    "expected_candidates",
    "inclusion_curve",
    "bucket_wedge",
    "PlaneDemo",
    "plane_demo",
    "crossing_cos",
    "transition_width_deg",
    "SimHash",
    "pair_at_angle",
    "MonteCarloEstimate",
    "monte_carlo_bit_agreement",
    "monte_carlo_inclusion",
    "claims",
    "print_claims",
]

DEFAULT_K = 10
DEFAULT_L = 150
# Bucket ids pack K bits into a signed int64; 62 keeps every id non-negative with room to spare.
MAX_K = 62
# Anything larger makes the O(L) binomial sum pointless for a lesson and slow for a widget.
MAX_L = 100_000


# --------------------------------------------------------------------------- formulas

def collision_probability(cos):
    """Chance that one random-hyperplane bit agrees for two vectors with cosine ``cos``:
    ``1 - arccos(cos)/pi``. Cosines a hair outside [-1, 1] (rounding) are clipped."""
    cos = check_array("cos", cos, ndim=None, min_len=0)
    p = 1.0 - np.arccos(np.clip(cos, -1.0, 1.0)) / np.pi
    return p if p.ndim else float(p)


def collision_probability_torch(cos):
    """Torch version of :func:`collision_probability`, on ``cos``'s device and dtype.

    The result is clamped to [0, 1] so float32 rounding of pi cannot produce p = -1e-8."""
    import torch

    p = 1.0 - torch.arccos(cos.clamp(-1.0, 1.0)) / math.pi
    return p.clamp(0.0, 1.0)


def _check_kl(K, L, min_hits):
    K = check_int("K", K, 1, MAX_K)
    L = check_int("L", L, 1, MAX_L)
    min_hits = check_int("min_hits", min_hits, 1, L)
    return K, L, min_hits


def _log_binom_table(L: int) -> list[float]:
    """log C(L, k) for k = 0..L, from lgamma (exact enough: relative error ~1e-15)."""
    lg = math.lgamma
    top = lg(L + 1)
    return [top - lg(k + 1) - lg(L - k + 1) for k in range(L + 1)]


class _Ops:
    """The few operations the binomial sum needs that numpy and torch spell differently."""

    def __init__(self, xp, like):
        self.xp, self.like = xp, like

    def table(self, values):
        if self.xp is np:
            return np.asarray(values, dtype=np.float64)
        return self.xp.tensor(values, dtype=self.like.dtype, device=self.like.device)

    def floor_int(self, x):
        return np.floor(x).astype(np.int64) if self.xp is np else x.floor().long()

    def clip(self, x, lo, hi):
        return np.clip(x, lo, hi) if self.xp is np else x.clamp(lo, hi)


# Binomial terms evaluated at once (elements x terms): bounds memory, keeps GPU launches few.
_CHUNK_ELEMENTS = 1 << 22


def _log_binomial_tail(log_p, K: int, L: int, min_hits: int, ops: _Ops):
    """log P(X >= min_hits) for X ~ Binomial(L, p**K), given ``log_p`` with every entry in
    (-inf, 0) strictly (the caller handles p == 0 and p == 1).

    Both the head (k < min_hits) and the tail (k >= min_hits) are sums of positive binomial
    terms, so neither suffers cancellation. Each is summed after subtracting its largest
    term, which sits at the mode clipped into the range because the binomial pmf is
    unimodal; finally tail / (head + tail) removes the rounding of the normalising sum.
    """
    xp = ops.xp
    log_q = K * log_p                          # log P1, P1 = p**K: one table collides
    log_1mq = xp.log(-xp.expm1(log_q))         # log(1 - P1), accurate when P1 is tiny or ~1
    log_c = ops.table(_log_binom_table(L))
    ks = ops.table(range(L + 1))
    mode = ops.clip(ops.floor_int((L + 1) * xp.exp(log_q)), 0, L)
    step = max(1, _CHUNK_ELEMENTS // max(1, int(np.prod(log_q.shape))))
    q_col, r_col = log_q[..., None], log_1mq[..., None]

    def log_range_sum(lo: int, hi: int):       # log sum_{k=lo..hi} C(L,k) P1^k (1-P1)^(L-k)
        k_star = ops.clip(mode, lo, hi)
        top = log_c[k_star] + k_star * log_q + (L - k_star) * log_1mq
        total = xp.zeros_like(log_q)
        for a in range(lo, hi + 1, step):
            k = ks[a:min(a + step, hi + 1)]
            terms = log_c[a:a + len(k)] + k * q_col + (L - k) * r_col - top[..., None]
            total = total + xp.exp(terms).sum(-1)
        return top + xp.log(total)

    log_tail = log_range_sum(min_hits, L)
    log_head = log_range_sum(0, min_hits - 1)
    return log_tail - xp.logaddexp(log_head, log_tail)


def log_inclusion_probability(p, K: int = DEFAULT_K, L: int = DEFAULT_L, min_hits: int = 2):
    """Natural log of :func:`inclusion_probability`, accurate across the whole range.

    ``p`` is the per-bit collision probability in [0, 1] (numpy broadcasting). p = 0 gives
    -inf (the key can never be sampled) and p = 1 gives 0, both without warnings.
    """
    K, L, min_hits = _check_kl(K, L, min_hits)
    p = check_array("p", p, ndim=None, min_len=0)
    if p.size and (p.min() < 0.0 or p.max() > 1.0):
        raise ValueError(f"p must be in [0, 1], got values from {p.min()} to {p.max()}")
    never = p == 0.0
    always = p == 1.0
    safe_p = np.where(never | always, 0.5, p)
    out = _log_binomial_tail(np.log(safe_p), K, L, min_hits, _Ops(np, safe_p))
    out = np.where(never, -np.inf, np.where(always, 0.0, out))
    return out if out.ndim else float(out)


def inclusion_probability(p, K: int = DEFAULT_K, L: int = DEFAULT_L, min_hits: int = 2):
    """P(a key collides with the query in at least ``min_hits`` of ``L`` tables of ``K``
    bits), where ``p`` is the per-bit collision probability. With min_hits = 2 this is
    1 - (1-p^K)^L - L p^K (1-p^K)^(L-1); with min_hits = 1 it is the classic S-curve."""
    out = np.exp(log_inclusion_probability(p, K, L, min_hits))
    return out if np.ndim(out) else float(out)


def log_inclusion_probability_torch(p, K: int = DEFAULT_K, L: int = DEFAULT_L, min_hits: int = 2,
                                    *, check: bool = True):
    """Torch twin of :func:`log_inclusion_probability` for a tensor ``p``.

    Runs on ``p``'s device and returns ``p``'s dtype (float32 or float64; half precision
    comes back as float32, since log u spans more range than float16 holds). The arithmetic is
    done in float64 (except on Apple MPS, which lacks it) so float32 inputs get a float32-
    accurate answer. ``check=False`` skips the NaN/range check, which needs a device sync.
    """
    import torch

    K, L, min_hits = _check_kl(K, L, min_hits)
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"p must be a torch.Tensor, got {type(p).__name__}")
    if p.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise TypeError(f"p must be a floating-point tensor, got dtype {p.dtype}")
    if check and p.numel():
        bad = (torch.isnan(p) | (p < 0) | (p > 1)).any()
        if bool(bad):
            raise ValueError("p must be in [0, 1] with no NaN")
    work = torch.float32 if p.device.type == "mps" else torch.float64
    pw = p.to(work)
    never = pw == 0.0
    always = pw == 1.0
    safe_p = torch.where(never | always, torch.full_like(pw, 0.5), pw)
    out = _log_binomial_tail(torch.log(safe_p), K, L, min_hits, _Ops(torch, safe_p))
    out = torch.where(never, torch.full_like(out, -math.inf), out)
    out = torch.where(always, torch.zeros_like(out), out)
    out_dtype = p.dtype if p.dtype in (torch.float32, torch.float64) else torch.float32
    return out.to(out_dtype)


def expected_candidates(n: int, K: int = DEFAULT_K, L: int = DEFAULT_L) -> float:
    """Table entries one query scans, L n / 2^K, assuming the n keys spread evenly over the
    2^K buckets of each table."""
    n = check_int("n", n, 0)
    K = check_int("K", K, 1, MAX_K)
    L = check_int("L", L, 1, MAX_L)
    return L * n / 2.0**K


def crossing_cos(K: int = DEFAULT_K, L: int = DEFAULT_L, min_hits: int = 2, level: float = 0.5) -> float:
    """The cosine at which the inclusion probability equals ``level``. u rises monotonically
    with cos (from 0 at cos = -1 to 1 at cos = 1), so bisection finds it to ~1e-12."""
    K, L, min_hits = _check_kl(K, L, min_hits)
    level = check_float("level", level, 0.0, 1.0, lo_open=True, hi_open=True)
    log_level = math.log(level)
    lo, hi = -1.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if log_inclusion_probability(collision_probability(mid), K, L, min_hits) < log_level:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _cos_to_deg(cos: float) -> float:
    return math.degrees(math.acos(max(-1.0, min(1.0, cos))))


def transition_width_deg(K: int = DEFAULT_K, L: int = DEFAULT_L, min_hits: int = 2,
                         low: float = 0.1, high: float = 0.9) -> float:
    """How many degrees of query-key angle the S-curve takes to climb from ``low`` to
    ``high``: the smaller, the steeper the cliff."""
    if not low < high:
        raise ValueError(f"low must be below high, got low={low}, high={high}")
    return _cos_to_deg(crossing_cos(K, L, min_hits, low)) - _cos_to_deg(crossing_cos(K, L, min_hits, high))


# --------------------------------------------------------------------------- hashing

class SimHash:
    """L tables of K random-hyperplane bits over ``dim``-dimensional vectors.

    The K*L hyperplane normals are independent standard Gaussians from
    ``numpy.random.default_rng(seed)``, so the same seed always gives the same tables.
    A vector on a hyperplane (dot product exactly 0) counts as the 1 side.
    """

    def __init__(self, dim: int, K: int = DEFAULT_K, L: int = DEFAULT_L, seed: int = 0):
        self.dim = check_int("dim", dim, 1)
        self.K = check_int("K", K, 1, MAX_K)
        self.L = check_int("L", L, 1, MAX_L)
        self.seed = check_int("seed", seed, 0)
        rng = np.random.default_rng(self.seed)
        # planes[:, t, b] is the normal of bit b in table t. Drawn table by table, so table t's
        # hyperplanes do not change when L grows (the 2-D picture stays put as L moves).
        self.planes = np.moveaxis(rng.standard_normal((self.L, self.K, self.dim)), -1, 0)
        self._weights = np.left_shift(np.int64(1), np.arange(self.K, dtype=np.int64))

    def _vectors(self, x, name="x"):
        x = check_array(name, x, ndim=None, min_len=0)
        if x.ndim == 0 or x.shape[-1] != self.dim:
            raise ValueError(f"{name} must have last dimension {self.dim}, got shape {x.shape}")
        return x

    def codes(self, x) -> np.ndarray:
        """Sign bits, boolean array of shape (..., L, K)."""
        x = self._vectors(x)
        return np.einsum("...d,dlk->...lk", x, self.planes) >= 0.0

    def bucket_ids(self, x) -> np.ndarray:
        """Each table's K bits packed into one int64 bucket id, shape (..., L)."""
        return self.codes(x).astype(np.int64) @ self._weights

    def hits(self, query, keys) -> np.ndarray:
        """For each key, in how many of the L tables it shares the query's bucket."""
        query = self._vectors(query, "query")
        keys = self._vectors(keys, "keys")
        if query.ndim != 1:
            raise ValueError(f"query must be one vector of length {self.dim}, got shape {query.shape}")
        return (self.bucket_ids(keys) == self.bucket_ids(query)).sum(axis=-1)

    def included(self, query, keys, min_hits: int = 2) -> np.ndarray:
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
    if log_u >= 0.0:                  # u rounds to 1: every trial succeeds
        return 1.0
    if log_u == -math.inf:
        return 0.0
    log_u = np.asarray(log_u, dtype=np.float64)
    return float(np.exp(_log_binomial_tail(log_u, 1, n, c, _Ops(np, log_u))))


@dataclass
class MonteCarloEstimate:
    """Observed frequencies next to the formula, with their sampling uncertainty."""

    cos: np.ndarray
    expected: np.ndarray      # the formula
    freq: np.ndarray          # observed fraction
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
        """95% Wilson score interval of each frequency; unlike freq +- 2 se it stays inside
        [0, 1] and is not zero-width when the count is 0."""
        n, f = self.n_trials, self.freq
        centre = (f + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(f * (1 - f) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)


def monte_carlo_bit_agreement(cos, n_planes: int = 20_000, seed: int = 0) -> MonteCarloEstimate:
    """Draw ``n_planes`` random hyperplanes and count how often each (query, key) pair lands
    on the same side, for keys at the given cosines."""
    cos = np.atleast_1d(check_array("cos", cos, ndim=(0, 1)))
    n_planes = check_int("n_planes", n_planes, 1, 10_000_000)
    seed = check_int("seed", seed, 0)
    query, keys = pair_at_angle(cos)
    normals = np.random.default_rng(seed).standard_normal((2, n_planes))
    same = (keys @ normals >= 0) == (query @ normals >= 0)
    return MonteCarloEstimate(cos, collision_probability(cos), same.mean(axis=1), n_planes)


def monte_carlo_inclusion(cos, K: int = DEFAULT_K, L: int = DEFAULT_L, min_hits: int = 2,
                          n_trials: int = 200, seed: int = 0, dim: int = 2,
                          chunk_elements: int = 4_000_000) -> MonteCarloEstimate:
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
        collide = (k_bits == q_bits).all(axis=-1)            # (keys, trials, tables)
        count += (collide.sum(axis=-1) >= min_hits).sum(axis=-1)
        done += t
    expected = inclusion_probability(collision_probability(cos), K, L, min_hits)
    return MonteCarloEstimate(cos, np.atleast_1d(expected), count / n_trials, n_trials)


# --------------------------------------------------------------------------- 2-D picture

def inclusion_curve(angle_deg, K: int = DEFAULT_K, L: int = DEFAULT_L, min_hits: int = 2):
    """Inclusion probability as a function of the query-key angle in degrees."""
    angle = check_array("angle_deg", angle_deg, ndim=None, min_len=0)
    return inclusion_probability(collision_probability(np.cos(np.radians(angle))), K, L, min_hits)


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

    keys: np.ndarray           # (n, 2)
    query: np.ndarray          # (2,)
    normals: np.ndarray        # (K, 2) table 0's hyperplane normals
    same_bucket: np.ndarray    # (n,) bool, table 0
    hits: np.ndarray           # (n,) tables (of L) where the key shares the query's bucket
    included: np.ndarray       # (n,) hits >= min_hits
    wedge: tuple[float, float]
    K: int
    L: int
    min_hits: int


def plane_demo(K: int = 3, L: int = DEFAULT_L, min_hits: int = 2, seed: int = 0,
               n_keys: int = 30, query_angle_deg: float = 35.0) -> PlaneDemo:
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
    return PlaneDemo(keys, query, normals, ids[:, 0] == q_ids[0], hits, hits >= min_hits,
                     bucket_wedge(query, normals), K, L, min_hits)


# --------------------------------------------------------------------------- claims

# Context length of the seed's napkin arithmetic: 96 x 1,024 tokens.
NAPKIN_TOKENS = 96 * 1024
# Angles at which the notebook and `pigviz verify` compare counting with the formulas.
CHECK_ANGLES_DEG = np.arange(0, 181, 15)
# Where the S-curve markers sit: every 7.5 degrees.
MARKER_COS = np.cos(np.radians(np.arange(0, 181, 7.5)))


def claims() -> list:
    """Notebook 04's headline numbers, each re-derived here."""
    from pigviz.claims import Claim

    K, L = DEFAULT_K, DEFAULT_L
    out = []
    p0 = collision_probability(0.0)
    out.append(Claim("04", "One hyperplane bit agrees for orthogonal vectors with probability 1/2",
                     abs(p0 - 0.5) < 1e-15, f"p = {p0:.3f}"))

    check_cos = np.cos(np.radians(CHECK_ANGLES_DEG))
    bits = monte_carlo_bit_agreement(check_cos, n_planes=20_000, seed=0)
    z_bits = np.max(np.abs(bits.z_scores()))
    out.append(Claim("04", "Counting 20,000 random hyperplanes matches p = 1 - theta/pi at every angle (|z| < 4)",
                     bool(z_bits < 4), f"max |z| = {z_bits:.2f}"))

    one_table = collision_probability(0.9) ** K
    out.append(Claim("04", f"One table of K = {K} bits finds a key at cos 0.9 only about one time in five",
                     0.15 < one_table < 0.25, f"p^K = {one_table:.3f}"))

    u_orth = inclusion_probability(0.5, K, L)
    out.append(Claim("04", f"At (K, L) = ({K}, {L}) an orthogonal key is sampled with probability under 2%",
                     u_orth < 0.02, f"u = {u_orth:.4f}"))
    # 1 - u from expm1 of log u: u itself rounds to 1.0 here
    miss_close = -math.expm1(log_inclusion_probability(collision_probability(0.9), K, L))
    out.append(Claim("04", f"At (K, L) = ({K}, {L}) a key with cos 0.9 is missed with probability under 0.1%",
                     miss_close < 1e-3, f"1 - u = {miss_close:.1e}"))

    c2 = crossing_cos(K, L, 2)
    c1 = crossing_cos(K, L, 1)
    out.append(Claim("04", "With 'at least 2 of L' the curve crosses 50% at this cosine (angle)",
                     c1 < c2 < 1.0, f"cos = {c2:.3f} ({_cos_to_deg(c2):.1f} deg)"))
    out.append(Claim("04", "With 'at least 1 of L' it crosses 50% at a wider angle",
                     -1.0 < c1 < c2, f"cos = {c1:.3f} ({_cos_to_deg(c1):.1f} deg)"))

    w1 = transition_width_deg(K, L, 1)
    w2 = transition_width_deg(K, L, 2)
    out.append(Claim("04", "Requiring 2 hits narrows the 10%-to-90% climb of the S-curve (degrees)",
                     w2 < w1, f"{w1:.2f} -> {w2:.2f} deg"))

    for m in (1, 2):
        mc = monte_carlo_inclusion(MARKER_COS, K, L, m, n_trials=300, seed=m)
        worst = float(np.min(mc.p_values()))
        out.append(Claim("04", f"300 independent hashings agree with the 'at least {m} of L' formula "
                               "(smallest binomial p-value > 0.001)", worst > 1e-3, f"p = {worst:.3f}"))

    cand = expected_candidates(NAPKIN_TOKENS, K, L)
    out.append(Claim("04", f"A query scans about L n / 2^K = 14,400 entries for n = {NAPKIN_TOKENS:,}",
                     cand == 14_400, f"{cand:,.0f}"))
    return out


def print_claims() -> None:
    """Print notebook 04's claims as a table (the notebook calls this; nbval compares it)."""
    from pigviz.claims import format_table

    print(format_table(claims()))
