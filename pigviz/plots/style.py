"""One look for every figure: the layout, and one colour per attention method.

Colours are Okabe-Ito hues (distinguishable with the common colour-vision deficiencies). A
method keeps its colour in every notebook: TopK is always blue, MagicPIG always vermillion,
and the toy's importance sampling shares MagicPIG's colour because it is the same idea.
"""

from __future__ import annotations

__all__ = ["LAYOUT", "layout", "METHOD_COLORS", "method_color", "OTHER_COLOR"]

LAYOUT = dict(template="plotly_white", font=dict(size=13), margin=dict(l=70, r=30, t=70, b=60))

METHOD_COLORS = {
    "dense": "#000000",
    "dense_grouped": "#404040",
    "dense_grouped_bf16": "#7A7A7A",
    "exact": "#000000",
    "magicpig": "#D55E00",
    "importance": "#D55E00",
    "topk": "#0072B2",
    "oracle": "#009E73",
    "sampling": "#009E73",
    "hybrid": "#CC79A7",
    "quest": "#E69F00",
    "quest_rank_all": "#E69F00",
    "rank_all": "#E69F00",  # one rule per dash, same method
    "streaming": "#56B4E9",
    "mp_exact_top": "#8C510A",
    "vattention": "#999933",
    "sparq": "#666666",  # the affordable estimators
}
OTHER_COLOR = "#777777"


def method_color(spec: str) -> str:
    """Colour of a method or of a variant ("quest/4" is drawn in Quest's colour)."""
    return METHOD_COLORS.get(spec.split("/")[0], OTHER_COLOR)


def layout(**overrides) -> dict:
    """The shared layout with ``overrides`` merged in (a given ``margin`` replaces only its sides)."""
    merged = {**LAYOUT, **overrides}
    if "margin" in overrides:
        merged["margin"] = {**LAYOUT["margin"], **overrides["margin"]}
    return merged
