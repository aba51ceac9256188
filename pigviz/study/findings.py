"""Reading a study's results: means over rows, per layer and per head, the error-vs-budget
curves a chart draws, the shipped results and timing files, and the headline claims of
finding 1 (the live experiments they lean on are in :mod:`pigviz.study.experiments`).

A results file (see :mod:`pigviz.study`) stores, per series, ``error`` and ``budget`` as
nested lists ``(layers, seeds, heads)``: the mean over the studied positions of each
(layer, seed, head). Every mean here weights those cells equally, i.e. every attention row.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pigviz._util.validate import check_int
from pigviz.model.shipped import data_dir, verified_path
from pigviz.study.experiments import live_run, shipped_layer
from pigviz.study.run import load_results, series_id

__all__ = [
    "RESULTS_FILE",
    "SPEED_FILE",
    "METHOD_LABELS",
    "series_summary",
    "summary_rows",
    "per_layer",
    "head_grid",
    "wins",
    "curves",
    "load_shipped_results",
    "speed_rows",
    "live_agreement",
    "series_array",
    "series_tag",
    "PAPER",
    "AFFORDABLE",
    "matched_table",
]

RESULTS_FILE = "study_smollm2.json"
RESULTS_COMMAND = (
    "pigviz study --model smollm2-135m --context 8192 --last 64 --seeds 3 --threads 1 "
    "--out pigviz/data/study_smollm2.json"
)
# Chart names of each method (and of the variants of MagicPIG at the paper's setting).
METHOD_LABELS = {
    "magicpig": "MagicPIG",
    "topk": "TopK",
    "oracle": "Oracle sampling",
    "hybrid": "Hybrid (TopK + sampling)",
    "quest": "Quest (pages of 16, current page read, layers 0-1 dense)",
    "streaming": "StreamingLLM (sink + recent)",
    "rank_all": "Quest, every page ranked (no current page)",
    "mp_exact_top": "MagicPIG + exact top half of its sample",
    "vattention": "vAttention-style (Quest pages + uniform sample)",
    "sparq": "SparQ (r = d/8 channels)",
    "no_sink": "MagicPIG, no sink in exact set",
    "no_correction": "MagicPIG's keys, plain softmax (no 1/u)",
    "first_position": "MagicPIG (1st position only)",
    "no_window": "MagicPIG, no recent window (1st position)",
    "no_exact": "MagicPIG, no exact set (1st position)",
}


def series_array(results: dict, name: str, key: str = "error") -> np.ndarray:
    if name not in results["series"]:
        raise ValueError(f"series must be one of {', '.join(results['series'])}; got {name!r}")
    return np.asarray(results["series"][name][key], dtype=float)  # (layers, seeds, heads)


def _select(results: dict, arr: np.ndarray, layer, head) -> np.ndarray:
    """Cut (layers, seeds, heads) down to one model layer and/or head (None: keep all)."""
    if layer is not None:
        layers = results["layers"]
        if layer not in layers:
            raise ValueError(f"layer must be one of the studied layers {layers[0]}..{layers[-1]}, got {layer!r}")
        arr = arr[layers.index(layer) : layers.index(layer) + 1]
    if head is not None:
        head = check_int("head", head, 0, arr.shape[2] - 1)
        arr = arr[:, :, head : head + 1]
    return arr


def series_summary(results: dict, name: str, layer=None, head=None) -> dict:
    """Mean error and budget over the selected rows; ``error_std``: spread of that mean across seeds."""
    err = _select(results, series_array(results, name), layer, head)
    bud = _select(results, series_array(results, name, "budget"), layer, head)
    per_seed = err.mean(axis=(0, 2))
    s = results["series"][name]
    out = {
        "name": name,
        "method": s["method"],
        "setting": s["setting"],
        "variant": s["variant"],
        "seeds": len(per_seed),
        "rows": err.shape[0] * err.shape[2] * s["positions"],
        "error": float(per_seed.mean()),
        "error_std": float(per_seed.std(ddof=1)) if len(per_seed) > 1 else 0.0,
        "budget": float(bud.mean()),
    }
    if "bytes_share" in s:  # everything the step reads / what dense attention reads
        out["bytes_share"] = float(_select(results, series_array(results, name, "bytes_share"), layer, head).mean())
    if "budget_sampled" in s:  # MagicPIG: sampled / sampleable keys, the share its authors quote
        out["budget_sampled"] = float(
            _select(results, series_array(results, name, "budget_sampled"), layer, head).mean()
        )
    return out


def summary_rows(results: dict) -> list[dict]:
    return [series_summary(results, name) for name in results["series"]]


def per_layer(results: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(mean error per layer, its std across seeds)``, each (layers,)."""
    per_seed = series_array(results, name).mean(axis=2)  # (layers, seeds)
    std = per_seed.std(axis=1, ddof=1) if per_seed.shape[1] > 1 else np.zeros(per_seed.shape[0])
    return per_seed.mean(axis=1), std


def head_grid(results: dict, name: str, key: str = "error") -> np.ndarray:
    """(layers, heads): the mean over seeds of each cell's error (or budget)."""
    return series_array(results, name, key).mean(axis=1)


def wins(results: dict, better: str, worse: str) -> tuple[int, int]:
    """In how many (layer, head) cells ``better`` has the lower mean error, out of how many."""
    a, b = head_grid(results, better), head_grid(results, worse)
    return int((a < b).sum()), int(a.size)


def curves(results: dict, layer=None, head=None, methods=None) -> dict[str, list[dict]]:
    """Error-vs-budget points per method for one selection (``None``: all layers / heads).

    Keys are method names (``magicpig``, ``topk``, ...) and variant names (``no_sink``, ...);
    each value is a list of ``{"budget", "error", "error_std", "label", "setting", "seeds"}`` (and
    ``bytes_share`` where the results have it) sorted by budget. Baselines carry the (K, L) whose
    MagicPIG budget they were matched to.
    """
    wanted = set(METHOD_LABELS) if methods is None else set(methods)
    unknown = wanted - set(METHOD_LABELS)
    if unknown:
        raise ValueError(f"methods must be drawn from {', '.join(METHOD_LABELS)}; got {', '.join(sorted(unknown))}")
    out: dict[str, list[dict]] = {}
    for name, s in results["series"].items():
        key = s["variant"] if s["variant"] != "main" else s["method"]
        if key not in wanted:
            continue
        r = series_summary(results, name, layer, head)
        label = "" if s["setting"] is None else f"K={s['setting'][0]}, L={s['setting'][1]}"
        point = {
            "budget": r["budget"],
            "error": r["error"],
            "error_std": r["error_std"],
            "label": label,
            "setting": s["setting"],
            "seeds": r["seeds"],
        }
        if "bytes_share" in r:
            point["bytes_share"] = r["bytes_share"]
        out.setdefault(key, []).append(point)
    for points in out.values():
        points.sort(key=lambda p: p["budget"])
    return {k: out[k] for k in METHOD_LABELS if k in out}


# Estimators a real system can afford (pigviz.lsh.affordable), in the order the notebook shows them.
AFFORDABLE = ("mp_exact_top", "vattention", "sparq")


def matched_table(results: dict, methods=("magicpig", *AFFORDABLE, "hybrid"), reference: str = "topk") -> list[dict]:
    """Per MagicPIG (K, L): each method against ``reference`` at the same matched budget.

    Each row: ``setting``, ``budget`` (MagicPIG's, which the others were matched to),
    ``reference`` ({error, bytes_share}) and per method ``error``, ``ratio`` (its mean error /
    the reference's), ``bytes_share`` (None if the results predate it) and ``wins`` (cells of
    (layer, head) where its mean error is below the reference's, out of ``cells``).
    """
    missing = [m for m in (reference, *methods) if not any(s["method"] == m for s in results["series"].values())]
    if missing:
        raise ValueError(f"methods must be in the results; these are not: {', '.join(missing)}")
    rows = []
    for setting in results["spec"]["settings"]:
        ref = series_summary(results, series_id(reference, setting))
        row = {
            "setting": tuple(setting),
            "budget": series_summary(results, series_id("magicpig", setting))["budget"],
            "reference": {"method": reference, "error": ref["error"], "bytes_share": ref.get("bytes_share")},
            "methods": {},
        }
        for method in methods:
            name = series_id(method, setting)
            r = series_summary(results, name)
            won, cells = wins(results, name, series_id(reference, setting))
            row["methods"][method] = {
                "error": r["error"],
                "ratio": r["error"] / ref["error"],
                "bytes_share": r.get("bytes_share"),
                "wins": won,
                "cells": cells,
            }
        rows.append(row)
    return rows


# -- the shipped results ---------------------------------------------------------------------------
def load_shipped_results(*, verify: bool = True) -> dict:
    """``pigviz/data/study_smollm2.json``, checked against its sha256 in ``pigviz/data/manifest.json``."""
    return load_results(verified_path(RESULTS_FILE, RESULTS_COMMAND, verify=verify))


# -- the speed table measured by benchmarks/bench_attend.py ---------------------------------------
SPEED_FILE = "bench_attend_cpu.json"
SPEED_COMMAND = "python benchmarks/bench_attend.py --stages --json pigviz/data/bench_attend_cpu.json"


def speed_rows(path=None) -> list[dict]:
    """The rows of the shipped CPU timing table (``benchmarks/bench_attend.py --json``)."""
    path = path or data_dir() / SPEED_FILE
    return json.loads(Path(path).read_text(encoding="utf-8"))["rows"]


PAPER = (10, 150)


def series_tag(kl) -> str:
    """The ``@K.. L..`` tag a baseline's series carries at MagicPIG setting ``kl``."""
    return f"@K{kl[0]} L{kl[1]}"


def live_agreement(row: int = 2, results: dict | None = None) -> tuple[float, int]:
    """Largest relative gap between a live (10, 150), seed-0 run of one shipped layer and the
    study's seed-0 errors for the same query heads, and that layer."""
    r = results or load_shipped_results()
    layer, heads, *_ = shipped_layer(row)
    live = live_run(row)
    name = "magicpig K10 L150"
    study_err = np.asarray(r["series"][name]["error"][r["layers"].index(layer)][0])[list(heads)]
    return float(np.max(np.abs(np.asarray(live[name]["error"][0]) - study_err) / study_err)), layer
