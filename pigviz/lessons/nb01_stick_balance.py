"""Notebook 01, the stick-balance toy: the numbers it states, each re-derived with a pass condition."""

from __future__ import annotations

import math

import numpy as np

from pigviz._util.fmt import below
from pigviz.lessons.verify import Claim
from pigviz.toy.stick_balance import (
    DEFAULT_BUDGET,
    SCENARIOS,
    error_curves,
    loglog_slope,
    make_scenario,
    repeat_estimates,
    topk,
)

__all__ = ["claims"]


def claims(budget: int = DEFAULT_BUDGET, runs: int = 4000) -> list[Claim]:
    """The headline numbers notebook 01 states, each re-derived with a pass condition."""
    sink, peaked = make_scenario("sink"), make_scenario("peaked")
    truth = sink.truth
    top = topk(sink.values, sink.weights, budget).value
    smp = repeat_estimates(sink, budget, runs, seed=1, methods=("sampling",))["sampling"]
    one = repeat_estimates(sink, 1, runs, seed=2, methods=("importance",))["importance"]
    # The budgets notebook 01 prints (same random stream), of which B = 2 and B = 24 are compared.
    is_all = error_curves(sink, [1, 2, 4, 8, 16, 24, 31], n_seeds=2000, seed=3, methods=("importance",))
    is_rms = is_all.errors["importance"][[1, 5]]
    flat = error_curves(
        make_scenario("flat", n=1024), [2, 4, 8, 16, 32, 64], n_seeds=1000, seed=4, methods=("sampling",)
    )
    slope = loglog_slope(flat.budgets, flat.errors["sampling"])
    ratio = flat.errors["sampling"][3] / flat.reference[3]
    worst = max(abs(topk(s.values, s.weights, s.n).value - s.truth) for s in map(make_scenario, SCENARIOS))
    pk = error_curves(peaked, [budget], n_seeds=2000, seed=5, methods=("sampling", "hybrid")).errors
    sink_all = error_curves(sink, n_seeds=400, seed=0)  # notebook 01, section 9
    at = list(sink_all.budgets).index(budget)
    sink_smp, sink_ref = sink_all.errors["sampling"][at], sink_all.reference[at]
    kept = topk(sink.values, sink.weights, budget).read
    missed = np.setdiff1d(np.arange(sink.n), kept)
    w_missed = float(sink.weights[missed].sum())
    mean_kept = float(sink.weights[kept] @ sink.values[kept] / sink.weights[kept].sum())
    mean_missed = float(sink.weights[missed] @ sink.values[missed] / w_missed)
    bias_formula = w_missed * (mean_kept - mean_missed)
    return [
        Claim(
            "01", f"Sink scenario ({sink.n} keys): true balance point about 0.35", 0.30 <= truth <= 0.40, f"{truth:.3f}"
        ),
        Claim(
            "01",
            f"Sink: TopK with {budget} keys grabs the sink, lands near 0.2",
            abs(top - truth) > 0.1 and 0.15 <= top <= 0.25,
            f"{top:.3f}",
        ),
        Claim(
            "01",
            "TopK's miss = W_M (mean_T - mean_M): missed weight x gap in means",
            abs((top - truth) - bias_formula) < 1e-12 and bias_formula < 0,
            f"{top - truth:+.4f} = {w_missed:.3f} x ({mean_kept:.3f} - {mean_missed:.3f})",
        ),
        Claim(
            "01",
            f"Sampling {budget} keys is unbiased: {runs}-run mean within 3 SE",
            abs(_z(smp, truth)) < 3,
            f"{smp.mean():.4f} ({_z(smp, truth):+.1f} SE)",
        ),
        Claim(
            "01",
            "Importance sampling, rough proposal, 1 key: biased (> 5 SE)",
            abs(_z(one, truth)) > 5,
            f"{one.mean():.3f} ({_z(one, truth):+.0f} SE)",
        ),
        Claim(
            "01",
            "...but converges: RMS error at 24 keys < 1/3 of that at 2",
            is_rms[1] < is_rms[0] / 3,
            f"{is_rms[0]:.3f} -> {is_rms[1]:.3f}",
        ),
        Claim("01", "Sampling error ~ 1/sqrt(B): log-log slope, 1024 flat keys", -0.6 <= slope <= -0.4, f"{slope:.2f}"),
        Claim(
            "01", "Its size is the value spread: RMS(B=16) / (sigma_w/sqrt(16))", 0.9 <= ratio <= 1.1, f"{ratio:.2f}"
        ),
        Claim(
            "01",
            f"Sink, {budget} keys: repeat draws put sampling below sigma_w/sqrt(B)",
            sink_smp < 0.8 * sink_ref,
            f"{sink_smp:.3f} vs {sink_ref:.3f}",
        ),
        Claim("01", "TopK is exact when the budget is every key (all scenarios)", worst < 1e-12, below(worst, 1e-12)),
        Claim(
            "01",
            f"Peaked, {budget} keys: hybrid RMS error below plain sampling's",
            pk["hybrid"][0] < pk["sampling"][0],
            f"{pk['hybrid'][0]:.4f} vs {pk['sampling'][0]:.4f}",
        ),
    ]


def _z(samples, target):
    """How many standard errors the mean of ``samples`` sits from ``target``."""
    return float((samples.mean() - target) / (samples.std(ddof=1) / math.sqrt(samples.size)))
