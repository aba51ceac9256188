"""Small live experiments behind lesson 06a and findings 1-2, on the shipped fp16 capture: the five-line
estimator's inputs, one layer re-run with the study's code, a (K, L) sweep, the share of the
attention weight the read keys hold, and the share of keys SimHash samples against the head
dimension, and one Quest rule's error on a shipped layer. Each takes a second or two on a CPU.
"""

from __future__ import annotations

import contextlib

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz._util.validate import check_int
from pigviz.attention import dense_attention
from pigviz.lsh.simhash import inclusion_probability
from pigviz.model.shipped import load_shipped_capture
from pigviz.study.run import StudySpec, decode_index, exact_outputs, run_layer

__all__ = [
    "one_thread",
    "shipped_layer",
    "live_run",
    "kl_sweep",
    "sampled_share",
    "decode_step_pieces",
    "mass_captured",
    "quest_rule_error",
]


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread inside the block. A decode step is hundreds of small ops; on a
    busy shared CPU each multi-threaded op waits for a second core, which made the study ~10x
    slower with 2 threads than with 1."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def shipped_layer(row: int):
    """``(model layer, query heads, q (H, T, d), k, v (1, N, d))`` of one pair in the shipped capture."""
    cap = load_shipped_capture()
    row = check_int("row", row, 0, len(cap.layers) - 1)
    return (
        cap.layers[row],
        cap.query_heads[row],
        cap.queries[row].float(),
        cap.keys[row].float(),
        cap.values[row].float(),
    )


def live_run(row: int = 2, settings=((10, 150),), seeds: int = 1, methods=("magicpig", "topk")) -> dict:
    """:func:`pigviz.study.run_layer` on one (layer, KV head) of the shipped fp16 capture."""
    _, _, q, k, v = shipped_layer(row)
    spec = StudySpec(settings=settings, seeds=seeds, methods=methods, ablations=False)
    with one_thread():
        return run_layer(q, k, v, spec)


def kl_sweep(row: int = 2, Ks=(8, 10, 12), Ls=(50, 150, 300)) -> tuple[list[dict], list[dict]]:
    """MagicPIG at every (K, L) of the grid on one shipped layer (hash seed 0), and TopK at
    each measured budget: ``(rows with K, L, budget, error; TopK rows with budget, error)``."""
    settings = tuple((K, L) for K in Ks for L in Ls)
    result = live_run(row, settings)
    mp, tk = [], []
    for K, L in settings:
        s = result[f"magicpig K{K} L{L}"]
        t = result[f"topk @K{K} L{L}"]
        mp.append({"K": K, "L": L, "budget": float(np.mean(s["budget"])), "error": float(np.mean(s["error"]))})
        tk.append({"K": K, "L": L, "budget": float(np.mean(t["budget"])), "error": float(np.mean(t["error"]))})
    return mp, tk


def sampled_share(
    row: int = 0, dims=(64, 128), K: int = DEFAULTS.K, L: int = DEFAULTS.L, min_hits: int = DEFAULTS.min_hits
) -> dict:
    """Expected share of the sampleable keys that MagicPIG samples, the mean of u over keys:

    * ``isotropic[d]``: keys in uniformly random directions of d dimensions, whose cosine with
      any query has density proportional to (1 - c^2)^((d - 3) / 2): it narrows like 1/sqrt(d);
    * ``real``: one shipped layer's real centred keys against its last query of each head.
    """
    c = np.linspace(-1.0, 1.0, 40_001)[1:-1]
    u = inclusion_probability(1.0 - np.arccos(c) / np.pi, K, L, min_hits)
    isotropic = {}
    for d in dims:
        d = check_int("dims entry", d, 3, 4096)
        log_density = 0.5 * (d - 3) * np.log1p(-c * c)
        density = np.exp(log_density - log_density.max())
        isotropic[d] = float(np.sum(u * density) / np.sum(density))
    layer, heads, q, k, _ = shipped_layer(row)
    sinks, recent = 4, 64
    keys = k[0, sinks : k.shape[1] - recent].double().numpy()
    centred = keys - keys.mean(axis=0)
    queries = q[:, -1].double().numpy()
    cos = (queries @ centred.T) / np.outer(np.linalg.norm(queries, axis=1), np.linalg.norm(centred, axis=1))
    real = float(inclusion_probability(1.0 - np.arccos(np.clip(cos, -1, 1)) / np.pi, K, L, min_hits).mean())
    return {
        "layer": layer,
        "heads": list(heads),
        "isotropic": isotropic,
        "real": real,
        "real_cos_std": float(cos.std()),
        "isotropic_cos_std": {d: float(1 / np.sqrt(d)) for d in isotropic},
    }


def decode_step_pieces(row: int = 2, head: int = 0, K: int = DEFAULTS.K, L: int = DEFAULTS.L, seed: int = 0) -> dict:
    """The last decode step of one shipped head, cut into what the five-line estimator needs:
    the query, the sampled keys/values (as numpy float64), the exact set's keys/values, the
    key mean, every key of the head (``K_all``, for sums over the cache), and the engine's own
    output and budget for the same step."""
    from pigviz.lsh.index import build_index  # heavy: imports torch
    from pigviz.lsh.magicpig import attend, exact_positions  # heavy: imports torch

    layer, heads, q, k, v = shipped_layer(row)
    head = check_int("head", head, 0, q.shape[0] - 1)
    with one_thread():
        index = build_index(k, K=K, L=L, seed=seed)
        out, stats = attend(index, q[:, -1], k, v, return_read_mask=True)
    exact_ids = exact_positions(k.shape[1], index.sinks, index.recent)
    sampled = stats["read_mask"][head].clone()
    sampled[exact_ids] = False
    f64 = lambda t: t.double().numpy()  # noqa: E731
    truth, _ = dense_attention(q[:, -1], k, v)
    return {
        "layer": layer,
        "model_head": heads[head],
        "n": k.shape[1],
        "K": K,
        "L": L,
        "q": f64(q[head, -1]),
        "K_S": f64(k[0, sampled]),
        "V_S": f64(v[0, sampled]),
        "K_exact": f64(k[0, exact_ids]),
        "V_exact": f64(v[0, exact_ids]),
        "K_all": f64(k[0]),
        "sinks": index.sinks,
        "recent": index.recent,
        "mu": f64(index.mean[0]),
        "engine": f64(out[head]),
        "exact": f64(truth[head]),
        "keys_read": int(stats["keys_read"][head]),
    }


def mass_captured(row: int = 2, K: int = DEFAULTS.K, L: int = DEFAULTS.L, seed: int = 0) -> dict:
    """Share of the true attention weight that lands on the keys MagicPIG reads (exact set
    and sampled set apart) and on TopK's keys when TopK reads as many, per query head of one
    shipped layer, averaged over its last T positions."""
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    from pigviz.lsh.index import build_index  # heavy: imports torch
    from pigviz.lsh.magicpig import attend, exact_positions  # heavy: imports torch

    layer, heads, q, k, v = shipped_layer(row)
    H, T, _ = q.shape
    first = k.shape[1] - T
    scores, _ = exact_outputs(q, k, v)
    weights = torch.softmax(scores, dim=-1)  # (H, T, N), causal
    prompt = build_index(k[:, : first + 1], K=K, L=L, seed=seed)
    share = {"exact": torch.zeros(H), "sampled": torch.zeros(H), "topk": torch.zeros(H), "budget": torch.zeros(H)}
    for t in range(T):
        n = first + t + 1
        with one_thread():
            _, stats = attend(decode_index(prompt, k, n), q[:, t], k[:, :n], v[:, :n], return_read_mask=True)
        w = weights[:, t, :n]
        exact = torch.zeros(n, dtype=torch.bool)
        exact[exact_positions(n, prompt.sinks, prompt.recent)] = True
        share["exact"] += (w * exact).sum(-1) / T
        share["sampled"] += (w * (stats["read_mask"] & ~exact)).sum(-1) / T
        for h in range(H):
            share["topk"][h] += w[h].topk(int(stats["keys_read"][h])).values.sum() / T
        share["budget"] += stats["keys_read"].double().float() / n / T
    return {"layer": layer, "heads": heads, **{key: val.tolist() for key, val in share.items()}}


def quest_rule_error(row: int, share: float, rule, page: int = 16) -> float:
    """Mean relative error of one Quest rule (``attention.quest_attention`` or
    ``attention.quest_rank_all_attention``) over the last positions of one shipped layer,
    reading ``share`` of the visible keys with pages of ``page`` tokens."""
    if not callable(rule):
        raise TypeError(f"rule must be a Quest attention function, got {type(rule).__name__}")
    if not 0.0 < float(share) <= 1.0:
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    _, _, q, k, v = shipped_layer(row)
    T, N = q.shape[1], k.shape[1]
    errors = []
    with one_thread():
        for i in range(T):
            n = N - T + i + 1  # the query at this position sees keys 0..n-1
            exact, _ = dense_attention(q[:, i], k[:, :n], v[:, :n])
            out, _ = rule(q[:, i], k[:, :n], v[:, :n], float(share), page=page)
            errors.append(((out - exact).norm(dim=-1) / exact.norm(dim=-1)).mean().item())
    return float(np.mean(errors))
