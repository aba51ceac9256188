"""What a learner reads: short code cells, tables as tables, exercises that say what they ask.

Counted in the jupytext sources (the executed and learner notebooks are made from them):

* a code cell the learner reads carries its idea in at most ``MAX_LINES`` non-blank lines;
  plumbing goes into a lesson helper or a cell collapsed by default
  (``# %% jupyter={"source_hidden": true}``), which JupyterLab and the site show on demand;
* no code cell aligns a text table by hand (``{x:<10}``): tables are ``lessons.table(...)``;
* every exercise is introduced by its markers line (difficulty, importance, minutes) and a
  folded hint, both taken from the exercise's own record.
"""

import ast
import re
from pathlib import Path

import jupytext
import pytest

from pigviz.lessons import exercises as ex

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]*_*.py"))
MAX_LINES = 12
# A format spec that pads to a width: "{name:<10}", "{x:>8.3f}", "{b:^5}".
ALIGNED = re.compile(r"\{[^{}]*:[^{}]*?[<>^]\d+[^{}]*\}")


def _cells(source):
    return jupytext.read(source, fmt="py:percent").cells


def _hidden(cell) -> bool:
    return bool(cell.metadata.get("jupyter", {}).get("source_hidden"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_code_cells_a_learner_reads_are_short(source):
    long = []
    for i, cell in enumerate(_cells(source)):
        if cell.cell_type != "code" or _hidden(cell):
            continue
        lines = [line for line in cell.source.splitlines() if line.strip()]
        if len(lines) > MAX_LINES:
            long.append(f"cell {i} ({len(lines)} lines): {lines[0][:60]}")
    why = f"{source.name}: code cells over {MAX_LINES} lines (move plumbing to a helper or collapse it): "
    assert not long, why + "; ".join(long)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_no_code_cell_aligns_a_table_by_hand(source):
    aligned = [
        f"cell {i}: {m.group(0)}"
        for i, cell in enumerate(_cells(source))
        if cell.cell_type == "code"
        for m in ALIGNED.finditer(cell.source)
    ]
    assert not aligned, f"{source.name}: show tables with lessons.table(...), not padded text: " + "; ".join(aligned)


def _notebook_of(exercise) -> Path:
    (source,) = [s for s in SOURCES if s.stem.split("_", 1)[0] == exercise.notebook]
    return source


def _stub_index(cells, exercise) -> int:
    for i, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        if any(isinstance(n, ast.FunctionDef) and n.name == exercise.function_name for n in tree.body):
            return i
    raise AssertionError(f"{exercise.name}: no cell defines {exercise.function_name}")


@pytest.mark.parametrize("exercise", ex.exercises(), ids=lambda e: e.name)
def test_each_exercise_shows_its_markers_and_a_folded_hint_before_its_blank(exercise):
    cells = _cells(_notebook_of(exercise))
    i = _stub_index(cells, exercise)
    before = cells[i - 1]
    assert before.cell_type == "markdown", f"{exercise.name}: the cell before the blank must introduce it"
    assert exercise.markers() in before.source, f"{exercise.name}: put `{exercise.markers()}` above the blank"
    folded = re.search(r"<details><summary>Hint</summary>(.*?)</details>", before.source.replace("\n", " "))
    assert folded, f"{exercise.name}: add a folded <details><summary>Hint</summary> ... </details> above the blank"
    said = " ".join(folded.group(1).split())
    assert " ".join(exercise.hint.split()) in said, f"{exercise.name}: the folded hint must give the exercise's hint"
