"""Notebook 07b, your MagicPIG writes text: the definitions its prose writes (``PROSE_DEFINED``),
its claims (none: it states no measured number in prose) and ``YourMagicPIG``, the estimator its
section 2 writes in view (a test holds the two texts equal), which notebook 08 races."""

from __future__ import annotations

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz.lessons.verify import Claim
from pigviz.lsh.reference import simhash_codes

__all__ = ["PROSE_DEFINED", "claims", "YourMagicPIG"]

PROSE_DEFINED = {
    "10": "K = 10, the paper's default (K, L) = (10, 150)",
    "150": "L = 150, the paper's default (K, L) = (10, 150)",
    "1,024": "the live cell's prompt length",
    "8k": "SmolLM2-135M's 8,192-token context, rounded",
    "1e-5": "the tolerance tests/decode/test_offload.py holds the offloaded step's outputs to",
}


def claims() -> list[Claim]:
    """Notebook 07b states no measured number in its prose: its outputs carry them."""
    return []


class YourMagicPIG:
    """MagicPIG from your functions: `build` files one KV head's prefill keys, each row runs `step`."""

    def __init__(self, step, tables, name, config=DEFAULTS):  # config: a pigviz.MagicPIGConfig
        self.step, self.tables, self.name = step, tables, name  # tables: a build_tables
        self.K, self.L, self.seed = config.K, config.L, config.seed
        self.sinks, self.recent = config.sinks, config.recent  # the keys read exactly

    def build(self, keys):  # (n, d): one layer's KV head at the end of the prefill
        n, d = keys.shape
        planes = np.random.default_rng(self.seed).standard_normal((d, self.K * self.L))
        mu = keys[self.sinks : n - self.recent].mean(axis=0)
        index = dict(planes=planes, mu=mu, K=self.K, L=self.L, n_indexed=n, sinks=self.sinks, recent=self.recent)
        return dict(index, tables=self.tables(simhash_codes(keys - mu, planes, self.K, self.L), self.K))

    def __call__(self, q, keys, values, budget, index):
        return self.step(q, keys, values, index)
