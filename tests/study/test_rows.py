"""pigviz.study.rows: the rows notebook 06 renders, from the shipped results and fakes."""

from __future__ import annotations

import pytest

from pigviz.study import findings, rows


@pytest.fixture(scope="module")
def results():
    return findings.load_shipped_results()


def test_part1_and_matched_rows_hold_the_study_numbers(results):
    p1 = rows.part1_rows(results)
    assert len(p1) == len(results["spec"]["settings"])
    row = next(r for r in p1 if r["(K, L)"] == "(10, 150)")
    assert row["TopK"] == findings.series_summary(results, "topk @K10 L150")["error"]
    assert row["sampled (authors')"] < row["budget"] < row["Quest budget"]
    m = rows.matched_rows(results)
    assert len(m) == 6 * len(p1) and m[0]["method"] == "topk" and m[0]["/ TopK"] == 1.0


def test_every_series_has_a_legend_and_the_seed_rows_name_what_they_average(results):
    assert all(r["what"] for r in rows.summary_legend_rows(results))
    seed = rows.seed_rows(results, [0.2, 0.3], 512)
    spread = [r["std across seeds / mean"] for r in seed]
    assert f"{rows.magicpig_seed_spread(results):.1%}" in spread[0]  # the study's largest (K, L) spread
    assert "20%" in spread[2] and "30%" in spread[2]  # notebook 07a's range, as given
    assert rows.magicpig_seed_spread(results) < 0.02
    with pytest.raises(ValueError, match="kl_spread"):
        rows.seed_rows(results, [], 512)


def test_small_row_builders_validate_and_pair_their_inputs():
    fake = {0: {"layer": 2, "heads": [6], "budget": [0.07], "exact": [0.4], "sampled": [0.3], "topk": [0.9]}}
    assert rows.mass_rows(fake)[0]["MagicPIG total"] == pytest.approx(0.7)
    with pytest.raises(ValueError, match="'topk'"):
        rows.mass_rows({0: {k: v for k, v in fake[0].items() if k != "topk"}})
    with pytest.raises(ValueError, match="pair up"):
        rows.kl_sweep_rows([{}], [])
    with pytest.raises(ValueError, match="errors must map"):
        rows.current_page_rows({})


def test_sink_rows_check_the_weights_shape(results):
    with pytest.raises(ValueError, match="sink_weight must be"):
        rows.sink_rows(results, [[0.0]])
