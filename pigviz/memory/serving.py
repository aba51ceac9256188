"""The rows notebook 05b states about its serving replica: a Llama-70B shape on four H100 SXM GPUs
(TP4) with a fixed KV budget.

Each ``*_rows`` function returns a list of dicts of plain numbers (and a few verdict words), with
the column names the notebook shows; :data:`FORMATS` holds each table's number formats, so a
notebook or a script renders them with ``lessons.table(rows, formats=FORMATS[name])``. Every rate
is used at 100% of its peak unless an ``mfu`` or ``utilisations`` argument says otherwise: the
times are floors, not measurements. The links, the budget for token 2 and the tier bandwidths are
example numbers.
"""

from __future__ import annotations

import numpy as np

from pigviz._util.validate import check_float, check_int
from pigviz.memory.allocators import (
    CONTIGUOUS_RULES,
    KV_BUDGET_BYTES,
    REPLICA_N_PARAMS,
    contiguous_allocation,
    contiguous_rules,
    paged_admission_with_allocator,
    paged_allocation,
    replica_bytes_per_token,
    request_mix,
)
from pigviz.memory.budget import (
    GIB,
    H100_DENSE_BF16_FLOPS,
    STORAGE_TIERS_GBPS,
    break_even_at,
    break_even_bandwidth,
    break_even_table,
    crossover_prefix,
    disaggregated_transfer,
    format_bytes,
    recompute_seconds,
    replica_memory,
    tier_verdicts,
)
from pigviz.memory.model_shapes import get_model_shape

__all__ = [
    "MODEL",
    "N_PARAMS_70B",
    "CONTEXTS",
    "NVME_GBPS",
    "PCIE5_NVME_GBPS",
    "H100_PCIE_DENSE_BF16_FLOPS",
    "H100_PCIE_HBM_BYTES_PER_S",
    "TIER_FIGURES",
    "UTILISATIONS",
    "LINKS_GBPS",
    "SECOND_TOKEN_BUDGET_S",
    "FORMATS",
    "replica_rows",
    "context_share_rows",
    "mix_rows",
    "contiguous_rows",
    "paged_rows",
    "sharing_rows",
    "break_even_tp_rows",
    "tier_rows",
    "break_even_context_rows",
    "crossovers",
    "utilisation_rows",
    "nvme_utilisation_threshold",
    "first_prefill_seconds",
    "preemption_rows",
    "throughput_rows",
    "prepended_prompt",
    "fp8_rows",
    "disaggregation_rows",
    "rules_rows",
]

MODEL = "Llama-3.1-70B"
N_PARAMS_70B = REPLICA_N_PARAMS  # the round parameter count of the fetch-or-recompute arithmetic
CONTEXTS = (128, 4_096, 32_768, 131_072)  # the prefix lengths the break-even tables walk through
NVME_GBPS = STORAGE_TIERS_GBPS["local NVMe"]
PCIE5_NVME_GBPS = 14.0  # what a PCIe 5.0 NVMe drive reads, nominally
H100_PCIE_DENSE_BF16_FLOPS = 756e12  # the PCIe H100's datasheet figures, beside the SXM ones used here
H100_PCIE_HBM_BYTES_PER_S = 2.0e12
# What each storage tier's bandwidth (budget.STORAGE_TIERS_GBPS) stands for: assumed nominal peaks.
TIER_FIGURES = {
    "GPU HBM (H100)": "an H100 SXM's HBM3 peak",
    "host DRAM over PCIe 5": "PCIe 5.0 x16, raw rate, one direction",
    "RDMA / 200 GbE": "200 GbE line rate",
    "local NVMe": "one PCIe 4.0 drive",
    "object storage": "a round figure for one stream",
}
UTILISATIONS = (1.0, 0.9, 0.75, 0.6, 0.5, 0.4)  # shares of the dense peak a prefill might reach (MFU)
# Disaggregated prefill, example numbers: a 200 GbE link (the RDMA tier) and a 400 Gb/s one, and a
# budget from the request's arrival to token 2 (the prefill samples token 1, the decode side token 2).
LINKS_GBPS = {"200 GbE": 25.0, "400 Gb/s": 50.0}
SECOND_TOKEN_BUDGET_S = 2.0

_PCTS = (("median", 50), ("90th pct", 90), ("99th pct", 99), ("max", 100))
_NVME = f"local NVMe ({NVME_GBPS:g} GB/s)"
_FIRST_LINK = next(iter(LINKS_GBPS))

FORMATS = {
    "replica": {"GiB": "{:.1f}"},
    "context_share": {"context": "{:,}", "share of 172.5 GiB": "{:.1%}"},
    "mix": {name: "{:,}" for name, _ in _PCTS},
    "contiguous": {"slot tokens": "{:,}", "reserved GiB": "{:.1f}", "used GiB": "{:.1f}", "wasted": "{:.1%}"},
    "paged": {
        "held GiB": "{:.1f}",
        "waste": "{:.2%}",
        "waste tokens / sequence": "{:.1f}",
        "vs 8,192-token slots": "{:.2f}x",
    },
    "sharing": {
        "shared prefix": "{:,}",
        "own copies GiB": "{:.2f}",
        "shared pages GiB": "{:.2f}",
        "saved": "{:.1%}",
        "formula": "{:.1%}",
    },
    "break_even_tp": {"prefill per token (us)": "{:.1f}", "break-even GB/s": "{:.2f}"},
    "tiers": {"GB/s": "{:g}", "vs TP4 break-even": "{:.2f}x"},
    "break_even_context": {
        "prefix tokens": "{:,}",
        "attention share of FLOPs": "{:.1%}",
        "break-even TP4 GB/s": "{:.2f}",
        "break-even TP8 GB/s": "{:.2f}",
    },
    "utilisation": {
        "MFU (share of the dense peak)": "{:.0%}",
        "TP4 break-even, 128 tokens (GB/s)": "{:.2f}",
        "TP4 break-even, 131,072 tokens (GB/s)": "{:.2f}",
    },
    "preemption": {
        "target": "{:.1%}",
        "mean occupancy": "{:.1%}",
        "peak": "{:.2%}",
        "mean batch": "{:.0f}",
        "preemptions": "{:,}",
        "tokens re-prefilled": "{:,}",
        "re-prefilled / all prompt tokens": "{:.2%}",
        "re-prefill s (TP4 replica)": "{:.2f}",
    },
    "throughput": {
        "held/logical": "{:.2f}x",
        "KV read per step (GiB)": "{:.1f}",
        "step floor (ms)": "{:.1f}",
        "batch vs baseline": "{:.1f}x",
        "tokens/s vs baseline": "{:.1f}x",
        "tokens/s vs baseline, half-way": "{:.1f}x",
    },
    "fp8": {"prefix tokens": "{:,}", "16-bit KV (GB/s)": "{:.2f}", "FP8 KV (GB/s)": "{:.2f}"},
    "disaggregation": {
        "prompt": "{:,}",
        "prefill = token 1 (s)": "{:.2f}",
        **{f"transfer over {k} (s)": "{:.2f}" for k in LINKS_GBPS},
        f"token 2 by, at most ({_FIRST_LINK}, s)": "{:.2f}",
        f"token 2 by / {SECOND_TOKEN_BUDGET_S:g} s budget": "{:.2f}x",
    },
    "rules": {f"{r:,}: {k}": f for r in (2048, 8192) for k, f in (("wasted", "{:.1%}"), ("held/logical", "{:.2f}x"))},
}


def _reqs(requests) -> np.ndarray:
    return request_mix() if requests is None else np.asarray(requests)


# --------------------------------------------------------------------------- 1-5. the replica, slots, pages


def replica_rows(memory: dict | None = None) -> list[dict]:
    """Where the replica's GPU memory goes (a :func:`~pigviz.memory.budget.replica_memory` dict), in GiB."""
    m = replica_memory() if memory is None else memory
    rows = [
        (f"{m['gpus']} GPUs x {m['gpu_bytes'] / GIB:.0f} GiB", m["total_bytes"]),
        (
            f"{m['model']} weights ({m['params'] / 1e9:.2f} B params x {m['weight_bytes_per_param']} B)",
            m["weight_bytes"],
        ),
        ("left after the weights", m["after_weights_bytes"]),
        ("KV budget (an assumption)", m["kv_budget_bytes"]),
        ("left for activations and the runtime", m["rest_bytes"]),
    ]
    return [{"": label, "GiB": nbytes / GIB} for label, nbytes in rows]


def context_share_rows(contexts=(1_024, 4_096, 32_768, 131_072), kv_budget_bytes: int = KV_BUDGET_BYTES) -> list[dict]:
    """One sequence's KV at each context, and its share of the replica's KV budget."""
    budget = check_int("kv_budget_bytes", kv_budget_bytes, 1)
    per = replica_bytes_per_token()
    share = f"share of {budget / GIB:g} GiB"
    return [
        {"context": check_int("context", n, 1), "KV per sequence": format_bytes(n * per), share: n * per / budget}
        for n in contexts
    ]


def mix_rows(requests=None) -> list[dict]:
    """Percentiles of the prompt, output and total lengths of a request mix."""
    reqs = _reqs(requests)
    cols = {"prompt": reqs[:, 0], "output": reqs[:, 1], "total": reqs.sum(axis=1)}
    return [{"tokens": label, **{name: int(np.percentile(col, q)) for name, q in _PCTS}} for label, col in cols.items()]


def contiguous_rows(requests=None, reserves=(2048, 4096, 8192, 32768)) -> list[dict]:
    """Contiguous slots of each size: prompts turned away, sequences admitted and cut off, the waste."""
    rows = []
    for reserve in reserves:
        a = contiguous_allocation(_reqs(requests), reserve)
        rows.append(
            {
                "slot tokens": reserve,
                "rejected": a.rejected,
                "admitted": a.batch,
                "cut off": a.overflow,
                "reserved GiB": a.held_bytes / GIB,
                "used GiB": a.logical_bytes / GIB,
                "wasted": a.waste_fraction,
            }
        )
    return rows


def paged_rows(requests=None, page_sizes=(1, 8, 16, 32, 128), baseline_reserve: int = 8192) -> list[dict]:
    """Pages of each size: batch, held memory, waste, and the batch against contiguous slots."""
    reqs = _reqs(requests)
    base = contiguous_allocation(reqs, baseline_reserve).batch
    rows = []
    for pt in page_sizes:
        a = paged_allocation(reqs, pt)
        rows.append(
            {
                "page tokens": pt,
                "batch": a.batch,
                "held GiB": a.held_bytes / GIB,
                "waste": a.waste_fraction,
                "waste tokens / sequence": (a.held_bytes - a.logical_bytes) / replica_bytes_per_token() / a.batch,
                f"vs {baseline_reserve:,}-token slots": a.batch / base,
            }
        )
    return rows


def sharing_rows(results: list[dict]) -> list[dict]:
    """:func:`~pigviz.memory.allocators.prefix_sharing` results: memory with and without sharing."""
    return [
        {
            "shared prefix": r["prefix_tokens"],
            "own copies GiB": r["naive_bytes"] / GIB,
            "shared pages GiB": r["shared_bytes"] / GIB,
            "saved": r["saved_fraction"],
            "formula": r["formula_saved_fraction"],
            "copies on write": r["cow_copies"],
        }
        for r in results
    ]


def prepended_prompt(requests=None, prefix: int = 2_048, page_tokens: int = 16) -> dict:
    """Batches when a ``prefix``-token system prompt goes in front of every request's own prompt:
    unshared, shared (the page formula, and the refcounting allocator), and with no system prompt."""
    prefix = check_int("prefix", prefix, 0, 10**7)
    reqs = _reqs(requests)
    longer = reqs.copy()
    longer[:, 0] += prefix
    return {
        "prefix": prefix,
        "unshared": paged_allocation(longer, page_tokens).batch,
        "shared": paged_allocation(longer, page_tokens, shared_prefix=prefix).batch,
        "allocator": paged_admission_with_allocator(longer, page_tokens, shared_prefix=prefix).batch,
        "no_prompt": paged_allocation(reqs, page_tokens).batch,
    }


# --------------------------------------------------------------------------- 6. fetch or recompute


def break_even_tp_rows(bytes_per_token: int, n_params: float = N_PARAMS_70B) -> list[dict]:
    """The 2N-only break-even per TP degree (weights only, 100% of the dense peak)."""
    return [
        {
            "TP": f"TP{r['tp']}",
            "prefill per token (us)": r["prefill_us_per_token"],
            "break-even GB/s": r["break_even_GBps"],
        }
        for r in break_even_table(bytes_per_token, n_params)
    ]


def tier_rows(bytes_per_token: int, n_params: float = N_PARAMS_70B, tp: int = 4) -> list[dict]:
    """Each storage tier against the 2N-only break-even at ``tp``, with what its figure stands for."""
    be = break_even_bandwidth(bytes_per_token, n_params, tp=tp) / 1e9
    return [
        {
            "tier": v["tier"],
            "GB/s": v["GBps"],
            "the figure (assumed)": TIER_FIGURES.get(v["tier"], "-"),
            f"vs TP{tp} break-even": v["vs_break_even"],
            "verdict": "fetch" if v["fetch_wins"] else "recompute",
        }
        for v in tier_verdicts(be)
    ]


def break_even_context_rows(rows: list[dict], tiers: dict) -> list[dict]:
    """A :func:`~pigviz.memory.budget.break_even_over_context` table with each tier's verdict
    against its first TP column."""
    if not rows:
        raise ValueError("rows must hold at least one break_even_over_context() row")
    tps = [k for k in rows[0] if k.startswith("TP")]
    out = []
    for r in rows:
        row = {"prefix tokens": r["context"], "attention share of FLOPs": r["attention_share"]}
        row.update({f"break-even {tp} GB/s": r[tp] for tp in tps})
        row.update({f"{name} ({bw:g} GB/s)": "fetch" if bw > r[tps[0]] else "recompute" for name, bw in tiers.items()})
        out.append(row)
    return out


def crossovers(model=MODEL, n_params: float = N_PARAMS_70B, flops_per_gpu: float = H100_DENSE_BF16_FLOPS) -> dict:
    """The shortest prefix from which local NVMe (TP4, TP8) and object storage (1 GB/s, TP4) beat
    recomputing, attention included, beside the model's context."""
    return {
        "nvme_tp4": crossover_prefix(model, NVME_GBPS * 1e9, n_params, tp=4, flops_per_gpu=flops_per_gpu),
        "nvme_tp8": crossover_prefix(model, NVME_GBPS * 1e9, n_params, tp=8, flops_per_gpu=flops_per_gpu),
        "object_tp4": crossover_prefix(model, 1e9, n_params, tp=4, flops_per_gpu=flops_per_gpu),
        "max_context": get_model_shape(model).max_context,
    }


def utilisation_rows(model=MODEL, utilisations=UTILISATIONS, n_params: float = N_PARAMS_70B, tp: int = 4) -> list[dict]:
    """Per share of the dense peak a prefill reaches (its MFU, in (0, 1]): the TP4 break-even at a
    128-token and a 131,072-token prefix, and from where local NVMe beats recomputing."""
    context = get_model_shape(model).max_context
    rows = []
    for mfu in utilisations:
        flops = H100_DENSE_BF16_FLOPS * check_float("mfu", mfu, 0, 1, lo_open=True)
        n = crossover_prefix(model, NVME_GBPS * 1e9, n_params, tp=tp, flops_per_gpu=flops)
        wins = "every length" if n == 1 else f"from {n:,} tokens" if n <= context else f"only beyond {n:,} tokens"
        rows.append(
            {
                "MFU (share of the dense peak)": mfu,
                f"TP{tp} break-even, 128 tokens (GB/s)": break_even_at(model, 128, n_params, flops_per_gpu=flops, tp=tp)
                / 1e9,
                f"TP{tp} break-even, 131,072 tokens (GB/s)": break_even_at(
                    model, 131_072, n_params, flops_per_gpu=flops, tp=tp
                )
                / 1e9,
                f"{_NVME} wins": wins,
            }
        )
    return rows


def nvme_utilisation_threshold(model=MODEL, n_params: float = N_PARAMS_70B, tp: int = 4) -> float:
    """The share of the dense peak below which local NVMe beats recomputing at every prefix
    length: where its bandwidth equals the break-even of a 1-token prefix."""
    return NVME_GBPS * 1e9 / break_even_at(model, 1, n_params, tp=tp)


# --------------------------------------------------------------------------- 7-8. preemption, throughput


def first_prefill_seconds(requests=None, tp: int = 4) -> float:
    """Wall seconds of the ``tp``-GPU replica (100% of the dense peak, attention included) to
    prefill every prompt of the mix once: what section 7's re-prefills compare with."""
    return sum(recompute_seconds(MODEL, int(p), N_PARAMS_70B, tp=tp) for p in _reqs(requests)[:, 0])


def preemption_rows(sweep: list[dict]) -> list[dict]:
    """A :func:`~pigviz.memory.allocators.preemption_sweep` with the notebook's column names (mean
    occupancy and mean batch average over the steps while requests still wait)."""
    return [
        {
            "target": s["target_occupancy"],
            "mean occupancy": s["mean_occupancy"],
            "peak": s["peak_occupancy"],
            "mean batch": s["mean_batch"],
            "preemptions": s["preemptions"],
            "tokens re-prefilled": s["reprefill_tokens"],
            "re-prefilled / all prompt tokens": s["reprefill_share"],
            "re-prefill s (TP4 replica)": s["reprefill_s"],
        }
        for s in sweep
    ]


def throughput_rows(loads: list[dict]) -> list[dict]:
    """:func:`~pigviz.memory.allocators.decode_loads` rows once each load carries its roofline
    floor (``step_s``, ``bound``, ``tokens_per_s``; :func:`~pigviz.memory.budget.decode_step_time`
    gives the same), each against the first row, the baseline."""
    for r in loads:
        missing = [k for k in ("step_s", "bound", "tokens_per_s") for w in ("final", "half") if k not in r[w]]
        if missing:
            raise ValueError(f"each load needs step_s, bound and tokens_per_s (missing {sorted(set(missing))})")
    base = loads[0]
    return [
        {
            "allocator": r["allocator"],
            "batch": r["batch"],
            "held/logical": r["allocation"].held_over_logical,
            "cut off": r["allocation"].overflow,
            "rejected": r["allocation"].rejected,
            "KV read per step (GiB)": r["final"]["kv_read_bytes"] / GIB,
            "step floor (ms)": 1e3 * r["final"]["step_s"],
            "bound": r["final"]["bound"],
            "bound, half-way": r["half"]["bound"],
            "batch vs baseline": r["batch"] / base["batch"],
            "tokens/s vs baseline": r["final"]["tokens_per_s"] / base["final"]["tokens_per_s"],
            "tokens/s vs baseline, half-way": r["half"]["tokens_per_s"] / base["half"]["tokens_per_s"],
        }
        for r in loads
    ]


# --------------------------------------------------------------------------- 9. extensions, and the rules


def fp8_rows(model=MODEL, contexts=CONTEXTS, tp: int = 4) -> list[dict]:
    """The break-even at ``tp`` with 16-bit and with FP8 KV, and local NVMe's verdict with FP8."""
    out = []
    for n in contexts:
        b16, b8 = (break_even_at(model, n, N_PARAMS_70B, dtype_bytes=d, tp=tp) / 1e9 for d in (2, 1))
        out.append(
            {
                "prefix tokens": n,
                "16-bit KV (GB/s)": b16,
                "FP8 KV (GB/s)": b8,
                f"{_NVME}, FP8": "fetch" if NVME_GBPS > b8 else "recompute",
            }
        )
    return out


def disaggregation_rows(model=MODEL, prompts=(4_096, 32_768, 131_072), dtype_bytes: int = 2, tp: int = 4) -> list[dict]:
    """Per prompt: its KV, its prefill at ``tp`` (which samples token 1), its transfer over each
    example link (which delays token 2), and when token 2 can come at most over the first link
    (prefill plus transfer, no overlap), in seconds from the request's arrival and against
    :data:`SECOND_TOKEN_BUDGET_S`."""
    rows = []
    for n in prompts:
        prefill = recompute_seconds(model, n, N_PARAMS_70B, tp=tp)
        row = {"prompt": n, "KV to move": format_bytes(n * get_model_shape(model).kv_bytes_per_token(dtype_bytes))}
        row["prefill = token 1 (s)"] = prefill
        for name, gbps in LINKS_GBPS.items():
            row[f"transfer over {name} (s)"] = disaggregated_transfer(model, n, gbps * 1e9, dtype_bytes)["transfer_s"]
        by = prefill + row[f"transfer over {_FIRST_LINK} (s)"]
        row[f"token 2 by, at most ({_FIRST_LINK}, s)"] = by
        row[f"token 2 by / {SECOND_TOKEN_BUDGET_S:g} s budget"] = by / SECOND_TOKEN_BUDGET_S
        rows.append(row)
    return rows


def rules_rows(requests=None, reserves=(2048, 8192)) -> list[dict]:
    """Waste and held/logical of each contiguous reservation under each accounting rule
    (:data:`~pigviz.memory.allocators.CONTIGUOUS_RULES`)."""
    by_reserve = {r: contiguous_rules(_reqs(requests), r) for r in reserves}
    out = []
    for i, (name, admits, counts, _, _) in enumerate(CONTIGUOUS_RULES):
        row = {"rule": name or "-", "a slot goes to": admits, "a sequence counts": counts}
        for r in reserves:
            row[f"{r:,}: wasted"] = by_reserve[r][i].waste_fraction
            row[f"{r:,}: held/logical"] = by_reserve[r][i].held_over_logical
        out.append(row)
    return out
