"""Shared helpers every layer may use: atomic writes and sha256 (``io``), argument checks that
name the parameter and its allowed range (``validate``), and agreement text that reads the same
on every CPU (``fmt``).
"""

from pigviz._util import fmt, io, validate

__all__ = ["fmt", "io", "validate"]
