"""What a learner reads: short code cells, tables as tables, exercises that say what they ask.

Counted in the jupytext sources (the executed and learner notebooks are made from them):

* a code cell the learner reads fits on a screen: at most ``MAX_LINES`` non-blank lines, room
  for a cell that computes its idea in view (``tools/count_cells.py`` measures how many do; a
  computation is not to be moved into a helper to make a cell shorter);
* no code cell aligns a text table by hand (``{x:<10}``): tables are ``lessons.table(...)``;
* every exercise is introduced by its markers line (difficulty, importance, minutes) and two
  folded hints, a nudge (what to think about) and then the code-level hint, both taken from the
  exercise's own record; its check cell is one line, ``fn = ex.check("NN.fn", fn)``;
* one convention everywhere: the prose is markdown (no cell renders a paragraph from a function of
  a per-notebook lessons module), ``lessons.folded`` folds (no local copy), a per-notebook module
  is imported as ``nbNN``, and the Colab set-up cell is collapsed under a one-line comment.
"""

import ast
import re
from pathlib import Path

import jupytext
import pytest

from pigviz.lessons import exercises as ex

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]*_*.py"))
MAX_LINES = 20  # a cell that computes may run to about 20 lines
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
    why = f"{source.name}: code cells over {MAX_LINES} lines (split the computation into steps): "
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
    text = before.source.replace("\n", " ")
    nudge = re.search(r"<details><summary>Hint 1: what to think about</summary>(.*?)</details>", text)
    code = re.search(r"<details><summary>Hint 2: where to look</summary>(.*?)</details>", text)
    assert nudge and code, (
        f"{exercise.name}: fold two hints above the blank, '<details><summary>Hint 1: what to think about"
        "</summary> ... </details>' and then '<details><summary>Hint 2: where to look</summary> ... </details>'"
    )
    assert nudge.start() < code.start(), f"{exercise.name}: the nudge comes before the code-level hint"
    assert exercise.nudge.strip(), f"{exercise.name}: give the exercise a nudge (Exercise.nudge)"
    assert " ".join(exercise.nudge.split()) in " ".join(nudge.group(1).split()), (
        f"{exercise.name}: the first fold must give the exercise's nudge"
    )
    assert " ".join(exercise.hint.split()) in " ".join(code.group(1).split()), (
        f"{exercise.name}: the second fold must give the exercise's hint"
    )


@pytest.mark.parametrize("exercise", ex.exercises(), ids=lambda e: e.name)
def test_each_check_cell_goes_on_with_what_the_check_returns(exercise):
    cells = _cells(_notebook_of(exercise))
    i = _stub_index(cells, exercise)
    after = cells[i + 1]
    fn = exercise.function_name
    wanted = f'{fn} = ex.check("{exercise.name}", {fn})'
    assert after.cell_type == "code" and wanted in after.source, (
        f"{exercise.name}: the cell after the blank is `{wanted}`"
    )


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_one_convention_for_prose_folds_aliases_and_the_colab_cell(source):
    cells = _cells(source)
    text = "\n".join(c.source for c in cells if c.cell_type == "code")
    key = source.stem.split("_", 1)[0]
    assert "reference_or(" not in text, f"{source.name}: `fn = ex.check(name, fn)` replaces reference_or"
    assert not re.search(r"^def folded\(", text, re.M), f"{source.name}: use lessons.folded, not a local copy"
    prose_call = re.search(r"Markdown\(\s*(nb\d\d\w*|lesson)\.\w+\(", text)
    assert not prose_call, f"{source.name}: prose is markdown, not {prose_call.group(0)}...) from a lessons module"
    for m in re.finditer(r"from pigviz\.lessons import (nb\d\d\w*)(?: as (\w+))?", text):
        assert m.group(2) == f"nb{key}", f"{source.name}: import {m.group(1)} as nb{key}, not {m.group(2)}"
    colab = [c for c in cells if c.cell_type == "code" and "google.colab" in c.source]
    assert len(colab) == 1, f"{source.name}: one Colab set-up cell"
    assert _hidden(colab[0]), f'{source.name}: collapse the Colab set-up cell (jupyter={{"source_hidden": true}})'
    first = colab[0].source.splitlines()[0]
    assert first.startswith("# ") and "install" in first, f"{source.name}: the Colab cell opens with what it installs"


def test_one_name_per_pigviz_module_across_the_notebooks():
    """A name means one module everywhere: `plots` once named five (budget, decoding, estimators,
    simhash, study); a learner who met `plots.x` in one notebook met another module in the next."""
    sources = SOURCES + sorted((ROOT / "notebooks" / "src" / "findings").glob("f*_*.py"))
    module_of: dict[str, set[str]] = {}
    alias_of: dict[str, set[str]] = {}
    for source in sources:
        for cell in _cells(source):
            if cell.cell_type != "code":
                continue
            for m in re.finditer(r"^\s*from (pigviz[\w.]*) import (\w+) as (\w+)", cell.source, re.M):
                module, alias = f"{m.group(1)}.{m.group(2)}", m.group(3)
                module_of.setdefault(alias, set()).add(module)
                alias_of.setdefault(module, set()).add(alias)
    clashes = {a: sorted(m) for a, m in module_of.items() if len(m) > 1}
    assert not clashes, f"one alias names several modules: {clashes}"
    several = {m: sorted(a) for m, a in alias_of.items() if len(a) > 1}
    assert not several, f"one module goes by several names: {several}"
