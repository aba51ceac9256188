"""Notebook 08's lesson module: the estimators the notebook shows, the open exercise's stand-in,
and the tables and sentences it prints."""

import inspect
from pathlib import Path

import jupytext
import numpy as np
import pytest

from pigviz.attention import cost, protocol
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb08_your_estimator as nb08

SOURCE = Path(__file__).resolve().parents[2] / "notebooks" / "src" / "08_your_estimator.py"


def row(n=200, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(d) * 2, rng.standard_normal((n, d)), rng.standard_normal((n, 4)) + 1


def test_the_notebooks_uniform_sample_is_the_lesson_modules():
    cells = [c.source for c in jupytext.read(SOURCE, fmt="py:percent").cells if c.cell_type == "code"]
    (cell,) = [c for c in cells if c.startswith("def uniform_sample(")]
    assert cell.startswith(inspect.getsource(nb08.uniform_sample).rstrip())
    assert 'uniform_sample.bytes_read = protocol.costs_like("streaming")' in cell


def test_uniform_sample_reads_its_budget_exact_set_first():
    q, k, v = row()
    out, read = protocol.call(nb08.uniform_sample, q, k, v, 80)
    assert read.size == 80 and set(range(4)) | set(range(136, 200)) <= set(read.tolist())
    out_all, _ = protocol.call(nb08.uniform_sample, q, k, v, 200)
    np.testing.assert_allclose(out_all, protocol.exact_output(q, k, v), atol=1e-12)  # every key: exact
    _, few = protocol.call(nb08.uniform_sample, q, k, v, 10)
    assert few.tolist() == [0, 1, 2, 3, 194, 195, 196, 197, 198, 199]  # the exact set cut to the budget


def test_the_worked_example_fills_topks_dropped_weight_with_the_dropped_mean():
    q, k, v = row()
    out, read = protocol.call(nb08.topk_plus_tail, q, k, v, 30)
    s = k @ q / 4.0
    top = np.argsort(-s)[:30]
    w = np.exp(s - s.max())
    rest = np.setdiff1d(np.arange(200), top)
    want = (w[top] @ v[top] + w[rest].sum() * v[rest].mean(0)) / w.sum()
    np.testing.assert_allclose(out, want, atol=1e-12)
    assert sorted(read.tolist()) == sorted(top.tolist())
    np.testing.assert_allclose(protocol.call(nb08.topk_plus_tail, q, k, v, 200)[0], protocol.exact_output(q, k, v))
    assert (
        nb08.topk_plus_tail.bytes_read(200, 16, 4, 30) == cost.bytes_read("topk", n=200, d=16, dv=4, keys_read=30) + 8
    )


def test_the_open_exercise_stands_in_or_stops_with_a_way_on():
    def my_estimator(q, keys, values, budget):
        """blank"""
        ...

    def written(q, keys, values, budget):
        return values[0], [0]

    assert nb08.yours_or_worked_example(written) is written
    ex.enable_solutions(True)
    try:
        assert nb08.yours_or_worked_example(my_estimator) is nb08.topk_plus_tail
        ex.enable_solutions(False)
        with pytest.raises(nb08.OpenExerciseBlank, match="my_estimator is still blank") as info:
            nb08.yours_or_worked_example(my_estimator)
        assert "my_estimator = nb08.topk_plus_tail" in "\n".join(info.value._render_traceback_())
    finally:
        ex.enable_solutions(None)


def fake_rows(errors=(("topk", (0.1, 0.3)), ("mine", (0.05, 0.2)), ("quest", (0.4, 0.5)))):
    rows = []
    for name, errs in errors:
        for pos, e in enumerate(errs):
            rows.append(
                dict(
                    estimator=name,
                    fraction=0.02,
                    layer=2,
                    kv_head=0,
                    head=6,
                    position=pos,
                    n=100,
                    budget=2,
                    keys_read=2,
                    error=e,
                    bytes_share=0.5 if name != "mine" else None,
                )
            )
    return rows


def test_ranking_table_and_standing_sentence():
    text = repr(nb08.ranking_table(fake_rows(), 0.02))
    lines = text.splitlines()
    assert lines[0].startswith("At 2% of the keys: 2 rows each")
    assert lines[1].split()[:4] == ["rank", "estimator", "mean", "error"]
    assert lines[2].split()[:3] == ["1", "mine", "0.125"] and "100%" in lines[2]  # beats TopK on both rows
    assert nb08.standing(fake_rows(), "mine") == (
        "mine: at 2%: rank 1 of 3, mean error 0.125, 0.62x TopK's, better than it on 100% of the rows."
    )
    with pytest.raises(ValueError, match="fraction must be one of"):
        nb08.ranking_table(fake_rows(), 0.05)
    with pytest.raises(ValueError, match="name must be an estimator of the rows"):
        nb08.standing(fake_rows(), "nobody")


def test_correction_factor_and_combine():
    assert nb08.correction_factor(8192, 164) == (
        "a budget of 164 keys: 68 exact, 96 drawn from the other 8,124, so each drawn key counts 84.6 times"
    )
    assert "leaves nothing to draw" in nb08.correction_factor(8192, 40)
    a, b = fake_rows()[:4], fake_rows()[2:]
    assert [r["estimator"] for r in nb08.combine(a, b)] == ["topk", "topk", "mine", "mine", "quest", "quest"]


def test_correction_line_compares_both_versions_with_topk():
    rows = fake_rows((("topk", (0.1, 0.3)), ("uniform_sample", (0.4, 0.6))))
    plain = fake_rows((("no_correction", (0.5, 0.7)),))
    line = nb08.correction_line(rows, plain)
    assert "at 2%: 0.600 without the correction, 0.500 with it" in line
    assert "The correction lowers the error at every budget." in line
    assert line.endswith("Against TopK's mean error: at 2%: 3.0x without, 2.5x with.")
