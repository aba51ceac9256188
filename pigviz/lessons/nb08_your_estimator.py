"""Notebook 08, your estimator: the warm-up's estimator, the worked example, the tables the
notebook shows and the claims it states, re-derived.

The numbers come from :func:`pigviz.study.estimators.evaluate_estimator` on the shipped
capture (4 layers x 3 query heads x 64 positions of SmolLM2-135M at 8k), at 2% and 5% of
the keys, against TopK, MagicPIG and Quest on the same rows. The speed figure comes from
``benchmarks/bench_evaluate.py`` (``pigviz/data/bench_evaluate_cpu.json``).
"""

from __future__ import annotations

import inspect
import json

import numpy as np

from pigviz._util.fmt import below
from pigviz.attention import cost, protocol
from pigviz.lessons.exercises import is_blank, solutions_enabled
from pigviz.lessons.exercises.nb08 import corrected_sample
from pigviz.lessons.tables import table
from pigviz.lessons.verify import Claim
from pigviz.model import shipped
from pigviz.model.shipped import verified_path
from pigviz.study import estimators

__all__ = [
    "claims",
    "uniform_sample",
    "topk_plus_tail",
    "no_correction",
    "yours_or_worked_example",
    "OpenExerciseBlank",
    "labels",
    "ranking_table",
    "standing",
    "speed",
    "correction_factor",
    "peers_table",
    "combine",
    "summary",
    "correction_line",
    "worked_example_text",
    "bytes_line",
    "wider_window_answer",
    "sparq_answer",
    "per_layer_answer",
    "dropped_weight",
    "BENCH_FILE",
    "BENCH_COMMAND",
]

BENCH_FILE = "bench_evaluate_cpu.json"
BENCH_COMMAND = "python benchmarks/bench_evaluate.py --json pigviz/data/bench_evaluate_cpu.json --record"
SPEED_TARGET_S = 30.0


# --------------------------------------------------------------------------- the estimators


def uniform_sample(q, keys, values, budget, sinks=4, recent=64):
    """Read the sinks and the recent window exactly; draw the rest of the budget uniformly."""
    n = len(keys)
    sinks = min(sinks, budget)
    recent = min(recent, budget - sinks)
    exact = np.r_[np.arange(sinks), np.arange(n - recent, n)]
    rest = np.arange(sinks, n - recent)  # the keys the sample is drawn from
    drawn = np.random.default_rng(n).choice(rest, size=min(budget - len(exact), len(rest)), replace=False)
    return corrected_sample(q, keys, values, exact, drawn), np.r_[exact, drawn]


uniform_sample.bytes_read = protocol.costs_like("streaming")  # it reads its keys and values, nothing else


def no_correction(q, keys, values, budget):
    """The warm-up's estimator with the same draws but no (keys left) / (keys drawn) scaling."""
    out, read = uniform_sample(q, keys, values, budget)
    s = keys[read] @ q / np.sqrt(len(q))
    w = np.exp(s - s.max())
    return w @ values[read] / w.sum(), read


no_correction.bytes_read = protocol.costs_like("streaming")


def topk_plus_tail(q, keys, values, budget):
    """TopK, plus the weight TopK drops, given to the mean value of the keys it drops."""
    scores = keys @ q / np.sqrt(len(q))  # every score, as TopK computes them
    m = min(budget, len(keys))
    top = np.argpartition(scores, -m)[-m:]  # the m highest scores: the keys read
    w = np.exp(scores - scores.max())
    tail_weight = w.sum() - w[top].sum()  # what TopK leaves out of the softmax's sum
    # A running sum of the values, kept as the cache is written (as SparQ keeps their mean),
    # minus the values read: the mean value of the keys TopK drops.
    tail_mean = (values.sum(axis=0) - values[top].sum(axis=0)) / max(len(keys) - m, 1)
    return (w[top] @ values[top] + tail_weight * tail_mean) / w.sum(), top


def _topk_plus_tail_bytes(n, d, dv, keys_read):
    """TopK's bytes (every key scored, the kept values read) plus the running sum, one vector."""
    return protocol.costs_like("topk")(n, d, dv, keys_read) + 2 * dv


topk_plus_tail.bytes_read = _topk_plus_tail_bytes


class OpenExerciseBlank(AssertionError):
    """The open exercise is still blank. Jupyter shows the message and the way on, no frames."""

    def _render_traceback_(self) -> list[str]:
        lines = str(self).splitlines()
        return [f"\x1b[31m✗ {lines[0]}\x1b[0m", *lines[1:]]


def yours_or_worked_example(fn):
    """``fn`` once written; while its body is ``...``: the worked example if solutions are on
    (PIGVIZ_SOLUTIONS=1, ``ex.enable_solutions()``), else :class:`OpenExerciseBlank`."""
    if not is_blank(fn):
        return fn
    if solutions_enabled():
        print(f"{fn.__name__} is blank and solutions are on, so the worked example topk_plus_tail stands in")
        return topk_plus_tail
    raise OpenExerciseBlank(
        f"{fn.__name__} is still blank: write any estimator of the protocol {protocol.SIGNATURE}\n"
        f"stuck? `{fn.__name__} = nb08.topk_plus_tail` goes on with the worked example; it is folded below"
    )


# --------------------------------------------------------------------------- tables


def labels(rows) -> dict:
    """How the tables name each estimator in ``rows``: the library's names, yours as it is."""
    names = dict.fromkeys(r["estimator"] for r in rows)
    return {n: estimators.LABELS.get(n, n) for n in names}


def ranking_table(rows, fraction, *, reference: str = "topk"):
    """The estimators of ``rows`` at one budget fraction, best first (a rendered table)."""
    ranked = [r for r in estimators.ranking(rows, reference) if r["fraction"] == fraction]
    if not ranked:
        raise ValueError(f"fraction must be one of the rows' budgets {sorted({r['fraction'] for r in rows})}")
    names = labels(rows)
    ref = estimators.LABELS.get(reference, reference)
    out = [
        {
            "rank": r["rank"],
            "estimator": names[r["estimator"]],
            "mean error": r["error"],
            f"error / {ref}'s": r["vs_reference"],
            f"beats {ref} on": r["wins"],
            "keys read": r["budget_used"],
            "bytes read, of dense": r["bytes_share"],
        }
        for r in ranked
    ]
    return table(
        out,
        formats={
            "mean error": "{:.3f}",
            f"error / {ref}'s": "{:.2f}",
            f"beats {ref} on": "{:.0%}",
            "keys read": "{:.1%}",
            "bytes read, of dense": "{:.1%}",
        },
        highlight={"mean error": "min"},
        caption=f"At {fraction:.0%} of the keys: {ranked[0]['rows']} rows each (4 layers x 3 heads x 64 positions)",
    )


def standing(rows, name: str, reference: str = "topk") -> str:
    """One sentence per budget: where estimator ``name`` ranks, its error against the
    reference's and on how many rows it beats it."""
    ranked = estimators.ranking(rows, reference)
    mine = [r for r in ranked if r["estimator"] == name]
    if not mine:
        raise ValueError(f"name must be an estimator of the rows, one of {sorted(labels(rows))}, got {name!r}")
    count = {f: sum(r["fraction"] == f for r in ranked) for f in {r["fraction"] for r in ranked}}
    parts = [
        f"at {r['fraction']:.0%}: rank {r['rank']} of {count[r['fraction']]}, mean error {r['error']:.3f}, "
        f"{r['vs_reference']:.2f}x {estimators.LABELS.get(reference, reference)}'s, better than it on "
        f"{r['wins']:.0%} of the rows"
        for r in mine
    ]
    return f"{name}: " + "; ".join(parts) + "."


def correction_factor(n: int, budget: int, sinks: int = 4, recent: int = 64) -> str:
    """What the warm-up's correction is on a row of ``n`` keys at ``budget``."""
    sinks = min(sinks, budget)
    recent = min(recent, budget - sinks)
    exact = sinks + recent
    drawn = min(budget - exact, n - exact)
    if drawn < 1:
        return f"a budget of {budget} keys leaves nothing to draw after the {exact} exact keys"
    return (
        f"a budget of {budget} keys: {exact} exact, {drawn} drawn from the other {n - exact:,}, "
        f"so each drawn key counts {(n - exact) / drawn:.1f} times"
    )


def peers_table(q, keys, values, budget: int, names):
    """The library's estimators ``names`` on one row at one budget: keys read, error, bytes."""
    exact = protocol.exact_output(q, keys, values)
    n, d, dv = keys.shape[0], keys.shape[1], values.shape[1]
    rows = []
    for name in names:
        est = estimators.library_estimator(name, **({"heads": 9} if name in ("magicpig", "mp_exact_top") else {}))
        out, read = protocol.call(est, q, keys, values, budget)
        rows.append(
            {
                "estimator": estimators.LABELS.get(name, name),
                "keys read": int(read.size),
                "error": float(np.linalg.norm(out - exact) / np.linalg.norm(exact)),
                "bytes read, of dense": est.bytes_read(n, d, dv, int(read.size)) / cost.dense_bytes(n, d, dv),
            }
        )
    return table(
        rows,
        formats={"error": "{:.3f}", "bytes read, of dense": "{:.1%}"},
        highlight={"error": "min"},
        caption=f"One query ({n:,} keys visible), a budget of {budget} keys",
    )


def combine(*row_lists) -> list[dict]:
    """The rows of several evaluations, each estimator once (the first list that has it wins)."""
    seen, out = set(), []
    for rows in row_lists:
        names = {r["estimator"] for r in rows} - seen
        out.extend(r for r in rows if r["estimator"] in names)
        seen |= names
    return out


def summary(rows) -> list[dict]:
    """:func:`pigviz.study.estimators.summary` (what the figures draw)."""
    return estimators.summary(rows)


def _entry(rows, name, fraction):
    for e in estimators.summary(rows):
        if e["estimator"] == name and e["fraction"] == fraction:
            return e
    raise ValueError(f"no rows of {name!r} at {fraction}")


def correction_line(
    rows, plain, corrected: str = "uniform_sample", uncorrected: str = "no_correction", reference: str = "topk"
) -> str:
    """The warm-up's mean error with and without the N/m correction, at each budget, and both
    against the reference's (TopK's) error on the same rows."""
    both = combine(rows, plain)
    fractions = sorted({r["fraction"] for r in plain})
    pairs = {f: (_entry(both, uncorrected, f)["error"], _entry(both, corrected, f)["error"]) for f in fractions}
    parts = [f"at {f:.0%}: {a:.3f} without the correction, {b:.3f} with it" for f, (a, b) in pairs.items()]
    helps = [f"{f:.0%}" for f, (a, b) in pairs.items() if b < a]
    hurts = [f"{f:.0%}" for f, (a, b) in pairs.items() if b >= a]
    verdict = (
        "The correction lowers the error at every budget."
        if not hurts
        else f"The correction lowers the error at {', '.join(helps) or 'no budget'} and raises it at "
        f"{', '.join(hurts)}."
    )
    ref = {f: _entry(both, reference, f)["error"] for f in fractions}
    name = estimators.LABELS.get(reference, reference)
    against = "; ".join(f"at {f:.0%}: {a / ref[f]:.1f}x without, {b / ref[f]:.1f}x with" for f, (a, b) in pairs.items())
    return "Mean error " + "; ".join(parts) + ". " + verdict + f" Against {name}'s mean error: {against}."


def _worked(rows):
    if any(r["estimator"] == "topk_plus_tail" for r in rows):
        return rows
    return combine(rows, estimators.evaluate_estimator(topk_plus_tail, baselines=()))


def worked_example_text(rows) -> str:
    """The worked example's source, why it works, and where it stands on ``rows``."""
    rows = _worked(rows)
    source = inspect.getsource(topk_plus_tail) + "\n\n" + inspect.getsource(_topk_plus_tail_bytes)
    return (
        f"```python\n{source}\ntopk_plus_tail.bytes_read = _topk_plus_tail_bytes\n```\n\n"
        "TopK renormalises the weights of the keys it keeps, so it misses by the weight it drops times the gap "
        "between the kept keys' mean value and the dropped keys' (notebook 01). Having computed every score, it "
        "knows that dropped weight exactly; what it lacks is the dropped keys' values. Their plain mean, from a "
        "running sum a system keeps as it writes the cache (minus the values it read anyway), is a rough stand-in "
        "that costs one vector, and on these heads it is closer than leaving the weight out. "
        + standing(rows, "topk_plus_tail")
    )


def bytes_line(rows, name: str) -> str:
    """Per budget: the bytes each estimator of ``rows`` reads over dense's, where declared."""
    names = labels(rows)
    parts = []
    for f in sorted({r["fraction"] for r in rows}):
        shares = [
            f"{names[e['estimator']]} {e['bytes_share']:.1%}"
            for e in estimators.summary(rows)
            if e["fraction"] == f and e["bytes_share"] is not None
        ]
        parts.append(f"at {f:.0%} of the keys: " + ", ".join(shares))
    mine = [e for e in estimators.summary(rows) if e["estimator"] == name]
    note = "" if all(e["bytes_share"] is not None for e in mine) else f" ({name} declares no bytes_read)"
    return "Bytes read per step, of dense attention's: " + "; ".join(parts) + note


def wider_window_answer(rows, wide, name: str = "uniform_wide") -> str:
    """Question 1: the warm-up with a recent window of 256 at 5%."""
    f = sorted({r["fraction"] for r in wide})[0]
    before, after = _entry(rows, "uniform_sample", f), _entry(wide, name, f)
    n = max(r["n"] for r in wide)
    budget = max(r["budget"] for r in wide if r["n"] == n)
    lower = after["error"] < before["error"]
    return (
        f"At {f:.0%} the mean error goes from **{before['error']:.3f}** (recent window of 64) to "
        f"**{after['error']:.3f}** (256): " + ("lower" if lower else "not lower") + ". At the last position, "
        f"with a window of 64, {correction_factor(n, budget)}; with 256, {correction_factor(n, budget, recent=256)}. "
        + (
            "The recent tokens carry much of the weight in many heads: reading more of them exactly is worth more "
            "than the draws it costs, although each remaining draw stands for more keys."
            if lower
            else "The draws the window takes were worth more than the recent keys it adds."
        )
    )


def sparq_answer(rows, sparq_rows) -> str:
    """Question 2: SparQ against TopK and the worked example, in error and in bytes."""
    rows = _worked(combine(rows, sparq_rows))
    parts, share, behind = [], [], []
    for f in sorted({r["fraction"] for r in sparq_rows}):
        s, t, w = (_entry(rows, m, f) for m in ("sparq", "topk", "topk_plus_tail"))
        parts.append(
            f"at {f:.0%}: SparQ {s['error']:.3f} reading {s['bytes_share']:.1%} of dense's bytes, TopK "
            f"{t['error']:.3f} ({t['bytes_share']:.1%}), topk_plus_tail {w['error']:.3f} ({w['bytes_share']:.1%})"
        )
        share.append(s["bytes_share"] / t["bytes_share"])
        behind.append(s["error"] > max(t["error"], w["error"]))
    return (
        "Mean errors on the shipped rows: "
        + "; ".join(parts)
        + ". SparQ's scores from a few channels miss some of the top keys and give the rest of the weight only "
        "approximately, "
        + ("so it trails both" if all(behind) else "and it does not trail both everywhere")
        + f"; it reads {min(share):.0%} to {max(share):.0%} of TopK's bytes. Finding the heavy keys cheaply is "
        "what an affordable estimator has to do better."
    )


def dropped_weight(fraction: float) -> dict[int, float]:
    """Per shipped layer: the mean share of the true attention weight that TopK leaves out at
    ``fraction`` of the keys, over its 3 query heads and 64 positions."""
    out = {}
    for row, layer in enumerate(shipped.SHIPPED_LAYERS):
        dropped = []
        for head in range(3):
            q, keys, _ = estimators.shipped_queries(row, head)
            first = len(keys) - len(q)
            for t in range(len(q)):
                n = first + t + 1
                s = keys[:n] @ q[t] / np.sqrt(q.shape[1])
                w = np.exp(s - s.max())
                m = protocol.keys_for(fraction, n)
                dropped.append(1.0 - np.partition(w, n - m)[n - m :].sum() / w.sum())
        out[layer] = float(np.mean(dropped))
    return out


def per_layer_answer(rows) -> str:
    """Question 3: mean error per layer of TopK and the worked example, at each budget, and
    the weight TopK drops in each layer."""
    rows = _worked(rows)
    layers = sorted({r["layer"] for r in rows})

    def mean(name, f, layer):
        return float(
            np.mean([r["error"] for r in rows if (r["estimator"], r["fraction"], r["layer"]) == (name, f, layer)])
        )

    out = []
    for f in sorted({r["fraction"] for r in rows}):
        pairs = {layer: (mean("topk", f, layer), mean("topk_plus_tail", f, layer)) for layer in layers}
        drop = dropped_weight(f)
        worst = max(pairs, key=lambda x: pairs[x][0])
        best = min(pairs, key=lambda x: pairs[x][1] / pairs[x][0])
        out.append(
            f"**at {f:.0%}**: "
            + ", ".join(
                f"layer {x} {t:.4f} -> {w:.4f} (TopK drops {drop[x]:.2%} of the weight)" for x, (t, w) in pairs.items()
            )
            + f". TopK errs most in layer {worst}, where the worked example takes "
            f"{1 - pairs[worst][1] / pairs[worst][0]:.1%} off its error; it takes off most, "
            f"{1 - pairs[best][1] / pairs[best][0]:.1%}, in layer {best}."
        )
    return (
        "Mean error, TopK -> topk_plus_tail:\n\n* "
        + "\n* ".join(out)
        + "\n\nWhere TopK drops much of the weight (layer 2's heads spread it; notebook 06: little on the sink), "
        "one plain mean of the dropped values has to stand in for a lot, and it helps little; where TopK drops "
        "little, filling it in removes most of what TopK misses."
    )


def speed(path=None) -> dict:
    """The benchmark's figures (``benchmarks/bench_evaluate.py``): seconds for the shipped
    heads from cold, baselines included, and for a numpy estimator once they are kept."""
    path = path or verified_path(BENCH_FILE, BENCH_COMMAND)
    return json.loads(open(path, encoding="utf-8").read())


# --------------------------------------------------------------------------- claims


def _rows():
    base = estimators.evaluate_estimator(None)
    extra = [
        r
        for est in (uniform_sample, no_correction, topk_plus_tail)
        for r in estimators.evaluate_estimator(est, baselines=())
    ]
    return extra + base


def claims() -> list[Claim]:
    rows = _rows()
    entries = {(e["estimator"], e["fraction"]): e for e in estimators.ranking(rows)}
    fractions = sorted({r["fraction"] for r in rows})
    out = []

    def claim(text, passed, value):
        out.append(Claim(notebook="08", text=text, passed=bool(passed), value=value))

    err = lambda name, f: entries[(name, f)]["error"]  # noqa: E731
    base_best = [min(("topk", "magicpig", "quest"), key=lambda m, f=f: err(m, f)) for f in fractions]
    claim(
        "of the three baselines, TopK has the lowest mean error at 2% and at 5% of the keys",
        base_best == ["topk"] * len(fractions),
        ", ".join(
            f"{f:.0%}: TopK {err('topk', f):.3f}, MagicPIG {err('magicpig', f):.3f}, Quest {err('quest', f):.3f}"
            for f in fractions
        ),
    )
    ratio = [entries[("uniform_sample", f)]["vs_reference"] for f in fractions]
    claim(
        "the warm-up's uniform sample (exact sinks and recent window, N/m correction) loses to TopK at both budgets",
        all(x > 1 for x in ratio),
        ", ".join(f"{x:.1f}x TopK's error" for x in ratio),
    )
    fixed = [(err("no_correction", f), err("uniform_sample", f)) for f in fractions]
    claim(
        "the (keys left) / (keys drawn) correction raises the uniform sample's mean error at 2% of the keys "
        "and lowers it at 5%",
        fixed[0][1] > fixed[0][0] and fixed[1][1] < fixed[1][0],
        ", ".join(f"{f:.0%}: {n:.3f} -> {c:.3f}" for f, (n, c) in zip(fractions, fixed)),
    )
    mine = [entries[("topk_plus_tail", f)] for f in fractions]
    claim(
        "the worked example (TopK + the dropped weight on the dropped keys' mean value) beats TopK at both "
        "budgets, on most rows",
        all(e["vs_reference"] < 1 and e["wins"] > 0.5 for e in mine),
        ", ".join(f"{e['vs_reference']:.2f}x, better on {e['wins']:.0%} of rows" for e in mine),
    )
    topk_bytes = [entries[("topk", f)]["bytes_share"] for f in fractions]
    claim(
        "it reads TopK's keys and bytes, plus one stored vector (the running sum of the values)",
        all(
            abs(e["bytes_share"] - t) < 1e-3 and e["budget_used"] == entries[("topk", e["fraction"])]["budget_used"]
            for e, t in zip(mine, topk_bytes)
        ),
        ", ".join(f"{e['bytes_share']:.1%} vs {t:.1%} of dense's bytes" for e, t in zip(mine, topk_bytes)),
    )
    exact = estimators.evaluate_estimator(protocol.exact(), budgets=(1.0,), positions=(0, 63), baselines=())
    worst = max(r["error"] for r in exact)
    claim(
        "an exact estimator at a budget of every key reproduces exact attention on the shipped rows",
        worst < 1e-12,
        f"largest error {below(worst, 1e-12)}",
    )
    q, keys, values = estimators.shipped_row()
    try:
        protocol.call(protocol.exact(), q, keys, values, 164)
        refused = ""
    except protocol.OverBudget as exc:
        refused = str(exc)
    claim(
        "reading more keys than the budget is refused, with the estimator, the count and the budget named",
        "'exact' read 8192 distinct keys" in refused and "budget of 164" in refused,
        refused or "not refused",
    )
    bench = speed()
    claim(
        f"evaluate_estimator on the shipped heads with a numpy estimator, baselines included, takes under "
        f"{SPEED_TARGET_S:.0f} s on one core (benchmarks/bench_evaluate.py)",
        bench["cold_cpu_s"] < SPEED_TARGET_S,
        f"{bench['cold_cpu_s']:.1f} s CPU ({bench['cold_wall_s']:.1f} s wall); "
        f"yours alone {bench['yours_cpu_s']:.1f} s",
    )
    return out
