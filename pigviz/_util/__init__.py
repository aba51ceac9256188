"""Shared helpers every layer may use: atomic writes and sha256 (``io``), argument checks that
name the parameter and its allowed range (``validate``).
"""

from pigviz._util import io, validate

__all__ = ["io", "validate"]
