"""What Binder needs: peak memory of each notebook's kernel and the time to its first figure.

Each notebook runs in its own fresh kernel (as a learner on mybinder.org would), driven by
nbclient in a child process; the kernel's peak RSS comes from getrusage of that child's
waited-for children. mybinder.org gives 2 GB and (often) one CPU.

    python benchmarks/bench_binder.py [--json OUT]           # every notebook
    python benchmarks/bench_binder.py 05 --json OUT          # only lesson 05 (05a, 05b); the other
                                                             # notebooks keep their rows in OUT
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
from pigviz.site import NOTEBOOK_GLOB  # noqa: E402

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
    # The executed notebooks, with every exercise filled in by its reference (a learner who solved
    # them all): the blank learner copies would stop at the first check.
    env = {**os.environ, "PIGVIZ_SOLUTIONS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, cwd=ROOT, check=True, env=env
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _key(path: Path) -> str:
    return path.name.split("_", 1)[0]  # "05a" for 05a_kv_bill.ipynb


def merged_rows(old_rows: list[dict], new_rows: list[dict], present: list[str]) -> list[dict]:
    """``new_rows`` plus the ``old_rows`` of notebooks not measured now, for notebooks still
    ``present``, in notebook order."""
    measured = {r["notebook"] for r in new_rows}
    kept = [r for r in old_rows if r["notebook"] in present and r["notebook"] not in measured]
    return sorted(kept + new_rows, key=lambda r: r["notebook"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="measure only these (01, 05a; 05 means 05a and 05b)")
    parser.add_argument("--json", help="also write the table here")
    args = parser.parse_args(argv)
    present = sorted((ROOT / "notebooks").glob(NOTEBOOK_GLOB))
    chosen = [nb for nb in present if not args.notebooks or {_key(nb), _key(nb)[:2]} & set(args.notebooks)]
    if not chosen:
        parser.error(f"no notebook matches {' '.join(args.notebooks)}")
    rows = []
    print(f"{'notebook':<28}{'run s':>8}{'first fig s':>13}{'kernel peak':>14}{'of 2 GB':>9}")
    for nb in chosen:
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
        if args.notebooks and Path(args.json).is_file():  # a partial run updates its rows only
            old = json.loads(Path(args.json).read_text(encoding="utf-8")).get("rows", [])
            rows = merged_rows(old, rows, [nb.name for nb in present])
        write_json_atomic(
            args.json, {"limit_mb": LIMIT_MB, "omp_threads": os.environ.get("OMP_NUM_THREADS"), "rows": rows}
        )
    return 0 if worst["kernel_peak_mb"] < LIMIT_MB else 1


if __name__ == "__main__":
    sys.exit(main())
