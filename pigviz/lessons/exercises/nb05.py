"""Lesson 05, the KV budget, in two notebooks: the bill (05a: bytes per token, the entries a
query scans) and serving (05b: paging waste, fetch-or-recompute)."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import FLOAT, INT, Case, Exercise, Wrong

# --------------------------------------------------------------------------- references


def kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes):
    # One key and one value vector per layer and KV head.
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def candidates_per_query(counts):
    counts = np.asarray(counts, dtype=np.float64)  # (L, 2**K): keys in each bucket of each table
    n = counts[0].sum()  # every table files all n cached keys
    if n == 0:
        return 0.0  # an empty cache: nothing to scan
    # in each table the query lands in bucket b a share n_b / n of the time and then scans its n_b entries
    return float((counts**2).sum() / n)


def paged_waste(lengths, page):
    lengths = np.asarray(lengths, dtype=np.int64)
    pages = -(-lengths // page)  # ceil(length / page) in exact integer arithmetic
    allocated = int(pages.sum()) * page  # slots handed out
    used = int(lengths.sum())
    return (allocated - used) / allocated


def break_even_bandwidth(bytes_per_token, n_params, flops_per_gpu, tp):
    recompute_s = 2 * n_params / (flops_per_gpu * tp)  # prefill: 2 FLOPs per parameter per token
    return bytes_per_token / recompute_s  # bytes/s at which fetching takes as long


# --------------------------------------------------------------------------- cases


def _kv_cases():
    return [
        Case(
            "Llama-3.1-70B at fp16: 80 layers, 8 KV heads, head_dim 128",
            (80, 8, 128, 2),
            "K and V, every layer and KV head: 2 x 80 x 8 x 128 x 2 bytes",
        ),
        Case("fp8: one byte per element", (32, 8, 128, 1)),
        Case("SmolLM2-135M at fp32: 30 layers, 3 KV heads, head_dim 64", (30, 3, 64, 4)),
        Case("one layer, one head, head_dim 1, 1 byte", (1, 1, 1, 1), "one key number and one value number"),
        Case("a large model", (126, 16, 128, 2)),
    ]


def _candidates_cases():
    rng = np.random.default_rng(502)
    random = np.stack([np.bincount(rng.integers(0, 1024, 4096), minlength=1024) for _ in range(150)])
    lean = np.exp(-np.arange(256) / 12.0)  # keys leaning one way: the first buckets crowd
    leaning = np.stack([np.bincount(rng.choice(256, 2000, p=lean / lean.sum()), minlength=256) for _ in range(20)])
    alone = np.zeros((1, 2**16), dtype=np.int64)
    alone[0, rng.choice(2**16, 100, replace=False)] = 1
    return [
        Case(
            "two tables of 4 buckets holding 3, 1, 0, 0 and 2, 2, 0, 0 keys",
            (np.array([[3, 1, 0, 0], [2, 2, 0, 0]]),),
            "in the first table the query lands in the 3-key bucket 3 times in 4 and in the 1-key bucket once "
            "in 4; in the second, in each 2-key bucket half the time; the two tables' scans add up",
        ),
        Case(
            "even buckets: notebook 05a's 98,304 tokens in 150 tables of 1,024 buckets, 96 keys each",
            (np.full((150, 1024), 96),),
            "with even buckets every bucket the query can land in holds n / 2^K keys: L n / 2^K in all",
        ),
        Case(
            "every key in one bucket, in each of two tables",
            (np.array([[0, 0, 5, 0], [5, 0, 0, 0]]),),
            "a query that shares its bucket with every key scans all n entries of that table",
        ),
        Case("4,096 random keys in 150 tables of 1,024 buckets", (random,)),
        Case("2,000 keys leaning one way, 20 tables of 256 buckets", (leaning,)),
        Case(
            "more buckets than keys: 100 keys, each alone in a bucket of 2^16",
            (alone,),
            "a key alone in its bucket: wherever the query lands it scans 1 entry",
        ),
        Case(
            "an empty cache: 3 tables of 8 buckets, no keys",
            (np.zeros((3, 8), dtype=np.int64),),
            "no keys, nothing to scan: return 0.0 (0 / 0 is not a count)",
        ),
    ]


def _waste_cases():
    rng = np.random.default_rng(501)
    return [
        Case(
            "one sequence of 17 tokens, pages of 16",
            (np.array([17]), 16),
            "17 tokens need 2 pages = 32 slots, 15 unused: waste = 15/32",
        ),
        Case(
            "lengths that fill their pages exactly",
            (np.array([16, 32, 48]), 16),
            "a multiple of the page size needs no extra page: waste 0",
        ),
        Case("mixed lengths, pages of 16", (np.array([1, 15, 16, 17, 100]), 16)),
        Case("pages of 1 token", (np.array([3, 7, 11]), 1), "one-token pages waste nothing"),
        Case("a zero-length sequence among others", (np.array([0, 5, 20]), 8), "a sequence of 0 tokens holds 0 pages"),
        Case("one page larger than every sequence", (np.array([3, 9, 30]), 128)),
        Case(
            "4,000 log-normal lengths, pages of 16",
            (np.clip(rng.lognormal(6.4, 1.0, 4000).astype(np.int64), 16, 128_000), 16),
        ),
    ]


def _break_even_cases():
    return [
        Case(
            "Llama-70B per-token KV (327,680 B), 70e9 parameters, one H100",
            (327_680, 70e9, 989.5e12, 1),
            "recomputing a token costs 2 N FLOPs; time = 2 N / (FLOP/s x tp); bandwidth = bytes / time",
        ),
        Case(
            "the same model on 4 GPUs (tensor parallel)",
            (327_680, 70e9, 989.5e12, 4),
            "tp GPUs recompute tp times faster, so fetching must be tp times faster to break even",
        ),
        Case("small numbers", (1000, 1e6, 1e12, 2)),
        Case("an 8B model in fp8", (65_536, 8e9, 1979e12, 1)),
    ]


# --------------------------------------------------------------------------- wrong versions


def _kv_no_factor_2(layers, kv_heads, head_dim, dtype_bytes):
    return layers * kv_heads * head_dim * dtype_bytes


def _kv_bits(layers, kv_heads, head_dim, dtype_bytes):
    return 2 * layers * kv_heads * head_dim * dtype_bytes * 8


def _kv_no_layers(layers, kv_heads, head_dim, dtype_bytes):
    return 2 * kv_heads * head_dim * dtype_bytes


def _kv_fp16_hard_coded(layers, kv_heads, head_dim, dtype_bytes):
    return 2 * layers * kv_heads * head_dim * 2  # assumes 16-bit numbers, whatever dtype_bytes says


def _kv_per_layer(layers, kv_heads, head_dim, dtype_bytes):
    return 2 * layers * head_dim * dtype_bytes  # one K and V per layer, as if every head shared them


def _kv_kib(layers, kv_heads, head_dim, dtype_bytes):
    return 2 * layers * kv_heads * head_dim * dtype_bytes / 1024  # KiB, not bytes


def _candidates_even(counts):
    counts = np.asarray(counts, dtype=np.float64)
    L, buckets = counts.shape
    return L * counts[0].sum() / buckets  # as if the query picked every bucket equally often


def _candidates_mean_over_tables(counts):
    counts = np.asarray(counts, dtype=np.float64)
    n = counts[0].sum()
    if n == 0:
        return 0.0
    per_table = (counts**2).sum(axis=1) / n  # each table's expected scan
    return float(per_table.mean())  # averaged over the L tables, not added up


def _candidates_first_table(counts):
    counts = np.asarray(counts, dtype=np.float64)[0]  # one table only
    return float((counts**2).sum() / counts.sum()) if counts.sum() else 0.0


def _candidates_whole_tables(counts):
    return float(np.asarray(counts, dtype=np.float64).sum())  # every entry of every table


def _candidates_floor(counts):
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts[0].sum())
    return int((counts**2).sum() // n) if n else 0  # integer division


def _candidates_fullest_bucket(counts):
    return float(np.asarray(counts, dtype=np.float64).max(axis=1).sum())  # the crowded bucket every time


def _waste_over_used(lengths, page):
    lengths = np.asarray(lengths, np.int64)
    allocated = int((-(-lengths // page)).sum()) * page
    return (allocated - int(lengths.sum())) / int(lengths.sum())


def _waste_floor(lengths, page):
    lengths = np.asarray(lengths, np.int64)
    allocated = int((lengths // page).sum()) * page
    return (allocated - int(lengths.sum())) / allocated if allocated else 0.0


def _waste_plus_one(lengths, page):
    lengths = np.asarray(lengths, np.int64)
    allocated = int((lengths // page + 1).sum()) * page
    return (allocated - int(lengths.sum())) / allocated


def _waste_pooled(lengths, page):
    lengths = np.asarray(lengths, np.int64)
    allocated = -(-int(lengths.sum()) // page) * page  # rounds the batch's total, not each sequence
    return (allocated - int(lengths.sum())) / allocated


def _waste_percent(lengths, page):
    lengths = np.asarray(lengths, np.int64)
    allocated = int((-(-lengths // page)).sum()) * page
    return 100 * (allocated - int(lengths.sum())) / allocated


def _break_even_no_2(bytes_per_token, n_params, flops_per_gpu, tp):
    return bytes_per_token * flops_per_gpu * tp / n_params


def _break_even_no_tp(bytes_per_token, n_params, flops_per_gpu, tp):
    return bytes_per_token * flops_per_gpu / (2 * n_params)


def _break_even_inverted(bytes_per_token, n_params, flops_per_gpu, tp):
    return 2 * n_params / (flops_per_gpu * tp) / bytes_per_token


def _break_even_gbps(bytes_per_token, n_params, flops_per_gpu, tp):
    return bytes_per_token / (2 * n_params / (flops_per_gpu * tp)) / 1e9  # GB/s, not bytes/s


def _break_even_tp_divides(bytes_per_token, n_params, flops_per_gpu, tp):
    return bytes_per_token / (2 * n_params * tp / flops_per_gpu)  # tp on the wrong side


EXERCISES = [
    Exercise(
        name="05.kv_bytes_per_token",
        signature="kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes) -> int",
        task="Bytes one token adds to the KV cache of a model with these layers, KV heads and head_dim, "
        "stored at dtype_bytes bytes per number. All four arguments are positive integers (dtype_bytes is "
        "4 for fp32, 2 for fp16 or bf16, 1 for fp8). Return the count in bytes (not bits, not KiB) as an "
        "integer.",
        reference=kv_bytes_per_token,
        make_cases=_kv_cases,
        output=INT,
        nudge="Picture what one new token leaves behind in one layer and one KV head, down to the bytes; then "
        "ask which arguments repeat that picture.",
        hint="Stay with integer arithmetic (`*`, no `/`) and the result is already an int. If a case fails, "
        "its message says which part of the picture is missing.",
        difficulty=1,
        importance=4,
        minutes=3,
        notebook_key="05a",
        wrong=(
            Wrong(
                "forgets the factor 2 for K and V",
                _kv_no_factor_2,
                "the cache holds a key AND a value per layer and head: multiply by 2",
            ),
            Wrong("counts bits", _kv_bits, "dtype_bytes is already in bytes: do not multiply by 8 (that counts bits)"),
            Wrong("forgets the layers", _kv_no_layers, "every layer keeps its own keys and values: multiply by layers"),
            Wrong(
                "hard-codes 2 bytes per number",
                _kv_fp16_hard_coded,
                "the number format is the dtype_bytes argument (fp8 is 1 byte, fp32 is 4): do not assume 16-bit",
            ),
            Wrong(
                "one K and V per layer, not per KV head",
                _kv_per_layer,
                "every KV head of a layer keeps its own key and value vectors: multiply by kv_heads",
            ),
            Wrong(
                "returns KiB",
                _kv_kib,
                "return bytes: dividing by 1024 gives KiB",
            ),
        ),
    ),
    Exercise(
        name="05.candidates_per_query",
        signature="candidates_per_query(counts) -> float",
        task="The table entries a query scans on average, over L SimHash tables whose buckets are uneven. "
        "counts is an (L, 2**K) array of integers >= 0: counts[t, b] keys sit in bucket b of table t, and "
        "every table files all n cached keys, so every row adds up to n. The query lands in a bucket as often "
        "as a random cached key does, and scans every entry of the bucket it lands in, one bucket per table. "
        "Return the entries it scans on average in all L tables together, as a float. n may be 0 (an empty "
        "cache) and may be smaller than the number of buckets.",
        reference=candidates_per_query,
        make_cases=_candidates_cases,
        output=FLOAT,
        rtol=1e-9,
        atol=1e-9,
        nudge="This is an expected count. In one table, where can the query land, how likely is each bucket, "
        "and how many entries does it then scan? Then the tables add up.",
        hint="Whole-array numpy does every table at once, and a row's `.sum()` gives n. Decide what an empty "
        "cache scans before you divide by n.",
        difficulty=2,
        importance=3,
        minutes=6,
        notebook_key="05a",
        wrong=(
            Wrong(
                "every bucket equally likely",
                _candidates_even,
                "that is the even figure L n / 2^K: the query lands in a bucket as often as a key does, so the "
                "crowded bucket is the likelier one (n_b / n), not 1 / 2^K",
            ),
            Wrong(
                "mean over the tables instead of their sum",
                _candidates_mean_over_tables,
                "the query scans one bucket in every one of the L tables: add the tables' expected scans, do not "
                "average them (dividing by the whole array's sum, L n, instead of one row's n averages them too)",
            ),
            Wrong(
                "one table only",
                _candidates_first_table,
                "the query reads one bucket in each of the L tables: add up every table's expected scan",
            ),
            Wrong(
                "scans whole tables",
                _candidates_whole_tables,
                "the query reads only the bucket it lands in, not every entry of the table",
            ),
            Wrong(
                "integer division",
                _candidates_floor,
                "an expected count need not be a whole number: divide with /, not //",
            ),
            Wrong(
                "the fullest bucket every time",
                _candidates_fullest_bucket,
                "the query lands in the fullest bucket only some of the time: weigh each bucket by how often "
                "the query lands there",
            ),
        ),
    ),
    Exercise(
        name="05.paged_waste",
        signature="paged_waste(lengths, page) -> float",
        task="Each sequence of `lengths` (a numpy array of integers >= 0, not all 0; a sequence of 0 "
        "tokens holds no page) gets ceil(length / page) pages of `page` slots each (page is an integer "
        ">= 1). Return the fraction of the allocated slots that hold no token, as a number between 0 and 1, "
        "not a percentage.",
        reference=paged_waste,
        make_cases=_waste_cases,
        output=FLOAT,
        rtol=1e-6,
        atol=1e-6,
        nudge="Count what is handed out, not what is used: each sequence rounds its own length up to "
        "whole pages, and the waste is the empty share of the slots handed out.",
        hint="Work on the whole `lengths` array at once: numpy rounds element by element (`np.ceil`, or "
        "integer `//`, which rounds down, turned into a round-up), and `.sum()` adds up an array.",
        difficulty=2,
        importance=3,
        minutes=6,
        notebook_key="05b",
        wrong=(
            Wrong(
                "divides by the used slots",
                _waste_over_used,
                "the fraction is of the allocated slots: divide by allocated, not by used",
            ),
            Wrong(
                "floor instead of ceil",
                _waste_floor,
                "a partly filled page is still a whole page: round the page count up",
            ),
            Wrong(
                "length // page + 1 pages",
                _waste_plus_one,
                "a sequence that fills its pages exactly needs no extra page: use ceil, not floor + 1",
            ),
            Wrong(
                "rounds the batch's total to pages",
                _waste_pooled,
                "pages belong to one sequence each: round every sequence's length up to pages, then add them; "
                "rounding the summed lengths shares pages between sequences",
            ),
            Wrong(
                "returns a percentage",
                _waste_percent,
                "return the fraction (0.25), not the percentage (25): do not multiply by 100",
            ),
        ),
    ),
    Exercise(
        name="05.break_even_bandwidth",
        signature="break_even_bandwidth(bytes_per_token, n_params, flops_per_gpu, tp) -> float",
        task="Fetching a cached token's KV (bytes_per_token bytes at a bandwidth B) against recomputing it "
        "(a prefill costs about 2 n_params FLOPs per token, computed on tp GPUs of flops_per_gpu FLOP/s "
        "each at full utilisation): return the bandwidth B at which both take the same time, in bytes per "
        "second (not GB/s). All arguments are positive numbers; tp is an integer >= 1.",
        reference=break_even_bandwidth,
        make_cases=_break_even_cases,
        output=FLOAT,
        rtol=1e-6,
        atol=0.0,
        nudge="Break-even means equal times: fetching one token takes exactly as long as recomputing it. "
        "Write each time from what the arguments give you, then solve for the bandwidth.",
        hint="Let the units guide you: FLOPs over FLOP/s is seconds, bytes over seconds is bytes per second. "
        "Then compare your answers for tp = 1 and tp = 4: which way should more GPUs move the line?",
        difficulty=2,
        importance=4,
        minutes=6,
        notebook_key="05b",
        wrong=(
            Wrong(
                "forgets the 2 FLOPs per parameter",
                _break_even_no_2,
                "a forward pass costs about 2 FLOPs per parameter per token (a multiply and an add)",
            ),
            Wrong("ignores tp", _break_even_no_tp, "tp GPUs share the recompute: its time is divided by tp"),
            Wrong(
                "seconds per byte instead of bytes per second",
                _break_even_inverted,
                "bandwidth is bytes / seconds: bytes_per_token divided by the recompute time",
            ),
            Wrong(
                "returns GB/s",
                _break_even_gbps,
                "return bytes per second: dividing by 1e9 gives GB/s",
            ),
            Wrong(
                "multiplies the recompute time by tp",
                _break_even_tp_divides,
                "more GPUs make the recompute faster: divide its time by tp, do not multiply",
            ),
        ),
    ),
]
