"""Does sampled decoding on a GPU agree with the CPU results, and how fast is it there?

Called by ``benchmarks/gpu_check.sh run`` (read its header for the carry procedure):

    python benchmarks/gpu_check.py --device cuda --ids .gpu_carry/common/ids.json --out $OUT/gpu_check.json
    python benchmarks/gpu_check.py --device cpu --quick --out /tmp/gpu_check.json     # dry run here

1. Quality: the teacher-forced run of ``data/decode_quality_smollm2.json`` (same prefix,
   stretch, token ids, MagicPIG (K, L) and seeds, TopK at the matched budget) repeated on the
   device in fp32, then compared row by row with the CPU numbers. LSH hyperplanes are drawn on
   the CPU from the seed, so both machines hash with the same planes; what differs is float
   rounding in the model, which can flip a few bucket bits. Hence tolerances, not equality:
   dense perplexity within 1%; KL within 25% + 0.005 nats; top-1 agreement within 4 points;
   budget within 5% (relative).
2. Speed: per-token decode time dense vs MagicPIG at several contexts
   (``benchmarks/bench_decode.measure``), attention timed apart with GPU synchronisation.

Writes one JSON (``pigviz-gpu-check-v1``) with the hardware name, both tables and a verdict;
exits 1 if a quality row is out of tolerance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

REFERENCE = ROOT / "data" / "decode_quality_smollm2.json"
TOLERANCE = {"perplexity_rel": 0.01, "kl_rel": 0.25, "kl_abs": 0.005, "top1_abs": 0.04, "budget_rel": 0.05}


def compare_rows(reference: list[dict], measured: list[dict]) -> list[dict]:
    """One line per measured row: CPU value, device value, within tolerance or not."""

    def key(r):
        return (r["method"], r.get("K"), r.get("L"), r.get("seed"))

    ref = {key(r): r for r in reference}
    out = []
    for row in measured:
        cpu = ref.get(key(row))
        if cpu is None:
            out.append({"label": row["label"], "seed": row.get("seed"), "ok": False, "why": "no CPU row to compare"})
            continue
        checks = {
            "perplexity": abs(row["perplexity"] - cpu["perplexity"]) <= TOLERANCE["perplexity_rel"] * cpu["perplexity"]
            if row["method"] == "dense"
            else True,
            "kl": abs(row["kl_mean"] - cpu["kl_mean"]) <= TOLERANCE["kl_rel"] * cpu["kl_mean"] + TOLERANCE["kl_abs"],
            "top1": abs(row["top1_agreement"] - cpu["top1_agreement"]) <= TOLERANCE["top1_abs"],
            "budget": abs(row["budget"] - cpu["budget"]) <= TOLERANCE["budget_rel"] * cpu["budget"],
        }
        out.append(
            {
                "label": row["label"],
                "seed": row.get("seed"),
                "ok": all(checks.values()),
                "failed": [k for k, ok in checks.items() if not ok],
                **{
                    f"{name}_{side}": r[field]
                    for name, field in (
                        ("kl", "kl_mean"),
                        ("top1", "top1_agreement"),
                        ("budget", "budget"),
                        ("ppl", "perplexity"),
                    )
                    for side, r in (("cpu", cpu), ("device", row))
                },
            }
        )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--ids", default=None, help="JSON list of token ids recorded with the CPU run (carried)")
    parser.add_argument("--reference", default=str(REFERENCE), help="CPU quality JSON to compare with")
    parser.add_argument("--contexts", default="2048,4096,8192", help="speed: prefix lengths")
    parser.add_argument("--steps", type=int, default=32, help="speed: timed decode steps per method")
    parser.add_argument(
        "--quick", action="store_true", help="dry run: speed at 1024 tokens with 4 steps only (for a CPU rehearsal)"
    )
    args = parser.parse_args(argv)

    import torch
    from bench_decode import measure, table

    from pigviz._util.io import write_json_atomic
    from pigviz.decode import evaluate as decode_eval
    from pigviz.model.loading import load_model

    t_start = time.perf_counter()
    if args.device == "cpu":
        torch.set_num_threads(1)
    ref = json.loads(Path(args.reference).read_text(encoding="utf-8"))
    settings = ref["settings"]
    ids = None
    if args.ids:
        ids = json.loads(Path(args.ids).read_text(encoding="utf-8"))
        digest = hashlib.sha256(
            torch.tensor(ids[: settings["prefix"] + settings["stretch"] + 1]).numpy().astype("<i8").tobytes()
        ).hexdigest()
        if digest != settings["token_ids_sha256"]:
            raise SystemExit(f"{args.ids} does not hold the token ids of {args.reference} (sha256 differs)")
    t0 = time.perf_counter()
    model, tokenizer = load_model(device=args.device, dtype="float32", progress=False)
    load_s = time.perf_counter() - t0
    print(f"model on {args.device} in {load_s:.1f} s", flush=True)

    K, L = settings["configs"][0]
    # All the CPU run's seeds: TopK ran at their mean budget, so fewer seeds would move its budget.
    seeds = settings["seeds"]
    t0 = time.perf_counter()
    quality = decode_eval.quality_eval(
        model,
        tokenizer,
        prefix=settings["prefix"],
        stretch=settings["stretch"],
        configs=[(K, L)],
        seeds=seeds,
        baselines=["topk"],
        min_hits=settings["min_hits"],
        sinks=settings["sinks"],
        recent=settings["recent"],
        dense_layers=settings["dense_layers"],
        ids=ids,
        progress=False,
    )
    quality_s = time.perf_counter() - t0
    if quality["settings"]["token_ids_sha256"] != settings["token_ids_sha256"]:
        raise SystemExit("this machine tokenised a different text than the CPU run; pass --ids (see gpu_check.sh)")
    verdicts = compare_rows(ref["rows"], quality["rows"])
    print(f"\nquality vs CPU ({quality_s:.1f} s):")
    for v in verdicts:
        detail = (
            ""
            if "kl_cpu" not in v
            else (
                f"KL {v['kl_cpu']:.4f} -> {v['kl_device']:.4f}  top-1 "
                f"{100 * v['top1_cpu']:.1f}% -> {100 * v['top1_device']:.1f}%  budget "
                f"{100 * v['budget_cpu']:.2f}% -> {100 * v['budget_device']:.2f}%"
            )
        )
        print(f"  {'ok  ' if v['ok'] else 'FAIL'} {v['label']:<40} seed {v['seed']!s:>4}  {detail} {v.get('why', '')}")

    contexts = [1024] if args.quick else [int(c) for c in args.contexts.split(",")]
    steps = 4 if args.quick else args.steps
    speed = measure(
        model,
        tokenizer,
        contexts=contexts,
        methods=(("dense", {}), ("magicpig", {"K": K, "L": L})),
        steps=steps,
        ids=torch.tensor(ids) if ids is not None else None,
        progress=True,
    )
    print("\n" + table(speed))
    passed = all(v["ok"] for v in verdicts)
    result = {
        "format": "pigviz-gpu-check-v1",
        "passed": passed,
        "environment": decode_eval.environment(model),
        "tolerance": TOLERANCE,
        "reference": str(Path(args.reference).name),
        "quick": args.quick,
        "quality": verdicts,
        "quality_rows": quality["rows"],
        "speed": speed,
        "seconds": {
            "load": round(load_s, 1),
            "quality": round(quality_s, 1),
            "total": round(time.perf_counter() - t_start, 1),
        },
    }
    write_json_atomic(args.out, result)
    print(f"\n{'PASSED' if passed else 'FAILED'}: wrote {args.out} ({result['environment']['hardware']})")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
