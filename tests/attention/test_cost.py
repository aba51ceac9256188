"""Bytes a decode step reads (pigviz.attention.cost): each method's count from first principles."""

import math

import pytest

from pigviz.attention import cost


def test_dense_reads_every_key_and_value():
    assert cost.dense_bytes(8192, 64) == 8192 * 128 * 2
    assert cost.dense_bytes(100, 64, dv=32, dtype_bytes=4) == 100 * 96 * 4
    assert cost.bytes_read("dense", n=8192, d=64, keys_read=8192) == cost.dense_bytes(8192, 64)


def test_oracles_score_every_key_then_read_their_values():
    n, d, m = 8192, 64, 300
    for method in ("topk", "oracle", "hybrid"):
        assert cost.bytes_read(method, n=n, d=d, keys_read=m) == n * d * 2 + m * d * 2
    # however few keys, at least half of dense (every key, no value) when d == dv
    assert cost.bytes_read("topk", n=n, d=d, keys_read=1) / cost.dense_bytes(n, d) > 0.5


def test_streaming_reads_only_its_keys_and_values():
    assert cost.bytes_read("streaming", n=8192, d=64, keys_read=68) == 68 * 128 * 2


def test_page_summaries_cost_a_sixteenth_of_the_cache_at_pages_of_16():
    n, d = 8192, 64
    summaries = cost.bytes_read("quest", n=n, d=d, keys_read=0, page=16)
    assert summaries / cost.dense_bytes(n, d) == pytest.approx(1 / 16)
    # a partial last page still has a summary
    assert cost.bytes_read("rank_all", n=17, d=d, keys_read=0, page=16) == 2 * 2 * d * 2
    assert cost.bytes_read("vattention", n=n, d=d, keys_read=10) == summaries + 10 * 128 * 2


def test_sparq_reads_r_channels_of_every_key():
    n, d, m = 8192, 64, 200
    got = cost.bytes_read("sparq", n=n, d=d, keys_read=m, r=8)
    assert got == n * 8 * 2 + m * 128 * 2 + 64 * 2
    with pytest.raises(ValueError, match="r "):
        cost.bytes_read("sparq", n=n, d=d, keys_read=m)


def test_magicpig_counts_planes_tables_counters_norms_and_reads():
    n, d, K, L, heads, c, s, m = 8192, 64, 10, 150, 9, 1200.0, 250.0, 318
    got = cost.bytes_read("magicpig", n=n, d=d, keys_read=m, K=K, L=L, heads=heads, candidates=c, sampled=s)
    want = K * L * d * 2 / heads + 2 * L * 4 + c * (4 + 2) + s * 4 + d * 4 + m * 128 * 2
    assert got == pytest.approx(want)
    # more tables scanned cost more; the same reads cost the same for mp_exact_top
    more = cost.bytes_read("magicpig", n=n, d=d, keys_read=m, K=K, L=2 * L, heads=heads, candidates=2 * c, sampled=s)
    assert more > got
    assert cost.bytes_read(
        "mp_exact_top", n=n, d=d, keys_read=m, K=K, L=L, heads=heads, candidates=c, sampled=s
    ) == pytest.approx(got)
    with pytest.raises(ValueError, match="K and L"):
        cost.bytes_read("magicpig", n=n, d=d, keys_read=m)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "flash"}, "method"),
        ({"n": 0}, "n"),
        ({"keys_read": 9000}, "keys_read"),
        ({"keys_read": -1}, "keys_read"),
        ({"dtype_bytes": 0}, "dtype_bytes"),
    ],
)
def test_bad_input_names_the_parameter(kwargs, match):
    args = {"method": "topk", "n": 8192, "d": 64, "keys_read": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        cost.bytes_read(**args)


def test_the_budget_hides_what_choosing_costs():
    # at the same keys read, the share of dense bytes orders the methods as the docstring's table says
    n, d, m = 8192, 64, 350
    b = {
        meth: cost.bytes_read(meth, n=n, d=d, keys_read=m, **kw) / cost.dense_bytes(n, d)
        for meth, kw in [
            ("streaming", {}),
            ("magicpig", {"K": 10, "L": 150, "heads": 9, "candidates": expected_ids(n), "sampled": m - 68}),
            ("quest", {}),
            ("sparq", {"r": 8}),
            ("topk", {}),
        ]
    }
    assert b["streaming"] < b["magicpig"] < b["quest"] <= b["sparq"] < b["topk"]
    assert math.isclose(b["streaming"], m / n)


def expected_ids(n, K=10, L=150):
    return L * n / 2**K
