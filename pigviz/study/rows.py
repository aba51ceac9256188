"""The rows of the study's tables, as findings 1 and 2 show them: one dict per row, computed from
the shipped results (:func:`pigviz.study.findings.load_shipped_results`), the live experiments
(:mod:`pigviz.study.experiments`) and the shipped benchmark. Rendering (formats, captions) is
the caller's: ``pigviz.lessons.table(rows, formats=...)``.

Every function checks that its input has the shape it reads and names what is missing.
"""

from __future__ import annotations

import numpy as np

from pigviz.study.experiments import shipped_layer
from pigviz.study.findings import METHOD_LABELS, head_grid, matched_table, series_array, series_summary, summary_rows
from pigviz.study.run import series_id

__all__ = [
    "SERIES_LEGEND",
    "settings",
    "part1_rows",
    "matched_rows",
    "summary_legend_rows",
    "mass_rows",
    "sink_rows",
    "current_page_rows",
    "kl_sweep_rows",
    "magicpig_seed_spread",
    "seed_rows",
    "sampled_share_rows",
    "live_rows",
]

SERIES_LEGEND = {
    "magicpig": "MagicPIG at (K, L): exact set (4 sinks, 64 recent) plus the keys its tables sample, corrected by 1/u",
    "topk": "TopK at MagicPIG's budget: the keys with the highest scores (an oracle)",
    "oracle": "oracle sampling at MagicPIG's budget: draws from the true weights",
    "hybrid": "hybrid: the top half of the budget exactly, the rest drawn from the true weights",
    "quest": "Quest as its authors run it: pages of 16, the current page read, layers 0-1 dense",
    "rank_all": "Quest with every page ranked by its bound (no current page), sparse everywhere",
    "streaming": "StreamingLLM: the exact set and nothing else",
    "mp_exact_top": "finding 2 (a): MagicPIG's reads, the top half of its sample weighed as exact",
    "vattention": "finding 2 (b): sinks, recent window and Quest pages plus a uniform sample",
    "sparq": "finding 2 (c): SparQ, keys chosen by approximate scores from 8 of 64 channels",
    "no_correction": "MagicPIG's keys with a plain softmax (no 1/u)",
    "no_sink": "MagicPIG with the 4 sinks out of the exact set",
    "first_position": "MagicPIG at the first of the 64 positions only",
    "no_window": "MagicPIG with no recent window, first position only",
    "no_exact": "MagicPIG with no exact set at all, first position only",
}


# field of the benchmark's rows -> (column, format); a field shows when every row has it
def _need(d: dict, what: str, *keys) -> None:
    missing = [k for k in keys if k not in d]
    if missing:
        raise ValueError(f"{what} has no {', '.join(map(repr, missing))}")


def settings(results: dict) -> list[tuple]:
    """MagicPIG's (K, L) settings of the study, as tuples."""
    _need(results, "results", "spec", "series")
    return [tuple(s) for s in results["spec"]["settings"]]


def part1_rows(results: dict) -> list[dict]:
    """Per MagicPIG (K, L): its budget both ways and every Part 1 method's mean error at that
    budget (Quest as its authors run it also with its own budget over all layers)."""
    rows = []
    for kl in settings(results):
        mp = series_summary(results, series_id("magicpig", kl))

        def err(method, variant="main", kl=kl):
            return series_summary(results, series_id(method, kl, variant))["error"]

        rows.append(
            {
                "(K, L)": f"({kl[0]}, {kl[1]})",
                "budget": mp["budget"],
                "sampled (authors')": mp["budget_sampled"],
                "MagicPIG": mp["error"],
                "TopK": err("topk"),
                "oracle": err("oracle"),
                "hybrid": err("hybrid"),
                "Quest": err("quest"),
                "Quest budget": series_summary(results, series_id("quest", kl))["budget"],
                "Quest, rank all": err("quest", "rank_all"),
            }
        )
    return rows


def matched_rows(results: dict) -> list[dict]:
    """:func:`pigviz.study.findings.matched_table` flattened: one row per (setting, method),
    the reference (TopK) first with a ratio of 1."""
    rows = []
    for row in matched_table(results):
        kl = "({}, {})".format(*row["setting"])
        ref = row["reference"]
        base = {"(K, L)": kl, "budget": row["budget"]}
        rows.append(
            {**base, "method": ref["method"], "error": ref["error"], "/ TopK": 1.0}
            | {"bytes read": ref["bytes_share"], "cells won": "-"}
        )
        for method, m in row["methods"].items():
            rows.append(
                {**base, "method": method, "error": m["error"], "/ TopK": m["ratio"]}
                | {"bytes read": m["bytes_share"], "cells won": f"{m['wins']}/{m['cells']}"}
            )
    return rows


def summary_legend_rows(results: dict) -> list[dict]:
    """Every series with what it is (:data:`SERIES_LEGEND`), budgets, error and seed spread."""
    rows = []
    for r in summary_rows(results):
        key = r["variant"] if r["variant"] != "main" else r["method"]
        rows.append(
            {
                "series": r["name"],
                "what": SERIES_LEGEND.get(key, ""),
                "budget": r["budget"],
                "sampled": r.get("budget_sampled"),
                "error": r["error"],
                "± seeds": r["error_std"],
                "rows": r["rows"],
            }
        )
    return rows


def mass_rows(mass: dict) -> list[dict]:
    """``{row: experiments.mass_captured(row=row)}``: per head of each layer, the true weight on
    MagicPIG's reads (exact set and sample apart) and on TopK's as many keys."""
    out = []
    for m in mass.values():
        _need(m, "a mass_captured result", "layer", "heads", "budget", "exact", "sampled", "topk")
        for i, h in enumerate(m["heads"]):
            out.append(
                {
                    "layer": m["layer"],
                    "head": h,
                    "keys read": m["budget"][i],
                    "exact set": m["exact"][i],
                    "sampled": m["sampled"][i],
                    "MagicPIG total": m["exact"][i] + m["sampled"][i],
                    "TopK, as many keys": m["topk"][i],
                }
            )
    return out


def sink_rows(results: dict, sink_weight) -> list[dict]:
    """At (10, 150): the error without / with the sink in the exact set, for the heads that put
    over half their weight on token 0 and the others (medians), and the first-position variants."""
    sink_weight = np.asarray(sink_weight, dtype=float)
    with_sink = head_grid(results, "magicpig K10 L150")
    if sink_weight.shape != with_sink.shape:
        raise ValueError(f"sink_weight must be (layers, heads) = {with_sink.shape}, got {sink_weight.shape}")
    ratio = head_grid(results, "magicpig K10 L150 no_sink") / with_sink
    heavy = sink_weight > 0.5
    what = "error without / with sink (median)"
    rows = [
        {"heads": f"> 50% of their weight on token 0 ({heavy.sum()} of {heavy.size})", "what": what}
        | {"value": f"{np.median(ratio[heavy]):.2f}x"},
        {"heads": f"the others ({(~heavy).sum()})", "what": what, "value": f"{np.median(ratio[~heavy]):.2f}x"},
    ]
    for variant in ("first_position", "no_window", "no_exact"):
        r = series_summary(results, f"magicpig K10 L150 {variant}")
        rows.append(
            {"heads": f"all, first position only ({r['rows']} rows)", "what": METHOD_LABELS[variant]}
            | {"value": f"error {r['error']:.3f} at {r['budget']:.2%}"}
        )
    return rows


def current_page_rows(errors: dict) -> list[dict]:
    """``{(shipped row, share): (error with the current page read, with every page ranked)}``:
    per share, each shipped layer and their mean."""
    if not errors or any(len(k) != 2 or len(v) != 2 for k, v in errors.items()):
        raise ValueError("errors must map (row, share) to (current page read, every page ranked)")
    rows = []
    for share in sorted({s for _, s in errors}):
        pairs = sorted((row, v) for (row, s), v in errors.items() if s == share)
        for row, (read, ranked) in pairs:
            rows.append(
                {"share": share, "layer": shipped_layer(row)[0]}
                | {"current page read": read, "every page ranked": ranked}
            )
        read, ranked = np.mean([v for _, v in pairs], axis=0)
        rows.append(
            {"share": share, "layer": "mean", "current page read": float(read), "every page ranked": float(ranked)}
        )
    return rows


def kl_sweep_rows(sweep: list, topk: list) -> list[dict]:
    """``experiments.kl_sweep``'s two lists side by side: MagicPIG at each (K, L), TopK at the
    budget it measured."""
    if len(sweep) != len(topk):
        raise ValueError(f"sweep and topk must pair up, got {len(sweep)} and {len(topk)}")
    return [
        {"K": a["K"], "L": a["L"], "budget": a["budget"], "MagicPIG": a["error"], "TopK": b["error"]}
        for a, b in zip(sweep, topk)
    ]


def magicpig_seed_spread(results: dict) -> float:
    """The largest std across seeds of MagicPIG's mean error, over its main (K, L) series, as a
    share of that error."""
    out = []
    for kl in settings(results):
        s = series_summary(results, series_id("magicpig", kl))
        out.append(s["error_std"] / s["error"])
    return max(out)


def seed_rows(results: dict, kl_spread, positions: int) -> list[dict]:
    """The study's seed spreads beside notebook 07a's (``kl_spread``: its KL's std across seeds /
    mean, per (K, L), from ``pigviz.decode.stats.seed_spreads``; ``positions``: the teacher-forced
    positions each of its seeds averages)."""
    kl_spread = [float(x) for x in kl_spread]
    if not kl_spread:
        raise ValueError("kl_spread must hold one spread per (K, L)")
    cells = series_array(results, "magicpig K10 L150")  # (layers, seeds, heads)
    cell = (cells.std(axis=1, ddof=1) / cells.mean(axis=1)).ravel()
    rows_per_seed = series_summary(results, "magicpig K10 L150")["rows"]
    caches = len(results["layers"]) * results["kv_heads"]
    spread = "std across seeds / mean"
    return [
        {"measured": f"this study: MagicPIG's mean error, each of its {len(settings(results))} (K, L) series"}
        | {"averaged over (per seed)": f"{rows_per_seed:,} rows from {caches} (layer, KV head) caches"}
        | {spread: f"at most {magicpig_seed_spread(results):.1%}"},
        {
            "measured": "this study: one (layer, head) cell at (10, 150)",
            "averaged over (per seed)": f"{results['last']} rows",
        }
        | {spread: f"{np.median(cell):.1%} (median cell), up to {cell.max():.0%}"},
        {
            "measured": "notebook 07a: KL of the next-token distribution",
            "averaged over (per seed)": f"{positions} teacher-forced positions",
            spread: f"{min(kl_spread):.0%} to {max(kl_spread):.0%}, by (K, L)",
        },
    ]


def sampled_share_rows(share: dict) -> list[dict]:
    """``experiments.sampled_share``: per random-direction d and for the real keys, the cosine
    spread and the expected sampled share."""
    _need(share, "a sampled_share result", "isotropic", "isotropic_cos_std", "real", "real_cos_std", "layer")
    rows = [
        {"keys": f"random directions, d = {d}", "cosine spread": share["isotropic_cos_std"][d], "sampled share": f}
        for d, f in share["isotropic"].items()
    ]
    real = f"real keys, layer {share['layer']} (d = 64)"
    rows.append({"keys": real, "cosine spread": share["real_cos_std"], "sampled share": share["real"]})
    return rows


def live_rows(live: dict, results: dict, row: int = 2) -> list[dict]:
    """A live (10, 150), seed-0 run of shipped ``row`` (``experiments.live_run``) beside the
    study's seed-0 numbers, per head."""
    name = "magicpig K10 L150"
    _need(live, "live", name)
    layer, heads, *_ = shipped_layer(row)
    i_layer = results["layers"].index(layer)
    s = results["series"][name]
    return [
        {"layer": layer, "head": h, "live error": live[name]["error"][0][i], "live budget": live[name]["budget"][0][i]}
        | {"study error": s["error"][i_layer][0][h], "study budget": s["budget"][i_layer][0][h]}
        for i, h in enumerate(heads)
    ]
