"""Pictures of the method: one MagicPIG decode step, and where MagicPIG runs each part.

:func:`decode_step_diagram` draws one decode step of one attention head from its data, read
top to bottom: the KV cache (sinks | indexed | recent window and buffer), the query hashed into L tables
and each key's bucket there, each key's hit count and the keys it samples with their
inclusion probability u, and the one softmax (exact scores, sampled scores corrected by
-log u) that weights the values. :func:`toy_decode_step` computes that data for a small
seeded toy with :mod:`pigviz.lsh.reference`, so the default picture is a true step.

:func:`placement_diagram` draws MagicPIG's CPU/GPU split (``placement="cpu_offload"``,
:mod:`pigviz.decode.offload`): what lives on each side and what crosses per step.

Both figures use the shared layout of :mod:`pigviz.plots.style` (drawn on white, which the
site keeps in dark mode). Every fill carries its own text colour, so the boxes read on any
background; free text takes the template's font colour. Coordinates: x runs over token slots
(the placement figure: 0 to 1), y is in pixels of the plot area, 0 at the top, going down,
so rows keep their height at any width; only the width of a slot changes. Text keeps its
size, so the number of token slots sets the narrowest width that reads: the toy's 24 read on
a 400 px phone page, up to ``MAX_N`` = 48 at a notebook's 900 px.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_array, check_float, check_int
from pigviz.lsh.reference import LOG_U_FLOOR, simhash_codes
from pigviz.lsh.simhash import log_inclusion_probability
from pigviz.plots import style

__all__ = ["toy_decode_step", "decode_step_diagram", "placement_diagram", "MAX_N", "MAX_K_DRAWN", "MAX_L_DRAWN"]

MAX_N = 48  # token slots: more would be too narrow to read on a phone
MAX_K_DRAWN = 4  # a table of 2^K buckets: 16 at most
MAX_L_DRAWN = 8  # tables drawn

# Colours. Each fill has the text colour that reads on it, whatever the page behind it.
SAMPLED = style.method_color("magicpig")  # sampled keys, q's bucket, the sampled part
EXACT_FILL = "#666666"  # the exact set: "exact" is black in line plots; a fill of black vanishes on dark pages
LIT = "#F2B48A"  # a light vermillion: a key in q's bucket of one table
PALE = "#DADADA"  # an indexed key not sampled, a bucket q is not in
DARK_TEXT = "#1A1A1A"  # on PALE, LIT, SAMPLED and BOX fills
BOX = "#F0F0F0"  # a box of the placement figure
LINE = "#8C8C8C"  # brackets, arrows and outlines: mid grey reads on white and on black
FONT = 12  # no text below 12 px
HEAD = 13


# --------------------------------------------------------------------------- the data


def toy_decode_step(
    n: int = 24,
    K: int = 3,
    L: int = 4,
    sinks: int = 2,
    recent: int = 4,
    *,
    d: int = 16,
    min_hits: int = DEFAULTS.min_hits,
    seed=18,
) -> dict:
    """A small true decode step, as the keyword arguments of :func:`decode_step_diagram`.

    Random keys (d dims) of which a few point near the query, as real heavy hitters do;
    hyperplanes (d, K*L); then exactly :func:`pigviz.lsh.reference.magicpig_reference`'s
    steps: centre on the sampleable keys' mean, hash keys and query with
    :func:`~pigviz.lsh.reference.simhash_codes`, count hits, sample the keys outside the exact
    set with at least ``min_hits`` hits, u from each one's angle to the query, scores q.k/sqrt(d).

    Returns ``dict(key_buckets (L, n) int64, query_buckets (L,) int64, K, sinks, recent,
    u (sampled,) float64 in key order, scores (n,) float64, min_hits)``."""
    n = check_int("n", n, 2, MAX_N)
    K = check_int("K", K, 1, MAX_K_DRAWN)
    L = check_int("L", L, 1, MAX_L_DRAWN)
    sinks, recent = _check_exact(n, sinks, recent)
    min_hits = check_int("min_hits", min_hits, 1, L)
    q, keys, planes = _toy_vectors(n, d, K, L, sinks, recent, seed)
    centred = keys - keys[sinks : n - recent].mean(axis=0)
    key_buckets = simhash_codes(centred, planes, K, L).T
    query_buckets = simhash_codes(q, planes, K, L)
    hits = _hits(key_buckets, query_buckets, sinks, recent)
    sampled = np.flatnonzero(hits >= min_hits)
    c = centred[sampled]
    norms = np.linalg.norm(c, axis=1) * np.linalg.norm(q)
    cos = np.divide(c @ q, norms, out=np.zeros(sampled.size), where=norms > 0)
    p = 1.0 - np.arccos(np.clip(cos, -1.0, 1.0)) / np.pi
    log_u = np.maximum(log_inclusion_probability(p, K, L, min_hits), LOG_U_FLOOR)
    return dict(
        key_buckets=key_buckets,
        query_buckets=query_buckets,
        K=K,
        sinks=sinks,
        recent=recent,
        u=np.exp(log_u),
        scores=keys @ q / math.sqrt(d),
        min_hits=min_hits,
    )


def _toy_vectors(n: int, d: int, K: int, L: int, sinks: int, recent: int, seed):
    """The toy's query (d,), keys (n, d) and hyperplanes (d, K*L)."""
    d = check_int("d", d, 2)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(d)
    keys = rng.standard_normal((n, d))
    # A few keys close to q: the heavy hitters MagicPIG should sample.
    near = rng.choice(np.arange(sinks, max(sinks + 1, n - recent)), size=max(1, n // 8), replace=False)
    toward_q = q / np.linalg.norm(q) * math.sqrt(d)
    keys[near] = 0.9 * toward_q + 0.6 * keys[near]
    if sinks:
        keys[0] = toward_q + 0.3 * keys[0]  # the attention sink: a large score, read exactly
    return q, keys, rng.standard_normal((d, K * L))


def _hits(key_buckets, query_buckets, sinks: int, recent: int) -> np.ndarray:
    """Per key, the tables where it shares the query's bucket; 0 for the exact set (never sampled)."""
    hits = (key_buckets == query_buckets[:, None]).sum(axis=0)
    hits[:sinks] = 0
    hits[key_buckets.shape[1] - recent :] = 0
    return hits


def _check_exact(n: int, sinks, recent) -> tuple[int, int]:
    """``sinks`` and ``recent`` as ints that leave at least one key to sample, as the reference."""
    sinks = check_int("sinks", sinks, 0)
    recent = check_int("recent", recent, 0)
    if not 1 <= sinks + recent <= n - 1:
        raise ValueError(f"sinks + recent must be in [1, n - 1] = [1, {n - 1}], got sinks={sinks}, recent={recent}")
    return sinks, recent


def _int_array(name: str, value, ndim: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be an array of integers (bucket ids), got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    return arr.astype(np.int64)


def _checked_step(key_buckets, query_buckets, K, sinks, recent, u, scores, min_hits):
    """The step's data as arrays and ints, or a ValueError/TypeError naming the bad argument."""
    key_buckets = _int_array("key_buckets", key_buckets, 2)
    L, n = key_buckets.shape
    check_int("L (the rows of key_buckets)", L, 1, MAX_L_DRAWN)
    check_int("n (the columns of key_buckets)", n, 2, MAX_N)
    K = check_int("K", K, 1, MAX_K_DRAWN)
    query_buckets = _int_array("query_buckets", query_buckets, 1)
    if query_buckets.shape != (L,):
        raise ValueError(
            f"query_buckets must have shape (L,) = ({L},) like key_buckets' rows, got {query_buckets.shape}"
        )
    if query_buckets.min() < 0 or query_buckets.max() >= 2**K:
        raise ValueError(f"query_buckets must hold bucket ids in [0, 2^K - 1] = [0, {2**K - 1}]")
    sinks, recent = _check_exact(n, sinks, recent)
    indexed = key_buckets[:, sinks : n - recent]
    if indexed.min() < 0 or indexed.max() >= 2**K:
        raise ValueError(f"key_buckets must hold bucket ids in [0, 2^K - 1] = [0, {2**K - 1}] for the indexed keys")
    min_hits = check_int("min_hits", min_hits, 1, L)
    sampled = np.flatnonzero(_hits(key_buckets, query_buckets, sinks, recent) >= min_hits)
    if u is not None:
        u = check_array("u", u, ndim=1, min_len=0)
        if u.shape != sampled.shape:
            raise ValueError(
                f"u must hold one inclusion probability per sampled key ({sampled.size}), got shape {u.shape}"
            )
        if u.size and (u.min() <= 0.0 or u.max() > 1.0):
            raise ValueError("u must be in (0, 1]: it is each sampled key's inclusion probability")
    if scores is not None:
        scores = check_array("scores", scores, ndim=1)
        if scores.shape != (n,):
            raise ValueError(f"scores must have shape (n,) = ({n},), one q.k/sqrt(d) per key, got {scores.shape}")
        if u is None:
            raise ValueError("scores needs u: the sampled keys' scores are corrected by -log u")
    return key_buckets, query_buckets, K, sinks, recent, u, scores, min_hits, sampled


# --------------------------------------------------------------------------- drawing helpers


class _Canvas:
    """Collects the shapes, text and hover points of a diagram, then makes the figure."""

    def __init__(self):
        self.shapes: list[dict] = []
        self.annotations: list[dict] = []
        self.traces: list[go.Scatter] = []

    def box(self, x0, x1, y0, y1, fill, name, line=None, width=1, dash=None):
        """A rectangle from (x0, y0) to (x1, y1); ``name`` tags it (tests count by name)."""
        self.shapes.append(
            dict(
                type="rect",
                x0=x0,
                x1=x1,
                y0=y0,
                y1=y1,
                fillcolor=fill,
                name=name,
                line=dict(color=line or "rgba(0,0,0,0)", width=width if line else 0, dash=dash),
                layer="below",
            )
        )

    def line(self, x0, y0, x1, y1, color=LINE, width=1.5):
        self.shapes.append(dict(type="line", x0=x0, y0=y0, x1=x1, y1=y1, line=dict(color=color, width=width)))

    def text(self, x, y, text, size=FONT, color=None, xanchor="center", yanchor="middle", xref="x", **extra):
        """Free text; ``color`` None takes the template's font colour (readable on its page)."""
        font = dict(size=size) if color is None else dict(size=size, color=color)
        self.annotations.append(
            dict(x=x, y=y, text=text, font=font, showarrow=False, xanchor=xanchor, yanchor=yanchor, xref=xref, **extra)
        )

    def arrow(self, x0, y0, x1, y1, color=LINE, width=2, size=1.2, **extra):
        """An arrow from (x0, y0) to (x1, y1), in data coordinates."""
        self.annotations.append(
            dict(
                x=x1,
                y=y1,
                ax=x0,
                ay=y0,
                xref="x",
                yref="y",
                axref="x",
                ayref="y",
                text="",
                showarrow=True,
                arrowhead=2,
                arrowsize=size,
                arrowwidth=width,
                arrowcolor=color,
                **extra,
            )
        )

    def labels(self, xs, y, texts, colors, name):
        """One text trace: ``texts[i]`` at (xs[i], y), in ``colors[i]``."""
        self.traces.append(
            go.Scatter(
                x=list(xs),
                y=[y] * len(xs),
                text=list(texts),
                mode="text",
                textfont=dict(size=FONT, color=list(colors)),
                hoverinfo="skip",
                showlegend=False,
                name=name,
            )
        )

    def hover(self, xs, ys, texts, name):
        """Invisible points that show ``texts`` on hover."""
        self.traces.append(
            go.Scatter(
                x=list(xs),
                y=list(ys),
                hovertext=list(texts),
                hoverinfo="text",
                mode="markers",
                marker=dict(size=14, opacity=0),
                showlegend=False,
                name=name,
            )
        )

    def figure(self, x_range, bottom, title, margin_top=46) -> go.Figure:
        fig = go.Figure(self.traces)
        hidden = dict(visible=False, fixedrange=True)
        fig.update_layout(
            **style.layout(margin=dict(l=8, r=8, t=margin_top, b=8)),
            title=dict(text=title, x=0.01, xanchor="left", font=dict(size=15)),
            shapes=self.shapes,
            annotations=self.annotations,
            xaxis=dict(range=list(x_range), **hidden),
            yaxis=dict(range=[bottom, 0], **hidden),
            height=round(-bottom) + margin_top + 8,
            showlegend=False,
            dragmode=False,
            hoverlabel=dict(font_size=FONT),
        )
        return fig


def _fmt_u(u: float) -> str:
    return f"{u:.2f}" if u >= 0.01 else f"{u:.0e}"


# --------------------------------------------------------------------------- one decode step


def decode_step_diagram(
    key_buckets=None,
    query_buckets=None,
    *,
    K=None,
    sinks=None,
    recent=None,
    u=None,
    scores=None,
    min_hits: int = DEFAULTS.min_hits,
    title: str | None = None,
) -> go.Figure:
    """One MagicPIG decode step of one head, from its data.

    ``key_buckets`` (L, n) ints: each key's bucket in each table (the exact set's columns are
    not read: sinks and window are not in the tables). ``query_buckets`` (L,): the query's.
    ``K`` bits per table (2^K buckets). ``sinks``/``recent``: the exact set. ``u`` (optional):
    the inclusion probability of each sampled key (hits >= ``min_hits`` outside the exact set),
    in key order. ``scores`` (optional, needs ``u``): q.k/sqrt(d) of every key; then the
    softmax weights are drawn. With no data at all, :func:`toy_decode_step`'s step is drawn.
    """
    if key_buckets is None:
        given = [
            k
            for k, v in dict(query_buckets=query_buckets, K=K, sinks=sinks, recent=recent, u=u, scores=scores).items()
            if v is not None
        ]
        if given:
            raise ValueError(f"key_buckets is needed with {', '.join(given)} (or pass no data for the toy step)")
        toy = toy_decode_step(min_hits=min_hits)
        key_buckets, query_buckets, K, sinks, recent, u, scores = (
            toy[k] for k in ("key_buckets", "query_buckets", "K", "sinks", "recent", "u", "scores")
        )
    key_buckets, query_buckets, K, sinks, recent, u, scores, min_hits, sampled = _checked_step(
        key_buckets, query_buckets, K, sinks, recent, u, scores, min_hits
    )
    L, n = key_buckets.shape
    hits = _hits(key_buckets, query_buckets, sinks, recent)
    first_recent = n - recent
    exact = np.r_[0:sinks, first_recent:n]
    is_exact = np.zeros(n, dtype=bool)
    is_exact[exact] = True

    c = _Canvas()
    left = max(6.0, round(0.3 * n))  # the label column, in slots: about a quarter of the width
    gap = 0.1  # between neighbouring slots, on each side
    y = -4.0

    def heading(number: int, text: str):
        nonlocal y
        c.text(0, y, f"<b>{number}</b>  {text}", size=HEAD, xanchor="left", yanchor="top", xref="paper")
        y -= 24

    def row_label(text: str, y_mid: float):
        c.text(-left, y_mid, text, xanchor="left")

    # 1. The KV cache: one slot per token, coloured by role.
    heading(1, f"KV cache: {n} tokens, oldest first")
    y -= 18  # room for the arrow of the token leaving the window
    top, bottom = y, y - 26
    row_label("KV cache", (top + bottom) / 2)
    for i in range(n):
        c.box(
            i + gap,
            i + 1 - gap,
            bottom,
            top,
            EXACT_FILL if is_exact[i] else PALE,
            "cache exact" if is_exact[i] else "cache indexed",
        )
    c.hover(
        np.arange(n) + 0.5,
        [(top + bottom) / 2] * n,
        [
            f"token {i}: "
            + (
                "sink, read exactly"
                if i < sinks
                else "recent window or buffer, read exactly"
                if i >= first_recent
                else "indexed: in the LSH tables"
            )
            for i in range(n)
        ],
        "KV cache",
    )
    if recent and first_recent > sinks:
        # The upkeep: the window's oldest tokens become sampleable as the buffer is filed into the
        # tables (pigviz.lsh.index.insert_tokens), drawn as an arc back into the indexed part.
        # Up from its slot, across, and down into the last indexed slot: a vertical arrowhead
        # points the same way at any width.
        x_from, x_to, y_up = first_recent + 0.5, first_recent - 0.5, top + 12
        c.shapes.append(
            dict(
                type="path",
                path=f"M {x_from},{top + 1} L {x_from},{y_up} L {x_to},{y_up}",
                line=dict(color=LINE, width=2),
            )
        )
        c.arrow(x_to, y_up, x_to, top + 1, width=2, size=0.9)
        c.text(
            x_to - 0.4,
            y_up,
            "when the buffer fills: hashed and inserted",
            xanchor="right",
            hovertext=(
                "Tokens generated since the last upkeep wait in a buffer, read exactly. When it fills,<br>"
                "they are hashed with the index's own planes and mean and inserted into their bucket in<br>"
                "each of the L tables; the exact window moves forward, and the tokens it leaves are sampled."
            ),
        )
    # Brackets under the three parts, with their names.
    y = bottom - 6
    parts = [(0, sinks, "sinks: exact", "center"), (sinks, first_recent, "indexed: in the LSH tables", "center")]
    parts.append((first_recent, n, "window + buffer: exact", "right"))
    for a, b, name, anchor in parts:
        if b > a:
            c.line(a + gap, y, b - gap, y)
            c.line(a + gap, y, a + gap, y + 4)
            c.line(b - gap, y, b - gap, y + 4)
            c.text(b if anchor == "right" else (a + b) / 2, y - 3, name, xanchor=anchor, yanchor="top")
    y -= 30

    # 2. The query hashed into the L tables; each key's bucket lit where it is the query's.
    heading(2, f"q hashed into L = {L} tables of 2<sup>{K}</sup> = {2**K} buckets")
    c.text(0, y + 4, "q's bucket in each table", xanchor="left", yanchor="top", xref="paper")
    c.text(n, y + 4, "keys in q's bucket: lit", xanchor="right", yanchor="top")
    y -= 20
    row_h, row_gap = 20, 4
    q_w = min(1.5, left / 4)  # the q box
    strip0 = -left + q_w + 0.6  # the bucket strips start here and end at -0.6
    cell = (-0.6 - strip0) / 2**K
    tables_top = y
    hover_x, hover_y, hover_t = [], [], []
    for t in range(L):
        r_top, r_bot = y, y - row_h
        for b in range(2**K):
            lit = b == query_buckets[t]
            c.box(
                strip0 + b * cell + 0.04,
                strip0 + (b + 1) * cell - 0.04,
                r_bot,
                r_top,
                SAMPLED if lit else PALE,
                "q bucket" if lit else "bucket",
            )
            members = np.flatnonzero(key_buckets[t] == b)
            members = members[(members >= sinks) & (members < first_recent)]
            hover_x.append(strip0 + (b + 0.5) * cell)
            hover_y.append((r_top + r_bot) / 2)
            hover_t.append(
                f"table {t + 1}, bucket {b}{' (q is here)' if lit else ''}: "
                + (f"keys {', '.join(map(str, members))}" if members.size else "no key")
            )
        for i in range(sinks, first_recent):
            lit = key_buckets[t, i] == query_buckets[t]
            c.box(i + gap, i + 1 - gap, r_bot, r_top, LIT if lit else PALE, "key in q bucket" if lit else "key bucket")
            hover_x.append(i + 0.5)
            hover_y.append((r_top + r_bot) / 2)
            hover_t.append(f"key {i}, table {t + 1}: bucket {key_buckets[t, i]} (q's: {query_buckets[t]})")
        y = r_bot - row_gap
    c.box(-left, -left + q_w, y + row_gap, tables_top, SAMPLED, "q", line=None)
    c.text(-left + q_w / 2, (y + row_gap + tables_top) / 2, "<b>q</b>", color=DARK_TEXT, size=HEAD)
    c.hover(hover_x, hover_y, hover_t, "tables")
    y -= 10

    # 3. Hit counts: the indexed keys with at least min_hits are sampled.
    heading(3, f"hits: tables where a key shares q's bucket; \u2265 {min_hits}: sampled")
    top, bottom = y, y - 24
    row_label("hits", (top + bottom) / 2)
    is_sampled = np.zeros(n, dtype=bool)
    is_sampled[sampled] = True
    for i in range(n):
        if is_exact[i]:
            c.box(i + gap, i + 1 - gap, bottom, top, EXACT_FILL, "exact")
        else:
            c.box(
                i + gap,
                i + 1 - gap,
                bottom,
                top,
                SAMPLED if is_sampled[i] else PALE,
                "sampled" if is_sampled[i] else "not sampled",
            )
    indexed = np.arange(sinks, first_recent)
    c.labels(
        indexed + 0.5, (top + bottom) / 2, [str(h) for h in hits[indexed]], [DARK_TEXT] * indexed.size, "hit counts"
    )
    c.hover(
        np.arange(n) + 0.5,
        [(top + bottom) / 2] * n,
        [
            f"key {i}: read exactly"
            if is_exact[i]
            else f"key {i}: {hits[i]} hit(s){', sampled' if is_sampled[i] else ''}"
            for i in range(n)
        ],
        "hits",
    )
    y = bottom - 6
    if u is not None and sampled.size:
        # u and -log u, written upwards under each sampled key.
        for row, texts in (("u", [_fmt_u(v) for v in u]), ("\u2212log u", [f"+{-math.log(v):.1f}" for v in u])):
            row_label(row, y - 20)
            for i, text in zip(sampled, texts):
                c.text(i + 0.5, y - 20, text, textangle=-90)
            c.hover(
                sampled + 0.5,
                [y - 20] * sampled.size,
                [
                    f"key {i}: sampled with chance u = {v:.3g};<br>\u2212log u = {-math.log(v):.3g} added to its score"
                    for i, v in zip(sampled, u)
                ],
                row,
            )
            y -= 44
    y -= 6

    # 4. One softmax over the exact set and the sample, then the values mixed.
    heading(4, "one softmax over q\u00b7k/\u221ad, each sampled key's score corrected for its u")
    read = np.r_[exact, sampled]
    bar_h = 70
    if scores is not None:
        correction = np.r_[np.zeros(exact.size), -np.log(u)]  # -log u, 0 for the exact set
        corrected = scores[read] + correction
        w = np.exp(corrected - corrected.max())
        w /= w.sum()
        top, bottom = y - 4, y - 4 - bar_h
        row_label("weight", (top + bottom) / 2)
        c.line(0, bottom, n, bottom, width=1)
        for i, wi in zip(read, w):
            h = max(1.5, bar_h * wi / w.max())  # the tallest bar is bar_h; a tiny one still shows
            c.box(
                i + gap,
                i + 1 - gap,
                bottom,
                bottom + h,
                SAMPLED if is_sampled[i] else EXACT_FILL,
                "weight sampled" if is_sampled[i] else "weight exact",
            )
        c.hover(
            read + 0.5,
            [bottom + 8] * read.size,
            [
                f"key {i}: q\u00b7k/\u221ad = {s:.2f}"
                + (f" + {cor:.2f} = {cs:.2f}" if cor else "")
                + f", weight {wi:.3f}"
                for i, s, cor, cs, wi in zip(read, scores[read], correction, corrected, w)
            ],
            "weights",
        )
        y = bottom - 8
    c.text(
        0,
        y,
        f"output = \u03a3 w<sub>i</sub> v<sub>i</sub> over {read.size} of {n} keys:"
        f"<br>{exact.size} exact + {sampled.size} sampled",
        xanchor="left",
        yanchor="top",
        xref="paper",
        align="left",
    )
    y -= 40
    title = title if title is not None else "One MagicPIG decode step, one head"
    return c.figure((-left - 0.1, n + 0.1), y, title)


# --------------------------------------------------------------------------- the placement


def _fmt_bytes(b: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.0f} B"


def placement_diagram(bytes_down=None, bytes_up=None, *, title: str | None = None) -> go.Figure:
    """MagicPIG's CPU/GPU split for one sampled layer's decode step (``placement="cpu_offload"``).

    The GPU holds the weights, hashes the query, attends exactly over sinks, window and decode
    buffer, and merges; the CPU holds the rest of the cache and the tables and runs the
    threaded sampled step. ``bytes_down`` / ``bytes_up``: bytes per step copied GPU to CPU
    (the query and its bucket ids) and back (the partial output and log-normaliser), printed
    on the arrows; None prints no number."""
    down = None if bytes_down is None else check_float("bytes_down", bytes_down, 0.0)
    up = None if bytes_up is None else check_float("bytes_up", bytes_up, 0.0)
    c = _Canvas()
    pad, mid, box_h, gap = 0.025, 0.5, 52, 10

    def device(name: str, top: float, boxes: list[list[tuple[str, str, str]]]) -> float:
        """A device's frame, ``name`` on top, then rows of boxes (text, outline, hover)."""
        c.text(pad, top - 8, f"<b>{name}</b>", size=HEAD, xanchor="left", yanchor="top")
        y = top - 32
        centres = []
        for row in boxes:
            w = (1 - 2 * pad - (len(row) - 1) * 0.02) / len(row)
            for j, (text, outline, hover) in enumerate(row):
                x0 = pad + j * (w + 0.02)
                c.box(x0, x0 + w, y - box_h, y, BOX, f"{name} box", line=outline, width=2)
                c.text(x0 + w / 2, y - box_h / 2, text, color=DARK_TEXT, hovertext=hover)
                centres.append((x0 + w / 2, y - box_h / 2, hover))
            y -= box_h + gap
        c.box(0, 1, y, top, "rgba(0,0,0,0)", name, line=LINE, width=1.5)
        # Hover points on the boxes: the figure then holds a trace, as every drawn plotly figure does.
        c.hover(*zip(*centres), f"{name} boxes")
        return y

    gpu_bottom = device(
        "GPU",
        0,
        [
            [
                ("model weights<br>(every layer)", LINE, "The model runs on the GPU."),
                (
                    "<b>1</b> hash q: its bucket<br>in each of the L tables",
                    SAMPLED,
                    "q @ planes: a copy of the index's hyperplanes lives on the GPU.",
                ),
            ],
            [
                (
                    "<b>3</b> exact attention: sinks<br>+ window + decode buffer",
                    EXACT_FILL,
                    "Exact attention with its log-normaliser, while the CPU does step 4.",
                ),
                (
                    "<b>5</b> merge the two parts<br>by log-sum-exp \u2192 output",
                    LINE,
                    "out = (e^lse_e out_e + e^lse_c out_c) / (e^lse_e + e^lse_c)",
                ),
            ],
        ],
    )
    # What crosses per step: down to the CPU, up to the GPU.
    bus_top, bus_bottom = gpu_bottom - 6, gpu_bottom - 96
    down_text = "<b>2</b> q and its<br>L bucket ids" + ("" if down is None else f"<br>{_fmt_bytes(down)} / step")
    up_text = "<b>4</b> partial output<br>+ log-normaliser" + ("" if up is None else f"<br>{_fmt_bytes(up)} / step")
    c.arrow(0.3, bus_top, 0.3, bus_bottom, color=SAMPLED, width=2.5)
    c.text(0.28, (bus_top + bus_bottom) / 2, down_text, xanchor="right")
    c.arrow(0.7, bus_bottom, 0.7, bus_top, color=SAMPLED, width=2.5)
    c.text(0.72, (bus_top + bus_bottom) / 2, up_text, xanchor="left")
    c.text(
        mid,
        (bus_top + bus_bottom) / 2,
        "per step:<br>pinned, async<br>copies",
        hovertext="Pinned host buffers, non-blocking copies; the CPU waits for the query once per layer.",
    )
    cpu_bottom = device(
        "CPU",
        bus_bottom - 6,
        [
            [
                (
                    "rest of the KV cache:<br>indexed keys, values",
                    LINE,
                    "Every indexed token's key and value, in pinned host memory.",
                ),
                (
                    "the L LSH tables<br>(2<sup>K</sup> buckets each)",
                    SAMPLED,
                    "Built once from the indexed keys; the buffer's tokens are inserted when it fills.",
                ),
            ],
            [
                (
                    "<b>4</b> sampled attention, threaded: keys with<br>\u2265 min_hits hits, scores \u2212 log u",
                    SAMPLED,
                    "pigviz.lsh.fused.attend_sampled over the keys the tables sample.",
                ),
            ],
        ],
    )
    c.text(
        0,
        cpu_bottom - 8,
        "Steps 3 and 4 run at the same time; the CPU waits only for q.",
        xanchor="left",
        yanchor="top",
    )
    title = title if title is not None else "MagicPIG's placement: one sampled layer, one step"
    return c.figure((-0.005, 1.005), cpu_bottom - 30, title)
