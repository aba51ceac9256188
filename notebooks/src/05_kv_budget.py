# %% [markdown]
# # 05 · The KV budget
#
# Every generated token asks each attention head to look back over everything cached so far.
# That cache is the one data structure whose size grows with the conversation, and at long
# context it, not the weights, decides what fits on a GPU and how fast a token comes out.
#
# This notebook does the accounting, in two halves:
#
# * **one sequence** — what a cached token costs, how long reading the cache takes, and what
#   MagicPIG's LSH tables add on top (sections 1–5);
# * **one serving replica** — how many sequences share a fixed KV budget under different
#   allocators, when fetching a cached prefix beats recomputing it, and why running the
#   memory close to full backfires (sections 6–12).
#
# Every number printed below comes from `pigviz.budget` and `pigviz.allocators`; the same
# functions back `pigviz verify` and the tests.

# %%
import pigviz

pigviz.setup_notebook()

import numpy as np

from pigviz.memory import allocators, budget, model_shapes
from pigviz import lessons
from pigviz.plots import budget as plots
from pigviz.widgets.budget import AllocatorWidget, KVBudgetWidget

# %% [markdown]
# ## 1. What one cached token costs
#
# For each layer and each *key–value* head, the cache stores one key vector and one value
# vector of `head_dim` numbers. Query heads do not add to the cache: with grouped-query
# attention (GQA) several query heads read the same KV head. So the bill per token is
#
# $$\text{bytes per token} = 2\,(\text{K and V}) \times \text{layers} \times \text{KV heads} \times \text{head\_dim} \times \text{bytes per number}.$$
#
# Take Llama-3.1-8B holding a 96k-token document (96 × 1,024 tokens), stored in 16-bit floats:

# %%
llama8 = model_shapes.get_model_shape("Llama-3.1-8B")
context = 96 * 1024
per_token = budget.kv_bytes_per_token(llama8, dtype_bytes=2)
print(f"2 x {llama8.layers} layers x {llama8.kv_heads} KV heads x {llama8.head_dim} x 2 B "
      f"= {per_token:,} B = {budget.format_bytes(per_token)} per token")
print(f"{context:,} tokens -> {budget.format_bytes(budget.kv_bytes(llama8, context))} for one sequence")

# %% [markdown]
# The same arithmetic for every model in the shipped table. Parameter count is a poor guide
# to the cache: it is set by layers, KV heads and head size, not by how wide the MLPs are.

# %%
print(budget.model_table(context))
print()
for pair in (("Mistral-7B-v0.1", "Qwen2.5-7B"), ("SmolLM2-135M", "Qwen2.5-0.5B")):
    print(budget.cache_vs_size(*pair)["text"])

# %% [markdown]
# Mistral-7B and Qwen2.5-7B are nearly the same size, but Qwen2.5 keeps half as many KV heads
# in fewer layers. SmolLM2-135M has 30 layers of 3 KV heads, so it caches more per token than
# Qwen2.5-0.5B, whose 24 layers share only 2.

# %% [markdown]
# Bytes grow linearly with context, so on log–log axes every model is a straight line with the
# same slope; only the offset (bytes per token) differs. The dashed line is the memory of one
# 80 GB GPU, before a single weight is loaded.

# %%
contexts = np.unique(np.logspace(3, 6, 13).astype(int))
curves = {name: (contexts, [budget.kv_bytes(name, int(n)) for n in contexts]) for name in model_shapes.known_models()}
plots.kv_vs_context_figure(curves, reference_gib={"one 80 GB GPU": 80e9 / budget.GIB})

# %% [markdown]
# ## 2. Reading the cache, once per generated token
#
# Full attention reads every cached key (to score it) and every value (to average it) for
# each new token. Divide bytes by a bandwidth to get a floor on the time. At a hypothetical
# sustained 1 TB/s:

# %%
kv96 = budget.kv_bytes(llama8, context)
print(f"{budget.format_bytes(kv96)} / 1 TB/s = {budget.read_time_s(kv96, 1e12) * 1e3:.1f} ms per generated token")

# %% [markdown]
# This is a bandwidth estimate for one sequence, not a measured decoding time: real kernels
# overlap work, and batching shares the weights between sequences — but never the cache,
# because each sequence has its own.

# %% [markdown]
# ## 3. The LSH bill at (K, L) = (10, 150)
#
# MagicPIG avoids reading every key by hashing them into $L$ SimHash tables of $K$ bits each.
# A table entry is a token index; with 32-bit indices each table stores 4 bytes per token, in
# every layer and KV head. Then each table needs a list of where its $2^K$ buckets start:
# one offset per bucket, which does not depend on the context at all.

# %%
report = budget.budget_report("Llama-3.1-8B", context, K=10, L=150)
print(budget.format_report(report))

# %% [markdown]
# The tables are *bigger than the cache they index*: 150 tables × 4 bytes is more than the
# 2 × 128 × 2 bytes of one key–value pair. Across models at 96k tokens:

# %%
rows = [dict(label=name, **budget.index_bill(name, context)) for name in model_shapes.known_models()]
plots.index_bill_figure(rows, highlight="Llama-3.1-8B", title="96k tokens, (K, L) = (10, 150): KV vs its LSH index")

# %% [markdown]
# The bucket offsets are a sliver at $K = 10$, but they double with every extra bit. For
# Llama-3.1-8B at the same context:

# %%
settings = [(8, 75), (10, 150), (12, 150), (14, 150), (16, 150)]
rows_kl = [dict(label=f"K={k}, L={l}", **budget.index_bill(llama8, context, K=k, L=l)) for k, l in settings]
for row in rows_kl:
    print(f"{row['label']:<12} tables {budget.format_bytes(row['table_bytes']):>9}   "
          f"bucket offsets {budget.format_bytes(row['bucket_metadata_bytes']):>9}")
plots.index_bill_figure(rows_kl, highlight="K=10, L=150", x_title="SimHash bits K and tables L",
                        title="Llama-3.1-8B at 96k tokens: the index per (K, L)")

# %% [markdown]
# ## 4. Candidates are cheap in bytes
#
# A query looks up one bucket in each of its $L$ tables. If the $n$ cached tokens spread
# evenly over the $2^K$ buckets, each bucket holds $n / 2^K$ of them, so the query scans about
# $L n / 2^K$ index entries. Real buckets are uneven, so read this as a typical figure, not a
# bound. It also leaves out hashing the query, counting repeated hits, and reading the chosen
# keys and values.

# %%
print(f"L n / 2^K = {report['L']} x {report['context']:,} / {2 ** report['K']:,} "
      f"= {report['candidates_per_query']:,.0f} entries = {report['candidate_index_bytes']:,.0f} B of indices")
print(f"full attention reads {report['key_bytes_per_head']:,} B of keys per (layer, KV head): "
      f"the scan is {report['candidate_share_of_key_bytes']:.2%} of that")

# %% [markdown]
# So MagicPIG trades memory for bandwidth: a large index that is cheap to consult. That is
# why the paper keeps the tables (and most of the cache) in CPU memory and lets the GPU
# handle the hashing and a small exact subset.
#
# ## 5. Try it
#
# Pick a model, type a context (clamped to 1 … 10,000,000), switch the KV number format,
# and move $K$ and $L$. The table follows the selected model; the bars show every model.

# %%
KVBudgetWidget()

# %% [markdown]
# ## 6. From one sequence to a serving replica
#
# The rest of the notebook serves a Llama-70B shape (80 layers, 8 KV heads, head_dim 128,
# 16-bit KV) on four 80 GB GPUs. After the weights and activations, take 172.5 GiB as what is
# left for the cache. Without GQA the model would have one KV head per query head.

# %%
big = model_shapes.get_model_shape("Llama-3.1-70B")
per70 = allocators.replica_bytes_per_token()
no_gqa = big.with_kv_heads(big.attention_heads).kv_bytes_per_token(2)
print(f"with GQA: {per70:,} B = {budget.format_bytes(per70)} per token")
print(f"without : {no_gqa:,} B = {budget.format_bytes(no_gqa)} per token ({no_gqa // per70}x more)")
print()
print(budget.text_table(
    ("context", "KV per sequence", "share of 172.5 GiB"),
    [(f"{n:,}", budget.format_bytes(n * per70), f"{n * per70 / allocators.KV_BUDGET_BYTES:.1%}")
     for n in (1_024, 4_096, 32_768, 131_072)]))

# %% [markdown]
# One long request holds almost a quarter of the replica's cache for as long as it decodes.
# The cache, not the weights, limits how many sequences run at once — and the batch size is
# the throughput of a memory-bound decoder.
#
# ## 7. A request mix
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
# ## 8. Contiguous reservations
#
# The simplest allocator gives each sequence one contiguous block. Nobody knows in advance how
# long the answer will be, so the block must be sized for a worst case. "used" counts the
# tokens the admitted sequences actually produce; "too long" counts sequences that would not
# even fit their block.

# %%
print(allocators.contiguous_text(mix))

# %% [markdown]
# Reserve little and long requests cannot run; reserve enough for the tail and most of the
# memory sits empty, held by sequences that will never fill it.
#
# ## 9. Pages
#
# Paging hands out fixed-size pages as tokens arrive, so a sequence only ever holds its
# current, partly filled last page beyond what it uses: under one page of waste, half a page
# on average. The attention kernel pays for this with an indirection: a page table per
# sequence, and keys gathered from scattered pages.

# %%
print(allocators.paged_text(mix))

# %% [markdown]
# Pages much smaller than 16 tokens buy almost no extra batch, while bigger pages make the
# page table and kernel simpler; that is why 16 is a common choice.
#
# ## 10. Sharing a prefix, with refcounts
#
# Once memory is paged, two sequences can point at the same physical page. A page keeps a
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
# is not a multiple of 16), for a copy of that page per writer. How far apart do they land?

# %%
gap = allocators.largest_sharing_gap(sharing)
print(f"largest gap: {gap['gap_points']:.1f} percentage points, at a {gap['prefix_tokens']:,}-token prefix "
      f"({gap['saved_fraction']:.1%} vs {gap['formula_saved_fraction']:.1%}, {gap['cow_copies']} copies on write)")

# %% [markdown]
# Even the mid-page case stays within about a point of the formula. This saves *memory*.
# Saving the prefill *compute* too needs the cached prefix to outlive the requests, which
# raises the next question.
#
# ## 11. Fetch a cached prefix, or recompute it?
#
# A prefix computed earlier could be read back from somewhere, or simply prefilled again.
# Per token, fetching moves the token's KV bytes; recomputing costs about $2N$ FLOPs for an
# $N$-parameter model. Fetching wins when
#
# $$\text{bandwidth} > \frac{\text{bytes per token}}{2N / (\text{FLOP/s per GPU} \times \text{TP})}.$$
#
# Both sides scale with the number of prefix tokens, so the length cancels: the verdict is a
# property of the model and the hardware (the cell below also times both options for a short
# and a long prefix and finds the same tie). With $N = 70 \times 10^9$ and an H100's dense BF16
# rate (the datasheet's larger figure assumes 2:4 sparsity, which dense weights do not have):

# %%
print(f"dense BF16: {budget.H100_DENSE_BF16_FLOPS / 1e12:.1f} TFLOP/s per GPU "
      f"(the 2:4-sparse headline is {budget.H100_SPARSE_BF16_FLOPS / 1e12:,.0f})")
print(budget.break_even_text(per70, 70e9, reference_tp=4))
fp8 = budget.break_even_bandwidth(big.kv_bytes_per_token(1), 70e9, tp=4) / 1e9
print(f"\nFP8 KV at TP4: half the bytes, break-even {fp8:.2f} GB/s")
for n in (128, 131_072):
    timed = budget.break_even_by_timing(n, per70, 70e9, tp=4) / 1e9
    print(f"timing fetch against recompute for a {n:,}-token prefix at TP4: they tie at {timed:.2f} GB/s")
flips = budget.tier_verdict_changes(per70, 70e9, 4, 8)
print(f"tiers whose verdict changes from TP4 to TP8: {', '.join(flips) or 'none'}")

# %%
lines = {f"TP{r['tp']}": r["break_even_GBps"] for r in budget.break_even_table(per70, 70e9)}
lines["TP4, FP8 KV"] = fp8
plots.break_even_figure(budget.STORAGE_TIERS_GBPS, lines, reference="TP4")

# %% [markdown]
# A local NVMe tier is slower than recomputing at TP4. That goes against the instinct that a
# disk cache always helps, and it does so *because* KV is so large next to the compute that
# produces it. More GPUs per replica (TP8) recompute faster and push the bar higher (though
# in this table no tier crosses it, as printed above); FP8 KV halves the bytes and pulls it lower.
#
# ## 12. Preemption is a cliff
#
# When the cache fills, the scheduler evicts a running sequence and later prefills its whole
# prompt again — which needs KV memory, which can evict someone else. In this toy scheduler
# the chance of a preemption per decision is zero up to 85% occupancy and then
# $((\text{occ} - 0.85)/0.15)^2$. Each run simulates 2,000 scheduling decisions from a fixed seed.

# %%
sims = [allocators.simulate_preemption(occ, n_decisions=2000, seed=3) for occ in (0.60, 0.85, 0.90, 0.95, 0.99)]
print(allocators.preemption_text(sims))
grid = np.linspace(0.5, 1.0, 201)
plots.preemption_figure(grid, allocators.preemption_probability(grid), sims)

# %% [markdown]
# The simulated rate follows $P$ to within sampling noise (the claims table at the end checks
# it). Nothing happens, then everything does. Admission control should watch KV occupancy and
# treat somewhere around 85–95% as the ceiling; GPU utilisation looks busy all along this
# curve and warns of nothing.
#
# ## 13. One table
#
# The same 4,000 requests and the same 172.5 GiB under four allocators. "held" is physical
# memory; "logical" is what the admitted sequences would need unshared. Held/logical above 1
# is waste; below 1 means one physical byte serves several sequences.

# %%
assembly = allocators.assembly_table(mix)
print(allocators.format_assembly(assembly))
real = allocators.paged_admission_with_allocator(mix, 16, shared_prefix=2048)
print(f"\nthe refcounting allocator with copy-on-write admits {real.batch:,} "
      f"(the formula row: {assembly[3].batch:,}); short prompts copy their partly shared page")
plots.allocator_figure(assembly)

# %% [markdown]
# Move the page size, the contiguous reservation and the shared prefix:

# %%
AllocatorWidget()

# %% [markdown]
# ## 14. Headline numbers, re-derived
#
# Each sentence below is checked by `pigviz verify` with the same code that printed the
# numbers above.

# %%
lessons.print_claims("05")

# %% [markdown]
# ## Questions to try
#
# 1. **FP8 KV.** Switch the widget to 1-byte KV. Which section-3 conclusion changes: are the
#    tables still bigger than the cache? What happens to the NVMe verdict in section 11?
# 2. **MLA.** Multi-head latent attention caches one shared latent vector per layer (plus a
#    small rotary part) instead of per-head keys and values. Build a `ModelShape` with one KV
#    "head" whose `2 * head_dim` equals that latent width and compare bytes per token. What
#    would LSH tables over a latent even index?
# 3. **More bits.** At what $K$ do the bucket offsets outgrow the table entries for a 4k-token
#    context? Why does the answer depend on the context but not on $L$?
# 4. **Your own model.** Pass the path of any Hugging Face `config.json` to `budget.budget_report`
#    (or to `pigviz budget --model`). How much of its advertised context fits on one GPU?
# 5. **Admission.** Rerun `simulate_preemption` across occupancies with other seeds. Where would
#    you set the admission ceiling if a preemption costs a user a few seconds?
