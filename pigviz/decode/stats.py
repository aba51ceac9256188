"""What the shipped decoding runs show beyond their summaries: how two greedy continuations part and
repeat themselves, how much the hash seed moves a decode-time KL against finding 1's per-row
error, how each baseline stands against MagicPIG at matched budgets, which dense the in-model time is
against, and what the index, layer budgets and Quest's bounds cost. Each function returns rows (lists
of dicts) or one dict that notebook 07 renders and its claims re-check.
"""

from __future__ import annotations

import numpy as np

from pigviz.attention import cost
from pigviz.attention.names import method_label
from pigviz.decode.report import headline, magicpig_summary
from pigviz.memory.model_shapes import get_model_shape
from pigviz.study.findings import series_summary

__all__ = [
    "BARE_DEF",
    "shared_start",
    "repeat_rows",
    "worst_share",
    "worst_positions",
    "seed_spreads",
    "seed_variance",
    "generation_run",
    "upkeep_events",
    "BASELINES",
    "matched_rows",
    "passkey_totals",
    "dense_path",
    "index_per_key",
    "layers_read",
    "quest_bytes",
]

BARE_DEF = '*   "def"'  # the list item the shipped MagicPIG continuation repeats


def _runs(generations) -> list[dict]:
    if not isinstance(generations, (list, tuple)) or not generations:
        raise ValueError("generations must be a non-empty list of generation records (dicts with token_ids)")
    for g in generations:
        if not isinstance(g, dict) or not {"token_ids", "token_texts", "attention"} <= set(g):
            raise ValueError("each generation needs 'attention', 'token_ids' and 'token_texts'")
    return list(generations)


def shared_start(generations: list[dict]) -> int:
    """How many generated tokens every run has in common from the start."""
    ids = [g["token_ids"] for g in _runs(generations)]
    same = 0
    while all(len(t) > same for t in ids) and len({t[same] for t in ids}) == 1:
        same += 1
    return same


def repeat_rows(generations: list[dict]) -> list[dict]:
    """Per run, what it writes after the tokens all runs share: its non-empty lines, how many repeat an
    earlier line (or its start: a run stops mid-line at its last token), how often it writes ``"def"``
    and how many lines are the bare list item ``*   "def"``."""
    same = shared_start(generations)
    rows = []
    for g in _runs(generations):
        rest = "".join(g["token_texts"][same:])
        lines = [line.strip() for line in rest.splitlines() if line.strip()]
        rows.append(
            {
                "run": method_label(g["attention"]),
                "method": g["attention"],
                "shared tokens": same,
                '"def" written': rest.count('"def"'),
                'bare "def" items': sum(line == BARE_DEF for line in lines),
                "lines": len(lines),
                "lines that repeat an earlier one": sum(
                    any(prev.startswith(line) for prev in lines[:i]) for i, line in enumerate(lines)
                ),
            }
        )
    return rows


def worst_share(row: dict, worst: int = 5) -> float:
    """Share of a quality run's total KL carried by its ``worst`` positions."""
    if not (isinstance(worst, int) and worst >= 1):
        raise ValueError(f"worst must be an int >= 1, got {worst!r}")
    kl = sorted(row["kl_per_token"], reverse=True)
    return sum(kl[:worst]) / sum(kl)


def _magicpig(quality: dict, K: int, L: int) -> list[dict]:
    runs = [r for r in quality["rows"] if r["method"] == "magicpig" and (r["K"], r["L"]) == (K, L)]
    if not runs:
        raise ValueError(f"the quality file has no MagicPIG run at (K, L) = ({K}, {L})")
    return runs


def worst_positions(quality: dict, K: int, L: int, worst: int = 5) -> dict[int, list[int]]:
    """Per hash seed of MagicPIG at (K, L): the ``worst`` positions of the stretch with the largest KL."""
    return {r["seed"]: sorted(np.argsort(r["kl_per_token"])[-worst:].tolist()) for r in _magicpig(quality, K, L)}


def seed_spreads(quality: dict) -> list[float]:
    """Per (K, L) of the quality file: the std across hash seeds of MagicPIG's mean KL, over that KL."""
    out = []
    for K, L in quality["settings"]["configs"]:
        kls = np.array([r["kl_mean"] for r in _magicpig(quality, K, L)])
        out.append(float(kls.std(ddof=1) / kls.mean()))
    return out


def seed_variance(quality: dict, study: dict, model: str = "SmolLM2-135M") -> list[dict]:
    """Two rows, finding 1's seed-to-seed spread beside the decode KL's: the quantity, how many
    attention rows and hashed caches one seed's mean is over, and the std across seeds over the mean
    (least and most over the (K, L) settings). Finding 1: one index per (layer, KV head); here:
    every position of the stretch times every sampled layer and query head."""
    st, shape = quality["settings"], get_model_shape(model)
    err = [series_summary(study, f"magicpig K{K} L{L}") for K, L in study["spec"]["settings"]]
    sampled = shape.layers - len(st["dense_layers"])
    kl = seed_spreads(quality)
    return [
        {
            "measured in": "finding 1",
            "quantity": "output error of one attention row",
            "positions": None,
            "attention rows": series_summary(study, "magicpig K10 L150")["rows"],
            "hashed caches": len(study["layers"]) * study["kv_heads"],
            "std / mean, least": min(s["error_std"] / s["error"] for s in err),
            "std / mean, most": max(s["error_std"] / s["error"] for s in err),
        },
        {
            "measured in": "notebook 07a, section 3",
            "quantity": f"next-token KL, after {sampled} sampled layers",
            "positions": st["stretch"],
            "attention rows": st["stretch"] * sampled * shape.attention_heads,
            "hashed caches": sampled * shape.kv_heads,
            "std / mean, least": min(kl),
            "std / mean, most": max(kl),
        },
    ]


def _median(xs) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def generation_run(generations: list[dict]) -> dict:
    """A dense and a MagicPIG generation run, timed on the wall clock: the median decode step and the
    mean attention time per decode step of each (the first token comes out of the prefill and is left
    out). ``magicpig_attention_ms_floor``: MagicPIG's attention per step were all the extra time of
    its first decode step (which fills lookup tables) attention; ``attention_explains_gap``: whether
    attention accounts for at least three quarters of the gap between the median steps."""
    g = {x["attention"]: x for x in _runs(generations)}
    if not {"dense", "magicpig"} <= set(g):
        raise ValueError("generation_run needs a dense and a magicpig run")
    mp, dense = g["magicpig"], g["dense"]
    out = {"context": mp["prompt_tokens"], "steps": len(mp["step_seconds"]) - 1}
    for name, run in (("magicpig", mp), ("dense", dense)):
        out[f"{name}_step_ms"] = 1e3 * _median(run["step_seconds"][1:])
        out[f"{name}_attention_ms"] = 1e3 * run["attention_seconds"] / (len(run["step_seconds"]) - 1)
    extra = max(0.0, mp["step_seconds"][1] - _median(mp["step_seconds"][1:]))
    out["magicpig_attention_ms_floor"] = 1e3 * (mp["attention_seconds"] - extra) / (len(mp["step_seconds"]) - 2)
    out["step_ratio_wall"] = out["magicpig_step_ms"] / out["dense_step_ms"]
    out["attention_ratio_wall"] = out["magicpig_attention_ms"] / out["dense_attention_ms"]
    gap = out["magicpig_step_ms"] - out["dense_step_ms"]
    out["attention_explains_gap"] = bool(
        gap > 0 and out["magicpig_attention_ms_floor"] - out["dense_attention_ms"] >= 0.75 * gap
    )
    return out


def upkeep_events(new_tokens: int, buffer: int) -> int:
    """How often decoding files the buffer into MagicPIG's index in ``new_tokens`` generated tokens, by
    ``pigviz.decode.session``'s rule: the first token comes out of the prefill; each later one is a decode step
    that adds one token to the exact buffer, and when the buffer would grow past ``buffer`` tokens its tokens are
    hashed (the index's own planes and mean) and inserted into the tables, and the buffer starts again. Every
    sampled layer inserts at that step, and ``GenerationResult.upkeeps`` counts each layer's insertion: it reads
    this number times the sampled layers."""
    if not (isinstance(new_tokens, int) and not isinstance(new_tokens, bool) and new_tokens >= 1):
        raise ValueError(f"new_tokens must be an int >= 1, got {new_tokens!r}")
    if not (isinstance(buffer, int) and not isinstance(buffer, bool) and buffer >= 1):
        raise ValueError(f"buffer must be an int >= 1, got {buffer!r}")
    events, since = 0, 0  # tokens cached after the index was (re)built
    for _ in range(new_tokens - 1):  # decode steps
        since += 1
        if since > buffer:
            events, since = events + 1, 0
    return events


BASELINES = ("topk", "quest", "quest/4", "quest_rank_all", "streaming")  # the quality file's matched runs


def matched_rows(quality: dict, baselines: tuple[str, ...] = BASELINES) -> list[dict]:
    """Per (K, L) whose block has every one of ``baselines``: MagicPIG's budget and its mean, least and most
    KL over its seeds (``magicpig``, ``magicpig_min``, ``magicpig_max``), and each baseline's mean KL at the
    matched budget, under its name. Blocks missing a baseline are left out."""
    out = []
    for s in magicpig_summary(quality):
        base = headline(quality, s["K"], s["L"])["baselines"]
        if all(b in base for b in baselines):
            row = {"K": s["K"], "L": s["L"], "budget": s["budget"], "magicpig": s["kl_mean"]}
            row.update({"magicpig_min": s["kl_min"], "magicpig_max": s["kl_max"]})
            out.append(row | {b: base[b]["kl_mean"] for b in baselines})
    return out


def passkey_totals(passkey: dict) -> dict[str, dict]:
    """Per method of a passkey result, over every length: trials retrieved (``correct``) of ``n``, their
    ``share``, and the least and most budget read."""
    out: dict[str, dict] = {}
    for r in passkey["rows"]:
        t = out.setdefault(r["method"], {"correct": 0, "n": 0, "budgets": []})
        t["correct"] += r["correct"]
        t["n"] += r["n"]
        t["budgets"].append(r["budget"])
    if not out:
        raise ValueError("the passkey result has no rows")
    return {
        m: {**t, "share": t["correct"] / t["n"], "budget_min": min(t["budgets"]), "budget_max": max(t["budgets"])}
        for m, t in out.items()
    }


def dense_path(pairs: list[dict], attend_rows: list[dict], model: str = "SmolLM2-135M", *, K: int, L: int) -> dict:
    """Which dense the in-model attention time is against, at the longest context of ``pairs`` (dense and
    MagicPIG decode speed rows, ``report.speed_pairs``): dense's attention per layer in the model
    (``dense_layer_ms``, CPU time), MagicPIG's per sampled layer (its dense layers costed at dense's
    per-layer time), and, from ``attend_rows`` (``bench_attend.py``), the row of ``model``'s shape at (K, L)
    nearest that context, timed alone: SDPA expanded to every query head (``expanded_ms``, enable_gqa) and
    grouped, each KV head read once (``grouped_ms``). ``vs_grouped``: MagicPIG's sampled layer over the
    grouped form; ``nearer_expanded``: whether in-model dense is nearer the expanded form's time."""
    dense = {r["context"]: r for r in pairs if r["method"] == "dense"}
    mp = {r["context"]: r for r in pairs if r["method"] == "magicpig" and r["context"] in dense}
    alone = [r for r in attend_rows if r.get("shape") == model and (r["K"], r["L"]) == (K, L)]
    if not mp or not alone:
        raise ValueError(
            f"need dense and MagicPIG decode rows at one context and a kernel row of {model} at ({K}, {L})"
        )
    last, shape = max(mp), get_model_shape(model)
    sampled = shape.layers - len(mp[last]["options"]["dense_layers"])
    dense_layer = dense[last]["attention_cpu_ms"] / shape.layers
    mp_layer = (mp[last]["attention_cpu_ms"] - dense_layer * (shape.layers - sampled)) / sampled
    near = min(alone, key=lambda r: abs(r["n"] - last))
    return {
        "context": last,
        "sampled_layers": sampled,
        "kv_dtype": mp[last]["options"].get("kv_dtype"),
        "dense_layer_ms": dense_layer,
        "magicpig_layer_ms": mp_layer,
        "alone_n": near["n"],
        "expanded_ms": near["sdpa_gqa_ms"],
        "grouped_ms": near["sdpa_ms"],
        "vs_grouped": mp_layer / near["sdpa_ms"],
        "nearer_expanded": abs(dense_layer / near["sdpa_gqa_ms"] - 1) < abs(dense_layer / near["sdpa_ms"] - 1),
    }


def index_per_key(memory: dict, K: int, L: int, sampled_layers: int, kv_heads: int) -> dict:
    """One ``report.memory_check`` row's index, per key and KV head of a sampled layer (``per_key``, bytes),
    beside notebook 05a's bill of token ids and bucket offsets for the same key (``ids_and_offsets``);
    ``id_bits``: the token ids' width at that context (16 up to 65,536 tokens, else 32)."""
    from pigviz.lsh.index import index_bytes  # heavy: imports torch

    n = memory["context"]
    if not (sampled_layers >= 1 and kv_heads >= 1 and n >= 1):
        raise ValueError(f"need a context, sampled layers and KV heads >= 1, got {n}, {sampled_layers}, {kv_heads}")
    return {
        "per_key": memory["index_mb"] * 2**20 / (n * sampled_layers * kv_heads),
        "ids_and_offsets": index_bytes(n, K, L) / n,
        "id_bits": 16 if n <= 2**16 else 32,
    }


def layers_read(run: dict, layers: int, dense_layers: int, also_dense: int = 1) -> dict:
    """One quality run's keys read over all ``layers`` (``dense_layers`` of them at 100%), and again with
    sampled layer ``also_dense`` kept dense too: ``layer`` (that layer's budget), ``now``, ``then``, and
    ``rest``, the mean budget of the other sampled layers."""
    lb = {int(k): v for k, v in run["layer_budgets"].items()}
    if also_dense not in lb:
        raise ValueError(f"layer {also_dense} is not a sampled layer of this run ({sorted(lb)})")
    return {
        "layer": lb[also_dense],
        "now": (sum(lb.values()) + dense_layers) / layers,
        "then": (sum(lb.values()) - lb[also_dense] + dense_layers + 1) / layers,
        "rest": float(np.mean([v for k, v in lb.items() if k != also_dense])),
    }


def quest_bytes(quality: dict, page: int = 4, model: str = "SmolLM2-135M", *, K: int, L: int) -> dict:
    """Quest with pages of ``page`` at MagicPIG (K, L)'s matched budget, counted in bytes per query head and
    step of a sparse layer at the quality prefix (``pigviz.attention.cost``): its page bounds alone and its
    whole read, each as a share of dense attention's bytes, beside its key budget (sparse layers, and
    over all layers)."""
    n, d = quality["settings"]["prefix"], get_model_shape(model).head_dim
    quest = headline(quality, K, L)["baselines"].get(f"quest/{page}")
    if quest is None:
        raise ValueError(f"the quality file has no Quest run with pages of {page} at ({K}, {L})")
    dense = cost.dense_bytes(n, d)
    return {
        "bounds_share": cost.bytes_read("quest", n=n, d=d, keys_read=0, page=page) / dense,
        "bytes_share": cost.bytes_read("quest", n=n, d=d, keys_read=quest["budget"] * n, page=page) / dense,
        "budget": quest["budget"],
        "budget_all_layers": quest["budget_all_layers"],
    }
