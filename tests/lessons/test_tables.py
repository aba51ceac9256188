import math

import pytest

from pigviz import lessons
from pigviz.lessons.tables import table


def test_text_is_what_the_formats_say_numbers_right_words_left():
    t = table(
        [{"method": "topk", "error": 0.049213}, {"method": "magicpig", "error": 0.0969}], formats={"error": "{:.3f}"}
    )
    assert repr(t).splitlines() == ["method    error", "topk      0.049", "magicpig  0.097"]


def test_unformatted_floats_never_print_all_their_digits():
    assert "0.1235" in repr(table([{"x": 0.123456789}])) and "0.123456789" not in repr(table([{"x": 0.123456789}]))


def test_nan_and_none_show_as_a_dash():
    t = table([{"x": math.nan, "y": None}], formats={"x": "{:.2f}"})
    assert repr(t).splitlines()[1].split() == ["-", "-"]


def test_html_highlights_the_minimum_and_fails_in_red():
    t = table(
        [{"m": "a", "e": 0.3, "r": "PASS"}, {"m": "b", "e": 0.1, "r": "FAIL"}],
        highlight={"e": "min"},
        fail_where={"r": "FAIL"},
    )
    html = t._repr_html_()
    assert "<table" in html and "#fff3c4" in html and "#fbd5d5" in html
    assert t.highlights[(1, "e")] and t.highlights[(1, "r")]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"formats": {"nope": "{:.1f}"}}, "formats name columns"),
        ({"columns": ["nope"]}, "columns"),
        ({"highlight": {"e": "median"}}, "must be 'min' or 'max'"),
    ],
)
def test_bad_arguments_name_what_is_wrong(kwargs, match):
    with pytest.raises(ValueError, match=match):
        table([{"e": 1.0}], **kwargs)


def test_claims_table_holds_every_claim_of_the_notebook():
    t = lessons.claims_table("05a")
    assert len(t) == len(lessons.claims("05a")) and set(t.text["result"]) <= {"PASS", "FAIL"}


def test_the_html_is_the_same_on_every_run():
    """nbval compares saved outputs: pandas' random Styler id must not leak into them."""
    rows = [{"m": "a", "e": 0.3}, {"m": "b", "e": 0.1}]
    assert table(rows, highlight={"e": "min"})._repr_html_() == table(rows, highlight={"e": "min"})._repr_html_()


def test_cell_text_is_escaped_in_the_html():
    html = table([{"claim": "error < 0.1 and a <= b", "tag": "<b>"}])._repr_html_()
    assert "error &lt; 0.1 and a &lt;= b" in html and "&lt;b&gt;" in html and "<b>" not in html
