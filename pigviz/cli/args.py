"""Argument types shared by the sub-commands: each says what it expected and what it got."""

from __future__ import annotations

import argparse

__all__ = ["int_list", "name_list", "kl_pairs"]


def int_list(text: str) -> list[int]:
    """``"0,12,25"`` -> ``[0, 12, 25]``."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 0,12,25; got {text!r}") from None


def name_list(text: str) -> list[str]:
    """``"magicpig, topk"`` -> ``["magicpig", "topk"]``."""
    return [part.strip() for part in text.split(",") if part.strip()]


def kl_pairs(text: str, *, pair_sep: str = ";", inner_sep: str = ",", example: str = "10,150;12,200"):
    """``"10,150;12,200"`` -> ``[(10, 150), (12, 200)]`` (separators configurable)."""
    try:
        pairs = [
            tuple(int(x) for x in chunk.lower().split(inner_sep)) for chunk in text.split(pair_sep) if chunk.strip()
        ]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 for p in pairs):
        raise argparse.ArgumentTypeError(f"expected (K, L) pairs such as {example!r}; got {text!r}")
    return pairs
