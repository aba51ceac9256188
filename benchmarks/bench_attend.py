"""One decode step of one layer on the CPU: MagicPIG attend vs dense SDPA vs TopK, each against
its bandwidth floor.

    python benchmarks/bench_attend.py                    # full table, about 3-5 minutes
    python benchmarks/bench_attend.py --quick            # 8k only, a few seconds
    python benchmarks/bench_attend.py --json out.json    # also save the rows
    python benchmarks/bench_attend.py --kernel-threads 1,2,4   # the compiled step's thread counts
    python benchmarks/bench_attend.py --stages           # also each stage of the step against its floor

Shapes: SmolLM2-135M (9 query heads, 3 KV heads, d = 64) and a Llama-3.1-8B-like layer
(32, 8, 128), at 8k, 32k and 96k tokens of synthetic keys with a real-model-like cone, a
large-norm sink key at token 0 and a few planted keys per query head
(:func:`pigviz.lsh.magicpig.synthetic_decode_step`).

Per row: index build time (once per layer; ``b/256 ms``: amortised over 256 generated tokens,
as a rebuild every 256 tokens cost), the incremental upkeep that replaced those rebuilds
(``upk ms/t``: ms per token inserted, 4,096 tokens inserted 256 at a time; fields
``upkeep_*``, with the ids copied per token and table), median time per step over several queries
for MagicPIG attend (:func:`pigviz.lsh.fused.attend`, the compiled path when numba is
installed; ``torch ms`` is the readable torch reference :func:`pigviz.lsh.magicpig.attend`),
dense ``scaled_dot_product_attention`` (the reference; each KV head
answers its group's queries in one call, reading K/V once)
the same SDPA with ``enable_gqa=True`` (which copies K/V per query head on the CPU),
and TopK at MagicPIG's measured budget; the speed-up dense/attend; bytes touched by
attend relative to dense; the hash tables' memory relative to the KV cache (as stored,
float32, and as a float16 cache would be); and each approximation's relative output
error ||o_hat - o|| / ||o|| averaged over heads. All timings of a row are taken side by
side, in one process.

**The floor.** Beside each time: the bytes it must touch and the floor those bytes set at the
machine's memory bandwidth, measured at start-up by summing a 1 GiB float32 tensor
(sequential reads, once with one thread and once with the most kernel threads asked for),
and the time over its floor (``x floor``): the machine-independent yardstick (attend's reads
are scattered rows, so its floor is optimistic). Speed claims read that ratio first and the
SDPA ratio second.

**Half size and threads** (columns of the second table, fields ``*_bf16_*`` and
``attend_threads_ms``): the same step on bf16 K/V with its own index (``uint16`` token ids
up to 65,536 tokens), as decoding stores the sampled layers; dense SDPA (grouped) on the
same bf16 K/V, the faster grouped SDPA (``dense_best_ms``: the faster of its fp32 and bf16 on
this machine; the key keeps its old name) against attend in its faster dtype (``speedup_best``);
and the compiled step at each ``--kernel-threads`` count (the same output bits at every count),
each against its floor: the thread rows against the bandwidth measured with as many threads.

**The yardstick** (a third table; :func:`yardstick`): dense's byte floor (its K/V bytes in bf16
at the measured bandwidth) and its arithmetic floor (its multiply-adds at this core's measured
one-thread matmul rate); each dense path over the byte floor of its dtype; the fastest measured
dense, named; and MagicPIG per generated token, counting its upkeep: the bf16 step, plus the
incremental upkeep per token, plus the bf16 build amortised over 256 and over 4,096 generated
tokens, each over dense's bf16 floor and against the fastest dense. "Dense at its best" is not
used: no dense path here comes within 1.3x of its byte floor, and the arithmetic floor says why
on one core. The last line checks issue 39's two targets at Llama-like 98k.

The main table keeps float32 K/V, one torch thread and one kernel thread, as before.

**Stages** (``--stages``, a third table, fields ``stages_fp32`` and ``stages_bf16``): the step's
stages (query hashing, the table walk, hit counting, the K gather, the softmax and value mix) run
one after another and each is set against its own floor measured in the same run (the gather
floor: random rows of the same size and count, read in ascending order); see
``benchmarks/attend_stages.py``. With them the targets' line adds what this machine's floors
allow (``reach_bf16``, ``pigviz.decode.report.kernel_reach``): the K and V rows at the rate
random rows arrive, and per token those plus the index's hashing at the matmul rate, each
against its target.

Bytes counted for attend: the K and V rows it gathers (per query head; a sampled key's
|k - mean| is computed from its K row) in their stored dtype, the token ids scanned in the
query's buckets (2 or 4 bytes each), the 2 offsets per table per head (4 bytes), the
hyperplanes and the hit counters at min_hits = 2: two bit sets of n bits per head (hit once,
hit twice), read and cleared once. Dense reads every K and V row. TopK as an oracle must score
every key first, so it can never be cheaper than dense here; it is timed to show that, and for
its error.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# Large tensors on transparent huge pages (read by torch's CPU allocator at its first
# allocation, so set before importing torch): attend reads scattered rows, and with 4 KiB
# pages nearly every one costs a TLB miss; dense SDPA streams and barely notices.
# THP_MEM_ALLOC_ENABLE=0 in the environment turns it off.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from pigviz._util.threads import cpu_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pigviz._util.io import write_json_atomic  # noqa: E402
from pigviz.attention import topk_attention  # noqa: E402
from pigviz.decode import report  # noqa: E402
from pigviz.lsh import fused  # noqa: E402
from pigviz.lsh.index import build_index, insert_tokens, make_room  # noqa: E402
from pigviz.lsh.magicpig import attend as attend_torch  # noqa: E402
from pigviz.lsh.magicpig import synthetic_decode_step  # noqa: E402

attend = fused.attend

if fused.available():
    import attend_stages  # noqa: E402  (numba's compiled stages: only with the compiled path)

SHAPES = {"SmolLM2-135M": (9, 3, 64), "Llama-3.1-8B-like": (32, 8, 128)}


CLOCK = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = time.perf_counter


WARMUP_CALLS = 3


def median_ms(fn, queries) -> float:
    """Median over the queries, on ``clock``: wall time, or with one thread this thread's CPU
    time, which other jobs preempting us on a shared machine do not inflate.

    A few untimed calls first (every method alike): lazy tables, caches, and the row's freshly
    allocated K/V, which on this virtual machine read at random ran up to 2x slower for the
    first few calls (a decode loop runs on long-lived memory)."""
    for _ in range(WARMUP_CALLS):
        fn(queries[0])
    times = []
    for q in queries:
        t0 = clock()
        fn(q)
        times.append((clock() - t0) * 1e3)
    return statistics.median(times)


def rel_err(a, b) -> float:
    return float(((a - b).norm(dim=-1) / b.norm(dim=-1)).mean())


def attend_bytes(stats, index, Hkv: int, d: int, kv_itemsize: int = 4) -> int:
    H = stats["keys_read"].numel()
    rows = int(stats["keys_read"].sum())
    return (
        rows * 2 * d * kv_itemsize  # K and V rows (|k - mean| comes from the K row)
        + int(stats["candidates"].sum()) * index.entries.element_size()  # token ids in the query's buckets
        + H * index.L * 2 * index.offsets.element_size()  # two offsets per table
        + index.planes.nbytes
        + H * index.n // 2  # two bit sets of n bits (hit once / twice), scanned + cleared
    )


def memory_bandwidth(gib: float = 1.0, repeats: int = 5, threads: int = 1) -> float:
    """Bytes per second of a sequential float32 read (best of ``repeats``, wall clock with
    several threads, else on ``clock``) with ``threads`` torch threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = torch.ones(int(gib * 2**30) // 4)
        x.sum()
        timer = clock if threads == 1 else time.perf_counter
        best = min(_timed(x.sum, timer) for _ in range(repeats))
    finally:
        torch.set_num_threads(before)
    return x.nbytes / best


def _timed(fn, timer=None) -> float:
    timer = timer or clock
    t0 = timer()
    fn()
    return timer() - t0


def interleaved_wall_ms(fns: dict, queries) -> dict:
    """Median wall ms of each of ``fns`` (name -> fn(q)) over ``queries``, every fn timed on each
    query in turn (after :data:`WARMUP_CALLS` untimed calls of each)."""
    for fn in fns.values():
        for _ in range(WARMUP_CALLS):
            fn(queries[0])
    times = {name: [] for name in fns}
    for q in queries:
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(q)
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


UPKEEP_TOKENS = (256, 4096)


def measure_upkeep(index, k: torch.Tensor, seed: int, chunk: int = 256) -> dict:
    """The index upkeep of a decoder (pigviz.decode.session): ``max(UPKEEP_TOKENS)`` new keys
    (the prefill's keys resampled, with noise) inserted into ``index`` ``chunk`` at a time, as a
    decoder inserts its buffer. Returns the seconds to lay the tables out with room to grow
    (paid once, with the build), ms per inserted token after each count in UPKEEP_TOKENS, and
    the ids written and copied per inserted token, KV head and table (index.upkeep_stats)."""
    gen = torch.Generator().manual_seed(seed + 2)
    n, extra = k.shape[1], max(UPKEEP_TOKENS)
    picks = torch.randint(0, n, (extra,), generator=gen)
    new = k[:, picks] + 0.1 * torch.randn((k.shape[0], extra, k.shape[2]), generator=gen)
    keys = torch.cat([k, new], 1)
    t0 = time.perf_counter()
    make_room(index)
    out = {"room_s": time.perf_counter() - t0}
    spent, t = 0.0, n
    while t < n + extra:
        stop = min(n + extra, t + chunk)
        t0 = time.perf_counter()
        stats = insert_tokens(index, keys, stop)
        spent += time.perf_counter() - t0
        t = stop
        if t - n in UPKEEP_TOKENS:
            copied = stats["written"] + stats["moved"] + stats["grown"] + stats["merged"]
            out[f"upkeep_ms_per_token_{t - n}"] = 1e3 * spent / (t - n)
            out[f"upkeep_ids_per_token_{t - n}"] = copied / (t - n) / (index.L * index.num_kv_heads)
    return out


# The targets for the Llama-like step at 98k tokens (held in pigviz.decode.report, which finding 3 reads).
TARGET_SHARE_OF_DENSE_FLOOR = report.TARGET_SHARE_OF_DENSE_FLOOR
TARGET_STEP_OVER_FLOOR = report.TARGET_STEP_OVER_FLOOR


def yardstick(row: dict, kb: torch.Tensor, vb: torch.Tensor, seed: int, bandwidth: float, gemm: float) -> dict:
    """Every dense path and MagicPIG against dense's byte floor, in one run.

    Dense's floor is its K/V bytes in the dtype compared over the measured read bandwidth; each
    measured dense path is set against the floor of its own dtype. Dense's arithmetic sets a
    second floor (``dense_flop_floor_ms``: its 2·H·n·d multiply-adds, scores and value mix, at
    the one-thread matmul rate measured in the same run): where it is above the byte floor, no
    dense kernel on this core reaches the byte floor. MagicPIG per generated token is its bf16
    step plus the incremental upkeep (``upkeep_bf16_ms_per_token_4096``: tokens inserted 256 at
    a time into the bf16 index) plus the bf16 build amortised over 256 or 4,096 generated
    tokens, plus the re-centrings at each doubling (``recentre_ms_per_token``: twice the build per
    token) (``mp_token_256_ms``, ``mp_token_4096_ms``), each over dense's bf16 floor and against
    the fastest measured dense (``fastest_dense``, named)."""
    H, n, d = row["heads"], row["n"], row["d"]
    upkeep = measure_upkeep(build_index(kb, K=row["K"], L=row["L"], sinks=4, recent=64, seed=seed), kb, seed)
    out = {
        "upkeep_bf16_room_s": upkeep["room_s"],
        **{f"upkeep_bf16_ms_per_token_{t}": upkeep[f"upkeep_ms_per_token_{t}"] for t in UPKEEP_TOKENS},
        "dense_bf16_floor_ms": 1e3 * (kb.nbytes + vb.nbytes) / bandwidth,
        "dense_flop_floor_ms": 1e3 * 2 * H * n * d / gemm,
        "gemm_macs_per_s": gemm,
    }
    out["sdpa_bf16_over_floor"] = row["sdpa_bf16_ms"] / out["dense_bf16_floor_ms"]
    out["sdpa_gqa_over_floor"] = row["sdpa_gqa_ms"] / row["sdpa_floor_ms"]
    dense = {"sdpa fp32": row["sdpa_ms"], "sdpa bf16": row["sdpa_bf16_ms"], "sdpa gqa fp32": row["sdpa_gqa_ms"]}
    out["fastest_dense"] = min(dense, key=dense.get)
    out["fastest_dense_ms"] = dense[out["fastest_dense"]]
    upkeep_ms = out[f"upkeep_bf16_ms_per_token_{max(UPKEEP_TOKENS)}"]
    build_ms = 1e3 * (row["build_bf16_s"] + upkeep["room_s"])
    # The decoder re-centres a layer's index when it has doubled (recentre=2): a rebuild over n
    # tokens after n/2 generated ones, 2 x the build per token (pigviz.decode.report.recentre_ms_per_token).
    out["recentre_ms_per_token"] = 2 * build_ms / n
    for t in UPKEEP_TOKENS:
        token_ms = row["attend_bf16_ms"] + upkeep_ms + out["recentre_ms_per_token"] + build_ms / t
        out[f"mp_token_{t}_ms"] = token_ms
        out[f"mp_token_{t}_over_dense_floor"] = token_ms / out["dense_bf16_floor_ms"]
        out[f"fastest_dense_over_mp_token_{t}"] = out["fastest_dense_ms"] / token_ms
    return out


def run_row(
    shape: str,
    n: int,
    K: int,
    L: int,
    repeats: int,
    seed: int,
    bandwidth: float,
    kernel_threads=(1,),
    bandwidth_threads: dict | None = None,
    gemm: float | None = None,
    stages: bool = False,
) -> dict:
    H, Hkv, d = SHAPES[shape]
    q0, k, v = synthetic_decode_step(H, Hkv, n, d, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    # Nearby queries (the next decode steps of the same heads), not one cached query.
    queries = [q0 + 0.1 * torch.randn(q0.shape, generator=gen) for _ in range(repeats)]

    t0 = time.perf_counter()
    index = build_index(k, K=K, L=L, sinks=4, recent=64, seed=seed)
    build_s = time.perf_counter() - t0

    def sdpa(q):
        # The G query heads of a group act as G query rows of their KV head: the same result
        # as enable_gqa=True, which on the CPU copies K/V per query head and runs ~2.5x slower.
        return F.scaled_dot_product_attention(q.view(1, Hkv, H // Hkv, d), k[None], v[None]).view(H, d)

    def sdpa_gqa(q):
        return F.scaled_dot_product_attention(q[None, :, None], k[None], v[None], enable_gqa=True)[0, :, 0]

    magic_ms = median_ms(lambda q: attend(index, q, k, v, threads=1), queries)
    dense_ms = median_ms(sdpa, queries)
    torch_ms = median_ms(lambda q: attend_torch(index, q, k, v), queries[: max(3, repeats // 2)])
    gqa_ms = median_ms(sdpa_gqa, queries[: max(3, repeats // 2)])
    out, stats = attend(index, queries[0], k, v, threads=1)
    budget = stats["budget"]
    topk_ms = median_ms(lambda q: topk_attention(q, k, v, budget), queries[: max(3, repeats // 2)])
    dense = sdpa(queries[0])
    # Upkeep on a copy of the tables (the rows below time queries on the index as built).
    upkeep = measure_upkeep(build_index(k, K=K, L=L, sinks=4, recent=64, seed=seed), k, seed)
    kv_bytes = k.nbytes + v.nbytes
    touched = attend_bytes(stats, index, Hkv, d)
    row = {
        "shape": shape,
        "n": n,
        "K": K,
        "L": L,
        "heads": H,
        "kv_heads": Hkv,
        "d": d,
        "build_s": build_s,
        # Per generated token: the build amortised over 256 tokens (what a rebuild every 256
        # tokens cost) and over 4,096 (built once), and the incremental upkeep that replaced
        # the rebuilds (measure_upkeep).
        "build_ms_per_token_256": 1e3 * build_s / 256,
        "build_ms_per_token_4096": 1e3 * build_s / 4096,
        **upkeep,
        "attend_ms": magic_ms,
        "sdpa_ms": dense_ms,
        "sdpa_gqa_ms": gqa_ms,
        "topk_ms": topk_ms,
        "attend_torch_ms": torch_ms,
        "fused": fused.available(),
        "speedup": dense_ms / magic_ms,
        "speedup_torch": dense_ms / torch_ms,
        "budget": budget,
        "candidates_per_head": float(stats["candidates"].double().mean()),
        "bytes_ratio": touched / kv_bytes,
        "attend_bytes": touched,
        "bandwidth_gbs": bandwidth / 1e9,
        "attend_floor_ms": 1e3 * touched / bandwidth,
        "sdpa_floor_ms": 1e3 * kv_bytes / bandwidth,
        "table_bytes": index.table_bytes,
        "kv_bytes_fp32": kv_bytes,
        "table_vs_kv_fp32": index.table_bytes / kv_bytes,
        "table_vs_kv_fp16": index.table_bytes / (kv_bytes / 2),
        "err_magicpig": rel_err(out, dense),
        "err_topk": rel_err(topk_attention(queries[0], k, v, budget)[0], dense),
    }
    row["attend_over_floor"] = row["attend_ms"] / row["attend_floor_ms"]
    row["sdpa_over_floor"] = row["sdpa_ms"] / row["sdpa_floor_ms"]

    # Half size: bf16 K/V and their own index (uint16 ids while n <= 65,536), as decoding stores them.
    kb, vb = k.to(torch.bfloat16), v.to(torch.bfloat16)
    t0 = time.perf_counter()
    index_b = build_index(kb, K=K, L=L, sinks=4, recent=64, seed=seed)
    row["build_bf16_s"] = time.perf_counter() - t0
    row["attend_bf16_ms"] = median_ms(lambda q: attend(index_b, q, kb, vb, threads=1), queries)
    out_b, stats_b = attend(index_b, queries[0], kb, vb, threads=1)
    row["attend_bf16_bytes"] = attend_bytes(stats_b, index_b, Hkv, d, kv_itemsize=2)
    row["attend_bf16_floor_ms"] = 1e3 * row["attend_bf16_bytes"] / bandwidth
    row["attend_bf16_over_floor"] = row["attend_bf16_ms"] / row["attend_bf16_floor_ms"]
    row["budget_bf16"] = stats_b["budget"]
    row["err_magicpig_bf16"] = rel_err(out_b.float(), dense)
    row["table_bytes_bf16_index"] = index_b.table_bytes
    row["entries_dtype"] = str(index_b.entries.dtype).replace("torch.", "")
    # The faster grouped SDPA: in the faster of fp32 and bf16 on this machine (bf16 SDPA ran 1.4x
    # slower than fp32 at 8k on one CPU and 1.5x faster at 98k, so neither dtype is assumed).
    queries_b = [q.to(torch.bfloat16) for q in queries]
    row["sdpa_bf16_ms"] = median_ms(
        lambda q: F.scaled_dot_product_attention(q.view(1, Hkv, H // Hkv, d), kb[None], vb[None]), queries_b
    )
    row["dense_best_dtype"] = "bfloat16" if row["sdpa_bf16_ms"] < dense_ms else "float32"
    row["dense_best_ms"] = min(dense_ms, row["sdpa_bf16_ms"])
    row["attend_best_ms"] = min(magic_ms, row["attend_bf16_ms"])
    row["speedup_best"] = row["dense_best_ms"] / row["attend_best_ms"]
    row.update(yardstick(row, kb, vb, seed, bandwidth, gemm))

    # Threads: the compiled step at each count, wall clock (every count is timed so, the first
    # too, so their ratio is the speed-up), against the bandwidth measured with as many threads.
    # Interleaved (every count timed on each query in turn), so that load on the machine hits all
    # counts alike; a speed-up above the thread count is timed again on three times the queries
    # before it is kept (and the row says so: ``thread_speedup_retimed``).
    fns = {str(t): (lambda q, t=t: attend(index, q, k, v, threads=t)) for t in kernel_threads}
    fns_b = {str(t): (lambda q, t=t: attend(index_b, q, kb, vb, threads=t)) for t in kernel_threads}
    by_threads, by_threads_bf16 = interleaved_wall_ms(fns, queries), interleaved_wall_ms(fns_b, queries)
    first = str(kernel_threads[0])
    row["thread_speedup_retimed"] = False
    if any(
        by[first] / by[str(t)] > t / kernel_threads[0] for by in (by_threads, by_threads_bf16) for t in kernel_threads
    ):
        more = queries * 3
        by_threads, by_threads_bf16 = interleaved_wall_ms(fns, more), interleaved_wall_ms(fns_b, more)
        row["thread_speedup_retimed"] = True
    floors = {}
    for t in kernel_threads:
        bw = (bandwidth_threads or {}).get(t, bandwidth)
        floors[str(t)] = {"fp32": 1e3 * touched / bw, "bf16": 1e3 * row["attend_bf16_bytes"] / bw}
    row["attend_threads_used"] = {str(t): fused.threads_used(H, n, t) for t in kernel_threads}
    row["attend_threads_ms"] = by_threads
    row["attend_bf16_threads_ms"] = by_threads_bf16
    row["attend_threads_floor_ms"] = floors
    row["thread_speedup"] = {t: by_threads[first] / ms for t, ms in by_threads.items()}
    row["thread_speedup_bf16"] = {t: by_threads_bf16[first] / ms for t, ms in by_threads_bf16.items()}
    if stages:
        row["stages_fp32"] = attend_stages.measure(index, k, v, queries, H, clock, bandwidth, gemm, magic_ms)
        row["stages_bf16"] = attend_stages.measure(
            index_b, kb, vb, queries, H, clock, bandwidth, gemm, row["attend_bf16_ms"]
        )
        row["reach_bf16"] = report.kernel_reach(row)
    return row


def print_table(rows) -> None:
    head = (
        f"{'shape':<18}{'n':>7}{'K,L':>8}{'build s':>9}{'b/256 ms':>9}{'upk ms/t':>9}"
        f"{'attend ms':>11}{'floor ms':>9}{'x floor':>8}{'att MB':>8}"
        f"{'torch ms':>9}{'SDPA ms':>9}{'floor ms':>9}{'x floor':>8}{'gqa ms':>8}"
        f"{'TopK ms':>9}{'SDPA/att':>9}{'budget':>8}{'bytes':>8}{'tbl/KV16':>9}{'err MP':>8}{'err TopK':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['shape']:<18}{r['n']:>7}{r['K']:>4},{r['L']:<3}{r['build_s']:>9.2f}"
            f"{r['build_ms_per_token_256']:>9.2f}{r['upkeep_ms_per_token_4096']:>9.3f}{r['attend_ms']:>11.2f}"
            f"{r['attend_floor_ms']:>9.2f}{r['attend_over_floor']:>7.1f}x{r['attend_bytes'] / 1e6:>8.1f}"
            f"{r['attend_torch_ms']:>9.1f}{r['sdpa_ms']:>9.1f}{r['sdpa_floor_ms']:>9.1f}{r['sdpa_over_floor']:>7.1f}x"
            f"{r['sdpa_gqa_ms']:>8.1f}{r['topk_ms']:>9.1f}"
            f"{r['speedup']:>8.1f}x{100 * r['budget']:>7.2f}%"
            f"{100 * r['bytes_ratio']:>7.1f}%{r['table_vs_kv_fp16']:>9.2f}"
            f"{r['err_magicpig']:>8.3f}{r['err_topk']:>9.3f}"
        )
    print(
        "attend = pigviz.lsh.fused.attend (compiled if numba is installed), float32 K/V, one thread; torch = the\n"
        "torch reference; floor = bytes touched / measured sequential memory bandwidth; x floor = time / floor;\n"
        "att MB = bytes attend touches; SDPA = dense reference (grouped queries, K/V read once); gqa = the same\n"
        "with enable_gqa=True; SDPA/att = speed-up of attend over SDPA; bytes = bytes touched by attend / K+V\n"
        "bytes of dense; tbl/KV16 = hash-table memory / KV cache in float16; err = mean ||o_hat - o|| / ||o||.",
        flush=True,
    )
    counts = list(rows[0]["attend_threads_ms"]) if rows else []
    head = (
        f"{'shape':<18}{'n':>7}{'K,L':>8}{'bf16 ms':>9}{'floor ms':>9}{'x floor':>8}{'ids':>7}"
        f"{'SDPA bf16':>10}{'fastest SDPA':>13}{'fast/best':>10}"
    )
    for t in counts:
        head += f"{'used':>5}{f'{t} thr fp32':>12}{'x floor':>8}{f'{t} thr bf16':>12}{'x floor':>8}{'speed-up':>9}"
    print("\n" + head)
    print("-" * len(head))
    for r in rows:
        line = (
            f"{r['shape']:<18}{r['n']:>7}{r['K']:>4},{r['L']:<3}{r['attend_bf16_ms']:>9.2f}"
            f"{r['attend_bf16_floor_ms']:>9.2f}{r['attend_bf16_over_floor']:>7.1f}x{r['entries_dtype']:>7}"
            f"{r['sdpa_bf16_ms']:>10.1f}{r['dense_best_ms']:>9.1f} {r['dense_best_dtype'][:4]:<3}"
            f"{r['speedup_best']:>9.1f}x"
        )
        for t in counts:
            fl = r["attend_threads_floor_ms"][t]
            line += (
                f"{r['attend_threads_used'][t]:>5}{r['attend_threads_ms'][t]:>12.2f}"
                f"{r['attend_threads_ms'][t] / fl['fp32']:>7.1f}x"
                f"{r['attend_bf16_threads_ms'][t]:>12.2f}{r['attend_bf16_threads_ms'][t] / fl['bf16']:>7.1f}x"
                f"{r['thread_speedup_bf16'][t]:>8.2f}x"
            )
        print(line)
    print(
        "bf16 = the same step on bf16 K/V with its own index (ids = the token ids' dtype), one thread; SDPA bf16 =\n"
        "dense (grouped) on the bf16 K/V; fastest SDPA = the faster of grouped SDPA's fp32 and bf16 (its dtype);\n"
        "fast/best = that / the faster of attend's fp32 and bf16 (no upkeep: the yardstick table has it); N thr = the\n"
        "compiled step with N threads, wall clock, against the bandwidth measured with N threads; used = the\n"
        "threads it ran on (fewer for a small step: fused.threads_used()); speed-up = bf16 time at the\n"
        "first count / at N (the same output bits at every count).",
        flush=True,
    )
    for r in rows:
        if r.get("thread_speedup_retimed"):
            above = [t for t in counts if r["thread_speedup_bf16"][t] > int(t) / int(counts[0])]
            print(
                f"  {r['shape']} {r['n']:,} ({r['K']}, {r['L']}): a speed-up above the thread count was timed again "
                f"on three times the queries; "
                + (
                    f"still above at {', '.join(above)} threads: this run does not say why"
                    if above
                    else "within the thread count after re-timing (the first timing was noise)"
                ),
                flush=True,
            )


def print_yardstick(rows) -> None:
    """The third table: dense's byte floor as the yardstick (see :func:`yardstick`)."""
    head = (
        f"{'shape':<18}{'n':>7}{'K,L':>8}{'bf16 floor':>11}{'flop floor':>11}"
        f"{'fp32 x fl':>10}{'bf16 x fl':>10}{'gqa x fl':>9}{'fastest dense':>15}{'ms':>7}"
        f"{'MP step':>9}{'x own':>7}{'upk/t':>7}{'MP/t 256':>9}{'/floor':>7}{'MP/t 4096':>10}{'/floor':>7}"
        f"{'fastest/MP 256':>15}{'4096':>6}"
    )
    print("\n" + head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['shape']:<18}{r['n']:>7}{r['K']:>4},{r['L']:<3}{r['dense_bf16_floor_ms']:>11.2f}"
            f"{r['dense_flop_floor_ms']:>11.2f}{r['sdpa_over_floor']:>9.1f}x{r['sdpa_bf16_over_floor']:>9.1f}x"
            f"{r['sdpa_gqa_over_floor']:>8.1f}x{r['fastest_dense']:>15}{r['fastest_dense_ms']:>7.1f}"
            f"{r['attend_bf16_ms']:>9.2f}{r['attend_bf16_over_floor']:>6.1f}x"
            f"{r['upkeep_bf16_ms_per_token_4096']:>7.3f}{r['mp_token_256_ms']:>9.2f}{r['mp_token_256_over_dense_floor']:>6.2f}x"
            f"{r['mp_token_4096_ms']:>10.2f}{r['mp_token_4096_over_dense_floor']:>6.2f}x"
            f"{r['fastest_dense_over_mp_token_256']:>14.2f}x{r['fastest_dense_over_mp_token_4096']:>5.2f}x"
        )
    print(
        "The yardstick (ms, one thread): bf16 floor = dense's bf16 K/V bytes / read bandwidth; flop floor = dense's\n"
        "multiply-adds (scores and value mix) at this core's measured float32 matmul rate, which no dense kernel on\n"
        "one core beats either; fp32/bf16/gqa x fl = each dense SDPA over its own dtype's byte floor; fastest dense =\n"
        "the fastest of the three as measured; MP step = MagicPIG's bf16 step, x own = over its own floor; upk/t =\n"
        "upkeep per generated token (4,096 inserted 256 at a time); MP/t N = step + upkeep + re-centring (2 x build\n"
        "per token) + the build (with its room) amortised over N generated tokens, /floor = over dense's bf16 byte\n"
        "floor; fastest/MP = the fastest dense's time over MP/t (above 1: MagicPIG ahead).",
        flush=True,
    )
    for r in rows:
        if r["shape"].startswith("Llama") and r["n"] >= 98304 and (r["K"], r["L"]) == (10, 150):
            share, own = r["mp_token_4096_over_dense_floor"], r["attend_bf16_over_floor"]
            met = {True: "met", False: "missed"}
            print(
                f"targets (issue 39), {r['shape']} {r['n']:,}: MagicPIG per token over 4,096 tokens "
                f"{share:.2f}x dense's bf16 floor (target <= {TARGET_SHARE_OF_DENSE_FLOOR}: "
                f"{met[share <= TARGET_SHARE_OF_DENSE_FLOOR]}); step {own:.1f}x its own floor "
                f"(target <= {TARGET_STEP_OVER_FLOOR}: {met[own <= TARGET_STEP_OVER_FLOOR]})",
                flush=True,
            )
            if "stages_bf16" in r:
                print(reach_text(r), flush=True)


def reach_text(row: dict) -> str:
    x = row["reach_bf16"]

    def verdict(ratio, target):
        return f"target {target}x: {'within reach' if ratio <= target else 'out of reach'}"

    return (
        f"  at this machine's floors: the step's K and V rows alone, at the rate random rows arrive, take "
        f"{x['gather_floors_ms']:.2f} ms = {x['gather_floors_over_own_floor']:.1f}x its own floor "
        f"({verdict(x['gather_floors_over_own_floor'], TARGET_STEP_OVER_FLOOR)}); all its stages' floors "
        f"{x['step_floors_ms']:.2f} ms = {x['step_floors_over_own_floor']:.1f}x. Per token over 4,096, those rows "
        f"plus the index's hashing at the matmul rate (build {x['build_hashing_ms'] / 1e3:.2f} s, re-centrings, "
        f"insertions): {x['token_4096_bound_ms']:.2f} ms = {x['token_4096_bound_over_dense_floor']:.2f}x dense's "
        f"bf16 floor ({verdict(x['token_4096_bound_over_dense_floor'], TARGET_SHARE_OF_DENSE_FLOOR)})"
    )


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8k context only, fewer repeats")
    parser.add_argument("--repeats", type=int, default=7, help="queries timed per row (median)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for every method (0: torch's default). One thread keeps the "
        "medians stable on a shared machine (the main table's attend runs one kernel thread)",
    )
    parser.add_argument(
        "--extra-L",
        type=int,
        default=200,
        help="also run this L at the longest context (0: skip) to land in a 2-5%% budget",
    )
    parser.add_argument(
        "--clock",
        choices=["auto", "wall", "cpu"],
        default="auto",
        help="what to time: wall clock, or this thread's CPU time (auto: cpu with one thread)",
    )
    parser.add_argument(
        "--kernel-threads",
        default="1,2",
        help="thread counts of the compiled step, timed side by side in each row (comma-separated)",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="also time the step's stages one by one, each against its own floor (needs numba)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the rows here as JSON")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    global clock
    clock_name = args.clock if args.clock != "auto" else ("cpu" if torch.get_num_threads() == 1 else "wall")
    clock = CLOCK[clock_name]
    contexts = [8192] if args.quick else [8192, 32768, 98304]
    repeats = 3 if args.quick else args.repeats
    kernel_threads = [int(t) for t in args.kernel_threads.split(",") if t.strip()]
    if not kernel_threads or min(kernel_threads) < 1:
        raise SystemExit(f"--kernel-threads takes counts >= 1, got {args.kernel_threads!r}")
    bandwidth = memory_bandwidth()
    bandwidth_threads = {t: (bandwidth if t == 1 else memory_bandwidth(threads=t)) for t in kernel_threads}
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s), float32 K/V, median of {repeats} steps; "
        f"compiled attend: {fused.available()}; sequential read bandwidth {bandwidth / 1e9:.1f} GB/s "
        + ", ".join(f"({bw / 1e9:.1f} GB/s with {t} threads)" for t, bw in bandwidth_threads.items() if t != 1)
        + f"; clock: {clock_name}; THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE')}; "
        f"{os.cpu_count()} CPUs ({cpu_model()}), load average {os.getloadavg()[0]:.1f}"
    )
    if args.stages and not fused.available():
        raise SystemExit("--stages needs the compiled path: pip install numba (pigviz[fast])")
    gemm = attend_stages.gemm_rate(clock)
    print(f"one-thread float32 matmul: {gemm / 1e9:.1f} G multiply-adds/s (floor of dense arithmetic and hashing)")
    rows = []
    for shape in SHAPES:
        for n in contexts:
            configs = [(10, 150)]
            if n == contexts[-1] and args.extra_L and not args.quick:
                configs.append((10, args.extra_L))
            for K, L in configs:
                rows.append(
                    run_row(
                        shape,
                        n,
                        K,
                        L,
                        repeats,
                        args.seed,
                        bandwidth,
                        kernel_threads,
                        bandwidth_threads,
                        gemm,
                        stages=args.stages,
                    )
                )
                print(f"  done {shape} n={n} (K, L)=({K}, {L})", file=sys.stderr, flush=True)
    sys.stderr.flush()
    print_table(rows)
    print_yardstick(rows)
    if args.stages:
        attend_stages.print_stages(
            [{**r, "dtype": dt, "stages_row": r[f"stages_{dt}"]} for r in rows for dt in ("fp32", "bf16")]
        )
    if args.json:
        write_json_atomic(
            args.json,
            {
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "fused": fused.available(),
                "bandwidth_gbs": bandwidth / 1e9,
                "bandwidth_threads_gbs": {str(t): bw / 1e9 for t, bw in bandwidth_threads.items()},
                "kernel_threads": kernel_threads,
                "cpu_count": os.cpu_count(),
                "cpu_model": cpu_model(),
                "clock": clock_name,
                "thp": os.environ.get("THP_MEM_ALLOC_ENABLE"),
                "command": " ".join(
                    ["python benchmarks/bench_attend.py", *(argv if argv is not None else sys.argv[1:])]
                ),
                "load_average": list(os.getloadavg()),
                "rows": rows,
            },
        )
        data_dir = Path(__file__).resolve().parents[1] / "pigviz" / "data"
        if args.json.resolve().parent == data_dir:  # the shipped file: its manifest entry follows it
            from pigviz.decode.evaluate import record_in_manifest

            record_in_manifest(
                args.json,
                "CPU timing of one decode step of one layer (1 torch thread, cpu clock, synthetic keys shaped like "
                "SmolLM2-135M and Llama-3.1-8B at 8k-96k tokens) on "
                f"{cpu_model()}: MagicPIG attend (compiled path, torch reference beside it) in float32 and bf16 K/V, "
                "on 1 and 2 kernel threads (interleaved), vs dense SDPA (grouped, float32 and bf16; enable_gqa) vs "
                "TopK; dense's byte and arithmetic floors and MagicPIG per generated token with its index (upkeep, "
                "re-centring, the build over 256 and 4,096 tokens); bytes touched and the bandwidth floor measured "
                f"in the same run; each stage of the step against its own floor (--stages); load average "
                f"{os.getloadavg()[0]:.1f} at the end.",
                " ".join(["python benchmarks/bench_attend.py", *(argv if argv is not None else sys.argv[1:])]),
                directory=data_dir,
            )
    return rows


if __name__ == "__main__":
    main()
