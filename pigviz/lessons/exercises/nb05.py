"""Lesson 05, the KV budget, in two notebooks: the bill (05a: bytes per token, the entries a
query scans) and serving (05b: paging waste, fetch-or-recompute)."""

from __future__ import annotations

import numpy as np

from pigviz.lessons.exercises._framework import FLOAT, INT, Case, Exercise, Wrong

# --------------------------------------------------------------------------- references


def kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes):
    # One key and one value vector per layer and KV head.
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def candidates_per_query(n, K, L):
    bucket = n / 2**K  # n tokens spread evenly over the 2^K buckets of one table
    return L * bucket  # the query reads its own bucket in each of the L tables


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
    return [
        Case(
            "Llama-3.1-8B's 96k context (98,304 tokens) at (K, L) = (10, 150)",
            (98_304, 10, 150),
            "2^10 = 1,024 buckets of 96 tokens each; one bucket in each of 150 tables",
        ),
        Case("a 4k context at (K, L) = (10, 150)", (4_096, 10, 150)),
        Case(
            "1,000 tokens, which do not divide evenly into 1,024 buckets",
            (1_000, 10, 150),
            "an expected count need not be whole: 1,000 / 1,024 tokens per bucket on average",
        ),
        Case("fewer tokens than buckets: 100 tokens at K = 16, one table", (100, 16, 1)),
        Case("K = 1: two buckets, each holding half the tokens", (10, 1, 3), "3 tables x 10 / 2 tokens"),
        Case("an empty cache", (0, 10, 150), "no tokens, nothing to scan"),
        Case("a million tokens at (K, L) = (12, 600)", (1_000_000, 12, 600)),
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


def _candidates_one_table(n, K, L):
    return n / 2**K


def _candidates_k_buckets(n, K, L):
    return L * n / K


def _candidates_whole_tables(n, K, L):
    return L * n


def _candidates_floor(n, K, L):
    return L * n // 2**K


def _candidates_k_l_swapped(n, K, L):
    return K * n / 2**L  # K tables of L bits


def _candidates_all_but_one_bucket(n, K, L):
    return L * n / (2**K - 1)  # 2^K - 1 buckets: an off-by-one in the bucket count


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
        task="Bytes one token adds to the KV cache: a key and a value vector of head_dim numbers of "
        "dtype_bytes bytes each, in every layer and every KV head. All four arguments are positive "
        "integers (dtype_bytes is 4 for fp32, 2 for fp16 or bf16, 1 for fp8). Return the count in bytes "
        "(not bits, not KiB) as an integer.",
        reference=kv_bytes_per_token,
        make_cases=_kv_cases,
        output=INT,
        nudge="Picture what one new token leaves behind in one layer and one KV head: how many vectors, "
        "how many numbers in each, how many bytes per number. Then ask which arguments repeat that picture.",
        hint="The answer is one product: the four arguments and one constant, which counts the vectors a token "
        "stores per head. Integers multiplied stay integers, so nothing needs rounding.",
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
        signature="candidates_per_query(n, K, L) -> float",
        task="A query looks up its own bucket in each of L SimHash tables of K bits. If the n cached "
        "tokens spread evenly over a table's buckets, how many table entries does it scan in all? "
        "n, K and L are integers (n >= 0, where 0 is an empty cache; K >= 1; L >= 1); n need not "
        "divide evenly and may be smaller than the number of buckets. Return the expected count as a "
        "float: it need not be a whole number.",
        reference=candidates_per_query,
        make_cases=_candidates_cases,
        output=FLOAT,
        rtol=1e-9,
        atol=1e-9,
        nudge="First count the buckets K bits make, then how many of the n tokens one bucket holds on "
        "average. The query reads exactly one bucket in each table.",
        hint="`2 ** K` is the bucket count. Divide with `/` rather than `//`: an expected count need not be "
        "whole, and `n = 0` needs no special case.",
        difficulty=2,
        importance=3,
        minutes=5,
        notebook_key="05a",
        wrong=(
            Wrong(
                "forgets the L tables",
                _candidates_one_table,
                "the query reads one bucket in each of the L tables: multiply by L",
            ),
            Wrong("K buckets instead of 2^K", _candidates_k_buckets, "K bits make 2^K buckets, not K"),
            Wrong(
                "scans whole tables",
                _candidates_whole_tables,
                "a query reads only the bucket its own hash picks, about n / 2^K entries per table",
            ),
            Wrong(
                "integer division",
                _candidates_floor,
                "an expected count need not be a whole number: divide with /, not //",
            ),
            Wrong(
                "K and L swapped",
                _candidates_k_l_swapped,
                "K is the bits per table (2^K buckets) and L the number of tables: you used K tables of L bits",
            ),
            Wrong(
                "2^K - 1 buckets",
                _candidates_all_but_one_bucket,
                "K bits make exactly 2^K buckets (codes 0 to 2^K - 1): divide by 2^K, not 2^K - 1",
            ),
        ),
    ),
    Exercise(
        name="05.paged_waste",
        signature="paged_waste(lengths, page) -> float",
        task="Each sequence of `lengths` (a numpy array of integers >= 0, not all 0; a sequence of 0 "
        "tokens holds no page) gets ceil(length / page) pages of `page` slots each (page is an integer "
        ">= 1). Return the fraction of the allocated slots left unused, (allocated - used) / allocated, "
        "as a number between 0 and 1, not a percentage.",
        reference=paged_waste,
        make_cases=_waste_cases,
        output=FLOAT,
        rtol=1e-6,
        atol=1e-6,
        nudge="Count what is handed out, not what is used: each sequence rounds its own length up to "
        "whole pages, and the waste is the empty share of the slots handed out.",
        hint="`-(-a // b)` is an integer ceiling of `a / b` that works element by element on a numpy array; "
        "`.sum()` adds up an array. Divide the empty slots by the allocated ones, not by the used ones.",
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
        "(a prefill costs 2 n_params FLOPs per token, spread over tp GPUs of flops_per_gpu FLOP/s each, "
        "at full utilisation): return the bandwidth B at which both take the same time, in bytes per "
        "second (not GB/s). All arguments are positive numbers; tp is an integer >= 1.",
        reference=break_even_bandwidth,
        make_cases=_break_even_cases,
        output=FLOAT,
        rtol=1e-6,
        atol=0.0,
        nudge="Break-even means equal times. Write the time to recompute one token (its FLOPs over the "
        "replica's FLOP/s) and the time to fetch it (its bytes over a bandwidth), then solve for the bandwidth.",
        hint="The replica's FLOP/s is `flops_per_gpu * tp`. A time is work divided by a rate, and a "
        "bandwidth is bytes divided by seconds.",
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
