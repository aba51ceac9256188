"""The ``pigviz`` command line. Heavy modules (torch, transformers) load only inside the
sub-command that needs them, so ``pigviz budget`` answers instantly."""
from __future__ import annotations

import argparse
import json
import sys

from pigviz import __version__


def _cmd_budget(args) -> int:
    from pigviz import budget

    report = budget.budget_report(
        args.model, args.context, dtype_bytes=args.dtype_bytes, K=args.K, L=args.L
    )
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(budget.format_report(report))
    return 0


def _cmd_verify(args) -> int:
    from pigviz.claims import format_table, run_claims

    claims, ok = run_claims()
    print(format_table(claims))
    failed = [c for c in claims if not c.passed]
    print(f"\n{len(claims) - len(failed)} passed, {len(failed)} failed")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pigviz",
        description="KV-cache arithmetic, MagicPIG's LSH sampling and the checks behind the notebooks.",
    )
    parser.add_argument("--version", action="version", version=f"pigviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("budget", help="KV-cache and LSH-table memory for a model and context")
    p.add_argument("--model", required=True, help="known model name (see `pigviz budget --model list`) or a config.json path")
    p.add_argument("--context", type=int, required=True, help="tokens in the context")
    p.add_argument("--dtype-bytes", type=int, default=2, help="bytes per KV element (2 = fp16/bf16)")
    p.add_argument("--K", type=int, default=10, help="SimHash bits per table")
    p.add_argument("--L", type=int, default=150, help="number of hash tables")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_budget)

    p = sub.add_parser("verify", help="re-derive every headline number the notebooks state")
    p.set_defaults(func=_cmd_verify)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"pigviz {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
