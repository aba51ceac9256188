"""Notebook 05a, the KV bill: what a cached token costs, what MagicPIG's LSH tables add, and what a
query scans, each number re-derived; and the tables and figures' data the notebook shows (its rows
come from :mod:`pigviz.memory.budget`)."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.tables import Table, table
from pigviz.lessons.verify import Claim, near
from pigviz.memory.budget import (
    GIB,
    H100_MEMORY_BYTES,
    KIB,
    bucket_metadata_bytes,
    budget_report,
    cache_vs_size,
    candidates_per_query,
    format_bytes,
    index_bill,
    kv_bytes,
    kv_bytes_per_token,
    layout_rows,
    read_time_s,
)
from pigviz.memory.model_shapes import get_model_shape, known_models
from pigviz.study.findings import speed_rows

__all__ = [
    "claims",
    "PROSE_DEFINED",
    "CONTEXT",
    "BIT_SETTINGS",
    "BENCH_UNHASHED",
    "kv_curves",
    "read_floor_table",
    "report_table",
    "layout_table",
    "index_bill_rows",
    "past_context_note",
    "bits_table",
    "uneven_bucket_rows",
    "uneven_bucket_table",
]

CONTEXT = 96 * 1024  # the 96k-token document the notebook follows
BIT_SETTINGS = tuple((k, 150) for k in (8, 10, 12, 14, 16))  # section 3's walk over K at the paper's L
# The shipped benchmark (benchmarks/bench_attend.py) builds its index with sinks=4, recent=64: those
# 68 tokens stay exact and are not hashed, so the even-bucket baseline counts n - 68 keys.
BENCH_UNHASHED = 4 + 64

# Numbers the prose writes that are definitions, parameters or the data's fixed facts, not results.
PROSE_DEFINED = {
    "96k": "the document's context, defined: 96 x 1,024 tokens",
    "96": "the 96 of 96 x 1,024 tokens",
    "1,024": "tokens in one k of context",
    "98,304": "the document's context, 96 x 1,024 tokens",
    "16": "16-bit numbers and ids; MagicPIG's dense layer 16; K = 16 in the (K, L) walk",
    "68": "the benchmark's 4 sink and 64 recent tokens, not hashed (BENCH_UNHASHED)",
    "150": "L = 150, the paper's default",
    "32": "32-bit indices",
    "65,536": "2^16: what a 16-bit index can address",
    "10": "K = 10, the paper's default",
    "126": "the layers of the exercise's largest test shape",
    "30": "SmolLM2-135M's layers (config.json)",
    "24": "Qwen2.5-0.5B's layers (config.json)",
    "128": "Llama-3.1-8B's head_dim (config.json); DeepSeek-V3's attention heads",
    "4,096": "Mistral-7B-v0.1's sliding window (config.json)",
    "10,000,000": "the widget's context limit",
    "61": "DeepSeek-V3's layers (its config.json)",
    "512": "DeepSeek-V3's latent width (kv_lora_rank)",
    "64": "DeepSeek-V3's rotary key width (qk_rope_head_dim); SmolLM2-135M's and Qwen2.5-0.5B's head_dim",
    "576": "512 + 64, the numbers MLA caches per layer",
    "288": "576 / 2, the head_dim that makes 2 x head_dim = 576",
    "7,168": "DeepSeek-V3's hidden size (config.json)",
    "4k": "question 3's context, 4,096 tokens",
}


def kv_curves(lo: int = 1_000, points: int = 13, dtype_bytes: int = 2) -> dict:
    """Each shipped model's KV per sequence from ``lo`` tokens up to its maximum context (name ->
    (contexts, bytes)), on a shared log grid that ends at the longest maximum context. A model with
    a sliding window is drawn as a rolling cache, which stops growing at the window."""
    shapes = [get_model_shape(name) for name in known_models()]
    top = max(s.max_context for s in shapes)
    grid = np.unique(np.rint(np.logspace(np.log10(lo), np.log10(top), points)).astype(int))
    curves = {}
    for shape in shapes:
        contexts = [int(n) for n in grid if n < shape.max_context] + [shape.max_context]
        per = kv_bytes_per_token(shape, dtype_bytes)
        if shape.sliding_window:
            contexts = sorted(set(contexts) | {shape.sliding_window})  # the kink where the cache stops growing
            name = f"{shape.name} (rolling {shape.sliding_window:,}-token cache)"
            curves[name] = (contexts, [min(n, shape.sliding_window) * per for n in contexts])
        else:
            curves[shape.name] = (contexts, [n * per for n in contexts])
    return curves


def read_floor_table(model="Llama-3.1-8B", context: int = CONTEXT, bandwidth_bytes_per_s: float = 1e12) -> Table:
    """What one decode step of one sequence must read, and the time that takes at a bandwidth."""
    shape = get_model_shape(model)
    kv, w = kv_bytes(shape, context), 2 * shape.params  # bf16 weights
    rows = [
        (f"KV cache ({context:,} tokens)", kv),
        (f"weights (bf16, {shape.params / 1e9:.2f} B parameters)", w),
        ("one decode step reads", kv + w),
    ]
    ms = f"ms at {bandwidth_bytes_per_s / 1e12:g} TB/s"
    return table(
        [{"what": what, "bytes": format_bytes(b), ms: read_time_s(b, bandwidth_bytes_per_s) * 1e3} for what, b in rows],
        formats={ms: "{:.1f}"},
        caption=f"{shape.name}, one sequence",
    )


def report_table(report: dict) -> Table:
    """A :func:`~pigviz.memory.budget.budget_report` as a two-column table (section 3)."""
    r = report
    rows = [
        ("KV per token", f"{r['kv_bytes_per_token']:,} B = {format_bytes(r['kv_bytes_per_token'])}"),
        ("KV of the sequence", format_bytes(r["kv_bytes"])),
        (
            "LSH entries per token, per (layer, KV head)",
            f"{r['L']} tables x {r['index_bytes']} B = {r['table_bytes_per_head_token']} B, beside a "
            f"{r['kv_pair_bytes_per_head_token']} B key+value pair",
        ),
        ("table entries, in all", format_bytes(r["table_bytes"])),
        (f"bucket offsets (2^{r['K']} per table)", format_bytes(r["bucket_metadata_bytes"])),
        ("index / KV", f"{r['index_to_kv_ratio']:.2f}x"),
    ]
    m = r["model"]
    return table(
        [{"quantity": a, "value": b} for a, b in rows],
        caption=f"{m['name']} at {r['context']:,} tokens, {r['dtype_bytes']}-byte KV, (K, L) = ({r['K']}, {r['L']})",
    )


def layout_table(model="Llama-3.1-8B", context: int = CONTEXT, K: int = 10, L: int = 150) -> Table:
    rows = [
        {**r, "table entries": format_bytes(r["table entries"]), "bucket offsets": format_bytes(r["bucket offsets"])}
        for r in layout_rows(model, context, K, L)
    ]
    return table(rows, formats={"index / KV": "{:.2f}x"})


def index_bill_rows(context: int = CONTEXT, mark: str = " †") -> list[dict]:
    """Every shipped model's KV and LSH index at ``context`` (for the bar figure), a model for
    which ``context`` is past its maximum context marked in its label."""
    rows = []
    for name in known_models():
        shape = get_model_shape(name)
        label = name + (mark if shape.max_context and context > shape.max_context else "")
        rows.append(dict(label=label, **index_bill(shape, context)))
    return rows


def past_context_note(context: int = CONTEXT, mark: str = "†") -> str:
    """The footnote of :func:`index_bill_rows`'s marked labels."""
    shapes = [get_model_shape(name) for name in known_models()]
    past = [s for s in shapes if s.max_context and context > s.max_context]
    windowed = [s for s in past if s.sliding_window]
    note = f"{mark} {context:,} tokens is past the model's maximum context"
    for s in windowed:
        note += f"; {s.name} also attends only to its last {s.sliding_window:,} tokens"
    return note


def bits_table(model="Llama-3.1-8B", context: int = CONTEXT, settings=BIT_SETTINGS) -> Table:
    """Table entries and bucket offsets per (K, L)."""
    rows = []
    for K, L in settings:
        bill = index_bill(model, context, K=K, L=L)
        rows.append(
            {
                "K, L": f"{K}, {L}",
                "table entries": format_bytes(bill["table_bytes"]),
                "bucket offsets": format_bytes(bill["bucket_metadata_bytes"]),
                "offsets / entries": bill["bucket_metadata_bytes"] / bill["table_bytes"],
            }
        )
    return table(rows, formats={"offsets / entries": "{:.2%}"})


def uneven_bucket_rows() -> list[dict]:
    """The shipped CPU benchmark's measured entries scanned per query head beside the even-bucket
    figure L (n - 68) / 2^K over the keys it hashes (``benchmarks/bench_attend.py``: synthetic keys
    with a real-model-like cone; its 4 sink and 64 recent tokens stay exact)."""
    rows = []
    for r in speed_rows():
        even = candidates_per_query(r["n"] - BENCH_UNHASHED, r["K"], r["L"])
        rows.append(
            {
                "keys shaped like": r["shape"].removesuffix("-like"),
                "n": r["n"],
                "K, L": f"{r['K']}, {r['L']}",
                "even buckets": even,
                "measured": r["candidates_per_head"],
                "more than even": r["candidates_per_head"] / even - 1,
            }
        )
    return rows


def uneven_bucket_table(rows: list[dict] | None = None) -> Table:
    return table(
        uneven_bucket_rows() if rows is None else rows,
        formats={"n": "{:,}", "even buckets": "{:,.0f}", "measured": "{:,.0f}", "more than even": "{:+.0%}"},
        highlight={"more than even": "max"},
    )


def claims() -> list[Claim]:
    """Bytes per token, the read time, the LSH tables and the candidates a query scans."""
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
    claim("a 96k-token (98,304) context holds 12 GiB of KV", r["kv_bytes"] == 12 * GIB, format_bytes(r["kv_bytes"]))
    claim(
        "reading it once at 1 TB/s takes about 13 ms per generated token",
        near(r["kv_read_time_s"] * 1e3, 13, 0.05),
        f"{r['kv_read_time_s'] * 1e3:.1f} ms",
        quotes=(f"{r['kv_read_time_s'] * 1e3:.0f} ms",),
    )
    w = 2 * get_model_shape("Llama-3.1-8B").params  # bf16
    w_ms = read_time_s(w, 1e12) * 1e3
    claim(
        "that is only the KV part of the floor: the bf16 weights (15 GiB) add ~16.1 ms, and for one sequence "
        "at 96k they still outweigh the KV",
        near(w_ms, 16.1, 0.005) and w > r["kv_bytes"] and format_bytes(w) == "15 GiB",
        f"{format_bytes(w)}, {w_ms:.1f} ms",
        quotes=(f"{w_ms:.0f} ms",),
    )
    over = w // r["kv_bytes_per_token"] + 1
    claim(
        "one Llama-3.1-8B sequence's KV outweighs its bf16 weights only past ~122.5k tokens",
        near(over, 122_500, 0.002) and kv_bytes("Llama-3.1-8B", over) > w >= kv_bytes("Llama-3.1-8B", over - 1),
        f"from {over:,} tokens",
        quotes=(f"{over:,} tokens",),
    )
    biggest = max(kv_bytes(name, get_model_shape(name).max_context) for name in known_models())
    claim(
        "within its maximum context no shipped model's cache for one sequence, counted alone, fills an 80 GiB "
        "H100 (largest: 40 GiB)",
        biggest < H100_MEMORY_BYTES and biggest == 40 * GIB,
        format_bytes(biggest),
    )
    mistral = get_model_shape("Mistral-7B-v0.1")
    rolling = mistral.sliding_window * kv_bytes_per_token(mistral)
    past = [n for n in known_models() if CONTEXT > get_model_shape(n).max_context]
    claim(
        "98,304 tokens is past the documented maximum context of four shipped models; Mistral-7B-v0.1's "
        "4,096-token sliding window would let a rolling cache hold 512 MiB",
        len(past) == 4 and rolling == 512 * 1024 * 1024,
        f"{', '.join(past)}; {format_bytes(rolling)}",
    )
    qwen = get_model_shape("Qwen2.5-1.5B")
    claim(
        "Qwen2.5-1.5B's model card documents 32,768 tokens, though its config says max_position_embeddings 131072",
        (qwen.max_context, qwen.max_position_embeddings) == (32_768, 131_072),
        f"{qwen.max_context:,} documented, {qwen.max_position_embeddings} in config.json",
        quotes=(f"{qwen.max_context:,} tokens",),
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
        quotes=(f"{r['table_bytes'] / GIB:.1f} GiB",),
    )
    pig, mp = layout_rows("Llama-3.1-8B", CONTEXT)
    claim(
        "under MagicPIG's code's layout (layers 0 and 16 dense, a start and an end per bucket) the entries are "
        "~13.2 GiB and the offsets ~281 MiB: still more than the KV",
        near(mp["table entries"] / GIB, 13.18, 0.001)
        and near(mp["bucket offsets"] / (1024 * 1024), 281.25, 1e-9)
        and mp["table entries"] + mp["bucket offsets"] > r["kv_bytes"],
        f"{format_bytes(mp['table entries'])}, {format_bytes(mp['bucket offsets'])}; {mp['index / KV']:.2f}x",
    )
    meta_share = r["bucket_metadata_bytes"] / r["table_bytes"]
    claim(
        "bucket offsets add little at 96k tokens: under 2% of the table entries",
        meta_share < 0.02,
        f"{format_bytes(r['bucket_metadata_bytes'])} = {meta_share:.2%}",
        quotes=(f"{meta_share:.0%}",),
    )
    k16 = index_bill("Llama-3.1-8B", CONTEXT, K=16, L=150)
    doubles = all(
        bucket_metadata_bytes("Llama-3.1-8B", k + 1, 150) == 2 * bucket_metadata_bytes("Llama-3.1-8B", k, 150)
        for k in range(8, 16)
    )
    claim(
        "the offsets double with every extra bit (K = 8 to 16 at L = 150): at K = 16 they are two thirds of "
        "the table entries",
        doubles and near(k16["bucket_metadata_bytes"] / k16["table_bytes"], 2 / 3, 1e-9),
        f"{k16['bucket_metadata_bytes'] / k16['table_bytes']:.2%}",
    )
    claim(
        "a query scans about L n / 2^K = 14,400 candidate entries (even buckets)",
        r["candidates_per_query"] == 14_400,
        f"{r['candidates_per_query']:,.0f}",
    )
    excess = [row["more than even"] for row in uneven_bucket_rows()]
    claim(
        "L n / 2^K is a low estimate: on the shipped benchmark's hashed keys a query scans 15-34% more",
        all(e > 0 for e in excess) and round(min(excess), 2) == 0.15 and round(max(excess), 2) == 0.34,
        f"{min(excess):+.1%} to {max(excess):+.1%} over {len(excess)} settings",
        quotes=(f"{100 * min(excess):.0f}–{max(excess):.0%}",),
    )
    group = r["model"]["attention_heads"] // r["model"]["kv_heads"]
    g = {"query_heads": group, "index_bytes": group * r["candidate_index_bytes"]}
    g["share_of_key_bytes"] = g["index_bytes"] / r["key_bytes_per_head"]
    claim(
        "the 4 query heads of one KV head scan 4 x 57,600 index bytes, 0.92% of its 25,165,824 key bytes",
        r["key_bytes_per_head"] == 25_165_824
        and g["query_heads"] == 4
        and g["index_bytes"] == 4 * 57_600
        and round(100 * g["share_of_key_bytes"], 2) == 0.92,
        f"{g['index_bytes']:,.0f} B = {g['share_of_key_bytes']:.3%}",
        quotes=(f"{g['share_of_key_bytes']:.2%}",),
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
