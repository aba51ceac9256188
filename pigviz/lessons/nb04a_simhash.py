"""Notebook 04a, SimHash S-curves: bits, K-bit buckets, L tables and the "at least 2 of L" S-curve, each
formula's numbers checked by counting (notebook 04b takes u to real keys)."""

from __future__ import annotations

import math

import numpy as np

from pigviz.lessons.tables import Table, table
from pigviz.lessons.verify import Claim
from pigviz.lsh.simhash import (
    CHECK_ANGLES_DEG,
    DEFAULT_K,
    DEFAULT_L,
    MARKER_COS,
    MAX_L,
    NAPKIN_TOKENS,
    collision_probability,
    cos_to_degrees,
    crossing_cos,
    expected_candidates,
    inclusion_probability,
    log_inclusion_probability,
    transition_width_deg,
)
from pigviz.lsh.simhash_checks import monte_carlo_bit_agreement, monte_carlo_inclusion, plane_demo

__all__ = [
    "claims",
    "half_point_deg",
    "l_for_half_point",
    "closed_form_verdict",
    "INFORMATIVE_U",
    "marker_test_rows",
    "marker_test_table",
    "PROSE_DEFINED",
]

# Numbers the markdown writes that are not measured: MagicPIG's parameters, the checks' settings,
# the exercises' test values and tolerances.
PROSE_DEFINED = {
    "10": "MagicPIG's default K, pigviz.lsh.simhash.DEFAULT_K",
    "150": "MagicPIG's default L, pigviz.lsh.simhash.DEFAULT_L",
    "64": "the dimension the checks hash in (the head dimension of SmolLM2-135M)",
    "300": "hashings per marker (n_trials)",
    "0.001": "the band of informative u, INFORMATIVE_U",
    "0.999": "the band of informative u, INFORMATIVE_U",
    "0.01": "the significance level the marker reading uses",
    "20,000": "hyperplanes the bit check draws (n_planes)",
    "370": "1 / P(|z| > 3) for a normal z, about 370.4: a fact of the normal distribution",
    "15": "the step of the checked angles, 0, 15, ..., 180 degrees (CHECK_ANGLES_DEG)",
    "180": "the largest angle",
    "50%": "the S-curve's midpoint, u = 1/2 (a definition)",
    "90%": "the top of the S-curve's 10% -> 90% climb",
    "95%": "the level of the markers' error bars",
    "0.9": "the cosine of the one-table example",
    "1.0": "the clip bounds of a cosine, in the bit_agreement hint",
    "1.0000000000000002": "a cosine rounded past 1, a case of the bit_agreement check",
    "1e-3": "the inclusion_probability check's relative tolerance",
    "1e-7": "the smallest u the inclusion_probability check uses",
    "50": "the keys of the illustrative query (a parameter of the cell)",
    "40": "the angle the illustrative query's keys lie within (a parameter of the cell)",
    "96k": "the context notebook 05a follows, NAPKIN_TOKENS = 96 x 1,024",
    "96": "NAPKIN_TOKENS = 96 x 1,024",
    "1,024": "NAPKIN_TOKENS = 96 x 1,024",
    "98,304": "NAPKIN_TOKENS = 96 x 1,024 = 98,304",
    "45": "Question 1's target angle",
    "2,000": "the random keys of the two-draws cell (a parameter of the cell)",
    "20": "Question 4's K",
}


# An angle whose u lies outside this range expects fewer than 0.3 hits (or misses) in 300
# hashings: its count can hardly differ from the formula, so its p-value says next to nothing.
INFORMATIVE_U = (1e-3, 1 - 1e-3)


# --------------------------------------------------------------------------- the notebook's helpers


def half_point_deg(K: int, L: int, min_hits: int = 2) -> float:
    """The angle (degrees) at which u = 50% under "at least ``min_hits`` of L tables of K bits"."""
    return cos_to_degrees(crossing_cos(K, L, min_hits))


def l_for_half_point(K: int, goal_deg: float) -> int:
    """Smallest L whose 50% point is at least ``goal_deg`` degrees. The 50% point grows with L:
    double L until it is reached, then bisect (each step costs a binomial sum over L terms, so
    the search never evaluates an L much larger than the answer)."""
    lo, hi = 2, 2
    while half_point_deg(K, hi) < goal_deg:
        if hi >= MAX_L:
            raise ValueError(f"goal_deg = {goal_deg} needs more than {MAX_L:,} tables at K = {K}")
        lo, hi = hi + 1, min(2 * hi, MAX_L)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if half_point_deg(K, mid) < goal_deg else (lo, mid)
    return lo


def closed_form_verdict(closed: float, stable: float) -> str:
    """How the closed form 1 - P(0) - P(1) fares against the stable value, in words that read the
    same on every CPU (its rounding noise is reported as a bound, never printed)."""
    if abs(closed - stable) <= 1e-3 * stable:
        return "agrees to 0.1%"
    if abs(closed) < 1e-12:
        return "lost in rounding noise below 1e-12"
    return "wrong by more than 0.1%"


def marker_test_rows(counted: dict) -> list[dict]:
    """Per rule ({min_hits: MonteCarloEstimate}): how many angles can test the formula at all, and
    the worst of those: its angle, its count against the formula's, its exact binomial p-value."""
    lo, hi = INFORMATIVE_U
    rows = []
    for m, mc in counted.items():
        informative = (mc.expected > lo) & (mc.expected < hi)
        p = np.where(informative, mc.p_values(), np.inf)  # the others can hardly test the formula
        worst = int(np.argmin(p))
        rows.append(
            {
                "rule": f">= {m} of L",
                "angles": len(mc.cos),
                f"with {lo:g} < u < {1 - lo:g}": int(informative.sum()),
                "smallest p-value": float(p[worst]),
                "at (deg)": float(mc.angle_deg[worst]),
                "hits counted": int(round(mc.freq[worst] * mc.n_trials)),
                "hits expected": float(mc.expected[worst] * mc.n_trials),
            }
        )
    return rows


def marker_test_table(counted: dict) -> Table:
    return table(
        marker_test_rows(counted),
        formats={"smallest p-value": "{:.3f}", "at (deg)": "{:g}", "hits expected": "{:.2f}"},
    )


def claims() -> list:
    """Notebook 04a's headline numbers: the formulas, each checked by counting."""
    K, L = DEFAULT_K, DEFAULT_L
    out = []
    demo = plane_demo(K=3, L=150, min_hits=2, seed=0)
    same, found = int(demo.same_bucket.sum()), int(demo.included.sum())
    out.append(
        Claim(
            "04a",
            "The plane picture: more of its 30 keys are found in at least 2 of 150 tables than in the one drawn",
            found > same,
            f"{same} of {len(demo.keys)} in table 1, {found} in >= 2 of {demo.L}",
        )
    )
    p0 = collision_probability(0.0)
    out.append(
        Claim(
            "04a",
            "One hyperplane bit agrees for orthogonal vectors with probability 1/2",
            abs(p0 - 0.5) < 1e-15,
            f"p = {p0:.3f}",
        )
    )

    check_cos = np.cos(np.radians(CHECK_ANGLES_DEG))
    bits = monte_carlo_bit_agreement(check_cos, n_planes=20_000, seed=0, dim=64)
    z_bits = np.max(np.abs(bits.z_scores()))
    out.append(
        Claim(
            "04a",
            "Counting 20,000 random hyperplanes in 64 dimensions matches p = 1 - theta/pi at every angle (|z| < 3)",
            bool(z_bits < 3),
            f"max |z| = {z_bits:.2f}",
        )
    )

    one_table = collision_probability(0.9) ** K
    out.append(
        Claim(
            "04a",
            f"One table of K = {K} bits finds a key at cos 0.9 only about one time in five",
            0.15 < one_table < 0.25,
            f"p^K = {one_table:.3f}",
        )
    )

    u_orth = inclusion_probability(0.5, K, L)
    out.append(
        Claim(
            "04a",
            f"At (K, L) = ({K}, {L}) an orthogonal key is sampled with probability under 2%",
            u_orth < 0.02,
            f"u = {u_orth:.4f}",
        )
    )
    # 1 - u from expm1 of log u: u itself rounds to 1.0 here
    miss_close = -math.expm1(log_inclusion_probability(collision_probability(0.9), K, L))
    out.append(
        Claim(
            "04a",
            f"At (K, L) = ({K}, {L}) a key with cos 0.9 is missed with probability under 0.1%",
            miss_close < 1e-3,
            f"1 - u = {miss_close:.1e}",
        )
    )

    c2 = crossing_cos(K, L, 2)
    c1 = crossing_cos(K, L, 1)
    out.append(
        Claim(
            "04a",
            "With 'at least 2 of L' the curve crosses 50% at this cosine (angle)",
            c1 < c2 < 1.0,
            f"cos = {c2:.3f} ({cos_to_degrees(c2):.1f} deg)",
        )
    )
    out.append(
        Claim(
            "04a",
            "With 'at least 1 of L' it crosses 50% at a wider angle",
            -1.0 < c1 < c2,
            f"cos = {c1:.3f} ({cos_to_degrees(c1):.1f} deg, {cos_to_degrees(c1) - cos_to_degrees(c2):.1f} deg wider)",
        )
    )

    w1 = transition_width_deg(K, L, 1)
    w2 = transition_width_deg(K, L, 2)
    out.append(
        Claim(
            "04a",
            "Requiring 2 hits narrows the 10%-to-90% climb of the S-curve (degrees)",
            w2 < w1,
            f"{w1:.2f} -> {w2:.2f} deg",
            quotes=(f"{w1:.1f}", f"{w2:.1f}"),
        )
    )

    counted = {m: monte_carlo_inclusion(MARKER_COS, K, L, m, n_trials=300, seed=m, dim=64) for m in (1, 2)}
    rows = marker_test_rows(counted)
    for row in rows:
        informative = row[f"with {INFORMATIVE_U[0]:g} < u < {1 - INFORMATIVE_U[0]:g}"]
        out.append(
            Claim(
                "04a",
                f"300 independent hashings agree with the '{row['rule']}' formula (smallest binomial p-value > 0.001)",
                row["smallest p-value"] > 1e-3,
                f"p = {row['smallest p-value']:.3f} at {row['at (deg)']:g} deg "
                f"({row['hits counted']} hits, {row['hits expected']:.2f} expected; {informative} informative angles)",
                quotes=(f"{row['angles']} angles",),
            )
        )
    worst = min(rows, key=lambda r: r["smallest p-value"])
    n_inf = worst[f"with {INFORMATIVE_U[0]:g} < u < {1 - INFORMATIVE_U[0]:g}"]
    out.append(
        Claim(
            "04a",
            "Over both curves the smallest p-value is on this one; chance alone puts the smallest of its "
            "informative angles' p-values below 0.01 at most (angles x 0.01) of the time",
            worst["smallest p-value"] > 0.01,
            f"'{worst['rule']}': p = {worst['smallest p-value']:.3f}; {n_inf} x 0.01 = {n_inf * 0.01:.0%}",
        )
    )

    def half(k, l):
        return cos_to_degrees(crossing_cos(k, l, 2))

    l_move, l_w = half(10, 600) - half(10, 50), (transition_width_deg(10, 50, 2), transition_width_deg(10, 600, 2))
    k_move, k_w = half(5, 150) - half(20, 150), (transition_width_deg(5, 150, 2), transition_width_deg(20, 150, 2))
    out.append(
        Claim(
            "04a",
            "K = 10, L 50 -> 600: 50% point moves (deg), 10-90% climb barely narrows",
            l_move > 15 and l_w[1] / l_w[0] > 0.7,
            f"{half(10, 50):.0f} -> {half(10, 600):.0f}; {l_w[0]:.1f} -> {l_w[1]:.1f} deg",
        )
    )
    out.append(
        Claim(
            "04a",
            "L = 150, K 5 -> 20: the 50% point moves too, and the climb halves",
            k_move > 15 and k_w[1] / k_w[0] < 0.6,
            f"{half(5, 150):.0f} -> {half(20, 150):.0f}; {k_w[0]:.1f} -> {k_w[1]:.1f} deg",
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
    # The K and L section: more tables move the 50% point to wider angles and narrow the climb a
    # little; more bits move it towards the query and narrow the climb far more.
    half = {kl: cos_to_degrees(crossing_cos(*kl)) for kl in ((10, 50), (10, 600), (5, 150), (20, 150))}
    climb = {kl: transition_width_deg(*kl) for kl in half}
    more_tables, more_bits = climb[(10, 600)] / climb[(10, 50)], climb[(20, 150)] / climb[(5, 150)]
    out.append(
        Claim(
            "04a",
            "Twelve times more tables move the 50% point wider and narrow the climb only a little (to over 70%); four "
            "times more bits move it towards the query and narrow the climb to under 60%",
            half[(10, 600)] > half[(10, 50)]
            and more_tables > 0.7
            and half[(20, 150)] < half[(5, 150)]
            and more_bits < 0.6,
            f"L x12: {half[(10, 600)] - half[(10, 50)]:+.0f} deg, climb {more_tables:.0%}; "
            f"K x4: {half[(20, 150)] - half[(5, 150)]:+.0f} deg, climb {more_bits:.0%}",
        )
    )
    return out
