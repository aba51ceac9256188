"""Shared helpers every layer may use: atomic writes and sha256 (``io``), argument checks that
name the parameter and its allowed range (``validate``), agreement text that reads the same
on every CPU (``fmt``), MagicPIG's defaults held once (``config``), and the binomial
confidence interval of a success count (``stats``).
"""

from pigviz._util import config, fmt, io, stats, validate

__all__ = ["config", "fmt", "io", "stats", "validate"]
