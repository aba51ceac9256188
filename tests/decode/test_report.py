"""The computed words and numbers notebook 07's speed prose is built from."""

import re

import pytest

from pigviz.decode import report
from pigviz.memory import budget as kv_budget
from pigviz.memory.model_shapes import get_model_shape


@pytest.mark.parametrize(
    "ratio,word",
    [
        (0.5, "faster than"),
        (0.95, "about as fast as"),
        (1.0, "about as fast as"),
        (1.09, "about as fast as"),
        (1.2, "slower than"),
        (3.0, "slower than"),
    ],
)
def test_compare_picks_the_word_by_the_stated_band(ratio, word):
    assert report.compare(ratio) == word


def test_compare_band_is_symmetric_in_ratio_and_takes_other_words():
    edge = 1 + report.SAME_WITHIN
    assert report.compare(edge * 1.001) == "slower than" and report.compare(1 / (edge * 1.001)) == "faster than"
    assert report.compare(edge * 0.999) == report.compare(1 / (edge * 0.999)) == "about as fast as"
    assert report.compare(2.0, within=1.5, words=("a", "b", "c")) == "b"
    with pytest.raises(ValueError, match="positive ratio"):
        report.compare(0.0)


def _row(context, method, step, attn, step_cpu, attn_cpu, budget=1.0):
    return {
        "context": context,
        "method": method,
        "step_ms": step,
        "attention_ms": attn,
        "rest_ms": step - attn,
        "step_cpu_ms": step_cpu,
        "attention_cpu_ms": attn_cpu,
        "index_seconds": 0.0,
        "budget": budget,
    }


def test_speed_summary_ratios_shares_and_noise_gauge():
    rows = [
        _row(8, "magicpig", 90.0, 30.0, 45.0, 15.0, 0.05),
        _row(8, "dense", 100.0, 40.0, 50.0, 20.0),
        _row(4, "dense", 10.0, 5.0, 10.0, 5.0),
        _row(4, "magicpig", 10.0, 5.0, 10.0, 5.0),
        _row(2, "magicpig", 1.0, 1.0, 1.0, 1.0),
    ]  # no dense at 2: left out
    s = report.speed_summary(rows)
    assert [x["context"] for x in s] == [4, 8]
    big = s[1]
    assert big["dense_attention_share_wall"] == pytest.approx(0.4)
    assert big["dense_attention_share_cpu"] == pytest.approx(0.4)
    assert big["attention_ratio_wall"] == pytest.approx(0.75) and big["attention_ratio_cpu"] == pytest.approx(0.75)
    assert big["step_ratio_wall"] == pytest.approx(0.9) and big["step_ratio_cpu"] == pytest.approx(0.9)
    assert big["rest_gap_wall"] == pytest.approx(0.0) and big["rest_gap_cpu"] == pytest.approx(0.0)
    assert big["budget"] == 0.05
    assert s[0]["attention_ratio_cpu"] == 1.0


def test_speed_summary_against_the_best_dense_takes_the_fastest_form_at_each_context():
    rows = [
        _row(8, "dense", 100.0, 40.0, 100.0, 40.0),
        _row(8, "dense_grouped", 80.0, 20.0, 80.0, 20.0),
        _row(8, "dense_grouped_bf16", 85.0, 25.0, 85.0, 25.0),
        _row(8, "magicpig", 70.0, 10.0, 70.0, 10.0, 0.05),
        _row(4, "dense", 50.0, 10.0, 50.0, 10.0),
        _row(4, "dense_grouped_bf16", 52.0, 12.0, 52.0, 12.0),
        _row(4, "magicpig", 45.0, 5.0, 45.0, 5.0, 0.05),
    ]
    best = report.speed_summary(rows, against="best")
    assert [(s["context"], s["against"]) for s in best] == [(4, "dense"), (8, "dense_grouped")]
    assert best[1]["attention_ratio_cpu"] == pytest.approx(0.5) and best[1]["step_ratio_cpu"] == pytest.approx(70 / 80)
    assert [s["against"] for s in report.speed_summary(rows)] == ["dense", "dense"]  # transformers' SDPA
    assert report.speed_summary(rows)[1]["attention_ratio_cpu"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="against must be 'dense' or 'best'"):
        report.speed_summary(rows, against="grouped")


def test_fair_rows_keep_the_first_row_of_every_dense_form_and_magicpig():
    rows = [_speed_row(4096, "dense", t=1), _speed_row(4096, "dense_grouped", t=1), _speed_row(4096, "topk"),
            _speed_row(4096, "dense_grouped_bf16", t=1), _speed_row(4096, "magicpig", t=1),
            _speed_row(4096, "dense_grouped", t=4)]  # fmt: skip
    assert report.fair_rows({"rows": rows}) == [rows[0], rows[1], rows[3], rows[4]]
    with pytest.raises(ValueError, match="list of 'rows'"):
        report.fair_rows({"rows": None})


def test_speed_summary_of_the_shipped_file_matches_its_table():
    speed = report.load_result(report.SPEED_FILE)
    summary = report.speed_summary(speed["rows"])
    assert summary and all(0 < s["budget"] < 1 for s in summary)
    table = report.speed_table(speed["rows"])
    for s in summary:
        assert f"{s['attention_ratio_cpu']:.2f}x" in table and f"{s['attention_ratio_wall']:.2f}x" in table


def test_gpu_step_envelope_is_arithmetic_on_named_assumptions():
    e = report.gpu_step_envelope("SmolLM2-135M", 8192)
    smol = get_model_shape("SmolLM2-135M")
    per_tok = kv_budget.kv_bytes_per_token(smol, dtype_bytes=report.ASSUMED_GPU_DTYPE_BYTES)
    assert e["kv_bytes"] == 8192 * per_tok and e["weight_bytes"] == smol.params * report.ASSUMED_GPU_DTYPE_BYTES
    assert e["kv_read_s"] == pytest.approx(e["kv_bytes"] / report.ASSUMED_HBM_BYTES_PER_S)
    assert e["kernels"] == smol.layers * report.ASSUMED_KERNELS_PER_LAYER
    assert e["launch_s"] == pytest.approx(e["kernels"] * report.ASSUMED_LAUNCH_SECONDS)
    # Halving the bandwidth doubles the read times and leaves the launches alone.
    slow = report.gpu_step_envelope("SmolLM2-135M", 8192, bandwidth=report.ASSUMED_HBM_BYTES_PER_S / 2)
    assert slow["kv_read_s"] == pytest.approx(2 * e["kv_read_s"]) and slow["launch_s"] == e["launch_s"]


def test_same_band_widens_to_the_measured_noise_and_moves_the_verdict():
    quiet = [_row(8, "dense", 100.0, 40.0, 50.0, 20.0), _row(8, "magicpig", 100.0, 40.0, 51.0, 20.0)]
    noisy = [_row(8, "dense", 100.0, 40.0, 50.0, 20.0), _row(8, "magicpig", 118.0, 40.0, 56.0, 20.0)]
    # Quiet: the rest differs by 1/30 (CPU) and 0 (wall), under the floor, so the band is SAME_WITHIN.
    assert report.same_band(report.speed_summary(quiet)) == report.SAME_WITHIN
    assert report.same_band(report.speed_summary(quiet), "wall") == report.SAME_WITHIN
    # Noisy: the identical rest differs by 20% in CPU time and 30% on the wall clock.
    s = report.speed_summary(noisy)
    assert report.same_band(s) == pytest.approx(0.2) and report.same_band(s, "wall") == pytest.approx(0.3)
    # 1.17x is "slower" inside the floor band, "about as fast as" inside a 20% noise band.
    assert report.compare(1.17) == "slower than"
    assert report.compare(1.17, within=report.same_band(s)) == "about as fast as"
    assert report.same_band([]) == report.SAME_WITHIN
    with pytest.raises(ValueError, match="clock"):
        report.same_band(s, "gpu")


def test_same_band_of_the_shipped_file_is_at_least_the_floor_and_its_noise():
    summary = report.speed_summary(report.load_result(report.SPEED_FILE)["rows"])
    for clock in ("cpu", "wall"):
        band = report.same_band(summary, clock)
        assert band >= report.SAME_WITHIN and all(band >= s[f"rest_gap_{clock}"] for s in summary)


def _mem(row, peak, index=0.0, decode_peak=None):
    return dict(row, peak_rss_mb=peak, index_mb=index, decode_peak_rss_mb=decode_peak)


def test_memory_check_compares_the_peak_with_dense_plus_the_index():
    rows = [
        _mem(_row(8, "dense", 1, 1, 1, 1), 2000.0, decode_peak=1000.0),
        _mem(_row(8, "magicpig", 1, 1, 1, 1), 2000.0, index=500.0, decode_peak=1560.0),  # 60 over: within 64
        _mem(_row(4, "dense", 1, 1, 1, 1), 900.0),  # no decoding peak: the whole process's is compared
        _mem(_row(4, "magicpig", 1, 1, 1, 1), 1400.0, index=400.0, decode_peak=1300.0),
    ]
    small, big = report.memory_check(rows)
    assert (small["context"], small["measure"]) == (4, "peak_rss_mb")
    assert small["excess_mb"] == pytest.approx(100.0) and not small["holds"]
    assert small["limit_mb"] == pytest.approx(900.0 + 400.0 + report.MEMORY_TOLERANCE_MB)
    assert (big["measure"], big["excess_mb"], big["holds"]) == ("decode_peak_rss_mb", pytest.approx(60.0), True)
    assert not report.memory_check(rows, tolerance_mb=50)[1]["holds"]
    assert report.memory_check(rows, tolerance_mb=100)[0]["holds"]  # the bound itself counts as holding


def test_memory_check_credits_a_smaller_kv_cache():
    # MagicPIG's sampled layers in bf16: its cache is 150 MB smaller, so its peak must be too.
    rows = [
        dict(_mem(_row(8, "dense", 1, 1, 1, 1), 2000.0, decode_peak=1000.0), kv_cache_mb=360.0),
        dict(_mem(_row(8, "magicpig", 1, 1, 1, 1), 2000.0, index=300.0, decode_peak=1300.0), kv_cache_mb=210.0),
    ]
    (m,) = report.memory_check(rows)
    assert m["kv_saved_mb"] == pytest.approx(150.0)
    assert m["excess_mb"] == pytest.approx(1300.0 - (1000.0 + 300.0 - 150.0))  # 150 over: a second copy
    assert not m["holds"]
    rows[1]["decode_peak_rss_mb"] = 1160.0
    assert report.memory_check(rows)[0]["holds"]


def test_memory_check_skips_rows_without_memory_fields_and_checks_its_tolerance():
    old = [_row(8, "dense", 1, 1, 1, 1), _row(8, "magicpig", 1, 1, 1, 1)]
    assert report.memory_check(old) == []
    for bad in (-1, "64", None, True):
        with pytest.raises(ValueError, match="tolerance_mb must be a number >= 0"):
            report.memory_check(old, tolerance_mb=bad)


def test_speed_table_shows_memory_only_when_every_row_has_it():
    plain = [_row(8, "dense", 10, 4, 10, 4), _row(8, "magicpig", 9, 3, 9, 3, 0.05)]
    assert "peak MB" not in report.speed_table(plain)
    with_memory = [_mem(plain[0], 1234.4), _mem(plain[1], 1500.0, index=250.0)]
    table = report.speed_table(with_memory)
    assert "peak MB" in table and " 1234 " in table and " 250" in table


# -- the rows notebook 07 renders ------------------------------------------------------------------------------
def _speed_row(context, method, **extra):
    return {"context": context, "method": method, **extra}


def test_speed_pairs_keep_the_first_dense_and_magicpig_row_per_context():
    rows = [_speed_row(4096, "dense", t=1), _speed_row(4096, "magicpig", t=1), _speed_row(4096, "topk"),
            _speed_row(4096, "dense", t=4), _speed_row(8174, "magicpig", t=1)]  # fmt: skip
    assert report.speed_pairs({"rows": rows}) == [rows[0], rows[1], rows[4]]
    with pytest.raises(ValueError, match="list of 'rows'"):
        report.speed_pairs({"rows": None})


def test_headline_rows_judge_each_baseline_against_magicpigs_seed_range():
    seeds = (0.10, 0.12, 0.14)
    rows = [{"method": "magicpig", "K": 10, "L": 150, "budget": 0.06, "kl_mean": kl, "top1_agreement": 0.9,
             "perplexity": 9.0} for kl in seeds]  # fmt: skip
    for name, kl in (("topk", 0.01), ("quest", 0.11), ("streaming", 1.6)):
        rows.append({"method": name, "K": 10, "L": 150, "budget": 0.06, "kl_mean": kl, "top1_agreement": 0.5})
    data = {"settings": {"configs": [[10, 150]]}, "rows": rows}
    verdict = {r["attention"]: r["against MagicPIG"] for r in report.headline_rows(data, 10, 150)}
    # MagicPIG's row states its seeds' range: the lowest and the highest KL
    stated = [float(x) for x in re.findall(r"\d+\.\d+", verdict["MagicPIG (10, 150)"])]
    assert stated == pytest.approx([min(seeds), max(seeds)], abs=5e-4)
    assert verdict["TopK (oracle)"] == "closer to dense" and verdict["StreamingLLM"] == "further from dense"
    assert list(verdict.values())[2] == "within MagicPIG's seed range"  # Quest, between the seeds


def test_kernel_rows_show_a_speed_up_only_where_the_step_split():
    attend = report.load_result(report.ATTEND_FILE)
    rows = report.kernel_rows(attend)
    assert len(rows) == len(report.kernel_runs(attend)) > 0
    for r in rows:
        split = r["2 threads asked: used"] > 1
        assert (r["2 threads: bf16 speed-up"] is not None) == split
    with pytest.raises(ValueError, match="no row with a bf16 thread sweep"):
        report.kernel_runs(attend, 3, 7)


def test_authors_rows_give_both_ratios_sorted():
    authors = report.load_result(report.AUTHORS_FILE)
    rows = report.authors_rows(authors)
    assert [(r["shape"], r["tokens"], r["threads"]) for r in rows] == sorted(
        (r["shape"], r["n"], r["threads"]) for r in authors["rows"]
    )
    for r in rows:
        assert r["authors / same work"] == pytest.approx(r["authors ms"] / r["pigviz, same work: ms"])
        assert r["authors / whole step"] == pytest.approx(r["authors ms"] / r["pigviz, whole step: ms"])


# -- the index's cost per generated token and dense's yardsticks (issue 39) ----------------------------------
def _timed(context, method, attn_cpu, *, floor=None, step_cpu=None, build=0.0, upkeep=None):
    """A speed row as bench_decode.py writes it: ``upkeep`` (CPU ms per generated token) only in files since
    the upkeep was timed; the wall clock here is the CPU time plus 1 ms, to tell the clocks apart."""
    step_cpu = attn_cpu + 50.0 if step_cpu is None else step_cpu
    row = {
        **_row(context, method, step_cpu + 1.0, attn_cpu + 1.0, step_cpu, attn_cpu),
        "index_seconds": build + 0.5 if build else 0.0,
        "index_cpu_seconds": build,
    }
    if floor is not None:
        row["attention_floor_ms"] = floor
    if upkeep is not None:
        row.update(upkeep_cpu_ms_per_token=upkeep, upkeep_ms_per_token=upkeep + 0.25)
    return row


def _file(upkeep=True, bf16=True):
    """Two contexts: at 4096 the grouped fp32 dense is the fastest, at 8192 the bf16 one."""
    rows = [
        _timed(4096, "dense", 30.0, floor=14.0),
        _timed(4096, "dense_grouped", 20.0, floor=14.0),
        _timed(4096, "dense_grouped_bf16", 24.0, floor=7.0),
        _timed(4096, "magicpig", 14.0, floor=2.5, build=1.024, upkeep=1.0 if upkeep else None),
        _timed(8192, "dense", 70.0, floor=28.0),
        _timed(8192, "dense_grouped", 50.0, floor=28.0),
        _timed(8192, "dense_grouped_bf16", 40.0, floor=14.0),
        _timed(8192, "magicpig", 20.0, floor=4.0, build=2.048, upkeep=1.5 if upkeep else None),
    ]
    if upkeep:  # dense keeps no index: bench_decode.py writes 0 upkeep for it
        for r in rows:
            if r["method"] != "magicpig":
                r.update(upkeep_cpu_ms_per_token=0.0, upkeep_ms_per_token=0.0)
    return [r for r in rows if bf16 or r["method"] != "dense_grouped_bf16"]


def test_per_token_with_index_adds_the_upkeep_and_the_build_spread_over_the_generation():
    mp = _timed(4096, "magicpig", 14.0, build=1.024, upkeep=1.0)
    assert report.per_token_with_index(mp, 256) == pytest.approx(14.0 + 1.0 + 4.0)
    assert report.per_token_with_index(mp, 4096) == pytest.approx(14.0 + 1.0 + 0.25)
    # The longer the generation, the less the build weighs; the upkeep per token stays.
    assert report.per_token_with_index(mp, 10**9) == pytest.approx(15.0, abs=1e-5)
    assert report.per_token_with_index(mp, 256, what="step") == pytest.approx(64.0 + 1.0 + 4.0)
    # The wall clock reads the wall-clock fields: attention 15 ms, upkeep 1.25 ms, build 1.524 s.
    assert report.per_token_with_index(mp, 256, clock="wall") == pytest.approx(15.0 + 1.25 + 1524 / 256)
    # Dense keeps no index: its own time, with or without the upkeep fields.
    dense = _timed(4096, "dense_grouped", 20.0)
    assert report.per_token_with_index(dense, 256) == 20.0
    assert report.per_token_with_index({**dense, "upkeep_cpu_ms_per_token": 0.0}, 256) == 20.0
    # An index whose upkeep was never measured (the files before it was) has no figure, not a flattering one.
    old = _timed(4096, "magicpig", 14.0, build=1.024)
    assert report.per_token_with_index(old, 256) is None
    assert report.per_token_with_index({**old, "upkeep_cpu_ms_per_token": None}, 256) is None


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"tokens": 0}, ValueError, "tokens must be"),
        ({"tokens": 2.5}, ValueError, "tokens must be"),
        ({"tokens": True}, ValueError, "tokens must be"),
        ({"tokens": 256, "clock": "gpu"}, ValueError, "clock must be 'cpu' or 'wall'"),
        ({"tokens": 256, "what": "rest"}, ValueError, "what must be 'attention' or 'step'"),
    ],
)
def test_per_token_with_index_refuses_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        report.per_token_with_index(_timed(4096, "magicpig", 14.0, build=1.0, upkeep=1.0), **kwargs)


def test_dense_yardstick_sets_magicpig_against_the_bf16_floor_and_the_fastest_measured_dense():
    small, large = report.dense_yardstick(_file())
    assert (small["context"], small["clock"], large["context"]) == (4096, "cpu", 8192)
    # The fastest measured dense at each context, by CPU time, whichever form it is.
    assert (small["fastest_dense"], small["fastest_dense_ms"]) == ("dense_grouped", 20.0)
    assert (large["fastest_dense"], large["fastest_dense_ms"]) == ("dense_grouped_bf16", 40.0)
    assert small["fastest_row"]["method"] == "dense_grouped"
    # dense's byte floor in bf16 is the bf16 row's floor, even where that row is not the fastest.
    assert small["dense_bf16_floor_ms"] == 7.0 and large["dense_bf16_floor_ms"] == 14.0
    # Each dense path over its own floor; none is near it, so none is "at its best".
    assert small["dense"]["dense_grouped"]["over_floor"] == pytest.approx(20 / 14)
    assert small["dense"]["dense_grouped_bf16"]["over_floor"] == pytest.approx(24 / 7)
    assert set(small["dense"]) == {"dense", "dense_grouped", "dense_grouped_bf16"}
    assert small["fastest_dense_over_floor"] == pytest.approx(20 / 14) and small["fastest_dense_at_its_best"] is False
    # MagicPIG: attention alone and with its index at 256 and 4,096 generated tokens.
    assert small["attention_ms"] == 14.0
    assert small["with_index_ms_256"] == pytest.approx(19.0) and small["with_index_ms_4096"] == pytest.approx(15.25)
    assert small["over_bf16_floor"] == pytest.approx(2.0)
    assert small["with_index_256_over_bf16_floor"] == pytest.approx(19 / 7)
    assert small["over_fastest_dense"] == pytest.approx(0.7)
    assert small["with_index_256_over_fastest_dense"] == pytest.approx(19 / 20)
    assert large["with_index_4096_over_fastest_dense"] == pytest.approx((20 + 1.5 + 0.5) / 40)
    # The index's cost only ever adds.
    for y in (small, large):
        alone, long, short = (y[f"{k}over_fastest_dense"] for k in ("", "with_index_4096_", "with_index_256_"))
        assert alone < long < short


def test_dense_yardstick_on_an_older_file_and_without_a_bf16_row():
    old = report.dense_yardstick(_file(upkeep=False))
    assert [y["over_fastest_dense"] for y in old] == pytest.approx([0.7, 0.5])
    assert all(y[f"with_index_ms_{g}"] is None for y in old for g in report.GENERATION_TOKENS)
    assert all(y["with_index_256_over_bf16_floor"] is None for y in old)
    no_bf16 = report.dense_yardstick(_file(bf16=False))
    assert all(y["dense_bf16_floor_ms"] is None and y["over_bf16_floor"] is None for y in no_bf16)
    assert [y["fastest_dense"] for y in no_bf16] == ["dense_grouped", "dense_grouped"]
    assert no_bf16[1]["with_index_4096_over_fastest_dense"] == pytest.approx(22 / 50)


def test_dense_yardstick_calls_a_dense_within_the_band_of_its_floor_at_its_best():
    rows = _file()
    rows[1]["attention_floor_ms"] = 20.0 / (report.AT_ITS_BEST_WITHIN * 0.99)  # dense_grouped at 4096
    small, large = report.dense_yardstick(rows)
    assert small["fastest_dense_at_its_best"] is True and large["fastest_dense_at_its_best"] is False
    no_floor = [{k: v for k, v in r.items() if k != "attention_floor_ms"} for r in rows]
    assert all(y["fastest_dense_at_its_best"] is None for y in report.dense_yardstick(no_floor))


def test_dense_yardstick_leaves_out_contexts_without_dense_and_refuses_what_is_not_rows():
    rows = [*_file(), _timed(2048, "magicpig", 9.0, build=1.0, upkeep=1.0)]
    assert [y["context"] for y in report.dense_yardstick(rows)] == [4096, 8192]
    # A context with dense but no MagicPIG has the yardsticks and no ratios.
    (only,) = report.dense_yardstick([r for r in _file() if r["context"] == 4096 and r["method"] != "magicpig"])
    assert only["fastest_dense"] == "dense_grouped" and only["attention_ms"] is None and only["over_bf16_floor"] is None
    # Without CPU times in every row the wall clock is the yardstick's.
    wall = report.dense_yardstick([{k: v for k, v in r.items() if k != "attention_cpu_ms"} for r in _file()])
    assert wall[0]["clock"] == "wall" and wall[0]["fastest_dense_ms"] == 21.0
    with pytest.raises(TypeError, match="rows must be a list"):
        report.dense_yardstick({"rows": _file()})


def test_speed_table_rows_show_floors_and_the_index_cost_where_the_file_has_them():
    rows = report.speed_table_rows(_file())
    by = {(r["context"], r["method"]): r for r in rows}
    mp = by[(4096, "magicpig")]
    assert mp["attn floor ms"] == 2.5 and mp["attn x floor"] == pytest.approx(14 / 2.5)
    assert mp["attn / bf16 floor"] == pytest.approx(2.0)
    assert mp["fastest dense"] == "dense_grouped" and mp["attn / fastest dense"] == pytest.approx(0.7)
    assert mp["attn + index ms, 256 tokens"] == pytest.approx(19.0)
    assert mp["attn + index ms, 4,096 tokens"] == pytest.approx(15.25)
    assert mp["attn + index / bf16 floor, 256 tokens"] == pytest.approx(19 / 7)
    assert mp["attn + index / fastest dense, 4,096 tokens"] == pytest.approx(15.25 / 20)
    assert mp["step + index ms, 256 tokens"] == pytest.approx(64 + 1 + 4)
    assert mp["step + index / fastest dense, 256 tokens"] == pytest.approx(69 / 70)
    # Dense keeps no index: with it is without it; the fastest dense is 1.00x itself.
    grouped = by[(4096, "dense_grouped")]
    assert grouped["attn + index ms, 256 tokens"] == grouped["CPU: attn ms"] == 20.0
    assert grouped["attn + index / fastest dense, 256 tokens"] == 1.0
    assert by[(8192, "dense_grouped_bf16")]["attn / bf16 floor"] == pytest.approx(40 / 14)


def test_speed_table_rows_of_an_older_file_have_no_index_cost_columns():
    rows = report.speed_table_rows(_file(upkeep=False))
    assert not any(k.startswith(("attn + index", "step + index")) for r in rows for k in r)
    assert all("attn / bf16 floor" in r and "attn / fastest dense" in r for r in rows)
    # Without floors, no floor columns (files before the floors were measured).
    bare = [{k: v for k, v in r.items() if k != "attention_floor_ms"} for r in _file()]
    assert not any("floor" in k for r in report.speed_table_rows(bare) for k in r)
    # An index whose upkeep is missing in one row of a new file shows None there, not its attention alone.
    mixed = _file()
    del mixed[7]["upkeep_cpu_ms_per_token"], mixed[7]["upkeep_ms_per_token"]
    last = report.speed_table_rows(mixed)[7]
    assert last["method"] == "magicpig" and last["attn + index ms, 256 tokens"] is None
    assert last["attn + index / fastest dense, 256 tokens"] is None


def test_the_shipped_speed_file_still_makes_its_table_and_yardsticks():
    speed = report.load_result(report.SPEED_FILE)
    fair = report.fair_rows(speed)
    assert all(any(f is r for r in speed["rows"]) for f in fair)  # the rows themselves, not copies
    rows = report.speed_table_rows(fair)
    assert len(rows) == len(fair)
    for y in report.dense_yardstick(fair):
        assert y["dense_bf16_floor_ms"] > 0 and y["over_fastest_dense"] > 0
        assert y["fastest_dense"] in report.DENSE_FORMS


def test_recentring_is_counted_per_token_from_the_build():
    row = {"context": 1000, "index_cpu_seconds": 1.0, "index_seconds": 1.5, "attention_cpu_ms": 5.0,
           "upkeep_cpu_ms_per_token": 0.5, "options": {"recentre": 2}}  # fmt: skip
    # A rebuild over n tokens after n/2 generated ones: twice the build's 1 ms per token.
    assert report.recentre_ms_per_token(row) == pytest.approx(2.0)
    assert report.recentre_ms_per_token(row, clock="wall") == pytest.approx(3.0)
    assert report.recentre_ms_per_token({**row, "options": {"recentre": 4}}) == pytest.approx(4 / 3)
    assert report.per_token_with_index(row, 256) == pytest.approx(5.0 + 0.5 + 2.0 + 1e3 / 256)
    for never in ({"recentre": 0}, {}, None):
        assert report.recentre_ms_per_token({**row, "options": never}) == 0.0


def test_kernel_reach_bounds_the_step_by_its_gathers_and_the_token_by_the_hashing_too():
    # A hand-made row: 1,000 keys in 2 KV heads, (K, L) = (2, 5), d = 10, matmul 1e9 MACs/s.
    stages = {s: {"floor_ms": f} for s, f in zip(("hash", "walk", "hits", "K", "mix"), (0.1, 0.2, 0.3, 1.0, 1.5))}
    row = {"stages_bf16": {"stages": stages}, "n": 1000, "kv_heads": 2, "K": 2, "L": 5, "d": 10}
    row |= {"gemm_macs_per_s": 1e9, "attend_bf16_floor_ms": 0.5, "dense_bf16_floor_ms": 20.0}
    x = report.kernel_reach(row)
    assert x["step_floors_ms"] == pytest.approx(3.1) and x["gather_floors_ms"] == pytest.approx(2.5)
    assert x["gather_floors_over_own_floor"] == pytest.approx(5.0)
    # 200 MACs a key: 0.2 ms for the build's 1,000 keys; per token one insertion (2e-4 ms), two
    # builds over n for the re-centrings (4e-4 ms) and the build over 4,096 tokens.
    assert x["build_hashing_ms"] == pytest.approx(0.2)
    assert x["token_4096_bound_ms"] == pytest.approx(2.5 + 2e-4 + 4e-4 + 0.2 / 4096)
    assert x["token_4096_bound_over_dense_floor"] == pytest.approx(x["token_4096_bound_ms"] / 20.0)
