"""Per-token decode time of SmolLM2-135M, dense vs MagicPIG, with attention timed apart.

    python benchmarks/bench_decode.py                        # 4k and 8k, writes data/decode_speed_cpu.json
    python benchmarks/bench_decode.py --contexts 1024 --steps 4 --out /tmp/speed.json   # quick look

For each context: ONE dense prefill of the first N tokens of the stdlib docs; then, per
method, the index is built (MagicPIG; timed) and ``--steps`` greedy tokens are decoded one
at a time (after ``--warmup`` untimed ones); the cache is cropped back before the next
method, so every method decodes from the same state. Per step we record the wall time and
the time spent inside the attention function of every layer (layer 0 stays dense sdpa for
MagicPIG too); "rest" is the step minus attention: the weights (~540 MB of fp32 read per
token), the norms, and transformers appending the new key/value to the cache. Medians
over the steps. The 8k row decodes from 8192 - steps - warmup tokens so that it stays
inside the trained context. Besides wall time, each step and its attention are also timed in
this thread's CPU time (``*_cpu_ms``; meaningful with ``--threads 1`` on a CPU), which a
machine shared with other jobs inflates far less than the wall clock.

On a shared CPU, small tensor ops wait for each other's threads; ``--threads 1`` (the
default) gives steadier numbers there. The load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SPEED_FORMAT = "pigviz-decode-speed-v1"
SPEED_FILE = "decode_speed_cpu.json"


def measure(
    model,
    tokenizer,
    *,
    contexts=(4096, 8192),
    methods=(("dense", {}), ("magicpig", {})),
    steps: int = 16,
    warmup: int = 2,
    ids=None,
    progress: bool = True,
) -> list[dict]:
    """Rows of per-token timings (see module docstring). ``ids``: token ids to use instead of
    the stdlib docs (e.g. carried to another machine)."""
    import torch

    from pigviz.decode.session import forward, new_cache, use_attention
    from pigviz.model import texts

    limit = model.config.max_position_embeddings
    rows = []
    for context in contexts:
        n = min(context, limit - steps - warmup)
        prompt = ids[:n] if ids is not None else texts.first_tokens(tokenizer, n)
        cache = new_cache(model)
        t0 = time.perf_counter()
        with use_attention(model, "dense"):
            first = int(forward(model, prompt, cache, logits_to_keep=1)[-1].argmax())
        prefill_s = time.perf_counter() - t0
        dense_tokens = None
        for method, options in methods:
            step_s, attn_s, step_cpu, attn_cpu, budgets, tokens = [], [], [], [], [], [first]
            with use_attention(model, method, **options) as session:
                session.prepare(cache)
                session.phase = "decode"
                session.time_attention = True
                for i in range(warmup + steps):
                    _sync(model)
                    before, t0 = session.attention_seconds, time.perf_counter()
                    before_cpu, c0 = session.attention_cpu_seconds, time.thread_time()
                    logits = forward(model, torch.tensor([tokens[-1]]), cache)
                    tokens.append(int(logits[-1].argmax()))
                    _sync(model)
                    if i >= warmup:
                        step_s.append(time.perf_counter() - t0)
                        attn_s.append(session.attention_seconds - before)
                        step_cpu.append(time.thread_time() - c0)
                        attn_cpu.append(session.attention_cpu_seconds - before_cpu)
                        b = session.take_budgets()
                        budgets.append(1.0 if b is None else float(b[-1]))
                    else:
                        session.take_budgets()
                cache.crop(-(warmup + steps))
            dense_tokens = tokens if method == "dense" else dense_tokens
            row = {
                "context": n,
                "method": method,
                "options": {k: list(v) if isinstance(v, tuple) else v for k, v in session.options.items()},
                "step_ms": 1e3 * statistics.median(step_s),
                "attention_ms": 1e3 * statistics.median(attn_s),
                "step_cpu_ms": 1e3 * statistics.median(step_cpu),
                "attention_cpu_ms": 1e3 * statistics.median(attn_cpu),
                "index_seconds": session.index_seconds,
                "index_cpu_seconds": session.index_cpu_seconds,
                "prefill_seconds": prefill_s,
                "budget": statistics.fmean(budgets),
                "steps": steps,
                "same_tokens_as_dense": None if dense_tokens is None else tokens == dense_tokens,
            }
            row["rest_ms"] = row["step_ms"] - row["attention_ms"]
            rows.append(row)
            if progress:
                print(
                    f"  {n:>5} {method:<9} step {row['step_ms']:7.1f} ms  attention {row['attention_ms']:7.1f} ms"
                    f"  (CPU time: step {row['step_cpu_ms']:7.1f}, attention {row['attention_cpu_ms']:7.1f})"
                    f"  index {row['index_seconds']:5.2f} s  budget {100 * row['budget']:5.1f}%",
                    flush=True,
                )
    return rows


def _sync(model) -> None:
    import torch

    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def table(rows: list[dict]) -> str:
    from pigviz.decode.report import speed_table

    return speed_table(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", default="4096,8192", help="comma-separated prefix lengths")
    parser.add_argument("--steps", type=int, default=16, help="timed decode steps per method")
    parser.add_argument("--warmup", type=int, default=2, help="untimed decode steps first")
    parser.add_argument("--K", type=int, default=10)
    parser.add_argument("--L", type=int, default=150)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", default=None, help=f"JSON path (default data/{SPEED_FILE}, recorded in the manifest)")
    args = parser.parse_args(argv)

    import torch

    from pigviz._util.io import write_json_atomic
    from pigviz.decode import evaluate as decode_eval
    from pigviz.model.loading import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    model, tokenizer = load_model(device="cpu", progress=False)  # the file it writes is the CPU's timings
    contexts = [int(c) for c in args.contexts.split(",")]
    methods = (("dense", {}), ("magicpig", {"K": args.K, "L": args.L}))
    t0 = time.perf_counter()
    rows = measure(model, tokenizer, contexts=contexts, methods=methods, steps=args.steps, warmup=args.warmup)
    print(table(rows))
    result = {
        "format": SPEED_FORMAT,
        "environment": decode_eval.environment(model),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "cpu_count": os.cpu_count(),
        "seconds": round(time.perf_counter() - t0, 1),
        "rows": rows,
        "command": " ".join(["python benchmarks/bench_decode.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    out = Path(args.out) if args.out else ROOT / "data" / SPEED_FILE
    write_json_atomic(out, result)
    if args.out is None:
        decode_eval.record_in_manifest(
            out,
            "per-token CPU decode time of SmolLM2-135M, dense vs MagicPIG, attention timed apart, index build time",
            result["command"],
            directory=out.parent,
        )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
