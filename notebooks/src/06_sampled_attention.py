# %% [markdown]
# # 06 · Sampled attention on a real model
#
# Notebook 01 showed with sticks why a random sample can balance better than the tallest
# sticks. Notebook 04 built `u`, the probability that SimHash tables sample a key. Here the
# two meet on every head of a real model, SmolLM2-135M.
#
# At each decode step MagicPIG reads a small **exact set** (the first few "sink" tokens and
# the most recent ones). It **samples** the other keys with LSH tables and corrects every
# sampled score by that key's own `u`. We measure how far its output lands from full
# attention for a given number of keys read. Then we compare with its rivals at the
# **same** number of keys:
#
# * **TopK** reads the keys with the highest scores;
# * **oracle sampling** draws keys from the true weights;
# * **the hybrid** reads the top half of the budget exactly and samples the rest from the true weights;
# * **Quest** keeps whole pages of 16 keys, chosen by a bound on their best score;
# * **StreamingLLM** reads the exact set and nothing else.
#
# TopK, oracle sampling and the hybrid are oracles: they see every score, which a real
# system cannot afford. They show what a given number of keys can buy at best.

# %%
import pigviz; pigviz.setup_notebook()
import numpy as np
from pigviz import budget, lsh_index, shipped, study_experiments as experiments, study_findings as findings
from pigviz.attention import stable_softmax
from pigviz.plots import study as plots
from pigviz.simhash import log_inclusion_probability
from pigviz.widgets.study import StudyExplorer

# %% [markdown]
# ## 1. The estimator in five lines
#
# Take one query `q` of head dimension `d`. `S` is the set of keys the tables returned, that
# is, keys that share the query's bucket in at least 2 of the `L` tables. For each sampled
# key:
#
# 1. its score is `q · k / sqrt(d)`, as in ordinary attention;
# 2. one hyperplane puts `q` and the centred key `k − μ` on the same side with probability
#    `p = 1 − angle / π`;
# 3. the key was sampled with probability `u = P(at least 2 of L tables collide)`, a function
#    of `p` alone (notebook 04), kept as `log u` because `u` can be tiny;
# 4. one softmax runs over the sampled scores minus `log u` and over the exact set's plain
#    scores, so a key that was unlikely to be sampled stands in for the many like it that
#    were not;
# 5. the weights mix the values.
#
# Below, the pieces of the last decode step of one real head come from the library. The five
# lines run in numpy, and `pigviz.magicpig.attend` (the engine) does the same step on its own.

# %%
step = experiments.decode_step_pieces(row=0, head=0)     # layer 2, 8,192 keys, (K, L) = (10, 150)
q, K_S, V_S, mu, d = step["q"], step["K_S"], step["V_S"], step["mu"], len(step["q"])
s_exact = step["K_exact"] @ q / np.sqrt(d)

centred = K_S - mu
cos = centred @ q / (np.linalg.norm(centred, axis=1) * np.linalg.norm(q))
s = K_S @ q / np.sqrt(d)                                                  # 1. scores
p = 1 - np.arccos(np.clip(cos, -1, 1)) / np.pi                            # 2. one bit agrees
log_u = log_inclusion_probability(p, step["K"], step["L"], 2)            # 3. P(>= 2 of L collide)
w = stable_softmax(np.concatenate([s - log_u, s_exact]))                  # 4. corrected softmax
o_hat = w @ np.concatenate([V_S, step["V_exact"]])                        # 5. mix the values

rel = lambda a: np.linalg.norm(a - step["exact"]) / np.linalg.norm(step["exact"])
print(f"layer {step['layer']}, head {step['model_head']}: {step['n']:,} keys; read {step['keys_read']} "
      f"= {len(s_exact)} exact + {len(s)} sampled ({step['keys_read'] / step['n']:.1%})")
print(f"five lines vs engine: largest difference {np.abs(o_hat - step['engine']).max():.0e}")
print(f"error against full attention: five lines {rel(o_hat):.4f}, engine {rel(step['engine']):.4f}")

# %% [markdown]
# The engine tabulates `log u` on a fine grid of `p` rather than evaluating it per key, which
# accounts for the tiny difference. Everything below uses the engine.
#
# ## 2. The study: every head of SmolLM2-135M
#
# `pigviz study` captured the model's post-RoPE queries, keys and values once, on the first
# 8,192 tokens of the Python reference manual. It then ran every method on every head of
# every layer at each of the last 64 positions. The query at position `p` sees keys `0..p`,
# and nothing later. Definitions:
#
# * **error** = `‖ô − o‖ / ‖o‖`, with `o` the exact attention output, averaged over rows;
# * **budget** = distinct keys whose values enter the output, exact set included, divided by
#   the keys the query can see.
#
# MagicPIG's tables are built once per layer, as at the end of a prefill, with 3 hash
# seeds. Each baseline is then run at MagicPIG's measured budget for that layer (matched
# budgets). The results ship in `data/study_smollm2.json`. The command that made them and
# the time it took are stored in the file:

# %%
results = findings.load_shipped_results()
print(findings.setup_text(results))
print()
print(findings.format_summary(results))

# %% [markdown]
# `± seeds` is the standard deviation of the mean error across seeds. Rows marked 270
# cover the first of the 64 positions only (section 8 explains why). The whole table in
# one picture:

# %%
plots.error_budget_figure(findings.curves(results, methods=["magicpig", "topk", "oracle", "hybrid", "quest",
                                                            "streaming"]),
                          findings.METHOD_LABELS, title="SmolLM2-135M, all 30 layers x 9 heads: error against budget")

# %% [markdown]
# Read it at a fixed budget, along a vertical line. On this model, TopK is more accurate than
# MagicPIG at every budget (the table above has the numbers). Sampling itself is not the
# problem: sampling from the true weights (the oracle) beats TopK on average, and the hybrid
# beats everything. What MagicPIG loses is in its *proposal*, the keys the LSH tables hand it.
#
# ## 3. Explore one layer, one head
#
# Pick a layer and a head, and tick methods. Each point averages the 64 positions of the
# selection (and the seeds). The line under the chart compares MagicPIG with TopK at each
# (K, L).

# %%
StudyExplorer()

# %% [markdown]
# ## 4. Where MagicPIG loses, and where it wins
#
# Layer by layer at the paper's default (K, L) = (10, 150), with error bars across seeds:

# %%
lines = {}
for name, key, label in [("magicpig K10 L150", "magicpig", "MagicPIG (10, 150)"),
                         ("topk @K10 L150", "topk", "TopK, same budget"),
                         ("oracle @K10 L150", "oracle", "oracle sampling, same budget"),
                         ("hybrid @K10 L150", "hybrid", "hybrid, same budget"),
                         ("magicpig K10 L150 no_sink", "no_sink", "MagicPIG, sink not in the exact set")]:
    lines[label] = (key, *findings.per_layer(results, name))
plots.per_layer_figure(results["layers"], lines, title="Mean error per layer at MagicPIG's (10, 150) budget")

# %% [markdown]
# Per (layer, head): how many times larger MagicPIG's error is than TopK's at the same
# budget (red: MagicPIG worse).

# %%
ratio = findings.head_grid(results, "magicpig K10 L150") / findings.head_grid(results, "topk @K10 L150")
for setting in results["spec"]["settings"]:
    tag = f"K{setting[0]} L{setting[1]}"
    won, total = findings.wins(results, f"magicpig {tag}", f"topk @{tag}")
    print(f"(K, L) = ({setting[0]}, {setting[1]}): MagicPIG beats TopK in {won:3d} of {total} (layer, head) cells")
print("cells won at (10, 150), by layer:", {layer: int(n) for layer, n in zip(results["layers"], (ratio < 1).sum(1)) if n})
plots.head_ratio_figure(ratio, results["layers"], title="MagicPIG error / TopK error, (10, 150)")

# %% [markdown]
# Layer 0 holds the largest share of MagicPIG's wins, and it is the only layer where MagicPIG
# is better on average. Its heads spread their weight over many keys, so TopK's tallest
# sticks leave out much of it, the situation notebook 01 warned about. Almost everywhere
# else TopK wins, often by a wide margin.
#
# ## 5. A live run on one layer
#
# The shipped capture keeps four (layer, KV head) pairs in fp16. `experiments.live_run` runs
# the same code as the study on one of them, here layer 19 with hash seed 0, and takes a
# fraction of a second:

# %%
live = experiments.live_run(row=2)
layer, heads, *_ = experiments.shipped_layer(2)
row = results["layers"].index(layer)
print(f"layer {layer}   live (fp16 capture)          study (fp32 capture, seed 0)")
for i, h in enumerate(heads):
    print(f"head {h}:  MagicPIG {live['magicpig K10 L150']['error'][0][i]:.4f} at "
          f"{live['magicpig K10 L150']['budget'][0][i]:.2%}   "
          f"MagicPIG {results['series']['magicpig K10 L150']['error'][row][0][h]:.4f} at "
          f"{results['series']['magicpig K10 L150']['budget'][row][0][h]:.2%}")

# %% [markdown]
# ## 6. The bill
#
# The tables are not free. `pigviz.budget` does the accounting (notebook 05). At the paper's
# (10, 150) every key gets 150 four-byte ids, one per table, more bytes than the key and
# value themselves in this model:

# %%
print(budget.format_report(budget.budget_report("SmolLM2-135M", 8192, K=10, L=150)))
k = shipped.load_shipped_capture().keys[0, :1].float()
index = lsh_index.build_index(k, K=10, L=150)
print(f"\nmeasured, one layer and KV head at 8,192 keys: tables {index.table_bytes / 2**20:.2f} MiB "
      f"(formula: {lsh_index.index_bytes(8192, 10, 150) / 2**20:.2f} MiB) beside "
      f"{2 * k.numel() * 2 / 2**20:.2f} MiB of fp16 keys and values")

# %% [markdown]
# ## 7. The speed
#
# Reading 5% of the keys should be faster than reading all of them, but on a CPU the hashing,
# counting and gathering cost time too. `benchmarks/bench_attend.py` times one decode step
# of one layer. The engine runs against PyTorch's dense attention (SDPA) on synthetic keys
# shaped like SmolLM2's and like Llama-3.1-8B's. The engine timed is `pigviz.fused_attend.attend`:
# the same estimator as the torch `attend` of this notebook, compiled into one loop per layer
# with numba (the torch version's time is in the JSON as `attend_torch_ms`). The table was measured on the
# same shared 2-core CPU and ships in `data/`, so the numbers below are stored, not timed
# now. Compare the speed-up column across context lengths: the fixed costs of a step weigh
# most at short contexts.

# %%
print(findings.speed_table())

# %% [markdown]
# ## 8. Raised eyebrows
#
# The questions we would put to the authors, each answered with a measurement.
#
# **Does it beat TopK at the same budget here?** Mostly no. Sections 2 and 4 show it: a
# higher mean error at every budget, and wins in only a few (layer, head) cells, most of
# them in layer 0.
#
# **Is the problem the keys it picks, or the weights it gives them?** Below, the true
# attention weight that lands on the keys MagicPIG reads, counting the exact set and the
# sampled keys apart, next to the weight TopK collects with the same number of keys. The
# numbers are averaged over the 64 positions of each head of one layer.

# %%
for r in (0, 3):
    m = experiments.mass_captured(row=r)
    for i, h in enumerate(m["heads"]):
        print(f"layer {m['layer']:2d} head {h}: reads {m['budget'][i]:.1%} of keys; weight on them: "
              f"exact set {m['exact'][i]:.3f} + sampled {m['sampled'][i]:.3f} = "
              f"{m['exact'][i] + m['sampled'][i]:.3f};  TopK with as many keys: {m['topk'][i]:.3f}")
plain = findings.series_summary(results, "magicpig K10 L150 no_correction")["error"]
print(f"\nwhole study: MagicPIG {findings.series_summary(results, 'magicpig K10 L150')['error']:.3f}, "
      f"same keys with a plain softmax (no 1/u) {plain:.3f}")

# %% [markdown]
# The keys are the problem. In layer 2, where there is no sink, the keys MagicPIG reads hold
# clearly less of the weight than TopK's set of the same size. In layer 25 the exact set
# already holds nearly all of it, and what is left is spread thin. SimHash samples by
# *angle*, but the weight follows the *score*, which also grows with the key's length. Many
# sampled keys point roughly the query's way and still carry little weight. The 1/u
# correction is doing its job: without it the same keys give a worse answer.
#
# **What does the sink do?** In many heads of the later layers, token 0 soaks up much of
# the weight (the weights come from the full capture, summarised in the shipped file). Take
# the 4 sink tokens out of the exact set, and they must be sampled like everyone else:

# %%
sink_weight = shipped.load_shipped_capture().extras["sink_weight"].numpy()
with_sink = findings.head_grid(results, "magicpig K10 L150")
without = findings.head_grid(results, "magicpig K10 L150 no_sink")
heavy = sink_weight > 0.5
print(f"heads with > 50% of their weight on token 0: {heavy.sum()} of {heavy.size}; "
      f"the first layer with one: {results['layers'][int(np.argmax(heavy.any(1)))]}")
print(f"error without / with the sink in the exact set: {np.median((without / with_sink)[heavy]):.2f}x (median, "
      f"those heads), {np.median((without / with_sink)[~heavy]):.2f}x (median, the others)")
for variant in ("first_position", "no_window", "no_exact"):
    r = findings.series_summary(results, f"magicpig K10 L150 {variant}")
    print(f"{findings.METHOD_LABELS[variant]:<44} error {r['error']:.3f} at {r['budget']:.2%} ({r['rows']} rows)")
plots.sink_figure(sink_weight, without / with_sink, results["layers"],
                  title="Taking the sink out of the exact set hurts where the sink holds weight")

# %% [markdown]
# The exact set matters most. With neither sink nor recent window, the error at the first
# position is more than twice as large. Those three variants are measured at the first of the
# 64 positions only. Dropping the recent window means every later position would need its
# own freshly built tables, and one build per position per layer did not fit the study's
# time budget.
#
# **How do K and L trade budget for error?** More bits (K) make buckets narrower, so fewer
# keys are sampled. More tables (L) raise every key's chance of being sampled again. A live
# sweep on layer 2 (seed 0) shows the trade-off, with TopK at each measured budget for
# reference:

# %%
sweep, topk = experiments.kl_sweep(row=0, Ks=(8, 10, 12), Ls=(50, 150, 300))
for a, b in zip(sweep, topk):
    print(f"K={a['K']:2d} L={a['L']:3d}: budget {a['budget']:6.2%}  error {a['error']:.4f}   TopK {b['error']:.4f}")
plots.kl_sweep_figure(sweep, topk, title="Layer 2: MagicPIG at several (K, L), TopK at the same budgets")

# %% [markdown]
# Budgets overlap across settings, and at similar budgets the settings' errors differ:
# compare the lines where they cross a vertical. None of them reaches TopK here.
#
# **How much do hash seeds matter?** Very little on average: in the table of section 2,
# the spread across seeds (`± seeds`) is small next to the error itself. A single head
# varies more, which the explorer's per-head error bars show.
#
# **Why does (10, 150) read so many keys here?** The share of sampled keys is the
# mean of `u` over the keys, and `u` depends only on the angle to the query (a cliff, as in
# notebook 04). The seed article's model had head dimension 128; SmolLM2 has 64. In fewer
# dimensions, random directions are less orthogonal: their cosines spread like 1/√d. So more
# keys fall past the cliff. Real keys spread wider still:

# %%
share = experiments.sampled_share(row=0)
for d, frac in share["isotropic"].items():
    print(f"random directions, d = {d:3d}: cos spread {share['isotropic_cos_std'][d]:.3f}, sampled share {frac:.2%}")
print(f"real keys, layer {share['layer']} (d = 64): cos spread {share['real_cos_std']:.3f}, sampled share {share['real']:.2%}")
print(f"d = 128 instead of 64 divides the random-direction share by {share['isotropic'][64] / share['isotropic'][128]:.2f}; "
      f"the real keys sample {share['real'] / share['isotropic'][64]:.1f}x the random-direction share")

# %% [markdown]
# Doubling the head dimension alone would shrink the sampled share. The real keys' wider
# spread matters even more. So neither the budget nor the error carries over from one
# model to another: measure on the model you have.
#
# ## 9. The numbers, re-derived
#
# Every claim this notebook makes, recomputed from the shipped results (`pigviz verify`
# runs the same function):

# %%
findings.print_claims()

# %% [markdown]
# ## Questions to try
#
# 1. In the explorer, find a head where MagicPIG beats TopK. Check its weight on token 0 in
#    `shipped.load_shipped_capture().extras["sink_weight"]`. Is it a flat head?
# 2. Quest keeps whole pages. Why might pages of 16 miss weight that TopK catches? Rerun
#    `pigviz study --layers 14 --methods magicpig,quest --seeds 1 --out /tmp/q.json`, then
#    try `attention.quest_attention` with `page=4` on a shipped layer.
# 3. The hybrid beats TopK everywhere, but it is an oracle. Which part of it could a real
#    system afford, and which would need something like MagicPIG's tables?
# 4. Extend the K/L sweep to K = 14 with L = 600. Does the error at a ~2% budget improve on
#    (12, 200)? What do the tables cost (section 6)?
# 5. `experiments.sampled_share(row=3, dims=(32, 64, 128, 256))`: how does the random-direction
#    share fall with d, and how far above it do the real keys of layer 25 sit?
