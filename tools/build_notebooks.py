"""Build the notebooks from their jupytext percent-format sources, and execute them.

    python tools/build_notebooks.py            # every notebooks/src/*.py
    python tools/build_notebooks.py 01 04      # only those notebooks
    python tools/build_notebooks.py 05a        # one part of a lesson in two notebooks; 05 builds 05a and 05b
    python tools/build_notebooks.py --learner  # only the learner copies (fast: nothing is executed)
    python tools/build_notebooks.py f1         # one finding (notebooks/src/findings/f1_*.py)

jupytext reads ``notebooks/src/KEY_name.py`` (the file a review diffs; KEY is ``NN`` or, for a
lesson in several notebooks, ``NNa``, ``NNb``); this tool adds only what jupytext does not do:
stable cell ids, executing the notebook in a fresh kernel, and writing ``notebooks/KEY_name.ipynb``
atomically. The executed notebook is the documentation: what nbval checks and the static site shows.

From the same source it writes the learner copy, ``pigviz/notebooks/KEY_name.ipynb``: the same
cells, exercise bodies still ``...``, no outputs. It ships in the wheel and is what ``pigviz
notebooks``, ``pigviz lab``, Binder and Colab open. ``tests/test_layout.py`` fails when a source and
either notebook differ.

The book has two parts. *Lessons* (``notebooks/src/NN_*.py``) teach; *findings*
(``notebooks/src/findings/fN_*.py``) are the lab book a lesson links to: the full study tables,
benchmarks and simulations. A finding is built the same way into ``notebooks/findings/`` (executed)
and ``pigviz/notebooks/findings/`` (the copy that ships in the wheel, no outputs).
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
LEARNER_OUT = ROOT / "pigviz" / "notebooks"
sys.path.insert(0, str(ROOT))
from pigviz._util.io import atomic_path

KEPT_METADATA = ("jupyter", "tags", "collapsed", "slideshow")
# Notebook sources: a two-digit lesson number, maybe a part letter, then "_name.py".
SOURCE_GLOB = "[0-9][0-9]*_*.py"
# Findings: "f", a number, then "_name.py", in their own folder (and so in their own folders out).
FINDINGS = "findings"
FINDING_GLOB = "f[0-9]*_*.py"


def all_sources() -> list[Path]:
    """The lessons in teaching order, then the findings."""
    return sorted(SRC.glob(SOURCE_GLOB)) + sorted((SRC / FINDINGS).glob(FINDING_GLOB))


def out_dirs(src: Path) -> tuple[Path, Path]:
    """Where ``src`` is written: (the executed notebook's folder, the learner copy's folder)."""
    if src.parent.name == FINDINGS:
        return OUT / FINDINGS, LEARNER_OUT / FINDINGS
    return OUT, LEARNER_OUT


def notebook_key(path: Path) -> str:
    """``"05a"`` for ``05a_kv_bill.py``: what comes before the first underscore."""
    return path.stem.split("_", 1)[0]


def selected(path: Path, wanted) -> bool:
    """Is ``path`` asked for? ``05a`` picks that notebook, ``05`` every notebook of lesson 05."""
    key = notebook_key(path)
    return key in wanted or key[:2] in wanted


def from_source(src: Path):
    """The notebook as jupytext reads it, with our metadata and stable cell ids, not executed."""
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
    return nb


def learner_copy(src: Path):
    """What a learner opens: the source's cells, no outputs (jupytext writes none), and no
    jupytext pairing (a learner's copy has no source folder beside it)."""
    nb = from_source(src)
    del nb.metadata["jupytext"]
    return nb


def write_notebook(nb, target: Path) -> Path:
    with atomic_path(target) as tmp:
        nbformat.write(nb, str(tmp))
    return target


def build(src: Path, execute: bool = True) -> Path:
    out, learner_out = out_dirs(src)
    out.mkdir(parents=True, exist_ok=True)  # the kernel starts in it
    write_notebook(learner_copy(src), learner_out / f"{src.stem}.ipynb")
    nb = from_source(src)
    if execute:
        client = NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            store_widget_state=False,
            record_timing=False,  # no execution timestamps in the cell metadata: they only make diffs noisy
            resources={"metadata": {"path": str(out)}},
        )
        t0 = time.perf_counter()
        client.execute()
        print(f"{src.stem}: executed in {time.perf_counter() - t0:.1f} s")
    return write_notebook(nb, out / f"{src.stem}.ipynb")


def main(argv):
    # The committed notebooks run with the reference solutions standing in for blank exercises.
    os.environ.setdefault("PIGVIZ_SOLUTIONS", "1")
    learner_only = "--learner" in argv
    argv = [a for a in argv if a != "--learner"]
    sources = all_sources()
    if argv:
        sources = [s for s in sources if selected(s, argv)]
    if not sources:
        sys.exit("no notebook sources matched")
    for src in sources:
        if learner_only:
            path = write_notebook(learner_copy(src), out_dirs(src)[1] / f"{src.stem}.ipynb")
            print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1024:.0f} KiB)")
            continue
        path = build(src)
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main(sys.argv[1:])
