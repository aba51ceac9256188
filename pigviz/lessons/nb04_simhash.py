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
    "marker_story",
]

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
    the worst of them: its angle, its count against the formula's, its exact binomial p-value."""
    lo, hi = INFORMATIVE_U
    rows = []
    for m, mc in counted.items():
        p = mc.p_values()
        worst = int(np.argmin(p))
        rows.append(
            {
                "rule": f">= {m} of L",
                "angles": len(mc.cos),
                f"with {lo:g} < u < {1 - lo:g}": int(np.sum((mc.expected > lo) & (mc.expected < hi))),
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


def _runs_above(mc, informative: np.ndarray, at: int) -> list[float]:
    """The informative angles next to ``at`` (itself included) whose counts all sit on the same
    side of the formula as the count at ``at``: one stretch of a correlated draw."""
    side = np.sign(mc.freq - mc.expected)
    i, j = at, at
    while i - 1 >= 0 and informative[i - 1] and side[i - 1] == side[at]:
        i -= 1
    while j + 1 < len(side) and informative[j + 1] and side[j + 1] == side[at]:
        j += 1
    return [float(a) for a in mc.angle_deg[i : j + 1]]


def marker_story(counted: dict, alpha: float = 0.01) -> str:
    """What the counted markers' p-values can and cannot say (markdown), every number computed."""
    lo, hi = INFORMATIVE_U
    rows = {r["rule"]: r for r in marker_test_rows(counted)}
    m = min(counted, key=lambda k: rows[f">= {k} of L"]["smallest p-value"])  # the curve with the worst angle
    mc, row = counted[m], rows[f">= {m} of L"]
    informative = (mc.expected > lo) & (mc.expected < hi)
    n_inf = int(informative.sum())
    worst = int(np.argmin(mc.p_values()))
    run = _runs_above(mc, informative, worst)
    side = "above" if mc.freq[worst] > mc.expected[worst] else "below"
    run_text = (
        f"here the counts at {', '.join(f'{a:g}' for a in run[:-1])} and {run[-1]:g} degrees all came out {side} "
        "the formula"
        if len(run) > 1
        else "one angle's luck spills over to its neighbours"
    )
    return (
        f"Only {n_inf} of the {row['angles']} angles of the 'at least {m} of L' curve have a $u$ between {lo:g} and "
        f"{1 - lo:g}; at the others the formula expects fewer than {lo * mc.n_trials:.1f} hits (or misses) in "
        f"{mc.n_trials} hashings, so the count can hardly differ from it and the p-value says little. "
        f"The informative angles are not independent either: within one hashing every key is hashed with the same "
        f"hyperplanes, so a lucky draw lifts neighbouring angles together ({run_text}). "
        f"The smallest p-value is at {row['at (deg)']:g} degrees: {row['hits counted']} hits where "
        f"{row['hits expected']:.2f} were expected, p = {row['smallest p-value']:.3f}. By chance alone the smallest "
        f"of {n_inf} p-values falls below {alpha:g} at most {n_inf * alpha:.0%} of the time ({n_inf} x {alpha:g}, "
        f"however they are correlated); a wrong formula would drive them towards zero at many angles at once."
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
    bits = monte_carlo_bit_agreement(check_cos, n_planes=20_000, seed=0)
    z_bits = np.max(np.abs(bits.z_scores()))
    out.append(
        Claim(
            "04",
            "Counting 20,000 random hyperplanes matches p = 1 - theta/pi at every angle (|z| < 3)",
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
            f"cos = {c1:.3f} ({cos_to_degrees(c1):.1f} deg)",
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
        )
    )

    counted = {m: monte_carlo_inclusion(MARKER_COS, K, L, m, n_trials=300, seed=m) for m in (1, 2)}
    for row in marker_test_rows(counted):
        informative = row[f"with {INFORMATIVE_U[0]:g} < u < {1 - INFORMATIVE_U[0]:g}"]
        out.append(
            Claim(
                "04",
                f"300 independent hashings agree with the '{row['rule']}' formula (smallest binomial p-value > 0.001)",
                row["smallest p-value"] > 1e-3,
                f"p = {row['smallest p-value']:.3f} at {row['at (deg)']:g} deg "
                f"({row['hits counted']} hits, {row['hits expected']:.2f} expected; {informative} informative angles)",
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
