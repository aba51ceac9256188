"""Does a busy core hurt? Each cell of a notebook timed three ways in one run: on one thread,
with the default threads on a free machine, and with the default threads beside a process that
keeps one core busy (a CPU hog, as another job, a browser or a neighbour on a shared host would).

A thread team that splits small operations waits at each one for the thread sharing its core with
the hog; pigviz fits its threads to the free cores where its loops start
(``pigviz._util.threads.fitted_threads``). The table prints, per cell that took at least
``--min`` seconds on one thread, the three times and the ratio beside the hog to one thread; the
last line the worst ratio. Ratios, not asserts: they move with the machine and its load.

    python benchmarks/bench_busy_core.py 08 [07b ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pigviz._util.io import write_json_atomic  # noqa: E402

HOG = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end: pass\n"

CHILD = r"""
import json, sys, time
import nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
times = {}
started = {}
def before(cell, cell_index):
    started[cell_index] = time.perf_counter()
def after(cell, cell_index, execute_reply):
    times[cell_index] = time.perf_counter() - started[cell_index]
client = NotebookClient(nb, timeout=1200, kernel_name="python3", on_cell_execute=before, on_cell_executed=after)
client.execute()
print(json.dumps({str(k): v for k, v in times.items()}))
"""


def run(path: Path, env: dict) -> dict[int, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, capture_output=True, text=True, check=True)
    return {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", help="keys such as 08 or 07b")
    parser.add_argument("--min", type=float, default=0.5, help="report cells of at least this many seconds")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        print("one CPU: nothing to share with a hog")
        return 0
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    base["PIGVIZ_SOLUTIONS"] = "1"
    rows, worst = [], 0.0
    for key in args.notebooks:
        (path,) = sorted((ROOT / "notebooks").glob(f"{key}_*.ipynb"))
        one = run(path, {**base, "OMP_NUM_THREADS": "1"})
        free = run(path, base)
        hog = subprocess.Popen([sys.executable, "-c", HOG])
        try:
            busy = run(path, base)
        finally:
            hog.kill()
            hog.wait()
        for i in sorted(one):
            if one[i] < args.min:
                continue
            ratio = busy[i] / one[i]
            worst = max(worst, ratio)
            rows.append(
                {
                    "notebook": path.name,
                    "cell": i,
                    "one_thread_s": one[i],
                    "default_free_s": free[i],
                    "default_beside_hog_s": busy[i],
                    "hog_over_one": ratio,
                }
            )
    print(f"{'notebook':32} {'cell':>4} {'1 thread':>9} {'default':>9} {'beside hog':>11} {'hog/1':>6}")
    for r in rows:
        print(
            f"{r['notebook']:32} {r['cell']:>4} {r['one_thread_s']:>8.2f}s {r['default_free_s']:>8.2f}s "
            f"{r['default_beside_hog_s']:>10.2f}s {r['hog_over_one']:>5.2f}x"
        )
    print(f"worst cell beside a busy core: {worst:.2f}x its one-thread time")
    if args.json:
        write_json_atomic(args.json, {"rows": rows, "worst": worst})
    return 0


if __name__ == "__main__":
    sys.exit(main())
