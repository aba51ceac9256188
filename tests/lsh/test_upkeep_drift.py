"""benchmarks/bench_upkeep_drift.py's core (drift_rows): where the keys' mean does not move, the
grown index (prefill's mean) and the rebuilt one (re-centred) read and err identically; where it
moves, they differ, and each row has the fields the summary reads."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from pigviz.attention import softmax_attention_torch
from pigviz.lsh import fused
from pigviz.lsh.index import build_index

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
OPTS = dict(K=4, L=12, min_hits=2, sinks=2, recent=8, buffer=7)
FIELDS = (
    {"head", "prefill", "position", "index_n", "buffered", "mean_shift", "mean_shift_spread"}
    | {f"{what}_{name}" for what in ("err", "read", "sampled") for name in ("grown", "rebuilt", "authors", "recentred")}
    | {"centred_n", "recentres", "rehashed", "hashed"}
)


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_upkeep_drift", BENCH / "bench_upkeep_drift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _queries(Hq, positions, d, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(Hq, len(positions), d, generator=g), torch.tensor(positions)


def _balanced_keys(n, Hkv=2, d=16, seed=0):
    """Integer keys c + x, c - x in pairs (tokens 2i, 2i + 1): every run of whole pairs has mean
    exactly c (integer sums are exact in float32), so the prefill's mean IS the full mean."""
    g = torch.Generator().manual_seed(seed)
    c = torch.randint(-3, 4, (Hkv, 1, d), generator=g).float()
    x = torch.randint(-3, 4, (Hkv, n // 2, d), generator=g).float()
    k = torch.stack([c + x, c - x], dim=2).reshape(Hkv, n, d)
    return k, torch.randn(Hkv, n, d, generator=g)


def _drifting_keys(n, Hkv=2, d=16, seed=0):
    """A cone whose centre moves over the later tokens, as a long generation's keys do."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(Hkv, n, d, generator=g) + 0.5 * torch.randn(Hkv, 1, d, generator=g)
    k[:, n // 3 :] += torch.linspace(0, 2, n - n // 3)[:, None] * torch.randn(Hkv, 1, d, generator=g)
    return k, torch.randn(Hkv, n, d, generator=g)


def test_index_size_mirrors_the_decoders_buffer(bench):
    # The step path inserts up to the current token once the buffer would exceed `buffer`.
    assert bench.index_size(100 + 255, 100, 256) == 100  # 256 tokens buffered: none inserted yet
    assert bench.index_size(100 + 256, 100, 256) == 100 + 257  # 257th: all inserted, its own too
    assert bench.index_size(100 + 2 * 257 - 1, 100, 256) == 100 + 2 * 257


def test_grown_equals_rebuilt_when_the_mean_does_not_move(bench):
    n, P = 160, 64  # P - recent and every fold (P + 8m) - recent are even: whole pairs
    k, v = _balanced_keys(n)
    q, pos = _queries(4, list(range(90, 160, 3)), 16)
    rows = bench.drift_rows(k, v, q, pos, P, **OPTS)
    assert rows and {r["index_n"] for r in rows} != {P}  # scored queries saw insertions
    assert len({r["index_n"] for r in rows}) > 1  # several folds of the buffer
    for r in rows:
        assert set(r) == FIELDS
        assert r["mean_shift"] == 0.0
        assert (r["err_grown"], r["read_grown"], r["sampled_grown"]) == (
            r["err_rebuilt"],
            r["read_rebuilt"],
            r["sampled_rebuilt"],
        )
        assert r["buffered"] == r["position"] + 1 - r["index_n"]
        assert 0 <= r["buffered"] <= OPTS["buffer"]
    assert all(r["position"] >= P + OPTS["buffer"] for r in rows)
    assert len(rows) == 4 * sum(p >= P + OPTS["buffer"] for p in pos.tolist())


def test_a_moving_mean_changes_the_grown_index(bench):
    n, P = 400, 80
    k, v = _drifting_keys(n)
    q, pos = _queries(4, list(range(300, 400, 5)), 16)
    rows = bench.drift_rows(k, v, q, pos, P, seed=3, **OPTS)
    assert all(r["mean_shift"] > 0.1 and r["mean_shift_spread"] > 0 for r in rows)
    assert any(r["sampled_grown"] != r["sampled_rebuilt"] for r in rows)
    exact = OPTS["sinks"] + OPTS["recent"]
    for r in rows:
        # The authors' way reads every token after the prefill exactly, plus the prefill's exact set and sample.
        seen = r["position"] + 1
        assert r["read_authors"] * seen == pytest.approx(r["sampled_authors"] + exact + seen - P)
        assert r["read_grown"] * seen == pytest.approx(r["sampled_grown"] + exact + r["buffered"])


def test_rows_match_one_query_read_on_its_own(bench):
    """Query head h reads KV head h // G: one row recomputed alone on that head's keys."""
    n, P = 400, 80
    k, v = _drifting_keys(n)
    q, pos = _queries(4, list(range(300, 400, 5)), 16)
    rows = bench.drift_rows(k, v, q, pos, P, seed=3, **OPTS)
    row = next(r for r in rows if r["head"] == 3 and r["position"] == 395)
    g, t = 1, 395  # head 3 of 4 over 2 KV heads
    one = build_index(k[g : g + 1, :P], K=4, L=12, sinks=2, recent=8, seed=3)
    qt = q[3, list(pos).index(t)][None]
    out, _ = fused.attend(one, qt, k[g : g + 1], v[g : g + 1], min_hits=2, buffer_end=[t + 1])
    ref = softmax_attention_torch(qt, k[g, : t + 1], v[g, : t + 1])[0]
    assert row["err_authors"] == pytest.approx(float((out - ref).norm() / ref.norm()), rel=1e-4, abs=1e-7)


def test_summary_pairs_grown_with_rebuilt(bench):
    k, v = _drifting_keys(400)
    q, pos = _queries(4, list(range(300, 400, 5)), 16)
    rows = [{"layer": 7, "seed": 0, **r} for r in bench.drift_rows(k, v, q, pos, 80, seed=3, **OPTS)]
    s = bench.summarise(rows)
    assert s["units"] == 4 and s["rows"] == len(rows)
    diff = sum(r["err_grown"] - r["err_rebuilt"] for r in rows) / len(rows)  # equal positions per unit
    assert s["diff_grown_rebuilt"] == pytest.approx(diff)
    assert s["layers"]["7"]["err_grown"] == pytest.approx(s["err_grown"])


@pytest.mark.parametrize(
    ("change", "match"),
    [({"prefill": 10}, "prefill"), ({"buffer": 0}, "buffer"), ({"positions": [5, 4]}, "positions")],
)
def test_bad_input_names_the_parameter(bench, change, match):
    k, v = _drifting_keys(100)
    q, pos = _queries(4, [60, 70], 16)
    args = {"positions": pos, "prefill": 40, **OPTS, **change}
    with pytest.raises(ValueError, match=match):
        bench.drift_rows(k, v, q, **args)


# -- the recentred way (the decoder's recentre option) -------------------------------------------
def test_recentred_is_rebuilt_when_just_recentred_and_grown_before(bench):
    n, P = 400, 40
    k, v = _drifting_keys(n)
    q, pos = _queries(4, list(range(50, 400, 5)), 16)
    timings = []
    rows = bench.drift_rows(k, v, q, pos, P, seed=3, timings=timings, **OPTS)
    # Folds of the buffer of 7 every 8 tokens: re-centred at the first fold reaching 80, 160, 320.
    assert [stop for stop, _ in timings] == [80, 160, 320]
    assert all(seconds > 0 for _, seconds in timings)
    for r in rows:
        done = [stop for stop in (80, 160, 320) if stop <= r["index_n"]]
        assert r["recentres"] == len(done) and r["rehashed"] == sum(done)
        assert r["centred_n"] == (done[-1] if done else P)
        inserted = r["index_n"] - P
        assert r["hashed"] == r["rehashed"] + inserted - 8 * len(done)  # a re-centring fold is not inserted
        if not done:  # nothing re-centred yet: the grown index
            assert (r["err_recentred"], r["sampled_recentred"]) == (r["err_grown"], r["sampled_grown"])
        if r["centred_n"] == r["index_n"]:  # just re-centred: a fresh build over the same tokens
            assert (r["err_recentred"], r["sampled_recentred"]) == (r["err_rebuilt"], r["sampled_rebuilt"])
    assert any(r["centred_n"] == r["index_n"] for r in rows) and any(r["recentres"] == 0 for r in rows)
    # Between re-centrings it differs from both (its mean is neither the prefill's nor the latest).
    between = [r for r in rows if 0 < r["recentres"] and r["centred_n"] < r["index_n"]]
    assert any(r["sampled_recentred"] != r["sampled_rebuilt"] for r in between)
    assert any(r["sampled_recentred"] != r["sampled_grown"] for r in between)


def test_a_larger_factor_recentres_less_often(bench):
    k, v = _drifting_keys(400)
    q, pos = _queries(4, [399], 16)
    timings = []
    rows = bench.drift_rows(k, v, q, pos, 40, recentre=3, timings=timings, **OPTS)
    assert [stop for stop, _ in timings] == [120, 360]  # the first folds reaching 3 x 40 and 3 x 120
    assert {r["recentres"] for r in rows} == {2}
    with pytest.raises(ValueError, match="recentre"):
        bench.drift_rows(k, v, q, pos, 40, recentre=1, **OPTS)


def test_summary_reports_the_recentred_way_at_the_largest_index(bench):
    k, v = _drifting_keys(400)
    q, pos = _queries(4, list(range(300, 400, 5)), 16)
    rows = [{"layer": 7, "seed": 0, **r} for r in bench.drift_rows(k, v, q, pos, 40, seed=3, **OPTS)]
    s = bench.summarise(rows)
    last = max(rows, key=lambda r: r["index_n"])
    assert s["index_n"] == last["index_n"] == 392 and s["recentres"] == 3
    assert s["rehashed_per_token"] == pytest.approx((80 + 160 + 320) / (392 - 40))
    assert s["hashed_per_token"] == pytest.approx(last["hashed"] / (392 - 40))
    diff = sum(r["err_recentred"] - r["err_rebuilt"] for r in rows) / len(rows)
    assert s["diff_recentred_rebuilt"] == pytest.approx(diff)
    assert s["ratio_recentred_rebuilt"] == pytest.approx(s["err_recentred"] / s["err_rebuilt"])
    assert s["layers"]["7"]["err_recentred"] == pytest.approx(s["err_recentred"])


def test_time_spike_times_each_part(bench):
    k, v = _drifting_keys(600, Hkv=1)
    q = torch.randn(3, 16, generator=torch.Generator().manual_seed(2))
    out = bench.time_spike(k, v, q, K=4, L=12, min_hits=2, sinks=2, recent=8, buffer=7, repeats=2)
    assert (out["tokens"], out["kv_heads"], out["d"], out["query_heads"], out["repeats"]) == (600, 1, 16, 3, 2)
    for part in ("recentre", "build", "room", "insert") + (("step",) if fused.available() else ()):
        assert 0 < out[part]["min"] <= out[part]["median"]
    with pytest.raises(ValueError, match="repeats"):
        bench.time_spike(k, v, q, repeats=0)
    with pytest.raises(ValueError, match="sinks \\+ recent \\+ buffer"):
        bench.time_spike(k[:, :50], v[:, :50], q, sinks=4, recent=32, buffer=16)


def test_main_writes_the_summary_and_rows_only_when_asked(bench, tmp_path):
    args = ["--prefills", "7000", "--seeds", "0", "--K", "4", "--L", "8", "--spike-repeats", "1"]
    assert bench.main([*args, "--json", str(tmp_path / "small.json")]) == 0
    small = json.loads((tmp_path / "small.json").read_text())
    assert "rows" not in small and small["recentre"] == 2
    assert small["summary"]["7000"]["rows"] > 0 and small["spike"]["tokens"] == 8192
    assert bench.main([*args, "--json", str(tmp_path / "all.json"), "--rows"]) == 0
    full = json.loads((tmp_path / "all.json").read_text())
    assert len(full["rows"]) == full["summary"]["7000"]["rows"]
    assert full["summary"] == small["summary"]  # the same run (deterministic), rows aside
    with pytest.raises(SystemExit, match="recentre"):
        bench.main([*args, "--recentre", "1"])
