"""Notebook 06's lesson helpers: the tables, figures and computed sentences it shows read their
numbers from the shipped files (a re-measured file flows in), and its exercises' new cases and
wrong versions do what their comments say."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pigviz.lessons import exercises as ex
from pigviz.lessons import nb06_sampled_attention as lesson
from pigviz.lessons.exercises import nb06 as ex06
from pigviz.lessons.exercises._framework import failure
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
    assert "clip" in e.task and "natural log" in e.task and "mu may be 0" in e.task
    assert 1 <= e.difficulty <= 5 and 1 <= e.importance <= 5 and e.minutes >= 1


# --------------------------------------------------------------------------- section 2


def test_part1_table_holds_part1_series_only_with_the_study_numbers(results):
    t = lesson.part1_table(results)
    assert len(t) == len(results["spec"]["settings"])
    assert not any(word in " ".join(map(str, t.frame.columns)) for word in ("sparq", "vattention", "exact_top"))
    row = t.frame[t.frame["(K, L)"] == "(10, 150)"].iloc[0]
    assert row["MagicPIG"] == findings.series_summary(results, "magicpig K10 L150")["error"]
    assert row["TopK"] == findings.series_summary(results, "topk @K10 L150")["error"]
    assert row["sampled (authors')"] < row["budget"] < row["Quest budget"]


def test_reveal_compares_a_guess_and_handles_none_and_nonsense(results):
    won, total = findings.wins(results, "magicpig K10 L150", "topk @K10 L150")
    assert f"**{won} of {total}**" in lesson.reveal(..., results) and "no prediction" in lesson.reveal(..., results)
    assert "You predicted **100**" in lesson.reveal(100, results)
    assert "should be a number from 0 to 270" in lesson.reveal("many", results)
    assert "should be a number" in lesson.reveal(1000, results)


def test_hybrid_wins_sum_the_cells_of_every_budget(results):
    won, total = lesson.hybrid_wins(results)
    per = [findings.wins(results, f"hybrid @K{K} L{L}", f"topk @K{K} L{L}") for K, L in results["spec"]["settings"]]
    assert (won, total) == (sum(w for w, _ in per), sum(t for _, t in per)) and total == 4 * 270


def test_computed_sentences_carry_the_study_numbers_and_no_nan(results):
    texts = [
        lesson.study_bottom_line(results),
        lesson.layer0_text(results),
        lesson.sampled_share_text(results),
        lesson.matched_bottom_line(results),
        lesson.answer_hybrid(results),
    ]
    assert all("nan" not in t.lower() for t in texts)
    assert f"{findings.series_summary(results, 'topk @K10 L150')['error']:.4f}" in texts[0]
    assert f"{findings.series_summary(results, 'magicpig K10 L150')['budget_sampled']:.2%}" in texts[2]
    assert "Bottom line" in texts[0] and "Bottom line" in texts[1] and "Bottom line" in texts[3]


def test_claims_of_cause_that_were_not_measured_say_so(results):
    assert "not measured here" in lesson.answer_hybrid(results)


def _reads(counts=(164, 119, 160), layer=2, head=6, n=8192):
    shares = (0.75, 0.52, 0.49)
    names = ("topk", "magicpig", "quest")
    methods = {m: {"read": np.arange(c), "weight_read": w} for m, c, w in zip(names, counts, shares)}
    return {"layer": layer, "head": head, "n": n, "budget": 164, "methods": methods}


def test_the_token_views_bottom_line_counts_each_read_and_says_the_budget_is_a_cap():
    step = {"layer": 2, "model_head": 6, "n": 8192, "keys_read": 655}
    call = {"min_hits": 4, "sampled": 51, "fallback": False}
    text = lesson.reads_bottom_line(_reads(), step, call)
    counts = "TopK 164, MagicPIG (10, 150) 119, Quest (pages of 16) 160"
    assert f"within the same budget of 164 keys (read: {counts})" in text
    assert "raises `min_hits` from 2" in text and "here to 4, which leaves 51 sampled keys" in text
    assert "the same query reads 655 keys (8.0%, section 1)" in text
    other = lesson.reads_bottom_line(_reads(head=7), step, call)  # another query: no comparison with section 1
    assert "655" not in other and "here to 4" in other


def test_the_live_runs_time_is_stated_coarsely():
    assert "in under a minute on this machine" in lesson.live_bottom_line(3.2)
    assert "in about 2 minutes on this machine" in lesson.live_bottom_line(130.0)


def test_the_bill_separates_table_ids_from_bucket_offsets():
    text = lesson.bill_bottom_line()
    assert "600 bytes of table ids beside its 256-byte key and value, 2.34x on their own" in text
    assert "add 75 bytes per key at 8,192 tokens" in text and "2.64x the KV cache" in text


def test_the_flat_heads_answer_rests_on_measurements_not_the_sink_alone(results):
    sink = experiments.load_shipped_capture().extras["sink_weight"].numpy()
    text = lesson.answer_flat_heads(results, sink)
    tk = findings.head_grid(results, "topk @K10 L150")
    won = lesson.head_ratio(results) < 1
    assert f"{np.median(tk[won]):.3f}" in text and f"{np.median(tk[~won]):.3f}" in text
    assert f"{(sink < 0.5).sum()} of all {sink.size} heads" in text


# --------------------------------------------------------------------------- section 7: a re-measured file flows in


def test_speed_table_and_text_read_every_number_from_the_file(tmp_path):
    data = json.loads((data_dir() / "bench_attend_cpu.json").read_text(encoding="utf-8"))
    for r in data["rows"]:
        r["speedup"] = 42.0 + r["n"] / 1e6
        r["new_field"] = 1.0  # a field a re-measurement adds does not break the table
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    text = lesson.speed_text(path)
    assert "42.0x" in text and "Bottom line" in text
    t = lesson.speed_table(path)
    assert len(t) == len(data["rows"]) and "42.0x" in repr(t)
    for r in data["rows"]:  # without the floor fields the text and the table still stand
        del r["attend_floor_ms"], r["sdpa_floor_ms"]
    path.write_text(json.dumps(data), encoding="utf-8")
    assert "floor" not in lesson.speed_text(path) and "floor ms" not in repr(lesson.speed_table(path))


# --------------------------------------------------------------------------- Part 2 and the appendix


def test_bytes_table_matches_the_cost_model():
    from pigviz.attention import cost

    step = experiments.decode_step_pieces(row=0, head=0)
    results = findings.load_shipped_results()
    t = lesson.bytes_table(step, results)
    row = t.frame[t.frame["method"] == "topk"].iloc[0]
    dense = cost.dense_bytes(step["n"], len(step["q"]))
    assert row["share of dense"] == cost.bytes_read("topk", n=step["n"], d=64, keys_read=step["keys_read"]) / dense
    assert row["to choose (keys_read = 0)"] == pytest.approx(0.5)
    assert "Bottom line" in lesson.bytes_text(step)


def test_matched_view_has_one_row_per_method_and_budget(results):
    t = lesson.matched_view(results)
    assert len(t) == len(results["spec"]["settings"]) * 6


def test_full_summary_table_explains_every_series(results):
    t = lesson.full_summary_table(results)
    assert len(t) == len(results["series"]) and all(t.frame["what"])


def test_current_page_table_groups_by_share_and_adds_the_means():
    errors = {(row, share): (0.1 * (row + 1), 0.2 * (row + 1)) for row in range(4) for share in (0.02, 0.05)}
    t = lesson.current_page_table(errors)
    assert list(t.frame["share"]) == [0.02] * 5 + [0.05] * 5
    means = t.frame[t.frame["layer"] == "mean"]
    assert list(means["current page read"]) == pytest.approx([0.25, 0.25])


def test_quest_rule_error_names_bad_arguments():
    from pigviz import attention

    with pytest.raises(TypeError, match="rule must be"):
        experiments.quest_rule_error(0, 0.05, "quest")
    with pytest.raises(ValueError, match="share must be in"):
        experiments.quest_rule_error(0, 0.0, attention.quest_attention)
