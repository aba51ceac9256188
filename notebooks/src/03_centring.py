# %% [markdown]
# # 03 · Centring: the one-line fix that decides whether hashing works
#
# Notebook 02 found the real keys of SmolLM2-135M bunched in a cone, with the queries
# pointing away from it. Random hyperplanes through the origin barely cut such a cloud, so
# a query's SimHash bucket is almost empty. MagicPIG's remedy is to subtract the mean of
# the keys it hashes from every key before hashing. This notebook shows why attention does not notice, what the
# cloud looks like afterwards, and how much it changes what real 64-dimensional hashing
# finds.

# %%
import pigviz

pigviz.setup_notebook()

import numpy as np

from pigviz import lessons
from pigviz.keys import geometry as kg
from pigviz.keys import projection as kp
from pigviz.keys import hashing as kh
from pigviz.lsh import simhash as sh
from pigviz.plots import key_geometry as pk

cap = kg.shipped_capture()
d = cap.keys.shape[-1]
K, L = sh.DEFAULT_K, sh.DEFAULT_L
n_hashed = int(kg.non_exact_mask(cap.n_tokens).sum())
print(f"{cap.metadata['model_name']}, {cap.n_tokens:,} tokens, layers {cap.layers}, d = {d}; "
      f"hashed keys per head: {n_hashed:,} (all but the first {kg.EXACT_SINKS} and the last {kg.EXACT_RECENT})")

# %% [markdown]
# **Optional: recapture from the real model** (minutes on a laptop CPU, a few GB of memory). Off by default;
# with `RUN_LIVE = True` the cells below use the fresh capture instead of the shipped one
# (the headline table at the end always checks the shipped one).

# %%
RUN_LIVE = False

if RUN_LIVE:
    from pigviz.model.loading import load_model
    from pigviz.model.shipped import build_shipped_capture

    model, tokenizer = load_model("smollm2-135m")
    cap = build_shipped_capture(model, tokenizer)
    del model
    print("recaptured:", cap.layers, cap.kv_heads)

# %% [markdown]
# ## 1. Attention ignores a shift of every key
#
# MagicPIG never hashes the exact set it reads anyway (the first and last tokens counted in
# the first cell), so it centres on the mean $\mu$ of the *hashed* keys only, as the engine
# in `pigviz.lsh_index` does: the large-norm outliers of the exact set would drag the mean
# away from the cloud that is hashed. Replacing each key $k_i$ by $k_i - \mu$ changes every
# score by the same amount:
#
# $$q \cdot (k_i - \mu) = q \cdot k_i - q \cdot \mu ,$$
#
# and $q \cdot \mu$ does not depend on $i$, whichever keys $\mu$ averages. Softmax ignores
# anything added equally to every score (it cancels between numerator and denominator), so
# the weights, and the output, are unchanged. The values are not touched. Check it on every
# captured query (the gaps are rounding residues, so they are printed as bounds):

# %%
shift = kg.shift_invariance(cap)
print(kg.format_shift_invariance(shift))

# %% [markdown]
# The float64 gap is rounding; in float32 it is rounding of scores that moved by $q\cdot\mu$.
# Both are far below the difference fp16 storage makes. Attention really does not notice.
#
# ## 2. What centring does to the cloud
#
# Same head, same query, same six hyperplanes as in notebook 02. Left, raw keys; right,
# centred keys. The axes are identical, so you can see the cone slide onto the origin.
# (Both pictures are projections onto the plane of the query and the mean key; the shares
# printed are from real 64-dimensional hashing with the same hyperplanes.)

# %%
view = kg.head_view(cap, 19, 6)
clouds = {v: kp.key_cloud(view, -1, v, n_planes=6) for v in kg.VARIANTS}
for v, c in clouds.items():
    print(f"{v:>7} keys: {c.share_real:.2%} share the query's bucket in one table of 6 bits "
          f"(picture: {c.share_picture:.2%})")
pk.key_cloud_figure(clouds["raw"], d, n_hashed, width=520)

# %%
pk.key_cloud_figure(clouds["centred"], d, n_hashed, width=520)

# %% [markdown]
# Centred, the lines slice straight through the cloud, and the keys in the query's wedge
# are the ones pointing its way. Notice the sink: it was short, so after centring it is
# roughly $-\mu$, and since the mean key pointed away from the query, $-\mu$ points towards
# it. (MagicPIG reads the sink exactly anyway; it is not hashed.)
#
# Seen from the query, the change is stark. Before, every key was at a large angle; after,
# the cosines spread around zero and a tail of keys leans towards the query.

# %%
cos_raw, cos_centred = kg.cos_with_query(view, -1, "raw"), kg.cos_with_query(view, -1, "centred")
print(f"cos(query, key), median: raw {np.median(cos_raw):+.3f}, centred {np.median(cos_centred):+.3f}; "
      f"keys with cos > 0.3: raw {np.sum(cos_raw > 0.3)}, centred {np.sum(cos_centred > 0.3)}")
pk.cosine_histogram_figure([("raw keys", cos_raw, pk.COLORS["raw"], "solid"),
                            ("centred keys", cos_centred, pk.COLORS["centred"], "solid")],
                           "The same query, raw and centred keys", "cos(query, key)",
                           marks=[("sink, centred", cos_centred[0])],
                           subtitle=f"layer 19, head 6, query at position {int(view.positions[-1])}")

# %% [markdown]
# ## 3. Counting collisions under real hashing
#
# Now the real thing: MagicPIG's default of L = 150 tables of K = 10 bits, applied to the
# 64-dimensional keys. For every captured layer, a sample of the captured queries of all its
# heads is hashed with the same hyperplanes as all its hashed keys, raw and centred (the
# first line below says how many of each).
# We count the keys that share the query's bucket in at least one table, and in at least
# two (MagicPIG's sampling rule). In brackets, what the formula from notebook 04 predicts
# from each key's cosine with the query.

# %%
grid = kh.collision_grid(cap) if RUN_LIVE else kh.shipped_collision_grid()
print(f"per layer: {grid.n_queries} queries against {grid.n_keys:,} hashed keys")
print(kh.format_collision_table(grid, K, L))

# %%
sink = kg.sink_table(cap)["sink_weight"]
sink_by_layer = [sink[layer, heads].mean() for layer, heads in zip(cap.layers, cap.query_heads)]
pk.collision_bars_figure(grid, K, L, sink_by_layer)

# %% [markdown]
# The MagicPIG authors report that, for their model, fewer than 0.1% of raw keys ever
# collided with the query. Here is what this model does:

# %%
raw1 = grid.per_layer("measured", "raw", K, L, 1)
cen2 = grid.mean("measured", "centred", K, L, 2)
for layer, share in zip(grid.layers, raw1):
    side = "below" if share < 0.001 else "above"
    print(f"layer {layer:2d}: {share:.2%} of raw keys collide in >= 1 table ({side} 0.1%)")
print(f"mean over the captured heads: raw >= 2 tables {grid.mean('measured', 'raw', K, L, 2):.2%}, "
      f"centred >= 2 tables {cen2:.2%}")
print("centring multiplies the >= 2 rate by: " + kh.format_layer_gains(grid, K, L))

# %% [markdown]
# So in SmolLM2 on this text, raw keys collide more often than the paper's 0.1%, in every
# captured layer. It does not rescue raw hashing: what counts for MagicPIG is two
# collisions, which in the sink layers only a sliver of raw keys reach, and centring
# multiplies that rate by the factors printed above. The counted rates agree with the
# formula in brackets, which is the point of notebook 04: the probability that a key is
# sampled depends on its angle to the query and nothing else.
#
# ## 4. Does it matter? The weight hashing finds
#
# Collision rates alone do not say whether the right keys are found. The attention weight
# does: of the weight that falls outside the exact set (the sinks and the last 64 tokens),
# how much sits on keys that reach two collisions?

# %%
for v in kg.VARIANTS:
    print(f"{v:>7}: {grid.mean('weight_share', v, K, L):.1%} of that weight on sampled keys "
          f"(per layer: {', '.join(f'{x:.1%}' for x in grid.per_layer('weight_share', v, K, L))})")
pk.weight_share_figure(grid, K, L, sink_by_layer)

# %% [markdown]
# With raw keys the sampler would see almost none of the weight it is meant to estimate in
# the sink layers; its importance weights would have to make up for it from a handful of
# keys. With centred keys it finds a large part of the weight directly. That is why
# centring is not a tweak: it decides whether the method works at all.
#
# ## 5. Around the default: other K and L
#
# The same count over a grid of K (bits per table) and L (tables), averaged over the
# captured heads. Fewer bits or more tables make every bucket catch more, but the gap
# between raw and centred keys stays.

# %%
gain = grid.gain(min_hits=2)
worst = np.unravel_index(gain.argmin(), gain.shape)
print(f">= 2 tables, centred / raw over {gain.size} (K, L) cells: from {gain.min():.1f}x "
      f"(K = {grid.Ks[worst[0]]}, L = {grid.Ls[worst[1]]}) to {gain.max():.0f}x")
wide_K, wide_L = grid.Ks[0], grid.Ls[-1]
print(f"at K = {wide_K}, L = {wide_L}: {grid.mean('measured', 'centred', wide_K, wide_L, 2):.0%} of the hashed keys "
      f"are sampled centred, {grid.mean('measured', 'raw', wide_K, wide_L, 2):.0%} raw")
pk.collision_grid_figure(grid, min_hits=2)

# %% [markdown]
# Where the buckets are widest (fewest bits, most tables: the last line above), centred
# hashing samples most of the hashed keys and raw hashing a sizeable share, so the sampler
# saves few reads either way and the gap matters less; at the settings that actually save
# reads, centring is what makes the buckets useful.
#
# ## 6. Explore
#
# Toggle between raw and centred keys, move the query, change the layer and head, and add
# hyperplanes. Watch the status line: it reports the share of keys in the query's bucket
# under real 64-d hashing next to what the flat picture shows.

# %%
from pigviz.widgets.key_geometry import KeyCloudWidget

KeyCloudWidget(cap, layer=19, head=6, centred=False, n_planes=6)

# %% [markdown]
# ## Headline numbers
#
# Every number stated above, recomputed from the shipped capture (`pigviz verify` runs the
# same checks):

# %%
lessons.print_claims("03")

# %% [markdown]
# ## Questions to try
#
# 1. Centring used the mean of the hashed keys only, as MagicPIG's engine does. Does the
#    picture change if you centre on the mean of all keys, sink and recent tokens included?
#    Try `view.keys.mean(0)` against `view.mean_key`.
# 2. Layer 2 has no sink. Why is its raw collision rate so much higher than the sink
#    layers'? Compare its `cos(query, mean key)` in notebook 02.
# 3. Why does the query not need centring? What would subtracting the mean query do to the
#    scores?
# 4. In the grid, find a (K, L) where centred keys collide in >= 2 tables about as often as
#    raw keys do at K = 6, L = 300. Which would you rather run, and why?
# 5. The weight share for centred keys is well below 100%. Which keys carry the weight that
#    hashing misses? (Hint: `kg.cos_with_query` and `view.attention_weights()`.)
