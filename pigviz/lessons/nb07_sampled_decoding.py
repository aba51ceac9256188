"""Notebook 07, sampled decoding: ``claims`` (whose values and quotes vouch for every number its markdown
writes), re-derived from the shipped files through ``pigviz.decode.report`` and ``pigviz.decode.stats``
(which build the rows), and the notebook's loaders and table formats."""

from __future__ import annotations

import numpy as np

from pigviz.decode import report, stats
from pigviz.decode.evaluate import wilson_interval
from pigviz.decode.report import SAME_WITHIN, compare, headline, load_result, speed_pairs, speed_summary
from pigviz.decode.session import default_options
from pigviz.decode.stats import seed_spreads, worst_share
from pigviz.lessons.tables import Table, table
from pigviz.lessons.verify import Claim
from pigviz.memory.budget import format_bytes, kv_bytes_per_token
from pigviz.memory.model_shapes import get_model_shape
from pigviz.study.findings import load_shipped_results, wins

__all__ = ["PROSE_DEFINED", "claims", "seed_spreads", "load_results", "load_study", "load_kernels",
           "SPEED_COLUMNS", "SPEED_FORMATS", "kernel_table", "authors_table"]  # fmt: skip

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

# The speed table's columns and formats (section 5).
SPEED_COLUMNS = ["context", "method", "CPU: step ms", "CPU: attn ms", "step / best dense", "attn / best dense",
                 "CPU: attn / dense", "budget"]  # fmt: skip
SPEED_FORMATS = {"context": "{:,}", "budget": "{:.1%}"}
SPEED_FORMATS |= dict.fromkeys(["CPU: step ms", "CPU: attn ms"], "{:.1f}")
SPEED_FORMATS |= dict.fromkeys(["CPU: attn / dense", "step / best dense", "attn / best dense"], "{:.2f}x")


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
    return Claim("07", text, bool(ok), value, quotes=tuple(quotes))


# =========================================================================== claims


def claims():
    """Notebook 07's statements, re-derived from the shipped files."""
    quality, passkey, speed = load_results()
    out = _quality_claims(quality) + _generation_claims(quality) + _passkey_claims(passkey, quality)
    out += _speed_claims(speed, quality["generation"])
    out += kernel_claims(*load_kernels())
    out += _answer_claims(quality, passkey, speed)
    return out


def _quality_claims(quality: dict) -> list[Claim]:
    rows = quality["rows"]
    out = [_claim("quality summaries re-derive from their per-token values",
                  all(report.rederives_its_means(r) for r in rows), f"{len(rows)} rows")]  # fmt: skip
    head = headline(quality)
    mp, base = head["magicpig"], head["baselines"]
    out.append(_claim(
        "MagicPIG (10, 150) reads a few per cent of the cache per step; its mean KL and dense's distance to "
        "StreamingLLM's and TopK's at the same budget (section 3's bottom line)",
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
    out.append(_claim("notebook 06: at (10, 150) TopK's error is lower than MagicPIG's in most (layer, head) cells",
                      topk_won > cells / 2, f"{topk_won} of {cells}", f"{topk_won} of its {cells}"))  # fmt: skip
    out.append(_claim(
        "across seeds, the decode KL's std is over 10% of it at every (K, L), while the std of notebook 06's "
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


def _speed_claims(speed: dict, generations: list[dict]) -> list[Claim]:
    """What section 5 states, checked against the raw rows. The speed file is re-measured from time to time,
    so most of these check that the stated numbers and words match the file, not that a direction holds."""
    rows, smol = speed_pairs(speed), get_model_shape(SMOL)
    dense = {r["context"]: r for r in rows if r["method"] == "dense"}
    ss = speed_summary(rows)
    ctx, steps = [s["context"] for s in ss], sorted({r["steps"] for r in rows})
    att, step = [s["attention_ratio_cpu"] for s in ss], [s["step_ratio_cpu"] for s in ss]
    # Which dense path the in-model ratio is against: transformers' sdpa expands K/V to every query head
    # (enable_gqa / repeat_kv) and reads fp32; bench_attend times that form and the grouped one alone.
    dp = stats.dense_path(rows, load_result(report.ATTEND_FILE)["rows"], SMOL)
    last, short = dp["context"], smol.max_context - dp["context"]
    # Dense at its best: the fastest form at each context (a file without the grouped rows has none to set).
    fair = report.fair_rows(speed)
    fb = speed_summary(fair, against="best") if {r["method"] for r in fair} >= set(report.DENSE_FORMS) else []
    if not fb:
        raise ValueError(f"the speed file has no rows of every dense form ({', '.join(report.DENSE_FORMS)})")
    band_b = report.same_band(fb)
    att_b, step_b, best = ([s[k] for s in fb] for k in ("attention_ratio_cpu", "step_ratio_cpu", "against"))
    share_b = [s["dense_attention_share_cpu"] for s in fb]
    verdicts = [compare(x, within=band_b) for x in step_b]
    predicted_b = [1 - sh * (1 - a) for sh, a in zip(share_b, att_b)]
    out = [
        _claim("speed rows re-derive: rest = step - attention, and every method at a context timed the same steps; "
               "the longer context is the model's limit less the tokens decoded (timed steps and a short warm-up)",
               all(abs(r["rest_ms"] - (r["step_ms"] - r["attention_ms"])) <= 1e-6 * r["step_ms"] for r in rows)
               and len(steps) == 1 and 0 < short - steps[0] < 10,
               f"{len(rows)} rows; {last:,} = {smol.max_context:,} - {short}",
               f"{last:,} tokens", f"{smol.max_context:,}-token", f"{short} tokens", f"{steps[0]} timed"),
        _claim(f"section 5: against dense at its best (at each context the fastest of transformers' SDPA and the "
               f"grouped form on fp32 and bf16 caches, CPU time), MagicPIG's attention is faster than dense (beyond "
               f"the noise band, max({SAME_WITHIN:.0%}, the rest-of-step gap)), and the whole step's verdict at each "
               "context is the one stated",
               [s["context"] for s in fb] == ctx and all(compare(x, within=band_b) == "faster than" for x in att_b)
               and all(v != "slower than" for v in verdicts),
               ", ".join(f"{c:,}: {a:.2f}x / {s:.2f}x vs {f}" for c, a, s, f in zip(ctx, att_b, step_b, best)),
               _joined("{:,}", ctx), _joined("{:.2f}x", att_b), _joined("{:.2f}x", step_b),
               _joined("{:.1%}", [s["budget"] for s in fb]), f"{SAME_WITHIN:.0%}",
               f"{max(s['rest_gap_cpu'] for s in fb):.0%}", *sorted(set(best)),
               *(f"{v} the fastest dense" for v in verdicts)),
        _claim("section 5: attention is under half of the fastest dense step (CPU time), and 1 - share x "
               "(1 - attention ratio) predicts the whole step's ratio within the noise band",
               all(x < 0.5 for x in share_b)
               and all(abs(p / m - 1) <= band_b for p, m in zip(predicted_b, step_b)),
               ", ".join(f"{c:,}: {m:.2f}x (predicted {p:.2f}x)" for c, m, p in zip(ctx, step_b, predicted_b)),
               _joined("{:.0%}", share_b), _span("{:.0%}", share_b), _joined("{:.2f}x", predicted_b)),
        _claim("section 5: against transformers' SDPA, the model's own attention (K/V repeated per query head, fp32), "
               "MagicPIG's ratios are smaller than against dense at its best at every context: the expanded path "
               "flatters it; the fastest dense was a grouped form at every context",
               all(a < b for a, b in zip(att, att_b)) and all(f != "dense" for f in best),
               ", ".join(f"{c:,}: {a:.2f}x vs {b:.2f}x" for c, a, b in zip(ctx, att, att_b)),
               _joined("{:.2f}x", att), _joined("{:.2f}x", step), f"{att_b[-1] / att[-1]:.1f}x better",
               *_each("{:.1f} ms", [r["attention_cpu_ms"] for r in fair if r["context"] == last])),
    ]  # fmt: skip
    memory = report.memory_check(rows)
    if memory:
        m = memory[-1]
        o = next(r for r in rows if r["method"] == "magicpig" and r["context"] == m["context"])["options"]
        ix = stats.index_per_key(m, o["K"], o["L"], dp["sampled_layers"], smol.kv_heads)
        fp32 = m["dense_kv_cache_mb"]  # the fp32 cache dense held
        out.append(_claim(
            "memory: MagicPIG's decoding peak is within the tolerance of dense's plus its index less what its bf16 "
            "layers save (no second copy of the cache); its index outweighs the KV cache it held (sampled layers "
            "bf16, layer 0 fp32) but not the fp32 cache dense held; per key, 05a's bill of ids and offsets plus "
            "hyperplanes and norms",
            all(x["holds"] for x in memory) and m["kv_cache_mb"] < m["index_mb"] < fp32
            and ix["ids_and_offsets"] < ix["per_key"],
            f"{m['index_mb']:.0f} MiB index vs {m['kv_cache_mb']:.0f} MiB held, {fp32:.0f} MiB fp32",
            f"{m['context']:,}", *_each("{:,.0f} MiB", (m["method_mb"], m["dense_mb"])),
            *_each("{:.0f} MiB", [m[k] for k in ("index_mb", "kv_saved_mb", "excess_mb", "tolerance_mb")]),
            f"{m['index_mb'] / m['kv_cache_mb']:.1f}x", f"{m['kv_cache_mb']:.0f} MiB", f"{m['index_mb'] / fp32:.1f}x",
            f"{fp32:.0f} MiB", f"{ix['per_key']:.0f} bytes", f"{ix['ids_and_offsets']:.0f}", f"{ix['id_bits']}-bit",
        ))  # fmt: skip
    run = stats.generation_run(generations)
    same = next(s for s in ss if s["context"] == run["context"])
    bench_dense = dense[run["context"]]["step_ms"]
    small = report.gpu_step_envelope(SMOL, smol.max_context)
    big = report.gpu_step_envelope("Llama-3.1-8B", get_model_shape("Llama-3.1-8B").max_context)
    return out + [
        _claim("building the index after the prefill takes seconds at every context",
               all(1 < s["index_seconds"] < 60 for s in ss), _joined("{:.1f} s", [s["index_seconds"] for s in ss]),
               *(f"{s['index_seconds']:.1f} s at {s['context']:,}" for s in ss)),
        _claim("section 2's generation run was slower than dense on the wall clock, unlike the benchmark at that "
               "context, and MagicPIG's attention (its first step's extra time taken out) accounts for at least "
               "three quarters of the gap; its dense step was faster than the benchmark's dense step at that context",
               run["attention_explains_gap"] and run["step_ratio_wall"] > 1 > same["step_ratio_wall"]
               and run["dense_step_ms"] < bench_dense,
               f"median step {run['step_ratio_wall']:.2f}x vs {same['step_ratio_wall']:.2f}x",
               f"{run['context']:,}", *_each("{:.0f} ms", (run["magicpig_step_ms"], run["dense_step_ms"])),
               *_each("{:.2f}x", (run["step_ratio_wall"], same["step_ratio_wall"])),
               *_each("{:.0f} ms", [run[k] for k in ("magicpig_attention_ms", "magicpig_attention_ms_floor",
                                                     "dense_attention_ms")] + [bench_dense]),
               f"{run['steps']} steps"),
        _claim("GPU arithmetic on assumed constants: launches outweigh all reads for SmolLM2 at its longest context; "
               "for Llama-3.1-8B at its longest, the cache read outweighs the launches",
               small["launch_s"] > small["kv_read_s"] + small["weight_read_s"] and big["kv_read_s"] > big["launch_s"],
               f"{1e3 * small['launch_s']:.1f} ms vs {1e3 * (small['kv_read_s'] + small['weight_read_s']):.2f} ms; "
               f"{1e3 * big['kv_read_s']:.1f} ms vs {1e3 * big['launch_s']:.1f} ms",
               f"{small['context']:,} tokens", *_each("{:.0f} µs", (1e6 * small["kv_read_s"],
               1e6 * small["weight_read_s"])), f"{small['kernels']} kernel", f"{big['context']:,}",
               f"{report.ASSUMED_KERNELS_PER_LAYER} kernels"),
    ]  # fmt: skip


def _answer_claims(quality: dict, passkey: dict, speed: dict) -> list[Claim]:
    """The questions' answers and the Going-further numbers, each re-derived."""
    st, smol = quality["settings"], get_model_shape(SMOL)
    stream = sorted((r for r in quality["rows"] if r["method"] == "streaming"), key=lambda r: r["budget"])
    window = [round(r["budget"] * st["prefix"]) - default_options("streaming")["sinks"] for r in stream]
    exact = sum(default_options("magicpig")[k] for k in ("sinks", "recent"))
    mp_pk = [r for r in passkey["rows"] if r["method"] == "magicpig"]
    first = next(r for r in quality["rows"] if r["method"] == "magicpig")  # K=10, L=150, seed 0
    lr = stats.layers_read(first, smol.layers, len(st["dense_layers"]))
    g = next(x for x in quality["generation"] if x["attention"] == "magicpig")
    sampled = smol.layers - len(g["options"]["dense_layers"])
    events, median_step = stats.rebuild_events(24, 16), float(np.median(g["step_seconds"][1:]))
    per_tok = kv_bytes_per_token(smol, dtype_bytes=4)
    even = smol.params * 4 / per_tok
    ss = speed_summary(speed_pairs(speed))
    qb, mp_all = stats.quest_bytes(quality, 4, SMOL), headline(quality)["magicpig"]["budget_all_layers"]
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
        _claim("answer 5: 24 tokens with buffer=16 rebuild once, counted once per sampled layer; a rebuild costs many "
               "decode steps",
               events == 1 and g["index_seconds"] > 5 * median_step, f"{events} x {sampled} = {events * sampled}",
               "23 decode steps", "16 tokens", f"reads {events * sampled}", f"{g['index_seconds']:.2f} s",
               f"{g['prompt_tokens']:,} tokens", f"{1e3 * median_step:.0f} ms"),
        _claim("answer 6: SmolLM2-135M's fp32 KV cache reads as many bytes as its weights only beyond its context",
               even > smol.max_context, f"{even:,.0f} tokens",
               f"{smol.params:,}", format_bytes(smol.params * 4), f"{smol.layers} layers", f"{per_tok:,} B",
               f"{even:,.0f} tokens", f"{smol.max_context:,}-token",
               " and ".join(f"{s['context'] * per_tok / (smol.params * 4):.0%}" for s in ss)),
        _claim("Going further: Quest with pages of 4 reads far more of dense's bytes than its key budget says, and "
               "more keys over all layers than MagicPIG",
               qb["bytes_share"] > 2 * qb["budget"] and qb["budget_all_layers"] > mp_all,
               f"{qb['bytes_share']:.0%} of the bytes, {_pct(qb['budget'])} of the keys",
               f"{qb['bounds_share']:.0%}", f"{qb['bytes_share']:.0%}", _pct(qb["budget"]),
               _pct(qb["budget_all_layers"]), _pct(mp_all)),
    ]  # fmt: skip


def kernel_claims(attend: dict, authors: dict) -> list[Claim]:
    """Section 5's kernel sentences, re-derived from the raw times, bytes and bandwidths in the files."""
    runs = report.kernel_runs(attend)
    floors_ok = all(
        abs(r["attend_over_floor"] - r["attend_ms"] / r["attend_floor_ms"]) < 1e-9 * r["attend_over_floor"]
        and abs(r["attend_floor_ms"] - r["attend_bytes"] / (attend["bandwidth_gbs"] * 1e9) * 1e3) < 1e-6
        for r in runs
    )
    longest = max(r["n"] for r in runs)
    big = {r["shape"]: r for r in runs if r["n"] == longest}
    smol = big[SMOL]
    split = {s: r["thread_speedup_bf16"]["2"] for s, r in big.items() if r["attend_threads_used"].get("2") == 2}
    one = [r for r in runs if r["attend_threads_used"].get("2") == 1]
    llama = [r["thread_speedup_bf16"]["2"] for r in runs if r["shape"] != SMOL and r not in one]
    side = report.authors_rows(authors)
    ratios = [r["authors / same work"] for r in side]
    behind = [r["authors / whole step"] for r in side if r["authors / whole step"] < 1]
    verdicts = [compare(1 / x) for x in ratios]  # pigviz's time over the authors'
    ahead = sum(v == "faster than" for v in verdicts)
    return [
        _claim("section 5's kernel table: each floor is the bytes read at the measured bandwidth, each ratio the time "
               "over it, quoted at the longest context for SmolLM2's shape",
               floors_ok,
               ", ".join(f"{r['shape']} {r['n']:,}: {r['attend_over_floor']:.1f}x" for r in runs),
               f"{longest:,} tokens", *_each("{:.1f}x", (smol["attend_over_floor"], smol["attend_bf16_over_floor"])),
               f"{attend['bandwidth_gbs']:.1f} GB/s"),
        _claim("section 5's thread column: a speed-up is shown only where the step used 2 threads; where it split, "
               "2 threads ran faster than one",
               bool(split) and all(x > 1 for x in split.values()), f"{len(one)} rows ran one thread when 2 were asked",
               f"{len(one)} of {len(runs)} rows" if one else f"every one of the {len(runs)} rows",
               f"{split[SMOL]:.1f}x", _span("{:.1f}x", llama)),
        _claim("beside the authors' kernels: the same sampled sets in every row, and pigviz never behind for the same "
               f"work (the sampled part; ahead beyond {SAME_WITHIN:.0%}, else level); the rows where the authors beat "
               "pigviz's whole step, counted",
               all(r["same sampled sets"] == "yes" for r in side) and all(v != "slower than" for v in verdicts),
               ", ".join(f"{r['shape']} {r['tokens']:,} x{r['threads']}: {x:.2f}x" for r, x in zip(side, ratios)),
               _span("{:.2f}x", ratios), f"ahead in {ahead} of {len(side)} rows",
               *([f"level in {len(side) - ahead}"] if ahead < len(side) else []),
               f"faster in {len(behind)} row" + ("s" if len(behind) != 1 else "") if behind else "faster in no row",
               *_each("{:.2f}x", behind)),
    ]  # fmt: skip


# =========================================================================== what the notebook loads and shows


def load_results() -> tuple[dict, dict, dict]:
    """The shipped quality, passkey and CPU speed results (each checked against the manifest's sha256)."""
    return load_result(report.QUALITY_FILE), load_result(report.PASSKEY_FILE), load_result(report.SPEED_FILE)


def load_study() -> dict:
    """Notebook 06's shipped study (every head of SmolLM2-135M), for its seed spread."""
    return load_shipped_results()


def load_kernels() -> tuple[dict, dict]:
    """The shipped timings of one layer's step alone (``bench_attend.py``) and beside the MagicPIG
    authors' CPU kernels (``bench_authors.py``), each checked against its sha256."""
    return load_result(report.ATTEND_FILE), load_result(report.AUTHORS_FILE)


def kernel_table(attend: dict) -> Table:
    """``report.kernel_rows``: each step's time over its floor, fp32 and bf16, the threads used and the
    bf16 speed-up only where it split, SDPA over attend."""
    rows = report.kernel_rows(attend)
    formats = {"tokens": "{:,}", "keys read": "{:.1%}", "fp32: ms": "{:.2f}", "bf16: ms": "{:.2f}"}
    formats |= {c: "{:.1f}x" for c in rows[0] if "x floor" in c or "speed-up" in c or "/" in c}
    return table(rows, formats=formats)


def authors_table(authors: dict) -> Table:
    """``report.authors_rows``: the authors' kernels beside pigviz on the same work and for its whole step."""
    formats = dict.fromkeys(["authors ms", "pigviz, same work: ms", "pigviz, whole step: ms"], "{:.2f}")
    formats |= dict.fromkeys(["authors / same work", "authors / whole step"], "{:.2f}x")
    formats |= {"tokens": "{:,}", "authors x floor": "{:.1f}x", "same work x floor": "{:.1f}x"}
    return table(report.authors_rows(authors), formats=formats)
