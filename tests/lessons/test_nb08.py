"""Notebook 08: the capstone's estimators (pigviz.study.capstone), the notebook's own warm-up
cells held to them, the open exercise's stand-in and the tables it shows."""

from pathlib import Path

import jupytext
import numpy as np
import pytest

from pigviz.attention import cost, protocol
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb08_your_estimator as nb08
from pigviz.lessons.exercises import nb03
from pigviz.lessons.exercises import nb08 as ex08
from pigviz.study import capstone

SOURCE = Path(__file__).resolve().parents[2] / "notebooks" / "src" / "08_your_estimator.py"


def row(n=200, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(d) * 2, rng.standard_normal((n, d)), rng.standard_normal((n, 4)) + 1


def _notebook_cell(prefix):
    cells = [c.source for c in jupytext.read(SOURCE, fmt="py:percent").cells if c.cell_type == "code"]
    (cell,) = [c for c in cells if c.startswith(prefix)]
    return cell


def test_the_notebooks_warm_up_cells_are_the_librarys_estimators():
    """The notebook writes uniform_sample and no_correction in view, on the learner's functions;
    with the references in their place they give the library's copies, draw for draw."""
    namespace = {"np": np, "protocol": protocol, "corrected_sample": ex08.corrected_sample, "softmax": nb03.softmax}
    exec(_notebook_cell("def uniform_sample("), namespace)  # noqa: S102 - the notebook's own cell
    exec(_notebook_cell("def no_correction("), namespace)  # noqa: S102
    for n, budget in ((200, 80), (200, 200), (200, 10), (8192, 164)):
        q, k, v = row(n=n)
        for mine, library in (("uniform_sample", capstone.uniform_sample), ("no_correction", capstone.no_correction)):
            out, read = protocol.call(namespace[mine], q, k, v, budget)
            want, want_read = protocol.call(library, q, k, v, budget)
            assert read.tolist() == want_read.tolist()
            np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-14)
    assert "def uniform_sample(" not in Path(nb08.__file__).read_text()  # one copy in view, none in the module


def test_uniform_sample_reads_its_budget_exact_set_first():
    q, k, v = row()
    out, read = protocol.call(capstone.uniform_sample, q, k, v, 80)
    assert read.size == 80 and set(range(4)) | set(range(136, 200)) <= set(read.tolist())
    out_all, _ = protocol.call(capstone.uniform_sample, q, k, v, 200)
    np.testing.assert_allclose(out_all, protocol.exact_output(q, k, v), atol=1e-12)  # every key: exact
    _, few = protocol.call(capstone.uniform_sample, q, k, v, 10)
    assert few.tolist() == [0, 1, 2, 3, 194, 195, 196, 197, 198, 199]  # the exact set cut to the budget
    plain, read_plain = protocol.call(capstone.no_correction, q, k, v, 80)
    assert read_plain.tolist() == read.tolist() and not np.allclose(plain, out)


def test_corrected_mix_is_the_exercise_and_refuses_bad_input():
    q, k, v = row()
    exact, sampled = np.arange(6), np.array([10, 50, 90, 130])
    np.testing.assert_allclose(
        capstone.corrected_mix(q, k, v, exact, sampled), ex08.corrected_sample(q, k, v, exact, sampled), rtol=1e-12
    )
    with pytest.raises(ValueError, match="both empty"):
        capstone.corrected_mix(q, k, v, [], [])
    with pytest.raises(ValueError, match="indices in 0 .. 199"):
        capstone.corrected_mix(q, k, v, [0, 200], [])


def test_the_worked_example_reads_every_key_that_enters_its_output():
    q, k, v = row()
    out, read = protocol.call(capstone.top_plus_sample, q, k, v, 30)
    s = k @ q / 4.0
    top = np.argsort(-s)[:15]
    assert read.size == 30 and set(top.tolist()) <= set(read.tolist())
    drawn = np.setdiff1d(read, top)
    np.testing.assert_allclose(out, ex08.corrected_sample(q, k, v, top, drawn), rtol=1e-12)
    np.testing.assert_allclose(protocol.call(capstone.top_plus_sample, q, k, v, 200)[0], protocol.exact_output(q, k, v))
    assert capstone.top_plus_sample.bytes_read(200, 16, 4, 30) == cost.bytes_read(
        "topk", n=200, d=16, dv=4, keys_read=30
    )


def test_topk_plus_tail_fills_topks_dropped_weight_with_the_dropped_mean():
    q, k, v = row()
    out, read = protocol.call(capstone.topk_plus_tail, q, k, v, 30)
    s = k @ q / 4.0
    top = np.argsort(-s)[:30]
    w = np.exp(s - s.max())
    rest = np.setdiff1d(np.arange(200), top)
    want = (w[top] @ v[top] + w[rest].sum() * v[rest].mean(0)) / w.sum()
    np.testing.assert_allclose(out, want, atol=1e-12)
    assert sorted(read.tolist()) == sorted(top.tolist())
    assert (
        capstone.topk_plus_tail.bytes_read(200, 16, 4, 30)
        == cost.bytes_read("topk", n=200, d=16, dv=4, keys_read=30) + 8
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
        assert nb08.yours_or_worked_example(my_estimator) is capstone.top_plus_sample
        ex.enable_solutions(False)
        with pytest.raises(nb08.OpenExerciseBlank, match="my_estimator is still blank") as info:
            nb08.yours_or_worked_example(my_estimator)
        assert "my_estimator = capstone.top_plus_sample" in "\n".join(info.value._render_traceback_())
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


def test_ranking_and_errors_tables():
    lines = repr(nb08.ranking_table(fake_rows(), 0.02)).splitlines()
    assert lines[0].startswith("At 2% of the keys: 2 rows each")
    assert lines[1].split()[:4] == ["rank", "estimator", "mean", "error"]
    assert lines[2].split()[:3] == ["1", "mine", "0.125"] and "100%" in lines[2]  # beats TopK on both rows
    with pytest.raises(ValueError, match="fraction must be one of"):
        nb08.ranking_table(fake_rows(), 0.05)
    lines = repr(nb08.errors_table(fake_rows(), ["quest", "topk"])).splitlines()
    assert lines[1].split()[:4] == ["2%", "Quest", "(pages", "of"] and "2.25" in lines[1]
    assert lines[2].split()[:3] == ["2%", "TopK", "0.200"]
    with pytest.raises(ValueError, match="names must be estimators of the rows"):
        nb08.errors_table(fake_rows(), ["nobody"])
