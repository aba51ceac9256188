"""Figures for the KV budget: index bill, allocators, break-even, preemption cliff."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pigviz.memory.budget import GIB
from pigviz.plots import style

__all__ = [
    "COLORS",
    "index_bill_figure",
    "kv_vs_context_figure",
    "allocator_figure",
    "prefix_sharing_figure",
    "break_even_context_figure",
    "preemption_figure",
]

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
COLORS = {
    "kv": "#0072B2",
    "tables": "#E69F00",
    "meta": "#CC79A7",
    "held": "#D55E00",
    "logical": "#56B4E9",
    "good": "#009E73",
    "bad": "#D55E00",
    "line": "#333333",
}
_LAYOUT = style.LAYOUT


def index_bill_figure(
    rows: list[dict],
    *,
    highlight: str | None = None,
    title: str = "KV cache vs the LSH index it needs",
    x_title: str = "model",
    note: str | None = None,
) -> go.Figure:
    """Stacked bars per row: KV, table entries, bucket offsets (GiB).

    ``rows`` hold ``label``, ``kv_bytes``, ``table_bytes``, ``bucket_metadata_bytes``;
    the bar whose label equals ``highlight`` gets a dark outline. ``note``, if given, is a
    smaller second line under the title (a footnote to marked labels, say)."""
    labels = [f"<b>{r['label']}</b>" if r["label"] == highlight else r["label"] for r in rows]
    fig = go.Figure()
    parts = (
        ("kv_bytes", "KV cache (keys + values)", COLORS["kv"]),
        ("table_bytes", "LSH table entries", COLORS["tables"]),
        ("bucket_metadata_bytes", "bucket offsets", COLORS["meta"]),
    )
    for key, name, color in parts:
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[r[key] / GIB for r in rows],
                name=name,
                marker_color=color,
                hovertemplate="%{x}<br>" + name + ": %{y:.3g} GiB<extra></extra>",
            )
        )
    totals = [(r["kv_bytes"] + r["table_bytes"] + r["bucket_metadata_bytes"]) / GIB for r in rows]
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=totals,
            mode="text",
            text=[f"{t:.3g}" for t in totals],
            textposition="top center",
            showlegend=False,
            hoverinfo="skip",
        )
    )
    fig.update_layout(
        barmode="stack",
        title=title if not note else f"{title}<br><sup>{note}</sup>",
        xaxis_title=x_title,
        yaxis_title="memory per sequence (GiB)",
        legend=dict(orientation="h", y=-0.3, traceorder="normal"),
        yaxis=dict(range=[0, max(totals) * 1.15 if totals else 1]),
        **_LAYOUT,
    )
    fig.update_layout(margin=dict(b=120))  # room for slanted model names, the axis title and the legend
    return fig


def kv_vs_context_figure(
    curves: dict[str, tuple],
    *,
    reference_gib: dict[str, float] | None = None,
    title: str = "KV cache per sequence grows linearly with context",
) -> go.Figure:
    """``curves``: name -> (contexts, bytes). Log-log axes; optional horizontal references."""
    merged: dict[tuple, list[str]] = {}  # models with identical KV shapes draw one line
    for name, (contexts, nbytes) in curves.items():
        merged.setdefault((tuple(np.asarray(contexts).tolist()), tuple(np.asarray(nbytes).tolist())), []).append(name)
    fig = go.Figure()
    for (contexts, nbytes), names in merged.items():
        name = " = ".join(names)
        fig.add_trace(
            go.Scatter(
                x=np.asarray(contexts),
                y=np.asarray(nbytes) / GIB,
                mode="lines+markers",
                name=name,
                hovertemplate="%{x:,} tokens: %{y:.3g} GiB<extra>" + name + "</extra>",
            )
        )
    all_x = [c for contexts, _ in curves.values() for c in contexts]
    for label, gib in (reference_gib or {}).items():
        fig.add_trace(
            go.Scatter(
                x=[min(all_x), max(all_x)],
                y=[gib, gib],
                mode="lines",
                name=label,
                line=dict(dash="dash", color="#777"),
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title=title,
        xaxis=dict(type="log", title="context (tokens, log scale)"),
        yaxis=dict(type="log", title="KV cache per sequence (GiB, log scale)"),
        **_LAYOUT,
    )
    return fig


def allocator_figure(rows, *, title: str = "Same requests, same KV budget: four allocators") -> go.Figure:
    """Left: admitted batch. Right: physical (held) vs logical KV in GiB. ``rows`` are
    :class:`~pigviz.memory.allocators.Allocation` objects."""
    names = [r.name.replace(", ", "<br>").replace(" + ", "<br>+ ") for r in rows]
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.12,
        subplot_titles=("sequences admitted", "KV held vs KV the sequences need"),
    )
    base = rows[0].batch or 1
    fig.add_trace(
        go.Bar(
            x=names,
            y=[r.batch for r in rows],
            name="batch",
            marker_color=COLORS["good"],
            text=[
                f"{r.batch:,}<br>({r.batch / base:.1f}x)" + (f"<br>{r.overflow} cut off" if r.overflow else "")
                for r in rows
            ],
            textposition="outside",
            cliponaxis=False,
            showlegend=False,
            hovertemplate="%{x}<br>batch %{y:,}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=[r.held_bytes / GIB for r in rows],
            name="held (physical)",
            marker_color=COLORS["held"],
            hovertemplate="held %{y:.1f} GiB<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=[r.logical_bytes / GIB for r in rows],
            name="logical (needed, unshared)",
            marker_color=COLORS["logical"],
            hovertemplate="logical %{y:.1f} GiB<extra></extra>",
        ),
        row=1,
        col=2,
    )
    top = max([r.batch for r in rows] + [1])
    fig.update_yaxes(title_text="sequences in the batch", range=[0, top * 1.25], row=1, col=1)
    fig.update_yaxes(title_text="KV memory (GiB)", row=1, col=2)
    fig.update_xaxes(title_text="allocator", tickfont=dict(size=11))
    fig.update_layout(
        title=title, barmode="group", legend=dict(orientation="h", y=-0.45, x=0.55), height=540, **_LAYOUT
    )
    fig.update_layout(margin=dict(b=170))  # the allocator names run to four lines
    return fig


def prefix_sharing_figure(results: list[dict], *, title: str = "A shared system prompt is stored once") -> go.Figure:
    """Grouped bars per prefix length: KV without sharing vs with refcounted pages (GiB)."""
    x = [f"{r['prefix_tokens']:,}" for r in results]
    fig = go.Figure(
        [
            go.Bar(
                x=x,
                y=[r["naive_bytes"] / GIB for r in results],
                name="each request keeps its own copy",
                marker_color=COLORS["held"],
            ),
            go.Bar(
                x=x,
                y=[r["shared_bytes"] / GIB for r in results],
                name="refcounted shared pages",
                marker_color=COLORS["good"],
                text=[f"-{r['saved_fraction']:.0%}" if r["saved_fraction"] > 0 else "" for r in results],
                textposition="outside",
            ),
        ]
    )
    n = results[0]["n_requests"] if results else 0
    fig.update_layout(
        title=title,
        barmode="group",
        xaxis_title=f"shared prefix (tokens), {n} requests",
        yaxis_title="KV memory (GiB)",
        legend=dict(orientation="h", y=-0.25),
        **_LAYOUT,
    )
    return fig


def break_even_context_figure(
    rows: list[dict], tiers: dict[str, float] | None = None, *, title: str = "The break-even falls as the prefix grows"
) -> go.Figure:
    """Lines: break-even bandwidth (GB/s) against prefix length, one per ``TPn``/label key of
    ``rows`` (dicts with ``context``); dotted horizontal lines: storage tiers (GB/s)."""
    series = [k for k in rows[0] if k not in ("context", "attention_share")]
    x = [r["context"] for r in rows]
    fig = go.Figure()
    palette = [COLORS["kv"], COLORS["tables"], COLORS["good"], COLORS["meta"]]
    for i, key in enumerate(series):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[r[key] for r in rows],
                mode="lines+markers",
                name=f"break-even, {key}",
                line=dict(color=palette[i % len(palette)], width=2.5),
                hovertemplate="%{x:,} tokens: %{y:.2f} GB/s<extra>" + key + "</extra>",
            )
        )
    for name, bw in (tiers or {}).items():
        fig.add_trace(
            go.Scatter(
                x=[min(x), max(x)],
                y=[bw, bw],
                mode="lines",
                name=f"{name}: {bw:g} GB/s",
                line=dict(color="#777", dash="dot"),
                hoverinfo="skip",
            )
        )
        fig.add_annotation(
            x=np.log10(min(x)),
            y=np.log10(bw),
            text=f"{name} ({bw:g} GB/s)",
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font=dict(size=11, color="#555"),
        )
    values = [r[k] for r in rows for k in series] + list((tiers or {}).values())
    ticks = [
        t
        for t in (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
        if min(values) / 2 <= t <= max(values) * 2
    ]
    fig.update_layout(
        title=title,
        xaxis=dict(type="log", title="prefix length (tokens, log scale)"),
        yaxis=dict(type="log", title="bandwidth (GB/s, log scale)", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks]),
        legend=dict(title="a tier above the break-even curve: fetching wins", orientation="v", x=1.02, y=1),
        **_LAYOUT,
    )
    return fig


def preemption_figure(
    sweep: list[dict], *, title: str = "Preemptions against the admission target (simulated)"
) -> go.Figure:
    """Bars: preemptions per run of :func:`~pigviz.memory.allocators.simulate_serving`
    (log axis); line: the mean batch while the backlog lasts. X: the admission target (%)."""
    x = [f"{100 * s['target_occupancy']:g}%" for s in sweep]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(
        go.Bar(
            x=x,
            y=[max(s["preemptions"], 0.5) for s in sweep],
            name="preemptions",
            marker_color=COLORS["bad"],
            text=[f"{s['preemptions']:,}" for s in sweep],
            textposition="outside",
            cliponaxis=False,
            customdata=[[s["preemptions"], s["reprefill_tokens"], s["reprefill_s"]] for s in sweep],
            hovertemplate="target %{x}: %{customdata[0]:,} preemptions, %{customdata[1]:,} tokens "
            "re-prefilled (%{customdata[2]:.1f} s of the replica)<extra></extra>",
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[s["mean_batch"] for s in sweep],
            mode="lines+markers",
            name="mean running batch",
            line=dict(color=COLORS["kv"], width=2.5),
            hovertemplate="target %{x}: %{y:.0f} sequences<extra></extra>",
        ),
        secondary_y=True,
    )
    top = max([s["preemptions"] for s in sweep] + [1])
    fig.update_xaxes(
        title_text="admission target (pages in use + newcomer's prompt ≤ this share of the pool)", type="category"
    )
    decades = [10**k for k in range(int(np.log10(top * 4)) + 1)]
    fig.update_yaxes(
        title_text="preemptions (log scale; 0 drawn at 0.5)",
        type="log",
        range=[np.log10(0.3), np.log10(top * 4)],
        tickvals=decades,
        ticktext=[f"{d:,}" for d in decades],
        secondary_y=False,
    )
    batch_top = max([s["mean_batch"] for s in sweep] + [1])
    fig.update_yaxes(
        title_text="mean running batch (sequences)",
        secondary_y=True,
        showgrid=False,
        range=[0, batch_top * 1.5],
        tickmode="auto",
        nticks=6,
    )
    fig.update_layout(title=title, legend=dict(orientation="h", y=-0.25), **_LAYOUT)
    return fig
