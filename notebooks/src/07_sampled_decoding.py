# %% [markdown]
# # 07 · Sampled decoding inside a real model
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
Running the model for all of this takes a while on a CPU, so the results ship in `data/`. `pigviz eval` and `benchmarks/bench_decode.py` made them, and
# `data/manifest.json` records the exact command and each file's sha256. This notebook reads
# them and runs in seconds. A live run waits at the end, switched off by default.

# %%
import pigviz

pigviz.setup_notebook()

from pigviz import decode_report as report
from pigviz import decoding
from pigviz.plots import decoding as plots

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
# called `AttentionInterface`. `pigviz.decoding` registers one more entry and switches the
# model to it inside a `with` block. Leaving the block switches it back, even after an
# error. Inside the block, decoding runs in three phases:
#
# * **Prefill.** The prompt goes through in one pass with ordinary `sdpa` attention. MagicPIG's
#   prefill is dense too. The first new token comes out of this pass.
# * **Index.** For every layer except the dense ones (layer 0 by default, as MagicPIG keeps
#   some layers dense), the post-RoPE keys in the cache are hashed into `L` tables of `K`
#   bits (`pigviz.lsh_index.build_index`, notebooks 03–04).
# * **Decode.** Each new query reads three groups of keys. The first `sinks` tokens and
#   the last `recent` ones are read exactly. A sample comes from the tables, with each score
#   corrected by its inclusion probability `u` (`pigviz.magicpig.attend`, notebook 06). Every
#   token generated since the index was built is read exactly too: the *buffer*. Once the
#   buffer would grow past `buffer` tokens, the index is rebuilt over the whole cache.
#
# The sampled estimate and the exact buffer are two softmaxes over disjoint sets of keys.
# Merging them needs each one's normaliser (its sum of exp-scores), and `attend` only
# returns an output. So the values handed to `attend` carry one extra column: 1 for the
# sinks and the recent window, 0 elsewhere. That column of the output is the weight the
# estimate gave those exact keys. Their normaliser is cheap to compute directly, and
# dividing one by the other gives the estimate's own normaliser.
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
# model, tokenizer = pigviz.models.load_model()            # SmolLM2-135M, fp32, CPU
# out = pigviz.generate(model, tokenizer, prompt, attention="magicpig", max_new_tokens=40, K=10, L=150)
# out.text, out.token_ids, out.step_seconds, out.budgets
# ```
#
# `pigviz generate --from-text 4096 --attention magicpig` does the same from a shell.
#
# ## 2. One prompt, decoded both ways
#
# The prompt is the start of Python's reference manual (the text notebooks 02–06 read). The
# model continues it by greedy decoding, once dense and once with MagicPIG at
# (K, L) = (10, 150). Both runs prefill identically, so the first token always agrees.
# After that, each MagicPIG step reads only the keys it samples.

# %%
generations = quality["generation"]
print(f"prompt: the first {generations[0]['prompt_tokens']:,} tokens; "
      f"{len(generations[0]['token_ids'])} new tokens per run\n")
print(report.side_by_side(generations))

# %% [markdown]
# The two texts agree for a while, then part. Once one token differs, each run continues
# its own text, so everything after that point differs too, even though both are plausible
# continuations. The top panel below shows how much of the cache MagicPIG read at each step
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
#
# MagicPIG runs at several (K, L) settings, each with several hash seeds. Its budget is not
# fixed: it reads what the tables sample. Each baseline then runs once at MagicPIG's mean
# measured budget for that setting, so every row in a block reads the same share of keys.
# TopK is an oracle: it scores every key to pick the best ones, which a real system cannot
# afford. Quest uses pages of 16 tokens (as in its paper) and of 4.

# %%
st = quality["settings"]
print(f"prefix {st['prefix']:,} tokens (prefilled once, dense), then positions {st['prefix'] + 1:,} to "
      f"{st['prefix'] + st['stretch']:,} teacher-forced; MagicPIG seeds {st['seeds']}, "
      f"dense layers {st['dense_layers']}\n")
print(report.quality_table(quality))

# %%
plots.quality_figure(quality["rows"])

# %%
head = report.headline(quality)
mp, base = head["magicpig"], head["baselines"]
print(f"at (10, 150) MagicPIG reads {100 * mp['budget']:.2f}% of the cache; its KL over 3 seeds: "
      f"{mp['kl_min']:.3f} to {mp['kl_max']:.3f}")
for name in ("topk", "quest/4", "quest", "streaming"):
    r = base[name]
    verdict = "closer to dense" if r["kl_mean"] < mp["kl_min"] else "further from dense" \
        if r["kl_mean"] > mp["kl_max"] else "within MagicPIG's seed range"
    print(f"  {plots.method_label(name):<22} KL {r['kl_mean']:.4f}: {verdict}")

# %% [markdown]
# What the rows say:
#
# * **MagicPIG is far better than reading only the exact keys.** StreamingLLM reads the same
#   number of keys, all of them sinks and recent tokens. Its KL stays high at every budget,
#   and its top-1 agreement stays low. This stretch of text needs keys from far back.
# * **Oracle TopK stays closer to dense at every budget.** The keys with the highest scores
#   carry most of the weight in nearly every head of this model, which is what notebook 06
#   found one row at a time. MagicPIG's sample is unbiased but noisy, and here the noise
#   costs more than TopK's missing tail.
# * **Quest depends on its page size.** With pages of 16 it is about as far from dense as
#   StreamingLLM: one bound per 16 keys is too loose to find the right pages. With pages of
#   4 it lands between TopK and MagicPIG, at the cost of storing a bound for every 4 keys.
# * **The budget matters, and so does the seed.** At its smallest budget MagicPIG's KL is
#   several times what it is at its largest, and its top-1 agreement falls with it (the
#   table's last column but one). Different hash seeds of the same (K, L) move the KL a lot:
#   compare the ranges in brackets.
#
# Where does the budget go? The same tables sample more keys in some layers than in
# others, so one budget number is an average over different layers:

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
# The classic long-context test: a short sentence, "The pass key is 71432. Remember it.",
# hidden at some depth in a prompt of repeated filler ("The grass is green. The sky is
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

# %% [markdown]
# Dense finds the key in every trial, so the question is fair at these lengths. MagicPIG
# finds it about as often as dense, at a few per cent of the cache. StreamingLLM never does:
# the needle is neither a sink nor recent, so a method that reads only those cannot see it.
# Quest splits by page size again. With pages of 16 its bound rarely picks the needle's
# page; with pages of 4 it mostly does. TopK, the oracle, finds it every time.
#
# Retrieval is an easy test for sampling: the needle's keys score far above the filler, so
# any method that can *find* high-scoring keys anywhere in the cache passes. The
# teacher-forced KL above is the harder test, because there every token's prediction
# depends on many keys of moderate weight.
#
# ## 5. Speed on this CPU
#
# `benchmarks/bench_decode.py` prefills a 4k and an 8k prompt once each, then decodes a few
# tokens per method from the same cache. It times each whole step and, separately, the attention calls
# of all layers. Everything outside attention counts as "rest": reading all of the model's
# weights for every token, the norms and MLPs, and transformers appending the new key and
# value to the cache.

# %%
print(report.speed_table(speed["rows"]))
print(f"\n{speed['environment']['hardware']}; load average before/after: "
      f"{speed['load_average_before'][0]:.1f} / {speed['load_average_after'][0]:.1f} on {speed['cpu_count']} cores")

# %%
plots.speed_figure(speed["rows"])

# %% [markdown]
# Three things to read off the table:
#
# * **The weights dominate.** Even dense attention over the whole cache is the smaller part
#   of a step for a 135M-parameter model at these contexts. Attention grows with context,
#   while the weights cost the same at every step, so the balance shifts at longer contexts
#   and in larger models (notebook 05 does that arithmetic).
# * **On one CPU thread, MagicPIG's attention costs about what dense does here.** It reads
#   about 5% of the keys in one compiled pass per layer (`pigviz.fused_attend`), but inside a
#   model the weights stream through the caches between layers, so each of its scattered
#   reads (bucket offsets, token ids, sampled rows) misses cache, while dense attention streams
#   a few MB of contiguous keys. Its share falls as the context grows, because dense cost
#   grows with every key while MagicPIG's grows with the keys it samples and scans. (The
#   CPU-time columns are steadier than the wall clock on a machine shared with other jobs.)
# * **The index is not free.** Building it after the prefill takes seconds per prompt on this
#   CPU, and it is rebuilt whenever the buffer fills.
#
# MagicPIG's own system does not run like this. It keeps the cache and the tables in CPU
# memory, to free the GPU's, and runs the sampled attention on many CPU cores while the GPU
# runs the model. A single-process CPU run shows what the method reads, not how fast a
# tuned system is.

# %%
gpu = report.load_gpu_speed()
if gpu is None:
    print("No GPU run is recorded in data/ yet (benchmarks/gpu_check.sh makes one).")
else:
    print(gpu["environment"]["hardware"])
    print(report.speed_table(gpu["speed"]))

# %% [markdown]
# ## 6. Live: run it yourself
#
# Set `RUN_LIVE = True` to load the model (quick once it is cached; the first load
# de-quantises it) and decode a 1,024-token prompt both ways. Swap `"magicpig"` for
# `"topk"`, `"quest"` or `"streaming"`, or change (K, L), and compare.

# %%
RUN_LIVE = False
if RUN_LIVE:
    from pigviz import texts
    from pigviz.models import load_model

    model, tokenizer = load_model()
    prompt = texts.first_tokens(tokenizer, 1024)
    live = [pigviz.generate(model, tokenizer, prompt, attention, 24, progress=False, **options).as_dict()
            for attention, options in (("dense", {}), ("magicpig", {"K": 10, "L": 150}))]
    print(report.side_by_side(live))
    display(plots.generation_figure(live))  # noqa: F821 (Jupyter's display)

# %% [markdown]
# ## 7. From notebook 01 to here
#
# * **01**: the attention output is a balance point of value "sticks". Reading only the
#   tallest sticks (TopK) is biased when the weight is spread out. An unbiased sample,
#   re-weighted by how likely each stick was to be drawn, fixes that in expectation.
# * **02**: real keys crowd into a narrow cone, and a short first-token key (the sink)
#   takes much of the weight.
# * **03**: centring the keys costs attention nothing and spreads the cone, so that hashing
#   can tell keys apart.
# * **04**: SimHash makes the chance of sampling a key a known function of its angle to the
#   query. That function is `u`, the weight the estimator divides by.
# * **05**: the KV cache is what grows with context, and the hash tables MagicPIG adds can
#   be larger than the cache itself.
# * **06**: on every head of SmolLM2-135M, MagicPIG's output error per key read, next to
#   TopK, oracle sampling, Quest and StreamingLLM.
# * **07**: the same estimator inside real decoding. Its errors compound across layers and
#   tokens, it is measured by what the model predicts, and it is timed.
#
# On this model, the picture that emerged is consistent: sampling with LSH beats keeping
# only sinks and recent tokens by a wide margin, but an oracle that reads the highest
# scores is closer to dense at the same budget. And on a CPU with a model this small, a
# decode step costs mostly the weights, not the cache. The case for MagicPIG rests on long
# contexts and large KV caches, where reading the cache dominates and the GPU's memory is
# what runs out.
#
# ## 8. The numbers, re-derived
#
# The sentences above that compare methods are checked here against the shipped files
# (`pigviz verify` runs the same checks):

# %%
from pigviz.claims import format_table

print(format_table(report.claims()))

# %% [markdown]
# ## Questions to try
#
# 1. In section 3 the seeds of one (K, L) differ by tens of per cent in KL. Which rows of
#    `quality["rows"]` have the largest `kl_per_token` values, and are they the same
#    positions for every seed? (Hint: sort positions by KL for each seed.)
# 2. StreamingLLM's KL hardly changes between 3% and 10% of the cache. What does that say
#    about where the weight of this text's queries lies?
# 3. Run `pigviz eval --task quality --prefix 1024 --stretch 64 --configs 10x150 --seeds 0`
#    (a few minutes). Is MagicPIG's budget at 1k tokens larger or smaller than at 8k, and
#    why? (Count the exact keys: 4 + 64, plus the buffer.)
# 4. Keep layers 0 and 1 dense (`--dense-layers 0,1`). Does the KL at (10, 150) drop, and
#    what does it cost in budget?
# 5. With `RUN_LIVE = True`, set `buffer=16`. How many times is the index rebuilt in 24
#    tokens (`GenerationResult.rebuilds`), and what does a rebuild cost in step time?
# 6. Section 5 says the weights dominate a CPU decode step for this model. Using
#    notebook 05's arithmetic, at what context would reading SmolLM2-135M's KV cache (fp32)
#    cost as many bytes as reading its weights?
