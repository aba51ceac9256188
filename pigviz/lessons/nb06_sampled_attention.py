"""Notebook 06, sampled attention on every head: the study's findings, re-derived from the
shipped results and the live experiments (``claims``: every number the notebook's prose
states is one of their values or quotes, or listed in ``PROSE_DEFINED``), and the tables and
figures it shows. The computations a section teaches run in the notebook's own cells, from
:mod:`pigviz.study` and :mod:`pigviz.lsh`; nothing here writes the notebook's prose.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pigviz.attention import cost
from pigviz.decode.report import QUALITY_FILE, load_result
from pigviz.lessons.nb07_sampled_decoding import seed_spreads
from pigviz.lessons.tables import Table, table
from pigviz.lessons.verify import Claim
from pigviz.lsh import affordable
from pigviz.lsh import index as lsh_index
from pigviz.memory import budget
from pigviz.model.shipped import data_dir, load_shipped_capture
from pigviz.plots import study as plots
from pigviz.study import experiments
from pigviz.study.findings import (
    AFFORDABLE,
    METHOD_LABELS,
    PAPER,
    SPEED_COMMAND,
    SPEED_FILE,
    at_same_bytes,
    curves,
    head_grid,
    live_agreement,
    load_shipped_results,
    matched_table,
    per_layer,
    series_array,
    series_summary,
    series_tag,
    summary_rows,
    wins,
)

__all__ = [
    "claims",
    "PROSE_DEFINED",
    "TARGETS",
    "AUTHORS_SAMPLED_SHARE",
    "SERIES_LEGEND",
    "part1_table",
    "error_budget_figure",
    "per_layer_figure",
    "live_table",
    "bill_table",
    "speed_table",
    "mass_table",
    "sink_table",
    "current_page_table",
    "kl_sweep_table",
    "seed_table",
    "sampled_share_table",
    "bytes_table",
    "matched_view",
    "full_summary_table",
]

# What MagicPIG's authors quote for their default (10, 150): about 2% of the keys sampled (their
# "computation cost", sampled / sampleable keys) on the Llama models they evaluate (head dimension
# 128). Quoted, not measured here: the one number of this module that comes from outside.
AUTHORS_SAMPLED_SHARE = 0.02

TARGETS = {(12, 200): 0.02, (11, 240): 0.04, (9, 130): 0.08}  # the budgets these settings aim for

# Numbers the prose writes that are not measured: parameters, the data's fixed facts, citations.
PROSE_DEFINED = {
    "10": "K, bits per table, the paper's default (10, 150)",
    "150": "L, tables, the paper's default (10, 150)",
    "12": "K of the (12, 200) setting",
    "200": "L of the (12, 200) setting",
    "14": "K of question 4's setting",
    "600": "L of question 4's setting (also: bytes of ids per key, a claim quotes it)",
    "2%": "the authors' quoted sampled share, and the token view's budget (a parameter)",
    "16": "Quest's page size",
    "64": "the recent window, the captured positions and SmolLM2's head dimension",
    "128": "the Llama models' head dimension; a key count the reference hashes planes from",
    "32": "a head dimension of question 5",
    "256": "a head dimension of question 5 (also: bytes per key and value, a claim quotes it)",
    "100": "the top-100 of the score-versus-angle overlap (a parameter)",
    "100%": "a dense layer reads every key (a definition)",
    "270": "cells: 30 layers x 9 heads of SmolLM2-135M",
    "30": "layers of SmolLM2-135M",
    "29": "the last layer of SmolLM2-135M (layers 0-29)",
    "8,192": "tokens of the study's capture",
    "2025": "citation year (MagicPIG, ICLR 2025; vAttention 2025)",
    "2024": "citation year (Quest, SparQ: ICML 2024)",
    "1e-4": "the authors' offset in log(u + 1e-4), a constant of their code",
}


def claims() -> list:
    r = load_shipped_results()
    out = []

    def claim(text, passed, value, quotes=()):
        out.append(Claim(notebook="06", text=text, passed=bool(passed), value=value, quotes=tuple(quotes)))

    S = lambda name, **kw: series_summary(r, name, **kw)  # noqa: E731
    paper = "magicpig K10 L150"
    rows = S(paper)["rows"]
    finite = all(
        np.all(np.isfinite(np.asarray(s[k], float))) for s in r["series"].values() for k in ("error", "budget")
    )
    claim(
        f"the study covers {len(r['layers'])} layers x {r['heads']} heads x {r['last']} positions "
        f"= 17,280 attention rows per method and seed",
        rows == 17_280 and finite,
        f"{rows:,}",
    )
    if "split" in r["timing"]:  # re-run split by layers over parallel processes on a heavily shared CPU
        claim(
            "split by layers over parallel one-thread processes, it ran in under 2 hours on the 2-core CPU that "
            "made it, shared with other jobs",
            r["timing"]["total_s"] < 7200,
            f"{r['timing']['total_s'] / 60:.0f} min, 1-min load average up to "
            f"{r['timing']['max_load_average_1min']:.0f}",
        )
    else:
        claim(
            "it ran in under 30 minutes on the 2-core CPU that made it, shared with other jobs",
            r["timing"]["total_s"] < 1800,
            f"{r['timing']['total_s'] / 60:.1f} min",
        )
    got = {kl: S(f"magicpig K{kl[0]} L{kl[1]}")["budget"] for kl in TARGETS}
    claim(
        "(K, L) = (12, 200), (11, 240), (9, 130) read within 25% of the 2%, 4% and 8% of the visible keys "
        "they were chosen for",
        all(0.8 * TARGETS[kl] <= b <= 1.25 * TARGETS[kl] for kl, b in got.items()),
        ", ".join(f"{100 * b:.1f}%" for b in got.values()),
    )
    settings = [tuple(s) for s in r["spec"]["settings"]]
    pairs = {kl: (S(f"magicpig K{kl[0]} L{kl[1]}")["error"], S(f"topk @K{kl[0]} L{kl[1]}")["error"]) for kl in settings}
    claim(
        "at every matched budget TopK's mean error is below MagicPIG's",
        all(t < m for m, t in pairs.values()),
        f"{pairs[(10, 150)][1]:.3f} vs {pairs[(10, 150)][0]:.3f} at (10, 150)",
    )
    won, total = wins(r, paper, "topk @K10 L150")
    grid = head_grid(r, paper) < head_grid(r, "topk @K10 L150")
    claim(
        "MagicPIG beats TopK in a minority of (layer, head) cells at (10, 150), most often in layer 0",
        won < total / 2 and grid.sum(axis=1).argmax() == 0,
        f"{won} of {total}, {int(grid[0].sum())} in layer 0",
    )
    mp0, tk0 = S(paper, layer=r["layers"][0])["error"], S("topk @K10 L150", layer=r["layers"][0])["error"]
    topk_layers, _ = per_layer(r, "topk @K10 L150")
    claim(
        "in layer 0, where TopK's own error is the highest of any layer, MagicPIG beats TopK on average",
        mp0 < tk0 and int(np.argmax(topk_layers)) == 0,
        f"{mp0:.3f} vs {tk0:.3f}",
    )
    counts = [wins(r, f"magicpig K{kl[0]} L{kl[1]}", f"topk {series_tag(kl)}")[0] for kl in settings]
    claim(
        "at every budget MagicPIG beats TopK in under 15% of the (layer, head) cells",
        max(counts) < 0.15 * total,
        f"{min(counts)}-{max(counts)} of {total}",
    )
    ratio = head_grid(r, paper) / head_grid(r, "topk @K10 L150")
    claim(
        "TopK wins most (layer, head) cells by a wide margin: MagicPIG's error over TopK's has a median above 2",
        np.median(ratio) > 2,
        f"median ratio {np.median(ratio):.2f}x",
    )
    tk = head_grid(r, "topk @K10 L150")
    claim(
        "where MagicPIG wins at (10, 150), TopK's own error is over 3 times that of the cells it loses (medians)",
        np.median(tk[grid]) > 3 * np.median(tk[~grid]),
        f"{np.median(tk[grid]):.3f} vs {np.median(tk[~grid]):.3f}",
    )
    sink = load_shipped_capture().extras["sink_weight"].numpy()
    claim(
        "the sink weight alone does not set those cells apart: most of them, and most of all heads, put under half "
        "their weight on token 0",
        (sink[grid] < 0.5).mean() > 0.5 and (sink < 0.5).mean() > 0.5,
        f"{int((sink[grid] < 0.5).sum())} of {int(grid.sum())}; {int((sink < 0.5).sum())} of {sink.size}",
    )
    hy_won, _ = wins(r, "hybrid @K10 L150", "topk @K10 L150")
    claim(
        "the hybrid (top half exact, rest sampled from the true weights) beats TopK in every cell at (10, 150)",
        hy_won == total,
        f"{hy_won} of {total}",
    )
    hy_all, hy_total = _hybrid_wins(r)
    hybrid_mean = all(S(f"hybrid {series_tag(kl)}")["error"] < S(f"topk {series_tag(kl)}")["error"] for kl in settings)
    claim(
        "the hybrid's mean error is below TopK's at every budget, and so is its error in over 99% of the (budget, "
        "cell) pairs",
        hybrid_mean and hy_all > 0.99 * hy_total,
        f"{hy_all:,} of {hy_total:,}",
    )
    oracle = {kl: S(f"oracle @K{kl[0]} L{kl[1]}")["error"] for kl in settings}
    claim(
        "sampling from the true weights beats MagicPIG's LSH sampling at every budget",
        all(oracle[kl] < pairs[kl][0] for kl in settings),
        f"{oracle[(10, 150)]:.3f} vs {pairs[(10, 150)][0]:.3f}",
    )
    claim(
        "sampling from the true weights beats TopK on average at every budget",
        all(oracle[kl] < pairs[kl][1] for kl in settings),
        f"{oracle[(10, 150)]:.3f} vs {pairs[(10, 150)][1]:.3f}",
    )
    plain = S(f"{paper} no_correction")["error"]
    claim(
        "dropping the 1/u correction (plain softmax over the same keys) raises the error",
        plain > pairs[(10, 150)][0],
        f"{pairs[(10, 150)][0]:.3f} -> {plain:.3f}",
    )
    no_sink = S(f"{paper} no_sink")["error"]
    claim(
        "taking the 4 sink tokens out of the exact set raises the error",
        no_sink > pairs[(10, 150)][0],
        f"{pairs[(10, 150)][0]:.3f} -> {no_sink:.3f}",
    )
    first, bare = S(f"{paper} first_position")["error"], S(f"{paper} no_exact")["error"]
    claim(
        "with no exact set at all (first position) the error is more than twice as large",
        bare > 2 * first,
        f"{first:.3f} -> {bare:.3f}",
    )
    mp = S(paper)
    claim(
        f"counted as MagicPIG's authors count it, (10, 150) samples over twice the about "
        f"{AUTHORS_SAMPLED_SHARE:.0%} they quote for their models",
        mp["budget_sampled"] > 2 * AUTHORS_SAMPLED_SHARE,
        f"{100 * mp['budget_sampled']:.2f}% (pigviz's count {100 * mp['budget']:.2f}%)",
    )
    share = experiments.sampled_share(row=0)
    claim(
        "for random directions, d = 128 samples a smaller share than d = 64; the real keys of layer 2 sample over "
        "twice the random share at d = 64",
        share["isotropic"][128] < share["isotropic"][64] and share["real"] > 2 * share["isotropic"][64],
        f"{100 * share['isotropic'][64]:.2f}% -> {100 * share['isotropic'][128]:.2f}%; real {100 * share['real']:.2f}%",
    )
    spread = max(S(f"magicpig K{K} L{L}")["error_std"] / S(f"magicpig K{K} L{L}")["error"] for K, L in settings)
    claim(
        f"across {r['spec']['seeds']} hash seeds the mean error moves by under 5% of itself",
        spread < 0.05,
        f"largest std {100 * spread:.1f}%",
    )
    kl_spread = seed_spreads(load_result(QUALITY_FILE))
    claim(
        "notebook 07's own hash seeds move its decode KL far more: its std across seeds is over 10% of it at every "
        "(K, L)",
        min(kl_spread) > 0.1 and min(kl_spread) > 2 * spread,
        f"{100 * min(kl_spread):.0f}%-{100 * max(kl_spread):.0f}% vs {100 * spread:.1f}%",
    )
    bill_claims(claim)
    mass = [experiments.mass_captured(row=row) for row in (0, 3)]
    held = [(np.add(m["exact"], m["sampled"]), np.asarray(m["topk"])) for m in mass]
    claim(
        "in shipped layers 2 and 25 the keys MagicPIG reads hold less of the true weight than TopK's as many, in "
        "every head",
        all(np.all(a < b) for a, b in held),
        "; ".join(f"layer {m['layer']} {a.mean():.3f} vs {b.mean():.3f}" for m, (a, b) in zip(mass, held)),
    )
    quest_claims(r, settings, claim)
    affordable_claims(r, claim)
    rel, layer = live_agreement()
    claim(
        f"re-running layer {layer} live from the fp16 shipped capture reproduces the study's errors within 2%",
        rel < 0.02,
        f"largest difference {100 * rel:.2f}%",
    )
    return out


def bill_claims(claim, context: int = 8192, K: int = 10, L: int = 150) -> None:
    """Section 5: notebook 05a's bill at (10, 150) and the engine's measured index."""
    report = budget.budget_report("SmolLM2-135M", context, K=K, L=L)
    model = report["model"]
    ids, kv = report["table_bytes_per_head_token"], report["kv_pair_bytes_per_head_token"]
    offsets = report["bucket_metadata_bytes"] / (context * model["layers"] * model["kv_heads"])  # per key
    k, built = _engine_index(K, L)
    engine = built.table_bytes / (2 * k.numel() * 2)
    claim(
        "the index takes more memory than the KV cache it indexes, in notebook 05a's bill and as the engine stores it",
        report["index_to_kv_ratio"] > 1 and engine > 1,
        f"{report['index_to_kv_ratio']:.2f}x (bill), {engine:.2f}x (engine, one layer and KV head)",
        quotes=(f"{ids} bytes", f"{kv}-byte", f"{ids / kv:.2f}x", f"{offsets:.0f} bytes"),
    )


def quest_claims(r: dict, settings, claim) -> None:
    """Quest as its authors run it (dense in layers 0-1, current page read), compared where it
    is sparse, and MagicPIG's budget counted both ways."""
    sparse = [i for i, layer in enumerate(r["layers"]) if layer not in r["spec"].get("quest_dense_layers", [])]

    def sparse_err(name):
        return float(series_array(r, name)[sparse].mean())

    def sparse_budget(name):
        return float(series_array(r, name, "budget")[sparse].mean())

    quest = {kl: sparse_err(f"quest {series_tag(kl)}") for kl in settings}
    rank_all = {kl: sparse_err(f"quest {series_tag(kl)} rank_all") for kl in settings}
    same = all(
        abs(sparse_budget(f"quest {series_tag(kl)}") - sparse_budget(f"quest {series_tag(kl)} rank_all"))
        < 0.02 * sparse_budget(f"quest {series_tag(kl)}")
        for kl in settings
    )
    claim(
        "in layers 2-29, where both rules are sparse and read the same budget (within 2%), reading the current "
        "page, as Quest's authors do, lowers Quest's error at every budget",
        same and all(quest[kl] < rank_all[kl] for kl in settings),
        f"{rank_all[PAPER]:.3f} -> {quest[PAPER]:.3f} at (10, 150)",
    )
    mp_sparse = {kl: sparse_err(f"magicpig K{kl[0]} L{kl[1]}") for kl in settings}
    tk_sparse = {kl: sparse_err(f"topk {series_tag(kl)}") for kl in settings}
    claim(
        "even so, Quest (pages of 16) is less accurate than MagicPIG and TopK at every matched budget in layers 2-29",
        all(quest[kl] > max(mp_sparse[kl], tk_sparse[kl]) for kl in settings),
        f"{quest[PAPER]:.3f} vs {mp_sparse[PAPER]:.3f} and {tk_sparse[PAPER]:.3f} at (10, 150)",
    )
    mp, q = series_summary(r, "magicpig K10 L150"), series_summary(r, f"quest {series_tag(PAPER)}")
    claim(
        "Quest's dense layers 0 and 1 lift its mean budget over all layers well above the matched one",
        q["budget"] > mp["budget"] + 0.03,
        f"{100 * q['budget']:.1f}% vs {100 * mp['budget']:.1f}%",
    )
    claim(
        "counted as its authors count it (sampled / sampleable keys), (10, 150) reads less than pigviz's count "
        "(exact set included)",
        mp["budget_sampled"] < mp["budget"],
        f"{100 * mp['budget_sampled']:.1f}% vs {100 * mp['budget']:.1f}%",
    )


def affordable_claims(r: dict, claim) -> None:
    """Part 2: the estimators a system can afford (pigviz.lsh.affordable) against TopK, in keys and in bytes."""
    rows = matched_table(r)
    ratio = {m: [row["methods"][m]["ratio"] for row in rows] for m in ("magicpig", *AFFORDABLE)}
    err = {m: [row["methods"][m]["error"] for row in rows] for m in ("magicpig", *AFFORDABLE)}
    claim(
        "none of the three affordable estimators beats TopK's mean error at any of the four matched budgets",
        all(min(ratio[m]) > 1 for m in AFFORDABLE),
        ", ".join(f"{m} {min(ratio[m]):.2f}x-{max(ratio[m]):.2f}x" for m in AFFORDABLE),
        quotes=[f"{min(ratio[m]):.2f}x to {max(ratio[m]):.2f}x" for m in AFFORDABLE],
    )
    closest = [min(AFFORDABLE, key=lambda m, i=i: ratio[m][i]) for i in range(len(rows))]
    claim(
        "SparQ comes closest of the three at every budget",
        all(m == "sparq" for m in closest),
        ", ".join(closest),
    )
    claim(
        "weighing the top half of MagicPIG's sample as exact makes it worse than MagicPIG at every budget",
        all(a > b for a, b in zip(err["mp_exact_top"], err["magicpig"])),
        f"{err['mp_exact_top'][2]:.4f} vs {err['magicpig'][2]:.4f} at (10, 150)",
    )
    claim(
        "the vAttention-style estimator loses to MagicPIG at every budget",
        all(a > b for a, b in zip(err["vattention"], err["magicpig"])),
        f"{err['vattention'][2]:.4f} vs {err['magicpig'][2]:.4f} at (10, 150)",
    )
    topk_bytes = [row["reference"]["bytes_share"] for row in rows]
    mp_bytes = [row["methods"]["magicpig"]["bytes_share"] for row in rows]
    claim(
        "counted in bytes, TopK reads over half of what dense attention reads at every budget, MagicPIG under 11%",
        min(topk_bytes) > 0.5 and max(mp_bytes) < 0.11,
        f"TopK {100 * min(topk_bytes):.1f}%-{100 * max(topk_bytes):.1f}%, "
        f"MagicPIG {100 * min(mp_bytes):.1f}%-{100 * max(mp_bytes):.1f}%",
        quotes=(
            f"{100 * min(topk_bytes):.1f}% to {100 * max(topk_bytes):.1f}%",
            f"{100 * min(mp_bytes):.1f}% to {100 * max(mp_bytes):.1f}%",
        ),
    )
    beaten = {m: sum(p["reference_better"] for p in at_same_bytes(r, m)) for m in ("vattention", "quest", "sparq")}
    claim(
        "at the bytes they read, MagicPIG's curve is below the vAttention-style estimator's and Quest's at most "
        "of their points",
        all(beaten[m] >= 3 for m in ("vattention", "quest")),
        ", ".join(f"{m} {k} of 4" for m, k in beaten.items()),
    )


# --------------------------------------------------------------------------- tables and figures
def _tag(kl) -> str:
    return f"K{kl[0]} L{kl[1]}"


def _settings(results: dict) -> list[tuple]:
    return [tuple(s) for s in results["spec"]["settings"]]


def part1_table(results: dict) -> Table:
    """Part 1's headline numbers: per MagicPIG (K, L), its budget both ways and every Part 1
    method's mean error at that budget (Quest as its authors run it also with its own budget
    over all layers, since its dense layers 0 and 1 count at 100%)."""
    S = lambda name: series_summary(results, name)  # noqa: E731
    rows = []
    for kl in _settings(results):
        mp, tag = S(f"magicpig {_tag(kl)}"), series_tag(kl)
        rows.append(
            {
                "(K, L)": f"({kl[0]}, {kl[1]})",
                "budget": mp["budget"],
                "sampled (authors')": mp["budget_sampled"],
                "MagicPIG": mp["error"],
                "TopK": S(f"topk {tag}")["error"],
                "oracle": S(f"oracle {tag}")["error"],
                "hybrid": S(f"hybrid {tag}")["error"],
                "Quest": S(f"quest {tag}")["error"],
                "Quest budget": S(f"quest {tag}")["budget"],
                "Quest, rank all": S(f"quest {tag} rank_all")["error"],
            }
        )
    pct, err = "{:.2%}", "{:.4f}"
    formats = {c: err for c in ("MagicPIG", "TopK", "oracle", "hybrid", "Quest", "Quest, rank all")}
    formats.update({"budget": pct, "sampled (authors')": pct, "Quest budget": pct})
    return table(
        rows,
        formats=formats,
        caption=f"Mean error over {S(f'magicpig {_tag(PAPER)}')['rows']:,} rows per method (and per seed), "
        "at MagicPIG's four budgets: the headline numbers of Part 1, recomputed",
    )


PART1_METHODS = ("magicpig", "topk", "oracle", "hybrid", "quest", "rank_all", "streaming")


def error_budget_figure(results: dict, methods=PART1_METHODS, *, x: str = "budget", title: str):
    """The error-against-budget chart of the whole study for ``methods``."""
    return plots.error_budget_figure(curves(results, methods=list(methods)), METHOD_LABELS, x=x, title=title)


def _hybrid_wins(results: dict) -> tuple[int, int]:
    """(layer, head) cells where the hybrid beats TopK, summed over the budgets, and out of how many."""
    counts = [wins(results, f"hybrid {series_tag(kl)}", f"topk {series_tag(kl)}") for kl in _settings(results)]
    return sum(w for w, _ in counts), sum(t for _, t in counts)


def per_layer_figure(results: dict):
    """Mean error per layer at MagicPIG's (10, 150) budget: MagicPIG, the oracles, no sink."""
    lines = {}
    for name, key, label in [
        ("magicpig K10 L150", "magicpig", "MagicPIG (10, 150)"),
        ("topk @K10 L150", "topk", "TopK, same budget"),
        ("oracle @K10 L150", "oracle", "oracle sampling, same budget"),
        ("hybrid @K10 L150", "hybrid", "hybrid, same budget"),
        ("magicpig K10 L150 no_sink", "no_sink", "MagicPIG, sink not in the exact set"),
    ]:
        lines[label] = (key, *per_layer(results, name))
    return plots.per_layer_figure(results["layers"], lines, title="Mean error per layer at MagicPIG's (10, 150) budget")


def live_table(live: dict, results: dict, row: int = 2) -> Table:
    """A live (10, 150), seed-0 run of one shipped layer beside the study's seed-0 numbers."""
    layer, heads, *_ = experiments.shipped_layer(row)
    i_layer = results["layers"].index(layer)
    name = "magicpig K10 L150"
    rows = [
        {
            "layer": layer,
            "head": h,
            "live error": live[name]["error"][0][i],
            "live budget": live[name]["budget"][0][i],
            "study error": results["series"][name]["error"][i_layer][0][h],
            "study budget": results["series"][name]["budget"][i_layer][0][h],
        }
        for i, h in enumerate(heads)
    ]
    gap = max(abs(r["live error"] - r["study error"]) / r["study error"] for r in rows)
    return table(
        rows,
        formats={"live error": "{:.4f}", "study error": "{:.4f}", "live budget": "{:.2%}", "study budget": "{:.2%}"},
        caption=f"live run on the fp16 capture vs the study (fp32 capture, seed 0): errors differ by at most "
        f"{gap:.2%} of the study's",
    )


def _engine_index(K: int, L: int):
    """The first shipped layer's keys (one KV head) and the index the engine builds over them."""
    k = load_shipped_capture().keys[0, :1].float()
    return k, lsh_index.build_index(k, K=K, L=L)


def bill_table(context: int = 8192, K: int = 10, L: int = 150) -> Table:
    """Notebook 05a's bill for SmolLM2 at ``context`` tokens, and the index the engine really builds."""
    report = budget.budget_report("SmolLM2-135M", context, K=K, L=L)
    k, built = _engine_index(K, L)
    mib = 2.0**20
    rows = [
        {"item": "KV cache, all layers (fp16)", "MiB": report["kv_bytes"] / mib},
        {"item": f"table entries, all layers ({L} four-byte ids per key)", "MiB": report["table_bytes"] / mib},
        {"item": f"bucket offsets, all layers (2^{K} x {L}, four-byte)", "MiB": report["bucket_metadata_bytes"] / mib},
        {"item": "one layer and KV head: keys and values (fp16)", "MiB": 2 * k.numel() * 2 / mib},
        {"item": "one layer and KV head: the engine's index, measured", "MiB": built.table_bytes / mib},
        {"item": "one layer and KV head: the same, by formula", "MiB": lsh_index.index_bytes(context, K, L) / mib},
    ]
    return table(
        rows,
        formats={"MiB": "{:.2f}"},
        caption=f"SmolLM2-135M at {context:,} tokens, (K, L) = ({K}, {L}): the engine stores "
        f"{built.entries.element_size()}-byte token ids and {built.offsets.element_size()}-byte bucket offsets, "
        f"notebook 05a's bill {report['index_bytes']}-byte ones",
    )


def _speed_data(path=None) -> dict:
    return json.loads(Path(path or data_dir() / SPEED_FILE).read_text(encoding="utf-8"))


_SPEED_COLUMNS = {  # field in the benchmark's rows -> column, format; optional fields show when present
    "shape": ("shape", "{}"),
    "n": ("keys", "{:,}"),
    "K": ("K", "{}"),
    "L": ("L", "{}"),
    "budget": ("budget", "{:.2%}"),
    "attend_ms": ("MagicPIG ms", "{:.2f}"),
    "sdpa_ms": ("dense ms", "{:.2f}"),
    "speedup": ("speed-up", "{:.1f}x"),
    "attend_floor_ms": ("MagicPIG floor ms", "{:.3f}"),
    "sdpa_floor_ms": ("dense floor ms", "{:.3f}"),
    "build_s": ("build s", "{:.1f}"),
    "table_vs_kv_fp32": ("tables / KV timed (fp32)", "{:.2f}x"),
    "table_vs_kv_fp16": ("tables / KV in fp16", "{:.2f}x"),
    "err_magicpig": ("error MagicPIG", "{:.3f}"),
    "err_topk": ("error TopK", "{:.3f}"),
}


def speed_table(path=None) -> Table:
    """The shipped CPU timing of one decode step of one layer (``benchmarks/bench_attend.py``)."""
    data = _speed_data(path)
    fields = [f for f in _SPEED_COLUMNS if all(f in r for r in data["rows"])]
    rows = [{_SPEED_COLUMNS[f][0]: r[f] for f in fields} for r in data["rows"]]
    bandwidth = data.get("bandwidth_gbs")
    return table(
        rows,
        formats={_SPEED_COLUMNS[f][0]: _SPEED_COLUMNS[f][1] for f in fields},
        caption=f"one decode step of one layer, synthetic keys, {data['threads']} torch thread, "
        f"{data.get('clock', 'wall')} clock; both times read float32 K/V (dense: SDPA, one call per KV head for its "
        "group of query heads); tables / KV: the index against that fp32 cache and against an fp16 one"
        + (f"; floor: the bytes read at the measured {bandwidth:.1f} GB/s" if bandwidth else "")
        + f" ({SPEED_COMMAND})",
    )


def mass_table(mass: dict) -> Table:
    """``{row: experiments.mass_captured(row=row)}`` as a table: per head of each shipped layer,
    the true attention weight on MagicPIG's reads (exact set and sample apart) and on TopK's
    keys when TopK reads as many."""
    out = []
    for m in mass.values():
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
    f3 = "{:.3f}"
    return table(
        out,
        formats={"keys read": "{:.1%}", "exact set": f3, "sampled": f3, "MagicPIG total": f3, "TopK, as many keys": f3},
        caption="share of the true attention weight on the keys read, mean over the last 64 positions (seed 0)",
    )


def sink_table(results: dict, sink_weight: np.ndarray) -> Table:
    """What taking the sink out of the exact set does, by how much weight a head puts on token 0,
    and the three first-position variants."""
    with_sink = head_grid(results, "magicpig K10 L150")
    ratio = head_grid(results, "magicpig K10 L150 no_sink") / with_sink
    heavy = sink_weight > 0.5
    rows = [
        {
            "heads": f"> 50% of their weight on token 0 ({heavy.sum()} of {heavy.size})",
            "what": "error without / with sink (median)",
            "value": f"{np.median(ratio[heavy]):.2f}x",
        },
        {
            "heads": f"the others ({(~heavy).sum()})",
            "what": "error without / with sink (median)",
            "value": f"{np.median(ratio[~heavy]):.2f}x",
        },
    ]
    for variant in ("first_position", "no_window", "no_exact"):
        r = series_summary(results, f"magicpig K10 L150 {variant}")
        rows.append(
            {
                "heads": f"all, first position only ({r['rows']} rows)",
                "what": METHOD_LABELS[variant],
                "value": f"error {r['error']:.3f} at {r['budget']:.2%}",
            }
        )
    first_heavy = results["layers"][int(np.argmax(heavy.any(axis=1)))]
    return table(
        rows, caption=f"the sink and the exact set at (10, 150); the first layer with a sink-heavy head: {first_heavy}"
    )


def current_page_table(errors: dict) -> Table:
    """``current_page_errors``' output as a table: per share, each shipped layer and their mean."""
    rows = []
    for share in sorted({s for _, s in errors}):
        pairs = sorted((row, v) for (row, s), v in errors.items() if s == share)
        for row, (read, ranked) in pairs:
            layer = experiments.shipped_layer(row)[0]
            rows.append({"share": share, "layer": layer, "current page read": read, "every page ranked": ranked})
        rows.append(
            {
                "share": share,
                "layer": "mean",
                "current page read": float(np.mean([a for _, (a, _) in pairs])),
                "every page ranked": float(np.mean([b for _, (_, b) in pairs])),
            }
        )
    return table(
        rows,
        formats={"share": "{:.0%}", "current page read": "{:.3f}", "every page ranked": "{:.3f}"},
        caption="Quest's mean error on the shipped layers, last 64 positions, pages of 16",
    )


def kl_sweep_table(sweep: list, topk: list) -> Table:
    rows = [
        {"K": a["K"], "L": a["L"], "budget": a["budget"], "MagicPIG": a["error"], "TopK": b["error"]}
        for a, b in zip(sweep, topk)
    ]
    return table(
        rows,
        formats={"budget": "{:.2%}", "MagicPIG": "{:.4f}", "TopK": "{:.4f}"},
        caption="the real keys of layer 2, hash seed 0: MagicPIG at each (K, L), TopK at the budget it measured",
    )


def seed_table(results: dict) -> Table:
    """The two seed spreads side by side, each with what is measured and what is averaged."""
    settings = _settings(results)
    study = max(
        series_summary(results, f"magicpig {_tag(kl)}")["error_std"]
        / series_summary(results, f"magicpig {_tag(kl)}")["error"]
        for kl in settings
    )
    quality = load_result(QUALITY_FILE)
    kl_spread = seed_spreads(quality)
    cells = series_array(results, "magicpig K10 L150")  # (layers, seeds, heads)
    cell = (cells.std(axis=1, ddof=1) / cells.mean(axis=1)).ravel()
    rows = [
        {
            "measured": "this study: error of one attention row",
            "averaged over (per seed)": f"{series_summary(results, 'magicpig K10 L150')['rows']:,} rows from "
            f"{len(results['layers']) * results['kv_heads']} (layer, KV head) caches",
            "std across seeds / mean": f"at most {study:.1%}",
        },
        {
            "measured": "this study: one (layer, head) cell at (10, 150)",
            "averaged over (per seed)": f"{results['last']} rows",
            "std across seeds / mean": f"{np.median(cell):.1%} (median cell), up to {cell.max():.0%}",
        },
        {
            "measured": "notebook 07: KL of the next-token distribution",
            "averaged over (per seed)": f"{quality['settings']['stretch']} teacher-forced positions",
            "std across seeds / mean": f"{min(kl_spread):.0%} to {max(kl_spread):.0%}, by (K, L)",
        },
    ]
    return table(rows, caption=f"{results['spec']['seeds']} hash seeds each")


def sampled_share_table(share: dict) -> Table:
    rows = [
        {"keys": f"random directions, d = {d}", "cosine spread": share["isotropic_cos_std"][d], "sampled share": f}
        for d, f in share["isotropic"].items()
    ]
    rows.append(
        {
            "keys": f"real keys, layer {share['layer']} (d = 64)",
            "cosine spread": share["real_cos_std"],
            "sampled share": share["real"],
        }
    )
    return table(
        rows,
        formats={"cosine spread": "{:.3f}", "sampled share": "{:.2%}"},
        caption="expected share of the sampleable keys that (10, 150) samples: the mean of u",
    )


def _step_methods(step: dict, heads: int) -> dict:
    n, d = step["n"], len(step["q"])
    cand = lsh_index.expected_candidates(n, step["K"], step["L"])
    return {
        "topk": {},
        "quest": {},
        "sparq": {"r": affordable.sparq_channels(d)},
        "magicpig": {"K": step["K"], "L": step["L"], "heads": heads, "candidates": cand, "sampled": len(step["K_S"])},
    }


def bytes_table(step: dict, results: dict) -> Table:
    """Section 9: what each method reads on section 1's step, reading as many keys as MagicPIG did."""
    n, d = step["n"], len(step["q"])
    dense = cost.dense_bytes(n, d)
    rows = []
    for method, kw in _step_methods(step, results["heads"]).items():
        b = cost.bytes_read(method, n=n, d=d, keys_read=step["keys_read"], **kw)
        choose = cost.bytes_read(method, n=n, d=d, keys_read=0, **kw) if method != "magicpig" else None
        rows.append(
            {
                "method": method,
                "KiB read": b / 1024,
                "share of dense": b / dense,
                "to choose (keys_read = 0)": None if choose is None else choose / dense,
            }
        )
    return table(
        rows,
        formats={"KiB read": "{:.1f}", "share of dense": "{:.1%}", "to choose (keys_read = 0)": "{:.2%}"},
        caption=f"layer {step['layer']}, head {step['model_head']}, (K, L) = ({step['K']}, {step['L']}): each method "
        f"reads {step['keys_read']} of {n:,} keys; dense reads {dense / 1024:.0f} KiB; per query head, nothing "
        f"shared within a group of {results['heads'] // results['kv_heads']} query heads",
    )


def matched_view(results: dict) -> Table:
    """Section 10: every method against TopK at each matched budget, as a table."""
    rows = []
    for row in matched_table(results):
        K, L = row["setting"]
        ref = row["reference"]
        rows.append(
            {
                "(K, L)": f"({K}, {L})",
                "budget": row["budget"],
                "method": ref["method"],
                "error": ref["error"],
                "/ TopK": 1.0,
                "bytes read": ref["bytes_share"],
                "cells won": "-",
            }
        )
        for method, m in row["methods"].items():
            rows.append(
                {
                    "(K, L)": f"({K}, {L})",
                    "budget": row["budget"],
                    "method": method,
                    "error": m["error"],
                    "/ TopK": m["ratio"],
                    "bytes read": m["bytes_share"],
                    "cells won": f"{m['wins']}/{m['cells']}",
                }
            )
    return table(
        rows,
        formats={"budget": "{:.2%}", "error": "{:.4f}", "/ TopK": "{:.2f}x", "bytes read": "{:.1%}"},
        caption="mean error at MagicPIG's budgets; bytes read: everything a step reads (pigviz.attention.cost), "
        "as a share of dense attention's; cells won: (layer, head) cells with a lower error than TopK's",
    )


# --------------------------------------------------------------------------- going further
SERIES_LEGEND = {
    "magicpig": "MagicPIG at (K, L): exact set (4 sinks, 64 recent) plus the keys its tables sample, corrected by 1/u",
    "topk": "TopK at MagicPIG's budget: the keys with the highest scores (an oracle)",
    "oracle": "oracle sampling at MagicPIG's budget: draws from the true weights",
    "hybrid": "hybrid: the top half of the budget exactly, the rest drawn from the true weights",
    "quest": "Quest as its authors run it: pages of 16, the current page read, layers 0-1 dense",
    "rank_all": "Quest with every page ranked by its bound (no current page), sparse everywhere",
    "streaming": "StreamingLLM: the exact set and nothing else",
    "mp_exact_top": "Part 2 (a): MagicPIG's reads, the top half of its sample weighed as exact",
    "vattention": "Part 2 (b): sinks, recent window and Quest pages plus a uniform sample",
    "sparq": "Part 2 (c): SparQ, keys chosen by approximate scores from 8 of 64 channels",
    "no_correction": "MagicPIG's keys with a plain softmax (no 1/u)",
    "no_sink": "MagicPIG with the 4 sinks out of the exact set",
    "first_position": "MagicPIG at the first of the 64 positions only",
    "no_window": "MagicPIG with no recent window, first position only",
    "no_exact": "MagicPIG with no exact set at all, first position only",
}


def full_summary_table(results: dict) -> Table:
    """Every series of the study with its id, its meaning, budgets, error and seed spread."""
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
    return table(
        rows,
        formats={"budget": "{:.2%}", "sampled": "{:.2%}", "error": "{:.4f}", "± seeds": "{:.4f}", "rows": "{:,}"},
        caption="every series of the shipped study; ± seeds: std of the mean error across seeds; sampled: "
        "MagicPIG's sampled / sampleable keys",
    )
