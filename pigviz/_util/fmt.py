"""Text for "these two computations agree" that reads the same on every CPU.

Two ways of computing the same number differ by a rounding residue whose digits depend on the
CPU's vector kernels, the BLAS build and the thread count (4.4e-16 on one machine, 0.0 on
another). Printing those digits makes a notebook's saved output true on one machine only. These
helpers print the bound the residue stays under instead, and the size of the gap only when it
breaks the bound, which is a real disagreement worth seeing.
"""

from __future__ import annotations

import numpy as np

__all__ = ["agree", "below"]


def _bound_text(within: float) -> str:
    return f"{within:.0e}".replace("e-0", "e-").replace("e+0", "e+")


def below(value, within: float) -> str:
    """``"below 1e-12"`` when ``value`` (a gap, an error) is at most ``within``; otherwise the
    value itself: ``"3.1e-05 (above 1e-12)"``. NaN is never "below" anything."""
    value = float(value)
    if value <= within:
        return f"below {_bound_text(within)}"
    return f"{value:.1e} (above {_bound_text(within)})"


def agree(a, b, within: float, *, relative: bool = False) -> str:
    """``"agree to better than 1e-12"`` when every ``|a - b|`` is at most ``within`` (relative to
    ``|b|`` with ``relative=True``), else ``"differ by up to 3.1e-05 (more than 1e-12)"``. NaN on
    either side counts as a disagreement."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    gap = np.abs(a - b)
    if relative:
        gap = gap / np.maximum(np.abs(b), np.finfo(np.float64).tiny)
    worst = float(np.max(gap, initial=0.0)) if not np.isnan(gap).any() else float("nan")
    if worst <= within:
        return f"agree to better than {_bound_text(within)}" + (" relative" if relative else "")
    return f"differ by up to {worst:.1e}" + (" relative" if relative else "") + f" (more than {_bound_text(within)})"
