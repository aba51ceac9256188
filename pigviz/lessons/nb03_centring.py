"""Notebook 03, centring: free for the softmax, and what it does to the keys' angles; re-derived
from the shipped capture. Raw against centred keys under MagicPIG's hashing moved to notebook 04b
(``pigviz.lessons.nb04b_sampling``); the table builders below (``collision_table`` ...) are no
longer shown by a notebook, which computes its tables in view, and stay for their tests."""

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
from pigviz.keys.projection import all_bucket_shares, key_cloud
from pigviz.lessons.nb04b_sampling import ANSWER4_RAW, closest_centred_cell
from pigviz.lessons.tables import table
from pigviz.lessons.verify import Claim, span

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
    "64": "the head dimension of SmolLM2-135M, and the exact window EXACT_RECENT of 64 positions",
    "19": "the layer of the head notebooks 02 to 04 draw (layer 19, head 6)",
    "1000": "how far apart the softmax check's rows sit (pigviz/lessons/exercises/nb03.py)",
}

# The head and query notebooks 02 and 03 draw: layer 19, head 6, its last captured query.
PICTURE_HEAD = (19, 6)


def _two_significant(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{float(f'{x:.2g}'):,.0f}"


def claims() -> list:
    """Notebook 03's headline numbers: centring is free for the softmax, and what it does to the cloud."""
    cap = shipped_capture()
    shift = shift_invariance(cap)
    centred = [r.cone_centred for r in geometry_table(cap)]
    fp64 = below(shift["fp64"] / shift["scale"], SHIFT_TOL_FP64)
    fp32 = below(shift["fp32"] / shift["scale"], SHIFT_TOL_FP32)
    one = all_bucket_shares(cap)  # the widget's one table: 6 planes, seed 0
    fewer = one["centred"] < one["raw"]
    med = {v: float(np.median(one[v])) for v in VARIANTS}
    pic = {v: key_cloud(head_view(cap, *PICTURE_HEAD), -1, v, n_planes=6) for v in VARIANTS}
    return [
        Claim(
            "03",
            "Centring leaves attention unchanged: max |diff| over the largest output, float64 (float32)",
            shift_passes(shift) and shift["fp64"] / shift["scale"] < SHIFT_TOL_FP64,
            f"{fp64} ({fp32})",
        ),
        Claim(
            "03",
            "Centred keys are no cone: cone tightness (mean cos to their mean direction)",
            max(centred) < 0.05,
            f"<= {max(centred):.3f}",
        ),
        Claim(
            "03",
            f"Picture of layer {PICTURE_HEAD[0]}, head {PICTURE_HEAD[1]}: the centred wedge holds far more keys than "
            "the real 64-d bucket (raw: both nearly empty)",
            pic["centred"].share_picture > 3 * pic["centred"].share_real
            and max(pic["raw"].share_picture, pic["raw"].share_real) < 0.001,
            f"centred {pic['centred'].share_picture:.2%} vs {pic['centred'].share_real:.2%}, "
            f"raw {pic['raw'].share_picture:.2%} vs {pic['raw'].share_real:.2%}",
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
