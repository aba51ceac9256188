"""Notebook 05b, serving with a KV budget: the statements its prose makes (``claims``), each
re-derived, and the definitions it writes (``PROSE_DEFINED``). The lesson computes its tables in
its own cells from the request mix and the learner's functions; the full serving tables are
finding 5's (:mod:`pigviz.lessons.f5_serving`)."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.verify import Claim
from pigviz.memory import allocators as al
from pigviz.memory import budget as bu
from pigviz.memory.model_shapes import get_model_shape

__all__ = ["claims", "PROSE_DEFINED"]

# Numbers the prose writes that are definitions, parameters, citations or the data's fixed facts.
PROSE_DEFINED = {
    **{
        f"{100 * t:g}%": "an admission target of the sweep (allocators.PREEMPTION_TARGETS)"
        for t in al.PREEMPTION_TARGETS
    },
    "172.5": "the replica's KV budget, an assumption (budget.REPLICA_KV_BUDGET_GIB)",
    "4,000": "the requests of the seeded mix; the exercise's log-normal test lengths",
    "2023": "Kwon et al., SOSP 2023 (a citation)",
    "16": "16-token pages, a parameter",
    "64": "the 64 requests of the sharing demo, a parameter",
    "100%": "every rate at its peak: the assumption of the floors; the fullest admission target",
}


def claims() -> list[Claim]:
    """In the notebook's order: the replica, contiguous slots, pages, sharing, fetch or recompute,
    the preemption cliff."""
    out = []

    def claim(text, passed, value, quotes=()):
        out.append(Claim(notebook="05b", text=text, passed=bool(passed), value=value, quotes=tuple(quotes)))

    big = get_model_shape("Llama-3.1-70B")
    per70 = big.kv_bytes_per_token(2)
    pool = int(172.5 * bu.GIB // per70)  # as section 1's cell counts the budget, in tokens
    claim(
        "the replica's KV budget is the one the library assumes",
        172.5 * bu.GIB == bu.REPLICA_KV_BUDGET_BYTES,
        f"{pool:,} tokens",
    )
    claim(
        "one long request holds a large share of the budget for as long as it decodes",
        131_072 / pool > 0.2,
        f"{131_072 / pool:.1%} at 131,072 tokens",
    )
    mix = al.request_mix(4000, seed=5)
    total = mix.sum(axis=1)
    c8, c2 = al.contiguous_allocation(mix, 8192), al.contiguous_allocation(mix, 2048)
    claim(
        "slots sized for the tail leave most of the memory empty; smaller slots turn requests away or cut them off",
        c8.waste_fraction > 0.5 and c2.rejected > 0 and c2.overflow > 0,
        f"8k: {c8.waste_fraction:.1%} wasted; 2k: {c2.rejected} rejected, {c2.overflow} cut off",
    )
    p1, p16 = al.paged_allocation(mix, 1), al.paged_allocation(mix, 16)
    per_seq = (p16.held_bytes - p16.logical_bytes) / per70 / p16.batch
    claim(
        "paging wastes under a page per sequence and fits several times the batch of 8k slots; pages smaller "
        "than 16 tokens buy almost no extra batch",
        per_seq < 16 and p16.batch / c8.batch > 3 and (p1.batch - p16.batch) / p16.batch < 0.02,
        f"{per_seq:.1f} tokens per sequence; {p16.batch / c8.batch:.1f}x the batch; {p16.batch} -> {p1.batch}",
    )
    private = total[:64]

    def pages(tokens):
        return -(-tokens // 16) * 16

    saved = [1 - (pages(p) + pages(private).sum()) / pages(p + private).sum() for p in (0, 256, 1_024, 4_096, 16_384)]
    claim(
        "sharing a system prompt's pages saves more the longer the prompt",
        saved[0] == 0 and all(a < b for a, b in zip(saved, saved[1:])),
        ", ".join(f"{s:.1%}" for s in saved),
    )
    at = {n: bu.break_even_at(big, n, 70e9, tp=4) / 1e9 for n in (128, 131_072)}
    nvme = bu.STORAGE_TIERS_GBPS["local NVMe"]
    claim(
        "recomputing gets dearer per token as the prefix grows: local NVMe loses at a short prefix and wins at a "
        "long one (TP4, 100% of the dense peak)",
        at[128] > nvme > at[131_072],
        f"{at[128]:.2f} -> {at[131_072]:.2f} GB/s against {nvme:g}",
    )
    claim(
        "more GPUs recompute faster, so the break-even bandwidth grows with TP",
        np.isclose(bu.break_even_bandwidth(per70, 70e9, tp=8), 2 * bu.break_even_bandwidth(per70, 70e9, tp=4)),
        f"{bu.break_even_bandwidth(per70, 70e9, tp=4) / 1e9:.2f} GB/s at TP4",
    )
    sweep = {s["target_occupancy"]: s for s in al.preemption_sweep()}
    gain = sweep[1.0]["mean_batch"] / sweep[0.95]["mean_batch"] - 1
    claim(
        "nothing happens, then a lot does, for a small gain: no preemption up to a 95% target, a handful near "
        "it, many times more at 100%, for a few per cent more batch (the library's simulation of section 7)",
        all(s["preemptions"] == 0 for t, s in sweep.items() if t <= 0.95)
        and 0 < sweep[0.99]["preemptions"] < 20
        and sweep[1.0]["preemptions"] > 20 * sweep[0.99]["preemptions"]
        and 0 < gain < 0.1,
        f"{sweep[0.99]['preemptions']} at 99%, {sweep[1.0]['preemptions']} at 100%; batch {gain:+.1%}",
    )
    return out
