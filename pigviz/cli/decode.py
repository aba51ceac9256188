"""``pigviz generate`` and ``pigviz eval``: sampled decoding of a real model from the shell.
torch and transformers are imported inside the handlers, so ``pigviz --help`` stays instant."""

from __future__ import annotations

import argparse
import json
import sys

from pigviz import DEFAULTS
from pigviz._util.io import write_json_atomic
from pigviz.cli.args import int_list, kl_pairs
from pigviz.decode import custom
from pigviz.decode import evaluate as decode_eval
from pigviz.decode.cache import KV_DTYPES
from pigviz.decode.generation import generate
from pigviz.decode.session import DENSE_KERNELS, METHODS, PLACEMENTS, check_options
from pigviz.model import texts
from pigviz.model.loading import check_model_args, load_model

__all__ = ["register"]

# Options that only some attention methods take: forwarded only when given on the command line.
_METHOD_OPTIONS = (
    "K",
    "L",
    "min_hits",
    "sinks",
    "recent",
    "seed",
    "buffer",
    "recentre",
    "budget",
    "page",
    "dense_layers",
    "placement",
    "kv_dtype",
    "kernel",
)


def _configs(text: str) -> list[tuple[int, int]]:
    return kl_pairs(text, pair_sep=",", inner_sep="x", example="10x150,8x75")


def _methods(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    # "quest/4": Quest with pages of 4 tokens; "my_module:my_estimator": your estimator (eval only).
    unknown = [
        m
        for m in names
        if not custom.is_spec(m)
        and (
            m.split("/")[0] not in METHODS
            or ("/" in m and not (m.split("/")[0].startswith("quest") and m.split("/")[1].isdigit()))
        )
    ]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"attention must be one or more of {', '.join(METHODS)} (or quest/PAGE, or module:function "
            f"for an estimator of your own); got {text!r}"
        )
    return names


def _add_method_options(p) -> None:
    g = p.add_argument_group("attention options (each method takes only its own)")
    g.add_argument("--K", type=int, help=f"MagicPIG: SimHash bits per table (default {DEFAULTS.K})")
    g.add_argument("--L", type=int, help=f"MagicPIG: number of tables (default {DEFAULTS.L})")
    g.add_argument(
        "--min-hits", type=int, help=f"MagicPIG: tables a key must share with the query (default {DEFAULTS.min_hits})"
    )
    g.add_argument(
        "--sinks", type=int, help=f"MagicPIG/StreamingLLM: first tokens always read (default {DEFAULTS.sinks})"
    )
    g.add_argument(
        "--recent", type=int, help=f"MagicPIG/StreamingLLM: last tokens always read (default {DEFAULTS.recent})"
    )
    g.add_argument("--seed", type=int, help="MagicPIG: hyperplane seed (default 0)")
    g.add_argument(
        "--buffer",
        type=int,
        help=f"MagicPIG: new tokens read exactly before they are hashed into the index (default {DEFAULTS.buffer})",
    )
    g.add_argument(
        "--recentre",
        type=int,
        help="MagicPIG: rebuild a layer's index on a fresh mean once it has grown to this many times the tokens "
        "its mean covers (default 2: at each doubling; 0: never, the prefill's mean throughout)",
    )
    g.add_argument("--budget", type=float, help="TopK/Quest/StreamingLLM: fraction of cached keys read (0.05)")
    g.add_argument("--page", type=int, help="Quest: tokens per page (default 16)")
    g.add_argument("--dense-layers", type=int_list, help="layers kept dense, comma-separated (default 0)")
    g.add_argument(
        "--kv-dtype",
        choices=KV_DTYPES,
        help="dense: every layer's K/V storage; MagicPIG: its sampled layers' (default: dense the model's "
        "dtype, MagicPIG bfloat16)",
    )
    g.add_argument(
        "--dense-kernel",
        dest="kernel",
        choices=DENSE_KERNELS,
        help="dense: grouped (default: each KV head's K/V read once, in the cache's dtype) or transformers "
        "(transformers' own SDPA: K/V repeated for every query head, widened to the model's dtype)",
    )
    g.add_argument(
        "--placement",
        choices=PLACEMENTS,
        help="MagicPIG: device (default: everything on the model's device) or cpu_offload (the paper's: "
        "model, query hashing, sinks and window on the GPU; the rest of the cache, the tables and the "
        "sampled attention on the CPU, merged by log-sum-exp)",
    )


def _check_common(args, *, device: bool = True):
    """The model's own arguments, checked before it loads (its limits, from its files, or None).
    ``device``: also --device and --dtype (they import torch, so the other checks go first)."""
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}")
    if device:
        return check_model_args(args.model, device=args.device, dtype=args.dtype)
    return check_model_args(args.model)


def _load(args):
    import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it

    _check_common(args)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    return load_model(args.model, device=args.device, dtype=args.dtype, progress=not args.quiet)


def _check_generate(args) -> None:
    """Everything ``pigviz generate`` can check before the model loads."""
    if (args.prompt is None) == (args.from_text is None):
        raise ValueError("give exactly one of --prompt TEXT or --from-text N (the first N tokens of the stdlib docs)")
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.from_text is not None and args.from_text < 1:
        raise ValueError(f"--from-text must be at least 1 token, got {args.from_text}")
    limits = _check_common(args, device=False)
    if args.from_text is not None and limits is not None and limits.max_context and not args.allow_long_context:
        if args.from_text + args.max_new_tokens > limits.max_context:
            raise ValueError(
                f"--from-text + --max-new-tokens must be at most {limits.max_context} (the model's trained "
                f"context), got {args.from_text + args.max_new_tokens}; pass --allow-long-context to go past it"
            )
    options = {k: getattr(args, k) for k in _METHOD_OPTIONS if getattr(args, k) is not None}
    check_options(args.attention, options, limits.layers if limits is not None else None)
    _check_common(args)


def _check_eval(args, baselines) -> None:
    """Everything ``pigviz eval`` can check before the model loads."""
    limits = _check_common(args, device=False)
    n_layers, context = (limits.layers, limits.max_context) if limits is not None else (None, None)
    dense_layers = tuple(args.dense_layers) if args.dense_layers is not None else (0,)
    if args.task == "quality":
        decode_eval.check_quality_args(
            prefix=args.prefix,
            stretch=args.stretch,
            configs=args.configs,
            seeds=args.seeds,
            baselines=baselines,
            dense_layers=dense_layers,
            n_layers=n_layers,
            max_context=context,
        )
        if args.demo_tokens:
            if args.demo_tokens < 1 or args.demo_prefix < 1:
                raise ValueError(
                    f"--demo-tokens and --demo-prefix must be positive, got {args.demo_tokens} and {args.demo_prefix}"
                )
            if context is not None and args.demo_prefix + args.demo_tokens > context:
                raise ValueError(
                    f"--demo-prefix + --demo-tokens must be at most {context} (the model's trained context), "
                    f"got {args.demo_prefix + args.demo_tokens}"
                )
    else:
        if any(callable(b) for b in baselines):
            raise ValueError("an estimator of your own (module:function) runs with --task quality only")
        decode_eval.check_passkey_args(
            lengths=args.lengths,
            trials=args.trials,
            baselines=baselines,
            dense_layers=dense_layers,
            n_layers=n_layers,
            max_context=context,
        )
    _check_common(args)


def _cmd_generate(args) -> int:
    _check_generate(args)
    model, tokenizer = _load(args)
    prompt = args.prompt if args.prompt is not None else texts.first_tokens(tokenizer, args.from_text)
    options = {k: getattr(args, k) for k in _METHOD_OPTIONS if getattr(args, k) is not None}
    result = generate(
        model,
        tokenizer,
        prompt,
        args.attention,
        args.max_new_tokens,
        chat=args.chat,
        progress=not args.quiet,
        allow_long_context=args.allow_long_context,
        **options,
    )
    if args.json:
        write_json_atomic(args.json, result.as_dict())
    print(result.text)
    label = args.attention
    if args.attention == "dense":  # which dense: the comparison depends on it
        o = check_options("dense", {k: v for k, v in options.items() if k in ("kernel", "kv_dtype")})
        kv = "the model's dtype" if o["kv_dtype"] == "model" else o["kv_dtype"]
        label = f"dense, {o['kernel']}" + (" (each KV head read once)" if o["kernel"] == "grouped" else " SDPA")
        label += f", K/V in {kv}"
    print(
        f"\n[{label}] {len(result.token_ids)} tokens after a {result.prompt_tokens}-token prompt: "
        f"prefill {result.prefill_seconds:.2f} s, index {result.index_seconds:.2f} s, "
        f"decode {result.decode_ms_per_token():.1f} ms/token, mean budget {100 * result.mean_budget():.2f}% "
        f"of cached keys",
        file=sys.stderr,
    )
    return 0


def _cmd_eval(args) -> int:
    # An estimator of your own, named module:function, runs at MagicPIG's budget like the baselines;
    # it is found before the model loads, so a typo fails at once.
    baselines = [
        custom.resolve(m) if custom.is_spec(m) else m for m in args.attention if m not in ("dense", "magicpig")
    ]
    _check_eval(args, baselines)
    model, tokenizer = _load(args)
    dense_layers = tuple(args.dense_layers) if args.dense_layers is not None else (0,)
    if args.task == "quality":
        result = decode_eval.quality_eval(
            model,
            tokenizer,
            prefix=args.prefix,
            stretch=args.stretch,
            configs=args.configs,
            seeds=args.seeds,
            baselines=baselines,
            dense_layers=dense_layers,
            progress=not args.quiet,
        )
        if args.demo_tokens:
            K, L = args.configs[0]
            result["generation"] = decode_eval.generation_demo(
                model,
                tokenizer,
                prefix=args.demo_prefix,
                max_new_tokens=args.demo_tokens,
                progress=not args.quiet,
                K=K,
                L=L,
                dense_layers=dense_layers,
            )
        summary = [
            f"{r['label']:<44} seed {r.get('seed', '-')!s:>2}  budget {100 * r['budget']:6.2f}%  "
            f"KL {r['kl_mean']:.4f}  top-1 {100 * r['top1_agreement']:5.1f}%  ppl {r['perplexity']:.2f}"
            for r in result["rows"]
        ]
    else:
        result = decode_eval.passkey_eval(
            model,
            tokenizer,
            lengths=args.lengths,
            trials=args.trials,
            baselines=baselines,
            dense_layers=dense_layers,
            progress=not args.quiet,
        )
        summary = [
            f"{r['length']:>6} {r['method']:<10} {r['correct']:>3}/{r['n']:<3} "
            f"[{100 * r['ci_low']:.0f}%, {100 * r['ci_high']:.0f}%]  budget {100 * r['budget']:.2f}%"
            for r in result["rows"]
        ]
    result["command"] = _eval_command(args)
    if args.json:
        path = write_json_atomic(args.json, result)
        if args.record:
            what = (
                "teacher-forced quality of sampled decoding vs dense (SmolLM2-135M)"
                if args.task == "quality"
                else "passkey retrieval accuracy, dense vs sampled decoding (SmolLM2-135M)"
            )
            decode_eval.record_in_manifest(path, what, result["command"], directory=path.parent)
        print(f"wrote {path}", file=sys.stderr)
    else:
        print(json.dumps(result, indent=1))
    print("\n".join(summary), file=sys.stderr)
    return 0


def _eval_command(args) -> str:
    """The command that reproduces this run (for the manifest), rebuilt from the parsed options."""
    parts = ["pigviz eval", f"--task {args.task}", f"--attention {','.join(args.attention)}"]
    if args.task == "quality":
        parts += [
            f"--prefix {args.prefix}",
            f"--stretch {args.stretch}",
            "--configs " + ",".join(f"{k}x{l}" for k, l in args.configs),
            "--seeds " + ",".join(map(str, args.seeds)),
        ]
        if args.demo_tokens:
            parts += [f"--demo-tokens {args.demo_tokens}", f"--demo-prefix {args.demo_prefix}"]
    else:
        parts += ["--lengths " + ",".join(map(str, args.lengths)), f"--trials {args.trials}"]
    if args.device != "cpu":
        parts.append(f"--device {args.device}")
    if args.dtype:
        parts.append(f"--dtype {args.dtype}")
    if args.threads is not None:
        parts.append(f"--threads {args.threads}")
    if args.dense_layers is not None:
        parts.append("--dense-layers " + ",".join(map(str, args.dense_layers)))
    if args.json:
        parts.append(f"--json {args.json}")
    return " ".join(parts + (["--record"] if args.record else []))


def register(sub) -> None:
    """Add ``generate`` and ``eval`` to the ``pigviz`` sub-command parser ``sub``."""
    p = sub.add_parser("generate", help="greedy decoding with dense, MagicPIG, TopK, Quest or StreamingLLM attention")
    p.add_argument("--prompt", help="the prompt text")
    p.add_argument("--from-text", type=int, metavar="N", help="use the first N tokens of the stdlib docs as prompt")
    p.add_argument("--attention", choices=METHODS, default="magicpig")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--chat", action="store_true", help="wrap --prompt in the model's chat template")
    p.add_argument("--json", help="also write the result (ids, text, per-token time and budget) here")
    _add_common(p, device="auto")
    _add_method_options(p)
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("eval", help="quality (teacher-forced KL, top-1, perplexity) or passkey accuracy vs dense")
    p.add_argument("--task", choices=("quality", "passkey"), default="quality")
    p.add_argument(
        "--attention",
        type=_methods,
        default=["magicpig", "topk", "quest", "streaming"],
        help="comma-separated methods, or module:function (file.py:function) for an estimator of your own "
        "(pigviz.attention.protocol); dense is always the reference (default: magicpig,topk,quest,streaming)",
    )
    p.add_argument(
        "--prefix",
        type=int,
        default=7936,
        help="quality: tokens prefilled before the stretch (prefix + stretch <= 8192)",
    )
    p.add_argument("--stretch", type=int, default=256, help="quality: tokens compared after the prefix")
    p.add_argument(
        "--configs", type=_configs, default=[(10, 150)], help="quality: MagicPIG (K, L) pairs, e.g. 10x150,8x75"
    )
    p.add_argument("--seeds", type=int_list, default=[0, 1], help="quality: MagicPIG hash seeds")
    p.add_argument(
        "--demo-tokens", type=int, default=0, help="quality: also continue a prefix greedily, dense and MagicPIG"
    )
    p.add_argument("--demo-prefix", type=int, default=4096, help="quality: prefix tokens of that demo")
    p.add_argument("--lengths", type=int_list, default=[1024, 2048, 4096], help="passkey: prompt lengths")
    p.add_argument("--trials", type=int, default=20, help="passkey: trials per length")
    p.add_argument("--dense-layers", type=int_list, help="layers kept dense (default 0)")
    p.add_argument("--json", help="write the results here (else print them)")
    p.add_argument("--record", action="store_true", help="add the --json file to manifest.json in its folder")
    # The CPU by default: the results in pigviz/data/ were made there, and their recorded commands name
    # no device, so rerunning one must not move to a GPU (and bf16) because a GPU is present.
    _add_common(p, device="cpu")
    p.set_defaults(func=_cmd_eval)


def _add_common(p, *, device: str) -> None:
    p.add_argument("--model", default="smollm2-135m", help="bundled alias, local model folder or hub id")
    p.add_argument(
        "--device",
        default=device,
        help=f"auto (CUDA when torch sees a GPU, else the CPU), cpu or cuda (default: {device})",
    )
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: fp32 on CPU, bf16 on GPU)")
    p.add_argument("--allow-long-context", action="store_true", help="allow prompts past the trained context")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch and for MagicPIG's compiled step (default: torch's choice; 1 is faster "
        "on a busy machine); every count gives the same results",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
