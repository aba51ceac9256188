"""The helpers notebook 04a calls to show its tables and answers (pigviz.lessons.nb04a_simhash), and the
closed-form verdict notebook 04b writes in view and its claims use."""

from __future__ import annotations

import numpy as np
import pytest

from pigviz.lessons import nb04a_simhash as nb04
from pigviz.lsh import simhash as sh


def test_half_point_is_the_crossing_angle():
    deg = nb04.half_point_deg(10, 150)
    p = sh.collision_probability(np.cos(np.radians(deg)))
    assert sh.inclusion_probability(p, 10, 150) == pytest.approx(0.5, abs=1e-6)
    assert nb04.half_point_deg(10, 150, 1) > deg  # one hit is easier: the cliff sits further out


def test_l_for_half_point_is_the_smallest_l_that_reaches_the_goal(monkeypatch):
    goal = nb04.half_point_deg(10, 150)
    assert nb04.l_for_half_point(10, goal) == 150
    l12 = nb04.l_for_half_point(12, goal)
    assert nb04.half_point_deg(12, l12) >= goal > nb04.half_point_deg(12, l12 - 1)
    monkeypatch.setattr(nb04, "MAX_L", 100)  # out of reach within 100 tables: said, not looped on
    with pytest.raises(ValueError, match="goal_deg = 70 needs more than 100 tables at K = 10"):
        nb04.l_for_half_point(10, 70)


def test_closed_form_verdict_reads_the_same_on_every_cpu():
    assert nb04.closed_form_verdict(1.0005e-9, 1e-9) == "agrees to 0.1%"
    assert nb04.closed_form_verdict(3e-15, 1e-20) == "lost in rounding noise below 1e-12"
    assert nb04.closed_form_verdict(-2e-15, 1e-20) == "lost in rounding noise below 1e-12"
    assert nb04.closed_form_verdict(2e-9, 1e-9) == "wrong by more than 0.1%"


def test_marker_test_names_the_worst_informative_angle_and_bounds_its_luck():
    from pigviz.lsh.simhash_checks import MonteCarloEstimate

    cos = np.cos(np.radians([0.0, 80.0, 90.0, 100.0, 180.0]))
    expected = np.array([1.0, 0.3, 0.1, 0.002, 0.0])
    freq = np.array([300, 96, 36, 4, 0]) / 300  # 80, 90 and 100 degrees all above the formula
    mc = MonteCarloEstimate(cos, expected, freq, 300)
    (row,) = nb04.marker_test_rows({2: mc})
    assert row["with 0.001 < u < 0.999"] == 3  # 0 and 180 degrees cannot test the formula
    assert row["at (deg)"] == pytest.approx(100.0) and row["hits counted"] == 4
    assert row["hits expected"] == pytest.approx(0.6)
    assert row["smallest p-value"] == pytest.approx(float(np.min(mc.p_values())))
