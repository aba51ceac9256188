"""Notebook 05a, the KV bill: the statements its prose makes (``claims``), each re-derived the way
the lesson's cells compute it, and the definitions it writes (``PROSE_DEFINED``). The lesson
computes its tables in its own cells; the full tables are finding 5's
(:mod:`pigviz.lessons.f5_serving`)."""

from __future__ import annotations

import numpy as np

from pigviz._util.config import DEFAULTS
from pigviz.lessons.verify import Claim
from pigviz.memory.budget import (
    GIB,
    H100_MEMORY_BYTES,
    KIB,
    bucket_metadata_bytes,
    budget_report,
    cache_vs_size,
    format_bytes,
    kv_bytes,
)
from pigviz.memory.model_shapes import get_model_shape, known_models

__all__ = ["claims", "PROSE_DEFINED", "CONTEXT", "uneven_buckets"]

CONTEXT = 96 * 1024  # the long document the notebook follows

# Numbers the prose writes that are definitions, parameters or the data's fixed facts, not results.
PROSE_DEFINED = {
    "10": "K = 10, the paper's default (10, 150)",
    "150": "L = 150, the paper's default (10, 150)",
}


def uneven_buckets(seed: int = 0, n: int = 8_192, d: int = 64, K: int = DEFAULTS.K) -> dict:
    """Section 4's simulation, as its cell runs it: the entries a query scans in one SimHash table
    (sum of squared bucket counts over n) against the even figure n / 2^K, for random keys, keys
    leaning one way (a cone), and the same keys centred."""
    rng = np.random.default_rng(seed)
    planes = rng.standard_normal((K, d))
    noise = rng.standard_normal((n, d))
    cone = noise + rng.standard_normal(d)
    out = {}
    for label, keys in (("no cone", noise), ("a cone", cone), ("the cone, centred", cone - cone.mean(axis=0))):
        codes = (keys @ planes.T >= 0) @ (1 << np.arange(K))
        counts = np.bincount(codes, minlength=2**K)
        out[label] = float((counts**2).sum() / n) / (n / 2**K)
    return out


def claims() -> list[Claim]:
    """Bytes per token, what a batch reads, the LSH tables and the entries a query scans."""
    out = []

    def claim(text, passed, value, quotes=()):
        out.append(Claim(notebook="05a", text=text, passed=bool(passed), value=value, quotes=tuple(quotes)))

    r = budget_report("Llama-3.1-8B", CONTEXT, K=10, L=150)
    claim(
        "Llama-3.1-8B caches 128 KiB per token (32 x 8 x 128 x 2 x 2 B)",
        r["kv_bytes_per_token"] == 128 * KIB,
        f"{r['kv_bytes_per_token']:,} B",
        quotes=(format_bytes(r["kv_bytes_per_token"]),),
    )
    claim("a 96k-token (98,304) document holds 12 GiB of KV", r["kv_bytes"] == 12 * GIB, format_bytes(r["kv_bytes"]))
    similar = cache_vs_size("Mistral-7B-v0.1", "Qwen2.5-7B")
    claim(
        "Mistral-7B and Qwen2.5-7B are nearly the same size, but Qwen2.5 keeps half as many KV heads in fewer layers",
        abs(similar["params_ratio"] - 1) < 0.10
        and get_model_shape("Qwen2.5-7B").kv_heads * 2 == get_model_shape("Mistral-7B-v0.1").kv_heads
        and get_model_shape("Qwen2.5-7B").layers < get_model_shape("Mistral-7B-v0.1").layers,
        f"{similar['params_ratio']:.2f}x params, {similar['kv_ratio']:.2f}x KV",
    )
    small = cache_vs_size("SmolLM2-135M", "Qwen2.5-0.5B")
    smallest = min(known_models(), key=lambda name: get_model_shape(name).params)
    claim(
        "SmolLM2-135M, the smallest shipped model, caches more per token than Qwen2.5-0.5B",
        smallest == "SmolLM2-135M" and small["kv_ratio"] > 1,
        f"{small['params_ratio']:.2f}x params, {small['kv_ratio']:.2f}x KV",
    )
    biggest = max(kv_bytes(name, get_model_shape(name).max_context) for name in known_models())
    claim(
        "within its maximum context no shipped model's cache for one sequence, counted alone, fills one H100",
        biggest < H100_MEMORY_BYTES,
        format_bytes(biggest),
    )
    shape = get_model_shape("Llama-3.1-8B")
    weights = 2 * (shape.params - (shape.vocab_size - 1) * shape.hidden_size)  # as section 2's cell reads them
    share = {b: b * r["kv_bytes"] / (weights + b * r["kv_bytes"]) for b in (1, 2)}
    claim(
        "one sequence's cache and the weights cost about the same to read; from two sequences on the caches "
        "take the larger share",
        0.4 < share[1] < 0.6 and share[2] > 0.5,
        f"KV share {share[1]:.0%} (one), {share[2]:.0%} (two)",
    )
    claim(
        "at (10, 150) the index outweighs the cache it indexes: a token's L indices outweigh its key and value",
        r["table_bytes"] > r["kv_bytes"] and r["table_bytes_per_head_token"] > r["kv_pair_bytes_per_head_token"],
        f"{r['table_bytes_per_head_token']} B vs {r['kv_pair_bytes_per_head_token']} B per token and head",
    )
    doubles = all(
        bucket_metadata_bytes("Llama-3.1-8B", k + 1, 150) == 2 * bucket_metadata_bytes("Llama-3.1-8B", k, 150)
        for k in range(8, 16)
    )
    claim(
        "the offsets are a sliver at K = 10 (their ratio to the entries is 2^K / n) and double with every extra bit",
        doubles
        and r["bucket_metadata_bytes"] / r["table_bytes"] == 2**10 / CONTEXT
        and r["bucket_metadata_bytes"] / r["table_bytes"] < 0.02,
        f"{r['bucket_metadata_bytes'] / r['table_bytes']:.2%} at K = 10",
    )
    group = r["model"]["attention_heads"] // r["model"]["kv_heads"]
    fraction = group * r["candidate_index_bytes"] / r["key_bytes_per_head"]
    claim(
        "the query heads of one KV head scan a small fraction of its key bytes (even buckets)",
        fraction < 0.01,
        f"{fraction:.2%}",
    )
    sim = uneven_buckets()
    claim(
        "in the simulation even random keys scan more than the even figure, keys leaning one way far more, "
        "and centring spreads them out again",
        1 < sim["no cone"] < 2 and sim["a cone"] > 5 and sim["the cone, centred"] < 2,
        ", ".join(f"{k}: {v:.2f}x" for k, v in sim.items()),
    )
    chance, square = _random_keys_two_ways()
    claim(
        "random keys scan more than the even figure partly by chance and partly because random hyperplanes, "
        "never quite at right angles, cut cells of unequal size",
        1 < chance < 1.2 and abs(square - chance) < 0.05 and sim["no cone"] > chance + 0.1,
        f"chance alone {chance:.2f}x, planes at right angles {square:.2f}x, random planes {sim['no cone']:.2f}x",
    )
    return out


def _random_keys_two_ways(seed: int = 0, n: int = 8_192, d: int = 64, K: int = DEFAULTS.K) -> tuple[float, float]:
    """Section 4's random keys, against the even figure, without the planes' unequal cells: keys
    dropped into buckets by chance alone (the expected scan of a uniform fill, (n - 1) / 2^K + 1),
    and the same keys hashed by K planes at right angles to one another."""
    rng = np.random.default_rng(seed)
    planes = rng.standard_normal((K, d))
    noise = rng.standard_normal((n, d))
    square = np.linalg.qr(planes.T)[0].T  # the same planes, turned to right angles
    counts = np.bincount((noise @ square.T >= 0) @ (1 << np.arange(K)), minlength=2**K)
    even = n / 2**K
    return ((n - 1) / 2**K + 1) / even, float((counts**2).sum() / n) / even
