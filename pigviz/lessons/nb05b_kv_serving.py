"""Notebook 05b, serving with a KV budget: allocators, prefix sharing, fetch vs recompute,
preemption and the assembly, each number re-derived; and the tables and paragraphs the notebook
shows, so that its cells carry the idea and this module the formatting."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.tables import Table, table
from pigviz.lessons.verify import Claim, near
from pigviz.memory.allocators import (
    CONTIGUOUS_RULES,
    KV_BUDGET_BYTES,
    assembly_table,
    contiguous_allocation,
    contiguous_rules,
    decode_loads,
    largest_sharing_gap,
    paged_admission_with_allocator,
    paged_allocation,
    preemption_sweep,
    prefix_coverage,
    prefix_sharing,
    replica_bytes_per_token,
    request_mix,
)
from pigviz.memory.budget import (
    GIB,
    H100_DENSE_BF16_FLOPS,
    KIB,
    REPLICA_KV_BUDGET_GIB,
    STORAGE_TIERS_GBPS,
    attention_flops,
    break_even_at,
    break_even_bandwidth,
    break_even_table,
    crossover_prefix,
    decode_step_time,
    disaggregated_transfer,
    fetch_or_recompute,
    format_bytes,
    recompute_seconds,
    replica_memory,
    tier_verdict_changes,
    tier_verdicts,
)
from pigviz.memory.model_shapes import get_model_shape

__all__ = [
    "claims",
    "PROSE_DEFINED",
    "N_PARAMS_70B",
    "CONTEXTS",
    "LINKS_GBPS",
    "SECOND_TOKEN_BUDGET_S",
    "PAGE_SIZES",
    "ASSUMED_PREEMPTION_ONSET",
    "TIER_FIGURES",
    "PCIE5_NVME_GBPS",
    "H100_PCIE_DENSE_BF16_FLOPS",
    "H100_PCIE_HBM_BYTES_PER_S",
    "prepended_prompt",
    "UTILISATIONS",
    "NVME_GBPS",
    "first_prefill_seconds",
    "replica_table",
    "context_share_table",
    "mix_table",
    "contiguous_table",
    "paged_table",
    "sharing_table",
    "break_even_tp_table",
    "tier_table",
    "break_even_context_table",
    "crossovers",
    "utilisation_rows",
    "utilisation_table",
    "nvme_utilisation_threshold",
    "preemption_table",
    "throughput_table",
    "fp8_table",
    "disaggregation_rows",
    "disaggregation_table",
    "rules_table",
]

MODEL = "Llama-3.1-70B"
# Numbers the prose writes that are definitions, parameters, citations or the data's fixed facts.
PROSE_DEFINED = {
    "80": "the Llama-70B shape's layers (config.json)",
    "128": "its head_dim (config.json); the shortest prefix of the break-even tables",
    "64": "its query heads (config.json); the 64 requests of the sharing demo",
    "172.5": "the replica's KV budget, an assumption (budget.REPLICA_KV_BUDGET_GIB)",
    "4,000": "the requests of the seeded mix",
    "2023": "Kwon et al., SOSP 2023 (a citation)",
    "2024": "Juravsky et al., 2024 (a citation)",
    "100%": "every rate at its peak: the assumption of the floors",
    "5.0": "PCIe 5.0, a standard's name",
    "128k": "131,072 tokens, the model's context and the longest prefix of the tables",
    "131,072": "the model's context and the longest prefix of the tables",
    "2k": "the 2,048-token slot or prefix, a parameter",
    "8k": "the 8,192-token slot, a parameter",
    "4k": "the 4,096-token shared prefix, a parameter",
    "2,048": "the shared prefix and the slot, parameters",
    "4,096": "question 2's largest page, a parameter",
    "97%": "an admission target of the sweep, a parameter",
    "99.5%": "an admission target of the sweep, a parameter",
    "85%": "the assumed onset one might pick (ASSUMED_PREEMPTION_ONSET); also the 8k waste, a claim",
    "200": "200 GbE, a link's name",
    "5%": "question 2's threshold, a parameter",
}
N_PARAMS_70B = 70e9  # the round parameter count of the fetch-or-recompute arithmetic
CONTEXTS = (128, 4_096, 32_768, 131_072)  # prefix lengths the break-even table walks through
NVME_GBPS = STORAGE_TIERS_GBPS["local NVMe"]
# Example numbers for disaggregated prefill, not measurements: a 200 GbE link (the RDMA tier of the
# storage table) and a 400 Gb/s one, against a 2-second budget for token 2 (the first token the
# decode side produces: the prefill itself samples token 1).
LINKS_GBPS = {"200 GbE": 25.0, "400 Gb/s": 50.0}
SECOND_TOKEN_BUDGET_S = 2.0
PAGE_SIZES = (16, 32, 64, 128, 256, 512, 1_024, 2_048, 4_096)  # question 2's page sizes
# A threshold one might assume: preemption as a probability that starts at this occupancy.
# Section 7 measures the edge instead.
ASSUMED_PREEMPTION_ONSET = 0.85
# What each storage tier's bandwidth (budget.STORAGE_TIERS_GBPS) stands for: assumed nominal
# peaks, not measurements.
TIER_FIGURES = {
    "GPU HBM (H100)": "an H100 SXM's HBM3 peak",
    "host DRAM over PCIe 5": "PCIe 5.0 x16, raw rate, one direction",
    "RDMA / 200 GbE": "200 GbE line rate",
    "local NVMe": "one PCIe 4.0 drive",
    "object storage": "a round figure for one stream",
}
PCIE5_NVME_GBPS = 14.0  # what a PCIe 5.0 NVMe drive reads, nominally: the drive NVMe's verdict hangs on
# The PCIe H100's datasheet figures, beside the SXM ones the notebook computes with.
H100_PCIE_DENSE_BF16_FLOPS = 756e12
H100_PCIE_HBM_BYTES_PER_S = 2.0e12
# Shares of the dense peak a prefill might reach (model FLOPs utilisation), for section 6.
UTILISATIONS = (1.0, 0.9, 0.75, 0.6, 0.5, 0.4)


def first_prefill_seconds(requests=None, tp: int = 4) -> float:
    """Seconds of the ``tp``-GPU replica (wall time, at 100% of the dense peak, attention
    included) to prefill every prompt of the mix once: what the re-prefills of section 7 compare
    with. GPU-seconds are ``tp`` times this."""
    reqs = request_mix() if requests is None else requests
    return sum(recompute_seconds(MODEL, int(p), N_PARAMS_70B, tp=tp) for p in reqs[:, 0])


# --------------------------------------------------------------------------- 1. the replica


def replica_table(memory: dict | None = None) -> Table:
    """Where the replica's GPU memory goes, in GiB."""
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
    return table(
        [{"": label, "GiB": nbytes / GIB} for label, nbytes in rows],
        formats={"GiB": "{:.1f}"},
        caption="The replica's memory",
    )


def context_share_table(contexts=(1_024, 4_096, 32_768, 131_072), kv_budget_bytes: int = KV_BUDGET_BYTES) -> Table:
    """One sequence's KV at each context, and its share of the replica's KV budget."""
    per = replica_bytes_per_token()
    rows = [
        {
            "context": n,
            "KV per sequence": format_bytes(n * per),
            f"share of {kv_budget_bytes / GIB:g} GiB": n * per / kv_budget_bytes,
        }
        for n in contexts
    ]
    return table(rows, formats={"context": "{:,}", f"share of {kv_budget_bytes / GIB:g} GiB": "{:.1%}"})


# --------------------------------------------------------------------------- 2-5. mix, slots, pages, sharing


def mix_table(requests) -> Table:
    """Percentiles of the prompt, output and total lengths of a request mix."""
    reqs = np.asarray(requests)
    cols = {"prompt": reqs[:, 0], "output": reqs[:, 1], "total": reqs.sum(axis=1)}
    rows = [{"tokens": label, **{name: int(np.percentile(col, q)) for name, q in _PCTS}} for label, col in cols.items()]
    return table(rows, formats={name: "{:,}" for name, _ in _PCTS})


_PCTS = (("median", 50), ("90th pct", 90), ("99th pct", 99), ("max", 100))


def contiguous_table(requests, reserves=(2048, 4096, 8192, 32768)) -> Table:
    """Contiguous slots of each size: who is turned away, admitted, cut off, and the waste."""
    rows = []
    for reserve in reserves:
        a = contiguous_allocation(requests, reserve)
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
    return table(
        rows,
        formats={"slot tokens": "{:,}", "reserved GiB": "{:.1f}", "used GiB": "{:.1f}", "wasted": "{:.1%}"},
        highlight={"wasted": "min"},
    )


def paged_table(requests, page_sizes=(1, 8, 16, 32, 128), baseline_reserve: int = 8192) -> Table:
    """Pages of each size: batch, held memory, waste, and the batch against contiguous slots."""
    base = contiguous_allocation(requests, baseline_reserve).batch
    rows = []
    for pt in page_sizes:
        a = paged_allocation(requests, pt)
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
    return table(
        rows,
        formats={
            "held GiB": "{:.1f}",
            "waste": "{:.2%}",
            "waste tokens / sequence": "{:.1f}",
            f"vs {baseline_reserve:,}-token slots": "{:.2f}x",
        },
    )


def sharing_table(results: list[dict]) -> Table:
    """:func:`~pigviz.memory.allocators.prefix_sharing` results: memory with and without sharing."""
    rows = [
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
    return table(
        rows,
        formats={
            "shared prefix": "{:,}",
            "own copies GiB": "{:.2f}",
            "shared pages GiB": "{:.2f}",
            "saved": "{:.1%}",
            "formula": "{:.1%}",
        },
    )


# --------------------------------------------------------------------------- 6. fetch or recompute


def break_even_tp_table(bytes_per_token: int, n_params: float = N_PARAMS_70B) -> Table:
    """The 2N-only break-even per TP degree (weights only, 100% of the dense peak)."""
    rows = [
        {
            "TP": f"TP{r['tp']}",
            "prefill per token (us)": r["prefill_us_per_token"],
            "break-even GB/s": r["break_even_GBps"],
        }
        for r in break_even_table(bytes_per_token, n_params)
    ]
    return table(rows, formats={"prefill per token (us)": "{:.1f}", "break-even GB/s": "{:.2f}"})


def tier_table(bytes_per_token: int, n_params: float = N_PARAMS_70B, tp: int = 4) -> Table:
    """Each storage tier against the 2N-only break-even at ``tp``."""
    be = break_even_bandwidth(bytes_per_token, n_params, tp=tp) / 1e9
    rows = [
        {
            "tier": v["tier"],
            "GB/s": v["GBps"],
            "the figure (assumed)": TIER_FIGURES.get(v["tier"], "-"),
            f"vs TP{tp} break-even": v["vs_break_even"],
            "verdict": "fetch" if v["fetch_wins"] else "recompute",
        }
        for v in tier_verdicts(be)
    ]
    return table(rows, formats={"GB/s": "{:g}", f"vs TP{tp} break-even": "{:.2f}x"})


def prepended_prompt(requests=None, prefix: int = 2_048, page_tokens: int = 16) -> dict:
    """Batches when a ``prefix``-token system prompt is put in front of every request's own prompt:
    without sharing, shared, and with no system prompt at all (the paged formula of section 4)."""
    reqs = request_mix() if requests is None else np.asarray(requests)
    longer = reqs.copy()
    longer[:, 0] += prefix
    return {
        "prefix": prefix,
        "unshared": paged_allocation(longer, page_tokens).batch,
        "shared": paged_allocation(longer, page_tokens, shared_prefix=prefix).batch,
        "allocator": paged_admission_with_allocator(longer, page_tokens, shared_prefix=prefix).batch,
        "no_prompt": paged_allocation(reqs, page_tokens).batch,
    }


def break_even_context_table(rows: list[dict], tiers: dict) -> Table:
    """A :func:`~pigviz.memory.budget.break_even_over_context` table with each tier's verdict
    (against the first TP column)."""
    tps = [k for k in rows[0] if k.startswith("TP")]
    out = []
    for r in rows:
        row = {"prefix tokens": r["context"], "attention share of FLOPs": r["attention_share"]}
        row.update({f"break-even {tp} GB/s": r[tp] for tp in tps})
        row.update({f"{name} ({bw:g} GB/s)": "fetch" if bw > r[tps[0]] else "recompute" for name, bw in tiers.items()})
        out.append(row)
    formats = {"prefix tokens": "{:,}", "attention share of FLOPs": "{:.1%}"}
    formats.update({f"break-even {tp} GB/s": "{:.2f}" for tp in tps})
    return table(out, formats=formats)


def crossovers(model=MODEL, n_params: float = N_PARAMS_70B, flops_per_gpu: float = H100_DENSE_BF16_FLOPS) -> dict:
    """The shortest prefix from which each fetch path beats recomputing (attention included)."""
    return {
        "nvme_tp4": crossover_prefix(model, NVME_GBPS * 1e9, n_params, tp=4, flops_per_gpu=flops_per_gpu),
        "nvme_tp8": crossover_prefix(model, NVME_GBPS * 1e9, n_params, tp=8, flops_per_gpu=flops_per_gpu),
        "object_tp4": crossover_prefix(model, 1e9, n_params, tp=4, flops_per_gpu=flops_per_gpu),
        "max_context": get_model_shape(model).max_context,
    }


def utilisation_rows(model=MODEL, utilisations=UTILISATIONS, n_params: float = N_PARAMS_70B, tp: int = 4) -> list[dict]:
    """Per share of the dense peak a prefill reaches: the break-even at a short and a long
    prefix, and where local NVMe starts to beat recomputing."""
    rows = []
    for mfu in utilisations:
        flops = H100_DENSE_BF16_FLOPS * mfu
        nvme = crossover_prefix(model, NVME_GBPS * 1e9, n_params, tp=tp, flops_per_gpu=flops)
        rows.append(
            {
                "MFU": mfu,
                "break-even at 128 tokens": break_even_at(model, 128, n_params, flops_per_gpu=flops, tp=tp) / 1e9,
                "break-even at 131,072": break_even_at(model, 131_072, n_params, flops_per_gpu=flops, tp=tp) / 1e9,
                "nvme_from": nvme,
            }
        )
    return rows


def utilisation_table(rows: list[dict]) -> Table:
    def verdict(n):
        if n == 1:
            return "every length"
        return f"from {n:,} tokens" if n <= get_model_shape(MODEL).max_context else f"only beyond {n:,} tokens"

    out = [
        {
            "MFU (share of the dense peak)": r["MFU"],
            "TP4 break-even, 128 tokens (GB/s)": r["break-even at 128 tokens"],
            "TP4 break-even, 131,072 tokens (GB/s)": r["break-even at 131,072"],
            f"local NVMe ({NVME_GBPS:g} GB/s) wins": verdict(r["nvme_from"]),
        }
        for r in rows
    ]
    return table(
        out,
        formats={
            "MFU (share of the dense peak)": "{:.0%}",
            "TP4 break-even, 128 tokens (GB/s)": "{:.2f}",
            "TP4 break-even, 131,072 tokens (GB/s)": "{:.2f}",
        },
    )


def nvme_utilisation_threshold(model=MODEL, n_params: float = N_PARAMS_70B, tp: int = 4) -> float:
    """The share of the dense peak below which local NVMe beats recomputing at every prefix
    length: where its bandwidth equals the break-even of a 1-token prefix."""
    return NVME_GBPS * 1e9 / break_even_at(model, 1, n_params, tp=tp)


# --------------------------------------------------------------------------- 7. preemption


def preemption_table(sweep: list[dict]) -> Table:
    rows = [
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
    return table(
        rows,
        formats={
            "target": "{:.1%}",
            "mean occupancy": "{:.1%}",
            "peak": "{:.2%}",
            "mean batch": "{:.0f}",
            "preemptions": "{:,}",
            "tokens re-prefilled": "{:,}",
            "re-prefilled / all prompt tokens": "{:.2%}",
            "re-prefill s (TP4 replica)": "{:.2f}",
        },
        highlight={"preemptions": "max"},
    )


# --------------------------------------------------------------------------- 8. one table


def throughput_table(loads: list[dict]) -> Table:
    """:func:`~pigviz.memory.allocators.decode_loads` rows once the notebook has put a step floor
    (``step_s``) and ``tokens_per_s`` on each load: against the first row, the baseline."""
    base = loads[0]
    out = [
        {
            "allocator": r["allocator"],
            "batch": r["batch"],
            "held/logical": r["allocation"].held_over_logical,
            "cut off": r["allocation"].overflow,
            "rejected": r["allocation"].rejected,
            "KV read per step (GiB)": r["final"]["kv_read_bytes"] / GIB,
            "step floor (ms)": 1e3 * r["final"]["step_s"],
            "bound": r["final"]["bound"],
            "batch vs baseline": r["batch"] / base["batch"],
            "tokens/s vs baseline": r["final"]["tokens_per_s"] / base["final"]["tokens_per_s"],
            "... half-way": r["half"]["tokens_per_s"] / base["half"]["tokens_per_s"],
        }
        for r in loads
    ]
    return table(
        out,
        formats={
            "held/logical": "{:.2f}x",
            "KV read per step (GiB)": "{:.1f}",
            "step floor (ms)": "{:.1f}",
            "batch vs baseline": "{:.1f}x",
            "tokens/s vs baseline": "{:.1f}x",
            "... half-way": "{:.1f}x",
        },
    )


# --------------------------------------------------------------------------- 9. extensions


def fp8_table(model=MODEL, contexts=CONTEXTS) -> Table:
    """The TP4 break-even with 16-bit and with FP8 KV, and local NVMe's verdict with FP8."""
    out = []
    for n in contexts:
        b16 = break_even_at(model, n, N_PARAMS_70B, dtype_bytes=2, tp=4) / 1e9
        b8 = break_even_at(model, n, N_PARAMS_70B, dtype_bytes=1, tp=4) / 1e9
        out.append(
            {
                "prefix tokens": n,
                "16-bit KV (GB/s)": b16,
                "FP8 KV (GB/s)": b8,
                f"local NVMe ({NVME_GBPS:g} GB/s), FP8": "fetch" if NVME_GBPS > b8 else "recompute",
            }
        )
    return table(out, formats={"prefix tokens": "{:,}", "16-bit KV (GB/s)": "{:.2f}", "FP8 KV (GB/s)": "{:.2f}"})


def disaggregation_rows(model=MODEL, prompts=(4_096, 32_768, 131_072), dtype_bytes: int = 2, tp: int = 4) -> list[dict]:
    """Per prompt: its KV, its prefill time at ``tp`` (which samples token 1), and its transfer
    time over each example link (which delays token 2)."""
    rows = []
    for n in prompts:
        row = {"prompt_tokens": n, "prefill_s": recompute_seconds(model, n, N_PARAMS_70B, tp=tp)}
        for name, gbps in LINKS_GBPS.items():
            t = disaggregated_transfer(model, n, gbps * 1e9, dtype_bytes)
            row["kv_bytes"], row[name] = t["kv_bytes"], t["transfer_s"]
        rows.append(row)
    return rows


def disaggregation_table(rows: list[dict]) -> Table:
    first = next(iter(LINKS_GBPS))
    out = []
    for r in rows:
        row = {
            "prompt": r["prompt_tokens"],
            "KV to move": format_bytes(r["kv_bytes"]),
            "prefill = token 1 (s)": r["prefill_s"],
        }
        row.update({f"transfer over {k} (s)": r[k] for k in LINKS_GBPS})
        row[f"transfer / {SECOND_TOKEN_BUDGET_S:g} s budget ({first})"] = r[first] / SECOND_TOKEN_BUDGET_S
        row[f"token 2 by, at most ({first}, s)"] = r["prefill_s"] + r[first]
        out.append(row)
    formats = {k: "{:.2f}" for k in out[0] if k.endswith("s)")}
    formats.update({"prompt": "{:,}", f"transfer / {SECOND_TOKEN_BUDGET_S:g} s budget ({first})": "{:.0%}"})
    return table(out, formats=formats)


# --------------------------------------------------------------------------- Going further: accounting rules


def rules_table(requests, reserves=(2048, 8192)) -> Table:
    """Waste and held/logical of each contiguous reservation under each accounting rule."""
    by_reserve = {r: contiguous_rules(requests, r) for r in reserves}
    out = []
    for i, (name, admits, counts, _, _) in enumerate(CONTIGUOUS_RULES):
        row = {"rule": name or "-", "a slot goes to": admits, "a sequence counts": counts}
        for r in reserves:
            row[f"{r:,}: wasted"] = by_reserve[r][i].waste_fraction
            row[f"{r:,}: held/logical"] = by_reserve[r][i].held_over_logical
        out.append(row)
    formats = {}
    for r in reserves:
        formats[f"{r:,}: wasted"] = "{:.1%}"
        formats[f"{r:,}: held/logical"] = "{:.2f}x"
    return table(out, formats=formats)


# --------------------------------------------------------------------------- claims


def claims() -> list[Claim]:
    """In the notebook's order: the replica, allocators and sharing, fetch vs recompute,
    utilisation, preemption, the assembly and its throughput, the two extensions, and the
    accounting rules of the appendix."""
    out = []

    def claim(text, passed, value, quotes=()):
        out.append(Claim(notebook="05b", text=text, passed=bool(passed), value=value, quotes=tuple(quotes)))

    # 1. the replica
    big = get_model_shape(MODEL)
    per70 = big.kv_bytes_per_token(2)
    claim("a Llama-70B shape (80 x 8 x 128, fp16) caches 320 KiB per token", per70 == 327_680, f"{per70:,} B")
    no_gqa = big.with_kv_heads(big.attention_heads).kv_bytes_per_token(2)
    claim("without GQA (64 KV heads) it would cache 8x more", no_gqa == 8 * per70, f"{no_gqa / KIB:,.0f} KiB/token")
    mem = replica_memory()
    claim(
        "four 80 GiB GPUs keep ~188.6 GiB after the 70B bf16 weights (~131.4 GiB)",
        mem["total_bytes"] == 320 * GIB
        and round(mem["weight_bytes"] / GIB, 1) == 131.4
        and round(mem["after_weights_bytes"] / GIB, 1) == 188.6,
        f"{mem['after_weights_bytes'] / GIB:.1f} GiB",
    )
    claim(
        "an assumed 172.5 GiB KV budget leaves ~16.1 GiB for activations and the runtime",
        mem["kv_budget_bytes"] == int(REPLICA_KV_BUDGET_GIB * GIB) and round(mem["rest_bytes"] / GIB, 1) == 16.1,
        f"{mem['rest_bytes'] / GIB:.1f} GiB",
    )
    share = 131_072 * per70 / mem["kv_budget_bytes"]
    claim(
        "one 128k-token request fills about 23% of a 172.5 GiB KV budget",
        near(share, 0.23, 0.02),
        f"{share:.1%}",
        (f"{share:.0%}",),
    )

    # 2-5. the request mix, contiguous slots, pages, sharing
    reqs = request_mix()
    med_p, med_o = np.median(reqs[:, 0]), np.median(reqs[:, 1])
    claim(
        "the request mix has median prompt ~600 and median output ~250 tokens",
        abs(med_p - 600) < 60 and abs(med_o - 250) < 25,
        f"{med_p:.0f} / {med_o:.0f}",
    )
    totals = reqs.sum(axis=1)
    claim(
        "the median request totals 976 tokens and the longest 17,301, nearly 18 times the median",
        int(np.median(totals)) == 976 and int(totals.max()) == 17_301 and round(totals.max() / np.median(totals)) == 18,
        f"{int(np.median(totals))} / {int(totals.max()):,}",
        quotes=(f"{round(totals.max() / np.median(totals))} times",),
    )
    c8, c2 = contiguous_allocation(reqs, 8192), contiguous_allocation(reqs, 2048)
    claim(
        "reserving 8k tokens per sequence wastes ~85% of the KV budget",
        near(c8.waste_fraction, 0.851, 0.005),
        f"{c8.waste_fraction:.1%} wasted, batch {c8.batch}",
        quotes=(f"{c8.waste_fraction:.0%}",),
    )
    claim(
        "a 2k reservation turns away 32 prompts that do not fit and cuts off 16 of its 276 sequences",
        (c2.rejected, c2.overflow, c2.batch) == (32, 16, 276),
        f"{c2.rejected} rejected, {c2.overflow} of {c2.batch} cut off",
    )
    claim(
        "rejecting those prompts and counting a cut-off sequence up to its slot, the 2k reservation wastes ~51%",
        near(c2.waste_fraction, 0.507, 0.005),
        f"{c2.waste_fraction:.1%}",
        quotes=(f"{c2.waste_fraction:.0%}",),
    )
    p16, p1 = paged_allocation(reqs, 16), paged_allocation(reqs, 1)
    claim(
        "16-token pages keep internal waste under 1%",
        0 <= p16.waste_fraction < 0.01,
        f"{p16.waste_fraction:.2%}",
        (f"{p16.waste_fraction:.1%}",),
    )
    per_seq = (p16.held_bytes - p16.logical_bytes) / replica_bytes_per_token() / p16.batch
    claim(
        "the waste averages about half a page (8 tokens) per sequence",
        4 <= per_seq <= 12,
        f"{per_seq:.1f} tokens/sequence",
    )
    claim(
        "paging multiplies the batch about 6x over the 8k reservation",
        5 <= p16.batch / c8.batch <= 7,
        f"{c8.batch} -> {p16.batch} = {p16.batch / c8.batch:.1f}x",
    )
    claim(
        "pages smaller than 16 tokens add under 2% more batch: 1-token pages add 3 sequences",
        0 <= (p1.batch - p16.batch) / p16.batch < 0.02 and p1.batch - p16.batch == 3,
        f"{p16.batch} -> {p1.batch} at 1-token pages",
    )
    sharing = prefix_sharing(4096)
    claim(
        "a 4k system prompt shared by 64 requests saves about 89% of their KV",
        abs(sharing["saved_fraction"] - 0.89) < 0.03 and abs(sharing["formula_saved_fraction"] - 0.89) < 0.03,
        f"{sharing['saved_fraction']:.1%} (formula {sharing['formula_saved_fraction']:.1%})",
        quotes=(f"{sharing['saved_fraction']:.0%}",),
    )
    claim(
        "freeing every request returns every shared page: refcounts reach zero",
        sharing["pages_after_free"] == 0,
        f"{sharing['pages_after_free']} pages held after free",
    )
    real = paged_admission_with_allocator(reqs, 16)
    claim(
        "the refcounting allocator admits exactly the batch the page formula predicts",
        real.batch == p16.batch and real.held_bytes == p16.held_bytes,
        f"batch {real.batch}",
    )
    gap = largest_sharing_gap([prefix_sharing(p) for p in (256, 1_000, 1_024, 4_096, 16_384)])
    claim(
        "with copy-on-write and page rounding the allocator still lands within a point of the formula",
        0 <= gap["gap_points"] < 1.0,
        f"{gap['gap_points']:.1f} points at {gap['prefix_tokens']:,} tokens ({gap['cow_copies']} copies)",
    )

    # 6. fetch or recompute
    be = {row["tp"]: row["break_even_GBps"] for row in break_even_table(per70, N_PARAMS_70B)}
    claim(
        "counting only the 2N weight FLOPs, fetching beats recomputing above ~9.26 GB/s at TP4",
        near(be[4], 9.26, 0.005),
        f"{be[4]:.2f} GB/s",
    )
    at = {n: break_even_at(big, n, N_PARAMS_70B, tp=4) / 1e9 for n in CONTEXTS}
    claim(
        "with causal attention counted, the TP4 break-even falls to ~8.92, ~7.09 and ~4.16 GB/s "
        "at 4k, 32k and 128k tokens",
        all(near(at[n], t, 0.005) for n, t in ((4_096, 8.92), (32_768, 7.09), (131_072, 4.16))),
        ", ".join(f"{at[n]:.2f}" for n in CONTEXTS[1:]) + " GB/s",
    )
    claim(
        "at a 128-token prefix attention is under 0.2% of the prefill FLOPs: the 2N figure holds there",
        attention_flops(big, 128) / (2 * N_PARAMS_70B * 128 + attention_flops(big, 128)) < 0.002
        and near(at[128], be[4], 0.002),
        f"{at[128]:.2f} vs {be[4]:.2f} GB/s",
    )
    # an independent recount: add up query by query what the closed form sums in one line
    n = 4_096
    i = np.arange(1, n + 1, dtype=np.float64)
    by_query = big.layers * big.attention_heads * float(np.sum(2 * big.head_dim * i + 2 * big.head_dim * i))
    claim(
        "the closed-form attention count matches a query-by-query sum over a 4,096-token prefix",
        by_query == attention_flops(big, n),
        f"{by_query:.4e} FLOPs",
    )
    cross = crossovers()
    nvme = cross["nvme_tp4"]
    before = fetch_or_recompute(big, nvme - 1, 7e9, N_PARAMS_70B, tp=4)["fetch_wins"]
    after = fetch_or_recompute(big, nvme, 7e9, N_PARAMS_70B, tp=4)["fetch_wins"]
    claim(
        "at 100% of the dense peak, local NVMe (7 GB/s) loses to recomputing at TP4 up to ~34.5k tokens "
        "and wins from there",
        near(nvme, 34_545, 0.001) and not before and after,
        f"from {nvme:,} tokens",
    )
    top = break_even_at(big, 1, N_PARAMS_70B, tp=4) / 1e9
    claim(
        "the tier bandwidths are assumed nominal peaks: a PCIe 5.0 NVMe drive (~14 GB/s) is above the largest "
        "TP4 break-even (~9.26 GB/s), so with it fetching wins at every length",
        PCIE5_NVME_GBPS > top
        and near(top, 9.26, 0.001)
        and crossover_prefix(big, PCIE5_NVME_GBPS * 1e9, N_PARAMS_70B, tp=4) == 1,
        f"{top:.2f} GB/s",
    )
    flips = tier_verdict_changes(per70, N_PARAMS_70B, 4, 8)
    claim(
        "TP8 doubles the break-even; at short prefixes no storage tier changes its verdict",
        near(be[8], 2 * be[4], 1e-12) and not flips,
        f"{be[4]:.2f} -> {be[8]:.2f} GB/s; changed: {', '.join(flips) or 'none'}",
    )
    claim(
        "at TP8 local NVMe would need a prefix beyond the model's 131,072-token context to win",
        cross["nvme_tp8"] > big.max_context,
        f"from {cross['nvme_tp8']:,} tokens",
    )
    util = {r["MFU"]: r for r in utilisation_rows()}
    threshold = nvme_utilisation_threshold()
    claim(
        "every break-even scales with the utilisation: at 75% of the dense peak the TP4 break-even at a "
        "128-token prefix is ~6.94 GB/s and local NVMe wins at every length",
        near(util[0.75]["break-even at 128 tokens"], 0.75 * at[128], 1e-9)
        and near(util[0.75]["break-even at 128 tokens"], 6.94, 0.001)
        and util[0.75]["nvme_from"] == 1,
        f"{util[0.75]['break-even at 128 tokens']:.2f} GB/s; NVMe from {util[0.75]['nvme_from']:,} token",
    )
    claim(
        "below ~76% of the dense peak local NVMe beats recomputing at every prefix length",
        near(threshold, 0.756, 0.005)
        and crossover_prefix(big, 7e9, N_PARAMS_70B, tp=4, flops_per_gpu=0.99 * threshold * H100_DENSE_BF16_FLOPS) == 1
        and crossover_prefix(big, 7e9, N_PARAMS_70B, tp=4, flops_per_gpu=1.01 * threshold * H100_DENSE_BF16_FLOPS) > 1,
        f"{threshold:.1%}",
        quotes=(f"{threshold:.0%}",),
    )

    # 7. preemption
    sweep = {s["target_occupancy"]: s for s in preemption_sweep()}
    quiet = [t for t, s in sweep.items() if s["preemptions"] == 0]
    claim(
        "simulated with the page pool, admitting up to a 95% target never preempts "
        f"(a threshold one might assume puts the onset at {ASSUMED_PREEMPTION_ONSET:.0%})",
        max(quiet) == 0.95 and all(t in quiet for t in sweep if t <= 0.95) and max(quiet) > ASSUMED_PREEMPTION_ONSET,
        f"0 preemptions at {', '.join(f'{t:.0%}' for t in sorted(quiet))}",
    )
    overshoot = sweep[0.95]["peak_occupancy"] - 0.95
    claim(
        "running sequences keep growing after admission: at a 95% target the pool peaks ~3.4 points higher",
        near(overshoot, 0.034, 0.05),
        f"peak {sweep[0.95]['peak_occupancy']:.2%}",
        quotes=(f"{sweep[0.95]['peak_occupancy']:.1%}",),
    )
    few = [sweep[t]["preemptions"] for t in (0.97, 0.99, 0.995)]
    claim(
        "from 97% to 99.5% only a handful of sequences are preempted",
        0 < few[0] <= few[1] <= few[2] < 20,
        ", ".join(map(str, few)),
    )
    full = sweep[1.0]
    claim(
        "filling the pool to 100% preempts over 40x as often as a 99.5% target",
        full["preemptions"] > 40 * sweep[0.995]["preemptions"],
        f"{full['preemptions']:,} vs {sweep[0.995]['preemptions']}",
    )
    first_prefill = first_prefill_seconds(reqs)
    claim(
        "at 100% the re-prefills redo as many tokens as ~6.7% of all prompt tokens: ~9.4 s of the TP4 "
        "replica (~37 GPU-seconds), beside ~140 s for the first prefills",
        near(full["reprefill_share"], 0.067, 0.01)
        and near(full["reprefill_s"], 9.4, 0.01)
        and near(4 * full["reprefill_s"], 37.4, 0.01)
        and near(first_prefill, 140, 0.01),
        f"{full['reprefill_tokens']:,} tokens, {full['reprefill_s']:.2f} s of {first_prefill:.0f} s",
        quotes=(f"{full['reprefill_share']:.1%}", f"{full['reprefill_s']:.1f} s"),
    )
    gain = full["mean_batch"] / sweep[0.95]["mean_batch"] - 1
    claim(
        "...to run a batch only ~5% larger than at a 95% target",
        0 < gain < 0.06,
        f"{sweep[0.95]['mean_batch']:.0f} -> {full['mean_batch']:.0f} (+{gain:.1%})",
    )

    # 8. one table, and what its batches buy
    rows = assembly_table(reqs)
    ratios = [r.held_over_logical for r in rows]
    claim(
        "held/logical falls from ~6.72x (contiguous 8k) to ~1.01x (paged)",
        round(ratios[0], 2) == 6.72 and round(ratios[2], 2) == 1.01,
        f"{ratios[0]:.2f}x -> {ratios[2]:.2f}x",
    )
    claim(
        "with a shared 2k prefix one physical byte serves several sequences (held/logical < 1)",
        ratios[3] < 1.0,
        f"{ratios[3]:.2f}x",
    )
    claim(
        "same hardware, same requests: if the first 2,048 tokens of every prompt (all of a shorter one) are "
        "identical, the batch grows ~15.7x from the baseline",
        round(rows[3].batch / rows[0].batch, 1) == 15.7,
        f"{rows[0].batch} -> {rows[3].batch}",
    )
    cover = prefix_coverage(reqs, 2048, rows[3].batch)
    claim(
        "...and under that assumption ~88% of the admitted prompts lie wholly inside the shared 2,048 tokens",
        near(cover["share_within_prefix"], 0.883, 0.005) and near(cover["private_prompt_token_share"], 0.156, 0.01),
        f"{cover['prompts_within_prefix']:,} of {cover['batch']:,}; "
        f"{cover['private_prompt_token_share']:.1%} of prompt tokens private",
        quotes=(f"{cover['share_within_prefix']:.0%}",),
    )
    pre = prepended_prompt(reqs, 2048)
    claim(
        "a 2k system prompt put in front of every prompt instead: shared, ~416 sequences fit against ~162 "
        "unshared, about the 417 with no system prompt",
        (pre["shared"], pre["allocator"], pre["unshared"], pre["no_prompt"]) == (416, 416, 162, 417),
        f"{pre['shared']} (allocator {pre['allocator']}) vs {pre['unshared']}; {pre['no_prompt']} without",
    )
    # the roofline floor of each allocator's decode step, through the library's decode_step_time
    tput = []
    for r in decode_loads(reqs):
        row = {w: decode_step_time(MODEL, r["batch"], r[w]["kv_read_bytes"] // per70) for w in ("final", "half")}
        tput.append(row)
    for row in tput:
        row["batch_x"] = row["final"]["batch"] / tput[0]["final"]["batch"]
        row["tokens_x"] = row["final"]["tokens_per_s"] / tput[0]["final"]["tokens_per_s"]
        row["tokens_x_half"] = row["half"]["tokens_per_s"] / tput[0]["half"]["tokens_per_s"]
    paged_t, shared_t = tput[2], tput[3]
    claim(
        "paging's ~6.0x batch buys only ~3.1x the tokens per second at final lengths (~3.3x half-way "
        "through the answers)",
        round(paged_t["batch_x"], 1) == 6.0
        and near(paged_t["tokens_x"], 3.14, 0.01)
        and near(paged_t["tokens_x_half"], 3.32, 0.01),
        f"{paged_t['tokens_x']:.2f}x, {paged_t['tokens_x_half']:.2f}x",
        quotes=(
            f"{paged_t['tokens_x']:.1f}x",
            f"{paged_t['tokens_x_half']:.1f}x",
            f"{paged_t['batch_x']:.0f}x",
            f"{paged_t['tokens_x']:.0f}x",
        ),
    )
    claim(
        "the shared prefix's ~15.7x batch buys ~4.3x the tokens per second (~4.6x half-way)",
        near(shared_t["tokens_x"], 4.25, 0.01) and near(shared_t["tokens_x_half"], 4.61, 0.01),
        f"{shared_t['tokens_x']:.2f}x, {shared_t['tokens_x_half']:.2f}x",
        quotes=(f"{shared_t['batch_x']:.1f}x", f"{shared_t['tokens_x']:.1f}x", f"{shared_t['tokens_x_half']:.1f}x"),
    )
    claim(
        "at final lengths the paged batch reads more KV per step (~171 GiB) than weights (~131 GiB), "
        "and every row's step floor is memory-bound",
        near(paged_t["final"]["kv_read_bytes"] / GIB, 171.1, 0.002)
        and paged_t["final"]["kv_read_bytes"] > paged_t["final"]["weight_bytes"]
        and all(r[k]["bound"] == "memory" for r in tput for k in ("final", "half")),
        f"{paged_t['final']['kv_read_bytes'] / GIB:.1f} vs {paged_t['final']['weight_bytes'] / GIB:.1f} GiB",
        quotes=(
            f"{paged_t['final']['kv_read_bytes'] / GIB:.0f} GiB",
            f"{paged_t['final']['weight_bytes'] / GIB:.0f} GiB",
        ),
    )

    # 9. two extensions: FP8 KV and disaggregated prefill
    fp8 = break_even_bandwidth(big.kv_bytes_per_token(1), N_PARAMS_70B, tp=4) / 1e9
    fp8_at = {n: break_even_at(big, n, N_PARAMS_70B, dtype_bytes=1, tp=4) / 1e9 for n in CONTEXTS}
    claim(
        "FP8 KV halves the break-even at every prefix length (~4.63 GB/s short, ~2.08 GB/s at 128k)",
        near(fp8, 4.63, 0.005) and all(near(fp8_at[n], at[n] / 2, 1e-12) for n in CONTEXTS),
        f"{fp8:.2f} ... {fp8_at[131_072]:.2f} GB/s",
    )
    claim(
        "with FP8 KV, local NVMe beats recomputing at TP4 for every prefix length, even at 100% utilisation",
        crossover_prefix(big, 7e9, N_PARAMS_70B, dtype_bytes=1, tp=4) == 1,
        "from 1 token",
    )
    disagg = {r["prompt_tokens"]: r for r in disaggregation_rows()}
    r128 = disagg[131_072]
    claim(
        "disaggregated prefill: a 128k prompt's 40 GiB of KV takes ~1.72 s over 200 GbE, "
        "86% of an example 2 s budget for token 2",
        r128["kv_bytes"] == 40 * GIB
        and near(r128["200 GbE"], 1.72, 0.005)
        and round(r128["200 GbE"] / SECOND_TOKEN_BUDGET_S, 2) == 0.86,
        f"{r128['200 GbE']:.2f} s",
        quotes=(format_bytes(r128["kv_bytes"]),),
    )
    claim(
        "...while prefilling that prompt at TP4 (which samples token 1) takes ~10 s on its own",
        near(r128["prefill_s"], 10.3, 0.01),
        f"{r128['prefill_s']:.2f} s",
    )

    # Going further: the accounting rules of contiguous slots
    r2, r8 = contiguous_rules(reqs, 2048), contiguous_rules(reqs, 8192)
    claim(
        "counting the cut-off sequences at their full length instead barely moves the 2k waste (~49.7%)",
        near(r2[1].waste_fraction, 0.497, 0.005) and c2.waste_fraction - r2[1].waste_fraction < 0.02,
        f"{r2[1].waste_fraction:.1%}",
    )
    claim(
        "the loose rule (first requests in line, each at its full length) reports ~34.4% at 2k "
        "and ~5.65x held/logical at 8k on this mix",
        round(r2[3].waste_fraction, 3) == 0.344 and round(r8[3].held_over_logical, 2) == 5.65,
        f"{r2[3].waste_fraction:.1%}, {r8[3].held_over_logical:.2f}x",
    )
    claim(
        "capping each sequence at its slot alone takes the loose rule's 2k figure to ~45.1%: most of the gap",
        near(r2[2].waste_fraction, 0.451, 0.005)
        and r2[2].waste_fraction - r2[3].waste_fraction > c2.waste_fraction - r2[2].waste_fraction,
        f"{r2[2].waste_fraction:.1%}",
    )
    long8 = [int(p) for p in reqs[: r8[3].batch, 0] if p > 8192]
    claim(
        "at 8k the difference is one request, whose 16,782-token prompt the loose rule counts in its slot",
        long8 == [16_782] and r8[0].rejected == 1 and r8[0].overflow == 0,
        f"prompts over 8,192 among the first {r8[3].batch}: {long8}",
        quotes=tuple(f"{n:,}-token" for n in long8),
    )
    return out
