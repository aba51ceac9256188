"""How long SimHashExplorer computes per control change (no browser: Python side only).

    python benchmarks/bench_widget_simhash.py [--changes 60]

Prints the median and 90th percentile over many changes of K, L, min hits and seed, for
the whole callback (formulas + counted markers + 2-D hashing + figure-widget sync) and
for the pure computation alone. The target is a median under 100 ms at default sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from pigviz.widgets.simhash import SimHashExplorer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=60)
    args = parser.parse_args()

    w = SimHashExplorer()
    rng = np.random.default_rng(0)
    moves = []
    for _ in range(args.changes):
        which = rng.integers(4)
        if which == 0:
            moves.append(("K", w.k_slider, int(rng.integers(1, 21))))
        elif which == 1:
            moves.append(("L", w.l_slider, int(rng.integers(1, 301))))
        elif which == 2:
            moves.append(("min_hits", w.hits_toggle, int(rng.integers(1, 5))))
        else:
            moves.append(("seed", w.seed_box, int(rng.integers(0, 1000))))

    callback, compute = [], []
    for _, control, value in moves:
        if control.value == value:
            continue
        t0 = time.perf_counter()
        control.value = value  # fires the observer: the full callback
        callback.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        w._figures(**w.params)  # the same work without the widget sync
        compute.append(time.perf_counter() - t0)

    def row(name, xs):
        ms = sorted(x * 1e3 for x in xs)
        p90 = ms[int(0.9 * (len(ms) - 1))]
        print(
            f"{name:<28} n={len(ms):3d}  median {statistics.median(ms):6.1f} ms  "
            f"p90 {p90:6.1f} ms  max {ms[-1]:6.1f} ms"
        )

    print("SimHashExplorer, random changes of K (1-20), L (1-300), min hits (1-4), seed")
    row("full callback", callback)
    row("compute only (figures)", compute)

    worst = []
    for _ in range(10):
        w.set_params(K=20, L=300, min_hits=2, seed=0)
        t0 = time.perf_counter()
        w.set_params(seed=1)
        worst.append(time.perf_counter() - t0)
    row("K=20, L=300 (largest)", worst)
    default = []
    for seed in range(20):
        w.set_params(K=10, L=150, min_hits=2)
        t0 = time.perf_counter()
        w.seed_box.value = 100 + seed
        default.append(time.perf_counter() - t0)
    row("K=10, L=150 (default)", default)


if __name__ == "__main__":
    main()
