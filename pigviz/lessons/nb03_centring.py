"""Notebook 03, centring: free for the softmax, decisive for the hash; re-derived from the shipped
capture."""

from __future__ import annotations

import numpy as np

from pigviz._util.fmt import below
from pigviz.keys.geometry import (
    SHIFT_TOL_FP32,
    SHIFT_TOL_FP64,
    geometry_table,
    shift_invariance,
    shift_passes,
    shipped_capture,
)
from pigviz.keys.hashing import shipped_collision_grid, shipped_collision_rate_draws
from pigviz.lessons.verify import Claim, span
from pigviz.lsh import simhash

__all__ = ["claims"]


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
    excess = {}
    for v in ("raw", "centred"):
        f = draws.formula_per_layer(v, 1)
        independent = np.sqrt(f * (1 - f) / (draws.n_queries * draws.n_keys)) / f
        excess[v] = (draws.relative_spread(v, 1) / independent) ** 2
    return [
        Claim(
            "03",
            "Centring leaves attention unchanged: max |diff| float64 (float32, of largest output)",
            shift_passes(shift),
            f"{below(shift['fp64'], SHIFT_TOL_FP64)} ({fp32})",
        ),
        Claim(
            "03",
            "Centred keys are no cone: mean cos to their mean direction",
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
            "Attention weight on the keys sampled (not exact): raw vs centred",
            ws_cen > 0.3 and ws_cen > 3 * ws_raw,
            f"{ws_raw:.1%} vs {ws_cen:.1%}",
        ),
        Claim(
            "03",
            "Counted centred >= 2 rate matches the formula within 15%",
            abs(cen2 - f2) < 0.15 * f2,
            f"{cen2:.2%} vs {f2:.2%}",
        ),
        Claim(
            "03",
            "Raw keys, one draw of hyperplanes: counted >= 1 rate off the formula per layer",
            bool(np.all(inside)) and np.abs(table_off).max() > 0.2,
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
    ]
