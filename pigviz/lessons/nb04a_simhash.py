"""Notebook 04a, SimHash S-curves: bits, K-bit buckets, L tables and the "at least 2 of L" S-curve, each
formula's numbers checked by counting (notebook 04b takes u to real keys)."""

from __future__ import annotations

import math

import numpy as np

from pigviz.lessons.verify import Claim
from pigviz.lsh.simhash import (
    CHECK_ANGLES_DEG,
    DEFAULT_K,
    DEFAULT_L,
    NAPKIN_TOKENS,
    collision_probability,
    cos_to_degrees,
    crossing_cos,
    expected_candidates,
    inclusion_probability,
    transition_width_deg,
)

__all__ = [
    "bit_check_z",
    "claims",
    "closed_form_verdict",
    "marker_check",
    "plane_counts",
    "two_draws",
    "PROSE_DEFINED",
]

# Numbers the markdown writes that are not measured: MagicPIG's parameters, the checks' settings,
# the exercises' test values and tolerances.
PROSE_DEFINED = {
    "10": "MagicPIG's default K, pigviz.lsh.simhash.DEFAULT_K",
    "150": "MagicPIG's default L, pigviz.lsh.simhash.DEFAULT_L",
    "64": "the dimension the checks hash in (the head dimension of SmolLM2-135M)",
    "370": "1 / P(|z| > 3) for a normal z, about 370.4: a fact of the normal distribution",
    "10%": "the bottom of the S-curve's 10% -> 90% climb (a definition)",
    "90%": "the top of the S-curve's 10% -> 90% climb (a definition)",
    "0.9": "the cosine of the one-table example",
    "45": "Question 1's target angle",
    "20": "Question 4's K",
}


# --------------------------------------------------------------------------- the notebook's helpers


def closed_form_verdict(closed: float, stable: float) -> str:
    """How the closed form 1 - P(no table) - P(exactly one) fares against the stable value, in words that read the
    same on every CPU (its rounding noise is reported as a bound, never printed)."""
    if abs(closed - stable) <= 1e-3 * stable:
        return "agrees to 0.1%"
    if abs(closed) < 1e-12:
        return "lost in rounding noise below 1e-12"
    return "wrong by more than 0.1%"


# The notebook's counting cells, re-run for the claims: the same seeds, the same steps.


def plane_counts(seed: int = 0) -> tuple[int, int, int]:
    """The 2-D picture: 30 keys, 150 tables of 3 lines. Returns (keys, keys in the query's bucket of
    table 1, keys in its bucket in at least 2 tables)."""
    rng = np.random.default_rng(seed)
    angle = rng.uniform(0, 2 * np.pi, 30)
    keys = rng.uniform(0.35, 1, (30, 1)) * np.c_[np.cos(angle), np.sin(angle)]
    query = np.array([np.cos(0.6), np.sin(0.6)])
    lines = rng.standard_normal((150, 3, 2))

    def sides(x):
        return np.einsum("...d,tkd->...tk", x, lines) >= 0

    same = (sides(keys) == sides(query)).all(axis=-1)
    return len(keys), int(same[:, 0].sum()), int((same.sum(axis=1) >= 2).sum())


def _pairs(rng, cos, dim: int = 64):
    """A unit query and unit keys at cosines ``cos`` from it, in a random plane of ``dim`` dimensions."""
    e1, e2 = np.linalg.qr(rng.standard_normal((dim, 2)))[0].T
    return e1, np.outer(cos, e1) + np.outer(np.sqrt(1 - cos**2), e2)


def _hits(query, keys, planes):
    def ids(x):
        return (np.einsum("...d,tkd->...tk", x, planes) >= 0) @ 2 ** np.arange(planes.shape[1])

    return (ids(keys) == ids(query)).sum(axis=-1)


def bit_check_z(seed: int = 2, n_planes: int = 20_000) -> np.ndarray:
    """The one-bit check: z of the counted agreement against 1 - theta/pi at 0, 15, ..., 180 degrees."""
    c = np.cos(np.radians(CHECK_ANGLES_DEG))
    rng = np.random.default_rng(seed)
    query, keys = _pairs(rng, c)
    normals = rng.standard_normal((n_planes, 64))
    counted = ((keys @ normals.T >= 0) == (normals @ query >= 0)).mean(axis=1)
    p = collision_probability(c)
    se = np.sqrt(p * (1 - p) / n_planes)
    return np.divide(counted - p, se, out=np.zeros_like(p), where=se > 0)


def marker_check(seed: int = 3, trials: int = 300, K: int = DEFAULT_K, L: int = DEFAULT_L) -> dict:
    """The S-curve markers: per rule (min hits 1, 2), the angles where the formula expects at least 5
    hits and 5 misses in ``trials`` hashings, and the largest |z| among them."""
    c = np.cos(np.radians(np.arange(0, 181, 7.5)))
    rng = np.random.default_rng(seed)
    found = np.zeros((trials, len(c)), dtype=int)
    for t in range(trials):
        query, keys = _pairs(rng, c)
        found[t] = _hits(query, keys, rng.standard_normal((L, K, 64)))
    out = {}
    for m in (1, 2):
        u = inclusion_probability(collision_probability(c), K, L, m)
        ok = (trials * u >= 5) & (trials * (1 - u) >= 5)
        z = ((found >= m).sum(axis=0)[ok] - trials * u[ok]) / np.sqrt(trials * u[ok] * (1 - u[ok]))
        out[m] = (int(ok.sum()), float(np.abs(z).max()))
    return out


def two_draws(seed: int = 4, K: int = DEFAULT_K, L: int = DEFAULT_L) -> tuple[int, int, int]:
    """The HNSW cell: keys sampled by two draws of hyperplanes, and by both."""
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((2000, 64))
    query = keys[0] + 0.5 * rng.standard_normal(64)
    sets = [set(np.flatnonzero(_hits(query, keys, rng.standard_normal((L, K, 64))) >= 2)) for _ in range(2)]
    return len(sets[0]), len(sets[1]), len(sets[0] & sets[1])


def claims() -> list:
    """Notebook 04a's headline numbers: the formulas, each checked by counting in the notebook's cells."""
    K, L = DEFAULT_K, DEFAULT_L
    out = []
    n_keys, same, found = plane_counts()
    out.append(
        Claim(
            "04a",
            "The plane picture: more of its keys are found in at least 2 of 150 tables than in table 1",
            found > same,
            f"{same} of {n_keys} in table 1, {found} in >= 2 of 150",
        )
    )
    z_bits = float(np.max(np.abs(bit_check_z())))
    out.append(
        Claim(
            "04a",
            "Counting 20,000 random hyperplanes in 64 dimensions matches p = 1 - theta/pi at every angle (|z| < 3)",
            z_bits < 3,
            f"max |z| = {z_bits:.2f}",
        )
    )
    one_table = collision_probability(0.9) ** K
    out.append(
        Claim(
            "04a",
            f"One table of K = {K} bits finds a key at cos 0.9 in only a minority of tables",
            one_table < 0.5,
            f"p^K = {one_table:.4f}",
        )
    )
    p_at = (1 / L) ** (1 / K)
    u_one = inclusion_probability(p_at, K, L, 1)
    out.append(
        Claim(
            "04a",
            "At L p^K = 1, u_1 is about 1 - 1/e",
            abs(u_one - (1 - math.exp(-1))) < 0.01,
            f"u_1 = {u_one:.3f}, 1 - 1/e = {1 - math.exp(-1):.3f}",
        )
    )
    for m, (tested, z) in marker_check().items():
        out.append(
            Claim(
                "04a",
                f"300 hashings agree with the '>= {m} of L' formula where it expects 5+ hits and misses (|z| < 3)",
                tested >= 3 and z < 3,
                f"largest |z| = {z:.2f} over {tested} angles",
            )
        )

    c2, c1 = crossing_cos(K, L, 2), crossing_cos(K, L, 1)
    w2, w1 = transition_width_deg(K, L, 2), transition_width_deg(K, L, 1)
    out.append(
        Claim(
            "04a",
            "'At least 2 of L' crosses 50% closer to the query than 'at least 1', and climbs 10% -> 90% in "
            "fewer degrees",
            c1 < c2 < 1.0 and w2 < w1,
            f"{cos_to_degrees(c2):.1f} vs {cos_to_degrees(c1):.1f} deg; climb {w2:.1f} vs {w1:.1f} deg",
        )
    )
    # The K and L section: more tables move the midpoint to wider angles and narrow the climb a
    # little; more bits move it towards the query and narrow the climb far more.
    half = {kl: cos_to_degrees(crossing_cos(*kl)) for kl in ((10, 50), (10, 600), (5, 150), (20, 150))}
    climb = {kl: transition_width_deg(*kl) for kl in half}
    more_tables, more_bits = climb[(10, 600)] / climb[(10, 50)], climb[(20, 150)] / climb[(5, 150)]
    out.append(
        Claim(
            "04a",
            "Many more tables move the midpoint wider and narrow the climb only a little (to over 70%); more bits "
            "move it towards the query and narrow the climb far more (to under 60%)",
            half[(10, 600)] > half[(10, 50)]
            and more_tables > 0.7
            and half[(20, 150)] < half[(5, 150)]
            and more_bits < 0.6,
            f"L x12: {half[(10, 600)] - half[(10, 50)]:+.0f} deg, climb {more_tables:.0%}; "
            f"K x4: {half[(20, 150)] - half[(5, 150)]:+.0f} deg, climb {more_bits:.0%}",
        )
    )
    u_close = inclusion_probability(collision_probability(np.cos(np.radians(np.linspace(0, 90, 50)))), K, L)
    out.append(
        Claim(
            "04a",
            "u is not a distribution: over 50 keys within 90 degrees of the query it sums far above 1",
            u_close.sum() > 5,
            f"sum u = {u_close.sum():.1f}",
        )
    )
    a, b, both = two_draws()
    out.append(
        Claim(
            "04a",
            "Two draws of hyperplanes sample different sets (SimHash is random, unlike HNSW or IVF)",
            both < min(a, b),
            f"{a} and {b} keys, {both} in both",
        )
    )
    cand = expected_candidates(NAPKIN_TOKENS, K, L)
    out.append(
        Claim(
            "04a",
            f"A query scans about L n / 2^K = 14,400 entries for n = {NAPKIN_TOKENS:,}",
            cand == 14_400,
            f"{cand:,.0f}",
        )
    )
    return out
