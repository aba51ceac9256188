"""Read the shipped decoding results and say what they show: tables for notebook 07a and the
claims ``pigviz verify`` re-derives from the per-token values stored beside each summary."""

from __future__ import annotations

import json
import math
import textwrap

from pigviz.attention.names import method_label
from pigviz.memory import budget as kv_budget
from pigviz.memory.model_shapes import get_model_shape
from pigviz.model import shipped

__all__ = [
    "QUALITY_FILE",
    "PASSKEY_FILE",
    "SPEED_FILE",
    "GPU_SPEED_FILE",
    "load_result",
    "load_gpu_speed",
    "magicpig_summary",
    "quality_rows",
    "passkey_rows",
    "speed_table_rows",
    "speed_table",
    "side_by_side",
    "headline",
    "rederives_its_means",
    "SAME_WITHIN",
    "compare",
    "speed_summary",
    "same_band",
    "MEMORY_TOLERANCE_MB",
    "memory_check",
    "ATTEND_FILE",
    "AUTHORS_FILE",
    "ASSUMED_HBM_BYTES_PER_S",
    "ASSUMED_KERNELS_PER_LAYER",
    "ASSUMED_LAUNCH_SECONDS",
    "ASSUMED_GPU_DTYPE_BYTES",
    "gpu_step_envelope",
    "speed_pairs",
    "fair_rows",
    "DENSE_FORMS",
    "GENERATION_TOKENS",
    "AT_ITS_BEST_WITHIN",
    "per_token_with_index",
    "recentre_ms_per_token",
    "dense_yardstick",
    "headline_rows",
    "KERNEL_KL",
    "kernel_runs",
    "kernel_yardstick_rows",
    "kernel_rows",
    "authors_rows",
]

QUALITY_FILE = "decode_quality_smollm2.json"
PASSKEY_FILE = "passkey_smollm2.json"
SPEED_FILE = "decode_speed_cpu.json"
GPU_SPEED_FILE = "decode_speed_gpu.json"  # written only where a GPU run was recorded
ATTEND_FILE = "bench_attend_cpu.json"  # one layer's step alone: floors, threads, SDPA
AUTHORS_FILE = "bench_authors_cpu.json"  # pigviz's step beside the MagicPIG authors' kernels


def load_result(name: str, *, verify: bool = True) -> dict:
    """A shipped result from ``pigviz/data/``; with ``verify`` its sha256 must match the manifest."""
    path = shipped.verified_path(name, verify=verify)
    return json.loads(path.read_text(encoding="utf-8"))


def load_gpu_speed() -> dict | None:
    """The GPU check's result if one was imported into ``pigviz/data/`` (``gpu_check.sh import``), else None."""
    if GPU_SPEED_FILE not in shipped.read_manifest()["files"]:
        return None
    return load_result(GPU_SPEED_FILE)


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def magicpig_summary(data: dict) -> list[dict]:
    """MagicPIG rows averaged over seeds, per (K, L): budget, KL, top-1, perplexity, and the
    seed-to-seed range of KL."""
    out = []
    for K, L in data["settings"]["configs"]:
        rows = [r for r in data["rows"] if r["method"] == "magicpig" and (r["K"], r["L"]) == (K, L)]
        out.append(
            {
                "K": K,
                "L": L,
                "seeds": len(rows),
                "budget": _mean(r["budget"] for r in rows),
                "kl_mean": _mean(r["kl_mean"] for r in rows),
                "kl_min": min(r["kl_mean"] for r in rows),
                "kl_max": max(r["kl_mean"] for r in rows),
                "top1_agreement": _mean(r["top1_agreement"] for r in rows),
                "perplexity": _mean(r["perplexity"] for r in rows),
            }
        )
        for key in ("budget_sampled", "budget_all_layers"):  # recorded since the budget was counted both ways
            if all(key in r for r in rows):
                out[-1][key] = _mean(r[key] for r in rows)
    return out


def quality_rows(data: dict) -> list[dict]:
    """The rows of the quality table: dense, then per (K, L) MagicPIG (mean over seeds, with the
    seed-to-seed range of KL) and each baseline at its budget. ``budget``: keys read / visible over
    the layers a method makes sparse; ``all lyr``: over every layer, dense ones at 100%; ``sampled``:
    MagicPIG's sampled / sampleable keys (the share its authors report); None where a row has none."""
    dense = next(r for r in data["rows"] if r["method"] == "dense")
    out = [
        {
            "attention": "dense (reference)",
            "budget": 1.0,
            "all lyr": 1.0,
            "sampled": None,
            "KL (nats)": 0.0,
            "KL seed range": "",
            "top-1": 1.0,
            "ppl": dense["perplexity"],
        }
    ]
    for s in magicpig_summary(data):
        out.append(
            {
                "attention": f"MagicPIG K={s['K']} L={s['L']}, {s['seeds']} seeds",
                "budget": s["budget"],
                "all lyr": s.get("budget_all_layers"),
                "sampled": s.get("budget_sampled"),
                "KL (nats)": s["kl_mean"],
                "KL seed range": f"{s['kl_min']:.3f}-{s['kl_max']:.3f}",
                "top-1": s["top1_agreement"],
                "ppl": s["perplexity"],
            }
        )
        for r in data["rows"]:
            if r["method"] not in ("dense", "magicpig") and (r["K"], r["L"]) == (s["K"], s["L"]):
                out.append(
                    {
                        "attention": "  " + method_label(r.get("variant", r["method"])),
                        "budget": r["budget"],
                        "all lyr": r.get("budget_all_layers"),
                        "sampled": None,
                        "KL (nats)": r["kl_mean"],
                        "KL seed range": "",
                        "top-1": r["top1_agreement"],
                        "ppl": r["perplexity"],
                    }
                )
    return out


def passkey_rows(data: dict) -> list[dict]:
    """Per length and method: trials retrieved, the 95% Wilson interval, the budget read."""
    return [
        {
            "length": r["length"],
            "attention": method_label(r["method"]),
            "retrieved": f"{r['correct']}/{r['n']}",
            "95% CI": f"[{r['ci_low']:.0%}, {r['ci_high']:.0%}]",
            "budget": r["budget"],
        }
        for r in data["rows"]
    ]


def speed_table_rows(rows: list[dict]) -> list[dict]:
    """Per context and method: step, attention and rest time on the wall clock, the index build, the
    budget and the ratios to dense at that context; the decoding thread's CPU time where every row
    carries it; peak RSS and the index's size where every row does (``bench_decode.py --memory``).

    Files that time dense in several forms (:data:`DENSE_FORMS`) also set every row against the
    fastest measured dense at its context (by attention time: CPU time where every row has it):
    ``fastest dense``, ``attn / fastest dense``, ``step / fastest dense``. Where every row has its
    bandwidth floor (``attention_floor_ms``): ``attn floor ms`` (the row's own K/V and index reads at
    the run's bandwidth), ``attn x floor`` (its attention time on the table's clock over that floor)
    and ``attn / bf16 floor``: the time over dense's byte
    floor in bf16 (the ``dense_grouped_bf16`` row's floor at the context; None without such a row).
    Where a row measured the index's upkeep (``upkeep_ms_per_token``: ``bench_decode.py`` since the
    upkeep was timed), per generation length G of :data:`GENERATION_TOKENS` (``256``, ``4,096``):
    ``attn + index ms, G tokens`` (:func:`per_token_with_index`: attention plus the upkeep per token
    plus the build spread over G; dense rows, which keep no index, their attention), the same over
    dense's bf16 floor (where the floors are) and over the fastest dense's attention, and ``step +
    index ms, G tokens`` and its ratio to the fastest dense's step. A row with an index but no upkeep
    measured shows None there."""
    cpu = all("attention_cpu_ms" in r for r in rows)  # CPU-time columns (newer files)
    memory = all("peak_rss_mb" in r for r in rows)  # measured with --memory
    floors = bool(rows) and all(r.get("attention_floor_ms") for r in rows)
    clock_name = "cpu" if cpu else "wall"
    upkeep = any(_UPKEEP[clock_name] in r for r in rows)  # files since the upkeep was timed
    dense = {r["context"]: r for r in rows if r["method"] == "dense"}
    # Files that time dense in several forms (transformers' SDPA, grouped in fp32 and bf16) also
    # set every method against the fastest of them at its context.
    forms = any(r["method"].startswith("dense_") for r in rows)
    clock = "attention_cpu_ms" if cpu else "attention_ms"
    step = "step_cpu_ms" if cpu else "step_ms"
    yard = {y["context"]: y for y in dense_yardstick(rows)} if forms or floors else {}
    best = {c: y["fastest_row"] for c, y in yard.items()}
    out = []
    for r in rows:
        d = dense.get(r["context"])
        ratio = lambda key, r=r, d=d: r[key] / d[key] if d and d[key] > 0 else None  # noqa: E731
        row = {
            "context": r["context"],
            "method": r["method"],
            "step ms": r["step_ms"],
            "attn ms": r["attention_ms"],
            "rest ms": r["rest_ms"],
            "index s": r["index_seconds"],
            "budget": r["budget"],
            "step / dense": ratio("step_ms"),
            "attn / dense": ratio("attention_ms"),
        }
        if cpu:
            row.update(
                {
                    "CPU: step ms": r["step_cpu_ms"],
                    "CPU: attn ms": r["attention_cpu_ms"],
                    "CPU: step / dense": ratio("step_cpu_ms"),
                    "CPU: attn / dense": ratio("attention_cpu_ms"),
                }
            )
        if memory:
            row.update({"peak MB": r["peak_rss_mb"], "index MB": r["index_mb"]})
        y = yard.get(r["context"])
        b = best.get(r["context"])
        if forms and b is not None:
            row.update(
                {
                    "threads": r.get("threads"),
                    "fastest dense": b["method"],
                    "attn / fastest dense": _over(r[clock], b[clock]),
                    "step / fastest dense": _over(r[step], b[step]),
                }
            )
        if floors:
            bf16 = y["dense_bf16_floor_ms"] if y else None
            row.update(
                {
                    "attn floor ms": r["attention_floor_ms"],
                    "attn x floor": _over(r[clock], r["attention_floor_ms"]),
                    "attn / bf16 floor": _over(r[clock], bf16),
                }
            )
        if upkeep:
            bf16 = y["dense_bf16_floor_ms"] if y else None
            for tokens in GENERATION_TOKENS:
                g = f"{tokens:,} tokens"
                attn = per_token_with_index(r, tokens, clock=clock_name)
                whole = per_token_with_index(r, tokens, clock=clock_name, what="step")
                row[f"attn + index ms, {g}"] = attn
                if floors:
                    row[f"attn + index / bf16 floor, {g}"] = _over(attn, bf16)
                row[f"attn + index / fastest dense, {g}"] = _over(attn, b[clock] if b else None)
                row[f"step + index ms, {g}"] = whole
                row[f"step + index / fastest dense, {g}"] = _over(whole, b[step] if b else None)
        out.append(row)
    return out


def _over(x, y):
    """x / y, or None where either is missing or y is not positive."""
    return None if x is None or y is None or not y > 0 else x / y


def speed_table(rows: list[dict]) -> str:
    """``speed_table_rows`` as text (the CLI's table)."""
    table = speed_table_rows(rows)
    cpu, memory = bool(table) and "CPU: step ms" in table[0], bool(table) and "peak MB" in table[0]
    forms = bool(table) and "fastest dense" in table[0]
    ratio = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
    width = max([9, *(len(r["method"]) for r in table)])
    lines = [
        f"{'context':>7}  {'method':<{width}} {'step ms':>8} {'attn ms':>8} {'rest ms':>8} "
        f"{'index s':>8} {'budget':>7} {'step/dense':>10} {'attn/dense':>10}"
        + (f" {'CPU: step ms':>12} {'attn ms':>8} {'attn/dense':>10}" if cpu else "")
        + (f" {'peak MB':>8} {'index MB':>8}" if memory else "")
        + (f" {'threads':>7} {'attn/fastest dense':>18}" if forms else "")
    ]
    for r in table:
        lines.append(
            f"{r['context']:>7}  {r['method']:<{width}} {r['step ms']:8.1f} {r['attn ms']:8.1f} "
            f"{r['rest ms']:8.1f} {r['index s']:8.2f} {100 * r['budget']:6.1f}% "
            f"{ratio(r['step / dense']):>10} {ratio(r['attn / dense']):>10}"
            + (
                f" {r['CPU: step ms']:12.1f} {r['CPU: attn ms']:8.1f} {ratio(r['CPU: attn / dense']):>10}"
                if cpu
                else ""
            )
            + (f" {r['peak MB']:8.0f} {r['index MB']:8.0f}" if memory else "")
            + (f" {r['threads']!s:>7} {ratio(r['attn / fastest dense']):>18}" if forms else "")
        )
    if forms:
        lines.append(
            "dense: transformers' SDPA (K/V repeated per query head, fp32); dense_grouped: each KV head read "
            "once, fp32; dense_grouped_bf16: the same on a bf16 cache. fastest dense: the fastest of them at that "
            "context, by attention time (CPU time where measured)."
        )
    return "\n".join(lines)


def side_by_side(generations: list[dict], width: int = 96) -> str:
    """The shared start of several generations, then where each goes its own way."""
    ids = [g["token_ids"] for g in generations]
    same = 0
    while all(len(t) > same for t in ids) and len({t[same] for t in ids}) == 1:
        same += 1
    shared = "".join(generations[0]["token_texts"][:same])
    lines = [
        f"first {same} of {min(map(len, ids))} generated tokens identical:",
        textwrap.indent(textwrap.fill(repr(shared), width), "  "),
    ]
    for g in generations:
        rest = "".join(g["token_texts"][same:])
        lines.append(f"then {g['attention']} (mean budget {100 * _mean(g['budgets'][1:]):.1f}%):")
        lines.append(textwrap.indent(textwrap.fill(repr(rest), width), "  "))
    return "\n".join(lines)


def headline(data: dict, K: int, L: int) -> dict:
    """MagicPIG at (K, L) next to each baseline at its budget (mean KL, top-1)."""
    s = next(x for x in magicpig_summary(data) if (x["K"], x["L"]) == (K, L))
    base = {
        r.get("variant", r["method"]): r
        for r in data["rows"]
        if r["method"] not in ("dense", "magicpig") and (r["K"], r["L"]) == (K, L)
    }
    return {"magicpig": s, "baselines": base}


def rederives_its_means(row: dict) -> bool:
    kl, agree, nll = row["kl_per_token"], row["agree_per_token"], row["nll_per_token"]
    return (
        math.isclose(_mean(kl), row["kl_mean"], rel_tol=1e-4, abs_tol=1e-6)
        and math.isclose(_mean(agree), row["top1_agreement"], abs_tol=1e-9)
        and math.isclose(math.exp(_mean(nll)), row["perplexity"], rel_tol=1e-4)
    )


# -- speed: words chosen by comparisons, so the prose stays true when the file is re-measured ---------------
# A time ratio (method / reference) within this share of 1, either way, is at least "about the same": the
# shipped timings come from a machine shared with other jobs. Where a file measures more noise than this
# (see ``same_band``), the band widens to that noise.
SAME_WITHIN = 0.10


def compare(
    ratio: float,
    *,
    within: float = SAME_WITHIN,
    words: tuple[str, str, str] = ("faster than", "about as fast as", "slower than"),
) -> str:
    """A word for a time ratio (method / reference): ``words[0]`` below ``1 / (1 + within)``,
    ``words[2]`` above ``1 + within``, else ``words[1]``."""
    if not (ratio > 0 and within >= 0):
        raise ValueError(f"need a positive ratio and a non-negative band, got {ratio!r} and {within!r}")
    if ratio > 1 + within:
        return words[2]
    if ratio < 1 / (1 + within):
        return words[0]
    return words[1]


def speed_summary(rows: list[dict], method: str = "magicpig", against: str = "dense") -> list[dict]:
    """Per context where both dense and ``method`` ran: the shares and ratios notebook 07 states.
    ``against``: "dense" (transformers' SDPA, the model's own attention) or "best" (at each context
    the dense form of :data:`DENSE_FORMS` with the least attention CPU time: the fastest measured
    dense; its name in ``against``). ``*_cpu`` come from the decoding thread's CPU time, ``*_wall`` from the
    wall clock. ``rest_gap`` is how far the identical work outside attention differs between the two
    runs (max / min - 1): a gauge of the timing noise."""
    if against == "dense":
        dense = {r["context"]: r for r in rows if r["method"] == "dense"}
    elif against == "best":
        dense = {}
        for r in rows:
            if r["method"] in DENSE_FORMS and (
                r["context"] not in dense or r["attention_cpu_ms"] < dense[r["context"]]["attention_cpu_ms"]
            ):
                dense[r["context"]] = r
    else:
        raise ValueError(f"against must be 'dense' or 'best', got {against!r}")
    out = []
    for r in rows:
        d = dense.get(r["context"])
        if r["method"] != method or d is None:
            continue
        rest_cpu = (d["step_cpu_ms"] - d["attention_cpu_ms"], r["step_cpu_ms"] - r["attention_cpu_ms"])
        rest_wall = (d["rest_ms"], r["rest_ms"])
        out.append(
            {
                "context": r["context"],
                "against": d["method"],
                "budget": r["budget"],
                "index_seconds": r["index_seconds"],
                "dense_attention_share_cpu": d["attention_cpu_ms"] / d["step_cpu_ms"],
                "dense_attention_share_wall": d["attention_ms"] / d["step_ms"],
                "attention_ratio_cpu": r["attention_cpu_ms"] / d["attention_cpu_ms"],
                "attention_ratio_wall": r["attention_ms"] / d["attention_ms"],
                "step_ratio_cpu": r["step_cpu_ms"] / d["step_cpu_ms"],
                "step_ratio_wall": r["step_ms"] / d["step_ms"],
                "rest_gap_cpu": max(rest_cpu) / min(rest_cpu) - 1,
                "rest_gap_wall": max(rest_wall) / min(rest_wall) - 1,
            }
        )
    return sorted(out, key=lambda s: s["context"])


def same_band(summary: list[dict], clock: str = "cpu") -> float:
    """The band within which a ratio on ``clock`` ("cpu" or "wall") counts as "about the same": the
    larger of ``SAME_WITHIN`` and the largest ``rest_gap_<clock>`` of a ``speed_summary``, the measured
    run-to-run noise of identical work. A ratio inside the noise cannot be called faster or slower."""
    if clock not in ("cpu", "wall"):
        raise ValueError(f"clock must be 'cpu' or 'wall', got {clock!r}")
    return max([SAME_WITHIN] + [s[f"rest_gap_{clock}"] for s in summary])


# -- memory: MagicPIG must not hold a second copy of the KV cache ---------------------------------------------
# Peak RSS of two processes that do identical work is not identical: the allocator's state after the model
# load and the prefill differs. Two identical runs of bench_decode.py --memory at 1,024 tokens started
# decoding 50 MB apart (MagicPIG) here. A second K/V copy of SmolLM2 at 8k (360 MB in fp32) is far beyond this.
MEMORY_TOLERANCE_MB = 64.0


def memory_check(
    rows: list[dict], method: str = "magicpig", *, tolerance_mb: float = MEMORY_TOLERANCE_MB
) -> list[dict]:
    """Per context where dense and ``method`` both carry memory fields (``bench_decode.py --memory``),
    the target "peak RSS no more than dense's, plus the index, less what a smaller KV cache saves":
    ``holds`` when ``peak(method) <= peak(dense) + index_mb - kv_saved_mb + tolerance_mb``. The peak
    compared is the decoding one (from the end of the prefill on) where both rows have it, else the
    whole process's; ``measure`` names it. ``kv_saved_mb`` is dense's KV cache less ``method``'s
    where both rows record it (MagicPIG's sampled layers in bf16), else 0. ``excess_mb`` is what
    ``method`` holds beyond that (negative: less). Rows without memory fields (older files) give an
    empty list."""
    if not (isinstance(tolerance_mb, (int, float)) and not isinstance(tolerance_mb, bool) and tolerance_mb >= 0):
        raise ValueError(f"tolerance_mb must be a number >= 0 (MB), got {tolerance_mb!r}")
    dense = {r["context"]: r for r in rows if r["method"] == "dense" and "peak_rss_mb" in r}
    out = []
    for r in rows:
        d = dense.get(r["context"])
        if r["method"] != method or d is None or "peak_rss_mb" not in r:
            continue
        both_decode = r.get("decode_peak_rss_mb") is not None and d.get("decode_peak_rss_mb") is not None
        measure = "decode_peak_rss_mb" if both_decode else "peak_rss_mb"
        kv = "kv_cache_mb" in r and "kv_cache_mb" in d
        saved = d["kv_cache_mb"] - r["kv_cache_mb"] if kv else 0.0
        expected = d[measure] + r["index_mb"] - saved
        out.append(
            {
                "context": r["context"],
                "measure": measure,
                "dense_mb": d[measure],
                "method_mb": r[measure],
                "index_mb": r["index_mb"],
                "kv_saved_mb": saved,
                "dense_kv_cache_mb": d["kv_cache_mb"] if kv else None,
                "kv_cache_mb": r["kv_cache_mb"] if kv else None,
                "tolerance_mb": float(tolerance_mb),
                "limit_mb": expected + tolerance_mb,
                "excess_mb": r[measure] - expected,
                "holds": r[measure] - expected <= tolerance_mb,
            }
        )
    return sorted(out, key=lambda c: c["context"])


# -- a GPU decode step on paper (no GPU run is recorded) ------------------------------------------------------
# Assumptions, not measurements. Bandwidth: an H100's HBM (notebook 05's figure); an H200 reads
# faster, which only shrinks the read times. Kernels: a low count for one decoder layer run op by op
# (two norms, seven matrix products, RoPE, attention and two residual adds are already more than
# ten). Launch: the host-side cost of launching one small kernel from eager PyTorch, typically a
# few microseconds; CUDA graphs or fused kernels cut it.
ASSUMED_HBM_BYTES_PER_S = kv_budget.STORAGE_TIERS_GBPS["GPU HBM (H100)"] * 1e9
ASSUMED_KERNELS_PER_LAYER = 10
ASSUMED_LAUNCH_SECONDS = 5e-6
ASSUMED_GPU_DTYPE_BYTES = 2  # bf16 weights and KV cache


def gpu_step_envelope(
    model: str,
    context: int,
    *,
    bandwidth: float = ASSUMED_HBM_BYTES_PER_S,
    kernels_per_layer: int = ASSUMED_KERNELS_PER_LAYER,
    launch_seconds: float = ASSUMED_LAUNCH_SECONDS,
    dtype_bytes: int = ASSUMED_GPU_DTYPE_BYTES,
) -> dict:
    """Back-of-envelope times for one dense decode step of one sequence on a GPU: reading the KV
    cache and the weights once at ``bandwidth``, against launching ``kernels_per_layer`` kernels
    per layer at ``launch_seconds`` each. Arithmetic on assumed constants, not a measurement."""
    shape = get_model_shape(model)
    kv_bytes = context * kv_budget.kv_bytes_per_token(shape, dtype_bytes=dtype_bytes)
    weight_bytes = shape.params * dtype_bytes
    return {
        "model": shape.name,
        "context": context,
        "kernels": shape.layers * kernels_per_layer,
        "kv_bytes": kv_bytes,
        "weight_bytes": weight_bytes,
        "kv_read_s": kv_bytes / bandwidth,
        "weight_read_s": weight_bytes / bandwidth,
        "launch_s": shape.layers * kernels_per_layer * launch_seconds,
    }


# -- the rows notebook 07 renders beside the claims that re-check them -----------------------------------------
DENSE_FORMS = ("dense", "dense_grouped", "dense_grouped_bf16")
"""The dense paths ``bench_decode.py`` times: transformers' SDPA (K/V repeated per query head, the
model's dtype), and the grouped form (each KV head read once) on an fp32 and on a bf16 cache."""


def fair_rows(speed: dict) -> list[dict]:
    """:func:`speed_pairs`'s rule over every form of dense (:data:`DENSE_FORMS`) and MagicPIG: the
    first row per (context, method), for setting MagicPIG against the fastest measured dense and
    against dense's byte floor (:func:`dense_yardstick`). The rows themselves, not copies."""
    if not isinstance(speed, dict) or not isinstance(speed.get("rows"), list):
        raise ValueError("speed must be a decode speed result (a dict with a list of 'rows')")
    seen, out = set(), []
    for r in speed["rows"]:
        key = (r["context"], r["method"])
        if (r["method"] in DENSE_FORMS or r["method"] == "magicpig") and key not in seen:
            seen.add(key)
            out.append(r)
    return out


# -- the index's cost per generated token, and dense's yardsticks -------------------------------------------
GENERATION_TOKENS = (256, 4096)
"""The generation lengths over which the index's build is spread in the per-token figures."""

AT_ITS_BEST_WITHIN = 1.3
"""A dense path may be called "at its best" only within this factor of its own byte floor (issue 39);
otherwise the fastest one is "the fastest measured dense" (``dense_yardstick``'s
``fastest_dense_at_its_best`` says which)."""

# Per clock: the row fields of attention and step time, the index's upkeep per generated token and its build.
_ATTENTION = {"cpu": "attention_cpu_ms", "wall": "attention_ms"}
_STEP = {"cpu": "step_cpu_ms", "wall": "step_ms"}
_UPKEEP = {"cpu": "upkeep_cpu_ms_per_token", "wall": "upkeep_ms_per_token"}
_BUILD = {"cpu": "index_cpu_seconds", "wall": "index_seconds"}


def per_token_with_index(row: dict, tokens: int, *, clock: str = "cpu", what: str = "attention") -> float | None:
    """A speed row's per-token ``what`` time ("attention" or "step", ms, on ``clock``: "cpu" for the
    decoding thread's CPU time, "wall") with its index's cost added: the upkeep per generated token
    (``upkeep_[cpu_]ms_per_token``: every generated token is filed once in each sampled layer's index)
    and the build after the prefill (``index_[cpu_]seconds``) spread over ``tokens`` generated tokens.
    With ``recentre`` in the row's options the re-centrings' share is added too
    (:func:`recentre_ms_per_token`). A row that keeps no index (no build time and no upkeep field:
    dense) gives its own time; a row with
    an index whose upkeep was not measured (files before ``bench_decode.py`` timed it) gives None."""
    if clock not in _ATTENTION:
        raise ValueError(f"clock must be 'cpu' or 'wall', got {clock!r}")
    if what not in ("attention", "step"):
        raise ValueError(f"what must be 'attention' or 'step', got {what!r}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be a whole number of generated tokens >= 1, got {tokens!r}")
    base = row.get((_ATTENTION if what == "attention" else _STEP)[clock])
    if base is None:
        return None
    build = row.get(_BUILD[clock]) or 0.0
    upkeep = row.get(_UPKEEP[clock])
    if upkeep is None:
        return base if build == 0 else None
    return base + upkeep + 1e3 * build / tokens + recentre_ms_per_token(row, clock=clock)


def recentre_ms_per_token(row: dict, *, clock: str = "cpu") -> float:
    """The re-centrings' cost per generated token (ms) of a speed row decoded with ``recentre=r``
    (its ``options``; 0 or absent: none): a layer is rebuilt when its index reaches r times the
    tokens its mean covers, so a rebuild over n tokens follows n (1 - 1/r) generated ones, and
    with the build's time proportional to n (the row's ``index_[cpu_]seconds`` over ``context``
    tokens) each generated token carries r / (r - 1) times the build's time per token. An
    estimate from the prefill's build, not a timed re-centring."""
    r = (row.get("options") or {}).get("recentre") or 0
    build = row.get(_BUILD[clock]) or 0.0
    if r < 2 or not build or not row.get("context"):
        return 0.0
    return r / (r - 1) * 1e3 * build / row["context"]


def dense_yardstick(rows: list[dict], method: str = "magicpig") -> list[dict]:
    """Per context with a dense row (any method named ``dense...``), the yardsticks issue 39 asks every
    comparison with dense to show, on one clock (the decoding thread's CPU time where every row has it,
    else the wall clock; ``clock``):

    * ``dense_bf16_floor_ms``: dense's byte floor in bf16, the ``dense_grouped_bf16`` row's
      ``attention_floor_ms`` (its K/V bytes in bf16 at the run's measured read bandwidth); None where
      the file has no such row;
    * ``dense``: per measured dense path, its attention time ``ms``, its own floor ``floor_ms`` (its
      bytes, in its dtype) and ``over_floor``;
    * ``fastest_dense`` (its name), ``fastest_dense_ms``, ``fastest_dense_over_floor`` (over its own
      floor) and ``fastest_dense_at_its_best``: within :data:`AT_ITS_BEST_WITHIN` of that floor (None
      without a floor); ``fastest_row``: the row itself;
    * where ``method`` ran at the context (None otherwise): its ``attention_ms``, its attention plus
      the index's build and upkeep amortised over each length of :data:`GENERATION_TOKENS`
      (``with_index_ms_256``, ``with_index_ms_4096``: :func:`per_token_with_index`), and each of the
      three over dense's bf16 floor (``over_bf16_floor``, ``with_index_256_over_bf16_floor``, ...) and
      over the fastest dense's attention (``over_fastest_dense``, ...); None where a part is missing."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError("rows must be a list of speed rows (dicts)")
    cpu = all("attention_cpu_ms" in r for r in rows)
    clock = "cpu" if cpu else "wall"
    key = _ATTENTION[clock]
    out = []
    for context in sorted({r["context"] for r in rows}):
        here = [r for r in rows if r["context"] == context]
        dense = [r for r in here if r["method"].startswith("dense")]
        if not dense:
            continue
        fastest = min(dense, key=lambda r: r[key])
        bf16 = next((r for r in dense if r["method"] == "dense_grouped_bf16"), None)
        floor = fastest.get("attention_floor_ms")
        y = {
            "context": context,
            "clock": clock,
            "dense_bf16_floor_ms": bf16.get("attention_floor_ms") if bf16 else None,
            "dense": {},
            "fastest_dense": fastest["method"],
            "fastest_dense_ms": fastest[key],
            "fastest_dense_over_floor": _over(fastest[key], floor),
            "fastest_row": fastest,
        }
        for r in dense:  # the first row per dense path
            floor_r = r.get("attention_floor_ms")
            y["dense"].setdefault(
                r["method"], {"ms": r[key], "floor_ms": floor_r, "over_floor": _over(r[key], floor_r)}
            )
        over = y["fastest_dense_over_floor"]
        y["fastest_dense_at_its_best"] = None if over is None else over <= AT_ITS_BEST_WITHIN
        m = next((r for r in here if r["method"] == method), None)
        times = {"": m[key] if m else None}
        for tokens in GENERATION_TOKENS:
            times[f"with_index_{tokens}_"] = per_token_with_index(m, tokens, clock=clock) if m else None
        y["attention_ms"] = times[""]
        for tokens in GENERATION_TOKENS:
            y[f"with_index_ms_{tokens}"] = times[f"with_index_{tokens}_"]
        for prefix, t in times.items():
            y[f"{prefix}over_bf16_floor"] = _over(t, y["dense_bf16_floor_ms"])
            y[f"{prefix}over_fastest_dense"] = _over(t, fastest[key])
        out.append(y)
    return out


def speed_pairs(speed: dict) -> list[dict]:
    """The rows section 5 compares: dense and MagicPIG, the first row recorded per (context, method).
    A re-measured file may add fields or further rows for the same pair (a sweep over threads or cache
    dtypes); the added fields are kept, the later rows left to tables of their own."""
    if not isinstance(speed, dict) or not isinstance(speed.get("rows"), list):
        raise ValueError("speed must be a decode speed result (a dict with a list of 'rows')")
    seen, out = set(), []
    for r in speed["rows"]:
        key = (r["context"], r["method"])
        if r["method"] in ("dense", "magicpig") and key not in seen:
            seen.add(key)
            out.append(r)
    return out


def headline_rows(data: dict, K: int, L: int) -> list[dict]:
    """At one (K, L): MagicPIG's budget and mean KL with its seeds' range, then each baseline at its
    budget with a verdict against that range: closer to dense, further from dense, or within it."""
    head = headline(data, K, L)
    mp = head["magicpig"]
    rows = [
        {
            "attention": f"MagicPIG ({K}, {L})",
            "budget": mp["budget"],
            "KL": mp["kl_mean"],
            "against MagicPIG": f"its seeds: {mp['kl_min']:.3f} to {mp['kl_max']:.3f}",
        }
    ]
    for name in ("topk", "quest/4", "quest", "quest_rank_all", "streaming"):
        r = head["baselines"].get(name)
        if r is not None:
            verdict = "closer to dense" if r["kl_mean"] < mp["kl_min"] else "further from dense"
            verdict = verdict if not mp["kl_min"] <= r["kl_mean"] <= mp["kl_max"] else "within MagicPIG's seed range"
            rows.append(
                {
                    "attention": method_label(name),
                    "budget": r["budget"],
                    "KL": r["kl_mean"],
                    "against MagicPIG": verdict,
                }
            )
    return rows


KERNEL_KL = (10, 150)  # the (K, L) the kernel table shows (the benchmark adds a larger L at 96k)


def kernel_runs(attend: dict, K: int = KERNEL_KL[0], L: int = KERNEL_KL[1]) -> list[dict]:
    """The rows of ``bench_attend.py``'s file at (K, L) that carry the bf16 thread sweep."""
    runs = [r for r in attend["rows"] if (r["K"], r["L"]) == (K, L) and "attend_bf16_threads_ms" in r]
    if not runs:
        raise ValueError(f"the kernel file has no row with a bf16 thread sweep at (K, L) = ({K}, {L})")
    return runs


def kernel_rows(attend: dict) -> list[dict]:
    """Per shape and context at ``KERNEL_KL``: the compiled step's time over its bandwidth floor, float32 and
    bf16 K/V on one thread; per thread count asked, the threads the step used and, only where it used more
    than one, its bf16 speed-up (a step too small to split ran on one thread: None); SDPA's time over
    attend's, both fp32; and, where the file has it, the fastest measured dense (the faster of its fp32
    and bf16; ``fastest dense``: its dtype) over the faster of attend's fp32 and bf16."""
    out = []
    for r in kernel_runs(attend):
        row = {
            "shape": r["shape"],
            "tokens": r["n"],
            "keys read": r["budget"],
            "fp32: ms": r["attend_ms"],
            "fp32: x floor": r["attend_over_floor"],
            "bf16: ms": r["attend_bf16_ms"],
            "bf16: x floor": r["attend_bf16_over_floor"],
        }
        for t, speedup in sorted(r["thread_speedup_bf16"].items(), key=lambda kv: int(kv[0])):
            if t != "1":
                used = r["attend_threads_used"][t]
                row[f"{t} threads asked: used"] = used
                row[f"{t} threads: bf16 speed-up"] = speedup if used > 1 else None
        row["SDPA fp32 / attend fp32"] = r["sdpa_ms"] / r["attend_ms"]
        if "dense_best_ms" in r:  # files measured since dense was also timed in bf16
            row["fastest dense"] = {"bfloat16": "sdpa bf16", "float32": "sdpa fp32"}[r["dense_best_dtype"]]
            row["fastest dense / fastest attend"] = r["speedup_best"]
        out.append(row)
    return out


def kernel_yardstick_rows(attend: dict) -> list[dict]:
    """Per shape and context at ``KERNEL_KL``, ``bench_attend.py``'s yardstick (files measured since it
    was added; [] before): dense's byte floor in bf16 and its arithmetic floor (its multiply-adds at the
    run's measured one-thread matmul rate), each dense SDPA over the byte floor of its own dtype, the
    fastest measured dense (named) and its time, MagicPIG's bf16 step over its own floor, and MagicPIG
    per generated token with its index (upkeep, re-centring at each doubling, the build spread over
    256 and 4,096 generated tokens), over dense's bf16 floor and against the fastest dense."""
    out = []
    for r in kernel_runs(attend):
        if "dense_bf16_floor_ms" not in r:
            return []
        out.append(
            {
                "shape": r["shape"],
                "tokens": r["n"],
                "dense bf16 floor ms": r["dense_bf16_floor_ms"],
                "dense arithmetic floor ms": r["dense_flop_floor_ms"],
                "SDPA fp32 x floor": r["sdpa_over_floor"],
                "SDPA bf16 x floor": r["sdpa_bf16_over_floor"],
                "fastest dense": r["fastest_dense"],
                "fastest dense ms": r["fastest_dense_ms"],
                "MagicPIG step ms": r["attend_bf16_ms"],
                "step x own floor": r["attend_bf16_over_floor"],
                "MagicPIG per token, 256 ms": r["mp_token_256_ms"],
                "256: x dense floor": r["mp_token_256_over_dense_floor"],
                "MagicPIG per token, 4,096 ms": r["mp_token_4096_ms"],
                "4,096: x dense floor": r["mp_token_4096_over_dense_floor"],
                "fastest dense / MagicPIG, 4,096": r["fastest_dense_over_mp_token_4096"],
            }
        )
    return out


# The speed targets set for the Llama-like layer at its largest size (bench_attend.py prints them, finding 3
# quotes them): MagicPIG per generated token, its index counted over 4,096 tokens, at most this share of
# dense's bf16 byte floor; its step at most this many times its own byte floor.
TARGET_SHARE_OF_DENSE_FLOOR = 0.25
TARGET_STEP_OVER_FLOOR = 2.5


def kernel_reach(row: dict) -> dict:
    """What the measured floors of the machine that ran ``bench_attend.py --stages`` allow MagicPIG's
    bf16 step and its cost per generated token, for one of its rows.

    The step reads its sampled K and V rows at random places. A core has only so many reads from
    memory in flight, so those rows arrive no faster than the gather floor (random rows of the
    same size and count, timed in the same run) however the loop around them is written; the
    other stages' floors add to that unless they overlap it. The index costs at least its
    hashing: every key against L*K planes at the run's one-thread matmul rate, for the build,
    for the re-centrings (twice the build per token over n, as the yardstick counts them) and
    for each inserted token. The bounds use the gathers alone, which no interleaving beats.

    Returns
    -------
    dict
        ``step_floors_ms`` (all stages' floors added up) and ``gather_floors_ms`` (the K and V
        gathers'), each also over the step's own byte floor (``*_over_own_floor``);
        ``build_hashing_ms``; ``token_4096_bound_ms``, the gathers plus the index's hashing with
        the build spread over 4,096 generated tokens, and ``token_4096_bound_over_dense_floor``.
    """
    st = row["stages_bf16"]["stages"]
    step = sum(x["floor_ms"] for x in st.values())
    gather = st["K"]["floor_ms"] + st["mix"]["floor_ms"]
    macs_per_key = row["kv_heads"] * row["L"] * row["K"] * row["d"]
    build = 1e3 * row["n"] * macs_per_key / row["gemm_macs_per_s"]
    tokens = max(GENERATION_TOKENS)
    hashing = 1e3 * macs_per_key / row["gemm_macs_per_s"] + 2 * build / row["n"] + build / tokens
    return {
        "step_floors_ms": step,
        "step_floors_over_own_floor": step / row["attend_bf16_floor_ms"],
        "gather_floors_ms": gather,
        "gather_floors_over_own_floor": gather / row["attend_bf16_floor_ms"],
        "build_hashing_ms": build,
        "token_4096_bound_ms": gather + hashing,
        "token_4096_bound_over_dense_floor": (gather + hashing) / row["dense_bf16_floor_ms"],
    }


def authors_rows(authors: dict) -> list[dict]:
    """``bench_authors.py``'s rows by shape, context and thread count (asked, and used by pigviz): the
    authors' kernels and pigviz on the same data and hash codes (the same sampled sets). pigviz is timed
    on the same work as their kernels (the sampled part) and for its whole step (query hashing and exact
    keys too): median times, the authors' time over each, and each over its bandwidth floor."""
    return [
        {
            "shape": r["shape"],
            "tokens": r["n"],
            "threads": r["threads"],
            "pigviz used": r.get("threads_used", r["threads"]),
            "same sampled sets": "yes" if r["same_sampled_sets"] else "NO",
            "authors ms": r["authors_ms"],
            "pigviz, same work: ms": r["pigviz_same_work_ms"],
            "authors / same work": r["authors_ms"] / r["pigviz_same_work_ms"],
            "pigviz, whole step: ms": r["pigviz_whole_step_ms"],
            "authors / whole step": r["authors_ms"] / r["pigviz_whole_step_ms"],
            "authors x floor": r["authors_over_floor"],
            "same work x floor": r["pigviz_same_work_over_floor"],
        }
        for r in sorted(authors["rows"], key=lambda r: (r["shape"], r["n"], r["threads"]))
    ]
