"""Finding 2, estimators a system can afford: MagicPIG + exact top, a vAttention-style sample and
SparQ against oracle TopK at MagicPIG's matched budgets, in keys and in bytes read per query
head (``claims``: every number the finding's prose states), and the tables it shows. The rows
come from :mod:`pigviz.study.findings` and :mod:`pigviz.study.step_bytes`; nothing here writes
the finding's prose.
"""

from __future__ import annotations

import numpy as np

from pigviz.attention import cost
from pigviz.lessons.exercises.nb06 import log_u as _log_u
from pigviz.lessons.f1_every_head import PROSE_DEFINED as _F1_DEFINED
from pigviz.lessons.f1_every_head import error_budget_figure
from pigviz.lessons.tables import Table, table
from pigviz.lessons.verify import Claim
from pigviz.study import experiments, step_bytes
from pigviz.study import rows as study_rows
from pigviz.study.findings import AFFORDABLE, load_shipped_results, matched_table

__all__ = ["claims", "PROSE_DEFINED", "bytes_table", "matched_view", "error_budget_figure"]

_F4, _PCT2 = "{:.4f}", "{:.2%}"

# Numbers the prose writes that are not measured: the settings, the model's fixed facts, citations.
PROSE_DEFINED = {k: v for k, v in _F1_DEFINED.items() if k in ("10", "150", "64", "30", "2025", "2024")} | {
    "9": "query heads per layer of SmolLM2-135M",
}


def claims() -> list:
    r = load_shipped_results()
    out = []

    def claim(text, passed, value, quotes=()):
        out.append(Claim(notebook="f2", text=text, passed=bool(passed), value=value, quotes=tuple(quotes)))

    step = experiments.decode_step_pieces(row=0, head=0)
    q, K_S = step["q"], step["K_S"]
    best = np.argsort(-(K_S @ q))[: -(-len(K_S) // 2)]  # the best-scoring half of the sample
    med = float(np.median(np.exp(_log_u(q, K_S[best], step["mu"], step["K"], step["L"]))))
    claim(
        "on lesson 06a §1's step, half of the best-scoring half of MagicPIG's sample had u at most its median, "
        "below 1: a 1/u boost above 1 that weighing them as exact drops",
        med < 1,
        f"median u {med:.2f}, boost {1 / med:.1f}",
        quotes=(f"{med:.2f} or less", f"{1 / med:.1f} or more"),
    )
    bytes_claims(step, claim)
    affordable_claims(r, claim)
    return out


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
    shared = [row["methods"]["magicpig"]["bytes_share"] for row in rows]  # the file: planes split over the heads
    counted = matched_table(step_bytes.planes_per_query_head(r))
    mp = [row["methods"]["magicpig"] for row in counted]
    rivals = {m: [row["methods"][m] for row in counted] for m in ("sparq", "vattention")}
    pct = lambda xs: f"{100 * min(xs):.1f}% to {100 * max(xs):.1f}%"  # noqa: E731
    claim(
        "counted in bytes per query head, TopK reads over half of what dense attention reads at every budget, "
        "MagicPIG (its hyperplanes included) between an eighth and a quarter, and under 11% with its planes split "
        "over the layer's query heads",
        min(topk_bytes) > 0.5
        and 0.125 < min(m["bytes_share"] for m in mp)
        and max(m["bytes_share"] for m in mp) < 0.25
        and max(shared) < 0.11,
        f"TopK {pct(topk_bytes)}, MagicPIG {pct([m['bytes_share'] for m in mp])} (split: {pct(shared)})",
        quotes=(pct(topk_bytes), pct([m["bytes_share"] for m in mp]), pct(shared)),
    )
    claim(
        "MagicPIG, its planes counted per query head, reads more bytes than SparQ and the vAttention-style estimator "
        "at every budget, and SparQ's mean error is below MagicPIG's at every budget",
        all(a["bytes_share"] > b["bytes_share"] for m in rivals.values() for a, b in zip(mp, m))
        and all(b["error"] < a["error"] for a, b in zip(mp, rivals["sparq"])),
        ", ".join(
            f"{100 * a['bytes_share']:.1f}% vs SparQ {100 * b['bytes_share']:.1f}%" for a, b in zip(mp, rivals["sparq"])
        ),
    )


def bytes_claims(step: dict, claim) -> None:
    """Section 8: section 1's step in bytes, nothing shared, MagicPIG's planes included."""
    share = {row["method"]: row["share"] for row in step_bytes.step_rows(step)}
    parts = {p["part"]: p for p in step_bytes.magicpig_parts(step)}
    planes, kv = parts["hyperplanes"], parts["keys and values read"]
    claim(
        "on lesson 06a §1's step, per query head with nothing shared, MagicPIG reads more bytes than Quest and SparQ, "
        "and its hyperplanes alone more than the keys and values it reads",
        share["magicpig"] > max(share["quest"], share["sparq"]) and planes["bytes"] > kv["bytes"],
        f"MagicPIG {share['magicpig']:.1%}, Quest {share['quest']:.1%}, SparQ {share['sparq']:.1%}",
        quotes=(
            f"{step['K'] * step['L']:,} hyperplanes",
            f"{planes['bytes'] / 1024:.1f} KiB",
            f"{planes['share']:.1%}",
            f"({kv['share']:.1%})",
            *(f"{share[m]:.1%}" for m in ("magicpig", "quest", "sparq")),
        ),
    )


# --------------------------------------------------------------------------- tables


def bytes_table(step: dict) -> Table:
    """Section 8: what each method reads on section 1's step, reading as many keys as MagicPIG did."""
    rows = [
        {"method": r["method"], "KiB read": r["bytes"] / 1024, "share of dense": r["share"]}
        | {"to choose (keys_read = 0)": r["choose_share"]}
        for r in step_bytes.step_rows(step)
    ]
    dense = cost.dense_bytes(step["n"], len(step["q"]))
    return table(
        rows,
        formats={"KiB read": "{:.1f}", "share of dense": "{:.1%}", "to choose (keys_read = 0)": _PCT2},
        caption=f"layer {step['layer']}, head {step['model_head']}, (K, L) = ({step['K']}, {step['L']}): each method "
        f"reads {step['keys_read']} of {step['n']:,} keys; dense reads {dense / 1024:.0f} KiB; per query head, "
        "nothing shared, MagicPIG's hyperplanes included",
    )


def matched_view(results: dict) -> Table:
    """Section 9: every method against TopK at each matched budget (:func:`pigviz.study.rows.matched_rows`)."""
    return table(
        study_rows.matched_rows(results),
        formats={"budget": _PCT2, "error": _F4, "/ TopK": "{:.2f}x", "bytes read": "{:.1%}"},
        caption="mean error at MagicPIG's budgets; bytes read: everything a step reads (pigviz.attention.cost), "
        "as a share of dense attention's; cells won: (layer, head) cells with a lower error than TopK's",
    )
