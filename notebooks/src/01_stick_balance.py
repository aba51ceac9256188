# %% [markdown]
# # 01 · Stick balance: what attention averages, and why "keep the tallest" misleads
#
# While an LLM writes, every new token sends one **query** per attention head into the
# **KV cache**: it scores the query against every cached **key**, turns the scores into
# weights with a softmax, and returns the weighted mean of the cached **values**. Reading
# every key and value for every new token is what makes long contexts slow.
#
# This notebook builds the picture behind MagicPIG's first argument with one-number
# values: attention output as the balance point of weighted sticks. With it we compare four
# ways of reading only $B$ keys: **TopK**, **sampling**, **importance sampling** and a
# **hybrid**, and see which of them aim at the right answer.

# %%
import pigviz

pigviz.setup_notebook()

import numpy as np

from pigviz import lessons
from pigviz.toy import stick_balance as sb
from pigviz.attention import softmax_attention
from pigviz.plots.stick_balance import error_curves_figure, estimate_spread_figure, sticks_figure
from pigviz.widgets.stick_balance import StickBalanceWidget

# %% [markdown]
# ## 1. Values as sticks, the output as their balance point
#
# For cached tokens $i = 1..n$, with $d$ numbers per head,
#
# $$s_i = \frac{q \cdot k_i}{\sqrt d}, \qquad w_i = \frac{e^{s_i}}{\sum_j e^{s_j}}, \qquad o = \sum_i w_i\, v_i .$$
#
# The weights are positive and add up to 1. Pretend each value $v_i$ is one number, stand a
# stick at position $v_i$ on a number line and make it $w_i$ tall. Then $o$ is the point
# where the sticks balance: $\sum_i w_i (v_i - o) = 0$, the turning forces on either side
# cancel. Below, eight random keys and values go through ordinary softmax attention, and the
# same number comes out as the balance point.

# %%
rng = np.random.default_rng(0)
d, n = 16, 8
q, K, V = rng.standard_normal(d), rng.standard_normal((n, d)), rng.uniform(0, 1, (n, 1))
out, weights = softmax_attention(q, K, V)
toy = sb.custom_scenario(V[:, 0], K @ q / np.sqrt(d), name="eight-token")
torque = np.sum(weights * (V[:, 0] - out[0]))
print("weights:", np.round(weights, 3), " sum:", round(float(weights.sum()), 6))
print(f"attention output {out[0]:.4f}   balance point {toy.truth:.4f}")
print("net turning force about it is zero:", abs(torque) < 1e-12)
sticks_figure(toy)

# %% [markdown]
# ## 2. Reading fewer keys: TopK and sampling
#
# Give yourself a **budget of $B$ distinct keys**, since loading a key and its value is what
# costs memory bandwidth.
#
# * **TopK** reads the $B$ tallest sticks and balances them alone (their weights
#   rescaled to add up to 1). It is what most fast-attention indexes approximate.
# * **Sampling** draws keys at random, with replacement, key $i$ with probability $w_i$, and
#   averages the values it drew. A key drawn twice counts twice but is loaded once.
#
# How our sampler spends its budget: it keeps drawing while draws land on keys it has
# already read (those are free), and stops at the first draw that would need a $(B+1)$-th
# key, without reading it. The estimate averages all kept draws, repeats included. Stopping
# *before* the new key, not right after the $B$-th, keeps sampling unbiased; the tests show
# that the other rule over-counts rarely drawn keys.
#
# In the **peaked** scenario a few sticks carry most of the weight:

# %%
BUDGET = sb.DEFAULT_BUDGET
peaked = sb.make_scenario("peaked")
est = sb.estimate_all(peaked, BUDGET, rng=1)
print(f"{peaked.description}\nbudget {BUDGET} of {peaked.n} keys\n")
print(sb.estimates_table({k: est[k] for k in ("exact", "topk", "sampling")}))
sticks_figure(peaked, {k: est[k] for k in ("exact", "topk", "sampling")}, BUDGET)

# %% [markdown]
# Here TopK does well: the sticks it leaves out are so short that dropping them moves the
# balance point very little. The sampler read the same number of keys but made many more
# draws, because the tall sticks keep coming up again.
#
# ## 3. The sink trap
#
# Real models often park about half of a head's weight on one token, usually the first,
# whose value is small: an "attention sink" that acts like *none of the above*. In the
# **sink** scenario token 0 holds half the weight at a value near 0 and every other stick is
# about equally short.

# %%
sink = sb.make_scenario("sink")
est = sb.estimate_all(sink, BUDGET, rng=1)
print(f"{sink.description}\nbudget {BUDGET} of {sink.n} keys\n")
print(sb.estimates_table({k: est[k] for k in ("exact", "topk", "sampling")}))
sticks_figure(sink, {k: est[k] for k in ("exact", "topk", "sampling")}, BUDGET)

# %% [markdown]
# TopK grabs the sink and a handful of its flat neighbours. Rescaling their weights to add
# up to 1 gives the sink far more than its true half of the say, so the balance point slides
# towards 0. No amount of luck helps: TopK is deterministic, and it misses the same way
# every time. Sampling misses too on any single run, but its misses scatter on both sides
# of the truth. Run each estimator many times and look where the estimates land:

# %%
runs = sb.repeat_estimates(sink, BUDGET, runs=4000, seed=1, methods=("topk", "sampling"))
for name, values in runs.items():
    print(f"{name:<9} mean of 4000 runs {values.mean():.4f}   truth {sink.truth:.4f}")
estimate_spread_figure(runs, sink.truth, BUDGET, "sink")

# %% [markdown]
# ## 4. How fast sampling's miss shrinks, and what sets its size
#
# One draw lands on value $v_i$ with probability $w_i$, so its mean is exactly $o$ and its
# spread is
#
# $$\sigma_w = \sqrt{\textstyle\sum_i w_i\,(v_i - o)^2}.$$
#
# The mean of $m$ independent draws misses by about $\sigma_w/\sqrt m$. Our budget counts
# distinct keys and the sampler makes at least $B$ draws, so its typical miss is at most
# about $\sigma_w / \sqrt B$. Note what $\sigma_w$ measures: how much the **values disagree**,
# weighted by attention. How the weight is spread enters only through it. On a large flat
# scenario, where almost every draw is a new key, the measured error follows $\sigma_w/\sqrt B$:

# %%
flat_big = sb.make_scenario("flat", n=1024)
curves = sb.error_curves(flat_big, [2, 4, 8, 16, 32, 64], n_seeds=1000, seed=4, methods=("sampling",))
print(f"sigma_w = {curves.spread:.4f}")
print(f"fitted log-log slope of RMS error vs budget: {sb.loglog_slope(curves.budgets, curves.errors['sampling']):.2f}")
for b, err, ref in zip(curves.budgets, curves.errors["sampling"], curves.reference):
    print(f"B = {b:>3}: RMS error {err:.4f}   sigma_w/sqrt(B) {ref:.4f}")
error_curves_figure(curves)

# %% [markdown]
# Squeeze the values towards their balance point by a factor of 10 and keep the weights:
# the values now disagree ten times less, and sampling's error drops ten times.

# %%
flat = sb.make_scenario("flat")
squeezed = sb.custom_scenario(flat.truth + 0.1 * (flat.values - flat.truth), flat.scores, name="squeezed")
loose = sb.error_curves(flat, [8], n_seeds=2000, seed=7, methods=("sampling",)).errors["sampling"][0]
tight = sb.error_curves(squeezed, [8], n_seeds=2000, seed=7, methods=("sampling",)).errors["sampling"][0]
print(f"RMS error at B = 8: original values {loose:.4f}, squeezed values {tight:.4f} (ratio {tight / loose:.3f})")

# %% [markdown]
# ## 5. The catch: you cannot sample without looking
#
# To draw key $i$ with probability $w_i$ the sampler needs every weight, and every weight
# needs every score $q \cdot k_i$: all $n$ keys must be read anyway. It saves loading values
# but not keys. This idealised sampler is called the **oracle**: useful as a yardstick,
# useless as a shortcut.
#
# ## 6. Importance sampling: draw from a cheap guess, then correct
#
# Draw instead from a cheap proposal $u$ that is only roughly right, and weigh each drawn
# key by how much the guess under- or over-sampled it. With unnormalised weights
# $\tilde w_j = e^{s_j}$, known only for the keys we drew,
#
# $$\hat o = \frac{\sum_{\text{draws } j} (\tilde w_j / u_j)\, v_j}{\sum_{\text{draws } j} \tilde w_j / u_j}.$$
#
# The unknown softmax denominator cancels, at a price: $\hat o$ is a ratio of two random sums
# (**self-normalised** importance sampling), which is biased at finite budgets. It
# converges to $o$ as the number of draws grows, provided $u_i > 0$ for every key with
# $w_i > 0$; a key the proposal can never pick can never be corrected for.
#
# Our stand-in proposal is $u = \mathrm{softmax}(0.5\, s)$: it ranks keys correctly but is
# too flat. An LSH index in later notebooks plays this role for real. The bias is plainest
# with one key: the two sums then share their only term, so $\hat o$ is simply the value of
# the key drawn, and its mean is $\sum_i u_i v_i$, not $o$.

# %%
u = sb.rough_proposal(sink.scores)
one_key = sb.repeat_estimates(sink, 1, runs=4000, seed=2, methods=("importance",))["importance"]
print(f"the proposal draws the sink with probability {u[0]:.3f}; its true weight is {sink.weights[0]:.3f}")
print(f"sink scenario, 1 key: mean of 4000 runs {one_key.mean():.3f}   "
      f"sum u_i v_i {u @ sink.values:.3f}   truth {sink.truth:.3f}")
is_curves = sb.error_curves(sink, [1, 2, 4, 8, 16, 24, 31], n_seeds=2000, seed=3, methods=("importance",))
for b, err in zip(is_curves.budgets, is_curves.errors["importance"]):
    print(f"B = {b:>2}: importance-sampling RMS error {err:.3f}")

# %% [markdown]
# The error keeps falling as the budget grows. It falls slowly here because the guess draws
# the sink far less often than its weight deserves (the first printed line), so each rare
# sink draw carries a large correction $w_0/u_0$ and the ratio swings from run to run. A
# proposal closer to $w$ means smaller corrections and a smaller error.
#
# ## 7. Hybrid: read the top exactly, sample the rest
#
# Spend half the budget on the $B/2$ tallest sticks (the set $T$) and compute their part of
# the sum exactly. Spend the rest sampling the remaining keys $R$ in proportion to their
# weights, and scale that sample mean by the weight $W_R = \sum_{i \in R} w_i$ they hold:
#
# $$\hat o = \sum_{i \in T} w_i v_i + W_R \cdot \overline{v}_{\text{draws from } R}.$$
#
# The sampled part is unbiased for $\sum_{i\in R} w_i v_i$, so the whole estimate is unbiased,
# and its spread comes only from the short sticks. When a few sticks dominate, that is a
# big win:

# %%
for scenario in (peaked, sink):
    err = sb.error_curves(scenario, [BUDGET], n_seeds=2000, seed=5, methods=("sampling", "hybrid")).errors
    print(f"{scenario.name:<7} B = {BUDGET}: RMS error sampling {err['sampling'][0]:.4f}, hybrid {err['hybrid'][0]:.4f}")

# %% [markdown]
# ## 8. Try it
#
# Pick a scenario and move the budget. The triangles under the sticks are one run of each
# estimator; **Resample** draws again (TopK never moves, the samplers jiggle around the
# truth). The chart underneath shows each method's error over many runs against the budget,
# with the grey line at the current budget.

# %%
StickBalanceWidget()

# %% [markdown]
# ## 9. All methods against the budget, in the sink scenario

# %%
sink_curves = sb.error_curves(sink, n_seeds=400, seed=0)
at = list(sink_curves.budgets).index(BUDGET)
for name, err in sink_curves.errors.items():
    print(f"{name:<10} error at B = {BUDGET}: {err[at]:.3f}")
error_curves_figure(sink_curves, budget=BUDGET)

# %% [markdown]
# TopK stays on the wrong side of the truth until its budget nearly covers every key. Oracle
# sampling tracks (or beats) $\sigma_w/\sqrt B$, helped by the free repeat draws of the
# sink. The hybrid reads the sink exactly and samples only the flat part, whose values
# disagree less. Importance sampling pays for its rough guess but still converges.
#
# ## 10. Headline numbers
#
# Every number this lesson states, recomputed with the condition it must meet (the same
# check `pigviz verify` runs):

# %%
lessons.print_claims("01")

# %% [markdown]
# ## Questions to try
#
# 1. In the widget, find the smallest budget at which TopK's miss in the sink scenario drops
#    below sampling's typical miss. What fraction of the keys is that?
# 2. Build your own sink with `sb.custom_scenario`: give the sink a value of 1 instead of
#    0.02. Does TopK now miss upwards? Explain it with the weights TopK rescales.
# 3. Change the proposal sharpness in `sb.rough_proposal(sink.scores, sharpness=...)` and pass
#    it to `sb.error_curves(..., proposal=...)`. Which sharpness minimises the error at
#    $B = 12$? What happens at sharpness 1, and why?
# 4. With `sb.make_scenario("peaked", seed=...)`, is the hybrid ever worse than TopK? What
#    would a hybrid that spends a quarter, not half, of its budget exactly do?
# 5. The sampler stops *before* the first draw that needs a new key. Write the rule that
#    stops right *after* the $B$-th new key, average 4000 runs in the sink scenario, and
#    compare with the truth. Which keys does it over-count?
