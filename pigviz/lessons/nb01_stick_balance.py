"""Notebook 01, the stick-balance toy: the numbers it states, each re-derived with a pass condition,
and the formatters that render the toy library's rows as tables (the studies themselves live in
``pigviz.toy.stick_balance``)."""

from __future__ import annotations

import math

import numpy as np

from pigviz._util.fmt import below
from pigviz.lessons import tables
from pigviz.lessons.verify import Claim
from pigviz.plots.stick_balance import METHOD_STYLE
from pigviz.toy.stick_balance import (
    DEFAULT_BUDGET,
    SCENARIOS,
    ErrorCurves,
    custom_scenario,
    draws_vs_keys,
    error_curves,
    estimate_rows,
    hybrid_losses_to_topk,
    loglog_slope,
    make_scenario,
    repeat_estimates,
    rough_proposal,
    sharpness_study,
    topk,
)

__all__ = [
    "PROSE_DEFINED",
    "claims",
    "markdown_table",
    "draw_count",
    "estimates_table",
    "runs_table",
    "curves_table",
    "errors_at_table",
    "draws_vs_keys_table",
    "sharpness_table",
]

# Numbers the markdown writes that are not measured: the toy's parameters and fixed facts, a citation.
PROSE_DEFINED = {
    "2025": "the MagicPIG paper's year (ICLR 2025)",
    "12": "the default budget, toy.stick_balance.DEFAULT_BUDGET",
    "32": "keys per scenario, toy.stick_balance.DEFAULT_N",
    "0.36": "the sink scenario's flat values are drawn from [0.36, 0.96] (tests/lessons/test_prose_010203.py)",
    "0.96": "the sink scenario's flat values are drawn from [0.36, 0.96]",
    "0.02": "the sink token's value in the sink scenario",
    "0.5": "the rough proposal's sharpness, toy.stick_balance.rough_proposal",
    "4000": "the number of runs Question 5 asks for",
    "20000": "runs per row of the Going-further tables",
    "2000": "runs per error in §7's table",
    "400": "runs per budget of §9's curves",
    "10": "the factor by which §4 squeezes the values towards their balance point",
}


# ----------------------------------------------------------------------------- tables


def markdown_table(t: tables.Table) -> str:
    """A ``Table`` as a Markdown pipe table (its caption in italics above), for a table that has to
    sit inside Markdown text, such as a folded answer. The cells are the table's own formatted text."""
    if not isinstance(t, tables.Table):
        raise TypeError(f"t must be a lessons Table, got {type(t).__name__}")
    columns = [str(c) for c in t.text.columns]
    numeric = [t.frame[c].dtype.kind in "iuf" for c in t.text.columns]
    lines = [f"*{t.caption}*", ""] if t.caption else []
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "|".join("---:" if num else ":---" for num in numeric) + "|")
    for _, row in t.text.iterrows():
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def _label(method: str) -> str:
    return METHOD_STYLE[method][0]


def _draws_text(draws: float) -> str:
    return "unlimited" if math.isinf(draws) else f"{draws:.0f}"


def draw_count(draws: float) -> str:
    """A number of draws to two significant digits, as text: 28, 460, 14,000, 430,000, 3.9e+11
    (the digits beyond the second move from one set of runs to the next)."""
    if math.isinf(draws):
        return "unlimited"
    if draws < 0 or math.isnan(draws):
        raise ValueError(f"draws must be >= 0, got {draws}")
    if draws < 100:
        return f"{draws:.0f}"
    if draws >= 1e6:
        return f"{draws:.1e}"
    return f"{float(f'{draws:.2g}'):,.0f}"


def estimates_table(estimates: dict, caption: str | None = None) -> tables.Table:
    """``toy.stick_balance.estimate_rows`` as a table, each method under its figure label."""
    rows = [{**row, "method": _label(row["method"])} for row in estimate_rows(estimates)]
    formats = {"estimate": "{:.3f}", "miss": "{:+.3f}", "draws": _draws_text}
    return tables.table(rows, formats=formats, caption=caption)


def runs_table(runs: dict, truth: float, caption: str | None = None) -> tables.Table:
    """Many runs per method (``repeat_estimates``): where they land on average, how far they
    scatter, and the truth. A deterministic method (TopK) has a spread of 0."""
    rows = []
    for method, values in runs.items():
        values = np.asarray(values, dtype=np.float64)
        rows.append(
            {
                "method": _label(method),
                f"mean of {values.size} runs": float(values.mean()),
                "spread (std)": float(values.std()),
                "truth": float(truth),
            }
        )
    formats = {c: "{:.4f}" for c in rows[0] if c != "method"}
    return tables.table(rows, formats=formats, caption=caption)


def curves_table(
    curves: ErrorCurves, digits: int = 4, caption: str | None = None, reference: bool = True
) -> tables.Table:
    """Error curves as a table: one row per budget, one column per method, and (``reference``)
    sigma_w/sqrt(B), the RMS error of B independent draws from the true weights."""
    if not isinstance(curves, ErrorCurves):
        raise TypeError(f"curves must be ErrorCurves (see error_curves), got {type(curves).__name__}")
    spec = f"{{:.{digits}f}}"
    rows = []
    for i, b in enumerate(curves.budgets):
        row = {"B": int(b)}
        for method, err in curves.errors.items():
            row[f"{_label(method)}: {'error' if method == 'topk' else 'RMS error'}"] = err[i]
        if reference:
            row["σ_w/√B"] = curves.reference[i]
        rows.append(row)
    formats = {c: spec for c in rows[0] if c != "B"}
    return tables.table(rows, formats=formats, caption=caption)


def errors_at_table(curves: ErrorCurves, budget: int, caption: str | None = None) -> tables.Table:
    """Every method's error at one budget of ``curves``, then the sigma_w/sqrt(B) reference."""
    if not isinstance(curves, ErrorCurves):
        raise TypeError(f"curves must be ErrorCurves (see error_curves), got {type(curves).__name__}")
    where = np.flatnonzero(curves.budgets == budget)
    if where.size == 0:
        raise ValueError(f"budget must be one of the curves' budgets {curves.budgets.tolist()}, got {budget}")
    at = int(where[0])
    column = f"error at B = {budget}"
    rows = [{"method": _label(m), column: float(e[at])} for m, e in curves.errors.items()]
    rows.append({"method": "σ_w/√B (B independent draws)", column: float(curves.reference[at])})
    return tables.table(rows, formats={column: "{:.3f}"}, highlight={column: "min"}, caption=caption)


def draws_vs_keys_table(rows: list[dict], caption: str | None = None) -> tables.Table:
    """``toy.stick_balance.draws_vs_keys`` as a table: errors to 4 digits, draws to 1."""
    formats = {c: "{:.4f}" for c in rows[0] if c not in ("scenario", "draws made (mean)")}
    return tables.table(rows, formats={**formats, "draws made (mean)": "{:.1f}"}, caption=caption)


def sharpness_table(rows: list[dict], columns=None, caption: str | None = None) -> tables.Table:
    """``toy.stick_balance.sharpness_study`` as a table (only ``columns``, when given, after the
    sharpness), the lowest error of each budget rule highlighted."""
    if columns is not None:
        rows = [{"sharpness": r["sharpness"], **{c: r[c] for c in columns}} for r in rows]
    formats = {
        "sharpness": "{:g}",
        "RMS, distinct keys": "{:.4f}",
        "paired z": "{:.1f}",
        "draws made (median)": draw_count,
        "RMS, fixed draws": "{:.3f}",
    }
    highlight = {c: "min" for c in ("RMS, distinct keys", "RMS, fixed draws") if c in rows[0]}
    present = {c: f for c, f in formats.items() if c in rows[0]}
    return tables.table(rows, formats=present, highlight=highlight, caption=caption)


# ----------------------------------------------------------------------------- claims


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
    is_fit = loglog_slope(is_all.budgets, is_all.errors["importance"])
    is_local = np.diff(np.log(is_all.errors["importance"])) / np.diff(np.log(is_all.budgets))  # 1->2, ..., 24->31
    correction = sink.weights / rough_proposal(sink.scores)  # w/u per key; key 0 is the sink
    sink_vs_flat = float(correction[0] / np.delete(correction, 0).mean())
    flat = error_curves(
        make_scenario("flat", n=1024), [2, 4, 8, 16, 32, 64], n_seeds=1000, seed=4, methods=("sampling",)
    )
    slope = loglog_slope(flat.budgets, flat.errors["sampling"])
    ratio = flat.errors["sampling"][3] / flat.reference[3]
    flat32 = make_scenario("flat")
    squeezed = custom_scenario(flat32.truth + 0.1 * (flat32.values - flat32.truth), flat32.scores)
    loose = error_curves(flat32, [8], n_seeds=2000, seed=7, methods=("sampling",)).errors["sampling"][0]
    tight = error_curves(squeezed, [8], n_seeds=2000, seed=7, methods=("sampling",)).errors["sampling"][0]
    dvk = {row["scenario"]: row for row in draws_vs_keys(budget)}
    fixed_ratio = [dvk[s][f"{budget} draws"] / dvk[s]["σ_w/√B"] for s in SCENARIOS]
    keys_ratio = {s: dvk[s][f"{budget} distinct keys"] / dvk[s]["σ_w/√B"] for s in SCENARIOS}
    worst = max(abs(topk(s.values, s.weights, s.n).value - s.truth) for s in map(make_scenario, SCENARIOS))
    pk = error_curves(peaked, [budget], n_seeds=2000, seed=5, methods=("sampling", "hybrid")).errors
    peaked_topk = topk(peaked.values, peaked.weights, budget).value - peaked.truth
    sk = error_curves(sink, [budget], n_seeds=2000, seed=5, methods=("sampling", "hybrid")).errors
    sink_all = error_curves(sink, n_seeds=400, seed=0)  # notebook 01, section 9
    at = list(sink_all.budgets).index(budget)
    sink_smp, sink_ref = sink_all.errors["sampling"][at], sink_all.reference[at]
    better = sink_all.budgets[(sink_all.errors["topk"] < sink_all.errors["sampling"]) & (sink_all.budgets > 1)]
    first = int(better.min()) if better.size else -1
    ranked = sorted(sink_all.errors, key=lambda m: sink_all.errors[m][at])
    quarter = {
        sc.name: error_curves(
            sc, [budget], n_seeds=2000, seed=5, methods=("sampling", "hybrid"), n_exact=budget // 4
        ).errors["hybrid"][0]
        for sc in (peaked, sink)
    }
    kept = topk(sink.values, sink.weights, budget).read
    missed = np.setdiff1d(np.arange(sink.n), kept)
    w_missed = float(sink.weights[missed].sum())
    mean_kept = float(sink.weights[kept] @ sink.values[kept] / sink.weights[kept].sum())
    mean_missed = float(sink.weights[missed] @ sink.values[missed] / w_missed)
    bias_formula = w_missed * (mean_kept - mean_missed)
    kept_share = float(sink.weights[0] / sink.weights[kept].sum())  # the sink's say after TopK rescales
    peaked_drop = float(1 - peaked.weights[topk(peaked.values, peaked.weights, budget).read].sum())
    sharp = {row["sharpness"]: row for row in sharpness_study(sink, budget)}
    mid = [sharp[k]["RMS, distinct keys"] for k in (2.0, 3.0, 4.0)]
    best_mid = min(mid)
    worse8 = sharp[8.0]["RMS, distinct keys"] / best_mid - 1
    fixed_best = min(sharp, key=lambda k: sharp[k]["RMS, fixed draws"])
    losses = hybrid_losses_to_topk(budget=budget)
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
            quotes=(f"{mean_missed:.2f}", f"{mean_kept:.2f}"),  # "far above the kept keys' mean (0.66 against 0.21)"
        ),
        Claim(
            "01",
            f"Sink: rescaling TopK's {budget} kept weights gives the sink far more than its true share",
            kept_share > sink.weights[0] + 0.1,
            f"{kept_share:.0%} instead of {sink.weights[0]:.0%}",
        ),
        Claim(
            "01",
            f"Peaked: the keys TopK leaves out at {budget} hold almost no weight (W_M < 5%)",
            peaked_drop < 0.05,
            f"{peaked_drop:.0%}",
        ),
        Claim(
            "01",
            f"Sampling {budget} keys is unbiased: {runs}-run mean within 3 SE",
            abs(_z(smp, truth)) < 3,
            f"{smp.mean():.4f} ({_z(smp, truth):+.1f} SE)",
        ),
        Claim("01", "Sampling error ~ 1/sqrt(B): log-log slope, 1024 flat keys", -0.6 <= slope <= -0.4, f"{slope:.2f}"),
        Claim(
            "01", "Its size is the value spread: RMS(B=16) / (sigma_w/sqrt(16))", 0.9 <= ratio <= 1.1, f"{ratio:.2f}"
        ),
        Claim(
            "01",
            "Values squeezed 10x towards the truth: sampling's error 10x smaller",
            abs(tight / loose - 0.1) < 1e-9,
            f"{loose:.4f} -> {tight:.4f}",
        ),
        Claim(
            "01",
            f"{budget} i.i.d. draws: RMS error = sigma_w/sqrt(B) within 5%, all scenarios",
            all(abs(r - 1) < 0.05 for r in fixed_ratio),
            ", ".join(f"{s} {r:.2f}" for s, r in zip(SCENARIOS, fixed_ratio)),
        ),
        Claim(
            "01",
            f"{budget} distinct keys: a little below sigma_w/sqrt(B) if flat, well below where few keys dominate",
            0.8 < keys_ratio["flat"] < 1 and keys_ratio["peaked"] < 0.8 and keys_ratio["sink"] < 0.8,
            ", ".join(f"{s} {r:.2f}" for s, r in keys_ratio.items()),
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
        Claim(
            "01",
            "...first more slowly than 1/sqrt(B) (local slopes to B = 4 above -0.5), then faster (below it from B = 4)",
            bool(np.all(is_local[:2] > -0.5) and np.all(is_local[2:] < -0.5)),
            f"local {', '.join(f'{x:+.2f}' for x in is_local)}; straight-line fit {is_fit:.2f}",
            quotes=("-0.5",),
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
            f"Peaked, {budget} keys: TopK's miss well below oracle sampling's RMS error",
            abs(peaked_topk) < pk["sampling"][0] / 3,
            f"{peaked_topk:+.3f} vs {pk['sampling'][0]:.4f}",
        ),
        Claim(
            "01",
            f"Peaked, {budget} keys: hybrid RMS error below plain sampling's",
            pk["hybrid"][0] < pk["sampling"][0],
            f"{pk['hybrid'][0]:.4f} vs {pk['sampling'][0]:.4f}",
        ),
        Claim(
            "01",
            f"Sink, {budget} keys: hybrid RMS error below plain sampling's",
            sk["hybrid"][0] < sk["sampling"][0],
            f"{sk['hybrid'][0]:.4f} vs {sk['sampling'][0]:.4f}",
        ),
        Claim(
            "01",
            f"Sink, {budget} keys, 400 runs: hybrid < oracle sampling < importance sampling < TopK",
            ranked == ["hybrid", "sampling", "importance", "topk"]
            and sink_all.errors["importance"][at] > 0.9 * sink_all.errors["topk"][at],
            ", ".join(f"{m} {sink_all.errors[m][at]:.3f}" for m in ranked),
        ),
        Claim(
            "01",
            f"Hybrid reading {budget // 4} of {budget} exactly (same runs as half): worse in peaked, better in sink",
            quarter["peaked"] > pk["hybrid"][0] and quarter["sink"] < sk["hybrid"][0],
            f"peaked {pk['hybrid'][0]:.4f} -> {quarter['peaked']:.4f}, "
            f"sink {sk['hybrid'][0]:.4f} -> {quarter['sink']:.4f}",
        ),
        Claim(
            "01",
            f"Sink, {budget} keys: repeat draws put sampling below sigma_w/sqrt(B)",
            sink_smp < 0.8 * sink_ref,
            f"{sink_smp:.3f} vs {sink_ref:.3f}",
        ),
        Claim(
            "01",
            "Sink: TopK's miss first drops below sampling's (B > 1) only at most keys",
            first > 0 and first / sink.n > 0.5,
            f"B = {first} of {sink.n} ({first / sink.n:.0%})",
        ),
        Claim("01", "TopK is exact when the budget is every key (all scenarios)", worst < 1e-12, below(worst, 1e-12)),
        Claim(
            "01",
            f"Peaked, {budget} keys: the hybrid loses to TopK in most of 20 scenarios",
            losses > 10,
            f"{losses} of 20",
        ),
        Claim(
            "01",
            f"Sink, {budget} keys: IS sharpness 2-4 within 2%, 8 worse (paired runs)",
            max(mid) / best_mid < 1.02 and worse8 > 0.02 and sharp[8.0]["paired z"] > 5,
            f"{best_mid:.4f} to {max(mid):.4f}; 8: {worse8:+.0%} (z {sharp[8.0]['paired z']:.0f})",
        ),
        Claim(
            "01",
            f"...a gain bought with free repeats: median draws per run of {budget} distinct keys",
            sharp[1.0]["draws made (median)"] < 100 < 1000 < sharp[3.0]["draws made (median)"]
            and sharp[8.0]["draws made (median)"] > 1e9,
            "; ".join(f"{k:g}: {draw_count(sharp[k]['draws made (median)'])}" for k in (1.0, 2.0, 3.0, 4.0, 8.0)),
        ),
        Claim(
            "01",
            f"...with {budget} i.i.d. draws instead, sharpness 1 (u = w) does best of the sharpnesses tried",
            fixed_best == 1.0,
            f"{sharp[1.0]['RMS, fixed draws']:.3f} vs {sharp[3.0]['RMS, fixed draws']:.3f} at 3",
        ),
    ]


def _z(samples, target):
    """How many standard errors the mean of ``samples`` sits from ``target``."""
    return float((samples.mean() - target) / (samples.std(ddof=1) / math.sqrt(samples.size)))
