"""Read the shipped decoding results and say what they show: tables for notebook 07 and the
claims ``pigviz verify`` re-derives from the per-token values stored beside each summary."""

from __future__ import annotations

import json
import math
import textwrap

from pigviz.attention.names import method_label
from pigviz.model import shipped

__all__ = [
    "QUALITY_FILE",
    "PASSKEY_FILE",
    "SPEED_FILE",
    "GPU_SPEED_FILE",
    "load_result",
    "load_gpu_speed",
    "magicpig_summary",
    "quality_table",
    "passkey_table",
    "speed_table",
    "side_by_side",
    "headline",
    "rederives_its_means",
]

QUALITY_FILE = "decode_quality_smollm2.json"
PASSKEY_FILE = "passkey_smollm2.json"
SPEED_FILE = "decode_speed_cpu.json"
GPU_SPEED_FILE = "decode_speed_gpu.json"  # written only where a GPU run was recorded


def load_result(name: str, *, verify: bool = True) -> dict:
    """A shipped result from ``data/``; with ``verify`` its sha256 must match the manifest."""
    path = shipped.verified_path(name, verify=verify)
    return json.loads(path.read_text(encoding="utf-8"))


def load_gpu_speed() -> dict | None:
    """The GPU check's result if one was imported into ``data/`` (``gpu_check.sh import``), else None."""
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


def quality_table(data: dict) -> str:
    """Per (K, L): MagicPIG (mean over seeds, KL range) and each baseline at its budget.
    ``budget``: keys read / visible over the layers a method makes sparse; ``all layers``: over
    every layer, dense ones at 100%; ``sampled``: MagicPIG's sampled / sampleable keys (the
    share its authors report)."""
    dense = next(r for r in data["rows"] if r["method"] == "dense")
    pct = lambda row, key: f"{100 * row[key]:6.2f}%" if key in row else f"{'':>7}"  # noqa: E731
    lines = [
        f"{'attention':<34} {'budget':>7} {'all lyr':>7} {'sampled':>7} {'KL (nats), seed range':>22} "
        f"{'top-1':>7} {'ppl':>6}",
        f"{'dense (reference)':<34} {100.0:6.1f}% {100.0:6.1f}% {'':>7} {0.0:>22.4f} {100.0:6.1f}% "
        f"{dense['perplexity']:6.2f}",
    ]
    for s in magicpig_summary(data):
        spread = f"{s['kl_mean']:.4f} ({s['kl_min']:.3f}-{s['kl_max']:.3f})"
        name = f"MagicPIG K={s['K']} L={s['L']}, {s['seeds']} seeds"
        lines.append(
            f"{name:<34} "
            f"{100 * s['budget']:6.2f}% {pct(s, 'budget_all_layers')} {pct(s, 'budget_sampled')} "
            f"{spread:>22} {100 * s['top1_agreement']:6.1f}% {s['perplexity']:6.2f}"
        )
        for r in data["rows"]:
            if r["method"] not in ("dense", "magicpig") and (r["K"], r["L"]) == (s["K"], s["L"]):
                lines.append(
                    f"{'  ' + method_label(r.get('variant', r['method'])):<34} {100 * r['budget']:6.2f}% "
                    f"{pct(r, 'budget_all_layers')} {'':>7} "
                    f"{r['kl_mean']:>22.4f} {100 * r['top1_agreement']:6.1f}% {r['perplexity']:6.2f}"
                )
    return "\n".join(lines)


def passkey_table(data: dict) -> str:
    lines = [f"{'length':>6}  {'attention':<24} {'retrieved':>9}  {'95% CI':>12}  {'budget':>7}"]
    for r in data["rows"]:
        lines.append(
            f"{r['length']:>6}  {method_label(r['method']):<24} {r['correct']:>4}/{r['n']:<4}  "
            f"[{100 * r['ci_low']:3.0f}%, {100 * r['ci_high']:3.0f}%]  {100 * r['budget']:6.1f}%"
        )
    return "\n".join(lines)


def speed_table(rows: list[dict]) -> str:
    """Side by side per context: step/attention/rest time and the ratios to dense."""
    cpu = all("attention_cpu_ms" in r for r in rows)  # CPU-time columns (newer files)
    lines = [
        f"{'context':>7}  {'method':<9} {'step ms':>8} {'attn ms':>8} {'rest ms':>8} "
        f"{'index s':>8} {'budget':>7} {'step/dense':>10} {'attn/dense':>10}"
        + (f" {'CPU: step ms':>12} {'attn ms':>8} {'attn/dense':>10}" if cpu else "")
    ]
    dense = {r["context"]: r for r in rows if r["method"] == "dense"}
    for r in rows:
        d = dense.get(r["context"])

        def ratio(key, r=r, d=d):
            return f"{r[key] / d[key]:.2f}x" if d and d[key] > 0 else "-"

        lines.append(
            f"{r['context']:>7}  {r['method']:<9} {r['step_ms']:8.1f} {r['attention_ms']:8.1f} "
            f"{r['rest_ms']:8.1f} {r['index_seconds']:8.2f} {100 * r['budget']:6.1f}% "
            f"{ratio('step_ms'):>10} {ratio('attention_ms'):>10}"
            + (f" {r['step_cpu_ms']:12.1f} {r['attention_cpu_ms']:8.1f} {ratio('attention_cpu_ms'):>10}" if cpu else "")
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


def headline(data: dict, K: int = 10, L: int = 150) -> dict:
    """The default configuration next to each baseline at its budget (mean KL, top-1)."""
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
