"""Figures for the geometry of real keys: the sink heatmap, cosine distributions, the 2-D key
cloud with hyperplanes, raw-vs-centred collision rates and one real query's S-curve.

Builders take computed data (``pigviz.keys.geometry``, ``key_projection``, ``key_hashing``) and return a
``go.Figure``. Cosines are plain numbers in [-1, 1]; rates are shown in percent.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pigviz.lsh import simhash as sh
from pigviz.plots import style

__all__ = [
    "COLORS",
    "sink_heatmap_figure",
    "cosine_histogram_figure",
    "key_cloud_traces",
    "key_cloud_title",
    "key_cloud_figure",
    "key_cloud_pair_figure",
    "real_scurve_traces",
    "real_scurve_title",
    "real_scurve_figure",
]

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
COLORS = {
    "raw": "#0072B2",
    "centred": "#009E73",
    "query": "#D55E00",
    "sink": "#000000",
    "in_wedge": "#E69F00",
    "out_wedge": "#56B4E9",
    "plane": "#7f7f7f",
    "wedge": "rgba(230, 159, 0, 0.16)",
    "formula": "#000000",
    "counted": "#CC79A7",
    "histogram": "rgba(120, 120, 120, 0.35)",
}
LAYER_COLORS = ["#56B4E9", "#E69F00", "#009E73", "#CC79A7", "#0072B2", "#D55E00"]
_LAYOUT = style.layout(margin=dict(t=80))


def sink_heatmap_figure(
    sink_weight,
    shipped=(),
    selected=None,
    group_size: int = 3,
    norm_ratio=None,
    height: int = 620,
    width: int = 520,
    clickable: bool = False,
) -> go.Figure:
    """Weight on position 0 per (layer, query head). ``shipped``: (layer, head) cells held in
    the shipped capture, outlined; ``selected``: the one the key cloud shows. Trace 0 is the
    heatmap, 1 the shipped outlines, 2 the selection (the widget listens to clicks on 0 and 1),
    3 only the outlines' legend entry (white does not show on a white legend). ``clickable``: the
    figure sits in a widget that answers clicks, so the legend and the hover text invite one (a
    static figure must not: clicking it does nothing)."""
    z = np.asarray(sink_weight, dtype=float)
    n_layers, n_heads = z.shape
    custom = None
    hover = "layer %{y}, head %{x}<br>weight on token 0: %{z:.3f}"
    if norm_ratio is not None:
        custom = np.repeat(np.asarray(norm_ratio, dtype=float), group_size, axis=1)
        hover += "<br>|key 0| / median |key|: %{customdata:.2f}"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(range(n_heads)),
            y=list(range(n_layers)),
            zmin=0,
            zmax=1,
            colorscale="Viridis",
            customdata=custom,
            hovertemplate=hover + "<extra></extra>",
            colorbar=dict(title=dict(text="weight on token 0", side="right"), thickness=14),
        )
    )
    cells = np.array(list(shipped), dtype=float).reshape(-1, 2)
    fig.add_trace(
        go.Scatter(
            x=cells[:, 1],
            y=cells[:, 0],
            mode="markers",
            showlegend=False,
            # smaller than a cell, so a click on a neighbouring cell is not caught by the outline
            marker=dict(symbol="square-open", size=10, color="white", line=dict(width=2)),
            hovertemplate="layer %{y}, head %{x}: shipped"
            + (", click to show its keys" if clickable else "")
            + "<extra></extra>",
        )
    )
    sel = [] if selected is None else [selected]
    fig.add_trace(
        go.Scatter(
            x=[s[1] for s in sel],
            y=[s[0] for s in sel],
            mode="markers",
            name="shown in the key cloud",
            marker=dict(symbol="square-open", size=15, color=COLORS["query"], line=dict(width=3)),
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            name="in the shipped capture" + (" (click one)" if clickable else ""),
            marker=dict(symbol="square-open", size=10, color="#444444", line=dict(width=2)),
        )
    )
    for boundary in range(group_size, n_heads, group_size):
        fig.add_vline(x=boundary - 0.5, line=dict(color="white", width=3))
    for g in range(n_heads // group_size):
        fig.add_annotation(
            x=g * group_size + (group_size - 1) / 2,
            y=n_layers - 0.5,
            yshift=11,
            text=f"KV head {g}",
            showarrow=False,
            font=dict(size=11),
            yanchor="bottom",
        )
    fig.update_layout(
        **dict(_LAYOUT, margin=dict(l=70, r=30, t=110, b=60)),
        height=height,
        width=width,
        title=dict(
            text="Where attention parks: weight on token 0",
            x=0.5,
            subtitle=dict(text="mean over the last 64 queries, every layer and query head"),
        ),
        legend=dict(orientation="h", yanchor="top", y=-0.1, x=0, font=dict(size=11)),
    )
    fig.update_xaxes(
        title_text="query head", tickvals=list(range(n_heads)), showgrid=False, range=[-0.5, n_heads - 0.5]
    )
    fig.update_yaxes(title_text="layer", dtick=2, showgrid=False, range=[-0.5, n_layers - 0.5])
    return fig


def cosine_histogram_figure(
    series,
    title: str,
    x_title: str,
    bins: int = 80,
    subtitle: str | None = None,
    marks=(),
    height: int = 400,
    width: int = 680,
) -> go.Figure:
    """Distributions of cosines as outlines (percent of vectors per bin). ``series``:
    (label, values, colour, dash) tuples; ``marks``: (label, cosine) pairs drawn as
    vertical lines, for single vectors such as the sink key."""
    edges = np.linspace(-1, 1, bins + 1)
    centres = 0.5 * (edges[1:] + edges[:-1])
    fig = go.Figure()
    for label, values, color, dash in series:
        counts = np.histogram(np.clip(values, -1, 1), bins=edges)[0]
        pct = 100.0 * counts / max(1, len(values))
        fig.add_trace(
            go.Scatter(
                x=centres,
                y=pct,
                mode="lines",
                name=label,
                line=dict(color=color, width=2.2, dash=dash, shape="hvh"),
                hovertemplate="cos %{x:.2f}: %{y:.1f}%<extra>" + label + "</extra>",
            )
        )
    for label, x in marks:
        fig.add_vline(
            x=float(x),
            line=dict(color=COLORS["sink"], width=1.5, dash="dot"),
            annotation=dict(text=label, textangle=-90, yanchor="top", font=dict(size=11)),
        )
    fig.update_layout(
        **_LAYOUT,
        height=height,
        width=width,
        title=dict(text=title, x=0.5, subtitle=dict(text=subtitle) if subtitle else None),
        legend=dict(x=0.01, y=0.99, bgcolor="rgba(255,255,255,0.8)"),
    )
    fig.update_xaxes(title_text=x_title, range=[-1, 1])
    fig.update_yaxes(title_text="% of vectors per bin", rangemode="tozero")
    return fig


def key_cloud_traces(cloud, d: int = 64, n_hashed: int | None = None) -> list[dict]:
    """The key cloud's traces as plain dicts, in a fixed order so a widget can update them in
    place: wedge, hyperplanes, keys outside, keys inside, mean key, sink, query."""
    r = cloud.extent
    reach = 1.6 * r  # past the corners, so lines and wedge fill the frame
    start, end = cloud.wedge
    arc = np.linspace(start, end, 60)
    along = np.stack([-cloud.normals[:, 1], cloud.normals[:, 0]], axis=1)  # each line is perpendicular to its normal
    along /= np.maximum(np.hypot(along[:, 0], along[:, 1]), 1e-300)[:, None]
    ends = np.full((len(along), 3, 2), np.nan)
    ends[:, 0], ends[:, 1] = -reach * along, reach * along
    lines = [[None if np.isnan(v) else float(v) for v in ends[:, :, i].ravel()] for i in (0, 1)]
    hover = np.array(
        [f"position {p}<br>cos(query, key) in {d}-d: {c:+.2f}" for p, c in zip(cloud.drawn, cloud.cos_query)],
        dtype=object,
    )
    drawn = f"key ({len(cloud.drawn):,} of {n_hashed:,} drawn)" if n_hashed else "key"
    traces = [
        dict(
            type="scatter",
            x=np.r_[0.0, reach * np.cos(arc), 0.0],
            y=np.r_[0.0, reach * np.sin(arc), 0.0],
            fill="toself",
            fillcolor=COLORS["wedge"],
            line=dict(width=0),
            hoverinfo="skip",
            name="the query's bucket (in the picture)",
        ),
        dict(
            type="scatter",
            x=lines[0],
            y=lines[1],
            mode="lines",
            hoverinfo="skip",
            line=dict(color=COLORS["plane"], width=1.3, dash="dash"),
            name=f"{len(cloud.normals)} hyperplanes (one table)",
        ),
    ]
    for mask, label, color, size in (
        (~cloud.in_wedge, drawn, COLORS["out_wedge"], 4),
        (cloud.in_wedge, "key in the query's wedge", COLORS["in_wedge"], 6),
    ):
        traces.append(
            dict(
                type="scatter",
                x=cloud.xy[mask, 0],
                y=cloud.xy[mask, 1],
                mode="markers",
                name=label,
                marker=dict(color=color, size=size, opacity=0.7),
                hovertext=hover[mask],
                hoverinfo="text",
            )
        )
    tip = 0.85 * r * cloud.query_dir
    traces += [
        dict(
            type="scatter",
            x=[cloud.mean_xy[0]],
            y=[cloud.mean_xy[1]],
            mode="markers",
            name="mean key",
            marker=dict(symbol="x-thin", size=16, line=dict(width=3, color="#444444")),
            hovertemplate="mean key<extra></extra>",
        ),
        dict(
            type="scatter",
            x=[cloud.sink_xy[0]],
            y=[cloud.sink_xy[1]],
            mode="markers",
            name="sink key (token 0)",
            marker=dict(symbol="star", size=17, color=COLORS["sink"], line=dict(color="white", width=1)),
            hovertemplate="sink key (position 0)<extra></extra>",
        ),
        dict(
            type="scatter",
            x=[0, tip[0]],
            y=[0, tip[1]],
            mode="lines+markers",
            name="query (direction)",
            line=dict(color=COLORS["query"], width=3.5),
            hoverinfo="skip",
            marker=dict(symbol="arrow", angleref="previous", size=[0, 18], color=COLORS["query"]),
        ),
    ]
    return traces


def key_cloud_title(cloud, d: int = 64) -> dict:
    return dict(
        text=f"Layer {cloud.layer}, head {cloud.head}: {cloud.variant} keys",
        x=0.5,
        subtitle=dict(
            text=f"2-D projection of {d}-d keys, query at position {cloud.position};<br>"
            "dashed lines: where the hyperplanes cut this plane"
        ),
    )


def key_cloud_figure(cloud, d: int = 64, n_hashed: int | None = None, height: int = 580, width: int = 600) -> go.Figure:
    """The 2-D projection (see ``key_projection.key_cloud``): keys, the sink, the mean key, the
    query's direction, and the lines where the hyperplanes cut the plane."""
    r = cloud.extent
    fig = go.Figure(key_cloud_traces(cloud, d, n_hashed))
    fig.update_layout(
        **dict(_LAYOUT, margin=dict(l=70, r=30, t=105, b=60)),
        height=height,
        width=width,
        title=key_cloud_title(cloud, d),
        legend=dict(orientation="h", yanchor="top", y=-0.13, x=0, font=dict(size=11)),
    )
    fig.update_xaxes(
        range=[-r, r], title_text="along the mean key", zeroline=True, zerolinecolor="#cccccc", constrain="domain"
    )
    fig.update_yaxes(
        range=[-r, r],
        title_text="across it, towards the query",
        zeroline=True,
        zerolinecolor="#cccccc",
        scaleanchor="x",
        scaleratio=1,
        constrain="domain",
    )
    return fig


def key_cloud_pair_figure(
    clouds, d: int = 64, n_hashed: int | None = None, height: int = 560, width: int = 1000
) -> go.Figure:
    """Two key clouds side by side on identical axes (``clouds``: a dict with "raw" and
    "centred", or any two ``KeyCloud`` of the same query): the cone sliding onto the origin."""
    pair = list(clouds.values()) if isinstance(clouds, dict) else list(clouds)
    if len(pair) != 2:
        raise ValueError(f"clouds must hold two key clouds, got {len(pair)}")
    r = max(c.extent for c in pair)
    fig = make_subplots(rows=1, cols=2, subplot_titles=[f"{c.variant} keys" for c in pair], horizontal_spacing=0.08)
    named = set()  # one legend entry per kind of trace, from the first panel that draws any of it
    for col, cloud in enumerate(pair, start=1):
        for trace in key_cloud_traces(cloud, d, n_hashed):
            show = trace["name"] not in named and len(trace["x"]) > 0
            named |= {trace["name"]} if show else set()
            fig.add_trace(dict(trace, showlegend=show, legendgroup=trace["name"]), row=1, col=col)
        axis = "" if col == 1 else str(col)
        fig.update_xaxes(
            range=[-r, r],
            title_text="along the mean key",
            zeroline=True,
            zerolinecolor="#cccccc",
            constrain="domain",
            row=1,
            col=col,
        )
        fig.update_yaxes(
            range=[-r, r],
            title_text="across it, towards the query" if col == 1 else None,
            zeroline=True,
            zerolinecolor="#cccccc",
            scaleanchor=f"x{axis}",
            scaleratio=1,
            constrain="domain",
            row=1,
            col=col,
        )
    first = pair[0]
    fig.update_annotations(yshift=4)  # the subplot titles, clear of the subtitle
    fig.update_layout(
        **dict(_LAYOUT, margin=dict(l=70, r=30, t=120, b=60)),
        height=height,
        width=width,
        title=dict(
            text=f"Layer {first.layer}, head {first.head}: the same keys, raw and centred",
            x=0.5,
            subtitle=dict(
                text=f"2-D projection of {d}-d keys, query at position {first.position}; "
                "dashed lines: where the same hyperplanes cut this plane"
            ),
        ),
        legend=dict(orientation="h", yanchor="top", y=-0.13, x=0, font=dict(size=11)),
    )
    return fig


def real_scurve_traces(curve) -> list[dict]:
    """Plain-dict traces (a widget updates them in place): keys per cosine (bars, right axis),
    the formula, and the counted keys with their 99% intervals."""
    lo_cos, hi_cos = float(curve.cos_all.min()), float(curve.cos_all.max())
    edges = np.linspace(lo_cos, hi_cos, 61)
    counts = np.histogram(curve.cos_all, bins=edges)[0]
    xs = np.linspace(lo_cos, 1.0, 400)  # the whole S, though the keys stop short of cos 1
    lo, hi = curve.interval()
    return [
        dict(
            type="bar",
            x=0.5 * (edges[1:] + edges[:-1]),
            y=counts,
            width=np.diff(edges),
            yaxis="y2",
            name="keys at this cosine",
            marker=dict(color=COLORS["histogram"], line=dict(width=0)),
            opacity=0.6,
            hovertemplate="cos %{x:.2f}: %{y} keys<extra></extra>",
        ),
        dict(
            type="scatter",
            x=xs,
            y=sh.inclusion_probability(sh.collision_probability(xs), curve.K, curve.L, curve.min_hits),
            mode="lines",
            name=f"formula: >= {curve.min_hits} of L",
            line=dict(color=COLORS["formula"], width=2.5),
        ),
        dict(
            type="scatter",
            x=curve.cos,
            y=curve.counted,
            mode="markers",
            name=f"counted over {curve.n_hashings} hashings (99% CI)",
            marker=dict(color=COLORS["counted"], size=6, line=dict(color="black", width=0.4)),
            error_y=dict(
                type="data",
                symmetric=False,
                array=hi - curve.counted,
                arrayminus=curve.counted - lo,
                color="rgba(204, 121, 167, 0.5)",
                thickness=1,
                width=0,
            ),
            customdata=np.stack([curve.keys, curve.formula], axis=1),
            hovertemplate="key at position %{customdata[0]}<br>cos %{x:.3f}: counted %{y:.3f}, "
            "formula %{customdata[1]:.3f}<extra></extra>",
        ),
    ]


def real_scurve_title(curve) -> dict:
    return dict(
        text=f"One real query's keys (K = {curve.K}, L = {curve.L})",
        x=0.5,
        subtitle=dict(
            text=f"layer {curve.layer}, head {curve.head}, query at position "
            f"{curve.position}; {len(curve.cos_all):,} centred keys"
        ),
    )


def real_scurve_figure(curve, height: int = 460, width: int = 720) -> go.Figure:
    """Formula u(cos) as a line, each counted key as a marker with its 99% interval, and how
    many of the query's keys sit at each cosine (grey bars, right axis)."""
    traces = real_scurve_traces(curve)
    fig = go.Figure(traces)
    fig.update_layout(
        **_LAYOUT,
        height=height,
        width=width,
        bargap=0,
        title=real_scurve_title(curve),
        legend=dict(x=0.01, y=0.99, bgcolor="rgba(255,255,255,0.85)"),
        xaxis=dict(title_text="cos(query, centred key)", range=[float(curve.cos_all.min()) - 0.02, 1.0]),
        yaxis=dict(title_text="P(key sampled)", range=[-0.02, 1.02]),
        # the histogram fills the lower part only, so it stays behind the curve as context
        yaxis2=dict(
            title_text="number of keys",
            overlaying="y",
            side="right",
            showgrid=False,
            tickmode="auto",
            range=[0, 2.2 * max(1, int(np.max(traces[0]["y"])))],
        ),
    )
    return fig
