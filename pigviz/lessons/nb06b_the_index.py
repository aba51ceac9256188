"""Notebook 06b, the index and every head: the numbers its prose states (``claims``) and the
definitions it writes (``PROSE_DEFINED``). The lesson computes its tables in its own cells;
the study's full tables are the findings' (:mod:`pigviz.lessons.f1_every_head`,
:mod:`pigviz.lessons.f2_affordable`, :mod:`pigviz.lessons.f3_bill_and_speed`).
"""

from __future__ import annotations

import numpy as np

from pigviz.lessons.verify import Claim
from pigviz.study.findings import head_grid, load_shipped_results

__all__ = ["claims", "PROSE_DEFINED"]

# Numbers the prose writes that are not measured: parameters, the data's fixed facts, citations.
PROSE_DEFINED = {
    "10": "K, bits per table, the paper's default (10, 150)",
    "150": "L, tables, the paper's default (10, 150)",
    "64": "the recent window and the captured positions",
    "270": "cells: 30 layers x 9 heads of SmolLM2-135M",
    "8,192": "tokens of the study's capture",
    "32": "keys of the toy index the explorer draws (pigviz.plots.toy_index.toy_index_step's n)",
}


def claims() -> list:
    r = load_shipped_results()
    mp, tk = head_grid(r, "magicpig K10 L150"), head_grid(r, "topk @K10 L150")
    won = mp < tk
    hard = tk >= np.quantile(tk, 0.9)
    return [
        Claim(
            notebook="06b",
            text="at (10, 150) TopK's mean error is lower than MagicPIG's in most (layer, head) cells, and most of "
            "MagicPIG's wins are in the tenth of the cells where TopK errs most",
            passed=bool(won.sum() < won.size / 2 and (won & hard).sum() > won.sum() / 2),
            value=f"{int(won.sum())} of {won.size} cells won, {int((won & hard).sum())} in TopK's worst tenth",
        )
    ]
