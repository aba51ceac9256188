"""StickBalanceWidget: controls move the figures, inputs are clamped, callbacks never raise."""

import numpy as np
import pytest

from pigviz.toy import stick_balance as sb
from pigviz.widgets.stick_balance import StickBalanceWidget


@pytest.fixture(scope="module")
def widget():
    return StickBalanceWidget(n_seeds=60)


def _markers(w):
    return {tr.name: tr.x[0] for tr in w.sticks.data[2:]}


def _random_markers_of(m):
    return (m["sampling (oracle)"], m["importance sampling"], m["hybrid (oracle)"])


def _random_markers(w):
    return _random_markers_of(_markers(w))


def test_controls_carry_dom_classes(widget):
    assert "pigviz-scenario" in widget.scenario_dropdown._dom_classes
    assert "pigviz-budget-slider" in widget.budget_slider._dom_classes
    assert "pigviz-resample" in widget.resample_button._dom_classes
    boxes = [c for c in widget.children if "pigviz-sticks" in getattr(c, "_dom_classes", ())]
    assert len(boxes) == 1 and boxes[0].children[0] is widget.sticks


def test_slider_moves_the_balance_points(widget):
    before = _markers(widget)
    widget.budget_slider.value = 3
    after = _markers(widget)
    assert after["TopK"] != before["TopK"]
    assert _random_markers(widget) != _random_markers_of(before)
    assert after["TopK"] == pytest.approx(widget.estimates["topk"].value)
    # the markers are this budget's runs: TopK reads 3 keys and no method more, out of all n
    reads = {m: e.keys_read for m, e in widget.estimates.items() if m != "exact"}
    assert reads["topk"] == max(reads.values()) == 3
    assert widget.estimates["exact"].keys_read == widget.budget_slider.max == sb.DEFAULT_N
    assert widget.errors.layout.shapes[0].x0 == 3


def test_resample_moves_the_sampled_points_only(widget):
    widget.budget_slider.value = 8
    before = _markers(widget)
    widget.resample_button.click()
    after = _markers(widget)
    assert _random_markers(widget) != _random_markers_of(before)
    assert after["TopK"] == before["TopK"] and after["truth (every key)"] == before["truth (every key)"]


def test_scenario_switch_redraws_sticks_and_uses_cached_curves(widget):
    sink_bars = np.asarray(widget.sticks.data[0].x).copy()
    sink_curve = np.asarray(widget.errors.data[1].y).copy()
    widget.scenario_dropdown.value = "peaked"
    assert not np.array_equal(np.asarray(widget.sticks.data[0].x), sink_bars)
    assert len(widget.sticks.data[1].x) == 0  # no sink in this scenario
    assert not np.array_equal(np.asarray(widget.errors.data[1].y), sink_curve)
    truth = sb.make_scenario("peaked").truth
    assert all(line.x0 == pytest.approx(truth) for line in widget.sticks.layout.shapes)
    cached = widget._views["sink"]["curves"]
    widget.scenario_dropdown.value = "sink"
    assert widget._views["sink"]["curves"] is cached
    np.testing.assert_array_equal(np.asarray(widget.errors.data[1].y), sink_curve)


def test_full_budget_shows_exact_sampling():
    w = StickBalanceWidget(scenario="flat", n=16, n_seeds=20)
    w.budget_slider.value = 16
    assert _markers(w)["sampling (oracle)"] == pytest.approx(w.estimates["exact"].value)
    assert w.estimates["sampling"].draws == np.inf  # every key read: unlimited free draws


def test_bad_arguments_are_clamped_and_reported():
    w = StickBalanceWidget(scenario="bogus", budget=10_000, n=-5, seed="x", n_seeds=10**9)
    assert w.scenario_dropdown.value == "sink"
    assert w.budget_slider.value == w.budget_slider.max == 2  # n clamped to its minimum
    assert "unknown scenario" in w.status.value


def test_callbacks_never_raise(widget, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(sb, "estimate_all", broken)
    widget.resample_button.click()
    widget.budget_slider.value = 5 if widget.budget_slider.value != 5 else 6
    assert "Could not update" in widget.status.value and "simulated failure" in widget.status.value
