"""What the shipped decoding runs show beyond their summaries: how two greedy continuations part and
repeat themselves, and how much the hash seed moves a decode-time KL against notebook 06's per-row
error. Each function returns rows (lists of dicts) that notebook 07 renders and its claims re-check.
"""

from __future__ import annotations

import numpy as np

from pigviz.attention.names import method_label
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
    "rebuild_events",
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


def worst_positions(quality: dict, K: int = 10, L: int = 150, worst: int = 5) -> dict[int, list[int]]:
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
    """Two rows, notebook 06's seed-to-seed spread beside the decode KL's: the quantity, how many
    attention rows and hashed caches one seed's mean is over, and the std across seeds over the mean
    (least and most over the (K, L) settings). Notebook 06: one index per (layer, KV head); here:
    every position of the stretch times every sampled layer and query head."""
    st, shape = quality["settings"], get_model_shape(model)
    err = [series_summary(study, f"magicpig K{K} L{L}") for K, L in study["spec"]["settings"]]
    sampled = shape.layers - len(st["dense_layers"])
    kl = seed_spreads(quality)
    return [
        {
            "measured in": "notebook 06",
            "quantity": "output error of one attention row",
            "positions": None,
            "attention rows": series_summary(study, "magicpig K10 L150")["rows"],
            "hashed caches": len(study["layers"]) * study["kv_heads"],
            "std / mean, least": min(s["error_std"] / s["error"] for s in err),
            "std / mean, most": max(s["error_std"] / s["error"] for s in err),
        },
        {
            "measured in": "notebook 07, section 3",
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


def rebuild_events(new_tokens: int, buffer: int) -> int:
    """How often decoding rebuilds MagicPIG's index in ``new_tokens`` generated tokens, by
    ``pigviz.decode.session``'s rule: the first token comes out of the prefill; each later one is a decode step
    that adds one token to the exact buffer, and when the buffer would grow past ``buffer`` tokens the index is
    rebuilt over the whole cache and the buffer starts again. Every sampled layer rebuilds at that step, and
    ``GenerationResult.rebuilds`` counts each layer's rebuild: it reads this number times the sampled layers."""
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
