"""The ``pigviz`` command line. Heavy modules (torch, transformers) load only inside the
sub-command that needs them, so ``pigviz budget`` answers instantly."""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from pigviz import __version__


def _cmd_budget(args) -> int:
    from pigviz import budget

    if args.model == "list":
        from pigviz.model_shapes import known_models

        print("\n".join(known_models()))
        return 0
    if args.context is None:
        raise ValueError("--context is required: the number of tokens in the context, e.g. --context 98304")
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


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 0,12,25; got {text!r}") from None


def _cmd_capture(args) -> int:
    from pigviz.capture import capture, save_capture
    from pigviz.models import load_model

    model, tokenizer = load_model(args.model, device=args.device, progress=not args.quiet)
    cap = capture(model, tokenizer, n_tokens=args.context, last=args.last, layers=args.layers,
                  kv_heads=args.kv_heads, progress=not args.quiet, allow_long_context=args.allow_long_context)
    path = save_capture(cap, args.out, dtype="float16" if args.fp16 else None)
    print(f"wrote {path}: queries {tuple(cap.queries.shape)}, keys/values {tuple(cap.keys.shape)}, "
          f"{path.stat().st_size / 2**20:.1f} MiB")
    return 0


def _cmd_data_regenerate(args) -> int:
    from pigviz import shipped

    result = shipped.regenerate_shipped(args.out_dir, check=args.check, progress=not args.quiet)
    if args.check:
        largest = shipped.largest_difference(result["comparison"])
        if result["within_precision"]:
            exact = "bit for bit" if result["match"] else "within the precision it is stored in"
            print(f"{shipped.CAPTURE_FILE}: the rebuilt capture matches the shipped one {exact}; "
                  f"largest difference: {largest}")
            return 0
        problems = (result["comparison"] or {}).get("problems") or ["no shipped file to compare with"]
        print(f"{shipped.CAPTURE_FILE}: the rebuilt capture differs from the shipped one beyond its "
              f"stored precision: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"wrote {result['path']} (sha256 {result['sha256']}) and its manifest entry")
    return 0


def _cmd_site(args) -> int:
    from pigviz.site import build_site

    print(f"wrote {build_site(args.out)}")
    return 0


EXTRA_COMMAND_MODULES = ["pigviz.cli_study", "pigviz.cli_decoding"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pigviz",
        description="KV-cache arithmetic, MagicPIG's LSH sampling and the checks behind the notebooks.",
    )
    parser.add_argument("--version", action="version", version=f"pigviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("budget", help="KV-cache and LSH-table memory for a model and context")
    p.add_argument("--model", required=True, help="known model name (`--model list` prints them) or a config.json path")
    p.add_argument("--context", type=int, default=None, help="tokens in the context (required unless --model list)")
    p.add_argument("--dtype-bytes", type=int, default=2, help="bytes per KV element (2 = fp16/bf16)")
    p.add_argument("--K", type=int, default=10, help="SimHash bits per table")
    p.add_argument("--L", type=int, default=150, help="number of hash tables")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_budget)

    p = sub.add_parser("verify", help="re-derive every headline number the notebooks state")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("capture", help="record post-RoPE q/k/v of one real prefill into a safetensors file")
    p.add_argument("--model", default="smollm2-135m", help="bundled alias, local model folder or hub id")
    p.add_argument("--context", type=int, default=8192, help="tokens to prefill (N)")
    p.add_argument("--last", type=int, default=64, help="how many final positions keep their queries (T)")
    p.add_argument("--out", required=True, help="output .safetensors file")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--layers", type=_int_list, default=None, help="comma-separated layers to keep (default all)")
    p.add_argument("--kv-heads", type=_int_list, default=None, help="comma-separated KV heads to keep (default all)")
    p.add_argument("--fp16", action="store_true", help="store tensors as fp16 (half the size)")
    p.add_argument("--allow-long-context", action="store_true", help="allow --context past the trained length")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_capture)

    p = sub.add_parser("data", help="the small captures shipped in data/")
    data_sub = p.add_subparsers(dest="data_command", metavar="ACTION")
    data_sub.required = True
    q = data_sub.add_parser("regenerate", help="rebuild the shipped capture (--check: compare it with the shipped file)")
    q.add_argument("--check", action="store_true", help="only compare the rebuilt file's sha256 with the manifest")
    q.add_argument("--out-dir", default=None, help="write here instead of data/")
    q.add_argument("--quiet", action="store_true", help="no progress bars")
    q.set_defaults(func=_cmd_data_regenerate)

    p = sub.add_parser("site", help="build a static HTML site of the executed notebooks (works offline)")
    p.add_argument("--out", default="site", help="output folder (default: site/)")
    p.set_defaults(func=_cmd_site)

    # Sub-commands of the heavier lessons live beside their concept, in pigviz/cli_*.py modules
    # exposing register(subparsers); their handlers import torch only when they run.
    for name in EXTRA_COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
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
