"""Build the notebooks from their jupytext percent-format sources, and execute them.

    python tools/build_notebooks.py            # every notebooks/src/*.py
    python tools/build_notebooks.py 01 04      # only those numbers

jupytext reads ``notebooks/src/NN_name.py`` (the file a review diffs); this tool adds only
what jupytext does not do: stable cell ids, executing the notebook in a fresh kernel, and
writing ``notebooks/NN_name.ipynb`` atomically. The executed notebook is what learners open
and what nbval checks; ``tests/test_layout.py`` fails when a source and its notebook differ.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "notebooks" / "src"
OUT = ROOT / "notebooks"
sys.path.insert(0, str(ROOT))
from pigviz._util.io import atomic_path

KEPT_METADATA = ("jupyter", "tags", "collapsed", "slideshow")


def build(src: Path, execute: bool = True) -> Path:
    nb = jupytext.read(src, fmt="py:percent")
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "jupytext": {"formats": "ipynb,src//py:percent"},
    }
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{src.stem[:2]}-{i:02d}"
        # Keep what a learner sees (collapsed solutions, tags); drop jupytext's spacing bookkeeping.
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in KEPT_METADATA}
    if execute:
        client = NotebookClient(
            nb, timeout=600, kernel_name="python3", store_widget_state=False, resources={"metadata": {"path": str(OUT)}}
        )
        t0 = time.perf_counter()
        client.execute()
        print(f"{src.stem}: executed in {time.perf_counter() - t0:.1f} s")
    target = OUT / f"{src.stem}.ipynb"
    with atomic_path(target) as tmp:
        nbformat.write(nb, str(tmp))
    return target


def main(argv):
    # The committed notebooks run with the reference solutions standing in for blank exercises.
    os.environ.setdefault("PIGVIZ_SOLUTIONS", "1")
    sources = sorted(SRC.glob("[0-9][0-9]_*.py"))
    if argv:
        sources = [s for s in sources if s.stem[:2] in argv]
    if not sources:
        sys.exit("no notebook sources matched")
    for src in sources:
        path = build(src)
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main(sys.argv[1:])
