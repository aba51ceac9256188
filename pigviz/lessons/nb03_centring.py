"""Notebook 03, centring: free for the softmax, decisive for the hash; re-derived from the shipped
capture, and the tables the notebook shows (so its cells carry the idea and this module the
formatting)."""

from __future__ import annotations

import numpy as np

from pigviz._util.fmt import below
from pigviz.keys.geometry import (
    EXACT_RECENT,
    EXACT_SINKS,
    SHIFT_TOL_FP32,
    SHIFT_TOL_FP64,
    VARIANTS,
    geometry_table,
    head_view,
    non_exact_mask,
    shift_invariance,
    shift_passes,
    shipped_capture,
)
from pigviz.keys.hashing import (
    hashed_weight_share,
    shipped_collision_grid,
    shipped_collision_rate_draws,
    shipped_output_errors,
    shipped_scan_formula,
)
from pigviz.keys.projection import all_bucket_shares, key_cloud
from pigviz.lessons.tables import table
from pigviz.lessons.verify import Claim, span
from pigviz.lsh import simhash

__all__ = [
    "ANSWER4_RAW",
    "claims",
    "capture_line",
    "bucket_share_table",
    "collision_table",
    "paper_table",
    "weight_table",
    "error_table",
    "draws_table",
    "closest_centred_cell",
    "span",
    "PROSE_DEFINED",
]

# Numbers the markdown writes that are not measured: MagicPIG's parameters, the model's and the
# capture's fixed facts, a citation, the exercises' test values.
PROSE_DEFINED = {
    "10": "MagicPIG's default K, pigviz.lsh.simhash.DEFAULT_K",
    "150": "MagicPIG's default L, pigviz.lsh.simhash.DEFAULT_L",
    "300": "the largest L of the grid, pigviz.keys.geometry.GRID_L",
    "64": "the head dimension of SmolLM2-135M, and the exact window EXACT_RECENT of 64 positions",
    "2025": "the MagicPIG paper's year (ICLR 2025)",
    "0.1%": "the raw collision rate the MagicPIG paper reports for its model (a citation)",
    "19": "the layer of the head notebooks 02 to 04 draw (layer 19, head 6)",
    "1000": "how far apart the softmax check's rows sit (pigviz/lessons/exercises/nb03.py)",
}

# Answer 4's raw setting: the widest buckets of the grid, with the most tables.
ANSWER4_RAW = (6, 300)
# The head and query notebooks 02 and 03 draw: layer 19, head 6, its last captured query.
PICTURE_HEAD = (19, 6)


def _two_significant(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{float(f'{x:.2g}'):,.0f}"


def closest_centred_cell(grid, raw=ANSWER4_RAW) -> tuple[int, int]:
    """The (K, L) where centred keys are sampled (>= 2 tables) about as often as raw keys at ``raw``."""
    target = grid.mean("measured", "raw", *raw, 2)
    cells = [(abs(grid.mean("measured", "centred", k, l, 2) - target), k, l) for k in grid.Ks for l in grid.Ls]
    _, k, l = min(cells)
    return k, l


def claims() -> list:
    cap = shipped_capture()
    shift = shift_invariance(cap)
    centred = [r.cone_centred for r in geometry_table(cap)]
    grid = shipped_collision_grid()
    K, L = simhash.DEFAULT_K, simhash.DEFAULT_L
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
    fp32 = below(shift["fp32"] / shift["scale"], SHIFT_TOL_FP32)
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
    one = all_bucket_shares(cap)  # the widget's one table: 6 planes, seed 0
    fewer = one["centred"] < one["raw"]
    med = {v: float(np.median(one[v])) for v in VARIANTS}
    pic = {v: key_cloud(head_view(cap, *PICTURE_HEAD), -1, v, n_planes=6) for v in VARIANTS}
    return [
        Claim(
            "03",
            "Centring leaves attention unchanged: max |diff| float64 (float32, of largest output)",
            shift_passes(shift),
            f"{below(shift['fp64'], SHIFT_TOL_FP64)} ({fp32})",
        ),
        Claim(
            "03",
            "Centred keys are no cone: cone tightness (mean cos to their mean direction)",
            max(centred) < 0.05,
            f"<= {max(centred):.3f}",
        ),
        Claim(
            "03",
            f"Raw keys in the query's bucket, >= 1 / >= 2 of {L} tables (K = {K})",
            raw2 < 0.01,
            f"{raw1:.2%} / {raw2:.2%}",
        ),
        Claim(
            "03",
            "Unlike the paper's model (< 0.1%), raw keys hit >= 1 table more often",
            raw1_layers.min() > 0.001,
            f"{span(raw1_layers, '{:.2%}')} per layer",
        ),
        Claim("03", f"Centred keys in it, >= 2 of {L} tables: over 10x the raw rate", cen2 > 10 * raw2, f"{cen2:.2%}"),
        Claim(
            "03",
            "Weight outside the exact set that the sampled keys carry (share of it, not of all weight): raw vs "
            "centred; in the sink layers centred over 10x the raw maximum",
            ws_cen > 0.3 and ws_cen > 3 * ws_raw and ws_sink["centred"].min() > 10 * ws_sink["raw"].max(),
            f"{ws_raw:.1%} vs {ws_cen:.1%}; sink layers {span(ws_sink['raw'], '{:.1%}')} vs "
            f"{span(ws_sink['centred'], '{:.1%}')}",
        ),
        Claim(
            "03",
            "Sink layers: raw >= 2 rate rests on a few dozen (query, key) pairs or fewer",
            raw2_pairs[sink_rows].max() < 100,
            ", ".join(f"{x:.0f}" for x in raw2_pairs[sink_rows]) + f" (layer 2: {raw2_pairs[0]:,.0f})",
        ),
        Claim(
            "03",
            "Attention weight outside each query's exact set (sinks + its last 64): layer 2 vs the sink layers",
            outside[0] > 0.5 and outside[sink_rows].max() < 0.15,
            f"{outside[0]:.0%} vs {span(outside[sink_rows], '{:.1%}')}",
        ),
        Claim(
            "03",
            "Output error in the sink layers' heads, mean: raw hashing vs the exact set alone",
            err["raw"][sink_rows].mean() > err["exact only"][sink_rows].mean(),
            f"{err['raw'][sink_rows].mean():.3f} vs {err['exact only'][sink_rows].mean():.3f} "
            f"(raw worse in {int(np.sum(err['raw'][sink_rows] > err['exact only'][sink_rows]))} of "
            f"{err['raw'][sink_rows].size} heads)",
        ),
        Claim(
            "03",
            f"...centred hashing beats the exact set alone in every head (mean of {len(errors.seeds)} draws)",
            bool(np.all(err["centred"] < err["exact only"])),
            f"error {span((err['exact only'] / err['centred']).ravel(), '{:.1f}x')} smaller",
        ),
        Claim(
            "03",
            "Layer 2 (no sink): raw hashing already cuts the exact set's error, centred hashing more",
            layer2["raw"] < layer2["exact only"] and layer2["centred"] < layer2["raw"],
            f"exact set {layer2['exact only']:.3f}, raw {layer2['raw']:.3f}, centred {layer2['centred']:.3f}",
        ),
        Claim(
            "03",
            "...in the sink layers' heads, centred hashing's error is 1.5x to 4x smaller than the exact set's",
            sink_cut.min() > 1.5 and sink_cut.max() < 4,
            span(sink_cut, "{:.1f}x"),
        ),
        Claim(
            "03",
            f"Answer 4: raw {ANSWER4_RAW} vs centred ({k4}, {l4}), entries scanned (L sum p^K): about equal",
            abs(scan_raw / scan_cen - 1) < 0.2,
            f"{scan_raw:,.0f} vs {scan_cen:,.0f}",
        ),
        Claim(
            "03",
            "...the centred setting puts more weight on sampled keys, with fewer tables",
            ws4_cen > ws4_raw and l4 < ANSWER4_RAW[1],
            f"{ws4_cen:.0%} vs {ws4_raw:.0%}, L = {l4} vs {ANSWER4_RAW[1]}",
        ),
        Claim(
            "03",
            f"Sink layers, >= 2 of {L} tables, per layer: raw vs centred (centred over 10x the raw maximum)",
            sink_cen2.min() > 10 * sink_raw2.max(),
            f"{span(sink_raw2, '{:.3%}')} vs {span(sink_cen2, '{:.1%}')}",
        ),
        Claim(
            "03",
            f"One draw, >= 1 of {L}: about 1 pair in 5 collides centred, about 1 in 100 raw in the sink layers",
            0.15 < sink_cen1.min()
            and sink_cen1.max() < 0.25
            and 0.005 < raw1_layers[sink_rows].min()
            and raw1_layers[sink_rows].max() < 0.02,
            f"centred {span(sink_cen1, '{:.0%}')}, raw sink layers {span(raw1_layers[sink_rows], '{:.1%}')}",
        ),
        Claim(
            "03",
            "Counted centred >= 2 rate matches the formula within 15%",
            abs(cen2 - f2) < 0.15 * f2,
            f"{cen2:.2%} vs {f2:.2%}",
        ),
        Claim(
            "03",
            "Raw keys, one draw of hyperplanes: counted >= 1 rate off the formula per layer (sink: by >= 1/3)",
            bool(np.all(inside)) and np.abs(table_off[sink_rows]).min() > 1 / 3,
            ", ".join(f"{x:+.0%}" for x in table_off) + " (inside the fresh draws' range)",
        ),
        Claim(
            "03",
            f"One draw's >= 1 rate scatters (SD/mean, {draws.n_draws} draws): raw vs centred",
            spread_raw.min() > 2 * spread_cen.max(),
            f"{span(spread_raw, '{:.0%}')} vs {span(spread_cen, '{:.0%}')}",
        ),
        Claim(
            "03",
            "Pairs do not collide independently: one draw's variance / independent",
            min(x.min() for x in excess.values()) > 2,
            f"raw {span(excess['raw'], '{:.0f}x')}, centred {span(excess['centred'], '{:.0f}x')}",
        ),
        Claim(
            "03",
            f"Mean over {draws.n_draws} draws matches the formula (>= 1, >= 2; raw, centred; all layers)",
            gaps.max() < 4,
            f"max gap {gaps.max():.1f} SE",
            quotes=(f"{draws.n_draws} draws",),
        ),
        Claim(
            "03",
            f"Grid K {grid.Ks[0]}-{grid.Ks[-1]}, L {grid.Ls[0]}-{grid.Ls[-1]}: centring raises the >= 2 rate "
            "everywhere",
            bool(np.all(gain > 1)),
            f"{gain.size} cells, {gain.min():.1f}x to {gain.max():.0f}x",
        ),
        Claim(
            "03",
            f"At K = {wide_K}, L = {wide_L} centred hashing samples most hashed keys (>= 2 tables)",
            wide_cen > 0.5,
            f"{wide_cen:.0%} (raw {wide_raw:.0%})",
        ),
        Claim(
            "03",
            "...there the gap is smallest; raw keys sampled carry most, not all, of the weight (vs centred)",
            abs(wide_cen / wide_raw - gain.min()) < 1e-9 and wide_raw < 0.5 and wide_ws["raw"] < wide_ws["centred"],
            f"{wide_cen / wide_raw:.1f}x; weight {wide_ws['raw']:.0%} vs {wide_ws['centred']:.2%}",
            quotes=(f"K = {wide_K}, L = {wide_L}",),
        ),
        Claim(
            "03",
            f"Picture of layer {PICTURE_HEAD[0]}, head {PICTURE_HEAD[1]}: wedge vs real 64-d bucket, raw and centred",
            pic["raw"].share_picture < pic["raw"].share_real
            and pic["centred"].share_picture > pic["centred"].share_real,
            f"raw {pic['raw'].share_picture:.2%} vs {pic['raw'].share_real:.2%}, centred "
            f"{pic['centred'].share_picture:.2%} vs {pic['centred'].share_real:.2%} (either way)",
        ),
        Claim(
            "03",
            "One 6-bit table, every head and query: centred bucket emptier than raw in some pairs",
            0 < fewer.sum() < fewer.size / 4 and abs(med["centred"] * 64 - 1) < 0.5 and med["raw"] * 64 < 0.5,
            f"{fewer.sum()} of {fewer.size}; median share centred {med['centred']:.2%}, raw {med['raw']:.2%} "
            f"(even: {1 / 64:.2%})",
        ),
    ]


# --------------------------------------------------------------------------- what the notebook shows


def capture_line(cap) -> str:
    """The capture in one line, with the number of hashed keys per head."""
    n_hashed = int(non_exact_mask(cap.n_tokens).sum())
    return (
        f"{cap.metadata['model_name']}, {cap.n_tokens:,} tokens, layers {cap.layers}, d = {cap.keys.shape[-1]}; "
        f"hashed keys per head: {n_hashed:,} (all but the first {EXACT_SINKS} and the last {EXACT_RECENT})"
    )


def bucket_share_table(clouds, n_planes: int):
    """Raw against centred: the share of hashed keys in the query's bucket of one table, in d
    dimensions and as the 2-D picture shows it."""
    real, pic = "share the query's bucket (64-d)", "in the query's wedge (picture)"
    return table(
        [{"keys": v, real: c.share_real, pic: c.share_picture} for v, c in clouds.items()],
        formats={real: "{:.2%}", pic: "{:.2%}"},
        caption=f"One table of {n_planes} bits, the picture's hyperplanes; share of the hashed keys",
    )


def collision_table(grid, K: int, L: int):
    """Per layer and on average, raw then centred: % of hashed keys sharing the query's bucket in
    >= 1 and >= 2 tables, counted and by the formula (>= 2 to three decimals: raw rates are tiny)."""
    cols = {
        f">= {m} {w}": ("measured" if w == "counted" else "formula", m) for m in (1, 2) for w in ("counted", "formula")
    }
    rows = []
    for variant in VARIANTS:
        for i, label in [*enumerate(map(str, grid.layers)), (None, "mean")]:
            rows.append({"keys": variant, "layer": label})
            for col, (what, m) in cols.items():
                per = grid.per_layer(what, variant, K, L, m)
                rows[-1][col] = float(per.mean() if i is None else per[i])
    return table(
        rows,
        formats={c: "{:.3%}" if m == 2 else "{:.2%}" for c, (_, m) in cols.items()},
        caption=f"(K, L) = ({K}, {L}): share of the hashed keys that share the query's bucket in >= 1 and >= 2 "
        f"tables; {grid.n_queries} queries per layer, each against the keys before its own window of "
        f"{EXACT_RECENT} (at most {grid.n_keys:,})",
    )


def paper_table(grid, K: int, L: int):
    """Per layer: the raw >= 1 rate against the paper's 0.1%, the number of (query, key) pairs
    behind the raw >= 2 rate, and how many times centring multiplies that rate."""
    raw1, raw2 = (grid.per_layer("measured", "raw", K, L, m) for m in (1, 2))
    cen2 = grid.per_layer("measured", "centred", K, L, 2)
    counted = grid.pairs_hit[0, :, grid.Ks.index(K), grid.Ls.index(L), 1]
    rows = [
        {
            "layer": layer,
            "raw >= 1": r1,
            "vs 0.1%": "above" if r1 > 0.001 else "below",
            "raw >= 2: pairs counted": int(n2),
            "centred / raw, >= 2": _two_significant(c2 / r2) + "x" if r2 > 0 else "no raw pair",
        }
        for layer, r1, r2, c2, n2 in zip(grid.layers, raw1, raw2, cen2, counted)
    ]
    return table(
        rows,
        formats={"raw >= 1": "{:.2%}", "raw >= 2: pairs counted": "{:,}"},
        caption=f"(K, L) = ({K}, {L}); {grid.n_pairs:,} (query, key) pairs per layer ({grid.n_queries} queries, "
        "each against the keys it hashes)",
    )


def weight_table(grid, hashed_share, K: int, L: int):
    """Per layer: the share of all attention weight outside the exact set, and the share of that
    weight on the keys sampled, raw and centred."""
    raw, cen = (grid.per_layer("weight_share", v, K, L) for v in VARIANTS)
    rows = [
        {
            "layer": layer,
            "weight outside the exact set": float(np.mean(hashed_share[i])),
            "of it on sampled keys, raw": float(raw[i]),
            "centred": float(cen[i]),
        }
        for i, layer in enumerate(grid.layers)
    ]
    return table(
        rows,
        formats={c: "{:.1%}" for c in rows[0] if c != "layer"},
        caption=f"(K, L) = ({K}, {L}); mean over the {grid.n_queries} queries of each layer, each with its own exact "
        f"set (the sinks and its last {EXACT_RECENT} positions); one draw of hyperplanes",
    )


def error_table(errors):
    """Per layer: MagicPIG's relative output error with raw and centred keys and the exact set
    alone (mean over heads and seeds), and the keys each reads."""
    errs = {"exact set only": "exact only", "raw keys": "raw", "centred keys": "centred"}
    reads = {"keys read, raw": "raw", "keys read, centred": "centred"}
    rows = [
        {"layer": layer}
        | {col: float(errors.mean_error(m)[i].mean()) for col, m in errs.items()}
        | {col: float(errors.keys_read[m][i].mean()) for col, m in reads.items()}
        for i, layer in enumerate(errors.layers)
    ]
    return table(
        rows,
        formats={c: "{:.3f}" for c in errs} | {c: "{:,.0f}" for c in reads},
        caption="|output - exact| / |exact| for the last query of each head, mean over its "
        f"{len(errors.query_heads[0])} heads and {len(errors.seeds)} draws of hyperplanes; "
        f"(K, L) = ({errors.K}, {errors.L}), exact set {errors.exact} keys",
    )


def draws_table(draws):
    """Going further: per layer and variant, the >= 1 rate by the formula, the mean over the draws
    (and its gap to the formula in standard errors), the range of single draws and their spread."""
    rows = []
    for variant in VARIANTS:
        rates, formula = draws.per_layer(variant, 1), draws.formula_per_layer(variant, 1)
        gap, spread = draws.mean_gap_se(variant, 1), draws.relative_spread(variant, 1)
        rows += [
            {
                "keys": variant,
                "layer": layer,
                "formula": formula[i],
                "mean of draws": rates[i].mean(),
                "gap (SE)": gap[i],
                "lowest draw": rates[i].min(),
                "highest draw": rates[i].max(),
                "spread (SD / mean)": spread[i],
            }
            for i, layer in enumerate(draws.layers)
        ]
    pct = ("formula", "mean of draws", "lowest draw", "highest draw")
    return table(
        rows,
        formats={c: "{:.2%}" for c in pct} | {"gap (SE)": "{:+.1f}", "spread (SD / mean)": "{:.0%}"},
        caption=f"{draws.n_draws} draws per layer, {draws.n_pairs:,} (query, key) pairs ({draws.n_queries} queries, "
        f"a subsample of the keys each hashes); share colliding in >= 1 of {draws.L} tables of {draws.K} bits",
    )
