"""Notebook 04b, sampling real keys with u: log u for far keys, one real query's S-curve, then raw
against centred keys under MagicPIG's hashing (collisions counted, the weight outside the exact set
that sampling finds, and MagicPIG's output error), re-derived from the shipped capture."""

from __future__ import annotations

import math

import numpy as np

from pigviz.keys.geometry import VARIANTS, head_view, shipped_capture
from pigviz.keys.hashing import (
    hashed_weight_share,
    scanned_entries,
    shipped_collision_grid,
    shipped_collision_rate_draws,
    shipped_output_errors,
    shipped_real_scurve,
    shipped_scan_formula,
)
from pigviz.lessons.nb04a_simhash import closed_form_verdict
from pigviz.lessons.verify import Claim, span
from pigviz.lsh.simhash import (
    DEFAULT_K,
    DEFAULT_L,
    collision_probability,
    crossing_cos,
    inclusion_probability,
)

__all__ = [
    "ANSWER4_RAW",
    "claims",
    "closest_centred_cell",
    "PROSE_DEFINED",
    "PROSE_FROM",
]

# The prose may quote notebook 04a's claims (the S-curve's 50% point, the default's u).
PROSE_FROM = ("04a",)

# Numbers the markdown writes that are not measured: MagicPIG's parameters, the model's and the
# capture's fixed facts, a citation, the exercises' test values and tolerances.
PROSE_DEFINED = {
    "10": "MagicPIG's default K, pigviz.lsh.simhash.DEFAULT_K",
    "150": "MagicPIG's default L, pigviz.lsh.simhash.DEFAULT_L",
    "300": "the largest L of the grid, pigviz.keys.geometry.GRID_L",
    "64": "the head dimension of SmolLM2-135M, and the exact window EXACT_RECENT of 64 positions",
    "2025": "the MagicPIG paper's year (ICLR 2025)",
    "0.1%": "the raw collision rate the MagicPIG paper reports for its model (a citation)",
    "19": "the layer of the head notebooks 02 to 04b draw (layer 19, head 6)",
    "200": "hashings of the real S-curve (real_scurve's n_hashings)",
    "175": "an angle of the log-space table (a parameter)",
    "4e-13": "u at p = 0.15, K = 10, L = 150, a case of the log check (tests/lessons/test_nb04_exercises.py)",
    "0.15": "a case of the log check",
    "0.001": "a test value of the log check",
    "1e-56": "u at p = 0.001, a case of the log check",
    "1000": "the largest L the log check uses",
    "90%": "Question 5's target u",
    "30": "fresh draws of hyperplanes per layer (collision_rate_draws)",
    "0.5": "Question 4's range of p",
    "0.1": "Question 4's range of p",
    "15": "the minutes the optional part takes (a reading estimate)",
}

# Answer 4's raw setting: the widest buckets of the grid, with the most tables.
ANSWER4_RAW = (6, 300)


def closest_centred_cell(grid, raw=ANSWER4_RAW) -> tuple[int, int]:
    """The (K, L) where centred keys are sampled (>= 2 tables) about as often as raw keys at ``raw``."""
    target = grid.mean("measured", "raw", *raw, 2)
    cells = [(abs(grid.mean("measured", "centred", k, l, 2) - target), k, l) for k in grid.Ks for l in grid.Ls]
    _, k, l = min(cells)
    return k, l


def claims() -> list:
    """Notebook 04b's headline numbers: log u, the real query's S-curve, raw against centred keys."""
    return log_claims() + real_query_claims() + sampling_claims()


def log_claims() -> list:
    K, L = DEFAULT_K, DEFAULT_L
    out = []

    def closed_form(angle):
        P = collision_probability(math.cos(math.radians(angle))) ** K
        return 1.0 - (1.0 - P) ** L - L * P * (1.0 - P) ** (L - 1)

    u140, u160 = (inclusion_probability(collision_probability(math.cos(math.radians(a))), K, L) for a in (140, 160))
    out.append(
        Claim(
            "04b",
            "1 - P(0) - P(1) holds to 0.1% at 140 degrees and is lost in rounding noise (below 1e-12) at 160",
            closed_form_verdict(closed_form(140), u140) == "agrees to 0.1%"
            and closed_form_verdict(closed_form(160), u160).startswith("lost"),
            f"u = {u140:.1e} at 140 deg, {u160:.1e} at 160 deg",
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
            "04b",
            f"One real query: {curve.n_hashings} hashings match the formula key by key (99% CI)",
            cov >= 0.95,
            f"{cov:.1%} of {len(curve.keys)} keys",
        ),
        Claim(
            "04b",
            "Mean counted inclusion equals the formula's mean (within 4 SE over hashings)",
            gap < 4 * se,
            f"{curve.counted.mean():.4f} vs {curve.formula.mean():.4f} (SE {se:.4f})",
        ),
        Claim(
            "04b",
            "u is an inclusion probability: sum over the query's hashed keys >> 1",
            curve.expected_sampled > 10,
            f"sum u = {curve.expected_sampled:,.1f} over {len(curve.cos_all):,} keys",
            quotes=(f"{curve.expected_sampled:,.0f}",),
        ),
        Claim(
            "04b",
            "Almost all of the expected S comes from keys below the 50% point (each in S less than half the time)",
            below_share > 0.95,
            f"{below_share:.0%} of sum u",
        ),
        Claim(
            "04b",
            "Inclusions correlate: share in S varies more than independent keys' would",
            ratio > 1.2,
            f"variance x {ratio:.1f}",
        ),
        Claim(
            "04b",
            "Real keys fill mostly the bottom of the S: few pass 50%, the closest is sampled part of the time",
            curve.formula[best] < 0.9 and 0 < curve.counted[best] < 1 and past_half < 0.01 * len(curve.cos_all),
            f"{past_half} past 50%; u = {curve.formula[best]:.2f}, counted {curve.counted[best]:.0%}",
        ),
        Claim(
            "04b",
            "Its buckets are not evenly filled: entries scanned (one draw) vs L n / 2^K",
            raw < 0.2 * scan.even and cen > 1.2 * scan.even and abs(cen / scan.formula["centred"] - 1) < 0.2,
            f"centred {cen:,} (formula {scan.formula['centred']:,.0f}), raw {raw:,}; even {scan.even:,.0f}",
        ),
    ]


def sampling_claims() -> list:
    """Raw against centred keys under MagicPIG's hashing: collisions, the weight found, the output."""
    cap = shipped_capture()
    grid = shipped_collision_grid()
    K, L = DEFAULT_K, DEFAULT_L
    raw1, raw2 = grid.mean("measured", "raw", K, L, 1), grid.mean("measured", "raw", K, L, 2)
    raw1_layers = grid.per_layer("measured", "raw", K, L, 1)
    cen2, f2 = grid.mean("measured", "centred", K, L, 2), grid.mean("formula", "centred", K, L, 2)
    ws_raw, ws_cen = grid.mean("weight_share", "raw", K, L), grid.mean("weight_share", "centred", K, L)
    ws_sink = {v: grid.per_layer("weight_share", v, K, L)[1:] for v in VARIANTS}  # the layers after layer 2
    gain = grid.gain()
    wide_K, wide_L = grid.Ks[0], grid.Ls[-1]  # the widest buckets on the grid
    wide_cen = grid.mean("measured", "centred", wide_K, wide_L, 2)
    wide_raw = grid.mean("measured", "raw", wide_K, wide_L, 2)
    draws = shipped_collision_rate_draws()
    spread_raw, spread_cen = draws.relative_spread("raw", 1), draws.relative_spread("centred", 1)
    gaps = np.abs([draws.mean_gap_se(v, m) for v in ("raw", "centred") for m in (1, 2)])
    table_raw = grid.per_layer("measured", "raw", K, L, 1)
    table_off = table_raw / grid.per_layer("formula", "raw", K, L, 1) - 1
    draws_raw = draws.per_layer("raw", 1)
    inside = (draws_raw.min(1) <= table_raw) & (table_raw <= draws_raw.max(1))
    # One draw's variance over that of independent pairs (binomial: at most p(1 - p) / N).
    excess = {v: (draws.relative_spread(v, 1) / draws.independent_spread(v, 1)) ** 2 for v in VARIANTS}
    sink_rows = slice(1, None)  # the captured layers after layer 2, which has no sink
    raw2_pairs = grid.pairs_hit[0, :, grid.Ks.index(K), grid.Ls.index(L), 1]
    outside = hashed_weight_share(cap).mean(axis=1)
    errors = shipped_output_errors()
    err = {m: errors.mean_error(m) for m in ("exact only", "raw", "centred")}
    scan = shipped_scan_formula()
    k4, l4 = closest_centred_cell(grid)
    scan_raw, scan_cen = scan.mean("raw", *ANSWER4_RAW), scan.mean("centred", k4, l4)
    ws4_raw, ws4_cen = grid.mean("weight_share", "raw", *ANSWER4_RAW), grid.mean("weight_share", "centred", k4, l4)
    wide_ws = {v: grid.mean("weight_share", v, wide_K, wide_L) for v in VARIANTS}
    sink_cut = (err["exact only"][sink_rows] / err["centred"][sink_rows]).ravel()
    layer2 = {m: float(err[m][0].mean()) for m in err}  # layer 2, no sink: the first captured layer
    sink_raw2 = grid.per_layer("measured", "raw", K, L, 2)[sink_rows]
    sink_cen2 = grid.per_layer("measured", "centred", K, L, 2)[sink_rows]
    sink_cen1 = grid.per_layer("measured", "centred", K, L, 1)
    return [
        Claim(
            "04b",
            f"Raw keys in the query's bucket, >= 1 / >= 2 of {L} tables (K = {K})",
            raw2 < 0.01,
            f"{raw1:.2%} / {raw2:.2%}",
        ),
        Claim(
            "04b",
            "Unlike the paper's model (< 0.1%), raw keys hit >= 1 table more often",
            raw1_layers.min() > 0.001,
            f"{span(raw1_layers, '{:.2%}')} per layer",
        ),
        Claim("04b", f"Centred keys in it, >= 2 of {L} tables: over 10x the raw rate", cen2 > 10 * raw2, f"{cen2:.2%}"),
        Claim(
            "04b",
            "Weight outside the exact set that the sampled keys carry (share of it, not of all weight): raw vs "
            "centred; in the sink layers centred over 10x the raw maximum",
            ws_cen > 0.3 and ws_cen > 3 * ws_raw and ws_sink["centred"].min() > 10 * ws_sink["raw"].max(),
            f"{ws_raw:.1%} vs {ws_cen:.1%}; sink layers {span(ws_sink['raw'], '{:.1%}')} vs "
            f"{span(ws_sink['centred'], '{:.1%}')}",
        ),
        Claim(
            "04b",
            "Sink layers: raw >= 2 rate rests on a few dozen (query, key) pairs or fewer",
            raw2_pairs[sink_rows].max() < 100,
            ", ".join(f"{x:.0f}" for x in raw2_pairs[sink_rows]) + f" (layer 2: {raw2_pairs[0]:,.0f})",
        ),
        Claim(
            "04b",
            "Attention weight outside each query's exact set (sinks + its last 64): layer 2 vs the sink layers",
            outside[0] > 0.5 and outside[sink_rows].max() < 0.15,
            f"{outside[0]:.0%} vs {span(outside[sink_rows], '{:.1%}')}",
        ),
        Claim(
            "04b",
            "Output error in the sink layers' heads, mean: raw hashing vs the exact set alone",
            err["raw"][sink_rows].mean() > err["exact only"][sink_rows].mean(),
            f"{err['raw'][sink_rows].mean():.3f} vs {err['exact only'][sink_rows].mean():.3f} "
            f"(raw worse in {int(np.sum(err['raw'][sink_rows] > err['exact only'][sink_rows]))} of "
            f"{err['raw'][sink_rows].size} heads)",
        ),
        Claim(
            "04b",
            f"...centred hashing beats the exact set alone in every head (mean of {len(errors.seeds)} draws)",
            bool(np.all(err["centred"] < err["exact only"])),
            f"error {span((err['exact only'] / err['centred']).ravel(), '{:.1f}x')} smaller",
        ),
        Claim(
            "04b",
            "Layer 2 (no sink): raw hashing already cuts the exact set's error, centred hashing more",
            layer2["raw"] < layer2["exact only"] and layer2["centred"] < layer2["raw"],
            f"exact set {layer2['exact only']:.3f}, raw {layer2['raw']:.3f}, centred {layer2['centred']:.3f}",
        ),
        Claim(
            "04b",
            "...in the sink layers' heads, centred hashing's error is 1.5x to 4x smaller than the exact set's",
            sink_cut.min() > 1.5 and sink_cut.max() < 4,
            span(sink_cut, "{:.1f}x"),
        ),
        Claim(
            "04b",
            f"Answer 4: raw {ANSWER4_RAW} vs centred ({k4}, {l4}), entries scanned (L sum p^K): about equal",
            abs(scan_raw / scan_cen - 1) < 0.2,
            f"{scan_raw:,.0f} vs {scan_cen:,.0f}",
        ),
        Claim(
            "04b",
            "...the centred setting puts more weight on sampled keys, with fewer tables",
            ws4_cen > ws4_raw and l4 < ANSWER4_RAW[1],
            f"{ws4_cen:.0%} vs {ws4_raw:.0%}, L = {l4} vs {ANSWER4_RAW[1]}",
        ),
        Claim(
            "04b",
            f"Sink layers, >= 2 of {L} tables, per layer: raw vs centred (centred over 10x the raw maximum)",
            sink_cen2.min() > 10 * sink_raw2.max(),
            f"{span(sink_raw2, '{:.3%}')} vs {span(sink_cen2, '{:.1%}')}",
        ),
        Claim(
            "04b",
            f"One draw, >= 1 of {L}: about 1 pair in 5 collides centred, about 1 in 100 raw in the sink layers",
            0.15 < sink_cen1.min()
            and sink_cen1.max() < 0.25
            and 0.005 < raw1_layers[sink_rows].min()
            and raw1_layers[sink_rows].max() < 0.02,
            f"centred {span(sink_cen1, '{:.0%}')}, raw sink layers {span(raw1_layers[sink_rows], '{:.1%}')}",
        ),
        Claim(
            "04b",
            "Counted centred >= 2 rate matches the formula within 15%",
            abs(cen2 - f2) < 0.15 * f2,
            f"{cen2:.2%} vs {f2:.2%}",
        ),
        Claim(
            "04b",
            "Raw keys, one draw of hyperplanes: counted >= 1 rate off the formula per layer (sink: by >= 1/3)",
            bool(np.all(inside)) and np.abs(table_off[sink_rows]).min() > 1 / 3,
            ", ".join(f"{x:+.0%}" for x in table_off) + " (inside the fresh draws' range)",
        ),
        Claim(
            "04b",
            f"One draw's >= 1 rate scatters (SD/mean, {draws.n_draws} draws): raw vs centred",
            spread_raw.min() > 2 * spread_cen.max(),
            f"{span(spread_raw, '{:.0%}')} vs {span(spread_cen, '{:.0%}')}",
        ),
        Claim(
            "04b",
            "Pairs do not collide independently: one draw's variance / independent",
            min(x.min() for x in excess.values()) > 2,
            f"raw {span(excess['raw'], '{:.0f}x')}, centred {span(excess['centred'], '{:.0f}x')}",
        ),
        Claim(
            "04b",
            f"Mean over {draws.n_draws} draws matches the formula (>= 1, >= 2; raw, centred; all layers)",
            gaps.max() < 4,
            f"max gap {gaps.max():.1f} SE",
            quotes=(f"{draws.n_draws} draws",),
        ),
        Claim(
            "04b",
            f"Grid K {grid.Ks[0]}-{grid.Ks[-1]}, L {grid.Ls[0]}-{grid.Ls[-1]}: centring raises the >= 2 rate "
            "everywhere",
            bool(np.all(gain > 1)),
            f"{gain.size} cells, {gain.min():.1f}x to {gain.max():.0f}x",
        ),
        Claim(
            "04b",
            f"At K = {wide_K}, L = {wide_L} centred hashing samples most hashed keys (>= 2 tables)",
            wide_cen > 0.5,
            f"{wide_cen:.0%} (raw {wide_raw:.0%})",
        ),
        Claim(
            "04b",
            "...there the gap is smallest; raw keys sampled carry most, not all, of the weight (vs centred)",
            abs(wide_cen / wide_raw - gain.min()) < 1e-9 and wide_raw < 0.5 and wide_ws["raw"] < wide_ws["centred"],
            f"{wide_cen / wide_raw:.1f}x; weight {wide_ws['raw']:.0%} vs {wide_ws['centred']:.2%}",
            quotes=(f"K = {wide_K}, L = {wide_L}",),
        ),
    ]
