"""The ``pigviz`` command line: one parser, and one module per group of sub-commands.

Each module in ``COMMAND_MODULES`` adds its sub-commands with ``register(subparsers)``. Heavy
libraries (torch, transformers) load only inside the handler that needs them, so ``pigviz
budget`` and ``pigviz --help`` answer instantly."""

from __future__ import annotations

import argparse
import sys

from pigviz import __version__
from pigviz._util.threads import limit_to_quota
from pigviz.cli import budget, course, data, decode, lessons, site, study

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES = (course, budget, lessons, data, study, decode, site)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pigviz",
        description="KV-cache arithmetic, MagicPIG's LSH sampling and the checks behind the notebooks.",
    )
    parser.add_argument("--version", action="version", version=f"pigviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    limit_to_quota()  # a container's CPU quota caps the thread pools (nothing changes without one)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"pigviz {args.command}: error: {exc}", file=sys.stderr)
        return 2
