"""Figures for SimHash: the 2-D bucket picture and the per-bit, one-table and L-table curves.

Every builder takes computed data (see ``pigviz.lsh.simhash``) and returns a ``go.Figure``.
Angles are in degrees on every axis; probabilities are plain fractions in [0, 1].
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from pigviz.plots import style

__all__ = [
    "COLORS",
    "plane_figure",
    "one_table_figure",
    "scurve_figure",
]

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
COLORS = {
    "query": "#D55E00",
    "in_bucket": "#E69F00",
    "out_bucket": "#0072B2",
    "plane": "#7f7f7f",
    "wedge": "rgba(230, 159, 0, 0.18)",
    "formula": "#000000",
    "one_table": "#999999",
    "hits1": "#56B4E9",
    "hits2": "#009E73",
    "hitsm": "#CC79A7",
}
_LAYOUT = style.layout(margin=dict(r=20, t=60))


def _angle_axis(fig, **kw):
    fig.update_xaxes(
        title_text="angle between query and key (degrees)", range=[0, 180], tickvals=list(range(0, 181, 30)), **kw
    )


def plane_figure(demo, radius: float = 1.15, height: int = 500, width: int = 460) -> go.Figure:
    """2-D picture of one table: its K hyperplanes as lines, the query's bucket shaded, keys
    coloured by whether they share that bucket; the hover shows hits over all L tables."""
    fig = go.Figure()
    start, end = demo.wedge
    arc = np.linspace(start, end, 60)
    reach = 1.5 * radius  # past the corners, so lines and wedge run to the frame's edge
    fig.add_trace(
        go.Scatter(
            x=np.r_[0.0, reach * np.cos(arc), 0.0],
            y=np.r_[0.0, reach * np.sin(arc), 0.0],
            fill="toself",
            fillcolor=COLORS["wedge"],
            line=dict(width=0),
            hoverinfo="skip",
            name="query's bucket (table 1)",
        )
    )
    xs, ys = [], []
    for nx, ny in demo.normals:
        direction = np.array([-ny, nx]) / np.hypot(nx, ny)  # the line is perpendicular to its normal
        xs += [-reach * direction[0], reach * direction[0], None]
        ys += [-reach * direction[1], reach * direction[1], None]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines",
            line=dict(color=COLORS["plane"], width=1.5, dash="dash"),
            hoverinfo="skip",
            name=f"{demo.K} hyperplanes (table 1)",
        )
    )
    hover = [
        f"hits in {demo.L} tables: {h}<br>sampled (>= {demo.min_hits}): {'yes' if inc else 'no'}"
        for h, inc in zip(demo.hits, demo.included)
    ]
    hover = np.array(hover, dtype=object)
    for mask, label, color in (
        (demo.same_bucket, "key in the query's bucket", COLORS["in_bucket"]),
        (~demo.same_bucket, "key in another bucket", COLORS["out_bucket"]),
    ):
        fig.add_trace(
            go.Scatter(
                x=demo.keys[mask, 0],
                y=demo.keys[mask, 1],
                mode="markers",
                name=label,
                marker=dict(color=color, size=10, line=dict(color="white", width=1)),
                hovertext=hover[mask],
                hoverinfo="text",
            )
        )
    inc = demo.included
    fig.add_trace(
        go.Scatter(
            x=demo.keys[inc, 0],
            y=demo.keys[inc, 1],
            mode="markers",
            hoverinfo="skip",
            name=f"sampled: >= {demo.min_hits} of {demo.L} tables",
            marker=dict(symbol="circle-open", size=17, color="black", line=dict(width=1.5)),
        )
    )
    q = demo.query
    fig.add_trace(
        go.Scatter(
            x=[0, q[0]],
            y=[0, q[1]],
            mode="lines+markers",
            name="query",
            line=dict(color=COLORS["query"], width=3),
            marker=dict(symbol="arrow", angleref="previous", size=[0, 16], color=COLORS["query"]),
        )
    )
    fig.update_layout(
        **_LAYOUT,
        height=height,
        width=width,
        title=dict(text=f"One table of K = {demo.K} bits: the query's bucket", x=0.5),
        legend=dict(orientation="h", yanchor="top", y=-0.12, x=0, font=dict(size=11)),
    )
    fig.update_xaxes(
        range=[-radius, radius], title_text="dimension 1 (arbitrary units)", zeroline=False, constrain="domain"
    )
    fig.update_yaxes(
        range=[-radius, radius],
        title_text="dimension 2 (arbitrary units)",
        zeroline=False,
        scaleanchor="x",
        scaleratio=1,
        constrain="domain",
    )
    return fig


def _mc_trace(mc, name: str, color: str) -> go.Scatter:
    low, high = mc.wilson_interval()
    return go.Scatter(
        x=mc.angle_deg,
        y=mc.freq,
        mode="markers",
        name=name,
        marker=dict(color=color, size=8, symbol="diamond", line=dict(color="black", width=0.5)),
        error_y=dict(
            type="data",
            symmetric=False,
            array=high - mc.freq,
            arrayminus=mc.freq - low,
            color=color,
            thickness=1.5,
            width=4,
        ),
        hovertemplate="%{x:.0f} deg: counted %{y:.3f}<extra>" + name + "</extra>",
    )


def one_table_figure(angle_deg, curves: dict, highlight: int | None = None) -> go.Figure:
    """p^K against angle for several K (``curves`` maps K to the curve)."""
    fig = go.Figure()
    for K, y in curves.items():
        bold = K == highlight
        fig.add_trace(
            go.Scatter(x=angle_deg, y=y, mode="lines", name=f"K = {K}", line=dict(width=3.5 if bold else 1.8))
        )
    fig.update_layout(
        **_LAYOUT,
        height=400,
        width=640,
        colorway=["#56B4E9", "#009E73", "#E69F00", "#D55E00", "#CC79A7", "#0072B2", "#000000"],
        title=dict(text="One table of K bits: a collision needs every bit to agree (p^K)", x=0.5),
        legend=dict(x=0.99, xanchor="right", y=0.99, title_text="bits per table"),
    )
    _angle_axis(fig)
    fig.update_yaxes(title_text="P(same bucket in one table)", range=[-0.02, 1.02])
    return fig


def scurve_figure(
    angle_deg, curves, markers=(), K: int | None = None, L: int | None = None, height: int = 430, width: int = 640
) -> go.Figure:
    """L-table S-curves. ``curves``: (label, y, colour, dash) tuples; ``markers``: (label,
    MonteCarloEstimate, colour) tuples drawn as counted frequencies with 95% intervals.

    The curves may follow different rules (one table, at least 1 of L, at least 2 of L: only the
    last is MagicPIG's sampling rule), so the title and the axis say "found", and the legend
    names each rule."""
    fig = go.Figure()
    for label, y, color, dash in curves:
        fig.add_trace(
            go.Scatter(x=angle_deg, y=y, mode="lines", name=label, line=dict(color=color, width=2.5, dash=dash))
        )
    for label, mc, color in markers:
        fig.add_trace(_mc_trace(mc, label, color))
    where = f" (K = {K}, L = {L})" if K is not None and L is not None else ""
    fig.update_layout(
        **_LAYOUT,
        height=height,
        width=width,
        title=dict(text="How often a key is found, under each rule" + where, x=0.5),
        legend=dict(x=0.99, xanchor="right", y=0.99, bgcolor="rgba(255,255,255,0.8)"),
    )
    _angle_axis(fig)
    fig.update_yaxes(title_text="P(key found)", range=[-0.02, 1.02])
    return fig
