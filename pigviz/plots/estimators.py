"""Your estimator on the error-against-budget chart, beside the library's.

:func:`error_budget_figure` takes :func:`pigviz.study.estimators.summary`'s entries (one per
estimator and budget fraction) and draws one line per estimator through its budgets: the
keys it read on average (or the bytes it read, ``x="bytes_share"``) against its mean error,
both on log axes. Library methods keep their colours (:mod:`pigviz.plots.style`); the
estimators named in ``highlight`` are drawn thick and black, so yours stands out.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from pigviz.plots import style

__all__ = ["error_budget_figure", "X_AXES"]

X_AXES = {
    "budget_used": "keys read / keys visible (%, log scale)",
    "bytes_share": "bytes read per step / dense attention's bytes (%, log scale)",
}
_YOURS = ("#000000", "#7B3294", "#1B7837")  # highlighted estimators, in order
_TICKS = [0.5, 1, 2, 5, 10, 20, 50, 100]
_ERROR_TICKS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5]


def error_budget_figure(
    entries,
    *,
    highlight=(),
    x: str = "budget_used",
    labels: dict | None = None,
    title: str = "Error against budget on the shipped heads",
    height: int = 460,
    width: int = 820,
) -> go.Figure:
    """One line per estimator: mean error against keys read (or bytes read), one point per
    budget fraction. Estimators without the ``x`` quantity (no ``bytes_read`` declared) are
    left out of a bytes chart, and the figure says so. Non-positive or non-finite numbers
    are refused (a log axis cannot show them)."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    highlight = (highlight,) if isinstance(highlight, str) else tuple(highlight)
    labels = labels or {}
    series: dict[str, list[dict]] = {}
    for e in entries:
        series.setdefault(e["estimator"], []).append(e)
    missing = [n for n in highlight if n not in series]
    if missing:
        raise ValueError(f"highlight names estimators that are not in the entries: {missing}")
    fig = go.Figure()
    left_out = []
    for name, pts in series.items():
        if any(p[x] is None for p in pts):
            left_out.append(name)
            continue
        pts = sorted(pts, key=lambda p: p["fraction"])
        xs = [100 * p[x] for p in pts]
        ys = [p["error"] for p in pts]
        bad = [v for v in xs + ys if not (math.isfinite(v) and v > 0)]
        if bad:
            raise ValueError(f"{name}: a log axis needs positive finite numbers, got {bad[:3]}")
        mine = name in highlight
        color = _YOURS[highlight.index(name) % len(_YOURS)] if mine else style.method_color(name)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines+markers",
                name=labels.get(name, name),
                line=dict(color=color, width=4 if mine else 1.8, dash="solid" if mine else "dot"),
                marker=dict(size=12 if mine else 8, color=color, symbol="star" if mine else "circle"),
                hovertext=[
                    f"{labels.get(name, name)} at {p['fraction']:.0%}<br>keys read {100 * p['budget_used']:.2f}%"
                    + ("" if p["bytes_share"] is None else f"<br>bytes read {100 * p['bytes_share']:.1f}% of dense")
                    + f"<br>mean error {p['error']:.4f} over {p['rows']} rows"
                    for p in pts
                ],
                hoverinfo="text",
            )
        )
    fig.update_xaxes(title_text=X_AXES[x], type="log", tickvals=_TICKS, ticktext=[f"{t:g}%" for t in _TICKS])
    fig.update_yaxes(
        title_text="mean relative error ||ô − o|| / ||o|| (log scale)",
        type="log",
        tickvals=_ERROR_TICKS,
        ticktext=[f"{t:g}" for t in _ERROR_TICKS],
    )
    if left_out:
        fig.add_annotation(
            text="not drawn (no bytes_read declared): " + ", ".join(labels.get(n, n) for n in left_out),
            xref="paper",
            yref="paper",
            x=0,
            y=1.06,
            showarrow=False,
            font=dict(size=11, color="#555"),
            xanchor="left",
        )
    fig.update_layout(title=title, height=height, width=width, legend=dict(x=1.02, y=1, xanchor="left"), **style.LAYOUT)
    return fig
