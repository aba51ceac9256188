"""Build the notebooks from their percent-format sources and execute them.

    python tools/build_notebooks.py            # every notebooks/src/*.py
    python tools/build_notebooks.py 01 04      # only those numbers

Sources in ``notebooks/src/NN_name.py`` are plain Python with ``# %%`` code cells and
``# %% [markdown]`` prose cells (each prose line starts with ``# ``), so a review reads a
diff of code, not of JSON. The executed ``notebooks/NN_name.ipynb`` is what learners open
and what nbval checks.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "notebooks" / "src"
OUT = ROOT / "notebooks"
sys.path.insert(0, str(ROOT))
from pigviz._util.io import atomic_path  # noqa: E402

CELL = re.compile(r"^# %%(?P<md> \[markdown\])?[^\n]*$", re.M)


def parse(text: str):
    cells = []
    marks = list(CELL.finditer(text))
    for i, m in enumerate(marks):
        body = text[m.end(): marks[i + 1].start() if i + 1 < len(marks) else len(text)].strip("\n")
        if m.group("md"):
            lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in body.splitlines()]
            cells.append(nbformat.v4.new_markdown_cell("\n".join(lines).strip()))
        elif body.strip():
            cells.append(nbformat.v4.new_code_cell(body.rstrip()))
    return cells


def build(src: Path, execute: bool = True) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = parse(src.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{src.stem[:2]}-{i:02d}"
    if execute:
        client = NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=False,
                                resources={"metadata": {"path": str(OUT)}})
        t0 = time.perf_counter()
        client.execute()
        print(f"{src.stem}: executed in {time.perf_counter() - t0:.1f} s")
    target = OUT / f"{src.stem}.ipynb"
    with atomic_path(target) as tmp:
        nbformat.write(nb, str(tmp))
    return target


def main(argv):
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
