"""TokenReader: reacts to its controls, clamps bad values, never raises into the notebook."""

import pytest

from pigviz.plots import tokens as plots
from pigviz.widgets.tokens import BUDGETS, LABELS, TokenReader


def shows_its_result(reader) -> bool:
    """The view is the reading view of the current selection's result, not an earlier one."""
    return reader.view.value == plots.reading_view(reader.result(), reader.tokens, LABELS).html


@pytest.fixture
def reader():
    """A new reader per test: the tests move its controls, and none may see another's moves."""
    return TokenReader()


def test_dom_classes_for_browser_tests(reader):
    for part in (reader.head_picker, reader.position_slider, reader.budget_picker, reader.view):
        assert any(c.startswith("pigviz-tokens-") for c in part._dom_classes)


def test_the_default_view_is_layer_2_at_the_last_position(reader):
    assert reader.selection == {"row": 0, "head": 0, "position": 63, "fraction": 0.02}
    shown = reader.result()
    assert (shown["layer"], shown["head"], shown["position"]) == (2, 6, 8_191) and reader.status.value == ""
    assert list(shown["methods"]) == ["topk", "magicpig", "quest"] and shows_its_result(reader)


def test_controls_redraw_and_bad_values_are_clamped(reader):
    before = reader.view.value
    reader.budget_picker.value = 0.05
    assert reader.view.value != before and reader.result()["budget"] == 410 and shows_its_result(reader)
    reader.set_selection(row=9, head=-3, position=500, fraction="lots")
    assert reader.selection == {"row": 3, "head": 0, "position": 63, "fraction": 0.02}
    assert (reader.result()["layer"], reader.result()["head"]) == (25, 3)
    reader.set_selection(position=0, fraction=0.5)
    assert reader.selection["position"] == 0 and reader.selection["fraction"] == max(BUDGETS)
    assert reader.result()["position"] == 8_128 and shows_its_result(reader)


def test_a_failure_goes_to_the_status_line(reader, monkeypatch):
    monkeypatch.setattr(reader, "result", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    reader.update()
    assert "Could not update: boom" in reader.status.value
