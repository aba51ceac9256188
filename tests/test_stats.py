"""pigviz._util.stats.wilson_interval: the one binomial interval of the SimHash checks and the
decoding evaluations, checked against values computed another way."""

from fractions import Fraction

import numpy as np
import pytest

from pigviz._util.stats import wilson_interval

Z = 1.96


def test_published_values():
    # Newcombe (1998), Statistics in Medicine 17:857, Table I, method 3 (the Wilson score interval)
    for (successes, n), expected in {
        (81, 263): (0.2553, 0.3662),
        (15, 148): (0.0624, 0.1605),
        (0, 20): (0.0, 0.1611),
        (1, 29): (0.0061, 0.1718),
    }.items():
        assert np.round(wilson_interval(successes, n), 4).tolist() == list(expected)


@pytest.mark.parametrize("successes,n", [(0, 1), (0, 10), (3, 10), (7, 13), (20, 20), (81, 263), (499, 1000)])
def test_bounds_are_where_the_score_test_sits_exactly_z_standard_errors_out(successes, n):
    """Each bound p solves (s/n - p)^2 = z^2 p (1 - p) / n; checked in exact arithmetic on the
    float returned, against the quadratic's own sides, which must agree to rounding."""
    low, high = wilson_interval(successes, n, Z)
    z2 = Fraction(Z) ** 2
    for p in (low, high):
        p = Fraction(p)
        lhs, rhs = (Fraction(successes, n) - p) ** 2, z2 * p * (1 - p) / n
        assert abs(float(lhs - rhs)) < 1e-12
    assert 0.0 <= low <= successes / n <= high <= 1.0 and high > low


def test_closed_form_at_the_ends():
    n = 20
    # 0 successes: [0, z^2 / (n + z^2)]; n successes: [n / (n + z^2), 1]
    assert wilson_interval(0, n) == (0.0, pytest.approx(Z * Z / (n + Z * Z), abs=1e-15))
    assert wilson_interval(n, n) == (pytest.approx(n / (n + Z * Z), abs=1e-15), 1.0)
    assert wilson_interval(0, n)[0] == 0.0 and wilson_interval(n, n)[1] == 1.0  # exactly, not 1e-17 off


def test_arrays_give_arrays_equal_to_the_scalar_calls():
    counts = np.array([0, 1, 7, 19, 20])
    low, high = wilson_interval(counts, 20, 2.5)
    assert isinstance(low, np.ndarray) and low.shape == counts.shape
    expected = np.array([wilson_interval(int(c), 20, 2.5) for c in counts])
    np.testing.assert_array_equal(np.stack([low, high], axis=1), expected)
    scalar = wilson_interval(np.int64(7), 20)
    assert type(scalar[0]) is float and scalar == wilson_interval(7, 20)


def test_wider_for_a_larger_z_and_narrower_for_more_trials():
    low95, high95 = wilson_interval(30, 100, 1.96)
    low99, high99 = wilson_interval(30, 100, 2.576)
    assert low99 < low95 and high99 > high95
    low_big, high_big = wilson_interval(300, 1000)
    assert high_big - low_big < high95 - low95


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(3, 2)
    with pytest.raises(ValueError, match="n must be"):
        wilson_interval(0, 0)
    with pytest.raises(ValueError, match=r"successes entries must be in \[0, 5\]"):
        wilson_interval(np.array([1, 6]), 5)
    with pytest.raises(TypeError, match="successes"):
        wilson_interval(np.array([0.5, 1.0]), 5)
    with pytest.raises(TypeError, match="successes"):
        wilson_interval(2.5, 5)
    with pytest.raises(ValueError, match="z"):
        wilson_interval(1, 5, 0.0)
