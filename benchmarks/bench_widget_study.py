"""How long StudyExplorer computes per control change (no browser: Python side only).

    python benchmarks/bench_widget_study.py [--changes 60] [--results pigviz/data/study_smollm2.json]

Prints the median and 90th percentile over many random changes of layer, head and methods,
for the whole callback (averaging the stored per-(layer, head) means + building the figure +
figure-widget sync) and for the computation alone. The target is a median under 100 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from pigviz.study.run import load_results  # noqa: E402
from pigviz.widgets.study import StudyExplorer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=60)
    parser.add_argument("--results", type=Path, default=None, help="results JSON (default: the shipped study)")
    args = parser.parse_args()

    w = StudyExplorer(load_results(args.results) if args.results else None)
    rng = np.random.default_rng(0)
    callback, compute = [], []
    for _ in range(args.changes):
        which = rng.integers(3)
        t0 = time.perf_counter()
        if which == 0:
            w.layer_picker.value = int(rng.choice([-1] + w.layers))  # fires the observer
        elif which == 1:
            w.head_picker.value = int(rng.integers(-1, w.heads))
        else:
            box = w.method_boxes[str(rng.choice(list(w.method_boxes)))]
            box.value = not box.value
        callback.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        w.figure()  # the same work, no sync
        compute.append(time.perf_counter() - t0)

    def row(name, xs):
        ms = sorted(x * 1e3 for x in xs)
        p90 = ms[int(0.9 * (len(ms) - 1))]
        print(
            f"{name:<28} n={len(ms):3d}  median {statistics.median(ms):6.1f} ms  "
            f"p90 {p90:6.1f} ms  max {ms[-1]:6.1f} ms"
        )

    print("StudyExplorer, random changes of layer, head and ticked methods")
    row("full callback", callback)
    row("compute only (figure)", compute)


if __name__ == "__main__":
    main()
