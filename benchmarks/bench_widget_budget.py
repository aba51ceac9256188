"""Latency of the KV-budget widgets: compute + figure update per control change.

    python benchmarks/bench_widget_budget.py

Prints the median and 90th percentile over many changes at default sizes; the target
is about 100 ms per change. No kernel or browser: this times the Python side only.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pigviz.memory.model_shapes import known_models  # noqa: E402
from pigviz.widgets.budget import AllocatorWidget, KVBudgetWidget  # noqa: E402


def _time(changes) -> list[float]:
    out = []
    for change in changes:
        t0 = time.perf_counter()
        change()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _report(name: str, ms: list[float]) -> None:
    ms = sorted(ms)
    p90 = ms[int(0.9 * (len(ms) - 1))]
    print(f"{name:<34} n={len(ms):>3}  median {statistics.median(ms):6.1f} ms  p90 {p90:6.1f} ms")


def main() -> None:
    kv = KVBudgetWidget()
    models = known_models()
    contexts = [1_000, 8_192, 98_304, 131_072, 1_000_000, -7, 10**9]
    changes = []
    for i in range(60):
        changes.append(lambda i=i: setattr(kv.model_picker, "value", models[i % len(models)]))
        changes.append(lambda i=i: setattr(kv.context, "value", contexts[i % len(contexts)]))
        changes.append(lambda i=i: setattr(kv.K, "value", 1 + i % 20))
        changes.append(lambda i=i: setattr(kv.L, "value", 1 + (37 * i) % 400))
        changes.append(lambda i=i: setattr(kv.dtype, "value", (4, 2, 1)[i % 3]))
    _report("KVBudgetWidget (all controls)", _time(changes))

    alloc = AllocatorWidget()
    changes = []
    for i in range(40):
        changes.append(lambda i=i: setattr(alloc.page, "value", AllocatorWidget.PAGE_SIZES[i % 9]))
        changes.append(lambda i=i: setattr(alloc.reserve, "value", AllocatorWidget.RESERVES[i % 5]))
        changes.append(lambda i=i: setattr(alloc.prefix, "value", AllocatorWidget.PREFIXES[i % 7]))
    _report("AllocatorWidget (all controls)", _time(changes))
    if "could not update" in kv.status.value + alloc.status.value:
        sys.exit("a widget reported an error during the benchmark")


if __name__ == "__main__":
    main()
