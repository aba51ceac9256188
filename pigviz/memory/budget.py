"""KV-cache arithmetic: what a token costs, how long reading it takes, and what
MagicPIG's LSH tables add on top.

Everything here is exact integer arithmetic on a :class:`~pigviz.memory.model_shapes.ModelShape`
except where a rate (bandwidth, FLOP/s) enters, and every rate is used at 100% of its peak
(a floor on the time). The candidate count assumes evenly filled buckets: real buckets are
uneven, and a query that lands in a bucket as often as a key does scans sum(n_b^2) / n >= n / 2^K
entries per table (Cauchy-Schwarz), so read it as a low estimate.
"""

from __future__ import annotations

from pigviz._util.validate import check_choice, check_float, check_int
from pigviz.memory.model_shapes import ModelShape, get_model_shape, known_models

__all__ = [
    "KIB",
    "MIB",
    "GIB",
    "DTYPE_BYTES_CHOICES",
    "MAX_CONTEXT",
    "H100_DENSE_BF16_FLOPS",
    "H100_SPARSE_BF16_FLOPS",
    "H100_MEMORY_BYTES",
    "REPLICA_GPUS",
    "REPLICA_KV_BUDGET_GIB",
    "REPLICA_KV_BUDGET_BYTES",
    "replica_memory",
    "STORAGE_TIERS_GBPS",
    "H100_HBM_BYTES_PER_S",
    "decode_step_load",
    "decode_step_time",
    "kv_bytes_per_token",
    "kv_bytes",
    "read_time_s",
    "lsh_table_bytes",
    "bucket_metadata_bytes",
    "candidates_per_query",
    "key_bytes_per_head",
    "index_bill",
    "budget_report",
    "recompute_seconds_per_token",
    "attention_flops",
    "prefill_flops",
    "recompute_seconds",
    "break_even_bandwidth",
    "break_even_at",
    "fetch_or_recompute",
    "crossover_prefix",
    "break_even_over_context",
    "disaggregated_transfer",
    "break_even_table",
    "tier_verdicts",
    "tier_verdict_changes",
    "format_bytes",
    "context_note",
    "model_rows",
    "MODEL_ROW_FORMATS",
    "cache_vs_size",
    "MAGICPIG_COMMIT",
    "MAGICPIG_DENSE_LAYERS",
    "MAGICPIG_OFFSETS_PER_BUCKET",
    "layout_rows",
]

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
DTYPE_BYTES_CHOICES = (4, 2, 1)  # fp32, fp16/bf16, fp8/int8
MAX_CONTEXT = 10**9
MAX_K, MAX_L = 30, 100_000
H100_DENSE_BF16_FLOPS = 989.5e12  # an H100 SXM, per GPU, dense: what LLM weights actually get
H100_SPARSE_BF16_FLOPS = 1979e12  # the H100 SXM datasheet headline, which assumes 2:4 sparsity
H100_MEMORY_BYTES = 80 * GIB  # an H100's 80 GiB of HBM: the "80 GB" of its name, in binary units
REPLICA_GPUS = 4  # the serving replica of notebook 05b: four H100s, tensor-parallel (TP4)
H100_HBM_BYTES_PER_S = 3.35e12  # an H100 SXM's peak HBM3 bandwidth, per GPU
# What the cache gets of the replica, after the weights, the activations and the runtime. It is an
# assumption, not derived: replica_memory() checks that it fits and says how much it leaves for
# the rest (about 16 GiB).
REPLICA_KV_BUDGET_GIB = 172.5
REPLICA_KV_BUDGET_BYTES = int(REPLICA_KV_BUDGET_GIB * GIB)
# Read bandwidths of places a cached prefix could come from, in GB/s (1e9 B/s): assumed nominal
# peaks, not measurements, and no transfer sustains them. HBM is an H100 SXM's; 64 is PCIe 5.0 x16's
# raw rate in one direction; 25 is 200 GbE's line rate; 7 is one PCIe 4.0 NVMe drive (a PCIe 5.0
# drive reads about 14); 1 is a round figure for one object-storage stream.
STORAGE_TIERS_GBPS = {
    "GPU HBM (H100)": 3350.0,
    "host DRAM over PCIe 5": 64.0,
    "RDMA / 200 GbE": 25.0,
    "local NVMe": 7.0,
    "object storage": 1.0,
}


def _shape(model) -> ModelShape:
    return get_model_shape(model)


def _context(context) -> int:
    return check_int("context", context, 1, MAX_CONTEXT)


def _dtype(dtype_bytes) -> int:
    check_int("dtype_bytes", dtype_bytes)
    return int(check_choice("dtype_bytes", int(dtype_bytes), DTYPE_BYTES_CHOICES))


def kv_bytes_per_token(model, dtype_bytes: int = 2) -> int:
    """2 (K and V) x layers x KV heads x head_dim x bytes per element.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.

    Returns
    -------
    int
        Bytes of one token's K and V over every layer.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    return _shape(model).kv_bytes_per_token(_dtype(dtype_bytes))


def kv_bytes(model, context: int, dtype_bytes: int = 2) -> int:
    """KV cache of one sequence holding ``context`` tokens.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    context : int in [1, MAX_CONTEXT]
        Tokens cached (one sequence).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.

    Returns
    -------
    int
        Its bytes.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    return _context(context) * kv_bytes_per_token(model, dtype_bytes)


def read_time_s(nbytes: float, bandwidth_bytes_per_s: float = 1e12) -> float:
    """Seconds to stream ``nbytes`` once at a bandwidth (a floor, not a measurement).

    Parameters
    ----------
    nbytes : float >= 0
        Bytes read.
    bandwidth_bytes_per_s : float > 0
        Read bandwidth.

    Returns
    -------
    float
        Seconds.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or not a real number.
    """
    nbytes = check_float("nbytes", nbytes, 0)
    bandwidth = check_float("bandwidth_bytes_per_s", bandwidth_bytes_per_s, 0, lo_open=True)
    return nbytes / bandwidth


def lsh_table_bytes(model, context: int, L: int, index_bytes: int = 4) -> int:
    """Every one of the L tables holds one token index per cached token, per layer and KV head.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    context : int in [1, MAX_CONTEXT]
        Tokens cached (one sequence).
    L : int in [1, 100000]
        Tables.
    index_bytes : int, one of 2, 4, 8
        Bytes of one token index in a table.

    Returns
    -------
    int
        Bytes of the tables' entries, every layer and KV head.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    L = check_int("L", L, 1, MAX_L)
    index_bytes = int(check_choice("index_bytes", index_bytes, (2, 4, 8)))
    return _context(context) * L * index_bytes * shape.layers * shape.kv_heads


def bucket_metadata_bytes(model, K: int, L: int, offset_bytes: int = 4) -> int:
    """One offset per bucket: 2**K buckets x L tables x (layer, KV head) x offset size.

    Independent of context: the buckets exist whether or not tokens fill them.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    K : int in [1, 30]
        Bits per table: 2**K buckets.
    L : int in [1, 100000]
        Tables.
    offset_bytes : int, one of 4, 8
        Bytes of one bucket offset.

    Returns
    -------
    int
        Bytes of the offsets.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    K = check_int("K", K, 1, MAX_K)
    L = check_int("L", L, 1, MAX_L)
    offset_bytes = int(check_choice("offset_bytes", offset_bytes, (4, 8)))
    return (1 << K) * L * shape.layers * shape.kv_heads * offset_bytes


def candidates_per_query(context: int, K: int, L: int) -> float:
    """Entries a query scans in its L buckets if the n tokens spread evenly: L n / 2**K.

    Parameters
    ----------
    context : int in [1, MAX_CONTEXT]
        Tokens indexed (n).
    K : int in [1, 30]
        Bits per table: 2**K buckets.
    L : int in [1, 100000]
        Tables.

    Returns
    -------
    float
        Entries scanned, per query head and layer: a low estimate (module docstring).

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or not an integer.
    """
    context = _context(context)
    K = check_int("K", K, 1, MAX_K)
    L = check_int("L", L, 1, MAX_L)
    return L * context / (1 << K)


def key_bytes_per_head(model, context: int, dtype_bytes: int = 2) -> int:
    """Key bytes one (layer, KV head) holds: what full attention reads for one query's scores.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    context : int in [1, MAX_CONTEXT]
        Tokens cached (one sequence).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.

    Returns
    -------
    int
        Bytes.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    return _context(context) * _shape(model).head_dim * _dtype(dtype_bytes)


def index_bill(
    model,
    context: int,
    K: int,
    L: int,
    dtype_bytes: int = 2,
    index_bytes: int = 4,
    offset_bytes: int = 4,
) -> dict:
    """KV bytes, table entries and bucket metadata side by side, in bytes.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    context : int in [1, MAX_CONTEXT]
        Tokens cached (one sequence).
    K : int in [1, 30]
        Bits per table: 2**K buckets.
    L : int in [1, 100000]
        Tables.
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.
    index_bytes : int, one of 2, 4, 8
        Bytes of one token index in a table.
    offset_bytes : int, one of 4, 8
        Bytes of one bucket offset.

    Returns
    -------
    dict
        ``kv_bytes`` (:func:`kv_bytes`), ``table_bytes`` (:func:`lsh_table_bytes`),
        ``bucket_metadata_bytes`` (:func:`bucket_metadata_bytes`) and ``index_to_kv_ratio``, the
        last two together over the first.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    kv = kv_bytes(model, context, dtype_bytes)
    tables = lsh_table_bytes(model, context, L, index_bytes)
    meta = bucket_metadata_bytes(model, K, L, offset_bytes)
    return {
        "kv_bytes": kv,
        "table_bytes": tables,
        "bucket_metadata_bytes": meta,
        "index_to_kv_ratio": (tables + meta) / kv,
    }


def budget_report(
    model,
    context: int,
    dtype_bytes: int = 2,
    *,
    K: int,
    L: int,
    index_bytes: int = 4,
    offset_bytes: int = 4,
    bandwidth_bytes_per_s: float = 1e12,
) -> dict:
    """Everything ``pigviz budget`` prints, as a JSON-ready dict of plain numbers.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    context : int in [1, MAX_CONTEXT]
        Tokens cached (one sequence).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.
    K : int in [1, 30]
        Bits per table: 2**K buckets.
    L : int in [1, 100000]
        Tables.
    index_bytes : int, one of 2, 4, 8
        Bytes of one token index in a table.
    offset_bytes : int, one of 4, 8
        Bytes of one bucket offset.
    bandwidth_bytes_per_s : float > 0
        Read bandwidth, used at 100% of its peak.

    Returns
    -------
    dict
        The model's shape (``model``), the arguments, :func:`index_bill`'s entries, the KV per
        token and per (head, token), the table bytes per (head, token), the time to read the KV
        once (``kv_read_time_s``), :func:`candidates_per_query` with the index bytes it scans and
        their share of one head's key bytes, and ``notes`` (a list of str: the candidates' even
        buckets, a context past the model's maximum or its sliding window).

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    context, dtype_bytes = _context(context), _dtype(dtype_bytes)
    bill = index_bill(shape, context, K, L, dtype_bytes, index_bytes, offset_bytes)
    per_token = kv_bytes_per_token(shape, dtype_bytes)
    candidates = candidates_per_query(context, K, L)
    key_bytes = key_bytes_per_head(shape, context, dtype_bytes)
    notes = ["candidates assume evenly filled buckets; real buckets are uneven"]
    if shape.max_context and context > shape.max_context:
        notes.append(f"context exceeds the model's maximum context ({shape.max_context:,} tokens)")
    if shape.sliding_window and context > shape.sliding_window:
        notes.append(
            f"sliding window {shape.sliding_window:,}: a rolling-buffer cache would keep "
            f"only that many tokens; figures assume every token is cached"
        )
    return {
        "model": shape.to_dict(),
        "context": context,
        "dtype_bytes": dtype_bytes,
        "K": K,
        "L": L,
        "index_bytes": index_bytes,
        "kv_bytes_per_token": per_token,
        "kv_bytes": bill["kv_bytes"],
        "kv_pair_bytes_per_head_token": 2 * shape.head_dim * dtype_bytes,
        "table_bytes_per_head_token": L * index_bytes,
        "table_bytes": bill["table_bytes"],
        "bucket_metadata_bytes": bill["bucket_metadata_bytes"],
        "index_to_kv_ratio": bill["index_to_kv_ratio"],
        "read_bandwidth_bytes_per_s": bandwidth_bytes_per_s,
        "kv_read_time_s": read_time_s(bill["kv_bytes"], bandwidth_bytes_per_s),
        "candidates_per_query": candidates,
        "candidate_index_bytes": candidates * index_bytes,
        "key_bytes_per_head": key_bytes,
        "candidate_share_of_key_bytes": candidates * index_bytes / key_bytes,
        "notes": notes,
    }


def format_bytes(nbytes: float) -> str:
    """Binary units, 3 significant figures: 12.0 GiB, 600 B, 150 MiB.

    Parameters
    ----------
    nbytes : float
        Bytes.

    Returns
    -------
    str
        The size with its unit.
    """
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(nbytes) >= size:
            value = nbytes / size
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:,.0f} {unit}"
    return f"{nbytes:,.0f} B"


def context_note(model, context: int, dtype_bytes: int = 2) -> str:
    """What ``context`` tokens mean for a model beyond the arithmetic: past its maximum context,
    and, with a sliding window, what a rolling cache would hold instead.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    context : int in [1, MAX_CONTEXT]
        Tokens cached (one sequence).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.

    Returns
    -------
    str
        The notes joined by "; ", or "-" when there is nothing to say.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    context = _context(context)
    notes = []
    if shape.max_context and context > shape.max_context:
        notes.append(f"past its {shape.max_context:,}-token context")
    if shape.sliding_window and context > shape.sliding_window:
        rolling = shape.sliding_window * kv_bytes_per_token(shape, dtype_bytes)
        notes.append(f"sliding window {shape.sliding_window:,}: a rolling cache holds {format_bytes(rolling)}")
    return "; ".join(notes) or "-"


def model_rows(context: int, dtype_bytes: int = 2, models=None, bandwidth_bytes_per_s: float = 1e12) -> list[dict]:
    """Per model: its shape, KV per token and per sequence at ``context``, the time to read that
    once at a bandwidth, and what the context hides (:func:`context_note`). Plain numbers;
    ``pigviz budget --model all`` prints them as text.

    Parameters
    ----------
    context : int in [1, MAX_CONTEXT]
        Tokens cached (one sequence).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.
    models : iterable of str or ModelShape, optional
        The models (names as for :func:`kv_bytes`'s ``model``); default every shipped one.
    bandwidth_bytes_per_s : float > 0
        Read bandwidth, used at 100% of its peak.

    Returns
    -------
    list of dict
        One row per model, keyed by the column titles (``MODEL_ROW_FORMATS`` formats some).

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    context = _context(context)
    bandwidth = check_float("bandwidth_bytes_per_s", bandwidth_bytes_per_s, 0, lo_open=True)
    rows = []
    for name in models or known_models():
        shape = _shape(name)
        nbytes = kv_bytes(shape, context, dtype_bytes)
        rows.append(
            {
                "model": shape.name,
                "params (B)": shape.params / 1e9 if shape.params else float("nan"),
                "layers x KV heads x head_dim": f"{shape.layers} x {shape.kv_heads} x {shape.head_dim}",
                "KV / token (B)": kv_bytes_per_token(shape, dtype_bytes),
                "max context": shape.max_context,
                f"KV at {context:,}": format_bytes(nbytes),
                f"read at {bandwidth / 1e12:g} TB/s (ms)": read_time_s(nbytes, bandwidth) * 1e3,
                f"at {context:,} tokens": context_note(shape, context, dtype_bytes),
            }
        )
    return rows


MODEL_ROW_FORMATS = {"params (B)": "{:.2f}", "KV / token (B)": "{:,}", "max context": "{:,}"}


def cache_vs_size(model_a, model_b, dtype_bytes: int = 2) -> dict:
    """Parameter and KV-per-token ratios of two models (a over b), and a sentence saying so.

    Parameters
    ----------
    model_a, model_b : str, config or ModelShape
        The two models, as :func:`kv_bytes`'s ``model``.
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.

    Returns
    -------
    dict
        ``params_ratio``, ``kv_ratio`` (float, a over b) and ``text``.

    Raises
    ------
    ValueError, TypeError
        An unknown model, one without a parameter count, or a bad ``dtype_bytes``.
    """
    a, b = _shape(model_a), _shape(model_b)
    if not (a.params and b.params):
        raise ValueError(f"cache_vs_size needs parameter counts; {a.name if not a.params else b.name} has none")
    kv_a, kv_b = kv_bytes_per_token(a, dtype_bytes), kv_bytes_per_token(b, dtype_bytes)
    text = (
        f"{a.name} vs {b.name}: {a.params / 1e9:.2f}B vs {b.params / 1e9:.2f}B parameters "
        f"({a.params / b.params:.2f}x), {kv_a:,} B vs {kv_b:,} B of KV per token ({kv_a / kv_b:.2f}x)"
    )
    return {"params_ratio": a.params / b.params, "kv_ratio": kv_a / kv_b, "text": text}


# --- fetch a cached prefix, or recompute it? ---------------------------------------
#
# Recomputing a prefix of n tokens is a prefill: about 2 N FLOPs per token for the weight
# matmuls, plus causal attention, where query i scores i keys and averages i values in
# every layer: 4 x layers x q_width x (1 + 2 + ... + n) = 2 x layers x q_width x n (n + 1),
# with q_width = attention_heads x head_dim. Fetching moves n x bytes_per_token. The weight
# term and the bytes both grow like n, the attention term like n^2, so the break-even
# bandwidth falls as the prefix grows; at short prefixes it tends to bytes / (2 N).


def recompute_seconds_per_token(n_params: float, flops_per_gpu: float = H100_DENSE_BF16_FLOPS, tp: int = 1) -> float:
    """Weight-matmul time per prefill token at full utilisation: 2N FLOPs over ``tp`` GPUs.

    The short-prefix limit: attention adds to it as the prefix grows (:func:`prefill_flops`).

    Parameters
    ----------
    n_params : float > 0
        The model's parameter count N.
    flops_per_gpu : float > 0
        Peak FLOP/s of one GPU, used at 100% (default: an H100 SXM's dense bf16, 989.5e12).
    tp : int in [1, 1024]
        GPUs the prefill is split over (tensor parallelism).

    Returns
    -------
    float
        Seconds per token.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type.
    """
    n_params = check_float("n_params", n_params, 0, lo_open=True)
    flops_per_gpu = check_float("flops_per_gpu", flops_per_gpu, 0, lo_open=True)
    tp = check_int("tp", tp, 1, 1024)
    return 2 * n_params / (flops_per_gpu * tp)


def _n_params(shape: ModelShape, n_params) -> float:
    if n_params is None:
        if not shape.params:
            raise ValueError(f"{shape.name} has no parameter count; pass n_params")
        n_params = shape.params
    return check_float("n_params", n_params, 0, lo_open=True)


def attention_flops(model, tokens: int) -> float:
    """Causal self-attention FLOPs of a prefill of ``tokens``: 2 x layers x q_width x n (n + 1).

    Query i (1-based) takes i dot products for its scores and i weighted value rows, each
    2 x head_dim FLOPs per query head.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    tokens : int in [1, MAX_CONTEXT]
        Tokens prefilled (n).

    Returns
    -------
    float
        FLOPs.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    n = _context(tokens)
    return 2.0 * shape.layers * shape.attention_heads * shape.head_dim * n * (n + 1)


def prefill_flops(model, tokens: int, n_params: float | None = None) -> float:
    """FLOPs to prefill ``tokens``: 2 N per token for the weights plus causal attention.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    tokens : int in [1, MAX_CONTEXT]
        Tokens prefilled.
    n_params : float > 0, optional
        The model's parameter count N; default its shape's (a model without one raises ValueError).

    Returns
    -------
    float
        FLOPs.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    n = _context(tokens)
    return 2.0 * _n_params(shape, n_params) * n + attention_flops(shape, n)


def recompute_seconds(
    model, tokens: int, n_params: float | None = None, flops_per_gpu: float = H100_DENSE_BF16_FLOPS, tp: int = 1
) -> float:
    """Time to prefill ``tokens`` again at full utilisation of ``tp`` GPUs. Wall time of
    the ``tp``-GPU replica; GPU-seconds are ``tp`` times this.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    tokens : int in [1, MAX_CONTEXT]
        Tokens prefilled.
    n_params : float > 0, optional
        The model's parameter count N; default its shape's (a model without one raises ValueError).
    flops_per_gpu : float > 0
        Peak FLOP/s of one GPU, used at 100%: pass ``flops_per_gpu x MFU`` for a realistic
        utilisation (default: an H100 SXM's dense bf16, 989.5e12).
    tp : int in [1, 1024]
        GPUs the prefill is split over (tensor parallelism).

    Returns
    -------
    float
        Seconds.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    flops_per_gpu = check_float("flops_per_gpu", flops_per_gpu, 0, lo_open=True)
    tp = check_int("tp", tp, 1, 1024)
    return prefill_flops(model, tokens, n_params) / (flops_per_gpu * tp)


def break_even_bandwidth(
    bytes_per_token: float, n_params: float, flops_per_gpu: float = H100_DENSE_BF16_FLOPS, tp: int = 1
) -> float:
    """Bytes/s at which fetching a token's KV takes as long as its 2N weight FLOPs: the
    short-prefix limit of :func:`break_even_at` (attention left out).

    Parameters
    ----------
    bytes_per_token : float > 0
        KV bytes of one token (all layers).
    n_params : float > 0
        The model's parameter count N.
    flops_per_gpu : float > 0
        Peak FLOP/s of one GPU, used at 100% (default: an H100 SXM's dense bf16, 989.5e12).
    tp : int in [1, 1024]
        GPUs the prefill is split over (tensor parallelism).

    Returns
    -------
    float
        Bytes/s.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type.
    """
    bytes_per_token = check_float("bytes_per_token", bytes_per_token, 0, lo_open=True)
    return bytes_per_token / recompute_seconds_per_token(n_params, flops_per_gpu, tp)


def break_even_at(
    model,
    prefix_tokens: int,
    n_params: float | None = None,
    dtype_bytes: int = 2,
    flops_per_gpu: float = H100_DENSE_BF16_FLOPS,
    tp: int = 1,
) -> float:
    """Bytes/s at which fetching a ``prefix_tokens`` prefix takes as long as prefilling it,
    attention included: n x bytes_per_token / recompute_seconds(n).

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    prefix_tokens : int in [1, MAX_CONTEXT]
        The prefix (n).
    n_params : float > 0, optional
        The model's parameter count N; default its shape's (a model without one raises ValueError).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.
    flops_per_gpu : float > 0
        Peak FLOP/s of one GPU, used at 100% (default: an H100 SXM's dense bf16, 989.5e12).
    tp : int in [1, 1024]
        GPUs the prefill is split over (tensor parallelism).

    Returns
    -------
    float
        Bytes/s.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    n = _context(prefix_tokens)
    return n * kv_bytes_per_token(model, dtype_bytes) / recompute_seconds(model, n, n_params, flops_per_gpu, tp)


def fetch_or_recompute(
    model,
    prefix_tokens: int,
    bandwidth_bytes_per_s: float,
    n_params: float | None = None,
    dtype_bytes: int = 2,
    flops_per_gpu: float = H100_DENSE_BF16_FLOPS,
    tp: int = 1,
) -> dict:
    """Time to fetch a cached prefix vs to prefill it again (attention included).

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    prefix_tokens : int in [1, MAX_CONTEXT]
        The prefix.
    bandwidth_bytes_per_s : float > 0
        The bandwidth it is fetched at.
    n_params : float > 0, optional
        The model's parameter count N; default its shape's (a model without one raises ValueError).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.
    flops_per_gpu : float > 0
        Peak FLOP/s of one GPU, used at 100% (default: an H100 SXM's dense bf16, 989.5e12).
    tp : int in [1, 1024]
        GPUs the prefill is split over (tensor parallelism).

    Returns
    -------
    dict
        ``fetch_s``, ``recompute_s`` (seconds) and ``fetch_wins`` (bool: fetching is faster).

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    n = _context(prefix_tokens)
    bandwidth = check_float("bandwidth_bytes_per_s", bandwidth_bytes_per_s, 0, lo_open=True)
    fetch = n * kv_bytes_per_token(model, dtype_bytes) / bandwidth
    recompute = recompute_seconds(model, n, n_params, flops_per_gpu, tp)
    return {"fetch_s": fetch, "recompute_s": recompute, "fetch_wins": fetch < recompute}


def crossover_prefix(
    model,
    bandwidth_bytes_per_s: float,
    n_params: float | None = None,
    dtype_bytes: int = 2,
    flops_per_gpu: float = H100_DENSE_BF16_FLOPS,
    tp: int = 1,
) -> int | None:
    """The shortest prefix from which fetching at this bandwidth beats recomputing it.

    Fetch wins when bandwidth > bytes x F x tp / (2N + 2 layers q_width (n + 1)), i.e. when
    n + 1 > (bytes x F x tp / bandwidth - 2N) / (2 layers q_width).

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    bandwidth_bytes_per_s : float > 0
        The bandwidth it is fetched at.
    n_params : float > 0, optional
        The model's parameter count N; default its shape's (a model without one raises ValueError).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.
    flops_per_gpu : float > 0
        Peak FLOP/s of one GPU, used at 100% (default: an H100 SXM's dense bf16, 989.5e12).
    tp : int in [1, 1024]
        GPUs the prefill is split over (tensor parallelism).

    Returns
    -------
    int or None
        The prefix in tokens: 1 when fetching wins for every prefix, None when it loses up to
        :data:`MAX_CONTEXT`.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    bandwidth = check_float("bandwidth_bytes_per_s", bandwidth_bytes_per_s, 0, lo_open=True)
    flops_per_gpu = check_float("flops_per_gpu", flops_per_gpu, 0, lo_open=True)
    tp = check_int("tp", tp, 1, 1024)
    per_token = kv_bytes_per_token(shape, dtype_bytes)
    excess = per_token * flops_per_gpu * tp / bandwidth - 2 * _n_params(shape, n_params)
    estimate = excess / (2 * shape.layers * shape.attention_heads * shape.head_dim)
    if estimate > MAX_CONTEXT:
        return None

    def wins(n):
        return fetch_or_recompute(shape, n, bandwidth, n_params, dtype_bytes, flops_per_gpu, tp)["fetch_wins"]

    n = max(1, int(estimate) - 2)  # fetch loses at n exactly when n + 1 <= estimate; check, not trust
    if wins(n):
        while n > 1 and wins(n - 1):
            n -= 1
        return n
    while not wins(n):
        n += 1
    return n if n <= MAX_CONTEXT else None


def break_even_over_context(
    model,
    contexts=(128, 4_096, 32_768, 131_072),
    n_params: float | None = None,
    dtype_bytes: int = 2,
    tps=(4,),
    flops_per_gpu: float = H100_DENSE_BF16_FLOPS,
) -> list[dict]:
    """Per prefix length: attention's share of the prefill FLOPs and the break-even per TP degree.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    contexts : iterable of int in [1, MAX_CONTEXT]
        The prefix lengths.
    n_params : float > 0, optional
        The model's parameter count N; default its shape's (a model without one raises ValueError).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.
    tps : iterable of int in [1, 1024]
        The tensor-parallel degrees.
    flops_per_gpu : float > 0
        Peak FLOP/s of one GPU, used at 100% (default: an H100 SXM's dense bf16, 989.5e12).

    Returns
    -------
    list of dict
        Per prefix: ``context``, ``attention_share`` (of the prefill FLOPs) and, per degree tp,
        ``TP{tp}``, the break-even in GB/s (:func:`break_even_at`).

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    rows = []
    for n in contexts:
        n = _context(n)
        total = prefill_flops(shape, n, n_params)
        row = {"context": n, "attention_share": attention_flops(shape, n) / total}
        for tp in tps:
            row[f"TP{tp}"] = break_even_at(shape, n, n_params, dtype_bytes, flops_per_gpu, tp) / 1e9
        rows.append(row)
    return rows


def decode_step_load(
    model,
    batch: int,
    cached_tokens: int,
    n_params: float | None = None,
    dtype_bytes: int = 2,
    weight_bytes_per_param: int = 2,
) -> dict:
    """What one decode step of ``batch`` sequences reads and computes: the weights once (shared
    by the batch), every sequence's own cache, 2 N FLOPs per sequence for the weights and
    4 x layers x q_width FLOPs per cached token for attention. No rate enters:
    :func:`decode_step_time` turns it into a roofline floor.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    batch : int in [1, 10**7]
        Sequences decoded together.
    cached_tokens : int in [0, 10**12]
        The sum of the sequences' lengths, a shared prefix counted once per sequence that reads it.
    n_params : float > 0, optional
        The model's parameter count N; default its shape's (a model without one raises ValueError).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.
    weight_bytes_per_param : int, one of 4, 2, 1
        Bytes of one weight.

    Returns
    -------
    dict
        ``batch``, ``weight_bytes``, ``kv_read_bytes``, ``bytes`` (their sum) and ``flops``.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    batch = check_int("batch", batch, 1, 10**7)
    cached = check_int("cached_tokens", cached_tokens, 0, 10**12)
    weight_bytes_per_param = int(check_choice("weight_bytes_per_param", weight_bytes_per_param, DTYPE_BYTES_CHOICES))
    params = _n_params(shape, n_params)
    weight_bytes = params * weight_bytes_per_param
    kv_read = cached * kv_bytes_per_token(shape, dtype_bytes)
    flops = 2.0 * params * batch + 4.0 * shape.layers * shape.attention_heads * shape.head_dim * cached
    return {
        "batch": batch,
        "weight_bytes": weight_bytes,
        "kv_read_bytes": kv_read,
        "bytes": weight_bytes + kv_read,
        "flops": flops,
    }


def decode_step_time(
    model,
    batch: int,
    cached_tokens: int,
    n_params: float | None = None,
    dtype_bytes: int = 2,
    gpus: int = REPLICA_GPUS,
    hbm_bytes_per_s: float = H100_HBM_BYTES_PER_S,
    flops_per_gpu: float = H100_DENSE_BF16_FLOPS,
    weight_bytes_per_param: int = 2,
) -> dict:
    """A roofline floor on one decode step of ``batch`` sequences on ``gpus`` GPUs: the
    :func:`decode_step_load` at 100% of both peaks, the larger of bytes / bandwidth and
    FLOPs / FLOP/s.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    batch : int in [1, 10**7]
        Sequences decoded together.
    cached_tokens : int in [0, 10**12]
        The sum of the sequences' lengths (:func:`decode_step_load`).
    n_params : float > 0, optional
        The model's parameter count N; default its shape's (a model without one raises ValueError).
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.
    gpus : int in [1, 1024]
        GPUs sharing the bytes and the FLOPs.
    hbm_bytes_per_s : float > 0
        Memory bandwidth of one GPU (default an H100 SXM's, 3.35e12).
    flops_per_gpu : float > 0
        Peak FLOP/s of one GPU, used at 100% (default: an H100 SXM's dense bf16, 989.5e12).
    weight_bytes_per_param : int, one of 4, 2, 1
        Bytes of one weight.

    Returns
    -------
    dict
        The load's ``batch``, ``weight_bytes``, ``kv_read_bytes`` and ``flops``; ``memory_s``,
        ``compute_s``, ``step_s`` (the larger), ``bound`` ("memory" or "compute") and ``tokens_per_s``, ``batch``
        over ``step_s``.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    gpus = check_int("gpus", gpus, 1, 1024)
    hbm = check_float("hbm_bytes_per_s", hbm_bytes_per_s, 0, lo_open=True)
    flops_per_gpu = check_float("flops_per_gpu", flops_per_gpu, 0, lo_open=True)
    load = decode_step_load(model, batch, cached_tokens, n_params, dtype_bytes, weight_bytes_per_param)
    batch, flops = load["batch"], load["flops"]
    memory_s = load["bytes"] / (gpus * hbm)
    compute_s = flops / (gpus * flops_per_gpu)
    step = max(memory_s, compute_s)
    return {
        "batch": batch,
        "weight_bytes": load["weight_bytes"],
        "kv_read_bytes": load["kv_read_bytes"],
        "flops": flops,
        "memory_s": memory_s,
        "compute_s": compute_s,
        "step_s": step,
        "bound": "memory" if memory_s >= compute_s else "compute",
        "tokens_per_s": batch / step,
    }


def disaggregated_transfer(model, prompt_tokens: int, link_bytes_per_s: float, dtype_bytes: int = 2) -> dict:
    """Disaggregated prefill: the prompt's KV crosses a link from the prefill to the decode
    machine. The prefill itself samples token 1; the decode side can produce token 2 only
    once the KV has arrived, so the transfer delays token 2, not the first token.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    prompt_tokens : int in [1, MAX_CONTEXT]
        The prompt.
    link_bytes_per_s : float > 0
        The link's bandwidth.
    dtype_bytes : int, one of 4, 2, 1
        Bytes of one cache element: fp32, fp16/bf16, fp8/int8.

    Returns
    -------
    dict
        ``prompt_tokens``, ``kv_bytes``, ``link_bytes_per_s`` and ``transfer_s`` (seconds).

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    n = _context(prompt_tokens)
    link = check_float("link_bytes_per_s", link_bytes_per_s, 0, lo_open=True)
    nbytes = n * kv_bytes_per_token(model, dtype_bytes)
    return {"prompt_tokens": n, "kv_bytes": nbytes, "link_bytes_per_s": link, "transfer_s": nbytes / link}


def break_even_table(
    bytes_per_token: float, n_params: float, tps=(1, 2, 4, 8), flops_per_gpu: float = H100_DENSE_BF16_FLOPS
) -> list[dict]:
    """Per tensor-parallel degree: the prefill's weight time per token and the bandwidth at
    which fetching a token's KV takes as long (:func:`break_even_bandwidth`, attention left out).

    Parameters
    ----------
    bytes_per_token : float > 0
        KV bytes of one token (all layers).
    n_params : float > 0
        The model's parameter count N.
    tps : iterable of int in [1, 1024]
        The tensor-parallel degrees.
    flops_per_gpu : float > 0
        Peak FLOP/s of one GPU, used at 100% (default: an H100 SXM's dense bf16, 989.5e12).

    Returns
    -------
    list of dict
        Per degree: ``tp``, ``prefill_us_per_token`` (microseconds) and ``break_even_GBps``.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type.
    """
    return [
        {
            "tp": tp,
            "prefill_us_per_token": recompute_seconds_per_token(n_params, flops_per_gpu, tp) * 1e6,
            "break_even_GBps": break_even_bandwidth(bytes_per_token, n_params, flops_per_gpu, tp) / 1e9,
        }
        for tp in tps
    ]


def tier_verdicts(break_even_GBps: float, tiers: dict | None = None) -> list[dict]:
    """Each storage tier's bandwidth against the break-even: above it, fetching wins.

    Parameters
    ----------
    break_even_GBps : float > 0
        The break-even bandwidth, in GB/s.
    tiers : dict, optional
        Tier name -> read bandwidth in GB/s; default ``STORAGE_TIERS_GBPS``.

    Returns
    -------
    list of dict
        Per tier: ``tier``, ``GBps``, ``vs_break_even`` (the ratio) and ``fetch_wins``.

    Raises
    ------
    ValueError, TypeError
        ``break_even_GBps`` not a real number > 0.
    """
    break_even_GBps = check_float("break_even_GBps", break_even_GBps, 0, lo_open=True)
    return [
        {"tier": name, "GBps": bw, "vs_break_even": bw / break_even_GBps, "fetch_wins": bw > break_even_GBps}
        for name, bw in (tiers or STORAGE_TIERS_GBPS).items()
    ]


def tier_verdict_changes(
    bytes_per_token: float, n_params: float, tp_from: int, tp_to: int, tiers: dict | None = None
) -> list[str]:
    """Storage tiers whose fetch/recompute verdict differs between two tensor-parallel degrees.

    Parameters
    ----------
    bytes_per_token : float > 0
        KV bytes of one token (all layers).
    n_params : float > 0
        The model's parameter count N.
    tp_from, tp_to : int in [1, 1024]
        The two degrees.
    tiers : dict, optional
        Tier name -> read bandwidth in GB/s; default ``STORAGE_TIERS_GBPS``.

    Returns
    -------
    list of str
        The tiers' names.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type.
    """
    before, after = (
        tier_verdicts(break_even_bandwidth(bytes_per_token, n_params, tp=tp) / 1e9, tiers) for tp in (tp_from, tp_to)
    )
    return [a["tier"] for a, b in zip(before, after) if a["fetch_wins"] != b["fetch_wins"]]


# --- the serving replica's memory -------------------------------------------------


def replica_memory(
    model="Llama-3.1-70B",
    gpus: int = REPLICA_GPUS,
    gpu_bytes: int = H100_MEMORY_BYTES,
    kv_budget_bytes: int = REPLICA_KV_BUDGET_BYTES,
    weight_bytes_per_param: int = 2,
) -> dict:
    """Where a replica's GPU memory goes: the weights, the KV budget, and what is left between.

    Parameters
    ----------
    model : str, config or ModelShape
        The model served, as :func:`kv_bytes`'s; it needs a parameter count.
    gpus : int in [1, 1024]
        GPUs of the replica.
    gpu_bytes : int >= 1
        Memory of one GPU (default an H100's 80 GiB).
    kv_budget_bytes : int >= 0
        What the cache gets of the replica.
    weight_bytes_per_param : int, one of 4, 2, 1
        Bytes of one weight.

    Returns
    -------
    dict
        ``model``, ``params``, ``weight_bytes_per_param``, ``gpus``, ``gpu_bytes``, ``total_bytes``,
        ``weight_bytes``, ``after_weights_bytes``, ``kv_budget_bytes`` and ``rest_bytes``: what the
        KV budget leaves of the memory after the weights, for the activations and the runtime.

    Raises
    ------
    ValueError
        The weights and the KV budget together do not fit, a model without a parameter count, or
        an argument outside its range.
    TypeError
        An integer argument that is not an integer.
    """
    shape = _shape(model)
    gpus = check_int("gpus", gpus, 1, 1024)
    gpu_bytes = check_int("gpu_bytes", gpu_bytes, 1)
    kv_budget_bytes = check_int("kv_budget_bytes", kv_budget_bytes, 0)
    weight_bytes_per_param = int(check_choice("weight_bytes_per_param", weight_bytes_per_param, DTYPE_BYTES_CHOICES))
    if not shape.params:
        raise ValueError(f"{shape.name} has no parameter count")
    total = gpus * gpu_bytes
    weights = int(shape.params) * weight_bytes_per_param
    after = total - weights
    if kv_budget_bytes > after:
        raise ValueError(
            f"a KV budget of {format_bytes(kv_budget_bytes)} does not fit: {gpus} GPUs of {format_bytes(gpu_bytes)} "
            f"leave {format_bytes(after)} after {shape.name}'s weights"
        )
    return {
        "model": shape.name,
        "params": int(shape.params),
        "weight_bytes_per_param": weight_bytes_per_param,
        "gpus": gpus,
        "gpu_bytes": gpu_bytes,
        "total_bytes": total,
        "weight_bytes": weights,
        "after_weights_bytes": after,
        "kv_budget_bytes": kv_budget_bytes,
        "rest_bytes": after - kv_budget_bytes,
    }


# --- the index under pigviz's layout and under MagicPIG's released code ------------------------

# MagicPIG's first release (github.com/Infini-AI-Lab/MagicPIG at this commit): models/magicpig_config.json
# has "cache_layers": [0, 16], the layers of Llama-3.1-8B that keep dense attention and hash no keys;
# models/cache.py keeps a start and an end offset (layer_batch_start, layer_batch_end, int32) per bucket.
MAGICPIG_COMMIT = "bc350c686ec5bf99dc72255a76ef6f762fa133e0"
MAGICPIG_DENSE_LAYERS = (0, 16)
MAGICPIG_OFFSETS_PER_BUCKET = 2


def layout_rows(
    model="Llama-3.1-8B",
    context: int = 96 * 1024,
    *,
    K: int,
    L: int,
    dense_layers=MAGICPIG_DENSE_LAYERS,
    offsets_per_bucket: int = MAGICPIG_OFFSETS_PER_BUCKET,
) -> list[dict]:
    """The LSH index (bytes) under pigviz's layout (tables in every layer, one offset per bucket)
    and under MagicPIG's released code, each with its ratio to the KV cache it indexes.

    Parameters
    ----------
    model : str, config or ModelShape
        A known model's name (case-insensitive, aliases allowed), a config.json path or folder, a
        config mapping or ``PretrainedConfig``, or a ``ModelShape``.
    context : int in [1, MAX_CONTEXT]
        Tokens cached (one sequence).
    K : int in [1, 30]
        Bits per table: 2**K buckets.
    L : int in [1, 100000]
        Tables.
    dense_layers : iterable of int in [0, layers - 1]
        The layers MagicPIG's code keeps dense, with no tables (default its release's, 0 and 16).
    offsets_per_bucket : int in [1, 8]
        Offsets per bucket in MagicPIG's code (its release keeps a start and an end: 2).

    Returns
    -------
    list of dict
        Two rows, pigviz's layout then MagicPIG's: ``layout`` (a description), ``table entries``
        and ``bucket offsets`` (bytes) and ``index / KV``.

    Raises
    ------
    ValueError, TypeError
        An argument outside its range or of the wrong type, or a model that is not known.
    """
    shape = _shape(model)
    dense = sorted({check_int("dense layer", d, 0, shape.layers - 1) for d in dense_layers})
    per_bucket = check_int("offsets_per_bucket", offsets_per_bucket, 1, 8)
    kv = kv_bytes(shape, context)
    entries, offsets = lsh_table_bytes(shape, context, L), bucket_metadata_bytes(shape, K, L)
    hashed = shape.layers - len(dense)
    mp_entries = entries * hashed // shape.layers
    mp_offsets = per_bucket * offsets * hashed // shape.layers
    return [
        {
            "layout": f"pigviz: all {shape.layers} layers, one offset per bucket",
            "table entries": entries,
            "bucket offsets": offsets,
            "index / KV": (entries + offsets) / kv,
        },
        {
            "layout": f"MagicPIG's code: {hashed} layers (layers {' and '.join(map(str, dense))} dense), "
            + ("a start and an end per bucket" if per_bucket == 2 else f"{per_bucket} offsets per bucket"),
            "table entries": mp_entries,
            "bucket offsets": mp_offsets,
            "index / KV": (mp_entries + mp_offsets) / kv,
        },
    ]
