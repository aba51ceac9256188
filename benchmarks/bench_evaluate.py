"""How long ``evaluate_estimator`` takes on the shipped heads, on one core (notebook 08's figure).

    python benchmarks/bench_evaluate.py                     # print the table
    python benchmarks/bench_evaluate.py --json out.json     # also save it
    python benchmarks/bench_evaluate.py --json pigviz/data/bench_evaluate_cpu.json --record   # ship it

One process, one thread (torch and BLAS), side by side:

* **cold**: ``evaluate_estimator(uniform_sample)``, the warm-up's numpy estimator, with the
  default baselines (TopK, MagicPIG, Quest) run too, from an empty cache: what a learner's
  first call costs. The issue's target: under 30 s on one core.
* **yours alone**: the worked example (``topk_plus_tail``, numpy) once the baselines' rows are
  kept: what every later call costs.
* **each baseline** alone, from an empty cache, to see where the cold time goes.

Times are CPU seconds of this process (``time.process_time``, steady on a shared machine)
and wall seconds; the table prints each as a share of the 30 s target.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # one core, before numpy and torch start their pools
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pigviz  # noqa: E402
from pigviz._util.io import sha256_file, write_json_atomic  # noqa: E402
from pigviz.lessons import nb08_your_estimator as nb08  # noqa: E402
from pigviz.model import shipped  # noqa: E402
from pigviz.study import estimators  # noqa: E402

TARGET_S = nb08.SPEED_TARGET_S
FORMAT = "pigviz-bench-evaluate-v1"


def timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - t0


def measure() -> dict:
    torch.set_num_threads(1)
    estimators._BASELINE_ROWS.clear()
    rows, cold_cpu, cold_wall = timed(lambda: estimators.evaluate_estimator(nb08.uniform_sample))
    _, yours_cpu, yours_wall = timed(lambda: estimators.evaluate_estimator(nb08.topk_plus_tail))
    per = {}
    for name in ("topk", "magicpig", "quest"):
        estimators._BASELINE_ROWS.clear()
        _, cpu, wall = timed(lambda name=name: estimators.evaluate_estimator(None, baselines=(name,)))
        per[name] = {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2)}
    return {
        "format": FORMAT,
        "threads": torch.get_num_threads(),
        "rows_per_estimator": sum(r["estimator"] == "uniform_sample" for r in rows),
        "cold_cpu_s": round(cold_cpu, 2),
        "cold_wall_s": round(cold_wall, 2),
        "yours_cpu_s": round(yours_cpu, 2),
        "yours_wall_s": round(yours_wall, 2),
        "baselines": per,
        "target_s": TARGET_S,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "pigviz_version": pigviz.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python_version": sys.version.split()[0],
        "command": nb08.BENCH_COMMAND,
    }


def table(result: dict) -> str:
    lines = [
        f"evaluate_estimator on the shipped heads ({result['rows_per_estimator']} rows per estimator: 4 layers x "
        f"3 heads x 64 positions x 2 budgets), {result['threads']} thread, load average "
        f"{result['load_average'][0]:.1f} on {result['cpu_count']} CPUs",
        "| what | CPU s | wall s | CPU / 30 s target |",
        "|---|---|---|---|",
        f"| cold: warm-up estimator + TopK, MagicPIG, Quest | {result['cold_cpu_s']:.1f} | "
        f"{result['cold_wall_s']:.1f} | {result['cold_cpu_s'] / TARGET_S:.2f} |",
        f"| yours alone (baselines kept) | {result['yours_cpu_s']:.1f} | {result['yours_wall_s']:.1f} | "
        f"{result['yours_cpu_s'] / TARGET_S:.2f} |",
    ]
    for name, t in result["baselines"].items():
        lines.append(f"| {name} alone | {t['cpu_s']:.1f} | {t['wall_s']:.1f} | {t['cpu_s'] / TARGET_S:.2f} |")
    return "\n".join(lines)


def record(path: Path) -> None:
    manifest = shipped.read_manifest()
    import transformers

    manifest["files"][path.name] = {
        "sha256": sha256_file(path),
        "bytes": path.stat().st_size,
        "what": (
            "CPU and wall seconds of pigviz.study.estimators.evaluate_estimator on the shipped heads (one "
            "thread): a numpy estimator with the TopK, MagicPIG and Quest baselines from cold, a numpy "
            "estimator alone once the baselines are kept, and each baseline alone; measured on a 2-core CPU "
            "shared with other jobs."
        ),
        "command": nb08.BENCH_COMMAND,
        "pigviz_version": pigviz.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": sys.version.split()[0],
    }
    write_json_atomic(shipped.manifest_path(), manifest)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the measurement here")
    parser.add_argument("--record", action="store_true", help="add the --json file to pigviz/data/manifest.json")
    args = parser.parse_args(argv)
    if args.record and not args.json:
        parser.error("--record needs --json pigviz/data/bench_evaluate_cpu.json")
    result = measure()
    print(table(result))
    if args.json:
        path = write_json_atomic(args.json, result)
        if args.record:
            record(path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
