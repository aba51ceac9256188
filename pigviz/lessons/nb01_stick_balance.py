"""Notebook 01, the stick-balance toy: the numbers it states, each re-derived with a pass condition
(on the notebook's own random streams, the exercises' references standing in for the learner's
functions). The table formatters below are no longer called by the notebook, which builds its
tables in view; they render ``pigviz.toy.stick_balance``'s rows for other callers."""

from __future__ import annotations

import math

import numpy as np

from pigviz._util.fmt import below
from pigviz.lessons.exercises import nb01 as _ex
from pigviz.lessons.verify import Claim
from pigviz.plots.stick_balance import METHOD_STYLE
from pigviz.toy.stick_balance import (
    DEFAULT_BUDGET,
    SCENARIOS,
    error_curves,
    loglog_slope,
    make_scenario,
    topk,
)

__all__ = [
    "PROSE_DEFINED",
    "claims",
]

# Numbers the markdown writes that are not measured: the toy's parameters and fixed facts, a citation.
PROSE_DEFINED = {
    "2025": "the MagicPIG paper's year (ICLR 2025)",
    "12": "the default budget, toy.stick_balance.DEFAULT_BUDGET",
    "32": "keys per scenario, toy.stick_balance.DEFAULT_N",
    "0.36": "the sink scenario's flat values are drawn from [0.36, 0.96] (tests/lessons/test_prose_010203.py)",
    "0.96": "the sink scenario's flat values are drawn from [0.36, 0.96]",
    "0.02": "the sink token's value in the sink scenario",
    "0.5": "the rough proposal's sharpness, softmax(0.5 s), computed in view in section 6",
    "0.01": "Check yourself B: an example probability of being read",
    "100": "Check yourself B: 1/0.01, the correction of a key read with u = 0.01",
}


# ----------------------------------------------------------------------------- tables


def _label(method: str) -> str:
    return METHOD_STYLE[method][0]


# ----------------------------------------------------------------------------- claims


def _notebook_runs(budget: int, runs: int) -> dict:
    """The sink-scenario runs notebook 01 makes in view, on the same random streams, with the
    exercises' reference functions standing in for the learner's."""
    sink = make_scenario("sink")
    truth = sink.truth
    draws = np.random.default_rng(2).choice(sink.n, size=(runs, budget), p=sink.weights)
    u = np.exp(0.5 * sink.scores)
    u = u / u.sum()
    w_tilde = np.exp(sink.scores)
    u_read = np.minimum(1.0, budget * u)
    inclusion = np.array([_ex.inclusion_estimate(w_tilde, sink.values, u_read, seed) for seed in range(runs)])
    draw_rng = np.random.default_rng(9)
    importance = np.array(
        [_ex.importance_estimate(w_tilde, sink.values, u, draw_rng.choice(sink.n, budget, p=u)) for _ in range(runs)]
    )
    one_rng = np.random.default_rng(8)  # section 6's table: 2000 runs of 1 draw come first
    one = np.array(
        [_ex.importance_estimate(w_tilde, sink.values, u, one_rng.choice(sink.n, 1, p=u)) for _ in range(2000)]
    )
    return {
        "sink": sink,
        "truth": truth,
        "u": u,
        "sampling": sink.values[draws].mean(axis=1),
        "inclusion": inclusion,
        "importance": importance,
        "one draw": one,
    }


def _budget_sweep(sink, u, budgets, runs: int = 400) -> dict:
    """Section 8's errors against the budget, on its random stream (seed 0)."""
    truth, w_tilde = sink.truth, np.exp(sink.scores)
    rng = np.random.default_rng(0)
    errors = {"topk": [], "sampling": [], "importance": [], "inclusion": []}
    for b in budgets:
        errors["topk"].append(abs(topk(sink.values, sink.weights, int(b)).value - truth))
        errors["sampling"].append(_rms(sink.values[rng.choice(sink.n, size=(runs, b), p=sink.weights)].mean(1), truth))
        errors["importance"].append(
            _rms(
                [_ex.importance_estimate(w_tilde, sink.values, u, rng.choice(sink.n, b, p=u)) for _ in range(runs)],
                truth,
            )
        )
        errors["inclusion"].append(
            _rms(
                [
                    _ex.inclusion_estimate(w_tilde, sink.values, np.minimum(1.0, b * u), 1000 * b + s)
                    for s in range(runs)
                ],
                truth,
            )
        )
    return {m: np.array(e) for m, e in errors.items()}


def _rms(estimates, truth) -> float:
    return float(np.sqrt(np.mean((np.asarray(estimates, dtype=np.float64) - truth) ** 2)))


def claims(budget: int = DEFAULT_BUDGET, runs: int = 4000) -> list[Claim]:
    """The headline numbers notebook 01 states, each re-derived with a pass condition."""
    got = _notebook_runs(budget, runs)
    sink, truth, u = got["sink"], got["truth"], got["u"]
    peaked = make_scenario("peaked")
    top = topk(sink.values, sink.weights, budget).value
    kept = topk(sink.values, sink.weights, budget).read
    missed = np.setdiff1d(np.arange(sink.n), kept)
    w_missed = float(sink.weights[missed].sum())
    mean_kept = float(sink.weights[kept] @ sink.values[kept] / sink.weights[kept].sum())
    mean_missed = float(sink.weights[missed] @ sink.values[missed] / w_missed)
    kept_share = float(sink.weights[0] / sink.weights[kept].sum())  # the sink's say after TopK rescales
    peaked_drop = float(1 - peaked.weights[topk(peaked.values, peaked.weights, budget).read].sum())
    sigma = float(np.sqrt(sink.weights @ (sink.values - truth) ** 2))
    # Section 4: 1000 runs of m draws on 1024 flat keys, the values squeezed 10x on the same draws.
    flat = make_scenario("flat", n=1024)
    flat_truth = flat.truth
    flat_sigma = float(np.sqrt(flat.weights @ (flat.values - flat_truth) ** 2))
    squeezed = flat_truth + 0.1 * (flat.values - flat_truth)
    rng = np.random.default_rng(4)
    ms, loose, tight = (2, 4, 8, 16, 32, 64), [], []
    for m in ms:
        drawn = rng.choice(flat.n, size=(1000, m), p=flat.weights)
        loose.append(_rms(flat.values[drawn].mean(axis=1), flat_truth))
        tight.append(_rms(squeezed[drawn].mean(axis=1), flat_truth))
    slope = float(np.polyfit(np.log(ms), np.log(loose), 1)[0])
    ratio16 = loose[3] / (flat_sigma / 4)
    squeeze = np.array(tight) / np.array(loose)
    correction = sink.weights / u  # w/u per key; key 0 is the sink
    sink_vs_flat = float(correction[0] / np.delete(correction, 0).mean())
    one = got["one draw"]
    inc, imp, smp = got["inclusion"], got["importance"], got["sampling"]
    inc_bias = float(inc.mean() - truth)
    budgets = np.array([7, 12, 16, 20, 24, 28, 31])  # from the first budget that reads the sink for sure
    sweep = _budget_sweep(sink, u, budgets)
    least = all(
        sweep["inclusion"][i] < min(sweep[m][i] for m in ("sampling", "importance")) for i in range(budgets.size)
    )
    topk_wins = budgets[sweep["topk"] < sweep["inclusion"]]  # only one key short of all (B = 31)
    all_b = np.arange(2, sink.n + 1)  # B = 1: one key either way
    topk_miss = np.array([abs(topk(sink.values, sink.weights, int(b)).value - truth) for b in all_b])
    first = int(all_b[np.flatnonzero(topk_miss < sigma / np.sqrt(all_b))[0]])
    below_truth = all(topk(sink.values, sink.weights, int(b)).value < truth for b in range(1, sink.n))
    is_all = error_curves(sink, [1, 2, 4, 8, 16, 24, 31], n_seeds=2000, seed=3, methods=("importance",))
    is_fit = loglog_slope(is_all.budgets, is_all.errors["importance"])
    is_local = np.diff(np.log(is_all.errors["importance"])) / np.diff(np.log(is_all.budgets))  # 1->2, ..., 24->31
    q3_rng, q3 = np.random.default_rng(11), {}
    for k in (0.25, 0.5, 1.0, 2.0, 4.0):
        uk = np.exp(k * sink.scores) / np.exp(k * sink.scores).sum()
        q3[k] = _rms(
            [
                _ex.importance_estimate(sink.weights, sink.values, uk, q3_rng.choice(sink.n, budget, p=uk))
                for _ in range(4000)
            ],
            truth,
        )
    worst = max(abs(topk(s.values, s.weights, s.n).value - s.truth) for s in map(make_scenario, SCENARIOS))
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
            "TopK's miss = W_M (mean_T - mean_M), the dropped values far above the kept mean",
            abs((top - truth) - w_missed * (mean_kept - mean_missed)) < 1e-12 and mean_missed > mean_kept + 0.3,
            f"{top - truth:+.4f} = {w_missed:.3f} x ({mean_kept:.3f} - {mean_missed:.3f})",
        ),
        Claim(
            "01",
            f"Sink: balancing TopK's {budget} kept sticks alone gives the sink far more than its true share",
            kept_share > sink.weights[0] + 0.1,
            f"{kept_share:.0%} instead of {sink.weights[0]:.0%}",
        ),
        Claim(
            "01",
            "Sink: TopK lands below the truth at every budget short of all keys",
            below_truth,
            f"{topk(sink.values, sink.weights, 1).value - truth:+.3f} at B = 1, "
            f"{topk(sink.values, sink.weights, sink.n - 1).value - truth:+.3f} at B = {sink.n - 1}",
        ),
        Claim(
            "01",
            f"Peaked: the keys TopK leaves out at {budget} hold almost no weight (W_M < 5%)",
            peaked_drop < 0.05,
            f"{peaked_drop:.1%}",
        ),
        Claim(
            "01",
            f"Sampling, {budget} draws from the weights, is unbiased: {runs}-run mean within 3 SE",
            abs(_z(smp, truth)) < 3,
            f"{smp.mean():.4f} ({_z(smp, truth):+.1f} SE)",
        ),
        Claim(
            "01",
            "Sampling error ~ sigma_w/sqrt(m): log-log slope, 1024 flat keys",
            -0.55 <= slope <= -0.45,
            f"{slope:.2f}",
        ),
        Claim(
            "01",
            "Its size is the value spread: RMS(m=16) / (sigma_w/sqrt(16))",
            0.9 <= ratio16 <= 1.1,
            f"{ratio16:.2f}",
        ),
        Claim(
            "01",
            "Values squeezed 10x towards the truth: sampling's error 10x smaller (same draws)",
            bool(np.all(np.abs(squeeze - 0.1) < 1e-9)),
            f"{loose[2]:.4f} -> {tight[2]:.4f} at m = 8",
        ),
        Claim(
            "01",
            "Importance sampling, 1 draw: its mean is sum u_i v_i (within 3 SE), not the truth (> 5 SE)",
            abs(_z(one, float(u @ sink.values))) < 3 and abs(_z(one, truth)) > 5,
            f"{one.mean():.3f} vs {u @ sink.values:.3f}; truth {truth:.3f}",
        ),
        Claim(
            "01",
            "Rough proposal: a sink draw's correction w0/u0 is several times a flat key's (mean w/u)",
            sink_vs_flat > 3,
            f"{sink_vs_flat:.1f}x ({correction[0]:.2f} vs {np.delete(correction, 0).mean():.2f})",
            quotes=(f"{sink_vs_flat:.1f}",),
        ),
        Claim(
            "01",
            f"Inclusion sampler (u = min(1, {budget} x proposal)): the sink is always read",
            min(1.0, budget * u[0]) == 1.0,
            f"{budget} x {u[0]:.3f} >= 1",
        ),
        Claim(
            "01",
            f"Inclusion sampler, {runs} runs: a bias far smaller than its spread (< 1/5)",
            abs(inc_bias) < inc.std() / 5,
            f"bias {inc_bias:+.4f} ({_z(inc, truth):+.1f} SE), spread {inc.std():.3f}",
        ),
        Claim(
            "01",
            f"...and its RMS error under half that of {budget} draws with replacement from the proposal",
            _rms(inc, truth) < _rms(imp, truth) / 2,
            f"{_rms(inc, truth):.3f} vs {_rms(imp, truth):.3f}",
        ),
        Claim(
            "01",
            f"Section 8's budgets start at the first at which the sink is always read (B = {budgets[0]})",
            budgets[0] * u[0] >= 1.0 > (budgets[0] - 1) * u[0],
            f"{budgets[0] - 1} x {u[0]:.4f} < 1 <= {budgets[0]} x {u[0]:.4f}",
        ),
        Claim(
            "01",
            f"Sink, budgets {budgets[0]}-{budgets[-1]}, 400 runs: MagicPIG's rule misses least of the samplers",
            least,
            ", ".join(f"B={b}: {sweep['inclusion'][i]:.3f}" for i, b in enumerate(budgets)),
        ),
        Claim(
            "01",
            "...and less than TopK except one key short of all",
            topk_wins.tolist() == [sink.n - 1],
            f"TopK misses less only at B = {', '.join(map(str, topk_wins))}",
        ),
        Claim(
            "01",
            "Sink: TopK's miss first drops below sigma_w/sqrt(B) only at most keys",
            first / sink.n > 0.5,
            f"B = {first} of {sink.n} ({first / sink.n:.0%})",
        ),
        Claim(
            "01",
            "Importance sampling, 12 draws: the true weights do best of the sharpnesses tried",
            min(q3, key=q3.get) == 1.0,
            ", ".join(f"{k:g}: {e:.3f}" for k, e in q3.items()),
        ),
        Claim(
            "01",
            "...first more slowly than 1/sqrt(B) (local slopes to B = 4 above -0.5), then faster (below it from B = 4)",
            bool(np.all(is_local[:2] > -0.5) and np.all(is_local[2:] < -0.5)),
            f"local {', '.join(f'{x:+.2f}' for x in is_local)}; straight-line fit {is_fit:.2f}",
        ),
        Claim("01", "TopK is exact when the budget is every key (all scenarios)", worst < 1e-12, below(worst, 1e-12)),
    ]


def _z(samples, target):
    """How many standard errors the mean of ``samples`` sits from ``target``."""
    return float((samples.mean() - target) / (samples.std(ddof=1) / math.sqrt(samples.size)))
