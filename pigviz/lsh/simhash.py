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

Hashing vectors is :func:`pigviz.lsh.reference.simhash_codes` (numpy) and
:func:`pigviz.lsh.index.bucket_ids` (torch). ``pigviz.lsh.simhash_checks`` counts what that hashing
does (Monte Carlo) and draws the 2-D picture, so tests and the notebook can check every formula
against it.
"""

from __future__ import annotations

import math

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_array, check_float, check_int

__all__ = [
    "DEFAULT_K",
    "DEFAULT_L",
    "MAX_K",
    "collision_probability",
    "inclusion_probability",
    "log_inclusion_probability",
    "cos_to_degrees",
    "log_inclusion_probability_torch",
    "expected_candidates",
    "crossing_cos",
    "transition_width_deg",
]

DEFAULT_K = DEFAULTS.K
DEFAULT_L = DEFAULTS.L
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
    log_q = K * log_p  # log P1, P1 = p**K: one table collides
    log_1mq = xp.log(-xp.expm1(log_q))  # log(1 - P1), accurate when P1 is tiny or ~1
    log_c = ops.table(_log_binom_table(L))
    ks = ops.table(range(L + 1))
    mode = ops.clip(ops.floor_int((L + 1) * xp.exp(log_q)), 0, L)
    step = max(1, _CHUNK_ELEMENTS // max(1, int(np.prod(log_q.shape))))
    q_col, r_col = log_q[..., None], log_1mq[..., None]

    def log_range_sum(lo: int, hi: int):  # log sum_{k=lo..hi} C(L,k) P1^k (1-P1)^(L-k)
        k_star = ops.clip(mode, lo, hi)
        top = log_c[k_star] + k_star * log_q + (L - k_star) * log_1mq
        total = xp.zeros_like(log_q)
        for a in range(lo, hi + 1, step):
            k = ks[a : min(a + step, hi + 1)]
            terms = log_c[a : a + len(k)] + k * q_col + (L - k) * r_col - top[..., None]
            total = total + xp.exp(terms).sum(-1)
        return top + xp.log(total)

    log_tail = log_range_sum(min_hits, L)
    log_head = log_range_sum(0, min_hits - 1)
    return log_tail - xp.logaddexp(log_head, log_tail)


def log_inclusion_probability(p, K: int, L: int, min_hits: int = DEFAULTS.min_hits):
    """Natural log of :func:`inclusion_probability`, accurate across the whole range.

    Parameters
    ----------
    p : float or array of float in [0, 1]
        Per-bit collision probability (numpy broadcasting).
    K : int in [1, 62]
        Bits per table (a method's setting: pass ``pigviz.DEFAULTS.K`` for MagicPIG's).
    L : int in [1, 100000]
        Tables (``pigviz.DEFAULTS.L`` for MagicPIG's).
    min_hits : int in [1, L]
        Tables a key must share the query's bucket in (``pigviz.DEFAULTS.min_hits``, MagicPIG's rule,
        unless given).

    Returns
    -------
    float or ndarray
        log u, shaped as ``p``: -inf where p = 0 (the key can never be sampled), 0 where p = 1,
        both without warnings.

    Raises
    ------
    ValueError, TypeError
        ``p`` outside [0, 1] or NaN, or K, L, min_hits outside their ranges or not integers.
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


def inclusion_probability(p, K: int, L: int, min_hits: int = DEFAULTS.min_hits):
    """P(a key collides with the query in at least ``min_hits`` of ``L`` tables of ``K``
    bits). With min_hits = 2 this is 1 - (1-p^K)^L - L p^K (1-p^K)^(L-1); with min_hits = 1 it is
    the classic S-curve.

    Parameters
    ----------
    p : float or array of float in [0, 1]
        Per-bit collision probability (numpy broadcasting).
    K : int in [1, 62]
        Bits per table (a method's setting: pass ``pigviz.DEFAULTS.K`` for MagicPIG's).
    L : int in [1, 100000]
        Tables (``pigviz.DEFAULTS.L`` for MagicPIG's).
    min_hits : int in [1, L]
        Tables a key must share the query's bucket in (``pigviz.DEFAULTS.min_hits``, MagicPIG's rule,
        unless given).

    Returns
    -------
    float or ndarray
        u, shaped as ``p`` (exp of :func:`log_inclusion_probability`: a u under float64's least, ~5e-324, is 0).

    Raises
    ------
    ValueError, TypeError
        As :func:`log_inclusion_probability`.
    """
    out = np.exp(log_inclusion_probability(p, K, L, min_hits))
    return out if np.ndim(out) else float(out)


def log_inclusion_probability_torch(p, K: int, L: int, min_hits: int = DEFAULTS.min_hits, *, check: bool = True):
    """Torch twin of :func:`log_inclusion_probability` for a tensor ``p``.

    The arithmetic is done in float64 (except on Apple MPS, which lacks it) so float32 inputs get a
    float32-accurate answer.

    Parameters
    ----------
    p : torch.Tensor of a floating dtype, values in [0, 1]
        Per-bit collision probability.
    K : int in [1, 62]
        Bits per table (a method's setting: pass ``pigviz.DEFAULTS.K`` for MagicPIG's).
    L : int in [1, 100000]
        Tables (``pigviz.DEFAULTS.L`` for MagicPIG's).
    min_hits : int in [1, L]
        Tables a key must share the query's bucket in (``pigviz.DEFAULTS.min_hits``, MagicPIG's rule,
        unless given).
    check : bool
        Check ``p`` for NaN and values outside [0, 1]; ``False`` skips it (it needs a device sync).

    Returns
    -------
    torch.Tensor
        log u on ``p``'s device, shaped as ``p``, in ``p``'s dtype (float32 or float64; half
        precision comes back as float32, since log u spans more range than float16 holds).

    Raises
    ------
    ValueError, TypeError
        ``p`` not a floating tensor or (checked) outside [0, 1], or K, L, min_hits out of range.
    """
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

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


def expected_candidates(n: int, K: int, L: int) -> float:
    """Table entries one query scans, L n / 2^K, assuming the n keys spread evenly over the
    2^K buckets of each table.

    Parameters
    ----------
    n : int >= 0
        Keys indexed.
    K : int in [1, 62]
        Bits per table (a method's setting: pass ``pigviz.DEFAULTS.K`` for MagicPIG's).
    L : int in [1, 100000]
        Tables (``pigviz.DEFAULTS.L`` for MagicPIG's).

    Returns
    -------
    float
        Entries scanned.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or not an integer.
    """
    n = check_int("n", n, 0)
    K = check_int("K", K, 1, MAX_K)
    L = check_int("L", L, 1, MAX_L)
    return L * n / 2.0**K


def crossing_cos(K: int, L: int, min_hits: int = DEFAULTS.min_hits, level: float = 0.5) -> float:
    """The cosine at which the inclusion probability equals ``level``. u rises monotonically
    with cos (from 0 at cos = -1 to 1 at cos = 1), so bisection finds it to ~1e-12.

    Parameters
    ----------
    K : int in [1, 62]
        Bits per table (a method's setting: pass ``pigviz.DEFAULTS.K`` for MagicPIG's).
    L : int in [1, 100000]
        Tables (``pigviz.DEFAULTS.L`` for MagicPIG's).
    min_hits : int in [1, L]
        Tables a key must share the query's bucket in (``pigviz.DEFAULTS.min_hits``, MagicPIG's rule,
        unless given).
    level : float in (0, 1)
        The inclusion probability to find.

    Returns
    -------
    float
        The query-key cosine at which u = ``level``.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type.
    """
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


def cos_to_degrees(cos: float) -> float:
    return math.degrees(math.acos(max(-1.0, min(1.0, cos))))


def transition_width_deg(
    K: int, L: int, min_hits: int = DEFAULTS.min_hits, low: float = 0.1, high: float = 0.9
) -> float:
    """How many degrees of query-key angle the S-curve takes to climb from ``low`` to
    ``high``: the smaller, the steeper the cliff.

    Parameters
    ----------
    K : int in [1, 62]
        Bits per table (a method's setting: pass ``pigviz.DEFAULTS.K`` for MagicPIG's).
    L : int in [1, 100000]
        Tables (``pigviz.DEFAULTS.L`` for MagicPIG's).
    min_hits : int in [1, L]
        Tables a key must share the query's bucket in (``pigviz.DEFAULTS.min_hits``, MagicPIG's rule,
        unless given).
    low, high : float in (0, 1), low < high
        The inclusion probabilities the climb starts and ends at.

    Returns
    -------
    float
        Degrees.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type.
    """
    if not low < high:
        raise ValueError(f"low must be below high, got low={low}, high={high}")
    return cos_to_degrees(crossing_cos(K, L, min_hits, low)) - cos_to_degrees(crossing_cos(K, L, min_hits, high))


# Context length of the seed's napkin arithmetic: 96 x 1,024 tokens.
NAPKIN_TOKENS = 96 * 1024
# Angles at which the notebook and `pigviz verify` compare counting with the formulas.
CHECK_ANGLES_DEG = np.arange(0, 181, 15)
