# %% [markdown]
# # SimHash S-curves: how likely is a key to be sampled?
#
# MagicPIG never reads every key. It hashes the keys into buckets ahead of time, hashes the
# query the same way, and samples the keys that land where the query lands. The attention
# correction then needs, for every sampled key, the probability `u` that it was sampled.
# This lesson builds that probability from one random hyperplane up to MagicPIG's
# "at least 2 of L tables" rule, and checks each step by hashing and counting.
#
# Everything here is synthetic: unit vectors at chosen angles. Real keys come at the end.

# %%
import pigviz; pigviz.setup_notebook()
import numpy as np
from pigviz import lessons
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
# Below: one table of three lines. Keys in the shaded wedge share the query's bucket.
# The rings mark keys that collide with the query in at least 2 of 150 such tables (hover
# over a key to see its count) -- that is the rule MagicPIG uses, and where we are heading.

# %%
demo = simhash_checks.plane_demo(K=3, L=150, min_hits=2, seed=0)
print(f"keys sharing the query's bucket in table 1: {demo.same_bucket.sum()} of {len(demo.keys)}")
print(f"keys colliding in at least 2 of {demo.L} tables: {demo.included.sum()} of {len(demo.keys)}")
plots.plane_figure(demo)

# %% [markdown]
# The same thing in any dimension: `SimHash(dim, K, L, seed)` draws `K * L` hyperplanes and
# packs each table's bits into an integer bucket id.

# %%
table = sh.SimHash(dim=64, K=10, L=150, seed=0)
rng = np.random.default_rng(0)
query = rng.standard_normal(64)
print("query's bucket ids in the first 5 tables:", table.bucket_ids(query)[:5])
print("hits of the query itself, of -query, of a random key:",
      table.hits(query, np.stack([query, -query, rng.standard_normal(64)])))

# %% [markdown]
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
# Don't take it on trust: draw 20,000 hyperplanes and count.

# %%
angles = np.linspace(0, 180, 181)
p_curve = sh.collision_probability(np.cos(np.radians(angles)))
bits = simhash_checks.monte_carlo_bit_agreement(np.cos(np.radians(sh.CHECK_ANGLES_DEG)), n_planes=20_000, seed=0)
print("angle  formula  counted    z")
for a, e, f, z in zip(bits.angle_deg, bits.expected, bits.freq, bits.z_scores()):
    print(f"{a:5.0f}  {e:7.3f}  {f:7.3f}  {z:+5.2f}")
plots.bit_agreement_figure(angles, p_curve, bits)

# %% [markdown]
# The `z` column is the gap in standard errors. Values within about ±3 are what chance
# alone produces, so the straight line holds.
#
# ## K bits make one table: p^K
#
# A key shares the query's bucket only if all `K` bits agree. With independent hyperplanes
# that happens with probability `p^K`. More bits make the bucket narrower: close keys still
# collide often, distant keys almost never, but even close keys miss a lot.

# %%
plots.one_table_figure(angles, {K: p_curve**K for K in (1, 2, 5, 10, 20)}, highlight=10)

# %%
for cos in (0.0, 0.9):
    p = sh.collision_probability(cos)
    print(f"cos = {cos:.1f} ({np.degrees(np.arccos(cos)):.0f} deg): p = {p:.3f}, "
          f"one table of K = 10 collides with probability {p**10:.4f}")

# %% [markdown]
# One table alone is a poor sampler: a key at cos 0.9 is found only about one time in five
# (the probability printed above).
# The fix is more tables.
#
# ## L tables make an S-curve
#
# Build `L` tables from independent hyperplanes. The number of tables where a key collides
# with the query is Binomial(L, p^K). A key found in at least one table has probability
#
# $$u_1 = 1 - (1 - p^K)^L .$$
#
# For small `p^K` this is about `L p^K`, still tiny; once `L p^K` passes 1 it saturates
# near 1. Plotted against the angle it is an S: a cliff between "almost always" and
# "almost never", whose position `K` sets and whose steepness `L` sharpens.
#
# ## At least 2 of L
#
# MagicPIG samples a key only if it collides in **at least two** tables. Subtract the
# chance of exactly one hit as well:
#
# $$u = 1 - (1 - p^K)^L - L\,p^K (1 - p^K)^{L-1}.$$
#
# One lucky collision no longer suffices, so the cliff gets steeper and moves towards the
# query. Below, both curves at the default (K, L) = (10, 150), with markers counted from
# 300 independent sets of 150 tables (error bars: 95% intervals).
#
# To judge the gaps we use an exact binomial test rather than standard errors: far from the
# query a key is expected in well under one of the 300 hashings, and there a single hit
# would look like a "5 sigma" event while being quite ordinary. The p-value printed is the
# chance of a count at least as far from the formula as the one seen, if the formula is
# right. With 25 angles per curve, the smallest of them lands below 0.01 now and then by
# luck alone; a wrong formula drives it to zero.

# %%
K, L = sh.DEFAULT_K, sh.DEFAULT_L
counted = {m: simhash_checks.monte_carlo_inclusion(sh.MARKER_COS, K, L, m, n_trials=300, seed=m) for m in (1, 2)}
curves = [
    ("one table: p^K", p_curve**K, plots.COLORS["one_table"], "dot"),
    (">= 1 of L tables", simhash_checks.inclusion_curve(angles, K, L, 1), plots.COLORS["hits1"], "solid"),
    (">= 2 of L tables", simhash_checks.inclusion_curve(angles, K, L, 2), plots.COLORS["hits2"], "solid"),
]
markers = [(f"counted, >= {m} (300 hashings)", counted[m], plots.COLORS[f"hits{m}"]) for m in (1, 2)]
for m in (1, 2):
    print(f">= {m} of L: smallest p-value over {len(sh.MARKER_COS)} angles = {np.min(counted[m].p_values()):.3f}")
plots.scurve_figure(angles, curves, markers, K=K, L=L)

# %%
for m in (1, 2):
    c = sh.crossing_cos(K, L, m)
    width = sh.transition_width_deg(K, L, m)
    print(f">= {m} of {L}: u = 50% at cos {c:.3f} ({np.degrees(np.arccos(c)):.1f} deg); "
          f"10% -> 90% takes {width:.1f} deg")

# %% [markdown]
# The formula only asks for `p`, which is a function of the angle. So MagicPIG knows each
# sampled key's `u` exactly from its cosine with the query and can divide by it.
#
# ### Computing u without losing it
#
# Written as above, `u` subtracts numbers close to 1 from 1. For moderately distant keys
# that works, but far keys have a tiny `u` and the subtraction returns rounding noise (it
# can even come out negative), while the correction needs `-log u` for every sampled key.
# `sh.log_inclusion_probability` instead adds up the binomial terms for "at least 2 hits"
# (all positive, so nothing cancels) in log space. The stable value, and whether the closed
# form still agrees with it (the noise itself depends on the machine's maths library, so it
# is reported as a bound):

# %%
for angle in (60, 100, 140, 160, 175):
    p = sh.collision_probability(np.cos(np.radians(angle)))
    q = p**K
    naive = 1 - (1 - q) ** L - L * q * (1 - q) ** (L - 1)
    u = sh.inclusion_probability(p, K, L)
    if abs(naive - u) <= 1e-3 * u:
        verdict = "agrees to 0.1%"
    else:
        verdict = "lost in rounding noise below 1e-12" if abs(naive) < 1e-12 else f"wrong: {naive:.1e}"
    print(f"{angle:3d} deg: stable u = {u:.3e}   log u = {sh.log_inclusion_probability(p, K, L):8.2f}"
          f"   closed form: {verdict}")

# %% [markdown]
# ## What a query scans: L n / 2^K
#
# Each table has `2^K` buckets. If the `n` keys spread evenly, the query's bucket in one
# table holds `n / 2^K` keys, and the query looks in `L` tables. For the 96k-token context
# (n = 98,304) at (10, 150):

# %%
n = sh.NAPKIN_TOKENS
print(f"L n / 2^K = {L} x {n:,} / {2**K:,} = {sh.expected_candidates(n, K, L):,.0f} table entries per query")

# %% [markdown]
# That count includes duplicates (a close key turns up in many tables) and assumes evenly
# filled buckets, which real keys do not give you -- the last section of this notebook shows what real keys do.
#
# ## Explore
#
# Move `K` to shift the cliff, `L` to sharpen it, and `min hits` to see how the threshold
# trades recall for steepness. The markers are counted from fresh hashings each time
# (fewer for large K x L, so every change stays fast); "Resample" draws new keys and
# hyperplanes.

# %%
from pigviz.widgets.simhash import SimHashExplorer
SimHashExplorer()

# %% [markdown]
# ## Questions to try
#
# 1. At K = 10, which `L` puts the ">= 2" 50% point at 45 degrees? Use `sh.crossing_cos`.
# 2. Keep the 50% point fixed while raising K: how must L grow, and what happens to
#    `L n / 2^K`?
# 3. With min hits = 1, what is `u` for an orthogonal key at (10, 150)? Why is it much
#    larger than `p^K`?
# 4. Set K = 20 in the widget. Why do the counted markers get wider error bars?
# 5. Compare `sh.inclusion_probability(p, 10, 150)` with the closed form for p from 0.5
#    down to 0.1. Below which p does the closed form stop being trustworthy, and why?

# %% [markdown]
# ## One real query's keys
#
# Everything above used unit vectors placed at chosen angles. Does the formula hold for a
# real query and its real keys, hashed in 64 dimensions? Take the last query of layer 19,
# head 6 of SmolLM2-135M, from the capture shipped with pigviz, and its keys centred as
# MagicPIG's engine centres them: minus the mean of the hashed keys, those outside the exact
# set of first and last tokens (notebooks 02 and 03 show where the keys live and why they
# are centred).
#
# For each key the formula gives u from cos(query, centred key) alone. Then hash the query
# and the keys 200 times, each time with fresh hyperplanes at (K, L) = (10, 150), and count
# how often each key is sampled. Counting every hashed key in every hashing would be slow,
# so a few hundred are counted (the number is printed below): the ones closest to the query,
# and the rest spread evenly over the range of cosines. The grey bars show where all of the
# query's keys sit.

# %%
from pigviz.keys import geometry as kg
from pigviz.keys import hashing as kh
from pigviz.plots import key_geometry as pk

curve = kh.shipped_real_scurve()
best = int(curve.cos.argmax())
print(f"layer {curve.layer}, head {curve.head}, query at position {curve.position}: {len(curve.cos_all):,} hashed keys "
      f"(all but the first {kg.EXACT_SINKS} and the last {kg.EXACT_RECENT}), centred on their own mean")
print(f"d = {kg.shipped_capture().keys.shape[-1]}; "
      f"cos(query, centred key) from {curve.cos_all.min():+.2f} to {curve.cos_all.max():+.2f}; "
      f"(K, L) = ({curve.K}, {curve.L}), {len(curve.keys)} keys counted over {curve.n_hashings} hashings")
print(f"closest key: cos {curve.cos[best]:.2f}, formula u = {curve.formula[best]:.2f}, "
      f"sampled in {curve.counted[best]:.0%} of {curve.n_hashings} hashings")
print(f"{curve.coverage():.1%} of the {len(curve.keys)} counted keys have a 99% interval that contains u")
print(f"the formula expects {curve.expected_sampled:,.0f} of the {len(curve.cos_all):,} keys to be sampled per hashing")
pk.real_scurve_figure(curve)

# %% [markdown]
# Key by key, the counts follow the formula: its probability depends on the angle alone,
# and real 64-dimensional keys obey it as well as the synthetic pairs did. Two more things
# show up. The real keys fill only the bottom of the S: even the closest one is sampled
# only part of the time (its u and count are printed above), and the bulk of the keys sits
# near cos 0, where u is small but, multiplied by thousands of keys, not negligible. That is why MagicPIG needs the correction
# by u, and why it keeps the sink and the recent tokens out of the hashing and reads them
# exactly.
#
# Move K and L below. The query and its keys were hashed once with the largest K and L the
# sliders allow; each change recounts from those hashings (a table of K bits is the first K
# bits of a larger table), so it is instant.

# %%
from pigviz.widgets.key_geometry import RealSCurveWidget

RealSCurveWidget()

# %% [markdown]
# ## Headline numbers
#
# Every number this notebook states, the formulas' and the real query's, recomputed
# (`pigviz verify` runs the same checks):

# %%
lessons.print_claims("04")

# %% [markdown]
# More questions:
#
# 6. Which (K, L) make the closest key's u pass 90%, and how many keys does the formula then
#    expect this query to sample? Is that still a small fraction of its hashed keys?
# 7. Set min hits to 1 in the widget. Which keys gain the most, the close ones or the bulk
#    near cos 0?
