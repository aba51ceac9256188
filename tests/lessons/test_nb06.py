"""Notebook 06's lesson helpers: the tables and figures it shows read their numbers from the
shipped files (a re-measured file flows in); its exercises' cases and wrong versions do what
their comments say, and the assembly exercise is held to the library's teaching reference."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pigviz.lessons import exercises as ex
from pigviz.lessons import nb06_sampled_attention as nb06
from pigviz.lessons.exercises import nb06 as ex06
from pigviz.lessons.exercises._framework import failure
from pigviz.lsh import magicpig_reference
from pigviz.lsh.simhash import log_inclusion_probability
from pigviz.model.shipped import data_dir
from pigviz.study import experiments, findings

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def results():
    return findings.load_shipped_results()


# --------------------------------------------------------------------------- the exercises


def test_the_edge_case_cosines_round_past_one_in_numpy_math_and_torch():
    q, keys = ex06._q_edge, ex06._keys_edge[:2]
    for k in keys:
        assert k @ q / (np.linalg.norm(k) * np.linalg.norm(q)) > 1.0
        assert float(np.dot(k, q)) / (math.sqrt(float(k @ k)) * math.sqrt(float(q @ q))) > 1.0
    t = torch.nn.functional.cosine_similarity(torch.tensor(keys), torch.tensor(q)[None], dim=-1)
    assert bool((t > 1.0).any())


def _log_u_unclipped(q, keys, mu, K, L):
    c = keys - mu
    cos = c @ q / (np.linalg.norm(c, axis=1) * np.linalg.norm(q))
    return log_inclusion_probability(1 - np.arccos(cos) / np.pi, K, L)


def _log_u_per_key(q, keys, mu, K, L):
    out = []
    for k in keys:
        c = k - mu
        cos = float(c @ q) / (math.sqrt(float(c @ c)) * math.sqrt(float(q @ q)))
        out.append(log_inclusion_probability(1 - math.acos(max(-1.0, min(1.0, cos))) / math.pi, K, L))
    return np.array(out)


def test_an_unclipped_arccos_fails_on_the_edge_case_with_its_own_hint_and_a_clipped_loop_passes():
    message = failure(ex.get("06.log_u"), _log_u_unclipped)
    assert "round a hair past 1" in message.splitlines()[0] and "clip it to [-1, 1]" in message
    assert ex.check("06.log_u", _log_u_per_key, quiet=True)


@pytest.mark.parametrize("name", ["06.log_u", "06.sampled_estimate"])
def test_each_wrong_version_is_named_by_its_own_hint_and_the_task_says_what_the_check_feeds(name):
    e = ex.get(name)
    assert len(e.wrong) >= 6 and {"log base 2", "K and L swapped"} <= {w.label for w in e.wrong}
    for wrong in e.wrong:
        message = failure(e, wrong.fn)
        named = [line for line in message.splitlines() if "common mistake" in line]
        assert named == [f"  this is what you get with a common mistake ({wrong.label}): {wrong.hint}"], message
    assert "mu may be 0" in e.task and ("clip" in e.task if name == "06.log_u" else "your log_u" in e.task)
    assert "notebook 04" in e.task if name == "06.log_u" else "notebook 03" in e.task  # the learner's own pieces
    assert e.nudge and 1 <= e.difficulty <= 5 and 1 <= e.importance <= 5 and e.minutes >= 1


def test_the_assembly_reference_equals_the_librarys_teaching_reference_on_every_case():
    e = ex.get("06.magicpig_estimate")
    for case, _ in e.cases():
        out, read = e.reference(*case.args)
        want_out, want_read = magicpig_reference(*case.args)
        assert np.array_equal(np.sort(read), want_read), case.label
        assert np.allclose(out, want_out, rtol=1e-9, atol=1e-12), case.label
    labels = [c.label for c, _ in e.cases()]
    assert sum("real row" in label for label in labels) == 2 and any("recent = 0" in label for label in labels)


def test_the_assembly_check_takes_the_read_in_any_order_and_form_and_names_what_is_off():
    compare = ex.get("06.magicpig_estimate").compare
    out, read = np.array([0.5, -1.0]), np.array([0, 1, 7, 3])
    expected = (out, np.sort(read))
    assert compare((out, read), expected) is None  # unsorted
    assert compare([out.tolist(), list(read[::-1])], expected) is None  # lists
    assert compare((out, np.r_[read, 7]), expected) is None  # a key read twice counts once
    assert compare((out, np.isin(np.arange(9), read)), expected) is None  # a boolean mask
    assert compare((out, read.astype(float)), expected) is None  # whole floats
    assert "integer positions" in compare((out, read + 0.5), expected)
    assert "1 extra (first 5), 1 missing (first 7)" in compare((out, np.array([0, 1, 3, 5])), expected)
    assert "the output differs" in compare((out + 1, read), expected)
    assert "shape" in compare((out[:1], read), expected)
    assert "return the pair" in compare(out, expected)
    assert "NaN" in compare((np.array([np.nan, 0.0]), read), expected)


def test_each_assembly_mistake_is_named_by_its_own_hint():
    e = ex.get("06.magicpig_estimate")
    labels = {w.label for w in e.wrong}
    assert {
        "hits counted per bit",
        "exact keys sampled again",
        "centring forgotten",
        "one table's bucket for all tables",
        "min_hits ignored",
    } <= labels
    for wrong in e.wrong:
        message = failure(e, wrong.fn)
        assert f"common mistake ({wrong.label}): {wrong.hint}" in message, message
    assert (e.difficulty, e.importance, e.minutes) == (4, 5, 20) and e.nudge


# --------------------------------------------------------------------------- the tables and figures


def test_part1_table_holds_part1_series_only_with_the_study_numbers(results):
    t = nb06.part1_table(results)
    assert len(t) == len(results["spec"]["settings"])
    assert not any(word in " ".join(map(str, t.frame.columns)) for word in ("sparq", "vattention", "exact_top"))
    row = t.frame[t.frame["(K, L)"] == "(10, 150)"].iloc[0]
    assert row["MagicPIG"] == findings.series_summary(results, "magicpig K10 L150")["error"]
    assert row["TopK"] == findings.series_summary(results, "topk @K10 L150")["error"]
    assert row["sampled (authors')"] < row["budget"] < row["Quest budget"]


def test_the_error_figure_says_which_baselines_read_as_many_keys(results):
    """Quest as its authors run it (layers 0-1 dense) and StreamingLLM sit at their own budgets,
    Quest ranking every page at the matched ones (review 06-13)."""
    fig = nb06.error_budget_figure(results, title="t")
    note = fig.layout.annotations[0].text
    assert "matched baselines read as many keys" in note
    assert "Quest (its authors' rule, layers 0-1 dense) and StreamingLLM at their own budgets" in note
    assert note.endswith("Quest, every page ranked, matched")
    only_matched = nb06.error_budget_figure(results, ("magicpig", "topk"), title="t").layout.annotations[0].text
    assert "own budgets" not in only_matched and "baselines read as many keys" in only_matched
    bytes_note = nb06.error_budget_figure(results, x="bytes_share", title="t").layout.annotations[0].text
    assert "(not as many bytes)" in bytes_note


def test_the_claims_quote_what_the_prose_states():
    claims = {c.text: c for c in nb06.claims()}
    assert all(c.passed for c in claims.values()), [c.text for c in claims.values() if not c.passed]
    bill = next(c for t, c in claims.items() if t.startswith("the index takes more memory"))
    assert {"600 bytes", "256-byte", "2.34x", "75 bytes"} <= set(bill.quotes)
    mass = next(c for t, c in claims.items() if "hold less of the true weight" in t)
    assert "layer 2" in mass.value and "layer 25" in mass.value
    writers = [n for n in dir(nb06) if n.endswith(("_text", "_bottom_line", "_line")) or n.startswith("answer")]
    assert not writers, f"the prose is markdown in the notebook, not written by {writers}"


def test_mass_table_renders_mass_captured_rows():
    fake = {
        0: {
            "layer": 2,
            "heads": [6, 7],
            "budget": [0.07, 0.06],
            "exact": [0.4, 0.5],
            "sampled": [0.3, 0.2],
            "topk": [0.9, 0.8],
        }
    }
    t = nb06.mass_table(fake)
    assert list(t.frame["MagicPIG total"]) == pytest.approx([0.7, 0.7]) and list(t.frame["head"]) == [6, 7]


def test_speed_table_reads_every_number_from_the_file_and_names_both_caches(tmp_path):
    """Review 06-3: the timed step reads float32 K/V; the tables are set against both caches."""
    data = json.loads((data_dir() / "bench_attend_cpu.json").read_text(encoding="utf-8"))
    for r in data["rows"]:
        r["speedup"] = 42.0 + r["n"] / 1e6
        r["new_field"] = 1.0  # a field a re-measurement adds does not break the table
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    t = nb06.speed_table(path)
    assert len(t) == len(data["rows"]) and "42.0x" in repr(t)
    assert {"tables / KV timed (fp32)", "tables / KV in fp16"} <= set(t.frame.columns)
    assert "float32 K/V" in t.caption and "one batched SDPA call" in t.caption  # review 06-7
    assert "build s" not in t.frame.columns  # review 06-8: the first row's build paid a one-off start-up
    for r in data["rows"]:  # without the floor fields the table still stands
        del r["attend_floor_ms"], r["sdpa_floor_ms"]
    path.write_text(json.dumps(data), encoding="utf-8")
    assert "floor ms" not in repr(nb06.speed_table(path))


def test_bytes_table_matches_the_cost_model():
    from pigviz.attention import cost

    step = experiments.decode_step_pieces(row=0, head=0)
    t = nb06.bytes_table(step)
    row = t.frame[t.frame["method"] == "topk"].iloc[0]
    dense = cost.dense_bytes(step["n"], len(step["q"]))
    assert row["share of dense"] == cost.bytes_read("topk", n=step["n"], d=64, keys_read=step["keys_read"]) / dense
    assert row["to choose (keys_read = 0)"] == pytest.approx(0.5)
    mp = t.frame[t.frame["method"] == "magicpig"].iloc[0]  # nothing shared: the planes read by this head (06-1)
    kw = dict(K=10, L=150, candidates=0.0, sampled=len(step["K_S"]))
    unshared = cost.bytes_read("magicpig", n=step["n"], d=64, keys_read=step["keys_read"], heads=1, **kw)
    assert mp["share of dense"] > unshared / dense > mp["share of dense"] - 0.01
    assert "nothing shared, MagicPIG's hyperplanes included" in t.caption


def test_matched_view_has_one_row_per_method_and_budget(results):
    t = nb06.matched_view(results)
    assert len(t) == len(results["spec"]["settings"]) * 6


def test_full_summary_table_explains_every_series(results):
    t = nb06.full_summary_table(results)
    assert len(t) == len(results["series"]) and all(t.frame["what"])


def test_current_page_table_groups_by_share_and_adds_the_means():
    errors = {(row, share): (0.1 * (row + 1), 0.2 * (row + 1)) for row in range(4) for share in (0.02, 0.05)}
    t = nb06.current_page_table(errors)
    assert list(t.frame["share"]) == [0.02] * 5 + [0.05] * 5
    means = t.frame[t.frame["layer"] == "mean"]
    assert list(means["current page read"]) == pytest.approx([0.25, 0.25])


def test_quest_rule_error_names_bad_arguments():
    from pigviz import attention

    with pytest.raises(TypeError, match="rule must be"):
        experiments.quest_rule_error(0, 0.05, "quest")
    with pytest.raises(ValueError, match="share must be in"):
        experiments.quest_rule_error(0, 0.0, attention.quest_attention)
