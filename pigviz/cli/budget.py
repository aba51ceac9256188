"""``pigviz budget``: KV-cache and LSH-table memory for a model and a context."""

from __future__ import annotations

import json

from pigviz import DEFAULTS
from pigviz.cli import text
from pigviz.memory import budget, model_shapes

__all__ = ["register"]


def _cmd_budget(args) -> int:
    if args.model == "list":
        print("\n".join(model_shapes.known_models()))
        return 0
    if args.context is None:
        raise ValueError("--context is required: the number of tokens in the context, e.g. --context 98304")
    if args.model == "all":  # every shipped model at one context: the rows notebook 05a shows
        rows = budget.model_rows(args.context, dtype_bytes=args.dtype_bytes)
        print(json.dumps(rows, indent=1) if args.json else text.model_table(args.context, args.dtype_bytes))
        return 0
    report = budget.budget_report(args.model, args.context, dtype_bytes=args.dtype_bytes, K=args.K, L=args.L)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(text.budget_report_text(report))
    return 0


def register(sub) -> None:
    p = sub.add_parser("budget", help="KV-cache and LSH-table memory for a model and context")
    p.add_argument(
        "--model",
        required=True,
        help="known model name (`--model list` prints them, `--model all` tabulates them) or a config.json path",
    )
    p.add_argument("--context", type=int, default=None, help="tokens in the context (required unless --model list)")
    p.add_argument("--dtype-bytes", type=int, default=2, help="bytes per KV element (2 = fp16/bf16)")
    p.add_argument("--K", type=int, default=DEFAULTS.K, help="SimHash bits per table")
    p.add_argument("--L", type=int, default=DEFAULTS.L, help="number of hash tables")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_budget)
