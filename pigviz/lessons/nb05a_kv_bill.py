"""Notebook 05a, the KV bill: what a cached token costs, what MagicPIG's LSH tables add, and what a
query scans, each number re-derived; and the tables the notebook shows."""

from __future__ import annotations

import numpy as np

from pigviz.lessons._collapsed import Collapsed
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
    lsh_table_bytes,
    read_time_s,
    text_table,
)
from pigviz.memory.model_shapes import ModelShape, get_model_shape, known_models
from pigviz.study.findings import speed_rows

__all__ = [
    "claims",
    "Collapsed",
    "answer",
    "CONTEXT",
    "BIT_SETTINGS",
    "WEIGHT_BYTES_PER_PARAM",
    "MAGICPIG_DENSE_LAYERS",
    "context_note",
    "model_table",
    "kv_curves",
    "weight_bytes",
    "kv_overtakes_weights_at",
    "read_floor_table",
    "report_table",
    "layout_rows",
    "layout_table",
    "index_bill_rows",
    "past_context_note",
    "group_scan",
    "bits_table",
    "uneven_bucket_rows",
    "uneven_bucket_table",
]

CONTEXT = 96 * 1024  # the 96k-token document the notebook follows
BIT_SETTINGS = ((8, 75), (10, 150), (12, 150), (14, 150), (16, 150))  # section 3's (K, L) walk
WEIGHT_BYTES_PER_PARAM = 2  # bf16 weights
# MagicPIG's released code (github.com/Infini-AI-Lab/MagicPIG, models/magicpig_config.json):
# "cache_layers": [0, 16], the layers of Llama-3.1-8B that keep dense attention and no tables;
# its tables (models/cache.py) keep a start and an end offset per bucket.
MAGICPIG_DENSE_LAYERS = (0, 16)
MAGICPIG_OFFSETS_PER_BUCKET = 2


def context_note(shape: ModelShape, context: int, dtype_bytes: int = 2) -> str:
    """What ``context`` tokens mean for this model beyond the arithmetic: past its maximum
    context, and, with a sliding window, what a rolling cache would hold instead."""
    notes = []
    if shape.max_context and context > shape.max_context:
        notes.append(f"past its {shape.max_context:,}-token context")
    if shape.sliding_window and context > shape.sliding_window:
        rolling = shape.sliding_window * kv_bytes_per_token(shape, dtype_bytes)
        notes.append(f"sliding window {shape.sliding_window:,}: a rolling cache holds {format_bytes(rolling)}")
    return "; ".join(notes) or "-"


def model_table(context: int = CONTEXT, dtype_bytes: int = 2, bandwidth_bytes_per_s: float = 1e12) -> Table:
    """Every shipped model: its shape, KV per token and per sequence, and the time to read it once."""
    rows = []
    for name in known_models():
        shape = get_model_shape(name)
        nbytes = kv_bytes(shape, context, dtype_bytes)
        rows.append(
            {
                "model": shape.name,
                "params (B)": shape.params / 1e9 if shape.params else float("nan"),
                "layers x KV heads x head_dim": f"{shape.layers} x {shape.kv_heads} x {shape.head_dim}",
                "KV / token (B)": kv_bytes_per_token(shape, dtype_bytes),
                "max context": shape.max_context,
                f"KV at {context:,}": format_bytes(nbytes),
                f"read at {bandwidth_bytes_per_s / 1e12:g} TB/s (ms)": read_time_s(nbytes, bandwidth_bytes_per_s) * 1e3,
                f"at {context:,} tokens": context_note(shape, context, dtype_bytes),
            }
        )
    return table(
        rows,
        formats={
            "params (B)": "{:.2f}",
            "KV / token (B)": "{:,}",
            "max context": "{:,}",
            f"read at {bandwidth_bytes_per_s / 1e12:g} TB/s (ms)": "{:.2f}",
        },
    )


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


def weight_bytes(model="Llama-3.1-8B") -> int:
    """The model's weights in bf16: what a decode step reads besides the cache."""
    shape = get_model_shape(model)
    return int(shape.params) * WEIGHT_BYTES_PER_PARAM


def kv_overtakes_weights_at(model="Llama-3.1-8B", dtype_bytes: int = 2) -> int:
    """The shortest context at which one sequence's KV outweighs the bf16 weights."""
    return weight_bytes(model) // kv_bytes_per_token(model, dtype_bytes) + 1


def read_floor_table(model="Llama-3.1-8B", context: int = CONTEXT, bandwidth_bytes_per_s: float = 1e12) -> Table:
    """What one decode step of one sequence must read, and the time that takes at a bandwidth."""
    shape = get_model_shape(model)
    kv, w = kv_bytes(shape, context), weight_bytes(shape)
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


def layout_rows(model="Llama-3.1-8B", context: int = CONTEXT, K: int = 10, L: int = 150) -> list[dict]:
    """The index under pigviz's layout (tables in every layer, one offset per bucket) and under
    MagicPIG's released code (no tables in its dense layers, a start and an end per bucket)."""
    shape = get_model_shape(model)
    kv = kv_bytes(shape, context)
    entries, offsets = lsh_table_bytes(shape, context, L), bucket_metadata_bytes(shape, K, L)
    hashed = shape.layers - len(MAGICPIG_DENSE_LAYERS)
    mp_entries = entries * hashed // shape.layers
    mp_offsets = MAGICPIG_OFFSETS_PER_BUCKET * offsets * hashed // shape.layers
    return [
        {
            "layout": f"pigviz: all {shape.layers} layers, one offset per bucket",
            "table entries": entries,
            "bucket offsets": offsets,
            "index / KV": (entries + offsets) / kv,
        },
        {
            "layout": f"MagicPIG's code: {hashed} layers (layers {' and '.join(map(str, MAGICPIG_DENSE_LAYERS))} "
            "dense), a start and an end per bucket",
            "table entries": mp_entries,
            "bucket offsets": mp_offsets,
            "index / KV": (mp_entries + mp_offsets) / kv,
        },
    ]


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


def group_scan(report: dict) -> dict:
    """The entries the query heads of one KV head scan together (each hashes and reads its own
    buckets), against that KV head's key bytes."""
    m = report["model"]
    group = m["attention_heads"] // m["kv_heads"]
    nbytes = group * report["candidate_index_bytes"]
    return {"query_heads": group, "index_bytes": nbytes, "share_of_key_bytes": nbytes / report["key_bytes_per_head"]}


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
    figure L n / 2^K (``benchmarks/bench_attend.py``: synthetic keys with a real-model-like cone)."""
    rows = []
    for r in speed_rows():
        even = candidates_per_query(r["n"], r["K"], r["L"])
        rows.append(
            {
                "keys like": r["shape"],
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
    w = weight_bytes("Llama-3.1-8B")
    w_ms = read_time_s(w, 1e12) * 1e3
    claim(
        "that is only the KV part of the floor: the bf16 weights (15 GiB) add ~16.1 ms, and for one sequence "
        "at 96k they still outweigh the KV",
        near(w_ms, 16.1, 0.005) and w > r["kv_bytes"] and format_bytes(w) == "15 GiB",
        f"{format_bytes(w)}, {w_ms:.1f} ms",
    )
    over = kv_overtakes_weights_at("Llama-3.1-8B")
    claim(
        "one Llama-3.1-8B sequence's KV outweighs its bf16 weights only past ~122.5k tokens",
        near(over, 122_500, 0.002) and kv_bytes("Llama-3.1-8B", over) > w >= kv_bytes("Llama-3.1-8B", over - 1),
        f"from {over:,} tokens",
    )
    biggest = max(kv_bytes(name, get_model_shape(name).max_context) for name in known_models())
    claim(
        "within its maximum context no shipped model's one sequence fills an 80 GiB H100 (largest: 40 GiB)",
        biggest < H100_MEMORY_BYTES and biggest == 40 * GIB,
        format_bytes(biggest),
    )
    mistral = get_model_shape("Mistral-7B-v0.1")
    rolling = mistral.sliding_window * kv_bytes_per_token(mistral)
    past = [n for n in known_models() if CONTEXT > get_model_shape(n).max_context]
    claim(
        "98,304 tokens is past the maximum context of 3 shipped models; Mistral-7B-v0.1's 4,096-token sliding "
        "window would let a rolling cache hold 512 MiB",
        len(past) == 3 and rolling == 512 * 1024 * 1024,
        f"{', '.join(past)}; {format_bytes(rolling)}",
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
    )
    claim(
        "a query scans about L n / 2^K = 14,400 candidate entries (even buckets)",
        r["candidates_per_query"] == 14_400,
        f"{r['candidates_per_query']:,.0f}",
    )
    excess = [row["more than even"] for row in uneven_bucket_rows()]
    claim(
        "L n / 2^K is a low estimate: on the shipped benchmark's keys a query scans 14-34% more",
        all(e > 0 for e in excess) and round(min(excess), 2) == 0.14 and round(max(excess), 2) == 0.34,
        f"{min(excess):+.1%} to {max(excess):+.1%} over {len(excess)} settings",
    )
    g = group_scan(r)
    claim(
        "the 4 query heads of one KV head scan 4 x 57,600 index bytes, 0.92% of its 25,165,824 key bytes",
        r["key_bytes_per_head"] == 25_165_824
        and g["query_heads"] == 4
        and g["index_bytes"] == 4 * 57_600
        and round(100 * g["share_of_key_bytes"], 2) == 0.92,
        f"{g['index_bytes']:,.0f} B = {g['share_of_key_bytes']:.3%}",
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
    tables_mla = lsh_table_bytes(mla, 1, 150)  # one token's entries, one set of tables per layer
    tables8 = lsh_table_bytes("Llama-3.1-8B", 1, 150) / kv_bytes_per_token("Llama-3.1-8B")
    return (
        f"With one 'KV head' of head_dim {latent // 2} (so 2 x head_dim = {latent}: the 512-wide latent plus "
        f"the 64-wide rotary key), 61 layers and 2-byte numbers: {per_mla:,} B = {format_bytes(per_mla)} per "
        f"token, {per70 / per_mla:.1f}x less than Llama-3.1-70B's {format_bytes(per70)}.\n"
        "Strictly MLA stores the latent once (not a K and a V copy), so the factor 2 here is a bookkeeping "
        "device, not two tensors. The tables can index the cached vector itself. With the up-projection "
        "absorbed into the query, head h scores a token as [W_UK_h^T q_h ; q_rope_h] . [c ; k_rope], a dot "
        "product with the one cached 576-wide vector [c ; k_rope]: one set of SimHash tables per layer serves "
        "all 128 heads, as with multi-query attention, and u is still known for every key. That is a memory "
        f"win: at (10, 150), {tables_mla:,} B of table entries per token, {tables_mla / per_mla:.2f}x the cache, "
        f"where Llama-3.1-8B's tables, one set per KV head, are {tables8:.2f}x its cache.\n"
        "What changes is the angle the hash sees. It is measured in latent space, and cos(W_UK_h^T q_h, c) is "
        "not cos(q_h, W_UK_h c), the angle between the head's query and its up-projected key (W_UK_h is not a "
        "rotation). The per-head geometry is not lost, it is hashed in another space; whether "
        "the hash there still finds the keys a head weights most is what notebooks 02-04 would have to measure "
        "again, on latent vectors."
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
