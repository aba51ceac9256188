"""Notebook 06 and its findings (1 to 3): the tables and figures the findings show read their numbers from the
shipped files (a re-measured file flows in); its exercises' cases and wrong versions do what
their comments say, and the assembly exercise is held to the library's teaching reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pigviz.lessons import exercises as ex
from pigviz.lessons import f1_every_head as f1
from pigviz.lessons import f2_affordable as f2
from pigviz.lessons import f3_bill_and_speed as f3
from pigviz.lessons import nb06a_build_magicpig as nb06a
from pigviz.lessons import nb06b_the_index as nb06b
from pigviz.lessons.exercises import nb06 as ex06
from pigviz.lessons.exercises._framework import failure
from pigviz.lsh import magicpig_reference
from pigviz.lsh.simhash import log_inclusion_probability
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
    assert "mu may be 0" in e.task and ("along q" in e.task if name == "06.log_u" else "your log_u" in e.task)
    # the learner's own pieces: log_u is theirs from notebooks 03, 04a and 04b, and the solution shows them
    pieces = {"cos_centred", "bit_agreement", "log_inclusion_probability"}
    assert pieces <= {h.__name__ for h in e.helpers} and all(f"def {p}" in ex.solution(name) for p in pieces)
    assert e.nudge and 1 <= e.difficulty <= 5 and 1 <= e.importance <= 5 and e.minutes >= 1


def test_the_assembly_reference_equals_the_librarys_teaching_reference_on_every_case():
    from pigviz.study.estimators import shipped_row  # heavy: loads the shipped capture

    e = ex.get("06.magicpig_estimate")
    for case, _ in e.cases():
        out, read = e.reference(*case.args)
        want_out, want_read = magicpig_reference(*case.args)
        assert np.array_equal(np.sort(read), want_read), case.label
        assert np.allclose(out, want_out, rtol=1e-9, atol=1e-12), case.label
    cases = [c for c, _ in e.cases()]
    # two cases are rows of the shipped capture (layers 2 and 25), one has no recent window
    for row, head, position in ((0, 0, 63), (3, 1, 20)):
        _, keys, _ = shipped_row(row, head, position)
        assert sum(np.array_equal(c.args[1], keys) for c in cases) == 1, (row, head, position)
    assert any(c.args[7] == 0 for c in cases)  # (q, keys, values, planes, K, L, sinks, recent)


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


# --------------------------------------------------------------------------- the toy index


def _bt_loop(codes, K):
    n, L = len(codes), len(codes[0])
    offsets, ids = [], []
    for t in range(L):
        row, starts = [], [0]
        for b in range(2**K):
            row += [i for i in range(n) if codes[i][t] == b]
            starts.append(len(row))
        offsets.append(starts)
        ids.append(row)
    return offsets, ids  # lists of lists


def _bt_lexsort_searchsorted(codes, K):
    n, L = codes.shape
    ids = np.stack([np.lexsort((np.arange(n), codes[:, t])) for t in range(L)]).astype(np.int32)
    offsets = np.stack([np.searchsorted(codes[ids[t], t], np.arange(2**K + 1)) for t in range(L)])
    return offsets, ids


def _bt_torch(codes, K):
    c = torch.as_tensor(codes).T
    ids = torch.sort(c, dim=1, stable=True).indices
    counts = torch.stack([torch.bincount(row, minlength=2**K) for row in c])
    return torch.cat([torch.zeros(len(c), 1, dtype=torch.long), counts.cumsum(1)], 1), ids


def _bt_default_argsort(codes, K):
    n, L = codes.shape
    offsets = np.stack([np.searchsorted(np.sort(codes[:, t]), np.arange(2**K + 1)) for t in range(L)])
    return offsets, np.argsort(codes.T, axis=1)  # numpy's default sort is not stable


def _qh_add_at(tables, q_codes):
    offsets, ids = tables
    idx = np.concatenate([ids[t, offsets[t, b] : offsets[t, b + 1]] for t, b in enumerate(q_codes)])
    hits = np.zeros(ids.shape[1], dtype=int)
    np.add.at(hits, idx, 1)
    return hits


def _qh_bincount(tables, q_codes):
    offsets, ids = tables
    idx = np.concatenate([ids[t, offsets[t, b] : offsets[t, b + 1]] for t, b in enumerate(q_codes)])
    return np.bincount(idx, minlength=ids.shape[1])


def _qh_loop(tables, q_codes):
    offsets, ids = tables
    hits = [0] * len(ids[0])
    for t in range(len(q_codes)):
        for i in ids[t][offsets[t][q_codes[t]] : offsets[t][q_codes[t] + 1]]:
            hits[i] += 1
    return hits


@pytest.mark.parametrize("fn", [_bt_loop, _bt_lexsort_searchsorted, _bt_torch], ids=lambda f: f.__name__)
def test_build_tables_accepts_correct_code_written_another_way(fn):
    assert failure(ex.get("06.build_tables"), fn) is None


@pytest.mark.parametrize("fn", [_qh_add_at, _qh_bincount, _qh_loop], ids=lambda f: f.__name__)
def test_query_hits_accepts_correct_code_written_another_way(fn):
    assert failure(ex.get("06.query_hits"), fn) is None


def test_an_unstable_sort_fails_build_tables_saying_the_order_within_a_bucket():
    message = failure(ex.get("06.build_tables"), _bt_default_argsort)
    assert "in the wrong order" in message and "stable" in message


@pytest.mark.parametrize("name", ["06.build_tables", "06.query_hits"])
def test_each_index_mistake_is_named_by_its_own_hint(name):
    e = ex.get(name)
    assert len(e.wrong) >= 5 and e.nudge and (e.difficulty, e.importance) == (3, 4) and 10 <= e.minutes <= 25
    for wrong in e.wrong:
        message = failure(e, wrong.fn)
        assert f"common mistake ({wrong.label}): {wrong.hint}" in message, message
    # the edge cases the check feeds: one key, every key in one bucket, one table
    tables = [ex06.build_tables(*c.args) if name == "06.build_tables" else c.args[0] for c, _ in e.cases()]
    shapes = [(np.asarray(ids).shape, np.diff(offsets, axis=1).max(axis=1)) for offsets, ids in tables]
    assert any(n == 1 for (_, n), _ in shapes)
    assert any(n > 1 and (fullest == n).all() for (_, n), fullest in shapes)
    assert any(L == 1 for (L, _), _ in shapes)


def test_the_index_references_agree_with_the_engines_tables():
    from pigviz.lsh.index import build_index

    g = np.random.default_rng(5)
    index = build_index(torch.from_numpy(g.standard_normal((1, 300, 16)).astype(np.float32)), K=4, L=12, seed=0)
    engine_offsets, engine_ids = index.offsets[0].long().numpy(), index.entries[0].long().numpy()[:, :300]
    codes = np.empty((300, 12), dtype=np.int64)  # each key's bucket, read back from the engine's tables
    for t in range(12):
        codes[engine_ids[t], t] = np.repeat(np.arange(16), np.diff(engine_offsets[t]))
    offsets, ids = ex06.build_tables(codes, 4)
    assert np.array_equal(offsets, engine_offsets) and np.array_equal(ids, engine_ids)
    q_codes = g.integers(0, 16, 12)
    assert np.array_equal(ex06.query_hits((offsets, ids), q_codes), (codes == q_codes).sum(axis=1))


def test_the_csr_check_names_what_is_off():
    compare = ex.get("06.build_tables").compare
    offsets, ids = ex06.build_tables(np.array([[1, 0], [0, 0], [1, 1]]), 1)
    expected = (offsets, ids)
    assert compare((offsets.tolist(), ids.astype(np.int16)), expected) is None
    assert compare((offsets.astype(float), ids), expected) is None  # whole floats
    assert "return the pair" in compare(ids, expected)
    assert "transpose" in compare((offsets, ids.T), expected)
    assert "offsets has shape" in compare((offsets[:, :-1], ids), expected)
    assert "whole numbers" in compare((offsets + 0.5, ids), expected)
    swapped = ids.copy()
    swapped[0, [1, 2]] = swapped[0, [2, 1]]  # bucket 1 of table 0: keys 2 and 0, not 0 and 2
    assert "wrong order" in compare((offsets, swapped), expected)


# --------------------------------------------------------------------------- the tables and figures


def test_part1_table_holds_part1_series_only_with_the_study_numbers(results):
    t = f1.part1_table(results)
    assert len(t) == len(results["spec"]["settings"])
    assert not any(word in " ".join(map(str, t.frame.columns)) for word in ("sparq", "vattention", "exact_top"))
    row = t.frame[t.frame["(K, L)"] == "(10, 150)"].iloc[0]
    assert row["MagicPIG"] == findings.series_summary(results, "magicpig K10 L150")["error"]
    assert row["TopK"] == findings.series_summary(results, "topk @K10 L150")["error"]
    assert row["sampled (authors')"] < row["budget"] < row["Quest budget"]


def test_the_error_figure_draws_two_baselines_at_their_own_budgets(results):
    """Quest as its authors run it (layers 0-1 dense) and StreamingLLM sit at their own budgets,
    Quest ranking every page at the matched ones (review 06-13)."""

    def xs(fig):
        return {t.name: np.asarray(t.x, dtype=float) for t in fig.data if t.name}

    label = f1.METHOD_LABELS
    by_keys = xs(f1.error_budget_figure(results, title="t"))
    magicpig = by_keys[label["magicpig"]]
    # Every baseline but two sits at MagicPIG's budgets (Quest ranking every page within 10%);
    # Quest as its authors run it and StreamingLLM at budgets of their own.
    own = {name for name, x in by_keys.items() if x.shape != magicpig.shape or not np.allclose(x, magicpig, rtol=0.1)}
    assert own == {label["quest"], label["streaming"]}
    # On the bytes axis the same keys cost different bytes: TopK scores every key, MagicPIG does not.
    by_bytes = xs(f1.error_budget_figure(results, x="bytes_share", title="t"))
    assert by_bytes[label["topk"]].min() > 50 > by_bytes[label["magicpig"]].max()


def test_the_claims_quote_what_the_prose_states():
    claims = {c.text: c for m in (nb06a, nb06b, f1, f2, f3) for c in m.claims()}
    assert all(c.passed for c in claims.values()), [c.text for c in claims.values() if not c.passed]
    bill = next(c for t, c in claims.items() if t.startswith("the index takes more memory"))
    assert {"600 bytes", "256-byte", "2.34x", "75 bytes"} <= set(bill.quotes)
    mass = next(c for t, c in claims.items() if "hold less of the true weight" in t)
    assert "layer 2" in mass.value and "layer 25" in mass.value
    for module in (nb06a, nb06b, f1, f2, f3):
        writers = [n for n in dir(module) if n.endswith(("_text", "_bottom_line", "_line")) or n.startswith("answer")]
        assert not writers, f"the prose is markdown in the notebook, not written by {writers}"


def test_each_claim_names_the_notebook_whose_module_states_it():
    for key, module in (("06b", nb06b), ("f1", f1), ("f2", f2), ("f3", f3)):
        assert {c.notebook for c in module.claims()} == {key}
    assert nb06a.claims() == []  # 06a's measured numbers are all in its cells' outputs


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
    t = f1.mass_table(fake)
    assert list(t.frame["MagicPIG total"]) == pytest.approx([0.7, 0.7]) and list(t.frame["head"]) == [6, 7]


def test_bytes_table_matches_the_cost_model():
    from pigviz.attention import cost

    step = experiments.decode_step_pieces(row=0, head=0)
    t = f2.bytes_table(step)
    row = t.frame[t.frame["method"] == "topk"].iloc[0]
    dense = cost.dense_bytes(step["n"], len(step["q"]))
    assert row["share of dense"] == cost.bytes_read("topk", n=step["n"], d=64, keys_read=step["keys_read"]) / dense
    assert row["to choose (keys_read = 0)"] == pytest.approx(0.5)
    mp = t.frame[t.frame["method"] == "magicpig"].iloc[0]  # nothing shared: the planes read by this head (06-1)
    kw = dict(K=10, L=150, candidates=0.0, sampled=len(step["K_S"]))
    unshared = cost.bytes_read("magicpig", n=step["n"], d=64, keys_read=step["keys_read"], heads=1, **kw)
    assert mp["share of dense"] > unshared / dense > mp["share of dense"] - 0.01
    # every row is a share of the same step's dense read (its n keys and values)
    assert (t.frame["KiB read"] * 1024 / t.frame["share of dense"]).to_numpy() == pytest.approx(dense)


def test_matched_view_has_one_row_per_method_and_budget(results):
    t = f2.matched_view(results)
    assert len(t) == len(results["spec"]["settings"]) * 6


def test_full_summary_table_explains_every_series(results):
    t = f1.full_summary_table(results)
    assert len(t) == len(results["series"]) and all(t.frame["what"])


def test_current_page_table_groups_by_share_and_adds_the_means():
    errors = {(row, share): (0.1 * (row + 1), 0.2 * (row + 1)) for row in range(4) for share in (0.02, 0.05)}
    t = f1.current_page_table(errors)
    assert list(t.frame["share"]) == [0.02] * 5 + [0.05] * 5
    means = t.frame[t.frame["layer"] == "mean"]
    assert list(means["current page read"]) == pytest.approx([0.25, 0.25])


def test_quest_rule_error_names_bad_arguments():
    from pigviz import attention

    with pytest.raises(TypeError, match="rule must be"):
        experiments.quest_rule_error(0, 0.05, "quest")
    with pytest.raises(ValueError, match="share must be in"):
        experiments.quest_rule_error(0, 0.0, attention.quest_attention)
