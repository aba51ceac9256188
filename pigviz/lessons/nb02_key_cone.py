"""Notebook 02, the key cone: the numbers it states about a real model's keys, re-derived from the
shipped capture."""

from __future__ import annotations

import numpy as np

from pigviz.keys.geometry import EXACT_RECENT, cone_width, geometry_table, shipped_capture, sink_onset
from pigviz.lessons.verify import Claim, span

__all__ = ["claims"]


def claims(cap=None) -> list:
    """From the shipped capture, or from ``cap`` (tests plant edge cases in a synthetic one)."""
    cap = cap if cap is not None else shipped_capture()
    rows = geometry_table(cap)
    sink_rows = [r for r in rows if r.sink_weight > 0.1]
    baseline = cone_width(np.random.default_rng(0).standard_normal((cap.n_tokens, cap.keys.shape[-1])))
    cones = [r.cone_raw for r in rows]
    qcos = [r.query_cos for r in rows]
    first, per_layer = sink_onset(cap)
    ratios = [r.sink_norm_ratio for r in sink_rows]
    wins = [r.sink_wins for r in sink_rows]
    before = float(per_layer[:first].max()) if first > 0 else None  # None: no layer before the sink
    after = float(per_layer[first:].mean()) if first < len(per_layer) else None  # None: no sink layer
    return [
        Claim(
            "02",
            "Raw keys form a cone: mean cos to their mean direction (random: ~0)",
            min(cones) > 0.3 and baseline < 0.05,
            f"{span(cones)} (random: {baseline:.2f})",
        ),
        Claim(
            "02",
            "Queries point away from the cone: cos(query, mean key) < 0 in every head",
            max(qcos) < 0,
            f"{span(qcos)} ({span([r.query_angle_deg for r in rows], '{:.0f}')} deg)",
        ),
        Claim(
            "02",
            "Weight on token 0: ~0 in early layers, large from the first sink layer",
            before is not None and after is not None and before < 0.01 and after > 0.2,
            ("no sink layer" if after is None else f"layer {first} on: {after:.2f}")
            + (" (no layer before it)" if before is None else f" (before: <= {before:.3f})"),
        ),
        Claim(
            "02",
            "In the sink heads the sink key is short: |k0| / median |k|",
            bool(ratios) and max(ratios) < 1,
            span(ratios),
        ),
        Claim(
            "02",
            f"...yet it outscores every key before the last {EXACT_RECENT} (share of queries)",
            bool(wins) and min(wins) > 0.9,
            f"{np.mean(wins):.1%}" if wins else "no sink head",
        ),
    ]
