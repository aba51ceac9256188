"""Tables a notebook shows: a rendered table in JupyterLab and on the site, stable text for nbval.

``table(rows, formats=...)`` takes a list of dicts (one per row) or a pandas DataFrame, formats
every number once, and returns a ``Table``. JupyterLab and the static site render its HTML (a
pandas Styler: number formats, highlighted cells, a caption); nbval and a terminal see its plain
text, made from the same formatted strings, so what nbval compares is exactly what the learner
reads, with no float digits beyond the chosen format.
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Callable, Mapping, Sequence

__all__ = ["Table", "table", "fmt", "Folded", "folded"]

# The look of every table: compact, numbers right-aligned, a light header rule.
_STYLES = [
    {"selector": "", "props": "border-collapse: collapse; font-size: 0.92em; margin: 0.4em 0 0.8em 0;"},
    {"selector": "th", "props": "text-align: left; padding: 0.2em 0.7em; border-bottom: 1px solid #999;"},
    {"selector": "td", "props": "padding: 0.15em 0.7em; border-bottom: 1px solid #eee;"},
    {"selector": "caption", "props": "caption-side: top; text-align: left; color: #444; padding-bottom: 0.3em;"},
]
_HIGHLIGHT = "background-color: #fff3c4; font-weight: bold;"
_FAIL = "background-color: #fbd5d5; font-weight: bold;"


def fmt(spec: str) -> Callable:
    """A formatter from a format spec (``"{:.3f}"``, ``"{:.1%}"``, ``"{:,}"``); None and NaN show as ``-``."""

    def apply(value):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        if isinstance(value, str):
            return value
        return spec.format(value)

    return apply


class Table:
    """A formatted table: ``_repr_html_`` for JupyterLab and the site, ``repr`` for nbval."""

    def __init__(self, frame, text, highlights, caption: str | None):
        self.frame = frame  # the raw values, for code that wants them
        self.text = text  # DataFrame of the formatted strings
        self.highlights = highlights  # {(row, column): css}
        self.caption = caption

    def __repr__(self) -> str:
        # Plain text by hand rather than DataFrame.to_string, which right-aligns words too: numbers
        # right, words left, columns two spaces apart.
        numeric = {c for c in self.frame.columns if _is_numeric(self.frame[c])}
        columns = [str(c) for c in self.text.columns]
        cells = [[str(v) for v in self.text[c]] for c in self.text.columns]
        widths = [max([len(name)] + [len(v) for v in col]) for name, col in zip(columns, cells)]

        def line(values):
            parts = [v.rjust(w) if c in numeric else v.ljust(w) for c, v, w in zip(self.text.columns, values, widths)]
            return "  ".join(parts).rstrip()

        lines = [line(columns)] + [line(row) for row in zip(*cells)]
        body = "\n".join(lines)
        return f"{self.caption}\n{body}" if self.caption else body

    def _repr_html_(self) -> str:
        # pandas gives every Styler a random id, which would make the saved HTML differ on each
        # run; one derived from the table's text keeps it the same for the same table.
        uuid = hashlib.sha1(repr(self).encode("utf-8")).hexdigest()[:10]
        styler = self.text.style.hide(axis="index").set_table_styles(_STYLES).set_uuid(uuid)
        styler = styler.format(escape="html")  # a claim's "<" or "x <= y" is text, not markup
        if self.caption:
            styler = styler.set_caption(html.escape(self.caption))

        def css(frame):
            import pandas as pd  # heavy: pandas loads in ~0.3 s; only notebooks render tables

            out = pd.DataFrame("", index=frame.index, columns=frame.columns)
            for (row, column), style in self.highlights.items():
                out.loc[row, column] = style
            return out

        numeric = [c for c in self.frame.columns if _is_numeric(self.frame[c])]
        styler = styler.apply(css, axis=None).set_properties(subset=numeric, **{"text-align": "right"})
        return styler.to_html()

    def __len__(self) -> int:
        return len(self.text)


def _is_numeric(column) -> bool:
    return column.dtype.kind in "iuf"


def table(
    rows,
    *,
    formats: Mapping[str, str | Callable] | None = None,
    columns: Sequence[str] | None = None,
    highlight: Mapping[str, str] | None = None,
    fail_where: Mapping[str, object] | None = None,
    caption: str | None = None,
) -> Table:
    """A ``Table`` from ``rows`` (a list of dicts, or a DataFrame).

    ``formats`` maps a column to a format spec (``"{:.3f}"``) or a function; numbers in other
    columns show with ``"{:.4g}"``, so no column prints a float's full digits. ``columns`` picks
    and orders them. ``highlight`` marks, per column, the cell holding its ``"min"`` or ``"max"``.
    ``fail_where`` shows in red the cells of a column that equal a value (``{"result": "FAIL"}``)."""
    import pandas as pd  # heavy: pandas loads in ~0.3 s; only notebooks render tables

    frame = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if columns is not None:
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ValueError(f"columns {missing} are not in the table (it has {list(frame.columns)})")
        frame = frame[list(columns)]
    frame = frame.reset_index(drop=True)
    formats = dict(formats or {})
    unknown = [c for c in formats if c not in frame.columns]
    if unknown:
        raise ValueError(f"formats name columns {unknown} that the table does not have ({list(frame.columns)})")
    text = pd.DataFrame(index=frame.index)
    for column in frame.columns:
        spec = formats.get(column)
        if spec is None:
            spec = "{:.4g}" if frame[column].dtype.kind == "f" else "{}"
        apply = fmt(spec) if isinstance(spec, str) else spec
        text[column] = [apply(v) for v in frame[column]]
    highlights = {}
    for column, how in (highlight or {}).items():
        if how not in ("min", "max"):
            raise ValueError(f"highlight[{column!r}] must be 'min' or 'max', got {how!r}")
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.notna().any():
            highlights[(int(values.idxmin() if how == "min" else values.idxmax()), column)] = _HIGHLIGHT
    for column, value in (fail_where or {}).items():
        for row in frame.index[frame[column] == value]:
            highlights[(int(row), column)] = _FAIL
    return Table(frame, text, highlights, caption)


class Folded:
    """Markdown a notebook shows folded (a solution, a computed answer): one click on the summary
    opens it. Jupyter and the site render the text as Markdown (maths included); nbval and a
    terminal see the summary and the whole text."""

    def __init__(self, summary: str, text: str):
        self.summary, self.text = str(summary), str(text)

    def __repr__(self) -> str:
        return f"[{self.summary}]\n{self.text}"

    def _repr_markdown_(self) -> str:
        return f"<details><summary>{html.escape(self.summary)}</summary>\n\n{self.text}\n\n</details>"


def folded(summary: str, text) -> Folded:
    """``text`` (Markdown, or anything whose ``_repr_markdown_`` or ``str`` gives it) behind a
    ``<details>`` fold titled ``summary``: the one way every notebook folds solutions and answers."""
    markdown = getattr(text, "_repr_markdown_", None)
    return Folded(summary, markdown() if callable(markdown) else str(text))
