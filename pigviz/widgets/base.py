"""Small pieces every widget shares: clamping what a learner types, and showing an error in
the widget's status line instead of raising into the notebook."""

from __future__ import annotations

import html


def clamp_int(value, lo: int, hi: int, default: int) -> int:
    """``value`` rounded to an int and clamped to [lo, hi]; ``default`` if it is not a number."""
    try:
        value = int(round(float(value)))
    except (TypeError, ValueError, OverflowError):
        return default
    return max(lo, min(hi, value))


def error_html(exc: BaseException) -> str:
    return f"<span style='color:#b00'>Could not update: {html.escape(str(exc))}</span>"
