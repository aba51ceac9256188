"""Figures for sampled decoding: quality vs budget, passkey accuracy, per-token budget and
time of one generation, and the decode-step speed table."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pigviz.attention.names import METHOD_NAMES, method_label
from pigviz.plots import style

__all__ = ["quality_figure", "passkey_figure", "generation_figure", "speed_figure", "layer_budget_figure"]

_LAYOUT = style.layout(margin=dict(t=80))


def quality_figure(rows: list[dict], *, title: str = "Teacher-forced quality against dense decoding") -> go.Figure:
    """Two panels over the attention budget (% of cached keys read): mean KL(dense || method)
    on a log axis, and top-1 agreement with dense. One colour per method; every MagicPIG seed
    is a point, the line joins the seed means of each (K, L); baselines ran once per budget."""
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.1,
        subplot_titles=("mean KL to dense (lower is better)", "top-1 agreement with dense"),
    )
    families = list(dict.fromkeys(r.get("variant", r["method"]) for r in rows if r["method"] != "dense"))
    for family in families:
        method = family.split("/")[0]
        sel = sorted((r for r in rows if r.get("variant", r["method"]) == family), key=lambda r: r["budget"])
        name = method_label(family)
        color = style.method_color(method)
        open_marker = "/" in family  # a variant of a method: same colour, hollow marker
        marker = dict(
            color=color,
            size=9,
            symbol="circle-open" if open_marker else "circle",
            line=dict(width=2 if open_marker else 1, color=color if open_marker else "white"),
        )
        hover = [f"K={r['K']} L={r['L']}" + (f", seed {r['seed']}" if "seed" in r else "") for r in sel]
        x = [100 * r["budget"] for r in sel]
        for col, values, fmt in (
            (1, [max(r["kl_mean"], 1e-6) for r in sel], "KL %{customdata:.4f} nats"),
            (2, [100 * r["top1_agreement"] for r in sel], "%{y:.1f}% agree"),
        ):
            seeded = method == "magicpig"
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=values,
                    mode="markers" if seeded else "lines+markers",
                    name=name + (" (each seed; line: mean)" if seeded else ""),
                    legendgroup=name,
                    showlegend=col == 1,
                    marker=marker,
                    text=hover,
                    customdata=[r["kl_mean"] for r in sel],
                    line=dict(color=color, width=2, dash="dot" if open_marker else "solid"),
                    hovertemplate="%{x:.2f}% read, %{text}<br>" + fmt + "<extra>" + name + "</extra>",
                ),
                row=1,
                col=col,
            )
            if not seeded:
                continue
            groups: dict = {}  # the line joins the seed means of each (K, L)
            for r, v in zip(sel, values):
                groups.setdefault((r["K"], r["L"]), []).append((100 * r["budget"], v))
            means = sorted((sum(b for b, _ in g) / len(g), sum(v for _, v in g) / len(g)) for g in groups.values())
            fig.add_trace(
                go.Scatter(
                    x=[m[0] for m in means],
                    y=[m[1] for m in means],
                    mode="lines",
                    name=name,
                    legendgroup=name,
                    showlegend=False,
                    hoverinfo="skip",
                    line=dict(color=color, width=2),
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="attention budget (% of cached keys read)", rangemode="tozero")
    fig.update_yaxes(
        title_text="KL(dense || method) per token (nats)",
        type="log",
        tickvals=[0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3],
        row=1,
        col=1,
    )
    fig.update_yaxes(title_text="next token = dense's argmax (%)", range=[0, 102], row=1, col=2)
    fig.update_layout(title=title, height=480, legend=dict(orientation="h", y=-0.2), **_LAYOUT)
    return fig


def passkey_figure(
    rows: list[dict], *, title: str = "Passkey retrieval: share of trials answered exactly"
) -> go.Figure:
    """Grouped bars: accuracy per context length and method, with 95% Wilson intervals."""
    lengths = sorted({r["length"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig = go.Figure()
    for method in methods:
        sel = {r["length"]: r for r in rows if r["method"] == method}
        acc = [100 * sel[n]["accuracy"] for n in lengths]
        fig.add_trace(
            go.Bar(
                x=[f"{n:,} tokens" for n in lengths],
                y=acc,
                name=method_label(method),
                marker_color=style.method_color(method),
                marker_pattern_shape="/" if "/" in method else "",
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[100 * sel[n]["ci_high"] - a for n, a in zip(lengths, acc)],
                    arrayminus=[a - 100 * sel[n]["ci_low"] for n, a in zip(lengths, acc)],
                    thickness=1.2,
                ),
                text=[f"{sel[n]['correct']}/{sel[n]['n']}" for n in lengths],
                textposition="inside",
                insidetextanchor="start",
                textfont=dict(size=11),
                customdata=[[sel[n]["correct"], sel[n]["n"], 100 * sel[n]["budget"]] for n in lengths],
                hovertemplate="%{x}: %{customdata[0]}/%{customdata[1]} correct, budget %{customdata[2]:.1f}%"
                "<extra>" + method_label(method) + "</extra>",
            )
        )
    # A bar of height 0 cannot hold its count: write it on the axis instead.
    for i, method in enumerate(methods):
        for j, n in enumerate(lengths):
            r = next(x for x in rows if x["method"] == method and x["length"] == n)
            if r["correct"] == 0:
                offset = (i - (len(methods) - 1) / 2) / (len(methods) + 1.5)
                fig.add_annotation(
                    x=j + offset,
                    y=0,
                    text=f"0/{r['n']}",
                    showarrow=False,
                    yanchor="bottom",
                    font=dict(size=11, color=style.method_color(method)),
                )
    fig.update_layout(
        barmode="group",
        title=title,
        xaxis_title="prompt length",
        yaxis=dict(title="trials retrieved (%), 95% CI", range=[0, 105]),
        legend=dict(orientation="h", y=-0.2),
        **_LAYOUT,
    )
    return fig


def generation_figure(results: list[dict], *, title: str = "One generation, token by token") -> go.Figure:
    """Per generated token: attention budget (top) and wall time (bottom) for each result
    (``GenerationResult.as_dict()``). Token 0 comes from the dense prefill and is left out."""
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.1,
        subplot_titles=(
            "keys read per step (% of the cache, mean over sampled layers and heads)",
            "wall time per decode step (ms)",
        ),
    )
    for res in results:
        method = res["attention"]
        steps = list(range(1, len(res["budgets"])))
        name = METHOD_NAMES.get(method, method)
        line = dict(color=style.method_color(method))
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[100 * b for b in res["budgets"][1:]],
                mode="lines+markers",
                name=name,
                legendgroup=name,
                line=line,
                marker=dict(size=5),
                hovertemplate="token %{x}: %{y:.2f}%<extra>" + name + "</extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[1e3 * s for s in res["step_seconds"][1:]],
                mode="lines+markers",
                name=name,
                legendgroup=name,
                showlegend=False,
                line=line,
                marker=dict(size=5),
                hovertemplate="token %{x}: %{y:.0f} ms<extra>" + name + "</extra>",
            ),
            row=2,
            col=1,
        )
    ids = [res["token_ids"] for res in results]
    same = 0
    while len(ids) > 1 and all(len(t) > same for t in ids) and len({t[same] for t in ids}) == 1:
        same += 1
    if len(ids) > 1 and same < min(map(len, ids)):
        for row in (1, 2):
            fig.add_vline(x=same, line=dict(color="#888888", dash="dash", width=1), row=row, col=1)
        fig.add_annotation(
            x=same,
            y=0.55,
            yref="y domain",
            text=f" first token that differs ({same})",
            showarrow=False,
            xanchor="left",
            font=dict(size=11, color="#555555"),
            row=1,
            col=1,
        )
    fig.update_yaxes(title_text="budget (%, log)", type="log", tickvals=[1, 2, 5, 10, 20, 50, 100], row=1, col=1)
    fig.update_yaxes(title_text="ms per token", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="generated token", row=2, col=1)
    fig.update_layout(title=title, height=560, legend=dict(orientation="h", y=-0.15), **_LAYOUT)
    return fig


# In the speed benchmark "dense" is transformers' own attention; the grouped forms are pigviz's.
_SPEED_NAMES = {"dense": "transformers' SDPA", "dense_grouped": "grouped, fp32", "dense_grouped_bf16": "grouped, bf16"}


def speed_figure(rows: list[dict], *, title: str = "Per-token decode time on this machine") -> go.Figure:
    """Stacked bars per (context, method): attention time and the rest of the step (ms).
    ``rows`` hold ``context``, ``method``, ``attention_ms``, ``step_ms``."""
    labels = [
        f"{r['context']:,}<br>{_SPEED_NAMES.get(r['method'], METHOD_NAMES.get(r['method'], r['method']))}" for r in rows
    ]
    rest = [max(r["step_ms"] - r["attention_ms"], 0.0) for r in rows]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[r["attention_ms"] for r in rows],
            name="attention, all layers (colour: method)",
            marker_color=[style.method_color(r["method"]) for r in rows],
            hovertemplate="%{x}: %{y:.1f} ms attention<extra></extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            x=labels,
            y=rest,
            name="rest of the step (weights, norms, MLPs, cache append)",
            marker_color="#DDDDDD",
            hovertemplate="%{x}: %{y:.1f} ms other<extra></extra>",
        )
    )
    fig.update_layout(
        barmode="stack",
        title=title,
        xaxis_title="context tokens, attention (dense three ways: transformers' SDPA, grouped fp32, grouped bf16)",
        yaxis_title="ms per generated token",
        legend=dict(orientation="h", y=-0.25),
        **_LAYOUT,
    )
    return fig


def layer_budget_figure(
    layer_budgets: dict, *, title: str = "Where MagicPIG's budget goes, layer by layer"
) -> go.Figure:
    """Bars: mean share of cached keys read in each sampled layer (``{layer: fraction}``)."""
    layers = sorted(layer_budgets, key=int)
    fig = go.Figure(
        go.Bar(
            x=[int(k) for k in layers],
            y=[100 * layer_budgets[k] for k in layers],
            marker_color=style.method_color("magicpig"),
            hovertemplate="layer %{x}: %{y:.2f}% of keys read<extra></extra>",
        )
    )
    fig.update_layout(
        title=title, xaxis_title="layer (layer 0 is kept dense)", yaxis_title="keys read (% of cache)", **_LAYOUT
    )
    return fig
