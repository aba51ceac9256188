"""Finding 4, decoding quality and the passkey test: ``claims`` (whose values and quotes vouch
for every number its markdown writes), re-derived from the shipped files through
``pigviz.decode.report`` and ``pigviz.decode.stats`` (which build the rows), and its loaders."""

from __future__ import annotations

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz.decode import report, stats
from pigviz.decode.evaluate import wilson_interval
from pigviz.decode.report import headline, load_result
from pigviz.decode.session import default_options
from pigviz.decode.stats import worst_share
from pigviz.lessons.verify import Claim
from pigviz.memory.model_shapes import get_model_shape
from pigviz.study.findings import load_shipped_results, wins

__all__ = ["PROSE_DEFINED", "claims", "load_results", "load_study"]

NOTEBOOK = "f4"
SMOL = "SmolLM2-135M"

PROSE_DEFINED = {
    "2025": "the MagicPIG paper's year (ICLR 2025)",
    "2024": "Quest's paper year (ICML 2024)",
    "10": "K = 10, the paper's default (K, L) = (10, 150)",
    "150": "L = 150, the paper's default (K, L) = (10, 150)",
    "16": "Quest's page size in its paper, a default of pigviz.decode.session",
    "95%": "the confidence level of the Wilson interval",
    "64": "the recent window, a default of pigviz.decode.session; head_dim of SmolLM2-135M",
    "1,024": "the live cell's prompt length, and question 3's",
    "24": "the live cell's new tokens (question 5)",
    "1k": "question 3's 1,024-token prefix",
    "8k": "SmolLM2-135M's 8,192-token context, rounded",
    "30": "SmolLM2-135M's layers (pigviz.memory.model_shapes)",
    "5.1": "the 5.1 ms of the GPU arithmetic (quoted by its claim as 5.1 ms)",
}


def _pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def _each(fmt: str, xs) -> tuple[str, ...]:
    """One formatted quote per number: ``_each("{:.0f} ms", [a, b])``."""
    return tuple(fmt.format(x) for x in xs)


def _joined(fmt: str, xs) -> str:
    return " and ".join(_each(fmt, xs))


def _span(fmt: str, xs) -> str:
    """``"least to most"``, each formatted: ``_span("{:.1f}x", ratios)`` -> ``"1.1x to 2.5x"``."""
    return f"{fmt.format(min(xs))} to {fmt.format(max(xs))}"


def _claim(text: str, ok, value: str, *quotes: str) -> Claim:
    return Claim(NOTEBOOK, text, bool(ok), value, quotes=tuple(quotes))


# =========================================================================== claims


def claims():
    """Finding 4's statements, re-derived from the shipped files."""
    quality, passkey = load_results()
    out = _quality_claims(quality) + _generation_claims(quality) + _passkey_claims(passkey, quality)
    return out + _answer_claims(quality, passkey)


def _quality_claims(quality: dict) -> list[Claim]:
    rows = quality["rows"]
    out = [_claim("quality summaries re-derive from their per-token values",
                  all(report.rederives_its_means(r) for r in rows), f"{len(rows)} rows")]  # fmt: skip
    head = headline(quality, DEFAULTS.K, DEFAULTS.L)
    mp, base = head["magicpig"], head["baselines"]
    out.append(_claim(
        "MagicPIG (10, 150) reads a few per cent of the cache per step; its mean KL and dense's distance to "
        "StreamingLLM's and TopK's at the same budget (section 2's bottom line)",
        0 < mp["budget"] < 0.1 and base["topk"]["kl_mean"] < mp["kl_mean"] < base["streaming"]["kl_mean"],
        _pct(mp["budget"], 2),
        f"{mp['kl_mean']:.3f}", f"{base['streaming']['kl_mean']:.2f}", f"{base['topk']['kl_mean']:.3f}",
    ))  # fmt: skip
    matched = stats.matched_rows(quality)

    def every(text, test, show, *quotes):
        if matched:
            out.append(_claim(text, all(map(test, matched)), ", ".join(map(show, matched)), *quotes))

    every("at every budget, oracle TopK stays closer to dense than MagicPIG",
          lambda m: m["topk"] < m["magicpig_min"], lambda m: f"{m['topk']:.3f}<{m['magicpig']:.3f}")  # fmt: skip
    every("at every budget, MagicPIG stays closer to dense than StreamingLLM", lambda m: m["magicpig_max"] <
          m["streaming"], lambda m: f"{m['magicpig']:.3f}<{m['streaming']:.2f}")  # fmt: skip
    vs_mp = [m["quest"] / m["magicpig"] for m in matched]
    vs_rank = [m["quest"] / m["quest_rank_all"] for m in matched]
    every("at every budget, Quest as its authors run it (current page read, layers 0-1 dense) stays closer to "
          "dense than ranking every page, and farther than MagicPIG (every seed)",
          lambda m: m["magicpig_max"] < m["quest"] < m["quest_rank_all"],
          lambda m: f"{m['quest_rank_all']:.2f}->{m['quest']:.3f}",
          _span("{:.1f}", vs_mp), f"{min(vs_rank):.0%}", f"{max(vs_rank):.0%}")  # fmt: skip
    every("Quest ranking every page has a KL of the order of StreamingLLM's at every budget (between half and twice)",
          lambda m: 0.5 < m["quest_rank_all"] / m["streaming"] < 2,
          lambda m: f"{m['quest_rank_all'] / m['streaming']:.2f}x")  # fmt: skip
    every("Quest with pages of 4 lands between TopK and MagicPIG",
          lambda m: m["topk"] < m["quest/4"] < m["magicpig_min"], lambda m: f"{m['quest/4']:.3f}")  # fmt: skip
    summary = report.magicpig_summary(quality)
    out.append(_claim(
        "counted as MagicPIG's authors count it (sampled / sampleable keys), every (K, L) reads less than "
        "pigviz's count (exact set and buffer included)",
        all(s["budget_sampled"] < s["budget"] for s in summary),
        ", ".join(f"{100 * s['budget_sampled']:.1f}% vs {100 * s['budget']:.1f}%" for s in summary),
    ))  # fmt: skip
    lo, hi = min(summary, key=lambda s: s["budget"]), max(summary, key=lambda s: s["budget"])
    ratio = lo["kl_mean"] / hi["kl_mean"]
    out.append(_claim(
        "MagicPIG's KL at its smallest budget is over twice that at its largest, and its top-1 agreement lower",
        ratio > 2 and lo["top1_agreement"] < hi["top1_agreement"],
        f"x{ratio:.1f} ({_pct(lo['budget'])} vs {_pct(hi['budget'])})",
        f"{ratio:.1f} times", _pct(hi["top1_agreement"]), _pct(lo["top1_agreement"]),
    ))  # fmt: skip
    spreads = [(s["kl_max"] - s["kl_min"]) / s["kl_mean"] for s in summary]
    out.append(_claim("the hash seed alone moves MagicPIG's KL by over 10% at every (K, L) (range over mean)",
                      min(spreads) > 0.1, _span("{:.0%}", spreads)))  # fmt: skip
    study = load_shipped_results()
    seeds = stats.seed_variance(quality, study)
    topk_won, cells = wins(study, "topk @K10 L150", "magicpig K10 L150")
    out.append(_claim("finding 1: at (10, 150) TopK's error is lower than MagicPIG's in most (layer, head) cells",
                      topk_won > cells / 2, f"{topk_won} of {cells}", f"{topk_won} of its {cells}"))  # fmt: skip
    out.append(_claim(
        "across seeds, the decode KL's std is over 10% of it at every (K, L), while the std of finding 1's "
        "per-row error (its four main (K, L) series) is under 5% of it",
        seeds[1]["std / mean, least"] > 0.1 and seeds[0]["std / mean, most"] < 0.05,
        f"{seeds[1]['std / mean, least']:.0%}-{seeds[1]['std / mean, most']:.0%} vs "
        f"{seeds[0]['std / mean, most']:.1%}",
    ))  # fmt: skip
    shares = [worst_share(r) for r in rows if r["method"] == "magicpig"]
    common = set.intersection(*map(set, stats.worst_positions(quality, 10, 150).values()))
    out.append(_claim(
        "in every MagicPIG run, the 5 worst positions carry over 10% of the total KL; at (10, 150) no position "
        "is among the 5 worst of every seed",
        min(shares) > 0.1 and not common,
        _span("{:.0%}", shares),
        f"5 worst of {quality['settings']['stretch']} positions",
    ))  # fmt: skip
    return out


def _generation_claims(quality: dict) -> list[Claim]:
    gens = quality["generation"]
    bare = {r["method"]: r['bare "def" items'] for r in stats.repeat_rows(gens)}
    mp = next(g for g in gens if g["attention"] == "magicpig")
    return [
        _claim(
            "MagicPIG's greedy continuation loops, listing \"def\" as a bare item several times; dense's does not",
            bare["magicpig"] >= 3 and bare["dense"] == 0,
            f"{bare['magicpig']} vs {bare['dense']}",
            f"first {stats.shared_start(gens)} of {len(mp['token_ids'])} tokens", _pct(np.mean(mp["budgets"][1:])),
        )
    ]  # fmt: skip


def _passkey_claims(passkey: dict, quality: dict) -> list[Claim]:
    trials = passkey["settings"]["trials"]
    ok = all(abs(r["ci_low"] - wilson_interval(r["correct"], r["n"])[0]) < 1e-9 and r["n"] == trials
             for r in passkey["rows"])  # fmt: skip
    t = stats.passkey_totals(passkey)
    of = {m: f"{x['correct']} of {x['n']}" for m, x in t.items()}
    share = {m: x["share"] for m, x in t.items()}
    K, L = passkey["settings"]["K"], passkey["settings"]["L"]
    top1 = headline(quality, K, L)["magicpig"]["top1_agreement"]
    mp = t["magicpig"]
    return [
        _claim("passkey counts and Wilson intervals re-derive", ok, f"{len(passkey['rows'])} rows"),
        _claim("dense retrieves the pass key in every trial", share["dense"] == 1.0, of["dense"]),
        _claim("MagicPIG misses it at most once", mp["n"] - mp["correct"] <= 1, of["magicpig"],
               f"{_pct(mp['budget_min'])} to {_pct(mp['budget_max'])}"),
        _claim("StreamingLLM (sinks + recent tokens only) never retrieves the key", share["streaming"] == 0,
               of["streaming"]),
        _claim("oracle TopK retrieves the key in every trial", share["topk"] == 1.0, of["topk"]),
        _claim("Quest as its authors run it retrieves the key at least as often as ranking every page, rarely with "
               "pages of 16, always with pages of 4",
               share["quest_rank_all"] <= share["quest"] < 0.25 and share["quest/4"] == 1.0,
               f"{of['quest']}, {of['quest_rank_all']}, {of['quest/4']}"),
        _claim("MagicPIG retrieves the key far more often than five digits would survive, independently, at its "
               "top-1 agreement on the text",
               share["magicpig"] > top1**5 + 0.2, f"{share['magicpig']:.0%} vs {top1**5:.0%}", _pct(1 - top1)),
    ]  # fmt: skip


def _answer_claims(quality: dict, passkey: dict) -> list[Claim]:
    """The questions' answers and the Going-further numbers, each re-derived."""
    st, smol = quality["settings"], get_model_shape(SMOL)
    stream = sorted((r for r in quality["rows"] if r["method"] == "streaming"), key=lambda r: r["budget"])
    window = [round(r["budget"] * st["prefix"]) - default_options("streaming")["sinks"] for r in stream]
    exact = sum(default_options("magicpig")[k] for k in ("sinks", "recent"))
    mp_pk = [r for r in passkey["rows"] if r["method"] == "magicpig"]
    first = next(r for r in quality["rows"] if r["method"] == "magicpig")  # K=10, L=150, seed 0
    lr = stats.layers_read(first, smol.layers, len(st["dense_layers"]))
    qb = stats.quest_bytes(quality, 4, SMOL, K=DEFAULTS.K, L=DEFAULTS.L)
    mp_all = headline(quality, DEFAULTS.K, DEFAULTS.L)["magicpig"]["budget_all_layers"]
    return [
        _claim("answer 2: StreamingLLM's KL moves by under 5% over its budgets, whose extra keys only widen the window",
               max(r["kl_mean"] for r in stream) < 1.05 * min(r["kl_mean"] for r in stream),
               ", ".join(f"{r['kl_mean']:.3f}" for r in stream),
               *(f"{r['kl_mean']:.3f} ({_pct(r['budget'])})" for r in stream),
               f"{window[0]:,} to about {window[-1]:,}", f"{st['prefix']:,}-token"),
        _claim("answer 3: the exact keys are a larger share at 1,024 tokens than at the quality prefix, and MagicPIG's "
               "passkey budget falls with length",
               exact / 1024 > exact / st["prefix"] and all(a["budget"] > b["budget"] for a, b in zip(mp_pk, mp_pk[1:])),
               ", ".join(f"{_pct(r['budget'])} at {r['length']:,}" for r in mp_pk),
               f"{exact} plus", _pct(exact / 1024), _pct(exact / st["prefix"]), f"{st['prefix']:,} tokens",
               *(f"{_pct(r['budget'])} at {r['length']:,}" for r in mp_pk)),
        _claim("answer 4: keeping layer 1 dense raises the keys read over all layers, while the sparse layers' "
               "mean budget barely moves",
               lr["then"] > lr["now"] and abs(lr["rest"] - first["budget"]) < 0.01,
               f"{_pct(lr['now'])} -> {_pct(lr['then'])}",
               _pct(lr["layer"]), "100%", _pct(lr["now"]), _pct(lr["then"]), _pct(lr["rest"], 2)),
        _claim("Going further: Quest with pages of 4 reads far more of dense's bytes than its key budget says, and "
               "more keys over all layers than MagicPIG",
               qb["bytes_share"] > 2 * qb["budget"] and qb["budget_all_layers"] > mp_all,
               f"{qb['bytes_share']:.0%} of the bytes, {_pct(qb['budget'])} of the keys",
               f"{qb['bounds_share']:.0%}", f"{qb['bytes_share']:.0%}", _pct(qb["budget"]),
               _pct(qb["budget_all_layers"]), _pct(mp_all)),
    ]  # fmt: skip


# =========================================================================== what the finding loads


def load_results() -> tuple[dict, dict]:
    """The shipped quality and passkey results (each checked against the manifest's sha256)."""
    return load_result(report.QUALITY_FILE), load_result(report.PASSKEY_FILE)


def load_study() -> dict:
    """Finding 1's shipped study (every head of SmolLM2-135M), for its seed spread."""
    return load_shipped_results()
