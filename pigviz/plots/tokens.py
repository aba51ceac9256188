"""The words each method reads: the text around the positions TopK, MagicPIG and Quest read
for one query, every token shaded by its true attention weight.

:func:`reading_view` takes :func:`pigviz.study.estimators.token_reads`' result and the
capture's tokens (:func:`pigviz.model.tokens.load_tokens`) and returns a :class:`TokenView`:
HTML in JupyterLab and on the static site (a panel per method, and a table of the tokens
that carry the most weight with who read them), a short text summary for nbval and a
terminal. Shading is on a log scale, so that the sink's 0.5 and a word's 0.001 both show.
"""

from __future__ import annotations

import html
import math

import numpy as np

from pigviz.plots import style

__all__ = ["TokenView", "reading_view", "shade", "LOG_FLOOR"]

LOG_FLOOR = 1e-4  # weights at or below this are not shaded
_CONTEXT = 2  # tokens shown on each side of a read run
_SHADE_RGB = (230, 159, 0)  # a light amber: the weight, not a method


def shade(weight: float) -> str:
    """CSS background for a token of true weight ``weight``: transparent at LOG_FLOOR and
    below, strongest at 1, on a log scale (``#RRGGBBAA``, short: a view holds many tokens)."""
    if not (weight > LOG_FLOOR):
        return "transparent"
    level = min(1.0, math.log10(weight / LOG_FLOOR) / -math.log10(LOG_FLOOR))
    r, g, b = _SHADE_RGB
    return f"#{r:02x}{g:02x}{b:02x}{round(255 * (0.08 + 0.8 * level)):02x}"


def _show(token: str) -> str:
    """A token as HTML that keeps its spaces and shows a line break as a visible mark."""
    text = token.replace("\n", "⏎").replace("\t", "⇥")
    return html.escape(text) if text.strip() else html.escape(text).replace(" ", "&nbsp;") or "&nbsp;"


def _runs(read: np.ndarray, n: int, context: int) -> list[tuple[int, int]]:
    """Windows [start, stop) around the read positions, merged where they touch."""
    spans: list[list[int]] = []
    for p in np.sort(read):
        lo, hi = max(0, int(p) - context), min(n, int(p) + context + 1)
        if spans and lo <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], hi)
        else:
            spans.append([lo, hi])
    return [(a, b) for a, b in spans]


class TokenView:
    """What :func:`reading_view` returns: ``_repr_html_`` for the page, ``repr`` a summary."""

    def __init__(self, html_text: str, summary: str):
        self.html, self.summary = html_text, summary

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.summary


def _panel(name: str, label: str, info: dict, weights: np.ndarray, tokens, query: int, color: str) -> str:
    n = len(weights)
    read = np.asarray(info["read"], dtype=np.int64)
    is_read = np.zeros(n, dtype=bool)
    is_read[read] = True
    parts = []
    for i, (a, b) in enumerate(_runs(read, n, _CONTEXT)):
        if i or a > 0:
            parts.append("<span style='color:#999'> … </span>")
        for p in range(a, b):
            border = f";border-bottom:2px solid {color}" if is_read[p] else ""
            if p == query:
                border += ";outline:1px dashed #333"
            parts.append(
                f"<span title='{p}: {weights[p]:.1e}' style='background:{shade(weights[p])}{border}'>"
                f"{_show(tokens[p])}</span>"
            )
    head = (
        f"<div style='margin:0.5em 0 0.2em 0'><b style='color:{color}'>{html.escape(label)}</b>: reads "
        f"{read.size} keys holding <b>{info['weight_read']:.0%}</b> of the true weight; output error "
        f"{info['error']:.3f}</div>"
    )
    body = (
        "<div style='font-family:monospace;font-size:0.85em;line-height:1.7;max-height:14em;overflow-y:auto;"
        f"border:1px solid #ddd;padding:0.4em;white-space:pre-wrap' class='pigviz-token-panel-{html.escape(name)}'>"
        + "".join(parts)
        + "</div>"
    )
    return head + body


def _heaviest(result: dict, tokens, labels: dict, top: int) -> str:
    w = result["weights"]
    order = np.argsort(-w, kind="stable")[:top]
    reads = {m: set(np.asarray(info["read"]).tolist()) for m, info in result["methods"].items()}
    cells = "".join(f"<th style='padding:0 0.6em'>{html.escape(labels.get(m, m))}</th>" for m in reads)
    rows = []
    for p in order:
        marks = "".join(
            f"<td style='text-align:center'>{'✓' if int(p) in reads[m] else '·'}</td>" for m in result["methods"]
        )
        rows.append(
            f"<tr><td style='text-align:right;padding:0 0.6em'>{int(p)}</td>"
            f"<td style='font-family:monospace;background:{shade(w[p])}'>{_show(tokens[p])}</td>"
            f"<td style='text-align:right;padding:0 0.6em'>{w[p]:.3f}</td>{marks}</tr>"
        )
    return (
        f"<table style='border-collapse:collapse;font-size:0.85em;margin-top:0.6em'><caption style='text-align:left'>"
        f"The {top} tokens with the most true weight, and who read them</caption>"
        f"<tr><th>position</th><th>token</th><th>weight</th>{cells}</tr>{''.join(rows)}</table>"
    )


def reading_view(result: dict, tokens, labels: dict | None = None, *, top: int = 10) -> TokenView:
    """The text each method of ``result`` (:func:`pigviz.study.estimators.token_reads`) reads,
    shaded by the true weight: read tokens underlined in the method's colour, the query's own
    token outlined, ``_CONTEXT`` tokens of context around each run of read positions."""
    labels = labels or {}
    n = len(result["weights"])
    if len(tokens) < n:
        raise ValueError(f"tokens must cover the {n} positions the query sees, got {len(tokens)}")
    query = result["position"]
    title = (
        f"Layer {result['layer']}, head {result['head']}, the query at position {query:,} "
        f"(sees {n:,} keys), budget {result['budget']} keys ({result['fraction']:.0%})"
    )
    legend = (
        "<div style='font-size:0.85em;color:#555'>Shade: the true attention weight of each token, log scale "
        f"from {LOG_FLOOR:g} (none) to 1 (strongest). Underlined: read by the method. Dashed box: the query's "
        "own token. Hover a token for its position and weight.</div>"
    )
    panels = [
        _panel(m, labels.get(m, m), info, result["weights"], tokens, query, style.method_color(m))
        for m, info in result["methods"].items()
    ]
    page = (
        f"<div class='pigviz-token-view'><div><b>{html.escape(title)}</b></div>{legend}{''.join(panels)}"
        f"{_heaviest(result, tokens, labels, top)}</div>"
    )
    summary = (
        title
        + "\n"
        + "\n".join(
            f"  {labels.get(m, m)}: {np.asarray(info['read']).size} keys, {info['weight_read']:.0%} of the weight"
            for m, info in result["methods"].items()
        )
    )
    return TokenView(page, summary)
