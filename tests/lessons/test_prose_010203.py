"""Numbers that notebooks 01-03 must state in static text (an exercise's task, which the learner
copy shows before anything runs; a scenario's description), tied to the values they describe.
Every other number in those notebooks' prose is printed from the computation (``Markdown(f"...")``)
and so checked by nbval, or bound by a claim (``pigviz verify --prose``)."""

from pathlib import Path

import numpy as np
import pytest

from pigviz.lessons import exercises as ex
from pigviz.lessons import nb02_key_cone as nb02
from pigviz.lessons.exercises import nb02 as ex02
from pigviz.toy import stick_balance as sb

SRC = Path(__file__).resolve().parents[2] / "notebooks" / "src"


def _prose(stem: str) -> str:
    """The notebook's markdown, comment markers stripped and lines joined."""
    text = (SRC / f"{stem}.py").read_text(encoding="utf-8")
    return " ".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in text.splitlines())


def _case(exercise: str, label: str):
    (case,) = [c for c in ex.get(exercise).make_cases() if c.label == label]
    return case


def test_01_the_sink_scenario_is_described_by_its_own_numbers():
    sink = sb.make_scenario("sink")
    flat = np.delete(sink.values, sink.sink_index)
    prose = _prose("01_stick_balance")
    assert f"values between {flat.min():.2f} and {flat.max():.2f}" in prose
    assert sink.weights[sink.sink_index] == pytest.approx(0.5) and "token 0 holds half the weight" in prose
    assert f"same budget of {sb.DEFAULT_BUDGET} of {sink.n} keys" in prose


def test_02_the_long_key_of_the_cone_check_is_about_5_times_the_rest_and_25_long():
    keys = _case("02.cos_to_mean_direction", "a cone plus one long key pointing the other way").args[0]
    lengths = np.linalg.norm(keys, axis=1)
    ratio = lengths[0] / np.median(lengths[1:])
    assert round(ratio) == 5 and round(lengths[0]) == 25
    said = "one key about 5 times longer than the rest, of length 25"
    assert said in _prose("02_key_cone")
    assert "one about 5 times longer than the rest, of length 25" in ex.get("02.cos_to_mean_direction").task


def test_02_the_attention_check_uses_scores_in_the_thousands():
    scores = [np.abs(k @ q / np.sqrt(len(q))).max() for q, k in (c.args for c in ex02._attention_cases())]
    assert max(scores) >= 1000
    assert "the checks use thousands" in _prose("02_key_cone")
    assert "the checks use thousands" in ex.get("02.attention_weights").task


def test_02_says_a_quarter_where_a_claim_holds_every_layer_to_a_quarter():
    """The markdown says token 0's value is "about a quarter" of a typical one; a claim checks it."""
    assert "about a quarter of the median value's length" in _prose("02_key_cone")
    (claim,) = [c for c in nb02.claims() if "about a quarter" in c.text]
    assert claim.passed


def test_the_review_of_01_and_02_is_fixed_in_the_prose_and_its_directions_are_claims():
    """Each corrected sentence of review_01_02 is there, the one it replaced is gone, and the
    direction it states ("more slowly, then faster", "5.6 times", "almost the same way") is a
    passing claim."""
    from pigviz.lessons import nb01_stick_balance as nb01

    p01, p02 = _prose("01_stick_balance"), _prose("02_key_cone")
    gone = {
        "01": ["a little faster than", "each rare sink draw", "are the best proposal", "far above the sink's"],
        "02": ["minutes on a laptop CPU", "In this model the two point", "belongs to token 0 in this model"],
    }
    for prose, phrases in ((p01, gone["01"]), (p02, gone["02"])):
        for phrase in phrases:
            assert phrase not in prose
    c01 = {c.text: c for c in nb01.claims()}
    (slow_then_fast,) = [c for t, c in c01.items() if t.startswith("...first more slowly than 1/sqrt(B)")]
    (correction,) = [c for t, c in c01.items() if "correction w0/u0" in t]
    assert slow_then_fast.passed and "at first more slowly than" in p01 and "then faster" in p01
    assert correction.passed and f"about {correction.quotes[0]} times a flat key's" in " ".join(p01.split())
    assert "do best of the sharpnesses tried" in p01
    (same_way,) = [c for c in nb02.claims() if "point almost the same way" in c.text]
    assert same_way.passed and "In every captured KV head the two point almost the same way" in " ".join(p02.split())
    assert "### Your turn: cone tightness" in (SRC / "02_key_cone.py").read_text(encoding="utf-8")
