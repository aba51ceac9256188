"""Numbers that notebooks 01-03 must state in static text (an exercise's task, which the learner
copy shows before anything runs; a scenario's description), tied to the values they describe.
Every other number in those notebooks' prose is printed from the computation (``Markdown(f"...")``)
and so checked by nbval, or bound by a claim (``pigviz verify --prose``)."""

import re
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


def _numbers(pattern: str, text: str) -> list:
    """The numbers ``pattern``'s groups capture in ``text``, once each match (words such as
    "half" read as numbers), as floats."""
    words = {"half": 1 / 2, "third": 1 / 3, "quarter": 1 / 4}
    found = re.findall(pattern, text)
    assert found, f"the prose no longer states {pattern!r}"
    number = lambda g: words[g] if g in words else float(g.rstrip(".").replace(",", ""))  # noqa: E731
    return [[number(g) for g in np.atleast_1d(m)] for m in found]


def _case(exercise: str, label: str):
    (case,) = [c for c in ex.get(exercise).make_cases() if c.label == label]
    return case


def test_01_the_sink_scenario_is_described_by_its_own_numbers():
    sink = sb.make_scenario("sink")
    flat = np.delete(sink.values, sink.sink_index)
    prose = _prose("01_stick_balance")
    said = _numbers(r"values between ([\d.]+) and ([\d.]+)", prose)
    assert said == [pytest.approx([flat.min(), flat.max()], abs=0.005)]
    assert _numbers(r"token 0 holds (\w+) the weight", prose) == [pytest.approx([sink.weights[sink.sink_index]])]
    assert _numbers(r"same budget of (\d+) of (\d+) keys", prose) == [[sb.DEFAULT_BUDGET, sink.n]]


def test_02_the_long_key_of_the_cone_check_is_about_5_times_the_rest_and_25_long():
    keys = _case("02.cos_to_mean_direction", "a cone plus one long key pointing the other way").args[0]
    lengths = np.linalg.norm(keys, axis=1)
    measured = [round(lengths[0] / np.median(lengths[1:])), round(lengths[0])]
    said = r"about (\d+) times longer than the rest, of length (\d+)"
    assert _numbers(said, _prose("02_key_cone")) == [measured] == [[5, 25]]
    assert _numbers(said, ex.get("02.cos_to_mean_direction").task) == [measured]


def test_02_the_attention_check_uses_scores_in_the_thousands():
    scores = [np.abs(k @ q / np.sqrt(len(q))).max() for q, k in (c.args for c in ex02._attention_cases())]
    powers = {"hundreds": 2, "thousands": 3, "millions": 6}
    for text in (_prose("02_key_cone"), ex.get("02.attention_weights").task):
        (said,) = re.findall(r"the checks use (\w+)", text)
        assert 10 ** powers[said] <= max(scores) < 10 ** (powers[said] + 1), (said, max(scores))


def test_02_says_a_quarter_where_a_claim_holds_every_layer_to_a_quarter():
    """The markdown says token 0's value is "about a quarter" of a typical one; a claim measures
    it in every captured layer, and each measured ratio is within 25% of what the prose says."""
    ((said,),) = _numbers(r"token 0's value is about a (\w+) of the median value's length", _prose("02_key_cone"))
    (claim,) = [c for c in nb02.claims() if c.text.startswith("Token 0's value")]
    measured = [float(v) for v in re.findall(r"\d+\.\d+", claim.value)]
    assert claim.passed and measured and all(abs(v / said - 1) <= 0.25 for v in measured), (said, claim.value)


def test_the_directions_notebooks_01_and_02_state_are_passing_claims():
    """The directions review_01_02 corrected ("more slowly, then faster", "best of the sharpnesses
    tried", "almost the same way") are claims that pass, and the one number the prose quotes from
    them ("5.6 times") is the claim's."""
    from pigviz.lessons import nb01_stick_balance as nb01

    c01 = {c.text: c for c in nb01.claims()}
    (slow_then_fast,) = [c for t, c in c01.items() if t.startswith("...first more slowly than 1/sqrt(B)")]
    (correction,) = [c for t, c in c01.items() if "correction w0/u0" in t]
    (best,) = [c for t, c in c01.items() if "best of the sharpnesses tried" in t]
    (same_way,) = [c for c in nb02.claims() if "point almost the same way" in c.text]
    assert slow_then_fast.passed and correction.passed and best.passed and same_way.passed
    p01 = " ".join(_prose("01_stick_balance").split())
    assert _numbers(r"correction about ([\d.]+) times a flat key's", p01) == [[float(correction.quotes[0])]]
