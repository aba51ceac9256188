"""Notebook 01's lesson helpers: the tables it shows, the studies behind its answers, its claims."""

import math

import numpy as np
import pytest

from pigviz import lessons
from pigviz.lessons import nb01_stick_balance as nb01
from pigviz.toy import stick_balance as sb


def test_the_claims_table_holds_every_claim_and_passes():
    t = lessons.claims_table("01")
    claims = nb01.claims()
    assert len(t) == len(claims) >= 19
    assert list(t.text["result"]) == ["PASS"] * len(claims)
    assert [c.text for c in claims] == list(t.text["claim"])
    texts = [c.text for c in claims]
    assert any("MagicPIG's rule misses least of the samplers" in t for t in texts)
    assert any(t.startswith("Inclusion sampler, 4000 runs") for t in texts)


def test_estimates_table_gives_miss_keys_and_draws():
    s = sb.make_scenario("sink")
    est = sb.estimate_all(s, s.n, rng=0)  # full budget: unlimited free draws
    shown = {k: est[k] for k in ("exact", "topk", "sampling")}
    t = nb01.estimates_table(shown, caption="c")
    assert list(t.text["miss"]) == ["+0.000", "+0.000", "+0.000"]
    assert list(t.text["draws"]) == ["32", "32", "unlimited"]
    assert list(t.text["method"]) == ["truth (every key)", "TopK", "sampling (oracle)"]
    # one row builder: the table renders the library's rows, value for value
    rows = sb.estimate_rows(shown)
    assert [r["method"] for r in rows] == list(shown)
    assert list(t.frame["estimate"]) == [r["estimate"] for r in rows]
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
    at = nb01.errors_at_table(c, 12)
    assert len(at) == len(sb.METHODS) + 1
    assert at.frame["error at B = 12"][0] == pytest.approx(c.errors["topk"][1])
    with pytest.raises(ValueError, match="budget"):
        nb01.errors_at_table(c, 5)
    with pytest.raises(TypeError, match="curves"):
        nb01.curves_table({"topk": [0.1]})


def test_markdown_table_is_a_pipe_table_of_the_formatted_cells():
    t = lessons.table([{"k": 0.25, "name": "a|b"}, {"k": 8.0, "name": "c"}], formats={"k": "{:g}"}, caption="cap")
    lines = nb01.markdown_table(t).splitlines()
    assert lines[0] == "*cap*" and lines[2] == "| k | name |" and lines[3] == "|---:|:---|"
    assert lines[4] == "| 0.25 | a\\|b |" and lines[5] == "| 8 | c |"
    with pytest.raises(TypeError, match="Table"):
        nb01.markdown_table("| a |")


def test_b_draws_sit_on_sigma_over_root_b_and_distinct_keys_below_it():
    rows = {r["scenario"]: r for r in sb.draws_vs_keys(12, runs=8000)}
    assert set(rows) == set(sb.SCENARIOS)
    for r in rows.values():
        assert r["12 draws"] == pytest.approx(r["σ_w/√B"], rel=0.05)
        assert r["12 distinct keys"] <= r["12 draws"] * 1.02
        assert r["draws made (mean)"] >= 12
    assert rows["peaked"]["12 distinct keys"] < 0.5 * rows["peaked"]["σ_w/√B"]
    assert rows["peaked"]["draws made (mean)"] > rows["sink"]["draws made (mean)"] > rows["flat"]["draws made (mean)"]


def test_sharpness_study_pairs_its_runs_and_sharpness_one_is_oracle_sampling():
    s = sb.make_scenario("sink")
    rows = {r["sharpness"]: r for r in sb.sharpness_study(s, 12, sharpness=(0.5, 1.0, 3.0), runs=3000, seed=3)}
    assert [r["paired z"] for r in rows.values()].count(0.0) == 1
    best = min(rows, key=lambda k: rows[k]["RMS, distinct keys"])
    assert rows[best]["paired z"] == 0.0 and all(r["paired z"] > 0 for k, r in rows.items() if k != best)
    oracle = sb.repeat_estimates(s, 12, runs=3000, seed=3, methods=("sampling",))["sampling"]
    rms = math.sqrt(np.mean((oracle - s.truth) ** 2))
    assert rows[1.0]["RMS, distinct keys"] == pytest.approx(rms, rel=1e-9)
    assert rows[1.0]["RMS, fixed draws"] < rows[3.0]["RMS, fixed draws"]  # paid draws: u = w is best here
    assert rows[3.0]["RMS, distinct keys"] < rows[1.0]["RMS, distinct keys"]  # free repeats: sharper wins
    with pytest.raises(TypeError, match="scenario"):
        sb.sharpness_study("sink")


def test_sharpness_study_counts_the_draws_of_its_own_runs():
    s = sb.make_scenario("sink")
    rows = {r["sharpness"]: r for r in sb.sharpness_study(s, 12, sharpness=(1.0, 3.0), runs=2000, seed=4)}
    for k, row in rows.items():
        made = sb.draws_made(s, 12, runs=2000, seed=4, proposal=sb.rough_proposal(s.scores, k))
        assert row["draws made (median)"] == np.median(made) >= 12
    # the free repeats a sharper proposal spends on the sink: many times the draws of u = w
    assert rows[3.0]["draws made (median)"] > 100 * rows[1.0]["draws made (median)"]
    assert "draws made (median)" in nb01.sharpness_table(list(rows.values())).text
    some = nb01.sharpness_table(list(rows.values()), ["paired z"])
    assert list(some.text.columns) == ["sharpness", "paired z"]


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


def test_the_draws_vs_keys_sink_row_is_the_sharpness_one_row_of_the_same_runs():
    """Going further quotes one number for both (notebook 01, finding 01-2 of the review)."""
    sink = {r["scenario"]: r for r in sb.draws_vs_keys(12, runs=3000)}["sink"]
    one = {r["sharpness"]: r for r in sb.sharpness_study(sb.make_scenario("sink"), 12, (1.0,), runs=3000)}[1.0]
    assert sink["12 distinct keys"] == pytest.approx(one["RMS, distinct keys"], rel=1e-9)


def test_hybrid_losses_count():
    assert 0 <= sb.hybrid_losses_to_topk(range(3), 12, runs=200) <= 3


def test_every_defined_prose_number_names_why():
    assert all(isinstance(k, str) and why.strip() for k, why in nb01.PROSE_DEFINED.items())
