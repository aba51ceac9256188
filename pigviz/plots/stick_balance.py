"""Figures for the stick-balance toy: sticks with their balance points, and error vs budget."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pigviz.plots import style
from pigviz.toy.stick_balance import ErrorCurves, Estimate, Scenario

__all__ = [
    "METHOD_STYLE",
    "MARKER_ORDER",
    "sticks_figure",
    "sticks_title",
    "marker_updates",
    "error_curves_figure",
    "estimate_spread_figure",
]

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
METHOD_STYLE = {
    "exact": ("truth (every key)", style.METHOD_COLORS["exact"]),
    "topk": ("TopK", style.METHOD_COLORS["topk"]),
    "sampling": ("sampling (oracle)", style.METHOD_COLORS["sampling"]),
    "importance": ("importance sampling", style.METHOD_COLORS["importance"]),
    "hybrid": ("hybrid (oracle)", style.METHOD_COLORS["hybrid"]),
}
STICK_COLOUR = "#8C8C8C"
SINK_COLOUR = "#8C510A"  # brown: vermillion is MagicPIG/importance sampling
MARKER_ORDER = ("exact", "topk", "sampling", "importance", "hybrid")


def _label(method: str) -> str:
    return METHOD_STYLE[method][0]


def _colour(method: str) -> str:
    return METHOD_STYLE[method][1]


def _marker_text(est: Estimate) -> str:
    if est.method == "exact":
        return f"{est.value:.3f}"
    draws = "unlimited draws" if not np.isfinite(est.draws) else f"{est.draws:.0f} draws"
    extra = "" if est.method == "topk" else f", {draws}"
    return f"{est.value:.3f} ({est.keys_read} keys{extra})"


def sticks_title(scenario: Scenario, budget: int | None = None) -> str:
    budget_txt = "" if budget is None else f", budget {budget} of {scenario.n} keys"
    return f"Sticks and balance points: {scenario.name} scenario{budget_txt}"


def marker_updates(estimates: dict) -> list[dict]:
    """Per marker trace (in ``MARKER_ORDER``, present methods only) its new x and label:
    what a widget changes when only the balance points move."""
    return [{"x": [estimates[m].value], "text": [_marker_text(estimates[m])]} for m in MARKER_ORDER if m in estimates]


def sticks_figure(
    scenario: Scenario, estimates: dict | None = None, budget: int | None = None, height: int = 520
) -> go.Figure:
    """Sticks at their values, as tall as their weights; below, one lane per estimator with a
    triangle (the fulcrum) at its balance point. A dotted line marks the true balance point.

    Trace order is fixed so widgets can update by index: 0 sticks, 1 sink, then one marker
    trace per method in ``MARKER_ORDER`` that is present in ``estimates``."""
    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a Scenario, got {type(scenario).__name__}")
    estimates = dict(estimates or {})
    estimates.setdefault(
        "exact", Estimate("exact", scenario.truth, scenario.n, float(scenario.n), np.arange(scenario.n))
    )
    v, w = scenario.values, scenario.weights
    span = float(v.max() - v.min()) or 1.0
    bar_width = span / max(60, 2 * scenario.n)
    is_sink = np.zeros(scenario.n, dtype=bool)
    if scenario.sink_index is not None:
        is_sink[scenario.sink_index] = True

    lanes = [_label(m) for m in MARKER_ORDER if m in estimates]
    lane_share = min(0.3, 0.1 + 0.04 * len(lanes))
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[1 - lane_share, lane_share], vertical_spacing=0.04
    )
    hover = "token %{customdata}<br>value %{x:.3f}<br>weight %{y:.4f}<extra></extra>"
    idx = np.arange(scenario.n)
    fig.add_trace(
        go.Bar(
            x=v[~is_sink],
            y=w[~is_sink],
            width=bar_width,
            customdata=idx[~is_sink],
            marker_color=STICK_COLOUR,
            name="stick (token)",
            hovertemplate=hover,
        ),
        1,
        1,
    )
    fig.add_trace(
        go.Bar(
            x=v[is_sink],
            y=w[is_sink],
            width=bar_width,
            customdata=idx[is_sink],
            marker_color=SINK_COLOUR,
            name="attention sink",
            hovertemplate=hover,
            showlegend=bool(is_sink.any()),
        ),
        1,
        1,
    )
    for method in MARKER_ORDER:
        if method not in estimates:
            continue
        est = estimates[method]
        fig.add_trace(
            go.Scatter(
                **marker_updates({method: est})[0],
                y=[_label(method)],
                mode="markers+text",
                name=_label(method),
                textposition="middle right",
                textfont=dict(size=11, color=_colour(method)),
                marker=dict(symbol="triangle-up", size=14, color=_colour(method), line=dict(width=1, color="white")),
                hovertemplate=f"{_label(method)}: %{{x:.4f}}<extra></extra>",
                cliponaxis=False,
            ),
            2,
            1,
        )
    fig.add_vline(x=scenario.truth, line=dict(color="black", dash="dot", width=1))
    fig.update_layout(
        title=dict(text=sticks_title(scenario, budget), x=0.01),
        height=height,
        bargap=0,
        template=style.LAYOUT["template"],
        margin=dict(l=70, r=30, t=60, b=60),
        legend=dict(orientation="h", yanchor="top", y=-0.14, x=0),
        hovermode="closest",
    )
    fig.update_yaxes(title_text="attention weight (stick height)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(
        categoryorder="array",
        categoryarray=lanes[::-1],
        row=2,
        col=1,
        tickfont=dict(size=10),
        range=[-0.6, len(lanes) - 0.4],
    )
    pad = 0.06 * span
    fig.update_xaxes(range=[float(v.min()) - pad, float(v.max()) + 3 * pad], row=2, col=1)
    fig.update_xaxes(title_text="value (position on the number line)", row=2, col=1)
    return fig


def error_curves_figure(curves: ErrorCurves, budget: int | None = None, height: int = 460) -> go.Figure:
    """Log-log error against budget for each method, with the sigma_w/sqrt(B) reference.

    Errors of exactly (or numerically) zero cannot sit on a log axis; those points are left out.
    Trace order: one per method in ``curves.errors``, then the reference."""
    if not isinstance(curves, ErrorCurves):
        raise TypeError(f"curves must be ErrorCurves (see error_curves), got {type(curves).__name__}")
    b = curves.budgets
    floor = 1e-9 * max(curves.spread, 1e-300)
    fig = go.Figure()
    for method, err in curves.errors.items():
        keep = err > floor
        what = "absolute error" if method == "topk" else "RMS error"
        fig.add_trace(
            go.Scatter(
                x=b[keep],
                y=err[keep],
                mode="lines+markers",
                name=_label(method),
                line=dict(color=_colour(method), width=2),
                marker=dict(size=5),
                hovertemplate=f"{_label(method)}<br>budget %{{x}} keys<br>{what} %{{y:.4f}}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=b,
            y=curves.reference,
            mode="lines",
            name="σ_w/√B (B independent draws)",
            line=dict(color="#555555", dash="dash", width=1.5),
            hovertemplate="reference<br>budget %{x}<br>%{y:.4f}<extra></extra>",
        )
    )
    if budget is not None:
        fig.add_vline(x=budget, line=dict(color="#999999", width=1))
    fig.update_layout(
        title=dict(
            text=f"Error vs budget: {curves.scenario} scenario, {curves.n} keys ({curves.n_seeds} runs per point)",
            x=0.01,
        ),
        height=height,
        template=style.LAYOUT["template"],
        margin=dict(l=70, r=30, t=60, b=90),
        legend=dict(orientation="h", yanchor="top", y=-0.2, x=0),
    )
    powers_of_two = [2**k for k in range(int(np.log2(max(b.max(), 1))) + 1)]
    fig.update_xaxes(type="log", title_text="budget B (distinct keys read)", tickvals=powers_of_two)
    fig.update_yaxes(type="log", title_text="error of the output (value units)", exponentformat="power")
    return fig


def estimate_spread_figure(
    runs: dict, truth: float, budget: int, scenario_name: str = "", height: int = 380
) -> go.Figure:
    """Histograms of many independent runs per method: is each centred on the truth?

    ``runs`` maps a method to its array of estimates (``stick_balance.repeat_estimates``);
    a deterministic method (TopK) shows as one vertical line instead of a histogram."""
    fig = go.Figure()
    for method, values in runs.items():
        values = np.asarray(values, dtype=float)
        values = values[np.isfinite(values)]
        if values.size == 0:
            continue
        if np.ptp(values) == 0:
            fig.add_vline(
                x=float(values[0]),
                line=dict(color=_colour(method), width=3),
                annotation_text=f"{_label(method)} {values[0]:.3f}",
                annotation_position="top",
            )
            continue
        fig.add_trace(
            go.Histogram(
                x=values,
                # named even when it is the only histogram (plotly hides a lone trace's legend)
                name=f"{_label(method)}, {values.size} runs (mean {values.mean():.3f})",
                showlegend=True,
                marker_color=_colour(method),
                opacity=0.6,
                nbinsx=40,
                hovertemplate="estimate %{x}<br>%{y} runs<extra></extra>",
            )
        )
    fig.add_vline(
        x=truth,
        line=dict(color="black", dash="dot", width=2),
        annotation_text=f"truth {truth:.3f}",
        annotation_position="top right",
    )
    where = f" ({scenario_name} scenario)" if scenario_name else ""
    fig.update_layout(
        title=dict(text=f"Where {budget}-key estimates land over many runs{where}", x=0.01),
        barmode="overlay",
        height=height,
        template=style.LAYOUT["template"],
        margin=dict(l=70, r=30, t=60, b=60),
        legend=dict(x=0.99, xanchor="right", y=0.99, bgcolor="rgba(255,255,255,0.8)"),
    )
    fig.update_xaxes(title_text="estimated balance point (value units)")
    fig.update_yaxes(title_text="number of runs")
    return fig
