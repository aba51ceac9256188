"""Notebook 06a, MagicPIG built on a real head: the definitions its prose writes
(``PROSE_DEFINED``) and the numbers it states (``claims``: none; every measured number the lesson
shows is in a cell's output, computed there).
"""

from __future__ import annotations

from pigviz.lessons.verify import Claim

__all__ = ["claims", "PROSE_DEFINED"]

# Numbers the prose writes that are not measured: parameters, the data's fixed facts, citations.
PROSE_DEFINED = {
    "10": "K, bits per table, the paper's default (10, 150)",
    "150": "L, tables, the paper's default (10, 150)",
    "64": "the recent window",
    "2025": "citation year (MagicPIG, ICLR 2025)",
    "0.01": "question 1's u, a value chosen for the question",
    "24": "keys of the drawn toy step (pigviz.plots.diagrams.toy_decode_step), a parameter",
}


def claims() -> list[Claim]:
    return []
