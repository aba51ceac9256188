"""Figures of the error-vs-budget study: the chart itself, the per-layer breakdown, where
(layer, head) MagicPIG loses to TopK, what the sink does, and a small K/L sweep.

Builders take the computed numbers of :mod:`pigviz.study.findings` and return ``go.Figure``.
Budgets are drawn in percent of the keys a query can see; errors are relative output errors
||o_hat - o|| / ||o|| averaged over attention rows.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from pigviz.plots import style

__all__ = [
    "COLORS",
    "SYMBOLS",
    "error_budget_figure",
    "per_layer_figure",
    "head_ratio_figure",
    "sink_figure",
    "kl_sweep_figure",
]

# One colour per method (plots.style); the ablations of MagicPIG get their own.
COLORS = {
    **style.METHOD_COLORS,
    "no_sink": "#D55E00",
    "no_correction": "#56B4E9",
    "first_position": "#7f7f7f",
    "no_window": "#999999",
    "no_exact": "#000000",
}
SYMBOLS = {
    "magicpig": "circle",
    "topk": "square",
    "oracle": "diamond",
    "hybrid": "triangle-up",
    "quest": "cross",
    "streaming": "star",
    "no_sink": "circle-open",
    "no_correction": "x",
    "first_position": "circle-dot",
    "no_window": "diamond-open",
    "no_exact": "circle-open-dot",
    "rank_all": "x-thin-open",
    "mp_exact_top": "circle-x",
    "vattention": "hexagon",
    "sparq": "pentagon",
}
_LAYOUT = style.layout(margin=dict(r=20))
_BUDGET_AXIS = "budget: distinct keys read / keys visible (%, log scale)"
_ERROR_AXIS = "relative error ||ô − o|| / ||o|| (log scale)"
_BUDGET_TICKS = [0.25, 0.5, 1, 2, 4, 8, 16, 32, 64]
_ERROR_TICKS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5]


def _log_axes(fig, x_title=_BUDGET_AXIS, y_title=_ERROR_AXIS):
    """Log axes with a few round ticks (plotly's default labels every minor step)."""
    fig.update_xaxes(
        title_text=x_title, type="log", tickvals=_BUDGET_TICKS, ticktext=[f"{t:g}%" for t in _BUDGET_TICKS]
    )
    fig.update_yaxes(title_text=y_title, type="log", tickvals=_ERROR_TICKS, ticktext=[f"{t:g}" for t in _ERROR_TICKS])


_X_AXES = {
    "budget": _BUDGET_AXIS,
    "bytes_share": "bytes read per step / dense attention's bytes (%, log scale)",
}


def error_budget_figure(
    points: dict[str, list[dict]],
    labels: dict[str, str],
    *,
    title: str,
    x: str = "budget",
    height: int = 480,
    width: int = 820,
) -> go.Figure:
    """One line (or marker) per method: error against budget, error bars = std across seeds.

    ``points``: :func:`pigviz.study.findings.curves` output; ``labels``: method -> legend name.
    ``x="bytes_share"`` draws error against everything a step reads (index, page summaries,
    every score for the oracles) as a share of dense attention's bytes, instead of keys read.
    """
    if x not in _X_AXES:
        raise ValueError(f"x must be one of {', '.join(_X_AXES)}; got {x!r}")
    if x != "budget":
        missing = [m for m, pts in points.items() if any(x not in p for p in pts)]
        if missing:
            raise ValueError(f"these methods' points carry no {x!r} (results from before it was recorded): {missing}")
    x_key = x
    fig = go.Figure()
    for method, pts in points.items():
        if not pts:
            continue
        x = [100 * p[x_key] for p in pts]
        y = [p["error"] for p in pts]
        err = [p["error_std"] for p in pts]
        hover = [
            f"{labels.get(method, method)}<br>{p['label'] + '<br>' if p['label'] else ''}"
            f"budget {100 * p['budget']:.2f}%<br>"
            + (f"bytes read {100 * p['bytes_share']:.1f}% of dense<br>" if "bytes_share" in p else "")
            + f"error {p['error']:.4f}"
            + (f" ± {p['error_std']:.4f} ({p['seeds']} seeds)" if p["seeds"] > 1 else "")
            for p in pts
        ]
        variant = method in ("no_sink", "no_correction", "first_position", "no_window", "no_exact")
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="markers" if len(pts) == 1 or variant else "lines+markers",
                name=labels.get(method, method),
                hovertext=hover,
                hoverinfo="text",
                error_y=dict(type="data", array=err, visible=any(e > 0 for e in err), thickness=1.2),
                line=dict(
                    color=COLORS.get(method, "#444"),
                    width=2.5 if method == "magicpig" else 1.8,
                    dash="dot" if method in ("quest", "rank_all") else "solid",
                ),
                marker=dict(
                    symbol=SYMBOLS.get(method, "circle"), size=11 if variant else 9, color=COLORS.get(method, "#444")
                ),
            )
        )
        if method == "magicpig":
            # (K, L) above-right or below-left of each point, clear of a falling line; neighbours can be close.
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="text",
                    text=[f"({p['setting'][0]}, {p['setting'][1]})" for p in pts],
                    textposition=["bottom left" if i % 2 else "top right" for i in range(len(pts))],
                    showlegend=False,
                    hoverinfo="skip",
                    textfont=dict(size=11, color=COLORS["magicpig"]),
                )
            )
    _log_axes(fig, x_title=_X_AXES[x_key])
    # Quest as its authors run it reads layers 0-1 densely and StreamingLLM only its exact set:
    # those two sit at their own budgets, every other baseline (Quest ranking every page
    # included) at MagicPIG's.
    own = [
        {"quest": "Quest (its authors' rule, layers 0-1 dense)", "streaming": "StreamingLLM"}[m]
        for m, pts in points.items()
        if pts and m in ("quest", "streaming")
    ]
    matched = "; Quest, every page ranked, matched" if points.get("rank_all") and "quest" in points else ""
    fig.add_annotation(
        text="orange labels: MagicPIG's (K, L); "
        + ("matched baselines" if own else "baselines")
        + " read as many keys"
        + (" (not as many bytes)" if x_key != "budget" else "")
        + (f"; {' and '.join(own)} at their own budgets" if own else "")
        + matched,
        xref="paper",
        yref="paper",
        x=0,
        y=1.06,
        showarrow=False,
        font=dict(size=11, color="#555"),
        xanchor="left",
    )
    fig.update_layout(title=title, height=height, width=width, legend=dict(x=1.02, y=1, xanchor="left"), **_LAYOUT)
    return fig


def per_layer_figure(layers, lines: dict[str, tuple], *, title: str, height: int = 430, width: int = 860) -> go.Figure:
    """Mean error per layer. ``lines``: legend name -> (method key for the colour, mean, std)."""
    fig = go.Figure()
    for name, (method, mean, std) in lines.items():
        fig.add_trace(
            go.Scatter(
                x=list(layers),
                y=np.asarray(mean, float),
                name=name,
                mode="lines+markers",
                error_y=dict(type="data", array=np.asarray(std, float), visible=bool(np.any(np.asarray(std) > 0))),
                line=dict(color=COLORS.get(method, "#444"), dash="dash" if method == "no_sink" else "solid"),
                marker=dict(symbol=SYMBOLS.get(method, "circle"), size=7),
            )
        )
    fig.update_xaxes(title_text="layer", dtick=2)
    fig.update_yaxes(
        title_text=_ERROR_AXIS, type="log", tickvals=_ERROR_TICKS, ticktext=[f"{t:g}" for t in _ERROR_TICKS]
    )
    fig.update_layout(title=title, height=height, width=width, legend=dict(orientation="h", y=-0.2), **_LAYOUT)
    return fig


def head_ratio_figure(ratio: np.ndarray, layers, *, title: str, height: int = 560, width: int = 560) -> go.Figure:
    """(layers, heads) heatmap of log2(error MagicPIG / error TopK) at matched budget:
    red where MagicPIG is worse, blue where it is better."""
    z = np.log2(np.asarray(ratio, float))
    # Saturate at 8x either way: a few extreme cells would otherwise wash out the rest.
    bound = float(np.clip(np.nanmax(np.abs(z)), 1.0, 3.0))
    ticks = [t for t in range(-3, 4) if abs(t) <= bound]
    names = {-3: "⅛x", -2: "¼x", -1: "½x", 0: "1x", 1: "2x", 2: "4x", 3: "8x"}
    text = [
        [f"layer {layer}, head {h}<br>MagicPIG / TopK error = {ratio[i][h]:.2f}x" for h in range(z.shape[1])]
        for i, layer in enumerate(layers)
    ]
    fig = go.Figure(
        go.Heatmap(
            z=np.clip(z, -bound, bound),
            x=list(range(z.shape[1])),
            y=list(layers),
            colorscale="RdBu_r",
            zmid=0,
            zmin=-bound,
            zmax=bound,
            hovertext=text,
            hoverinfo="text",
            colorbar=dict(
                title=dict(text="MagicPIG / TopK", side="right"),
                tickvals=ticks,
                ticktext=[("≥" if t == 3 and np.nanmax(z) > 3 else "") + names[t] for t in ticks],
            ),
        )
    )
    fig.update_xaxes(title_text="query head", dtick=1)
    fig.update_yaxes(title_text="layer", dtick=2, autorange="reversed")
    fig.update_layout(title=title, height=height, width=width, **_LAYOUT)
    return fig


def sink_figure(
    sink_weight: np.ndarray, ratio: np.ndarray, layers, *, title: str, height: int = 440, width: int = 700
) -> go.Figure:
    """Per (layer, head): weight on token 0 against how much MagicPIG's error grows when the
    sink leaves the exact set (ratio no-sink / with-sink), coloured by layer."""
    w = np.asarray(sink_weight, float)
    r = np.asarray(ratio, float)
    layer_of = np.repeat(np.asarray(list(layers)), w.shape[1])
    heads = np.tile(np.arange(w.shape[1]), w.shape[0])
    fig = go.Figure(
        go.Scatter(
            x=w.ravel(),
            y=r.ravel(),
            mode="markers",
            marker=dict(
                color=layer_of,
                colorscale="Viridis",
                size=7,
                opacity=0.8,
                colorbar=dict(title=dict(text="layer", side="right")),
            ),
            hovertext=[
                f"layer {la}, head {h}<br>weight on token 0: {a:.2f}<br>error ratio {b:.2f}x"
                for la, h, a, b in zip(layer_of, heads, w.ravel(), r.ravel())
            ],
            hoverinfo="text",
            name="(layer, head)",
        )
    )
    fig.add_hline(y=1, line=dict(color="#777", dash="dash"))
    fig.add_annotation(
        x=1,
        xref="paper",
        xanchor="right",
        y=0,
        yref="y",
        yanchor="top",
        showarrow=False,
        text="no change",
        font=dict(color="#555"),
    )  # log axis: y is log10(1) = 0
    ticks = [1, 1.5, 2, 3, 5, 10, 20, 50]
    fig.update_xaxes(title_text="mean attention weight on token 0 (fraction, last 64 queries)")
    fig.update_yaxes(
        title_text="error without sink / error with sink (log scale)",
        type="log",
        tickvals=ticks,
        ticktext=[f"{t:g}x" for t in ticks],
    )
    fig.update_layout(title=title, height=height, width=width, showlegend=False, **_LAYOUT)
    return fig


def kl_sweep_figure(
    rows: list[dict], topk: list[dict], *, title: str, height: int = 460, width: int = 760
) -> go.Figure:
    """MagicPIG at several (K, L): one line per K through increasing L, TopK for reference.
    ``rows``: dicts with K, L, budget, error; ``topk``: dicts with budget, error."""
    fig = go.Figure()
    palette = ["#0072B2", "#009E73", "#D55E00", "#CC79A7", "#E69F00", "#56B4E9"]
    for i, K in enumerate(sorted({r["K"] for r in rows})):
        pts = sorted((r for r in rows if r["K"] == K), key=lambda r: r["L"])
        fig.add_trace(
            go.Scatter(
                x=[100 * r["budget"] for r in pts],
                y=[r["error"] for r in pts],
                mode="lines+markers+text",
                text=[f"L={r['L']}" for r in pts],
                textposition="top center",
                textfont=dict(size=10),
                name=f"MagicPIG K={K}",
                line=dict(color=palette[i % len(palette)]),
                hovertext=[
                    f"K={K}, L={r['L']}<br>budget {100 * r['budget']:.2f}%<br>error {r['error']:.4f}" for r in pts
                ],
                hoverinfo="text",
            )
        )
    pts = sorted(topk, key=lambda r: r["budget"])
    fig.add_trace(
        go.Scatter(
            x=[100 * r["budget"] for r in pts],
            y=[r["error"] for r in pts],
            mode="lines+markers",
            name="TopK at the same budgets",
            line=dict(color="#000000", dash="dot"),
            marker=dict(symbol="square", size=7),
        )
    )
    _log_axes(fig)
    fig.update_layout(title=title, height=height, width=width, **_LAYOUT)
    return fig
