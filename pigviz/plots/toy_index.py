"""A toy LSH index drawn as the engine holds it: each table's buckets as lists of token ids.

:func:`toy_index_step` computes a small true step with :mod:`pigviz.lsh.reference`: 2-D keys,
centred on their mean (as MagicPIG centres the sampleable keys), hashed into L tables of K
bits; the tables in CSR form (``offsets`` (L, 2^K + 1), ``ids`` (L, n): bucket b of table t is
``ids[t, offsets[t, b] : offsets[t, b + 1]]``, ids ascending within a bucket); the query, at a
given angle, hashed with the same planes; and the inclusion probability u of each key it
samples (hits >= ``min_hits``).

:func:`toy_index_figure` draws such a step from its arrays alone. Left: the centred keys in the
plane, the query's direction and table 1's hyperplanes (lines through the origin). Right, top to
bottom: each table's 2^K buckets with the ids they hold, the query's bucket lit; each key's hit
count (the tables where it sits in the query's bucket, read from those lit buckets only), the
sampled keys filled; and u under each sampled key. In two dimensions K planes cut the plane into
at most 2K sectors, so some of the 2^K buckets of a table stay empty: the picture shows them
as such.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_array, check_float, check_int
from pigviz.lsh.reference import simhash_codes
from pigviz.lsh.simhash import log_inclusion_probability
from pigviz.plots import style

__all__ = ["toy_index_step", "toy_index_figure", "MAX_K", "MAX_L", "MAX_N", "hits_from_tables"]

MAX_K = 4  # 16 buckets a table: more would not fit a row
MAX_L = 8
MAX_N = 48

SAMPLED = style.method_color("magicpig")  # q's bucket, the sampled keys
LIT = "#F2B48A"  # a key with hits, too few to be sampled
PALE = "#DADADA"  # a bucket q is not in, a key with no hit
EMPTY = "#F4F4F4"  # an empty bucket
DARK_TEXT = "#1A1A1A"  # on every fill above
LINE = "#8C8C8C"  # planes, outlines: reads on white and on black
QUERY = "#0072B2"  # the query's arrow: blue reads on white and on black
FONT = 12
SLOT_PX = 15.5  # about the width of one key slot at a notebook's 900 px
LABEL_SLOTS = 5.0  # the column of row labels, in slots
PANEL_TITLE = "centred keys, q, table 1's planes"


def toy_index_step(
    angle: float = 60.0, K: int = 3, L: int = 4, n: int = 32, *, min_hits: int = DEFAULTS.min_hits, seed: int = 4
) -> dict:
    """A small true index and query, as the keyword arguments of :func:`toy_index_figure`.

    ``angle`` (degrees) is the query's direction in the plane; ``seed`` draws the keys and the
    hyperplanes. Returns ``dict(offsets (L, 2^K + 1), ids (L, n), q_codes (L,), u (sampled,)
    in key order, keys (n, 2) centred, q (2,), planes (2, K*L), min_hits)``."""
    angle = check_float("angle", angle)
    K = check_int("K", K, 1, MAX_K)
    L = check_int("L", L, 1, MAX_L)
    n = check_int("n", n, 1, MAX_N)
    min_hits = check_int("min_hits", min_hits, 1, L)
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.0, 2.0 * math.pi, n)
    radius = rng.uniform(1.0, 2.0, n)  # keys spread around their mean, off the origin as real keys are
    raw = np.c_[radius * np.cos(theta), radius * np.sin(theta)] + [3.0, 1.0]
    keys = raw - raw.mean(axis=0)  # centred: the tables hash k - mu
    planes = rng.standard_normal((2, K * L))
    q = 2.5 * np.array([math.cos(math.radians(angle)), math.sin(math.radians(angle))])  # the query as it is
    codes = simhash_codes(keys, planes, K, L)  # (n, L)
    q_codes = simhash_codes(q, planes, K, L)  # (L,)
    ids = np.argsort(codes.T, axis=1, kind="stable")  # bucket order, ids ascending within a bucket
    counts = np.stack([np.bincount(codes[:, t], minlength=2**K) for t in range(L)])
    offsets = np.concatenate([np.zeros((L, 1), dtype=np.int64), np.cumsum(counts, axis=1)], axis=1)
    hits = (codes == q_codes).sum(axis=1)
    sampled = np.flatnonzero(hits >= min_hits)
    c = keys[sampled]
    cos = c @ q / (np.linalg.norm(c, axis=1) * np.linalg.norm(q))
    p = 1.0 - np.arccos(np.clip(cos, -1.0, 1.0)) / np.pi
    u = np.exp(log_inclusion_probability(p, K, L, min_hits))
    return dict(offsets=offsets, ids=ids, q_codes=q_codes, u=u, keys=keys, q=q, planes=planes, min_hits=min_hits)


def hits_from_tables(offsets, ids, q_codes) -> np.ndarray:
    """Per key, the tables where it sits in the query's bucket: only those buckets are read."""
    hits = np.zeros(ids.shape[1], dtype=np.int64)
    for t, b in enumerate(q_codes):
        hits[ids[t, offsets[t, b] : offsets[t, b + 1]]] += 1
    return hits


def _int_array(name: str, value, ndim: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be an array of integers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    return arr.astype(np.int64)


def _checked(offsets, ids, q_codes, u, keys, q, planes, min_hits):
    """The step as arrays and ints, or a ValueError naming the bad argument."""
    ids = _int_array("ids", ids, 2)
    L, n = ids.shape
    if not 1 <= L <= MAX_L:
        raise ValueError(f"ids must have 1 to {MAX_L} rows (tables), got {L}")
    if not 1 <= n <= MAX_N:
        raise ValueError(f"ids must have 1 to {MAX_N} columns (keys), got {n}")
    if any(not np.array_equal(np.sort(row), np.arange(n)) for row in ids):
        raise ValueError(f"ids must list each token id 0 .. {n - 1} once per table")
    offsets = _int_array("offsets", offsets, 2)
    nb = offsets.shape[1] - 1
    if offsets.shape[0] != L or nb not in [2**k for k in range(1, MAX_K + 1)]:
        raise ValueError(
            f"offsets must have shape (L, 2^K + 1) = ({L}, 2^K + 1) with K in 1 .. {MAX_K}, got {offsets.shape}"
        )
    if (offsets[:, 0] != 0).any() or (offsets[:, -1] != n).any() or (np.diff(offsets, axis=1) < 0).any():
        raise ValueError(f"offsets must run from 0 to n = {n} in each table, never decreasing")
    q_codes = _int_array("q_codes", q_codes, 1)
    if q_codes.shape != (L,) or q_codes.min() < 0 or q_codes.max() >= nb:
        raise ValueError(f"q_codes must hold one bucket id in 0 .. {nb - 1} per table ({L}), got {q_codes.tolist()}")
    min_hits = check_int("min_hits", min_hits, 1, L)
    sampled = np.flatnonzero(hits_from_tables(offsets, ids, q_codes) >= min_hits)
    if u is not None:
        u = check_array("u", u, ndim=1, min_len=0)
        if u.shape != sampled.shape:
            raise ValueError(f"u must hold one inclusion probability per sampled key ({sampled.size}), got {u.shape}")
        if u.size and (u.min() <= 0.0 or u.max() > 1.0):
            raise ValueError("u must be in (0, 1]: each sampled key's inclusion probability")
    if (keys is None) != (q is None):
        raise ValueError("keys and q go together: pass both (the left panel) or neither")
    if keys is not None:
        keys = check_array("keys", keys, ndim=2)
        if keys.shape != (n, 2):
            raise ValueError(f"keys must have shape (n, 2) = ({n}, 2): the toy is drawn in the plane, got {keys.shape}")
        q = check_array("q", q, ndim=1)
        if q.shape != (2,) or not np.any(q):
            raise ValueError(f"q must be a nonzero vector of shape (2,), got {q.tolist()}")
    if planes is not None:
        planes = check_array("planes", planes, ndim=2)
        if planes.shape[0] != 2 or planes.shape[1] % L or planes.shape[1] // L != int(math.log2(nb)):
            raise ValueError(f"planes must have shape (2, K*L) = (2, {int(math.log2(nb)) * L}), got {planes.shape}")
    return offsets, ids, q_codes, u, keys, q, planes, min_hits, sampled


def _fmt_u(u: float) -> str:
    return f"{u:.2f}" if u >= 0.01 else f"{u:.0e}"


def toy_index_figure(
    offsets,
    ids,
    q_codes,
    *,
    u=None,
    keys=None,
    q=None,
    planes=None,
    min_hits: int = DEFAULTS.min_hits,
    title: str | None = None,
) -> go.Figure:
    """The index's tables, the query's lit buckets, each key's hits and the sampled keys' u.

    ``offsets`` (L, 2^K + 1) and ``ids`` (L, n): the tables in CSR form. ``q_codes`` (L,): the
    query's bucket in each table. ``u`` (optional): the inclusion probability of each sampled key
    (hits >= ``min_hits``), in key order. ``keys`` (n, 2) and ``q`` (2,) (optional, together):
    the centred keys and the query, drawn in the plane on the left, with table 1's hyperplanes
    when ``planes`` (2, K*L) is given. Traces, in order (the widget updates them in place):
    keys, query, planes, bucket ids, bucket hover, key numbers, hit counts, key hover."""
    offsets, ids, q_codes, u, keys, q, planes, min_hits, sampled = _checked(
        offsets, ids, q_codes, u, keys, q, planes, min_hits
    )
    L, n = ids.shape
    nb = offsets.shape[1] - 1
    K = int(math.log2(nb))
    hits = hits_from_tables(offsets, ids, q_codes)
    is_sampled = hits >= min_hits
    plane_panel = keys is not None
    shapes, annotations = [], []
    x2, y2 = ("x2", "y2") if plane_panel else ("x", "y")

    def text(x, y, s, **kw):
        annotations.append(dict(x=x, y=y, text=s, showarrow=False, xref=x2, yref=y2, font=dict(size=FONT), **kw))

    def box(x0, x1, y0, y1, fill, name, outline=None):
        shapes.append(
            dict(
                type="rect", x0=x0, x1=x1, y0=y0, y1=y1, xref=x2, yref=y2, fillcolor=fill, name=name,
                line=dict(color=outline or "rgba(0,0,0,0)", width=1 if outline else 0), layer="below",
            )
        )  # fmt: skip

    # The tables: one row per table, one box per bucket holding its ids.
    width = n / nb  # a bucket's width, in key slots
    per_line = max(1, int(width * SLOT_PX // 20))  # ids per line: about 20 px each
    y = -6.0
    text(-LABEL_SLOTS, y, f"<b>L = {L} tables of 2<sup>{K}</sup> = {nb} buckets</b>: the ids each holds; q's lit",
         xanchor="left", yanchor="top")  # fmt: skip
    y -= 26
    bx, by, btext, bcolor, hx, hy, htext = [], [], [], [], [], [], []
    for t in range(L):
        runs = [ids[t, offsets[t, b] : offsets[t, b + 1]] for b in range(nb)]
        lines = max(1, max(math.ceil(len(r) / per_line) for r in runs))
        top, bottom = y, y - (lines * 15 + 8)
        text(-LABEL_SLOTS, (top + bottom) / 2, f"table {t + 1}", xanchor="left")
        for b, run in enumerate(runs):
            lit = b == q_codes[t]
            fill = SAMPLED if lit else (PALE if run.size else EMPTY)
            box(b * width + 0.06, (b + 1) * width - 0.06, bottom, top, fill, "q bucket" if lit else "bucket",
                outline=None if run.size else LINE)  # fmt: skip
            chunks = [" ".join(map(str, run[i : i + per_line])) for i in range(0, run.size, per_line)]
            bx.append((b + 0.5) * width)
            by.append((top + bottom) / 2)
            btext.append("<br>".join(chunks) if chunks else "·")
            bcolor.append(DARK_TEXT)
            hx.append((b + 0.5) * width)
            hy.append((top + bottom) / 2)
            where = f"ids[{t}, {offsets[t, b]}:{offsets[t, b + 1]}]"
            htext.append(
                f"table {t + 1}, bucket {b}{' (q is here)' if lit else ''}: {where}, "
                + (f"keys {', '.join(map(str, run))}" if run.size else "empty")
            )
        y = bottom - 4
    y -= 14

    # The keys: their numbers, their hits (read from the lit buckets), the sampled filled.
    text(-LABEL_SLOTS, y, f"<b>hits</b>: tables where a key sits in q's bucket; \u2265 {min_hits}: sampled",
         xanchor="left", yanchor="top")  # fmt: skip
    y -= 24
    slots = np.arange(n) + 0.5
    text(-LABEL_SLOTS, y - 8, "key", xanchor="left")
    key_row = y - 8
    y -= 18
    top, bottom = y, y - 22
    text(-LABEL_SLOTS, (top + bottom) / 2, "hits", xanchor="left")
    for i in range(n):
        fill = SAMPLED if is_sampled[i] else (LIT if hits[i] else PALE)
        box(i + 0.08, i + 0.92, bottom, top, fill, "sampled" if is_sampled[i] else "not sampled")
    hits_row = (top + bottom) / 2
    y = bottom - 6
    if u is not None and sampled.size:
        text(-LABEL_SLOTS, y - 20, "u", xanchor="left")
        for i, v in zip(sampled, u):
            text(i + 0.5, y - 20, _fmt_u(v), textangle=-90)
        y -= 44
    y -= 6
    note = f"{sampled.size} of {n} keys sampled; q's buckets hold {int(hits.sum())} of the L n = {L * n} entries"
    text(-LABEL_SLOTS, y, note, xanchor="left", yanchor="top")
    y -= 24
    bottom_px = y

    key_hover = [
        f"key {i}: {hits[i]} hit(s)"
        + (f", sampled, u = {u[np.searchsorted(sampled, i)]:.3g}" if is_sampled[i] and u is not None else "")
        + (", sampled" if is_sampled[i] and u is None else "")
        for i in range(n)
    ]
    canvas = dict(xaxis=x2, yaxis=y2)
    traces = []
    # Left panel: the keys, the query and table 1's planes (empty traces without keys).
    if plane_panel:
        colors = [SAMPLED if s else LINE for s in is_sampled]
        traces.append(
            go.Scatter(
                x=keys[:, 0], y=keys[:, 1], mode="markers+text", text=[str(i) for i in range(n)],
                textposition="top center", textfont=dict(size=10), marker=dict(size=9, color=colors),
                hovertext=key_hover, hoverinfo="text", name="keys", showlegend=False,
            )
        )  # fmt: skip
        reach = 1.15 * max(np.abs(keys).max(), np.abs(q).max())
        traces.append(
            go.Scatter(x=[0.0, q[0]], y=[0.0, q[1]], mode="lines+markers", line=dict(color=QUERY, width=3),
                       marker=dict(size=[0, 12], color=QUERY, symbol="arrow", angleref="previous"),
                       name="q", hoverinfo="name", showlegend=False)
        )  # fmt: skip
        px, py = [], []
        if planes is not None:
            for w in planes[:, :K].T:  # table 1's K planes: the lines normal to w
                d = np.array([-w[1], w[0]]) / np.linalg.norm(w) * reach
                px += [-d[0], d[0], None]
                py += [-d[1], d[1], None]
        traces.append(go.Scatter(x=px, y=py, mode="lines", line=dict(color=LINE, width=1, dash="dot"),
                                 name="table 1's planes", hoverinfo="skip", showlegend=False))  # fmt: skip
    else:
        for name in ("keys", "q", "table 1's planes"):
            traces.append(go.Scatter(x=[], y=[], name=name, showlegend=False, **canvas))
    traces += [
        go.Scatter(x=bx, y=by, text=btext, mode="text", textfont=dict(size=FONT, color=bcolor), hoverinfo="skip",
                   name="bucket ids", showlegend=False, **canvas),
        go.Scatter(x=hx, y=hy, hovertext=htext, hoverinfo="text", mode="markers", marker=dict(size=18, opacity=0),
                   name="buckets", showlegend=False, **canvas),
        go.Scatter(x=slots, y=[key_row] * n, text=[str(i) for i in range(n)], mode="text",
                   textfont=dict(size=10), hoverinfo="skip", name="key numbers", showlegend=False, **canvas),
        go.Scatter(x=slots, y=[hits_row] * n, text=[str(h) for h in hits], mode="text",
                   textfont=dict(size=FONT, color=[DARK_TEXT] * n), hoverinfo="skip", name="hit counts",
                   showlegend=False, **canvas),
        go.Scatter(x=slots, y=[hits_row] * n, hovertext=key_hover, hoverinfo="text", mode="markers",
                   marker=dict(size=14, opacity=0), name="keys' hits", showlegend=False, **canvas),
    ]  # fmt: skip
    fig = go.Figure(traces)
    height = round(-bottom_px) + 54
    hidden = dict(visible=False, fixedrange=True)
    canvas_x = dict(range=[-LABEL_SLOTS - 0.1, n + 0.1], **hidden)
    canvas_y = dict(range=[bottom_px, 0], **hidden)
    title = (
        title if title is not None else f"A toy index: {n} keys, K = {K}, L = {L}; the query reads one bucket a table"
    )
    fig.update_layout(
        **style.layout(margin=dict(l=8, r=8, t=46, b=8)),
        title=dict(text=title, x=0.01, xanchor="left", font=dict(size=15)),
        shapes=shapes,
        annotations=annotations,
        height=height,
        showlegend=False,
        dragmode=False,
        hoverlabel=dict(font_size=FONT),
    )
    if plane_panel:
        side = min(1.0, 300.0 / height)  # the plane panel: about 300 px tall, at the top
        fig.update_layout(
            xaxis=dict(domain=[0.0, 0.3], range=[-reach, reach], zeroline=True, showgrid=False, fixedrange=True,
                       showticklabels=False, title=dict(text=PANEL_TITLE, font=dict(size=FONT))),
            yaxis=dict(domain=[1.0 - side, 1.0], range=[-reach, reach], scaleanchor="x", zeroline=True,
                       showgrid=False, fixedrange=True, showticklabels=False),
            xaxis2=dict(domain=[0.33, 1.0], anchor="y2", **canvas_x),
            yaxis2=dict(domain=[0.0, 1.0], anchor="x2", **canvas_y),
        )  # fmt: skip
    else:
        fig.update_layout(xaxis=canvas_x, yaxis=canvas_y)
    return fig
