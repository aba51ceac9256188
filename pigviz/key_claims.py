"""The headline numbers of notebooks 02 (cone and sink), 03 (centring) and 04 (one real
query's S-curve), each re-derived from the shipped capture. ``pigviz.key_geometry.claims``
hands them to ``pigviz verify``; the notebooks print the same table."""
from __future__ import annotations

import numpy as np

from pigviz import simhash as sh
from pigviz._validate import check_choice
from pigviz.key_geometry import (EXACT_RECENT, SHIFT_TOL_FP32, SHIFT_TOL_FP64, format_bound, cone_width, geometry_table,
                                 shift_invariance, shift_passes, shipped_capture, sink_onset)

__all__ = ["claims"]


def _span(values, fmt="{:.2f}") -> str:
    if len(values) == 0:
        return "none"
    return f"{fmt.format(min(values))} to {fmt.format(max(values))}"


def claims(notebook: str | None = None) -> list:
    """Headline numbers of notebooks 02, 03 and 04 (only ``notebook``'s if given)."""
    makers = {"02": _claims_02, "03": _claims_03, "04": _claims_04}
    if notebook is not None:
        check_choice("notebook", notebook, list(makers))
    cap = shipped_capture()
    return [c for nb, make in makers.items() if notebook in (None, nb) for c in make(cap)]


def _claims_02(cap) -> list:
    from pigviz.claims import Claim

    rows = geometry_table(cap)
    sink_rows = [r for r in rows if r.sink_weight > 0.1]
    baseline = cone_width(np.random.default_rng(0).standard_normal((cap.n_tokens, cap.keys.shape[-1])))
    cones = [r.cone_raw for r in rows]
    qcos = [r.query_cos for r in rows]
    first, per_layer = sink_onset(cap)
    ratios = [r.sink_norm_ratio for r in sink_rows]
    wins = [r.sink_wins for r in sink_rows]
    before = float(per_layer[:first].max()) if first > 0 else None         # None: no layer before the sink
    after = float(per_layer[first:].mean()) if first < len(per_layer) else None   # None: no sink layer
    return [
        Claim("02", "Raw keys form a cone: mean cos to their mean direction (random: ~0)",
              min(cones) > 0.3 and baseline < 0.05, f"{_span(cones)} (random: {baseline:.2f})"),
        Claim("02", "Queries point away from the cone: cos(query, mean key) < 0 in every head", max(qcos) < 0,
              f"{_span(qcos)} ({_span([r.query_angle_deg for r in rows], '{:.0f}')} deg)"),
        Claim("02", "Weight on token 0: ~0 in early layers, large from the first sink layer",
              before is not None and after is not None and before < 0.01 and after > 0.2,
              ("no sink layer" if after is None else f"layer {first} on: {after:.2f}")
              + (" (no layer before it)" if before is None else f" (before: <= {before:.3f})")),
        Claim("02", "In the sink heads the sink key is short: |k0| / median |k|",
              bool(ratios) and max(ratios) < 1, _span(ratios)),
        Claim("02", f"...yet it outscores every key before the last {EXACT_RECENT} (share of queries)",
              bool(wins) and min(wins) > 0.9, f"{np.mean(wins):.1%}" if wins else "no sink head"),
    ]


def _claims_03(cap) -> list:
    from pigviz.claims import Claim
    from pigviz.key_hashing import shipped_collision_grid

    shift = shift_invariance(cap)
    centred = [r.cone_centred for r in geometry_table(cap)]
    grid = shipped_collision_grid()
    K, L = sh.DEFAULT_K, sh.DEFAULT_L
    raw1, raw2 = grid.mean("measured", "raw", K, L, 1), grid.mean("measured", "raw", K, L, 2)
    raw1_layers = grid.per_layer("measured", "raw", K, L, 1)
    cen2, f2 = grid.mean("measured", "centred", K, L, 2), grid.mean("formula", "centred", K, L, 2)
    ws_raw, ws_cen = grid.mean("weight_share", "raw", K, L), grid.mean("weight_share", "centred", K, L)
    gain = grid.gain()
    wide_K, wide_L = grid.Ks[0], grid.Ls[-1]      # the widest buckets on the grid
    wide_cen = grid.mean("measured", "centred", wide_K, wide_L, 2)
    wide_raw = grid.mean("measured", "raw", wide_K, wide_L, 2)
    fp32 = format_bound(shift["fp32"] / shift["scale"], SHIFT_TOL_FP32)
    return [
        Claim("03", "Centring leaves attention unchanged: max |diff| float64 (float32, of largest output)",
              shift_passes(shift),
              f"{format_bound(shift['fp64'], SHIFT_TOL_FP64)} ({fp32})"),
        Claim("03", "Centred keys are no cone: mean cos to their mean direction", max(centred) < 0.05,
              f"<= {max(centred):.3f}"),
        Claim("03", f"Raw keys in the query's bucket, >= 1 / >= 2 of {L} tables (K = {K})", raw2 < 0.01,
              f"{raw1:.2%} / {raw2:.2%}"),
        Claim("03", "Unlike the paper's model (< 0.1%), raw keys hit >= 1 table more often",
              raw1_layers.min() > 0.001, f"{_span(raw1_layers, '{:.2%}')} per layer"),
        Claim("03", f"Centred keys in it, >= 2 of {L} tables: over 10x the raw rate", cen2 > 10 * raw2,
              f"{cen2:.2%}"),
        Claim("03", "Attention weight on the keys sampled (not exact): raw vs centred",
              ws_cen > 0.3 and ws_cen > 3 * ws_raw, f"{ws_raw:.1%} vs {ws_cen:.1%}"),
        Claim("03", "Counted centred >= 2 rate matches the formula within 15%", abs(cen2 - f2) < 0.15 * f2,
              f"{cen2:.2%} vs {f2:.2%}"),
        Claim("03", f"Grid K {grid.Ks[0]}-{grid.Ks[-1]}, L {grid.Ls[0]}-{grid.Ls[-1]}: centring raises the >= 2 rate "
                    "everywhere", bool(np.all(gain > 1)), f"{gain.size} cells, {gain.min():.1f}x to {gain.max():.0f}x"),
        Claim("03", f"At K = {wide_K}, L = {wide_L} centred hashing samples most hashed keys (>= 2 tables)",
              wide_cen > 0.5, f"{wide_cen:.0%} (raw {wide_raw:.0%})"),
    ]


def _claims_04(cap) -> list:
    from pigviz.claims import Claim
    from pigviz.key_hashing import shipped_real_scurve

    curve = shipped_real_scurve()
    cov = curve.coverage()
    gap = abs(curve.counted.mean() - curve.formula.mean())
    se = curve.mean_gap_se()
    best = int(np.argmax(curve.formula))
    return [
        Claim("04", f"One real query: {curve.n_hashings} hashings match the formula key by key (99% CI)",
              cov >= 0.95, f"{cov:.1%} of {len(curve.keys)} keys"),
        Claim("04", "Mean counted inclusion equals the formula's mean (within 4 SE over hashings)",
              gap < 4 * se, f"{curve.counted.mean():.4f} vs {curve.formula.mean():.4f} (SE {se:.4f})"),
        Claim("04", "Real keys fill only the bottom of the S: the closest key is sampled only part of the time",
              curve.formula[best] < 0.9 and 0 < curve.counted[best] < 1,
              f"u = {curve.formula[best]:.2f}, counted {curve.counted[best]:.0%}"),
    ]
