"""Finding 3, the bill and the speed: notebook 05a's bill for MagicPIG's tables beside the index
the engine builds, and the shipped CPU timing of one decode step (``claims``: every number the
finding's prose states), and the tables it shows. Nothing here writes the finding's prose.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz.decode import report, stats
from pigviz.decode.report import SAME_WITHIN, compare, load_result, speed_pairs, speed_summary
from pigviz.lessons.tables import Table, table
from pigviz.lessons.verify import Claim
from pigviz.lsh import index as lsh_index
from pigviz.memory import budget
from pigviz.memory.model_shapes import get_model_shape
from pigviz.model.shipped import data_dir, load_shipped_capture
from pigviz.study import rows as study_rows
from pigviz.study.findings import SPEED_COMMAND, SPEED_FILE

__all__ = ["claims", "PROSE_DEFINED", "bill_table", "speed_table", "load_speed", "load_generations", "load_kernels"]
__all__ += ["kernel_table", "authors_table", "SPEED_COLUMNS", "SPEED_FORMATS"]

# Numbers the prose writes that are not measured: the settings and the model's fixed facts.
PROSE_DEFINED = {
    "10": "K, bits per table, the paper's default (10, 150)",
    "150": "L, tables, the paper's default (10, 150)",
    "8,192": "tokens of the study's capture, the context the bill is drawn up for",
    "24": "the new tokens of lesson 07b's live cell (the question on rebuilds)",
}


def claims() -> list:
    out = []

    def claim(text, passed, value, quotes=()):
        out.append(Claim(notebook="f3", text=text, passed=bool(passed), value=value, quotes=tuple(quotes)))

    bill_claims(claim)
    speed, generations = load_speed(), load_generations()
    out += _speed_claims(speed, generations) + kernel_claims(*load_kernels()) + _rebuild_claims(speed, generations)
    return out


def bill_claims(claim, context: int = 8192, K: int = DEFAULTS.K, L: int = DEFAULTS.L) -> None:
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


# --------------------------------------------------------------------------- loaders


def _engine_index(K: int, L: int):
    """The first shipped layer's keys (one KV head) and the index the engine builds over them."""
    k = load_shipped_capture().keys[0, :1].float()
    return k, lsh_index.build_index(k, K=K, L=L)


# --------------------------------------------------------------------------- tables


def bill_table(context: int = 8192, K: int = DEFAULTS.K, L: int = DEFAULTS.L) -> Table:
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


def speed_table(path=None) -> Table:
    """The shipped CPU timing of one decode step of one layer (``benchmarks/bench_attend.py``)."""
    data = json.loads(Path(path or data_dir() / SPEED_FILE).read_text(encoding="utf-8"))
    rows, formats = study_rows.speed_rows(data)
    bandwidth = data.get("bandwidth_gbs")
    return table(
        rows,
        formats=formats,
        caption=f"one decode step of one layer, synthetic keys, {data['threads']} torch thread, "
        f"{data.get('clock', 'wall')} clock; MagicPIG and dense on float32 K/V, and on bfloat16 (bf16 columns; dense: "
        "one batched SDPA call that reads each KV head once for its group of query heads; K/V per query head: SDPA's "
        "enable_gqa=True, which copies them; speed-up, each at its best: the faster dense over the faster MagicPIG); "
        "tables / KV: the index against that fp32 cache and against an fp16 one"
        + (f"; floor: the bytes read at the measured {bandwidth:.1f} GB/s" if bandwidth else "")
        + f" ({SPEED_COMMAND})",
    )


# =========================================================================== decoding speed (from lesson 07a's data)

NOTEBOOK = "f3"
SMOL = "SmolLM2-135M"

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
    return Claim(NOTEBOOK, text, bool(ok), value, quotes=tuple(quotes))


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


def _rebuild_claims(speed: dict, generations: list) -> list[Claim]:
    """The question on rebuilds, re-derived."""
    smol = get_model_shape(SMOL)
    g = next(x for x in generations if x["attention"] == "magicpig")
    sampled = smol.layers - len(g["options"]["dense_layers"])
    events, median_step = stats.upkeep_events(24, 16), float(np.median(g["step_seconds"][1:]))
    return [
        _claim("the question's answer: 24 tokens with buffer=16 file the buffer once, counted once per sampled "
               "layer; a whole rebuild would cost many decode steps",
               events == 1 and g["index_seconds"] > 5 * median_step, f"{events} x {sampled} = {events * sampled}",
               "23 decode steps", "16 tokens", f"reads {events * sampled}", f"{g['index_seconds']:.2f} s",
               f"{g['prompt_tokens']:,} tokens", f"{1e3 * median_step:.0f} ms"),
    ]  # fmt: skip


def load_speed() -> dict:
    """The shipped in-model decoding speed (``bench_decode.py``), checked against its sha256."""
    return load_result(report.SPEED_FILE)


def load_generations() -> list:
    """Lesson 07a §2's two generation runs (in the shipped quality file)."""
    return load_result(report.QUALITY_FILE)["generation"]


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
