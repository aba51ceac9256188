"""Notebook 02, the key cone: the numbers it states about a real model's keys, re-derived from the
shipped capture. The notebook computes every table it shows in its own cells, from the capture's
arrays and the learner's functions; the claims here re-derive them independently. The table
builders below (``query_table``, ``sink_key_table``, ``plane_table``, ``capture_summary``) are no
longer shown by the notebook and stay for their tests; ``one_plane_shares`` backs a claim."""

from __future__ import annotations

import numpy as np

from pigviz.keys.geometry import (
    EXACT_RECENT,
    cone_width,
    cos_to_mean_direction,
    cos_with_query,
    geometry_table,
    head_pairs,
    head_view,
    non_exact_mask,
    shipped_capture,
    sink_onset,
    sink_table,
    unit_rows,
)
from pigviz.keys.projection import all_bucket_shares, hyperplanes, key_cloud, picture_cosines, plane_splits
from pigviz.lessons.tables import table
from pigviz.lessons.verify import Claim, span

__all__ = [
    "PICTURE_HEAD",
    "PROSE_DEFINED",
    "capture_summary",
    "query_table",
    "sink_key_table",
    "plane_table",
    "one_plane_shares",
    "claims",
]

# Numbers the markdown writes that are facts of the shipped capture or of the checks, not measurements.
PROSE_DEFINED = {
    "8,192": "tokens in the shipped capture's context (cap.n_tokens)",
    "64": "the head dimension d, the captured queries per head and the exact recent window (all 64)",
    "90": "a right angle: cos < 0 means more than 90 degrees",
    "25": "the long key's length in 02.cos_to_mean_direction's check (tests/lessons/test_prose_010203.py)",
    "19": "the layer of the head the notebook draws, PICTURE_HEAD = (19, 6)",
    "0.1": "the weight on token 0 that defines a sink layer (sink_onset's threshold, the notebook's `first`)",
}

# The head notebook 02 draws (and notebook 03 centres): a sink layer, its last captured query.
PICTURE_HEAD = (19, 6)
N_PLANES = 6


def _picture_view(cap):
    """The head the picture shows: ``PICTURE_HEAD`` if captured, else the first captured head
    (tests run the claims on small synthetic captures)."""
    layer, head = PICTURE_HEAD if PICTURE_HEAD in head_pairs(cap) else head_pairs(cap)[0]
    return head_view(cap, layer, head)


def capture_summary(cap) -> str:
    """What the capture holds, in a few lines: the model, the context, the captured heads."""
    meta = cap.metadata
    positions = cap.query_positions.tolist()
    lines = [
        f"model: {meta['model_name']}, {meta['n_model_layers']} layers, {meta['n_model_heads']} query heads "
        f"sharing {meta['n_model_kv_heads']} KV heads, d = {cap.keys.shape[-1]}",
        f"context: {cap.n_tokens:,} tokens; {len(positions)} queries, at positions {positions[0]}-{positions[-1]}",
    ]
    lines += [
        f"  layer {layer}: KV head {kv[0]} and its query heads {heads}"
        for layer, kv, heads in zip(cap.layers, cap.kv_heads, cap.query_heads)
    ]
    held = ["keys", "values"] + (["the model's outputs"] if cap.outputs is not None else [])
    lines.append(f"held for those heads: queries, {', '.join(held)}; for every layer and head: the weight on token 0")
    return "\n".join(lines)


def query_table(rows):
    """Where each captured head's queries point: cos and angle to the mean key (mean over queries)."""
    return table(
        [
            {"layer": r.layer, "head": r.head, "cos(query, mean key)": r.query_cos, "angle (deg)": r.query_angle_deg}
            for r in rows
        ],
        formats={"cos(query, mean key)": "{:+.3f}", "angle (deg)": "{:.1f}"},
        caption="Mean over the 64 captured queries of each head",
    )


def sink_key_table(rows):
    """The sink per head: its weight, its key's length, and its score against the other keys'."""
    return table(
        [
            {
                "layer": r.layer,
                "head": r.head,
                "weight on k0": r.sink_weight,
                "|k0| / median": r.sink_norm_ratio,
                "cos(q, k0)": r.sink_cos_raw,
                "score k0": r.sink_score,
                "median other": r.median_score,
                "best other": r.best_other_score,
                "k0 wins": r.sink_wins,
            }
            for r in rows
        ],
        formats={
            "weight on k0": "{:.3f}",
            "|k0| / median": "{:.2f}",
            "cos(q, k0)": "{:+.2f}",
            "score k0": "{:+.2f}",
            "median other": "{:+.2f}",
            "best other": "{:+.2f}",
            "k0 wins": "{:.0%}",
        },
        caption=f"Scores q.k/sqrt(d), mean over the captured queries; 'other': keys 1 to n - {EXACT_RECENT + 1}",
    )


def plane_table(splits):
    """Per hyperplane of the picture: the share of hashed keys on the query's side, as the picture
    shows it and in d dimensions, and whether its line crosses the cloud in the picture."""
    crosses = splits.crosses()
    return table(
        [
            {
                "hyperplane": i + 1,
                "query's side, picture": float(p),
                "query's side, 64-d": float(r),
                "line crosses the cloud": "yes" if c else "no",
            }
            for i, (p, r, c) in enumerate(zip(splits.picture, splits.real, crosses))
        ],
        formats={"query's side, picture": "{:.1%}", "query's side, 64-d": "{:.1%}"},
        caption=f"Layer {splits.layer}, head {splits.head}, {splits.variant} keys: share of the hashed keys "
        "on the query's side of each hyperplane",
    )


def one_plane_shares(cap, n_planes: int = 20, query_stride: int = 8, seed: int = 5) -> dict:
    """Answer 5: for ``n_planes`` random hyperplanes, every captured head and every
    ``query_stride``-th captured query, the share of the head's hashed keys on the query's side.
    ``{"raw", "centred"}`` -> ``(heads, planes, queries)``."""
    planes = np.random.default_rng(seed).standard_normal((n_planes, cap.keys.shape[-1]))
    out = {"raw": [], "centred": []}
    for layer, head in head_pairs(cap):
        view = head_view(cap, layer, head)
        q_side = view.queries[::query_stride] @ planes.T >= 0  # (queries, planes)
        for variant in out:
            positive = (view.keys_as(variant)[non_exact_mask(view.n)] @ planes.T >= 0).mean(axis=0)  # (planes,)
            out[variant].append(np.where(q_side, positive, 1 - positive).T)
    return {variant: np.array(x) for variant, x in out.items()}


def _v0_ratio(view) -> float:
    lengths = np.linalg.norm(view.values, axis=1)
    return float(lengths[0] / np.median(lengths))


def _median_deg(cos) -> float:
    return float(np.degrees(np.arccos(np.median(np.clip(cos, -1, 1)))))


def _bucket_fill(view, n_planes: int = N_PLANES, seed: int = 0, top: int = 4) -> dict:
    """The picture's hyperplanes as one SimHash table in d dimensions: buckets the hashed keys
    fill, and the share of them in the ``top`` fullest (no longer printed by the notebook)."""
    planes = hyperplanes(view.keys.shape[-1], n_planes, seed)
    codes = (view.keys[non_exact_mask(view.n)] @ planes.T >= 0) @ (1 << np.arange(n_planes))
    fill = np.bincount(codes, minlength=2**n_planes)
    return {
        "filled": int(np.sum(fill > 0)),
        "buckets": int(fill.size),
        "top": top,
        "top_share": float(np.sort(fill)[-top:].sum() / fill.sum()),
    }


def claims(cap=None) -> list:
    """From the shipped capture, or from ``cap`` (tests plant edge cases in a synthetic one)."""
    cap = cap if cap is not None else shipped_capture()
    rows = geometry_table(cap)
    sink_rows = [r for r in rows if r.sink_weight > 0.1]
    baseline = cone_width(np.random.default_rng(0).standard_normal((cap.n_tokens, cap.keys.shape[-1])))
    cones = [r.cone_raw for r in rows]
    qcos = [r.query_cos for r in rows]
    first, per_layer = sink_onset(cap)
    weights = sink_table(cap)["sink_weight"]
    ratios = [r.sink_norm_ratio for r in sink_rows]
    wins = [r.sink_wins for r in sink_rows]
    before = float(per_layer[:first].max()) if first > 0 else None  # None: no layer before the sink
    before_head = float(weights[:first].max()) if first > 0 else None
    after = float(per_layer[first:].mean()) if first < len(per_layer) else None  # None: no sink layer
    values = [_v0_ratio(head_view(cap, layer, heads[0])) for layer, heads in zip(cap.layers, cap.query_heads)]
    view = _picture_view(cap)
    cos_q = cos_with_query(view, -1)
    w_last = view.attention_weights()[-1]
    splits = plane_splits(view, -1, "raw", N_PLANES)
    crossing = int(splits.crosses().sum())
    cloud = key_cloud(view, -1, "raw", n_planes=N_PLANES)
    angles = {"real": _median_deg(cloud.cos_query), "picture": _median_deg(picture_cosines(cloud))}
    shares = one_plane_shares(cap)
    spread = {v: float(x.std()) for v, x in shares.items()}
    random_keys = np.random.default_rng(0).standard_normal((cap.n_tokens, cap.keys.shape[-1]))
    cone_angles = [
        _median_deg(cos_to_mean_direction(head_view(cap, layer, heads[0]).keys))
        for layer, heads in zip(cap.layers, cap.query_heads)
    ]
    random_angle = _median_deg(cos_to_mean_direction(random_keys))
    last_raw = all_bucket_shares(cap, N_PLANES)["raw"][:, -1]
    where = f"layer {view.layer}, head {view.head}, last query"
    apart = []  # per captured KV head: degrees between the mean direction (unit keys) and the mean key (raw)
    for layer, heads in zip(cap.layers, cap.query_heads):
        kv = head_view(cap, layer, heads[0])
        cos = unit_rows(unit_rows(kv.keys).mean(0)[None])[0] @ unit_rows(kv.mean_key[None])[0]
        apart.append(float(np.degrees(np.arccos(min(1.0, cos)))))
    by_layer = {layer: next(r for r in rows if r.layer == layer) for layer in cap.layers}
    no_sink, sink_layers = by_layer[cap.layers[0]], [by_layer[x] for x in cap.layers[1:]]
    return [
        Claim(
            "02",
            "Mean direction (unit keys) and mean key (raw keys) point almost the same way, every KV head",
            bool(apart) and max(apart) < 5,
            f"{span(apart, '{:.1f}')} deg apart",
        ),
        Claim(
            "02",
            "Raw keys form a cone: tightness, the mean cos to their mean direction (random: ~0)",
            min(cones) > 0.3 and baseline < 0.05,
            f"{span(cones)} (random: {baseline:.2f})",
        ),
        Claim(
            "02",
            "...the median key's angle to the mean direction, per layer (random directions: ~90 deg)",
            max(cone_angles) < 70 and random_angle > 85,
            f"{span(cone_angles, '{:.0f}')} deg (random: {random_angle:.0f})",
        ),
        Claim(
            "02",
            f"Layer {no_sink.layer} (no sink) against the sink layers: looser cone, query less far away (first heads)",
            bool(sink_layers)
            and no_sink.cone_raw < min(r.cone_raw for r in sink_layers)
            and no_sink.query_cos > max(r.query_cos for r in sink_layers),
            f"tightness {no_sink.cone_raw:.2f} vs {span([r.cone_raw for r in sink_layers])}, "
            f"query cos {no_sink.query_cos:+.2f} vs {span([r.query_cos for r in sink_layers], '{:+.2f}')}",
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
            + (
                " (no layer before it)"
                if before is None
                else f" (before: layer means <= {before:.1e}, any head <= {before_head:.1e})"
            ),
        ),
        Claim(
            "02",
            "Token 0's value is about a quarter of the median's, every captured layer (within 25% of 1/4)",
            bool(values) and all(abs(4 * v - 1) <= 0.25 for v in values),
            span(values),
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
        Claim(
            "02",
            f"{where}: keys with a positive cosine with it (the sink among them)",
            int(np.sum(cos_q > 0)) < 0.01 * view.n and cos_q[0] > 0,
            f"{int(np.sum(cos_q > 0))} of {view.n:,}",
        ),
        Claim(
            "02",
            f"{where}: its weight on the sink key, on the last {EXACT_RECENT} keys",
            w_last[0] > 0.3,
            f"{w_last[0]:.3f}, {w_last[-EXACT_RECENT:].sum():.3f}",
        ),
        Claim(
            "02",
            f"Picture of {where}: lines of the {N_PLANES} hyperplanes that cross the raw cloud",
            0 < crossing < N_PLANES and cloud.share_picture < 0.01,
            f"{crossing} of {N_PLANES} (keys in the query's wedge: {cloud.share_picture:.2%})",
        ),
        Claim(
            "02",
            f"...in {cap.keys.shape[-1]}-d each of them has hashed keys on both sides (share on the query's side)",
            bool(np.all((splits.real > 0.01) & (splits.real < 0.99))),
            span(splits.real, "{:.0%}"),
        ),
        Claim(
            "02",
            f"One {N_PLANES}-bit table, raw keys: the last query's bucket, head by head (share of hashed keys)",
            last_raw.min() < 0.001 and last_raw.max() > 1 / 2**N_PLANES,
            f"{span(last_raw, '{:.2%}')} over {last_raw.size} heads (even table: {1 / 2**N_PLANES:.1%})",
        ),
        Claim(
            "02",
            "The picture exaggerates angles: median query-key angle in 64-d vs in the picture",
            angles["picture"] > angles["real"] > 90,
            f"{angles['real']:.1f} vs {angles['picture']:.1f} deg",
        ),
        Claim(
            "02",
            "One random plane: share of hashed keys on the query's side, spread (std) raw vs centred",
            spread["raw"] > 5 * spread["centred"],
            f"{spread['raw']:.0%} vs {spread['centred']:.0%}",
        ),
    ]
