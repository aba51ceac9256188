"""``pigviz capture`` and ``pigviz data``: record a real model's q/k/v; rebuild the shipped capture;
cut the bundled GGUF to its first layers. Models (torch, transformers) and gguf load only inside
the handlers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pigviz.cli.args import int_list
from pigviz.model import gguf_cut, shipped, tokens
from pigviz.model.capture import capture, save_capture  # heavy: torch and transformers
from pigviz.model.loading import bundled_gguf_path, check_model_args, load_model  # heavy: torch, transformers

__all__ = ["register", "verify_in_fresh_process"]


def _check_capture(args) -> None:
    """Everything ``pigviz capture`` can check before the model loads and prefills."""
    if args.last < 1 or args.last > args.context:
        raise ValueError(f"--last must be in [1, --context={args.context}], got {args.last}")
    check_model_args(
        args.model,
        device=args.device,
        layers=args.layers,
        kv_heads=args.kv_heads,
        n_tokens=args.context,
        allow_long_context=args.allow_long_context,
    )
    folder = Path(args.out).expanduser().resolve().parent
    if not folder.is_dir():
        raise FileNotFoundError(f"--out must be a file in an existing folder; {folder} does not exist")


def _cmd_capture(args) -> int:
    _check_capture(args)
    model, tokenizer = load_model(args.model, device=args.device, progress=not args.quiet)
    cap = capture(
        model,
        tokenizer,
        n_tokens=args.context,
        last=args.last,
        layers=args.layers,
        kv_heads=args.kv_heads,
        progress=not args.quiet,
        allow_long_context=args.allow_long_context,
    )
    path = save_capture(cap, args.out, dtype="float16" if args.fp16 else None)
    print(
        f"wrote {path}: queries {tuple(cap.queries.shape)}, keys/values {tuple(cap.keys.shape)}, "
        f"{path.stat().st_size / 2**20:.1f} MiB"
    )
    return 0


def verify_in_fresh_process(data_dir) -> subprocess.CompletedProcess:
    """``pigviz verify`` with ``PIGVIZ_DATA_DIR=data_dir``, in a new process (no cached capture)."""
    return subprocess.run(
        [sys.executable, "-m", "pigviz", "verify"],
        env=dict(os.environ, PIGVIZ_DATA_DIR=str(data_dir)),
        capture_output=True,
        text=True,
    )


def _cmd_data_regenerate(args) -> int:
    if not args.check:
        result = shipped.regenerate_shipped(args.out_dir, progress=not args.quiet)
        print(f"wrote {result['path']} (sha256 {result['sha256']}) and its manifest entry")
        return 0
    # The check rebuilds into a scratch copy of the shipped data, so it can also run every claim on
    # the rebuilt file in a fresh process (no capture cached from the shipped one).
    with tempfile.TemporaryDirectory(prefix="pigviz-regen-") as tmp:
        for name in shipped.read_manifest()["files"]:
            if name != shipped.CAPTURE_FILE:
                shutil.copy2(shipped.data_dir() / name, Path(tmp) / name)
        result = shipped.regenerate_shipped(tmp, progress=not args.quiet)
        largest = shipped.largest_difference(result["comparison"])
        if not result["within_precision"]:
            problems = (result["comparison"] or {}).get("problems") or ["no shipped file to compare with"]
            print(
                f"{shipped.CAPTURE_FILE}: the rebuilt capture differs from the shipped one beyond its "
                f"stored precision: " + "; ".join(problems),
                file=sys.stderr,
            )
            return 1
        exact = "bit for bit" if result["match"] else "within the precision it is stored in"
        print(f"{shipped.CAPTURE_FILE}: the rebuilt capture matches the shipped one {exact}")
        print(f"largest difference: {largest}")
        verify = verify_in_fresh_process(tmp)
    if verify.returncode != 0:
        failed = [line for line in verify.stdout.splitlines() if line.rstrip().endswith("FAIL")]
        print(
            "claims that fail on the rebuilt data:\n"
            + "\n".join(failed or [verify.stdout[-2000:] + verify.stderr[-2000:]]),
            file=sys.stderr,
        )
        return 1
    tally = verify.stdout.strip().splitlines()[-1] if verify.stdout.strip() else ""
    print(f"every claim of pigviz verify passes on the rebuilt data ({tally})")
    return 0


def _cmd_data_cut_gguf(args) -> int:
    src = args.src or bundled_gguf_path()
    path = gguf_cut.cut_gguf(src, args.out, args.n_layers)
    print(
        f"wrote {path}: the first {args.n_layers} layers of {src}, "
        f"{path.stat().st_size / 2**20:.1f} MiB; load it with PIGVIZ_SMOLLM2_GGUF={path}"
    )
    return 0


def _cmd_data_tokens(args) -> int:
    path = tokens.write_tokens(args.out_dir, progress=not args.quiet)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB) and its manifest entry")
    return 0


def _cmd_data_check(args) -> int:
    problems = shipped.check_shipped(args.data_dir)
    for problem in problems:
        print(problem)
    count = len(shipped.read_manifest(args.data_dir)["files"])
    print(f"{count - len(problems)} of {count} shipped files match their manifest entry (size and sha256)")
    return 1 if problems else 0


def register(sub) -> None:
    p = sub.add_parser("capture", help="record post-RoPE q/k/v of one real prefill into a safetensors file")
    p.add_argument("--model", default="smollm2-135m", help="bundled alias, local model folder or hub id")
    p.add_argument("--context", type=int, default=8192, help="tokens to prefill (N)")
    p.add_argument("--last", type=int, default=64, help="how many final positions keep their queries (T)")
    p.add_argument("--out", required=True, help="output .safetensors file")
    p.add_argument(
        "--device", default="auto", help="auto (CUDA when torch sees a GPU, else the CPU), cpu or cuda (default: auto)"
    )
    p.add_argument("--layers", type=int_list, default=None, help="comma-separated layers to keep (default all)")
    p.add_argument("--kv-heads", type=int_list, default=None, help="comma-separated KV heads to keep (default all)")
    p.add_argument("--fp16", action="store_true", help="store tensors as fp16 (half the size)")
    p.add_argument("--allow-long-context", action="store_true", help="allow --context past the trained length")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_capture)

    p = sub.add_parser("data", help="the small captures shipped in pigviz/data/")
    data_sub = p.add_subparsers(dest="data_command", metavar="ACTION")
    data_sub.required = True
    q = data_sub.add_parser(
        "regenerate", help="rebuild the shipped capture (--check: compare it with the shipped file)"
    )
    q.add_argument(
        "--check",
        action="store_true",
        help="write nothing; check the rebuilt capture against the shipped one, to its stored precision",
    )
    q.add_argument("--out-dir", default=None, help="write here instead of pigviz/data/")
    q.add_argument("--quiet", action="store_true", help="no progress bars")
    q.set_defaults(func=_cmd_data_regenerate)
    q = data_sub.add_parser(
        "tokens", help="write the shipped capture's tokens, each decoded alone, with their manifest entry"
    )
    q.add_argument("--out-dir", default=None, help="write here instead of pigviz/data/ (its manifest.json too)")
    q.add_argument("--quiet", action="store_true", help="no progress bars")
    q.set_defaults(func=_cmd_data_tokens)
    q = data_sub.add_parser("check", help="compare every shipped file with its manifest entry (size and sha256)")
    q.add_argument("--data-dir", default=None, help="the folder to check (default: pigviz/data/)")
    q.set_defaults(func=_cmd_data_check)
    q = data_sub.add_parser(
        "cut-gguf", help="write the bundled GGUF cut to its first layers, real (quantised) weights unchanged"
    )
    q.add_argument("--n-layers", type=int, required=True, help="how many layers to keep, from layer 0")
    q.add_argument("--out", required=True, help="the GGUF file to write")
    q.add_argument("--src", default=None, help="the GGUF to cut (default: the bundled SmolLM2's)")
    q.set_defaults(func=_cmd_data_cut_gguf)
