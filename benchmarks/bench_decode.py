"""Per-token decode time of SmolLM2-135M, dense vs MagicPIG, with attention timed apart.

    python benchmarks/bench_decode.py                        # 4k and 8k, writes pigviz/data/decode_speed_cpu.json
    python benchmarks/bench_decode.py --contexts 1024 --steps 4 --out /tmp/speed.json   # quick look

For each context: ONE dense prefill of the first N tokens of the stdlib docs; then, per
method, the index is built (MagicPIG; timed) and ``--steps`` greedy tokens are decoded one
at a time (after ``--warmup`` untimed ones); the cache is cropped back before the next
method, so every method decodes from the same state. Per step we record the wall time and
the time spent inside the attention function of every layer (layer 0 stays dense sdpa for
MagicPIG too); "rest" is the step minus attention: the weights (~540 MB of fp32 read per
token), the norms, and transformers appending the new key/value to the cache. Medians
over the steps. The 8k row decodes from 8192 - steps - warmup tokens so that it stays
inside the trained context. Besides wall time, each step and its attention are also timed in
this thread's CPU time (``*_cpu_ms``; meaningful with ``--threads 1`` on a CPU), which a
machine shared with other jobs inflates far less than the wall clock.

On a shared CPU, small tensor ops wait for each other's threads; ``--threads 1`` (the
default) gives steadier numbers there. The load average before and after is recorded.

``--memory`` also measures memory. Peak RSS is one number per process, so after the timed run
every (context, method) runs again in a process of its own, with its own model load and
prefill and the same decode steps (slower; ``seconds`` counts the timed run only). These processes
run with glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed at 128 KiB, so that a large block is handed
back to the OS when it is freed: by default glibc raises that threshold after the first big
frees and then keeps freed blocks resident, and in identical default runs dense's decoding peak
at 8k moved by hundreds of MB (1,462 vs 1,882 MB) while nothing it held had changed. With the
threshold fixed the peak counts what is live; the steps get slower (every cache append maps
fresh pages), which is why the timings come from the ordinary run. Each row gains
``peak_rss_mb`` (the whole process: load, prefill, index, decoding); ``decode_start_rss_mb`` and
``decode_peak_rss_mb`` (the RSS at the end of the prefill, where the peak is reset through
``/proc/self/clear_refs``, and the peak from there on; None where the kernel refuses the
reset); and ``index_mb`` (``LSHIndex.nbytes`` summed over layers: the tables, planes, means and
norms; 0 for dense). MB here are 2**20 bytes. Each process, dense ones too, first decodes a few
tokens of a 128-token prompt with MagicPIG on small tables, so both methods' processes hold the
same code (numba's kernels among it) when they are compared. ``pigviz.decode.report.memory_check``
compares the rows with the target: MagicPIG's peak no more than dense's plus its index.
``kv_cache_mb`` is the KV cache itself as its layers store it (spare rows included; MagicPIG's
sampled layers in bf16, ``kv_dtype``), ``kv_cache_cpu_mb`` the part an offloaded cache keeps
on the CPU when the model is on a GPU.

**The floor.** Every row also counts the bytes its attention must read per token
(``attention_bytes``: dense layers their whole K and V; MagicPIG's sampled layers the rows
they read, the token ids scanned, offsets, hyperplanes, hit bit sets; see
``DecodeSession.count_reads``) and prints the attention time over the floor those bytes set
at the sequential read bandwidth measured in the same run (``attention_floor_ms``,
``attention_over_floor``; CPU time on the CPU, wall time on a GPU, where the bandwidth is the
CPU's and only the CPU rows are meaningful). MagicPIG decodes from its own copy of the
prefilled cache (sampled layers in bf16; ``session.decode_cache``), the memory runs from a cache
made half-size from the first token (``session.new_cache``). ``--threads`` also sets the
compiled step's threads. A method is a name and options, or with ``--offload`` also
MagicPIG's ``cpu_offload`` placement (row ``magicpig_offload``).

**The index's cost per generated token.** The timed steps see neither the index's build (after the
prefill, ``index_seconds``, ``index_cpu_seconds``) nor its upkeep: a session files its exact buffer
into the index only once it holds ``buffer + 1`` = 257 tokens, and ``--steps`` decodes far fewer
(``upkeeps`` stays 0). So, after the timed steps of a MagicPIG row and outside them,
``measure_upkeep`` times the upkeep on the real cache: a second session with the same options
(planes, seeds) builds each sampled layer's index as ``prepare`` does over the first
``prefix = n - m * 257`` cached keys and files the next 257 real keys ``m`` times through
``DecodeSession._insert`` (``insert_tokens``), layer after layer as a decode step does; ``m`` is
the number of insertions a 4,096-token generation makes (15), fewer where the build would keep less
than half the context (7 at 4,096 tokens, 1 at 1,024): the tables' buckets fill as tokens arrive, so
the first insertion alone undercounts. Row fields (not in the memory runs, whose peak a second index
would raise): ``upkeep_ms_per_token`` and ``upkeep_cpu_ms_per_token`` (the insertions' wall and CPU
time, summed over layers, per token filed: every generated token is filed once in every sampled
layer), ``upkeep_cpu_ms_per_insertion`` (each round, all layers: flat or not), ``upkeep_insertions``,
``upkeep_chunk``, ``upkeep_prefix``, ``upkeep_stats`` (``insert_tokens``' counts over the
insertions, summed over layers); ``build_ms_per_token_G`` and ``build_cpu_ms_per_token_G``
(``index_seconds`` and ``index_cpu_seconds`` in ms over G generated tokens, G = 256 and 4,096);
and ``attention_with_upkeep_ms_G`` and ``attention_with_upkeep_cpu_ms_G``: the attention per token
plus the upkeep per token plus the build over G (``pigviz.decode.report.per_token_with_index``).
Dense rows keep no index: upkeep and build 0, attention with upkeep = attention. The amortised
upkeep is its steady rate: over exactly 256 tokens no insertion happens yet, but every generated
token is filed sooner or later. Not counted: the exact buffer's own reads, which grow from 0 to 256
tokens between insertions while the timed steps see at most ``warmup + steps``.

**Dense's yardsticks.** The last table sets MagicPIG, per context, against dense's byte floor in
bf16 (the ``dense_grouped_bf16`` row's floor: its K/V bytes at the measured bandwidth) and against
the fastest measured dense (by attention time), with and without the index's cost; each dense path
with its time over its own floor (``pigviz.decode.report.dense_yardstick``).

    python benchmarks/bench_decode.py --memory --contexts 1024 --steps 4 --out /tmp/speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPEED_FORMAT = "pigviz-decode-speed-v1"
SPEED_FILE = "decode_speed_cpu.json"


def measure(
    model,
    tokenizer,
    *,
    contexts=(4096, 8192),
    methods=(("dense", {"kernel": "transformers"}), ("magicpig", {})),
    steps: int = 16,
    warmup: int = 2,
    ids=None,
    progress: bool = True,
    memory: bool = False,
) -> list[dict]:
    """Rows of per-token timings (see module docstring). ``ids``: token ids to use instead of
    the stdlib docs (e.g. carried to another machine). ``memory``: also record this process's
    peak RSS and the indexes' bytes, and the generated ``tokens``; it needs one context and
    one method, since a process's peak cannot be split between runs."""
    import torch

    from pigviz.decode.cache import storage_bytes
    from pigviz.decode.session import DecodeSession, forward, new_cache, use_attention
    from pigviz.model import texts

    methods = [_spec(m) for m in methods]
    if memory and (len(contexts) != 1 or len(methods) != 1):
        raise ValueError(
            f"memory=True needs exactly one context and one method per process, got {len(contexts)} "
            f"contexts and {len(methods)} methods"
        )
    limit = model.config.max_position_embeddings
    rows = []
    for context in contexts:
        n = min(context, limit - steps - warmup)
        prompt = ids[:n] if ids is not None else texts.first_tokens(tokenizer, n)
        if memory:
            _warm_up(model, prompt[:WARM_UP_TOKENS])
            # The method's own cache from the first token on (MagicPIG: sampled layers in bf16).
            method, options, _ = methods[0]
            cache = DecodeSession(model, method, **options).new_cache(model)
        else:
            cache = new_cache(model)
        t0 = time.perf_counter()
        with use_attention(model, "dense"):
            first = int(forward(model, prompt, cache, logits_to_keep=1)[-1].argmax())
        prefill_s = time.perf_counter() - t0
        if memory:
            # Read before the reset, which also resets ru_maxrss: it is the same high-water mark.
            prefill_peak = peak_rss_bytes()
            decode_peak_known = reset_peak_rss()
            decode_start = peak_rss_bytes()  # just reset: the current RSS
        dense_tokens = None
        for method, options, label in methods:
            step_s, attn_s, step_cpu, attn_cpu, budgets, tokens, reads = [], [], [], [], [], [first], []
            with use_attention(model, method, **options) as session:
                # MagicPIG decodes from its own copy where it stores the sampled layers otherwise;
                # the memory runs made theirs so from the start.
                run_cache = cache if memory else session.decode_cache(cache)
                session.prepare(run_cache)
                session.phase = "decode"
                session.time_attention = True
                session.count_reads = True
                for i in range(warmup + steps):
                    _sync(model)
                    before, t0 = session.attention_seconds, time.perf_counter()
                    before_cpu, c0 = session.attention_cpu_seconds, time.thread_time()
                    before_bytes = session.read_bytes
                    logits = forward(model, torch.tensor([tokens[-1]]), run_cache)
                    tokens.append(int(logits[-1].argmax()))
                    _sync(model)
                    if i >= warmup:
                        step_s.append(time.perf_counter() - t0)
                        attn_s.append(session.attention_seconds - before)
                        step_cpu.append(time.thread_time() - c0)
                        attn_cpu.append(session.attention_cpu_seconds - before_cpu)
                        reads.append(session.read_bytes - before_bytes)
                        b = session.take_budgets()
                        budgets.append(1.0 if b is None else float(b[-1]))
                    else:
                        session.take_budgets()
                kv = storage_bytes(run_cache)
                # The index's upkeep per generated token, timed apart on this cache (not in the memory
                # runs: the second index it builds would count in their peak).
                upkeep = measure_upkeep(model, session, run_cache, n) if not memory and session.layers else None
                if memory:
                    index_bytes = sum(state.index.nbytes for state in session.layers.values())
                    decode_peak = peak_rss_bytes()
                run_cache.crop(-(warmup + steps))
                del run_cache
            dense_tokens = tokens if label == "dense" else dense_tokens
            row = {
                "context": n,
                "method": label,
                "options": {k: list(v) if isinstance(v, tuple) else v for k, v in session.options.items()},
                "step_ms": 1e3 * statistics.median(step_s),
                "attention_ms": 1e3 * statistics.median(attn_s),
                "step_cpu_ms": 1e3 * statistics.median(step_cpu),
                "attention_cpu_ms": 1e3 * statistics.median(attn_cpu),
                "index_seconds": session.index_seconds,
                "index_cpu_seconds": session.index_cpu_seconds,
                # The index's upkeep while decoding: whole rebuilds (none since tokens are
                # inserted), per-layer insertions of the buffer, tokens inserted over all sampled
                # layers and their time (inside the steps' attention time).
                "rebuilds": getattr(session, "rebuilds", 0),
                "upkeeps": getattr(session, "upkeeps", 0),
                "upkeep_tokens": getattr(session, "upkeep_tokens", 0),
                "upkeep_seconds": getattr(session, "upkeep_seconds", 0.0),
                "prefill_seconds": prefill_s,
                "budget": statistics.fmean(budgets),
                "steps": steps,
                "same_tokens_as_dense": None if dense_tokens is None else tokens == dense_tokens,
            }
            row["rest_ms"] = row["step_ms"] - row["attention_ms"]
            row["attention_bytes"] = statistics.median(reads) if reads else 0
            row["kv_cache_mb"] = (kv["device"] + kv["cpu"]) / 2**20
            row["kv_cache_cpu_mb"] = kv["cpu"] / 2**20 if kv["device"] and _on_gpu(model) else 0.0
            row["threads"] = torch.get_num_threads()
            if not memory:
                _add_index_costs(row, upkeep)
            if session.offload_report is not None:
                row["placement"] = "cpu_offload"
                row["offload"] = session.offload_report
            if bandwidth:
                row["bandwidth_gbs"] = bandwidth / 1e9
                row["attention_floor_ms"] = 1e3 * row["attention_bytes"] / bandwidth
                clock = "attention_ms" if _on_gpu(model) else "attention_cpu_ms"
                row["attention_over_floor"] = (
                    row[clock] / row["attention_floor_ms"] if row["attention_floor_ms"] else None
                )
            if memory:
                row["peak_rss_mb"] = max(prefill_peak, decode_peak) / 2**20
                row["decode_start_rss_mb"] = decode_start / 2**20 if decode_peak_known else None
                row["decode_peak_rss_mb"] = decode_peak / 2**20 if decode_peak_known else None
                row["index_mb"] = index_bytes / 2**20
                row["tokens"] = tokens
            rows.append(row)
            if progress:
                print(
                    f"  {n:>5} {label:<9} step {row['step_ms']:7.1f} ms  attention {row['attention_ms']:7.1f} ms"
                    f"  (CPU time: step {row['step_cpu_ms']:7.1f}, attention {row['attention_cpu_ms']:7.1f})"
                    f"  index {row['index_seconds']:5.2f} s  upkeep in the steps {1e3 * row['upkeep_seconds']:.1f} ms"
                    f" ({row['upkeeps']} inserts, {row['rebuilds']} rebuilds)  budget {100 * row['budget']:5.1f}%"
                    + (f"  {row['attention_over_floor']:.1f}x its floor" if row.get("attention_over_floor") else "")
                    + (
                        f"  upkeep {row['upkeep_cpu_ms_per_token']:.2f} ms/token (CPU; {row['upkeep_insertions']} "
                        f"insertions of {row['upkeep_chunk']} tokens)"
                        if row.get("upkeep_cpu_ms_per_token") is not None and row.get("upkeep_insertions")
                        else ""
                    )
                    + f"  KV {row['kv_cache_mb']:.0f} MB"
                    + (
                        f"  peak RSS {row['peak_rss_mb']:6.0f} MB, decoding {_mb(row['decode_peak_rss_mb'])}"
                        f", index {row['index_mb']:5.0f} MB"
                        if memory
                        else ""
                    ),
                    flush=True,
                )
    return rows


# The generation the upkeep measurement stands for: as many insertions as a generation this long makes
# (one every buffer + 1 tokens), fewer where they would take more than half the context's keys.
UPKEEP_GENERATION = 4096


def measure_upkeep(model, session, cache, n: int, *, generation: int = UPKEEP_GENERATION) -> dict | None:
    """The index's upkeep per generated token on the real cache, without decoding the hundreds of
    tokens after which the session files its buffer into the index.

    A second session with ``session``'s options (its planes and seeds) builds, per sampled layer and
    the same way ``DecodeSession.prepare`` does (``_build``: ``build_index`` then ``make_room``), an
    index over the first ``n - m * (buffer + 1)`` cached keys, then files the next ``buffer + 1``
    real keys ``m`` times through ``DecodeSession._insert``, the routine a decode step calls when its
    buffer overflows (``pigviz.lsh.index.insert_tokens``), each round over every sampled layer in
    turn, as a decode step goes through them. ``m`` is what a ``generation``-token generation makes
    (4,096 // 257 = 15), fewer where that would leave less than half the context to the build (7 at
    4,096, 1 at 1,024): the tables' buckets fill over the insertions, so a single one, right after the
    tables were laid out with room to grow, undercounts. Only the insertions are timed, in this
    thread's CPU time and on the wall clock. Returns per generated token (each is filed once in every
    sampled layer): ``cpu_ms``, ``ms``; per insertion (all layers): ``cpu_ms_per_insertion``; and the
    counts (``insertions``, ``chunk``, ``prefix``, ``layers``, ``stats``: ``insert_tokens``'
    ``upkeep_stats`` summed over layers, less the build's layout). None where the context is too
    short for one insertion beyond the exact set (``sinks + recent``)."""
    import gc

    from pigviz.decode.session import DecodeSession

    o = session.options
    chunk = o["buffer"] + 1  # a session files its buffer when it holds buffer + 1 tokens
    m = max(1, min(generation // chunk, (n // 2) // chunk))
    prefix = n - m * chunk
    if prefix <= o["sinks"] + o["recent"]:
        return None
    probe = DecodeSession(model, session.method, **o)
    keys = {}
    for layer in sorted(session.layers):
        if layer in session._offloaded:  # cpu_offload: the indexed keys are on the CPU
            off = session._offloaded[layer][0]
            keys[layer] = off.cpu_keys[:, : off.n_indexed]
        else:
            keys[layer] = cache.layers[layer].keys[0]
        if keys[layer].shape[1] < n:
            raise ValueError(f"layer {layer} caches {keys[layer].shape[1]} keys, fewer than the {n} prefilled")
        probe._build(layer, keys[layer][:, :prefix], None)
    # The counts so far are the build's (make_room's layout): the upkeep's are what the insertions add.
    built = {layer: dict(state.index.upkeep_stats) for layer, state in probe.layers.items()}
    per_insertion_cpu, per_insertion = [], []
    for i in range(m):
        stop = prefix + (i + 1) * chunk
        c0, t0 = time.thread_time(), time.perf_counter()
        for layer in keys:
            probe._insert(layer, keys[layer], stop)
        per_insertion_cpu.append(time.thread_time() - c0)
        per_insertion.append(time.perf_counter() - t0)
    stats = {}
    for layer, state in probe.layers.items():
        for name, value in state.index.upkeep_stats.items():
            stats[name] = stats.get(name, 0) + int(value) - int(built[layer].get(name, 0))
    out = {
        "cpu_ms": 1e3 * sum(per_insertion_cpu) / (m * chunk),
        "ms": 1e3 * sum(per_insertion) / (m * chunk),
        "cpu_ms_per_insertion": [1e3 * t for t in per_insertion_cpu],
        "insertions": m,
        "chunk": chunk,
        "prefix": prefix,
        "layers": len(keys),
        "stats": stats,
    }
    del probe, keys
    gc.collect()
    return out


def _add_index_costs(row: dict, upkeep: dict | None) -> None:
    """The index's cost per generated token on ``row``: the upkeep (``upkeep_ms_per_token``,
    ``upkeep_cpu_ms_per_token``, from :func:`measure_upkeep`; 0 for a method without an index, None
    where it could not be measured), the build spread over each generation length of
    ``report.GENERATION_TOKENS`` (``build_ms_per_token_<G>`` from ``index_seconds``,
    ``build_cpu_ms_per_token_<G>`` from ``index_cpu_seconds``), and the attention with both
    (``attention_with_upkeep_ms_<G>``, ``attention_with_upkeep_cpu_ms_<G>``), which also carry the
    re-centrings' estimated share (``recentre_[cpu_]ms_per_token``: report.recentre_ms_per_token)."""
    from pigviz.decode import report

    indexed = row["index_seconds"] > 0 or upkeep is not None
    if upkeep is not None:
        row["upkeep_ms_per_token"] = upkeep["ms"]
        row["upkeep_cpu_ms_per_token"] = upkeep["cpu_ms"]
        row["upkeep_cpu_ms_per_insertion"] = upkeep["cpu_ms_per_insertion"]
        row["upkeep_insertions"] = upkeep["insertions"]
        row["upkeep_chunk"] = upkeep["chunk"]
        row["upkeep_prefix"] = upkeep["prefix"]
        row["upkeep_stats"] = upkeep["stats"]
    else:
        row["upkeep_ms_per_token"] = row["upkeep_cpu_ms_per_token"] = None if indexed else 0.0
    # The re-centrings (option recentre, default 2) recur while generating: estimated from the build.
    row["recentre_ms_per_token"] = report.recentre_ms_per_token(row, clock="wall")
    row["recentre_cpu_ms_per_token"] = report.recentre_ms_per_token(row, clock="cpu")
    for tokens in report.GENERATION_TOKENS:
        row[f"build_ms_per_token_{tokens}"] = 1e3 * row["index_seconds"] / tokens
        row[f"build_cpu_ms_per_token_{tokens}"] = 1e3 * row["index_cpu_seconds"] / tokens
        row[f"attention_with_upkeep_ms_{tokens}"] = report.per_token_with_index(row, tokens, clock="wall")
        row[f"attention_with_upkeep_cpu_ms_{tokens}"] = report.per_token_with_index(row, tokens, clock="cpu")


def _spec(method) -> tuple[str, dict, str]:
    """(name, options) or (name, options, row label)."""
    name, options = method[0], dict(method[1])
    return name, options, (method[2] if len(method) > 2 else name)


def _on_gpu(model) -> bool:
    return next(model.parameters()).device.type == "cuda"


def memory_bandwidth(gib: float = 0.5, repeats: int = 5) -> float:
    """Bytes per second of a sequential float32 read with torch's threads (best of ``repeats``)."""
    import torch

    x = torch.ones(int(gib * 2**30) // 4)
    x.sum()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t0)
    return x.nbytes / best


bandwidth = None  # bytes/s, measured once by main() (the floors' yardstick)


# The memory processes' allocator: every block of 128 KiB or more is its own mapping, handed back
# to the OS when freed, so a peak counts live memory rather than what glibc chose to keep.
MEMORY_CHILD_ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
MEMORY_FIELDS = ("peak_rss_mb", "decode_start_rss_mb", "decode_peak_rss_mb", "index_mb", "kv_cache_mb")

# Long enough for MagicPIG to build an index (more than sinks + recent = 68 tokens).
WARM_UP_TOKENS = 128
WARM_UP_K, WARM_UP_L = 4, 4


def _warm_up(model, prompt) -> None:
    """A short MagicPIG decode on few, short tables before the measured run, in every process,
    dense ones too: both then hold the same code (numba's kernels among it) when the peak is
    reset, and the few small tables freed leave little behind in the allocator."""
    import gc

    import torch

    from pigviz.decode.session import forward, new_cache, use_attention

    cache = new_cache(model)
    with use_attention(model, "dense"):
        token = int(forward(model, prompt, cache, logits_to_keep=1)[-1].argmax())
    with use_attention(model, "magicpig", K=WARM_UP_K, L=WARM_UP_L) as session:
        session.prepare(cache)
        session.phase = "decode"
        for _ in range(2):
            token = int(forward(model, torch.tensor([token]), cache)[-1].argmax())
            session.take_budgets()
    del cache, session
    gc.collect()


def _mb(value) -> str:
    return "   n/a" if value is None else f"{value:6.0f} MB"


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (since the last ``reset_peak_rss``)."""
    status = _vm_hwm_bytes()
    if status is not None:
        return status
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def _vm_hwm_bytes() -> int | None:
    return _proc_status_bytes("VmHWM:")


def _proc_status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset the peak RSS to the current RSS (Linux: "5" into /proc/self/clear_refs); False where
    that is not possible, and then the peak keeps counting from the process start. A kernel
    that takes the write but keeps the old peak (some sandboxes) counts as not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    peak, now = _vm_hwm_bytes(), _proc_status_bytes("VmRSS:")
    return peak is not None and now is not None and peak <= now + 16 * 2**20


def measure_in_processes(
    *, contexts, methods, steps: int, warmup: int, threads: int, progress: bool = True
) -> tuple[list[dict], dict]:
    methods = [_spec(m) for m in methods]
    """``measure(memory=True)`` for each (context, method) in a fresh Python process, so each
    row's peak RSS is its own; ``same_tokens_as_dense`` is filled in here from the tokens.
    Returns the rows and the children's ``environment``."""
    rows, environment = [], None
    with tempfile.TemporaryDirectory(prefix="pigviz-bench-decode-") as tmp:
        for context in contexts:
            dense_tokens = None
            for method, options, label in methods:
                out = Path(tmp) / f"{context}-{label}.json"
                command = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--contexts",
                    str(context),
                    "--steps",
                    str(steps),
                    "--warmup",
                    str(warmup),
                    "--threads",
                    str(threads),
                    "--child-method",
                    json.dumps([method, options, label]),
                    "--child-out",
                    str(out),
                ]
                subprocess.run(
                    command, check=True, stdout=None if progress else subprocess.DEVNULL, env=MEMORY_CHILD_ENV
                )
                child = json.loads(out.read_text(encoding="utf-8"))
                (row,), environment = child["rows"], child["environment"]
                tokens = row.pop("tokens")
                dense_tokens = tokens if label == "dense" else dense_tokens
                row["same_tokens_as_dense"] = None if dense_tokens is None else tokens == dense_tokens
                rows.append(row)
    return rows, environment


def _sync(model) -> None:
    import torch

    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def table(rows: list[dict]) -> str:
    from pigviz.decode.report import speed_table

    return speed_table(rows) + "\n\n" + floor_table(rows) + "\n\n" + yardstick_table(rows)


def floor_table(rows: list[dict]) -> str:
    """Each row's attention against its bandwidth floor, and the KV cache it holds."""
    lines = [
        f"{'context':>7}  {'method':<17} {'attn MB/token':>13} {'floor ms':>9} {'x floor':>8} "
        f"{'attn/dense':>10} {'KV MB':>7} {'index MB':>9}"
    ]
    dense = {r["context"]: r for r in rows if r["method"] == "dense"}
    for r in rows:
        d = dense.get(r["context"])
        clock = "attention_cpu_ms" if "attention_cpu_ms" in r else "attention_ms"
        ratio = f"{r[clock] / d[clock]:.2f}x" if d and d[clock] > 0 else "-"
        over = r.get("attention_over_floor")
        lines.append(
            f"{r['context']:>7}  {r['method']:<17} {r.get('attention_bytes', 0) / 2**20:>13.2f} "
            f"{r.get('attention_floor_ms', float('nan')):>9.2f} "
            f"{(f'{over:.1f}x' if over else '-'):>8} {ratio:>10} {r.get('kv_cache_mb', float('nan')):>7.0f} "
            f"{r.get('index_mb', float('nan')):>9.0f}"
        )
    bw = next((r["bandwidth_gbs"] for r in rows if "bandwidth_gbs" in r), None)
    lines.append(
        "attn MB/token = bytes the attention must read per token (median); floor = those bytes at the measured "
        f"sequential read bandwidth ({bw:.1f} GB/s); x floor = attention time (CPU time on a CPU) / floor; "
        "KV MB = the KV cache as stored (MagicPIG's sampled layers in bf16); index MB with --memory"
        if bw
        else "no bandwidth measured"
    )
    return "\n".join(lines)


def yardstick_table(rows: list[dict], method: str = "magicpig") -> str:
    """Per context, ``method`` against dense's byte floor in bf16 and against the fastest measured
    dense (``report.dense_yardstick``), with the index's build and upkeep counted per generated token."""
    from pigviz.decode import report

    x = lambda v: "-" if v is None else f"{v:.2f}x"  # noqa: E731
    ms = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    lengths = report.GENERATION_TOKENS
    times = ["attention_ms", *(f"with_index_ms_{g}" for g in lengths)]
    floors = ["over_bf16_floor", *(f"with_index_{g}_over_bf16_floor" for g in lengths)]
    fastest = ["over_fastest_dense", *(f"with_index_{g}_over_fastest_dense" for g in lengths)]
    heads = ["attn", *(f"+index@{g}" for g in lengths)]
    cells = lambda names, fmt: " ".join(f"{fmt(n):>11}" for n in names)  # noqa: E731
    lines = [
        f"{'context':>7} {'bf16 floor':>10} {'fastest dense':<19} {'ms':>7} {'x own floor':>11} | "
        f"{method} ms: {cells(heads, str)} | / bf16 floor: {cells(heads, str)} | / fastest dense: {cells(heads, str)}"
    ]
    yards = report.dense_yardstick(rows, method)
    pad = lambda label: " " * len(label)  # noqa: E731
    for y in yards:
        lines.append(
            f"{y['context']:>7} {ms(y['dense_bf16_floor_ms']):>10} {y['fastest_dense']:<19} "
            f"{y['fastest_dense_ms']:7.2f} {x(y['fastest_dense_over_floor']):>11} | "
            f"{pad(method + ' ms:')} {cells(times, lambda k, y=y: ms(y[k]))} | "
            f"{pad('/ bf16 floor:')} {cells(floors, lambda k, y=y: x(y[k]))} | "
            f"{pad('/ fastest dense:')} {cells(fastest, lambda k, y=y: x(y[k]))}"
        )
    clock = "the decoding thread's CPU time" if yards and yards[0]["clock"] == "cpu" else "the wall clock"
    lines.append(
        f"ms on {clock}; bf16 floor = dense's K/V bytes in bf16 at the measured read bandwidth; x own floor = the "
        "fastest measured dense's time over the floor of its own bytes (dense at its best only within "
        f"{report.AT_ITS_BEST_WITHIN}x); +index@G = attention + the index's upkeep per generated token + its build "
        "spread over G generated tokens ('-' where the upkeep was not measured)"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", default="4096,8192", help="comma-separated prefix lengths")
    parser.add_argument("--steps", type=int, default=16, help="timed decode steps per method")
    parser.add_argument("--warmup", type=int, default=2, help="untimed decode steps first")
    parser.add_argument("--K", type=int, default=10)
    parser.add_argument("--L", type=int, default=150)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument(
        "--out", default=None, help=f"JSON path (default pigviz/data/{SPEED_FILE}, recorded in the manifest)"
    )
    parser.add_argument(
        "--offload",
        action="store_true",
        help="also MagicPIG's cpu_offload placement (row magicpig_offload; on a CPU both sides run there)",
    )
    parser.add_argument("--kv-dtype", default="bfloat16", help="MagicPIG's kv_dtype (bfloat16, float32, model)")
    parser.add_argument(
        "--memory",
        action="store_true",
        help="also record peak RSS and the indexes' size, each (context, method) in its own process (slower)",
    )
    # One (context, method) of --memory, run by measure_in_processes in a fresh process.
    parser.add_argument("--child-method", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    import torch

    from pigviz._util.io import write_json_atomic
    from pigviz.decode import evaluate as decode_eval
    from pigviz.model.loading import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    contexts = [int(c) for c in args.contexts.split(",")]
    magicpig = {"K": args.K, "L": args.L, "kv_dtype": args.kv_dtype}
    # Dense three ways: transformers' own SDPA (the model's attention, the tokens' reference) and
    # the grouped form, each KV head read once, on a float32 and on a bfloat16 cache.
    methods = [
        ("dense", {"kernel": "transformers"}),
        ("dense", {"kernel": "grouped", "kv_dtype": "float32"}, "dense_grouped"),
        ("dense", {"kernel": "grouped", "kv_dtype": "bfloat16"}, "dense_grouped_bf16"),
        ("magicpig", magicpig),
    ]
    if args.offload:
        methods.append(("magicpig", dict(magicpig, placement="cpu_offload"), "magicpig_offload"))
    global bandwidth
    bandwidth = memory_bandwidth()
    if args.child_method is not None:
        model, tokenizer = load_model(device="cpu", progress=False)
        spec = json.loads(args.child_method)
        rows = measure(
            model,
            tokenizer,
            contexts=contexts,
            methods=(spec,),
            steps=args.steps,
            warmup=args.warmup,
            memory=True,
        )
        child = {"rows": rows, "environment": decode_eval.environment(model)}
        Path(args.child_out).write_text(json.dumps(child), encoding="utf-8")
        return 0
    load_before = os.getloadavg()
    model, tokenizer = load_model(device="cpu", progress=False)  # the file it writes is the CPU's timings
    t0 = time.perf_counter()
    rows = measure(model, tokenizer, contexts=contexts, methods=methods, steps=args.steps, warmup=args.warmup)
    environment = decode_eval.environment(model)
    seconds = round(time.perf_counter() - t0, 1)
    load_after = os.getloadavg()
    if args.memory:
        del model, tokenizer
        memory_rows, _ = measure_in_processes(
            contexts=contexts, methods=methods, steps=args.steps, warmup=args.warmup, threads=args.threads
        )
        for row, memory_row in zip(rows, memory_rows):
            assert (row["context"], row["method"]) == (memory_row["context"], memory_row["method"])
            row.update({field: memory_row[field] for field in MEMORY_FIELDS})
    print(table(rows))
    result = {
        "format": SPEED_FORMAT,
        "environment": environment,
        "load_average_before": list(load_before),
        "load_average_after": list(load_after),
        "cpu_count": os.cpu_count(),
        "bandwidth_gbs": bandwidth / 1e9,
        "seconds": seconds,
        "rows": rows,
        "command": " ".join(["python benchmarks/bench_decode.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    out = Path(args.out) if args.out else ROOT / "pigviz" / "data" / SPEED_FILE
    write_json_atomic(out, result)
    if args.out is None:
        decode_eval.record_in_manifest(
            out,
            "per-token CPU decode time of SmolLM2-135M, dense vs MagicPIG, attention timed apart, index build time",
            result["command"],
            directory=out.parent,
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
