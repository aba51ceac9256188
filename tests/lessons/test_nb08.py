"""Notebook 08: the capstone's estimators (pigviz.study.capstone), the notebook's own warm-up
cells held to them, the open exercise's stand-in and the table the notebook builds in view from the records."""

import ast
import re
from pathlib import Path

import jupytext
import numpy as np
import pandas as pd
import pytest

from pigviz import lessons
from pigviz.attention import cost, protocol
from pigviz.lessons import exercises as ex
from pigviz.lessons import nb08_your_estimator as nb08
from pigviz.lessons.exercises import nb03
from pigviz.lessons.exercises import nb08 as ex08
from pigviz.study import capstone, estimators

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


def _definitions(prefix, namespace):
    """Run the top-level definitions (functions, constants) of the notebook's cell opening with ``prefix``."""
    tree = ast.parse(_notebook_cell(prefix))
    tree.body = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.Assign))]
    exec(compile(tree, str(SOURCE), "exec"), namespace)  # noqa: S102 - the notebook's own cell
    return namespace


def test_the_notebooks_scoreboard_builds_its_table_from_the_records():
    """The table §2 and §3 show is built in view from evaluate_estimator's records: it is held here
    to the same means, ratios and per-row wins as :func:`pigviz.study.estimators.ranking`."""
    ns = _definitions("FORMATS = ", {"pd": pd, "np": np, "lessons": lessons, "estimators": estimators})
    rows = fake_rows()
    board = ns["scoreboard"](pd.DataFrame(rows), 0.02)
    frame = board.frame.set_index("estimator")
    assert list(frame.index) == ["mine", "TopK", "Quest (pages of 16)"]  # lowest mean error first, TopK labelled
    want = {e["estimator"]: e for e in estimators.ranking(rows)}
    for label, name in (("mine", "mine"), ("TopK", "topk"), ("Quest (pages of 16)", "quest")):
        np.testing.assert_allclose(frame.loc[label, "mean error"], want[name]["error"])
        np.testing.assert_allclose(frame.loc[label, "error / TopK's"], want[name]["vs_reference"])
        np.testing.assert_allclose(frame.loc[label, "keys read"], want[name]["budget_used"])
    assert frame.loc["mine", "beats TopK on"] == 1.0 and frame.loc["Quest (pages of 16)", "beats TopK on"] == 0.0
    assert np.isnan(frame.loc["TopK", "beats TopK on"])  # not compared with itself: shown as -
    assert np.isnan(frame.loc["mine", "bytes read, of dense"]) and frame.loc["TopK", "bytes read, of dense"] == 0.5
    per_estimator = sum(r["estimator"] == "topk" for r in rows)
    assert re.findall(r"\d+", board.caption) == ["2", str(per_estimator)]  # the budget in %, the rows averaged
    with pytest.raises(KeyError, match="topk"):  # the ratios need TopK's records at that budget
        ns["scoreboard"](pd.DataFrame(rows), 0.05)


def _section_1_row():
    """§1's row at 2% and its four estimators, as the notebook builds them."""
    from pigviz.lsh import estimators as library

    q, keys, values = estimators.shipped_row(row=0, head=0, position=63)
    n, d, dv = keys.shape[0], keys.shape[1], values.shape[1]
    peers = {
        "TopK": protocol.topk(),
        "MagicPIG": library.magicpig(heads=9),
        "Quest": protocol.quest(),
        "StreamingLLM": protocol.streaming(),
    }
    return dict(q=q, keys=keys, values=values, n=n, d=d, dv=dv, budget=protocol.keys_for(0.02, n), peers=peers)


def test_the_notebooks_byte_count_in_view_is_what_each_estimator_declares():
    """§4 writes pigviz.attention.cost's model out in view on §1's row: each line must be the bytes
    the estimator declares (``bytes_read``, what every record's bytes_share holds), and the last line
    MagicPIG's with its hyperplanes counted per query head."""
    ns = {"np": np, "pd": pd, "protocol": protocol, "lessons": lessons, **_section_1_row()}
    exec(_notebook_cell("B, I = 2, 4"), ns)  # noqa: S102 - the notebook's own cell
    bill, n, d, dv = ns["bill"], ns["n"], ns["d"], ns["dv"]
    dense = cost.dense_bytes(n, d, dv)
    for label, est in ns["peers"].items():
        m = protocol.call(est, ns["q"], ns["keys"], ns["values"], ns["budget"])[1].size
        assert bill.loc[label, "keys read"] == m
        np.testing.assert_allclose(bill.loc[label, "of dense"], est.bytes_read(n, d, dv, m) / dense, rtol=1e-12)
    mp, last = ns["peers"]["MagicPIG"], ns["peers"]["MagicPIG"].last_call
    per_head = cost.bytes_read(
        "magicpig",
        n=n,
        d=d,
        dv=dv,
        keys_read=bill.loc["MagicPIG", "keys read"],
        K=mp.K,
        L=mp.L,
        heads=1,
        candidates=last["candidates"],
        sampled=last["sampled"],
    )
    np.testing.assert_allclose(bill.loc["MagicPIG, planes per query head", "of dense"], per_head / dense, rtol=1e-12)
    assert bill.loc["MagicPIG, planes per query head", "of dense"] > 3 * bill.loc["MagicPIG", "of dense"]


def test_the_notebooks_record_by_hand_is_the_record():
    """§2 shows §1's row computed by hand beside its record: the two must agree, so the records the
    later tables use are §1's arithmetic."""
    row = _section_1_row()
    race = pd.DataFrame(estimators.evaluate_estimator(capstone.uniform_sample, baselines=(), budgets=(0.02,)))
    exact = protocol.exact_output(row["q"], row["keys"], row["values"])
    ns = {"np": np, "pd": pd, "protocol": protocol, "lessons": lessons, "race": race, "exact": exact, **row}
    ns["evaluate_estimator"] = lambda *a, **k: race.to_dict("records")  # the records, already computed
    ns["uniform_sample"] = capstone.uniform_sample
    exec(_notebook_cell("race = pd.DataFrame(evaluate_estimator(uniform_sample))"), ns)  # noqa: S102
    record, by_hand = ns["record"], ns["by_hand"]
    assert len(record) == 1 and int(record.n.iloc[0]) == row["n"]
    np.testing.assert_allclose(by_hand.error.iloc[0], record.error.iloc[0], rtol=1e-12)
    assert by_hand.keys_read.iloc[0] == record.keys_read.iloc[0]
