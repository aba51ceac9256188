"""How long StickBalanceWidget takes to react, in Python, per control change.

Measures the whole callback (estimators + figure update inside batch_update), not the
browser's redraw. Target: a median well under 100 ms at default sizes.

    python benchmarks/bench_widget_stick_balance.py [--changes 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pigviz.toy import stick_balance as sb  # noqa: E402
from pigviz.widgets.stick_balance import StickBalanceWidget  # noqa: E402


def timed(action, repeats):
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        action(i)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), max(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200, help="control changes per measurement")
    args = parser.parse_args(argv)
    repeats = max(5, args.changes)

    t0 = time.perf_counter()
    widget = StickBalanceWidget()
    print(f"construct (first FigureWidget included): {(time.perf_counter() - t0) * 1e3:.0f} ms")
    t0 = time.perf_counter()
    StickBalanceWidget()
    print(f"construct again (error curves of every scenario precomputed): {(time.perf_counter() - t0) * 1e3:.0f} ms")

    n = widget.budget_slider.max
    budgets = [1 + (7 * i) % n for i in range(repeats)]

    def slide(i):
        value = budgets[i]
        if value == widget.budget_slider.value:
            value = value % n + 1
        widget.budget_slider.value = value

    def scenario_warm(i):
        widget.scenario_dropdown.value = sb.SCENARIOS[(i + 1) % len(sb.SCENARIOS)]

    rows = [
        ("budget slider change", *timed(slide, repeats)),
        ("resample click", *timed(lambda i: widget.resample_button.click(), repeats)),
        ("scenario change", *timed(scenario_warm, repeats)),
    ]
    print(f"{'action':<34}{'median ms':>10}{'max ms':>9}   (n={n} keys, {repeats} changes)")
    for name, med, worst in rows:
        print(f"{name:<34}{med:>10.1f}{worst:>9.1f}")
    slow = [name for name, med, _ in rows if med > 100]
    print("within the 100 ms target" if not slow else f"OVER 100 ms: {', '.join(slow)}")


if __name__ == "__main__":
    main()
