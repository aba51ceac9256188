"""Notebook 05, the KV budget: the memory bill and its serving consequences, each number re-derived."""
from __future__ import annotations

import numpy as np

from pigviz.lessons.verify import Claim, near
from pigviz.memory.allocators import (PREEMPTION_THRESHOLD, assembly_table, contiguous_allocation,
                                      largest_sharing_gap, paged_admission_with_allocator, paged_allocation,
                                      preemption_probability, preemption_rate_check, prefix_sharing,
                                      replica_bytes_per_token, request_mix, simulate_preemption)
from pigviz.memory.budget import (GIB, KIB, REPLICA_KV_BUDGET_GIB, STORAGE_TIERS_GBPS, break_even_bandwidth,
                                  break_even_by_timing, break_even_table, budget_report, cache_vs_size,
                                  format_bytes, tier_verdict_changes)
from pigviz.memory.model_shapes import get_model_shape

__all__ = ["claims", "budget_claims", "serving_claims"]


def budget_claims() -> list[Claim]:
    """Part 1, the bill: bytes per token, LSH tables, fetch vs recompute."""
    out = []

    def claim(text, passed, value):
        out.append(Claim(notebook="05", text=text, passed=bool(passed), value=value))

    ctx = 96 * 1024
    r = budget_report("Llama-3.1-8B", ctx, K=10, L=150)
    claim("Llama-3.1-8B caches 128 KiB per token (32 x 8 x 128 x 2 x 2 B)",
          r["kv_bytes_per_token"] == 128 * KIB, f"{r['kv_bytes_per_token']:,} B")
    claim("a 96k-token (98,304) context holds 12 GiB of KV",
          r["kv_bytes"] == 12 * GIB, format_bytes(r["kv_bytes"]))
    claim("reading it once at 1 TB/s takes about 13 ms per generated token",
          near(r["kv_read_time_s"] * 1e3, 13, 0.05), f"{r['kv_read_time_s'] * 1e3:.1f} ms")
    claim("(K, L) = (10, 150) stores 600 B of indices per token per head beside a 512 B K+V pair",
          r["table_bytes_per_head_token"] == 600 and r["kv_pair_bytes_per_head_token"] == 512,
          f"{r['table_bytes_per_head_token']} B vs {r['kv_pair_bytes_per_head_token']} B")
    claim("the table entries come to about 14.1 GiB, more than the 12 GiB they index",
          near(r["table_bytes"] / GIB, 14.1, 0.01) and r["table_bytes"] > r["kv_bytes"],
          f"{r['table_bytes'] / GIB:.2f} GiB")
    meta_share = r["bucket_metadata_bytes"] / r["table_bytes"]
    claim("bucket offsets add little at 96k tokens: under 2% of the table entries",
          meta_share < 0.02, f"{format_bytes(r['bucket_metadata_bytes'])} = {meta_share:.2%}")
    claim("a query scans about L n / 2^K = 14,400 candidate entries (even buckets)",
          r["candidates_per_query"] == 14_400, f"{r['candidates_per_query']:,.0f}")
    claim("those 57,600 index bytes are 0.23% of one head's 25,165,824 key bytes",
          r["key_bytes_per_head"] == 25_165_824 and round(100 * r["candidate_share_of_key_bytes"], 2) == 0.23,
          f"{r['candidate_index_bytes']:,.0f} B = {r['candidate_share_of_key_bytes']:.3%}")

    similar = cache_vs_size("Mistral-7B-v0.1", "Qwen2.5-7B")
    claim("two models within 10% in size can differ over 2x in KV per token (Mistral-7B vs Qwen2.5-7B)",
          abs(similar["params_ratio"] - 1) < 0.10 and similar["kv_ratio"] > 2,
          f"{similar['params_ratio']:.2f}x params, {similar['kv_ratio']:.2f}x KV")
    small = cache_vs_size("SmolLM2-135M", "Qwen2.5-0.5B")
    claim("SmolLM2-135M, under a third the size of Qwen2.5-0.5B, caches more per token",
          small["params_ratio"] < 1 / 3 and small["kv_ratio"] > 1,
          f"{small['params_ratio']:.2f}x params, {small['kv_ratio']:.2f}x KV")

    big = get_model_shape("Llama-3.1-70B")
    per70 = big.kv_bytes_per_token(2)
    claim("a Llama-70B shape (80 x 8 x 128, fp16) caches 320 KiB per token",
          per70 == 327_680, f"{per70:,} B")
    no_gqa = big.with_kv_heads(big.attention_heads).kv_bytes_per_token(2)
    claim("without GQA (64 KV heads) it would cache 8x more",
          no_gqa == 8 * per70, f"{no_gqa / KIB:,.0f} KiB/token")
    share = 131_072 * per70 / GIB / REPLICA_KV_BUDGET_GIB
    claim("one 128k-token request fills about 23% of a 172.5 GiB KV budget",
          near(share, 0.23, 0.02), f"{share:.1%}")

    be = {row["tp"]: row["break_even_GBps"] for row in break_even_table(per70, 70e9)}
    claim("fetching a cached prefix beats recomputing it only above ~9.26 GB/s at TP4",
          near(be[4], 9.26, 0.005), f"{be[4]:.2f} GB/s")
    timed = {n: break_even_by_timing(n, per70, 70e9, tp=4) / 1e9 for n in (128, 131_072)}
    claim("timing fetch against recompute at 128 and 131,072 tokens finds that same break-even",
          all(near(t, be[4], 1e-9) for t in timed.values()),
          " and ".join(f"{t:.2f}" for t in timed.values()) + " GB/s")
    claim("local NVMe (7 GB/s) is slower than recomputing at TP4",
          STORAGE_TIERS_GBPS["local NVMe"] < be[4], f"7 vs {be[4]:.2f} GB/s")
    fp8 = break_even_bandwidth(big.kv_bytes_per_token(1), 70e9, tp=4) / 1e9
    claim("FP8 KV halves the break-even to about 4.63 GB/s",
          near(fp8, 4.63, 0.005) and near(fp8, be[4] / 2, 1e-12), f"{fp8:.2f} GB/s")
    flips = tier_verdict_changes(per70, 70e9, 4, 8)
    claim("TP8 raises the break-even, yet no storage tier in the table changes its verdict",
          be[8] > be[4] and not flips, f"{be[4]:.2f} -> {be[8]:.2f} GB/s; changed: {', '.join(flips) or 'none'}")
    return out


def serving_claims() -> list[Claim]:
    """Part 2, serving: allocators, sharing, preemption, the assembly."""
    out = []

    def claim(text, passed, value):
        out.append(Claim(notebook="05", text=text, passed=bool(passed), value=value))

    reqs = request_mix()
    med_p, med_o = np.median(reqs[:, 0]), np.median(reqs[:, 1])
    claim("the request mix has median prompt ~600 and median output ~250 tokens",
          abs(med_p - 600) < 60 and abs(med_o - 250) < 25, f"{med_p:.0f} / {med_o:.0f}")
    c8 = contiguous_allocation(reqs, 8192)
    claim("reserving 8k tokens per sequence wastes over 80% of the KV budget",
          c8.waste_fraction > 0.80, f"{c8.waste_fraction:.1%} wasted, batch {c8.batch}")
    p16, p1 = paged_allocation(reqs, 16), paged_allocation(reqs, 1)
    claim("16-token pages keep internal waste under 1%", 0 <= p16.waste_fraction < 0.01,
          f"{p16.waste_fraction:.2%}")
    per_seq = (p16.held_bytes - p16.logical_bytes) / replica_bytes_per_token() / p16.batch
    claim("the waste averages about half a page (8 tokens) per sequence",
          4 <= per_seq <= 12, f"{per_seq:.1f} tokens/sequence")
    claim("paging multiplies the batch about 6x over the 8k reservation",
          5 <= p16.batch / c8.batch <= 7, f"{c8.batch} -> {p16.batch} = {p16.batch / c8.batch:.1f}x")
    claim("pages smaller than 16 tokens add under 2% more batch",
          0 <= (p1.batch - p16.batch) / p16.batch < 0.02, f"{p16.batch} -> {p1.batch} at 1-token pages")
    share = prefix_sharing(4096)
    claim("a 4k system prompt shared by 64 requests saves about 89% of their KV",
          abs(share["saved_fraction"] - 0.89) < 0.03 and abs(share["formula_saved_fraction"] - 0.89) < 0.03,
          f"{share['saved_fraction']:.1%} (formula {share['formula_saved_fraction']:.1%})")
    claim("freeing every request returns every shared page: refcounts reach zero",
          share["pages_after_free"] == 0, f"{share['pages_after_free']} pages held after free")
    real = paged_admission_with_allocator(reqs, 16)
    claim("the refcounting allocator admits exactly the batch the page formula predicts",
          real.batch == p16.batch and real.held_bytes == p16.held_bytes, f"batch {real.batch}")
    gap = largest_sharing_gap([prefix_sharing(p) for p in (256, 1_000, 1_024, 4_096, 16_384)])
    claim("with copy-on-write and page rounding the allocator still lands within a point of the formula",
          0 <= gap["gap_points"] < 1.0,
          f"{gap['gap_points']:.1f} points at {gap['prefix_tokens']:,} tokens ({gap['cow_copies']} copies)")
    below = preemption_probability(np.linspace(0.0, PREEMPTION_THRESHOLD, 851))
    sims = {occ: simulate_preemption(occ) for occ in (0.60, 0.85, 0.90, 0.95, 0.99)}
    just_above = float(preemption_probability(PREEMPTION_THRESHOLD + 0.01))
    claim("the toy scheduler never preempts up to 85% occupancy, and starts just above it",
          below.max() == 0 and just_above > 0 and sims[0.60]["preempted"] == sims[0.85]["preempted"] == 0,
          f"P <= 85%: {below.max():.0f}, P(86%) = {just_above:.4f}; "
          f"{sims[0.60]['preempted']} and {sims[0.85]['preempted']} preemptions")
    checks = [c for c in preemption_rate_check(sims.values()) if c["occupancy"] > PREEMPTION_THRESHOLD]
    worst = max(abs(c["z"]) for c in checks)
    claim("above 85% the simulated preemption rate follows P(preempt) (within 4 standard errors)",
          worst < 4, f"largest |z| = {worst:.1f} over " + ", ".join(f"{c['occupancy']:.0%}" for c in checks))
    ratio = sims[0.99]["tokens_reprefilled"] / max(sims[0.90]["tokens_reprefilled"], 1)
    claim("at 99% occupancy over 5x more prompt tokens are re-prefilled than at 90%",
          ratio > 5, f"{ratio:.1f}x ({sims[0.99]['wasted_gpu_ms'] / 1e3:.0f} GPU-s at TP4)")
    rows = assembly_table(reqs)
    ratios = [r.held_over_logical for r in rows]
    claim("held/logical falls from ~5.65x (contiguous 8k) to ~1.01x (paged)",
          round(ratios[0], 2) == 5.65 and round(ratios[2], 2) == 1.01,
          f"{ratios[0]:.2f}x -> {ratios[2]:.2f}x")
    claim("with a shared 2k prefix one physical byte serves several sequences (held/logical < 1)",
          ratios[3] < 1.0, f"{ratios[3]:.2f}x")
    claim("same hardware, same requests: the batch grows ~15.7x from the baseline",
          round(rows[3].batch / rows[0].batch, 1) == 15.7, f"{rows[0].batch} -> {rows[3].batch}")
    return out


def claims() -> list[Claim]:
    return budget_claims() + serving_claims()
