"""``pigviz study``: MagicPIG and its baselines, error against budget, on every head of a real model.

    pigviz study --out results.json                       # SmolLM2-135M, 8k tokens, last 64
    pigviz study --layers 0,14 --seeds 1 --out quick.json # a quick look at two layers
    pigviz study --from pigviz/data/study_smollm2.json --figure docs/img/study_error_budget.png
    # the MagicPIG explainer's own setup, on a GPU runtime that is online (28 x 12 x 64 = 21,504 rows):
    pigviz study --model Qwen/Qwen2.5-1.5B --context 16384 --last 64 --device cuda --out qwen.json

The first run captures the model's q/k/v once (about a minute) into the pigviz cache; later runs
read the cached file. A run that stops is resumed layer by layer from ``OUT.partial``.
"""

from __future__ import annotations

import time

from pigviz.cli.args import int_list, kl_pairs, name_list
from pigviz.cli.text import study_summary
from pigviz.plots import study as plots_study
from pigviz.study import findings
from pigviz.study import run as study
from pigviz.study.run import AFFORDABLE_METHODS, DEFAULT_SETTINGS, METHODS

DEFAULT_OUT_HINT = "results JSON to write (e.g. pigviz/data/study_smollm2.json)"


def command_line(args) -> str:
    """The command that reproduces ``args`` (stored in the results file)."""
    parts = ["pigviz study", f"--model {args.model}", f"--context {args.context}", f"--last {args.last}"]
    if args.device != "cpu":
        parts.append(f"--device {args.device}")
    if args.dtype:
        parts.append(f"--dtype {args.dtype}")
    if args.layers is not None:
        parts.append("--layers " + ",".join(map(str, args.layers)))
    if args.methods is not None and tuple(args.methods) != METHODS + AFFORDABLE_METHODS:
        parts.append("--methods " + ",".join(args.methods))
    if args.settings is not None and tuple(map(tuple, args.settings)) != DEFAULT_SETTINGS:
        parts.append("--settings '" + ";".join(f"{K},{L}" for K, L in args.settings) + "'")
    if args.no_ablations:
        parts.append("--no-ablations")
    parts += [f"--seeds {args.seeds}", f"--threads {args.threads}", f"--out {args.out}"]
    return " ".join(parts)


def _cmd_study(args) -> int:
    if args.from_results:
        results = study.load_results(args.from_results)
        print(study_summary(results))
    elif not args.out:
        raise ValueError("--out is required (the results JSON to write), unless --from reads finished results")
    else:
        results = _run(args)
    if args.figure:
        print(f"wrote {save_figure(args.figure, results)}")
    return 0


def _run(args) -> dict:
    spec = study.StudySpec(
        settings=tuple(args.settings or study.DEFAULT_SETTINGS),
        seeds=args.seeds,
        methods=tuple(args.methods or study.METHODS + study.AFFORDABLE_METHODS),
        ablations=not args.no_ablations,
    )
    if args.threads < 0:
        raise ValueError(f"--threads must be >= 0 (0: torch's default), got {args.threads}")
    # Every argument is checked before the model loads or a cached capture is read, so a wrong
    # one fails in a second on a fresh machine as on one with a warm cache.
    study.check_study_args(
        spec,
        model=args.model,
        context=args.context,
        last=args.last,
        layers=args.layers,
        device=args.device,
        dtype=args.dtype,
        out=args.out,
    )
    if args.threads:
        import torch  # heavy: torch loads in ~1 s; only after the arguments are checked

        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    cap = study.cached_capture(
        args.model, args.context, args.last, progress=not args.quiet, device=args.device, dtype=args.dtype
    )
    capture_s = time.perf_counter() - t0
    results = study.run_study(
        cap,
        spec,
        args.out,
        layers=args.layers,
        progress=not args.quiet,
        command=command_line(args),
        resume=not args.no_resume,
    )
    total = time.perf_counter() - t0
    results["timing"].update(capture_or_load_s=round(capture_s, 1), total_s=round(total, 1))
    study.save_results(results, args.out)
    print(study_summary(results))
    print(
        f"\nwrote {args.out}: {len(results['layers'])} layers x {results['heads']} heads x "
        f"{results['last']} positions in {total / 60:.1f} min ({capture_s:.0f} s to capture or load q/k/v)"
    )
    return results


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "study",
        help="error vs budget of MagicPIG and its baselines on every head of a model",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--model", default="smollm2-135m", help="bundled alias, local model folder or hub id")
    p.add_argument("--context", type=int, default=8192, help="tokens of the default text to prefill (N)")
    # Not "auto": the cached capture is keyed by --dtype only when one is given, and the shipped
    # results' command names no device, so a GPU must be asked for to be used.
    p.add_argument("--device", default="cpu", help="where the model runs its prefill: cpu or cuda (default: cpu)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: fp32 on CPU, bf16 on GPU)")
    p.add_argument("--last", type=int, default=64, help="decode positions studied: the last T of the context")
    p.add_argument("--layers", type=int_list, default=None, help="comma-separated layers (default: all)")
    p.add_argument(
        "--methods",
        type=name_list,
        default=None,
        help="comma-separated subset of magicpig,topk,oracle,hybrid,quest,streaming and the affordable "
        "estimators mp_exact_top,vattention,sparq (default: all)",
    )
    p.add_argument(
        "--settings",
        type=kl_pairs,
        default=None,
        help="MagicPIG K,L pairs separated by ';' (default: '12,200;11,240;10,150;9,130')",
    )
    p.add_argument("--seeds", type=int, default=3, help="hash (and sampler) seeds per random method")
    p.add_argument("--no-ablations", action="store_true", help="skip the no-sink / no-exact-set runs")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (0: torch's default). One is fastest on a shared CPU: each step is "
        "hundreds of small ops that otherwise wait for a busy core",
    )
    p.add_argument("--out", default=None, help=DEFAULT_OUT_HINT)
    p.add_argument(
        "--from", dest="from_results", default=None, help="read finished results instead of running (with --figure)"
    )
    p.add_argument("--figure", default=None, help="also write the error-vs-budget chart to this PNG")
    p.add_argument("--no-resume", action="store_true", help="ignore OUT.partial and start over")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_study)


def save_figure(path, results: dict | None = None) -> str:
    """Write the all-heads error-vs-budget chart as a PNG (needs kaleido and a Chromium)."""
    results = results if results is not None else findings.load_shipped_results()
    fig = plots_study.error_budget_figure(
        findings.curves(results, methods=["magicpig", "topk", "oracle", "hybrid", "quest", "rank_all", "streaming"]),
        findings.METHOD_LABELS,
        title=f"{results['model']}, {len(results['layers'])} layers x {results['heads']} heads: error against budget",
    )
    fig.write_image(str(path), scale=2)
    return str(path)
