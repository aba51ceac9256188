"""Notebook 01's lesson helpers: the tables it shows, the studies behind its answers, its claims."""

import math

import numpy as np
import pytest

from pigviz import lessons
from pigviz.lessons import nb01_stick_balance as nb01
from pigviz.toy import stick_balance as sb


def test_a_table_shows_the_same_html_on_every_run():
    rows = [{"method": "TopK", "error": 0.143}, {"method": "hybrid", "error": 0.031}]
    a, b = nb01.table(rows, formats={"error": "{:.3f}"}), nb01.table(rows, formats={"error": "{:.3f}"})
    assert a._repr_html_() == b._repr_html_()
    assert repr(a) == repr(lessons.table(rows, formats={"error": "{:.3f}"}))
    other = nb01.table([{"method": "TopK", "error": 0.5}], formats={"error": "{:.3f}"})
    assert other._repr_html_() != a._repr_html_()
    assert "0.143" in a._repr_html_()


def test_the_claims_table_holds_every_claim_and_passes():
    t = lessons.claims_table("01")
    claims = nb01.claims()
    assert len(t) == len(claims) >= 19
    assert list(t.text["result"]) == ["PASS"] * len(claims)
    assert [c.text for c in claims] == list(t.text["claim"])


def test_estimates_table_gives_miss_keys_and_draws():
    s = sb.make_scenario("sink")
    est = sb.estimate_all(s, s.n, rng=0)  # full budget: unlimited free draws
    t = nb01.estimates_table({k: est[k] for k in ("exact", "topk", "sampling")}, caption="c")
    assert list(t.text["miss"]) == ["+0.000", "+0.000", "+0.000"]
    assert list(t.text["draws"]) == ["32", "32", "unlimited"]
    assert list(t.text["method"]) == ["truth (every key)", "TopK", "sampling (oracle)"]
    with pytest.raises(ValueError, match="exact"):
        nb01.estimates_table({"topk": est["topk"]})
    with pytest.raises(TypeError, match="topk"):
        nb01.estimates_table({"exact": est["exact"], "topk": 0.2})


def test_runs_table_and_curves_tables():
    s = sb.make_scenario("sink")
    runs = sb.repeat_estimates(s, 12, runs=50, seed=1, methods=("topk", "sampling"))
    t = nb01.runs_table(runs, s.truth)
    assert t.text["spread (std)"][0] == "0.0000" and t.frame["mean of 50 runs"][1] == pytest.approx(
        runs["sampling"].mean()
    )
    c = sb.error_curves(s, [1, 12], n_seeds=20, seed=0)
    full = nb01.curves_table(c)
    assert list(full.frame["B"]) == [1, 12] and "σ_w/√B" in full.frame
    assert "σ_w/√B" not in nb01.curves_table(c, reference=False).frame
    at = nb01.errors_at(c, 12)
    assert len(at) == len(sb.METHODS) + 1
    assert at.frame["error at B = 12"][0] == pytest.approx(c.errors["topk"][1])
    with pytest.raises(ValueError, match="budget"):
        nb01.errors_at(c, 5)
    with pytest.raises(TypeError, match="curves"):
        nb01.curves_table({"topk": [0.1]})


def test_markdown_table_is_a_pipe_table_of_the_formatted_cells():
    t = nb01.table([{"k": 0.25, "name": "a|b"}, {"k": 8.0, "name": "c"}], formats={"k": "{:g}"}, caption="cap")
    lines = nb01.markdown_table(t).splitlines()
    assert lines[0] == "*cap*" and lines[2] == "| k | name |" and lines[3] == "|---:|:---|"
    assert lines[4] == "| 0.25 | a\\|b |" and lines[5] == "| 8 | c |"
    with pytest.raises(TypeError, match="Table"):
        nb01.markdown_table("| a |")


def test_b_draws_sit_on_sigma_over_root_b_and_distinct_keys_below_it():
    rows = {r["scenario"]: r for r in nb01.draws_vs_keys(12, runs=8000)}
    assert set(rows) == set(sb.SCENARIOS)
    for r in rows.values():
        assert r["12 draws"] == pytest.approx(r["σ_w/√B"], rel=0.05)
        assert r["12 distinct keys"] <= r["12 draws"] * 1.02
        assert r["draws made (mean)"] >= 12
    assert rows["peaked"]["12 distinct keys"] < 0.5 * rows["peaked"]["σ_w/√B"]
    assert rows["peaked"]["draws made (mean)"] > rows["sink"]["draws made (mean)"] > rows["flat"]["draws made (mean)"]


def test_sharpness_study_pairs_its_runs_and_sharpness_one_is_oracle_sampling():
    s = sb.make_scenario("sink")
    rows = {r["sharpness"]: r for r in nb01.sharpness_study(s, 12, sharpness=(0.5, 1.0, 3.0), runs=3000, seed=3)}
    assert [r["paired z"] for r in rows.values()].count(0.0) == 1
    best = min(rows, key=lambda k: rows[k]["RMS, distinct keys"])
    assert rows[best]["paired z"] == 0.0 and all(r["paired z"] > 0 for k, r in rows.items() if k != best)
    oracle = sb.repeat_estimates(s, 12, runs=3000, seed=3, methods=("sampling",))["sampling"]
    rms = math.sqrt(np.mean((oracle - s.truth) ** 2))
    assert rows[1.0]["RMS, distinct keys"] == pytest.approx(rms, rel=1e-9)
    assert rows[1.0]["RMS, fixed draws"] < rows[3.0]["RMS, fixed draws"]  # paid draws: u = w is best here
    assert rows[3.0]["RMS, distinct keys"] < rows[1.0]["RMS, distinct keys"]  # free repeats: sharper wins
    with pytest.raises(TypeError, match="scenario"):
        nb01.sharpness_study("sink")


def test_sharpness_study_counts_the_draws_of_its_own_runs():
    s = sb.make_scenario("sink")
    rows = {r["sharpness"]: r for r in nb01.sharpness_study(s, 12, sharpness=(1.0, 3.0), runs=2000, seed=4)}
    for k, row in rows.items():
        made = sb.draws_made(s, 12, runs=2000, seed=4, proposal=sb.rough_proposal(s.scores, k))
        assert row["draws made (median)"] == np.median(made) >= 12
    # the free repeats a sharper proposal spends on the sink: many times the draws of u = w
    assert rows[3.0]["draws made (median)"] > 100 * rows[1.0]["draws made (median)"]
    assert "draws made (median)" in nb01.sharpness_table(list(rows.values())).text


@pytest.mark.parametrize(
    "draws, text",
    [(12, "12"), (28.4, "28"), (463, "460"), (13897, "14,000"), (429264.5, "430,000"), (3.87e11, "3.9e+11")],
)
def test_draw_count_keeps_two_significant_digits(draws, text):
    assert nb01.draw_count(draws) == text


def test_draw_count_names_unlimited_and_rejects_negatives():
    assert nb01.draw_count(math.inf) == "unlimited"
    with pytest.raises(ValueError, match="draws"):
        nb01.draw_count(-1)


def test_split_hybrid_at_half_matches_the_librarys_hybrid():
    s = sb.make_scenario("sink")
    half = nb01.split_hybrid_rms(s, 6, 12, runs=4000, seed=5)
    lib = sb.error_curves(s, [12], n_seeds=4000, seed=9, methods=("hybrid",)).errors["hybrid"][0]
    assert half == pytest.approx(lib, rel=0.06)
    with pytest.raises(ValueError, match="n_exact"):
        nb01.split_hybrid_rms(s, 12, 12)
    with pytest.raises(TypeError, match="scenario"):
        nb01.split_hybrid_rms("sink", 3)


def test_hybrid_losses_count_and_first_budget():
    assert 0 <= nb01.hybrid_losses_to_topk(range(3), 12, runs=200) <= 3
    c = sb.ErrorCurves(
        "x",
        np.array([1, 2, 3, 4]),
        {"topk": np.array([0.1, 0.5, 0.2, 0.05]), "sampling": np.array([0.3, 0.3, 0.3, 0.3])},
        np.ones(4),
        1.0,
        10,
        4,
    )
    assert nb01.first_budget_topk_beats_sampling(c) == 3  # B = 1 left out
    never = sb.ErrorCurves("x", c.budgets, {"topk": np.ones(4), "sampling": np.zeros(4)}, np.ones(4), 1.0, 10, 4)
    assert nb01.first_budget_topk_beats_sampling(never) == -1
    with pytest.raises(ValueError, match="sampling"):
        nb01.first_budget_topk_beats_sampling(sb.ErrorCurves("x", c.budgets, {"topk": np.ones(4)}, 1, 1.0, 1, 4))
