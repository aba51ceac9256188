"""What Binder needs: peak memory of each notebook's kernel and the time to its first figure.

Each notebook runs in its own fresh kernel (as a learner on mybinder.org would), driven by
nbclient in a child process; the kernel's peak RSS comes from getrusage of that child's
waited-for children. mybinder.org gives 2 GB and (often) one CPU.

    python benchmarks/bench_binder.py [--json OUT]
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

LIMIT_MB = 2048

CHILD = r"""
import json, resource, sys, time
import nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
t0 = time.perf_counter()
first_plot = []
def on_executed(cell, cell_index, execute_reply):
    if not first_plot and any("application/vnd.plotly.v1+json" in (o.get("data") or {})
                              or "application/vnd.jupyter.widget-view+json" in (o.get("data") or {})
                              for o in cell.get("outputs", [])):
        first_plot.append(time.perf_counter() - t0)
client = NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=False,
                        resources={"metadata": {"path": str(__import__("pathlib").Path(path).parent)}},
                        on_cell_executed=on_executed)
client.execute()
total = time.perf_counter() - t0
peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"seconds": total, "first_figure_s": first_plot[0] if first_plot else None,
                  "kernel_peak_mb": peak_kb / 1024}))
"""


def measure(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the table here")
    args = parser.parse_args(argv)
    rows = []
    print(f"{'notebook':<28}{'run s':>8}{'first fig s':>13}{'kernel peak':>14}{'of 2 GB':>9}")
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        r = measure(nb)
        r["notebook"] = nb.name
        rows.append(r)
        first = f"{r['first_figure_s']:.1f}" if r["first_figure_s"] is not None else "-"
        print(
            f"{nb.name:<28}{r['seconds']:>8.1f}{first:>13}{r['kernel_peak_mb']:>11.0f} MB"
            f"{r['kernel_peak_mb'] / LIMIT_MB:>8.0%}"
        )
    worst = max(rows, key=lambda r: r["kernel_peak_mb"])
    print(
        f"\nlargest kernel: {worst['notebook']} at {worst['kernel_peak_mb']:.0f} MB "
        f"= {worst['kernel_peak_mb'] / LIMIT_MB:.0%} of Binder's {LIMIT_MB} MB"
    )
    if args.json:
        write_json_atomic(
            args.json, {"limit_mb": LIMIT_MB, "omp_threads": os.environ.get("OMP_NUM_THREADS"), "rows": rows}
        )
    return 0 if worst["kernel_peak_mb"] < LIMIT_MB else 1


if __name__ == "__main__":
    sys.exit(main())
