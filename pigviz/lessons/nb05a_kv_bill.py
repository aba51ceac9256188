"""Notebook 05a, the KV bill: what a cached token costs, what MagicPIG's LSH tables add, and what a
query scans, each number re-derived."""

from __future__ import annotations

from pigviz.lessons._collapsed import Collapsed
from pigviz.lessons.verify import Claim, near
from pigviz.memory.budget import (
    GIB,
    H100_MEMORY_BYTES,
    KIB,
    bucket_metadata_bytes,
    budget_report,
    cache_vs_size,
    format_bytes,
    lsh_table_bytes,
    text_table,
)
from pigviz.memory.model_shapes import ModelShape, get_model_shape, known_models

__all__ = ["claims", "Collapsed", "answer", "CONTEXT"]

CONTEXT = 96 * 1024  # the 96k-token document the notebook follows


def claims() -> list[Claim]:
    """Bytes per token, the read time, the LSH tables and the candidates a query scans."""
    out = []

    def claim(text, passed, value):
        out.append(Claim(notebook="05a", text=text, passed=bool(passed), value=value))

    r = budget_report("Llama-3.1-8B", CONTEXT, K=10, L=150)
    claim(
        "Llama-3.1-8B caches 128 KiB per token (32 x 8 x 128 x 2 x 2 B)",
        r["kv_bytes_per_token"] == 128 * KIB,
        f"{r['kv_bytes_per_token']:,} B",
    )
    claim("a 96k-token (98,304) context holds 12 GiB of KV", r["kv_bytes"] == 12 * GIB, format_bytes(r["kv_bytes"]))
    claim(
        "reading it once at 1 TB/s takes about 13 ms per generated token",
        near(r["kv_read_time_s"] * 1e3, 13, 0.05),
        f"{r['kv_read_time_s'] * 1e3:.1f} ms",
    )
    claim(
        "(K, L) = (10, 150) stores 600 B of indices per token per head beside a 512 B K+V pair",
        r["table_bytes_per_head_token"] == 600 and r["kv_pair_bytes_per_head_token"] == 512,
        f"{r['table_bytes_per_head_token']} B vs {r['kv_pair_bytes_per_head_token']} B",
    )
    claim(
        "the table entries come to about 14.1 GiB, more than the 12 GiB they index",
        near(r["table_bytes"] / GIB, 14.1, 0.01) and r["table_bytes"] > r["kv_bytes"],
        f"{r['table_bytes'] / GIB:.2f} GiB",
    )
    meta_share = r["bucket_metadata_bytes"] / r["table_bytes"]
    claim(
        "bucket offsets add little at 96k tokens: under 2% of the table entries",
        meta_share < 0.02,
        f"{format_bytes(r['bucket_metadata_bytes'])} = {meta_share:.2%}",
    )
    claim(
        "a query scans about L n / 2^K = 14,400 candidate entries (even buckets)",
        r["candidates_per_query"] == 14_400,
        f"{r['candidates_per_query']:,.0f}",
    )
    claim(
        "those 57,600 index bytes are 0.23% of one head's 25,165,824 key bytes",
        r["key_bytes_per_head"] == 25_165_824 and round(100 * r["candidate_share_of_key_bytes"], 2) == 0.23,
        f"{r['candidate_index_bytes']:,.0f} B = {r['candidate_share_of_key_bytes']:.3%}",
    )

    similar = cache_vs_size("Mistral-7B-v0.1", "Qwen2.5-7B")
    claim(
        "two models within 10% in size can differ over 2x in KV per token (Mistral-7B vs Qwen2.5-7B)",
        abs(similar["params_ratio"] - 1) < 0.10 and similar["kv_ratio"] > 2,
        f"{similar['params_ratio']:.2f}x params, {similar['kv_ratio']:.2f}x KV",
    )
    small = cache_vs_size("SmolLM2-135M", "Qwen2.5-0.5B")
    claim(
        "SmolLM2-135M, under a third the size of Qwen2.5-0.5B, caches more per token",
        small["params_ratio"] < 1 / 3 and small["kv_ratio"] > 1,
        f"{small['params_ratio']:.2f}x params, {small['kv_ratio']:.2f}x KV",
    )
    return out


# --- answers to the notebook's "Questions to try", computed when asked ---------------------------


def _answer_fp8() -> str:
    r16 = budget_report("Llama-3.1-8B", CONTEXT, dtype_bytes=2)
    r8 = budget_report("Llama-3.1-8B", CONTEXT, dtype_bytes=1)
    return (
        f"The KV of Llama-3.1-8B at 96k tokens drops from {format_bytes(r16['kv_bytes'])} to "
        f"{format_bytes(r8['kv_bytes'])}; the tables hold token indices, not numbers, so they stay at "
        f"{format_bytes(r8['table_bytes'])}. Index / KV goes from {r16['index_to_kv_ratio']:.2f}x to "
        f"{r8['index_to_kv_ratio']:.2f}x: the tables are still bigger than the cache, by more.\n"
        "Notebook 05b (section 9) takes FP8 further: what halving the bytes per token does to fetching a "
        "cached prefix instead of recomputing it."
    )


def _answer_mla() -> str:
    # DeepSeek-V3's config.json: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64 -> 576 cached numbers
    latent = 512 + 64
    mla = ModelShape(
        name="MLA (DeepSeek-V3 widths)",
        layers=61,
        attention_heads=128,
        kv_heads=1,
        head_dim=latent // 2,
        hidden_size=7168,
        params=None,
        max_context=None,
    )
    per_mla = mla.kv_bytes_per_token(2)
    per70 = get_model_shape("Llama-3.1-70B").kv_bytes_per_token(2)
    return (
        f"With one 'KV head' of head_dim {latent // 2} (so 2 x head_dim = {latent}: the 512-wide latent plus "
        f"the 64-wide rotary key), 61 layers and 2-byte numbers: {per_mla:,} B = {format_bytes(per_mla)} per "
        f"token, {per70 / per_mla:.1f}x less than Llama-3.1-70B's {format_bytes(per70)}.\n"
        "Strictly MLA stores the latent once (not a K and a V copy), so the factor 2 here is a bookkeeping "
        "device, not two tensors. LSH needs the keys each head scores against; in MLA those are per-head "
        "up-projections of the latent that are never materialised, so tables built on the latent itself "
        "would hash one vector for all 128 heads: each head's key geometry (notebooks 02-04) is lost."
    )


def _answer_bits() -> str:
    ctx = 4_096
    rows = []
    for K in range(8, 17):
        meta, tables = bucket_metadata_bytes("Llama-3.1-8B", K, 150), lsh_table_bytes("Llama-3.1-8B", ctx, 150)
        rows.append((K, format_bytes(meta), format_bytes(tables), "yes" if meta > tables else "no"))
    first = next(
        K
        for K in range(1, 31)
        if bucket_metadata_bytes("Llama-3.1-8B", K, 150) > lsh_table_bytes("Llama-3.1-8B", ctx, 150)
    )
    same_for_L = all(
        next(
            K
            for K in range(1, 31)
            if bucket_metadata_bytes("Llama-3.1-8B", K, L) > lsh_table_bytes("Llama-3.1-8B", ctx, L)
        )
        == first
        for L in (1, 10, 150, 1000)
    )
    return (
        text_table(("K", "bucket offsets", "table entries", "offsets bigger?"), rows)
        + f"\n\nFrom K = {first}: offsets are 2^K per table, entries are n = {ctx:,} per table, so they cross "
        f"where 2^K passes n (2^{first - 1} = {2 ** (first - 1):,} only ties). Both are per table, per layer "
        f"and per KV head, and both use 4 bytes here, so L cancels "
        f"(same K for L = 1, 10, 150, 1000: {same_for_L}). A longer context moves the crossing up."
    )


def _answer_own_model() -> str:
    gpu = H100_MEMORY_BYTES  # the unit notebook 05b's replica uses: an H100's 80 GiB
    rows = []
    for name in known_models():
        shape = get_model_shape(name)
        weights = 2 * shape.params
        left = gpu - weights
        fits = int(left // shape.kv_bytes_per_token(2)) if left > 0 else 0
        rows.append(
            (
                name,
                format_bytes(weights),
                f"{fits:,}",
                f"{shape.max_context:,}",
                f"{fits / shape.max_context:.2f}x" if fits else "weights do not fit",
            )
        )
    return (
        f"One H100 ({format_bytes(gpu)}), bf16 weights (2 B per parameter) and bf16 KV, "
        "nothing else counted (activations and "
        "the runtime take more in practice):\n"
        + text_table(("model", "weights", "tokens of KV that fit", "advertised context", "fits / context"), rows)
    )


_ANSWERS = {
    1: ("Answer 1: FP8 KV", _answer_fp8),
    2: ("Answer 2: MLA", _answer_mla),
    3: ("Answer 3: more bits", _answer_bits),
    4: ("Answer 4: your own model", _answer_own_model),
}


def answer(number: int) -> Collapsed:
    """The answer to question ``number`` of notebook 05a, computed now and shown folded."""
    if number not in _ANSWERS:
        raise ValueError(f"notebook 05a has questions {', '.join(map(str, _ANSWERS))}, not {number!r}")
    summary, make = _ANSWERS[number]
    return Collapsed(summary, make())
