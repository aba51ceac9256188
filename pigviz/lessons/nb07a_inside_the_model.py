"""Notebook 07, sampled decoding: the numbers its prose states (``claims``), the definitions it
writes (``PROSE_DEFINED``) and its loader. The lesson computes its table in its own cells; the
full quality and passkey tables are finding 4's (:mod:`pigviz.lessons.f4_decoding`), the speed
finding 3's (:mod:`pigviz.lessons.f3_bill_and_speed`)."""

from __future__ import annotations

import numpy as np

from pigviz.decode import report
from pigviz.decode.report import load_result
from pigviz.lessons.verify import Claim
from pigviz.lsh.reference import simhash_codes

__all__ = ["PROSE_DEFINED", "claims", "load_results", "YourMagicPIG"]

PROSE_DEFINED = {
    "2025": "the MagicPIG paper's year (ICLR 2025)",
    "10": "K = 10, the paper's default (K, L) = (10, 150)",
    "150": "L = 150, the paper's default (K, L) = (10, 150)",
    "64": "the recent window, a default of pigviz.decode.session",
    "1,024": "the live cell's prompt length",
    "8k": "SmolLM2-135M's 8,192-token context, rounded",
    "1e-5": "the tolerance tests/decode/test_offload.py holds the offloaded step's outputs to",
}


def claims() -> list[Claim]:
    """Notebook 07's statements, re-derived from the shipped files."""
    quality = load_results()[0]
    at_paper = [r for r in quality["rows"] if (r.get("K"), r.get("L")) == (10, 150)]
    kl = {r["method"] + str(r.get("seed", "")): float(np.mean(r["kl_per_token"])) for r in at_paper}
    mp = [v for k, v in kl.items() if k.startswith("magicpig")]
    return [
        Claim(
            "07",
            "at (10, 150) MagicPIG's mean KL lies between TopK's and StreamingLLM's at the same budget, and its seeds "
            "differ by over 10%",
            bool(kl["topk"] < min(mp) and max(mp) < kl["streaming"] and (max(mp) - min(mp)) > 0.1 * np.mean(mp)),
            f"TopK {kl['topk']:.3f}, MagicPIG {min(mp):.3f}-{max(mp):.3f}, StreamingLLM {kl['streaming']:.3f}",
        )
    ]


def load_results() -> tuple[dict, dict, dict]:
    """The shipped quality, passkey and CPU speed results (each checked against the manifest's sha256)."""
    return load_result(report.QUALITY_FILE), load_result(report.PASSKEY_FILE), load_result(report.SPEED_FILE)


# The estimator section 4 writes in view (a test holds the two texts equal); notebook 08 races it.
class YourMagicPIG:
    """MagicPIG from your functions: `build` files one KV head's prefill keys, each row runs `step`."""

    def __init__(self, step, tables, name, K=10, L=150, sinks=4, recent=64, seed=0):
        self.step, self.tables, self.name = step, tables, name  # tables: a build_tables
        self.K, self.L, self.sinks, self.recent, self.seed = K, L, sinks, recent, seed

    def build(self, keys):  # (n, d): one layer's KV head at the end of the prefill
        n, d = keys.shape
        planes = np.random.default_rng(self.seed).standard_normal((d, self.K * self.L))
        mu = keys[self.sinks : n - self.recent].mean(axis=0)
        index = dict(planes=planes, mu=mu, K=self.K, L=self.L, n_indexed=n, sinks=self.sinks, recent=self.recent)
        return dict(index, tables=self.tables(simhash_codes(keys - mu, planes, self.K, self.L), self.K))

    def __call__(self, q, keys, values, budget, index):
        return self.step(q, keys, values, index)
