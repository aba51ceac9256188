"""Plotly figure builders: data in, ``go.Figure`` out. No widgets, no state.

``style`` holds the one layout and the one colour per method every builder uses; each other
module draws one topic's figures."""

__all__ = [
    "style",
    "stick_balance",
    "key_geometry",
    "simhash",
    "budget",
    "study",
    "decoding",
    "estimators",
    "tokens",
    "diagrams",
    "toy_index",
]
