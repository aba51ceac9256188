"""Build the notebooks from their jupytext percent-format sources, and execute them.

    python tools/build_notebooks.py            # every notebooks/src/*.py
    python tools/build_notebooks.py 01 04      # only those notebooks
    python tools/build_notebooks.py 05a        # one part of a lesson in two notebooks; 05 builds 05a and 05b

jupytext reads ``notebooks/src/KEY_name.py`` (the file a review diffs; KEY is ``NN`` or, for a
lesson in several notebooks, ``NNa``, ``NNb``); this tool adds only what jupytext does not do:
stable cell ids, executing the notebook in a fresh kernel, and writing ``notebooks/KEY_name.ipynb``
atomically. The executed notebook is what learners open
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
# Notebook sources: a two-digit lesson number, maybe a part letter, then "_name.py".
SOURCE_GLOB = "[0-9][0-9]*_*.py"


def notebook_key(path: Path) -> str:
    """``"05a"`` for ``05a_kv_bill.py``: what comes before the first underscore."""
    return path.stem.split("_", 1)[0]


def selected(path: Path, wanted) -> bool:
    """Is ``path`` asked for? ``05a`` picks that notebook, ``05`` every notebook of lesson 05."""
    key = notebook_key(path)
    return key in wanted or key[:2] in wanted


def build(src: Path, execute: bool = True) -> Path:
    nb = jupytext.read(src, fmt="py:percent")
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "jupytext": {"formats": "ipynb,src//py:percent"},
    }
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{notebook_key(src)}-{i:02d}"
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
    sources = sorted(SRC.glob(SOURCE_GLOB))
    if argv:
        sources = [s for s in sources if selected(s, argv)]
    if not sources:
        sys.exit("no notebook sources matched")
    for src in sources:
        path = build(src)
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main(sys.argv[1:])
