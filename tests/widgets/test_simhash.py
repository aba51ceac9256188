"""SimHashExplorer reacts to its controls, clamps bad values and never raises."""

from __future__ import annotations

import numpy as np
import pytest

from pigviz.lsh import simhash as sh
from pigviz.widgets import simhash as wmod
from pigviz.widgets.simhash import SimHashExplorer


@pytest.fixture(scope="module")
def explorer():
    return SimHashExplorer(K=10, L=150, min_hits=2, seed=0)


def curve(w, index):
    return np.array(w.scurve_fig.data[index].y, dtype=float)


def inclusion_curve(angles, K, L, min_hits=2):
    """The formula the widget draws: u at each angle between query and key."""
    return sh.inclusion_probability(sh.collision_probability(np.cos(np.radians(angles))), K, L, min_hits)


def test_dom_classes_for_browser_tests(explorer):
    assert "pigviz-k-slider" in explorer.k_slider._dom_classes
    assert "pigviz-l-slider" in explorer.l_slider._dom_classes
    assert "pigviz-scurve" in explorer.scurve_fig._dom_classes


def test_initial_curves_are_the_formula(explorer):
    explorer.set_params(K=10, L=150, min_hits=2, seed=0)
    want = inclusion_curve(wmod.CURVE_ANGLES, 10, 150, 2)
    np.testing.assert_allclose(curve(explorer, 2), want)
    # the status line's napkin number: the entries one query scans at (10, 150)
    assert f"{sh.expected_candidates(wmod.NAPKIN_TOKENS, 10, 150):,.0f}" in explorer.status.value


def test_changing_k_changes_the_scurve(explorer):
    explorer.set_params(K=10, L=150, min_hits=2)
    before, markers_before = curve(explorer, 2), curve(explorer, 4)
    explorer.k_slider.value = 6
    after = curve(explorer, 2)
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, inclusion_curve(wmod.CURVE_ANGLES, 6, 150, 2))
    assert not np.array_equal(markers_before, curve(explorer, 4))
    assert explorer.params["K"] == 6


def test_changing_l_changes_the_scurve(explorer):
    explorer.set_params(K=10, L=150, min_hits=2)
    before = curve(explorer, 1)
    explorer.l_slider.value = 20
    np.testing.assert_allclose(curve(explorer, 1), inclusion_curve(wmod.CURVE_ANGLES, 10, 20, 1))
    assert not np.allclose(before, curve(explorer, 1))


def test_min_hits_above_two_shows_its_own_curve(explorer):
    explorer.set_params(K=8, L=100, min_hits=4, seed=0)  # the counted markers: a fixed hashing
    assert explorer.scurve_fig.data[3].visible is not False
    np.testing.assert_allclose(curve(explorer, 3), inclusion_curve(wmod.CURVE_ANGLES, 8, 100, 4))
    # the counted markers count >= 4 hits too: near the min_hits = 4 curve, far from the 2-hit one
    markers = explorer.scurve_fig.data[4]
    angles = np.asarray(markers.x, dtype=float)
    np.testing.assert_allclose(np.asarray(markers.y, dtype=float), inclusion_curve(angles, 8, 100, 4), atol=0.15)
    assert np.abs(np.asarray(markers.y, dtype=float) - inclusion_curve(angles, 8, 100, 2)).max() > 0.3
    explorer.set_params(min_hits=2)
    assert explorer.scurve_fig.data[3].visible is False


def test_out_of_range_and_garbage_values_are_clamped(explorer):
    explorer.set_params(K=99, L=-5, min_hits=9, seed=-3)
    assert explorer.params == dict(K=20, L=1, min_hits=1, seed=0)
    assert "lowered" in explorer.status.value and "Could not" not in explorer.status.value
    explorer.set_params(K="many", L=float("nan"))
    assert explorer.params["K"] == 20 and explorer.params["L"] == 1
    for trace in explorer.scurve_fig.data:
        assert not np.any(np.isnan(np.asarray(trace.y, dtype=float)))
    explorer.set_params(K=10, L=150, min_hits=2, seed=0)


def test_resample_changes_the_toy_picture(explorer):
    explorer.set_params(K=4, L=30, min_hits=2, seed=0)

    def all_keys_x():
        return np.sort(
            np.concatenate(
                [
                    np.asarray(
                        explorer.plane_fig.data[i].x if explorer.plane_fig.data[i].x is not None else [], dtype=float
                    )
                    for i in (2, 3)
                ]
            )
        )

    before = all_keys_x()
    explorer.resample_button.click()
    assert explorer.params["seed"] == 1
    assert len(all_keys_x()) == len(before) == explorer.n_keys
    assert not np.allclose(before, all_keys_x())


def test_marker_budget_caps_the_counting(explorer):
    per_trial = len(wmod.MARKER_ANGLES) + 1
    for K, L in [(1, 1), (10, 150), (20, 300)]:
        trials = explorer.mc_trials(K, L)
        assert wmod.MC_TRIALS[0] <= trials <= wmod.MC_TRIALS[1]
        assert trials == wmod.MC_TRIALS[0] or trials * per_trial * K * L <= explorer.mc_budget


def test_a_failing_update_is_reported_not_raised(monkeypatch):
    w = SimHashExplorer(K=3, L=10)

    def broken(**_kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(wmod.simhash_checks, "plane_demo", broken)
    w.k_slider.value = 5  # must not raise
    assert "Could not update" in w.status.value and "boom" in w.status.value
