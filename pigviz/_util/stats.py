"""Statistics shared by the layers: the binomial confidence interval of a success count.

One Wilson score interval serves the SimHash Monte-Carlo checks (arrays of counts) and the
decoding evaluations (one count per row), so both report the same bounds for the same count.
"""

from __future__ import annotations

import numpy as np

from pigviz._util.validate import check_float, check_int

__all__ = ["wilson_interval"]


def wilson_interval(successes, n: int, z: float = 1.96):
    """Wilson score interval of a binomial proportion: ``successes`` of ``n`` trials, ``z``
    standard errors wide (1.96: 95%). Unlike ``p +- z se`` it stays inside [0, 1] and is not
    zero-width at 0 or ``n`` successes.

    ``successes``: an integer in [0, n], giving ``(low, high)`` as floats, or an array of them,
    giving two arrays. The bounds are the proportions ``p`` at which the observed one sits exactly
    ``z`` standard errors ``sqrt(p (1 - p) / n)`` away."""
    n = check_int("n", n, 1)
    z = check_float("z", z, 0.0, lo_open=True)
    counts = np.asarray(successes)
    if counts.ndim == 0:
        counts = np.asarray(check_int("successes", successes, 0, n))
    elif counts.dtype == bool or not np.issubdtype(counts.dtype, np.integer):
        raise TypeError(f"successes must be an integer or an array of integers, got dtype {counts.dtype}")
    elif counts.size and (counts.min() < 0 or counts.max() > n):
        raise ValueError(f"successes entries must be in [0, {n}], got {counts.min()} .. {counts.max()}")
    p = counts / n
    shrink = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / shrink
    half = z * np.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n)) / shrink
    # exact at the ends, where centre - half (or + half) is 0 (or 1) up to rounding
    low = np.where(counts == 0, 0.0, np.clip(centre - half, 0.0, 1.0))
    high = np.where(counts == n, 1.0, np.clip(centre + half, 0.0, 1.0))
    if low.ndim == 0:
        return float(low), float(high)
    return low, high
