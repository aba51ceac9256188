"""Notebook 04, SimHash S-curves: the formulas' numbers checked by counting, then one real query's S-curve."""

from __future__ import annotations

import math

import numpy as np

from pigviz.keys.geometry import EXACT_RECENT, EXACT_SINKS, head_view, shipped_capture
from pigviz.keys.hashing import RealSCurve, ScannedEntries, scanned_entries, shipped_real_scurve
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
    "real_query_table",
    "scan_table",
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
    "0.001": "the band of informative u, INFORMATIVE_U, and a test value of the log exercise",
    "0.999": "the band of informative u, INFORMATIVE_U",
    "0.3": "0.001 x 300: hits expected at the edge of the informative band",
    "0.01": "the significance level the marker reading uses",
    "20,000": "hyperplanes the bit check draws (n_planes)",
    "370": "1 / P(|z| > 3) for a normal z, about 370.4: a fact of the normal distribution",
    "15": "the step of the checked angles, 0, 15, ..., 180 degrees (CHECK_ANGLES_DEG)",
    "180": "the largest angle",
    "175": "an angle of the log-space table (a parameter)",
    "90%": "the top of the S-curve's 10% -> 90% climb, and Question 6's target",
    "95%": "the level of the markers' error bars",
    "0.9": "the cosine of the one-table example",
    "1.0": "the clip bounds of a cosine, in the bit_agreement hint",
    "1.0000000000000002": "a cosine rounded past 1, a case of the bit_agreement check",
    "1e-3": "the inclusion_probability check's relative tolerance",
    "1e-7": "the smallest u the inclusion_probability check uses",
    "4e-13": "u at p = 0.15, K = 10, L = 150, a case of the log check (tests/lessons/test_nb04_exercises.py)",
    "0.15": "a case of the log check",
    "1e-56": "u at p = 0.001, a case of the log check",
    "1000": "the largest L the log check uses",
    "50": "the keys of the illustrative query (a parameter of the cell)",
    "40": "the angle the illustrative query's keys lie within (a parameter of the cell)",
    "19": "the layer of the real query (SCURVE_HEAD, layer 19, head 6)",
    "200": "hashings of the real S-curve (real_scurve's n_hashings)",
    "96k": "the context notebook 05a follows, NAPKIN_TOKENS = 96 x 1,024",
    "96": "NAPKIN_TOKENS = 96 x 1,024",
    "1,024": "NAPKIN_TOKENS = 96 x 1,024",
    "98,304": "NAPKIN_TOKENS = 96 x 1,024 = 98,304",
    "45": "Question 1's target angle",
    "2,000": "the random keys of the two-draws cell (a parameter of the cell)",
    "20": "Question 4's K",
    "0.5": "Question 5's range of p",
    "0.1": "Question 5's range of p",
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


def real_query_table(curve: RealSCurve) -> Table:
    """What notebook 04 says about its real query, one row per fact, rounded to stable digits."""
    best = int(curve.cos.argmax())
    half_cos = crossing_cos(curve.K, curve.L, curve.min_hits)
    n_all = len(curve.cos_all)
    rows = [
        ("query", f"layer {curve.layer}, head {curve.head}, position {curve.position}"),
        ("hashed keys", f"{n_all:,} (all but the first {EXACT_SINKS} and the last {EXACT_RECENT}), centred"),
        ("cos(query, centred key)", f"{curve.cos_all.min():+.2f} to {curve.cos_all.max():+.2f}"),
        ("counted", f"{len(curve.keys)} keys over {curve.n_hashings} hashings at (K, L) = ({curve.K}, {curve.L})"),
        (
            "closest key",
            f"cos {curve.cos[best]:.2f}: formula u = {curve.formula[best]:.2f}, "
            f"sampled in {curve.counted[best]:.0%} of the hashings",
        ),
        ("counted keys whose 99% interval contains u", f"{curve.coverage():.1%}"),
        ("keys the formula expects sampled per hashing (sum of u)", f"{curve.expected_sampled:,.0f} of {n_all:,}"),
        (f"keys past the 50% point (cos {half_cos:.2f})", f"{int(np.sum(curve.cos_all > half_cos))} of {n_all:,}"),
    ]
    return table([{"what": what, "value": value} for what, value in rows])


def scan_table(scan: ScannedEntries) -> Table:
    """Entries one real query scans (one draw) against the formula and evenly filled buckets."""
    rows = [
        {"keys": v, "entries scanned (one draw)": scan.counted[v], "formula L sum p^K": scan.formula[v]}
        for v in scan.counted
    ]
    rows.append({"keys": "evenly filled buckets", "entries scanned (one draw)": None, "formula L sum p^K": scan.even})
    fmt = "{:,.0f}"
    return table(rows, formats={"entries scanned (one draw)": fmt, "formula L sum p^K": fmt})


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
    """Notebook 04's headline numbers: the formulas, then the real query."""
    return formula_claims() + real_query_claims()


def formula_claims() -> list:
    K, L = DEFAULT_K, DEFAULT_L
    out = []
    demo = plane_demo(K=3, L=150, min_hits=2, seed=0)
    same, found = int(demo.same_bucket.sum()), int(demo.included.sum())
    out.append(
        Claim(
            "04",
            "The plane picture: more of its 30 keys are found in at least 2 of 150 tables than in the one drawn",
            found > same,
            f"{same} of {len(demo.keys)} in table 1, {found} in >= 2 of {demo.L}",
        )
    )
    p0 = collision_probability(0.0)
    out.append(
        Claim(
            "04",
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
            "04",
            "Counting 20,000 random hyperplanes in 64 dimensions matches p = 1 - theta/pi at every angle (|z| < 3)",
            bool(z_bits < 3),
            f"max |z| = {z_bits:.2f}",
        )
    )

    one_table = collision_probability(0.9) ** K
    out.append(
        Claim(
            "04",
            f"One table of K = {K} bits finds a key at cos 0.9 only about one time in five",
            0.15 < one_table < 0.25,
            f"p^K = {one_table:.3f}",
        )
    )

    u_orth = inclusion_probability(0.5, K, L)
    out.append(
        Claim(
            "04",
            f"At (K, L) = ({K}, {L}) an orthogonal key is sampled with probability under 2%",
            u_orth < 0.02,
            f"u = {u_orth:.4f}",
        )
    )
    # 1 - u from expm1 of log u: u itself rounds to 1.0 here
    miss_close = -math.expm1(log_inclusion_probability(collision_probability(0.9), K, L))
    out.append(
        Claim(
            "04",
            f"At (K, L) = ({K}, {L}) a key with cos 0.9 is missed with probability under 0.1%",
            miss_close < 1e-3,
            f"1 - u = {miss_close:.1e}",
        )
    )

    c2 = crossing_cos(K, L, 2)
    c1 = crossing_cos(K, L, 1)
    out.append(
        Claim(
            "04",
            "With 'at least 2 of L' the curve crosses 50% at this cosine (angle)",
            c1 < c2 < 1.0,
            f"cos = {c2:.3f} ({cos_to_degrees(c2):.1f} deg)",
        )
    )
    out.append(
        Claim(
            "04",
            "With 'at least 1 of L' it crosses 50% at a wider angle",
            -1.0 < c1 < c2,
            f"cos = {c1:.3f} ({cos_to_degrees(c1):.1f} deg, {cos_to_degrees(c1) - cos_to_degrees(c2):.1f} deg wider)",
        )
    )

    w1 = transition_width_deg(K, L, 1)
    w2 = transition_width_deg(K, L, 2)
    out.append(
        Claim(
            "04",
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
                "04",
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
            "04",
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
            "04",
            "K = 10, L 50 -> 600: 50% point moves (deg), 10-90% climb barely narrows",
            l_move > 15 and l_w[1] / l_w[0] > 0.7,
            f"{half(10, 50):.0f} -> {half(10, 600):.0f}; {l_w[0]:.1f} -> {l_w[1]:.1f} deg",
        )
    )
    out.append(
        Claim(
            "04",
            "L = 150, K 5 -> 20: the 50% point moves too, and the climb halves",
            k_move > 15 and k_w[1] / k_w[0] < 0.6,
            f"{half(5, 150):.0f} -> {half(20, 150):.0f}; {k_w[0]:.1f} -> {k_w[1]:.1f} deg",
        )
    )

    def closed_form(angle):
        P = collision_probability(math.cos(math.radians(angle))) ** K
        return 1.0 - (1.0 - P) ** L - L * P * (1.0 - P) ** (L - 1)

    u140, u160 = (inclusion_probability(collision_probability(math.cos(math.radians(a))), K, L) for a in (140, 160))
    out.append(
        Claim(
            "04",
            "1 - P(0) - P(1) holds to 0.1% at 140 degrees and is lost in rounding noise (below 1e-12) at 160",
            closed_form_verdict(closed_form(140), u140) == "agrees to 0.1%"
            and closed_form_verdict(closed_form(160), u160).startswith("lost"),
            f"u = {u140:.1e} at 140 deg, {u160:.1e} at 160 deg",
        )
    )

    cand = expected_candidates(NAPKIN_TOKENS, K, L)
    out.append(
        Claim(
            "04",
            f"A query scans about L n / 2^K = 14,400 entries for n = {NAPKIN_TOKENS:,}",
            cand == 14_400,
            f"{cand:,.0f}",
        )
    )
    return out


def real_query_claims() -> list:
    """One real query's S-curve (the shipped capture): counted against the formula."""
    curve = shipped_real_scurve()
    cov = curve.coverage()
    gap = abs(curve.counted.mean() - curve.formula.mean())
    se = curve.mean_gap_se()
    best = int(np.argmax(curve.formula))
    independent_var = np.sum(curve.formula * (1 - curve.formula)) / len(curve.keys) ** 2
    ratio = float(curve.per_hashing.var(ddof=1) / independent_var)
    half_cos = crossing_cos(curve.K, curve.L, curve.min_hits)
    past_half = int(np.sum(curve.cos_all > half_cos))
    u_all = inclusion_probability(collision_probability(curve.cos_all), curve.K, curve.L, curve.min_hits)
    below_share = float(u_all[curve.cos_all <= half_cos].sum() / u_all.sum())
    view = head_view(shipped_capture(), curve.layer, curve.head)
    scan = scanned_entries(view, curve.query_index, curve.K, curve.L)
    cen, raw = scan.counted["centred"], scan.counted["raw"]
    return [
        Claim(
            "04",
            f"One real query: {curve.n_hashings} hashings match the formula key by key (99% CI)",
            cov >= 0.95,
            f"{cov:.1%} of {len(curve.keys)} keys",
        ),
        Claim(
            "04",
            "Mean counted inclusion equals the formula's mean (within 4 SE over hashings)",
            gap < 4 * se,
            f"{curve.counted.mean():.4f} vs {curve.formula.mean():.4f} (SE {se:.4f})",
        ),
        Claim(
            "04",
            "u is an inclusion probability: sum over the query's hashed keys >> 1",
            curve.expected_sampled > 10,
            f"sum u = {curve.expected_sampled:,.1f} over {len(curve.cos_all):,} keys",
            quotes=(f"{curve.expected_sampled:,.0f}",),
        ),
        Claim(
            "04",
            "Almost all of the expected S comes from keys below the 50% point (each in S less than half the time)",
            below_share > 0.95,
            f"{below_share:.0%} of sum u",
        ),
        Claim(
            "04",
            "Inclusions correlate: share in S varies more than independent keys' would",
            ratio > 1.2,
            f"variance x {ratio:.1f}",
        ),
        Claim(
            "04",
            "Real keys fill mostly the bottom of the S: few pass 50%, the closest is sampled part of the time",
            curve.formula[best] < 0.9 and 0 < curve.counted[best] < 1 and past_half < 0.01 * len(curve.cos_all),
            f"{past_half} past 50%; u = {curve.formula[best]:.2f}, counted {curve.counted[best]:.0%}",
        ),
        Claim(
            "04",
            "Its buckets are not evenly filled: entries scanned (one draw) vs L n / 2^K",
            raw < 0.2 * scan.even and cen > 1.2 * scan.even and abs(cen / scan.formula["centred"] - 1) < 0.2,
            f"centred {cen:,} (formula {scan.formula['centred']:,.0f}), raw {raw:,}; even {scan.even:,.0f}",
        ),
    ]
