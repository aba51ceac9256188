"""Argument checks shared by every module.

Each helper raises a ValueError or TypeError whose message names the parameter and the
range it must lie in, so a learner who mistypes a slider value in a notebook sees what
to change instead of a NaN three cells later.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["check_int", "check_float", "check_array", "check_choice"]


def check_int(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """Return ``value`` as an int, or raise if it is not an integer in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be in [{_fmt(lo, '-inf')}, {_fmt(hi, 'inf')}], got {value}")
    return value


def check_float(
    name: str,
    value,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    """Return ``value`` as a finite float inside the interval, or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    too_low = lo is not None and (value <= lo if lo_open else value < lo)
    too_high = hi is not None and (value >= hi if hi_open else value > hi)
    if too_low or too_high:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise ValueError(f"{name} must be in {left}{_fmt(lo, '-inf')}, {_fmt(hi, 'inf')}{right}, got {value}")
    return value


def check_array(
    name: str,
    value,
    *,
    ndim: int | tuple[int, ...] | None = None,
    min_len: int = 1,
    finite: bool = True,
    dtype=np.float64,
) -> np.ndarray:
    """Convert to a numpy array and check its rank, length and finiteness."""
    try:
        arr = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array of numbers: {exc}") from None
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dimensions, got shape {arr.shape}")
    if arr.ndim > 0 and arr.shape[0] < min_len:
        raise ValueError(f"{name} must hold at least {min_len} element(s), got shape {arr.shape}")
    if finite and arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must contain only finite numbers (no NaN or inf)")
    return arr


def check_choice(name: str, value, choices) -> str:
    """Raise unless ``value`` is one of ``choices``; the message lists them."""
    choices = list(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _fmt(bound, missing: str) -> str:
    return missing if bound is None else str(bound)
