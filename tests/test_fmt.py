import numpy as np
import pytest

from pigviz._util.fmt import agree, below


def test_agree_prints_the_bound_not_the_residue():
    a = np.array([1.0, 2.0, 3.0])
    assert agree(a, a + 4.4e-16, within=1e-12) == "agree to better than 1e-12"
    assert agree(a, a, within=1e-12) == "agree to better than 1e-12"
    assert agree(a, a * (1 + 1e-9), within=1e-6, relative=True) == "agree to better than 1e-6 relative"


def test_a_real_disagreement_shows_its_size():
    assert agree([1.0], [1.001], within=1e-12) == "differ by up to 1.0e-03 (more than 1e-12)"
    assert agree([np.nan], [1.0], within=1.0).startswith("differ by up to nan")


@pytest.mark.parametrize("value,text", [(0.0, "below 1e-12"), (3e-13, "below 1e-12"), (2e-12, "2.0e-12 (above 1e-12)")])
def test_below(value, text):
    assert below(value, 1e-12) == text


def test_nan_is_never_below():
    assert below(float("nan"), 1.0).startswith("nan")
