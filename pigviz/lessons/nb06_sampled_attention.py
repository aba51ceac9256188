"""Notebook 06, sampled attention on every head: the study's findings, re-derived from the shipped results."""

from __future__ import annotations

import numpy as np

from pigviz.decode.report import QUALITY_FILE, load_result
from pigviz.lessons.nb07_sampled_decoding import seed_spreads
from pigviz.lessons.verify import Claim
from pigviz.study.findings import (
    AFFORDABLE,
    PAPER,
    at_same_bytes,
    head_grid,
    live_agreement,
    load_shipped_results,
    matched_table,
    per_layer,
    series_array,
    series_summary,
    series_tag,
    wins,
)

__all__ = ["claims", "TARGETS"]


TARGETS = {(12, 200): 0.02, (11, 240): 0.04, (9, 130): 0.08}  # the budgets these settings aim for


def claims() -> list:
    r = load_shipped_results()
    out = []

    def claim(text, passed, value):
        out.append(Claim(notebook="06", text=text, passed=bool(passed), value=value))

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
            "split by layers over parallel one-thread processes, it ran in under 2 hours on this 2-core CPU "
            "shared with other jobs",
            r["timing"]["total_s"] < 7200,
            f"{r['timing']['total_s'] / 60:.0f} min, 1-min load average up to "
            f"{r['timing']['max_load_average_1min']:.0f}",
        )
    else:
        claim(
            "it ran in under 30 minutes on this 2-core CPU, shared with other jobs",
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
        "in layer 0, where TopK's own error is the highest of any layer (its heads spread their weight), "
        "MagicPIG beats TopK on average",
        mp0 < tk0 and int(np.argmax(topk_layers)) == 0,
        f"{mp0:.3f} vs {tk0:.3f}",
    )
    hy_won, _ = wins(r, "hybrid @K10 L150", "topk @K10 L150")
    claim(
        "the hybrid (top half exact, rest sampled from the true weights) beats TopK in every cell at (10, 150)",
        hy_won == total,
        f"{hy_won} of {total}",
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
    quest_claims(r, settings, claim)
    affordable_claims(r, claim)
    rel, layer = live_agreement()
    claim(
        f"re-running layer {layer} live from the fp16 shipped capture reproduces the study's errors within 2%",
        rel < 0.02,
        f"largest difference {100 * rel:.2f}%",
    )
    return out


def quest_claims(r: dict, settings, claim) -> None:
    """Quest as its authors run it (dense in layers 0-1, current page read), compared where it
    is sparse, and MagicPIG's budget counted both ways."""
    sparse = [i for i, layer in enumerate(r["layers"]) if layer not in r["spec"].get("quest_dense_layers", [])]

    def sparse_err(name):
        return float(series_array(r, name)[sparse].mean())

    quest = {kl: sparse_err(f"quest {series_tag(kl)}") for kl in settings}
    rank_all = {kl: sparse_err(f"quest {series_tag(kl)} rank_all") for kl in settings}
    claim(
        "reading the current page, as Quest's authors do, lowers Quest's error at every budget (layers 2-29)",
        all(quest[kl] < rank_all[kl] for kl in settings),
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
    )
    beaten = {m: sum(p["reference_better"] for p in at_same_bytes(r, m)) for m in ("vattention", "quest", "sparq")}
    claim(
        "at the bytes they read, MagicPIG's curve is below the vAttention-style estimator's and Quest's at most "
        "of their points",
        all(beaten[m] >= 3 for m in ("vattention", "quest")),
        ", ".join(f"{m} {k} of 4" for m, k in beaten.items()),
    )
