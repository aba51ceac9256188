"""``pigviz ...`` on the command line (``python -m pigviz`` works too)."""

from pigviz.cli.main import build_parser, main

__all__ = ["main", "build_parser"]
