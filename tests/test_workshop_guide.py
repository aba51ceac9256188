"""The instructor guide agrees with what it describes: every exercise has a row in its table,
and the row names every mistake the check recognises (the Wrong versions' labels); the
`use_reference` lines it hands out assign each reference to the exercise's own function name;
what it says a failed check shows, and what `make present` sets, is what the code does; and the
results it quotes for notebook 06's questions are in that executed notebook's saved outputs."""

import json
import re
from pathlib import Path

import pytest

from pigviz.lessons import exercises as ex

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "workshop.md"


def _text() -> str:
    return GUIDE.read_text(encoding="utf-8")


def _rows() -> dict:
    rows = {}
    for line in _text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`") and cells[0].endswith("`"):
            rows[cells[0].strip("`")] = cells
    return rows


def _section(text: str, heading: str) -> str:
    """The lines under ``heading`` up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next(
        (i for i in range(start, len(lines)) if re.match(rf"#{{1,{level}}} ", lines[i])),
        len(lines),
    )
    return "\n".join(lines[start:end])


def _outputs(notebook: Path) -> str:
    """Every saved output of an executed notebook, as one text."""
    parts = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            if "text" in out:
                parts.append("".join(out["text"]))
            for value in out.get("data", {}).values():
                if isinstance(value, (list, str)):
                    parts.append("".join(value))
    return "\n".join(parts)


@pytest.mark.parametrize("exercise", ex.exercises(), ids=lambda e: e.name)
def test_the_guide_lists_every_mistake_each_check_recognises(exercise):
    row = _rows().get(exercise.name)
    assert row is not None, f"docs/workshop.md's exercise table has no row for {exercise.name}"
    listed = row[-1]
    missing = [w.label for w in exercise.wrong if w.label.replace("||", "‖") not in listed]
    assert not missing, f"{exercise.name}: the guide's row does not name {missing}"


def test_each_use_reference_line_assigns_the_exercises_own_function():
    lines = re.findall(r'(\w+) = ex\.use_reference\("([\w.]+)"\)', _text())
    assert len(lines) >= 12, "the guide should list the use_reference line of every exercise an agenda skips"
    wrong = [(name, f) for f, name in lines if ex.get(name).function_name != f]
    assert not wrong, f"use_reference lines assigned to another name than the exercise's function: {wrong}"


def test_a_failed_check_ends_as_the_guide_says():
    def balance_point(weights, values): ...

    ex.enable_solutions(False)  # a learner's blank, even under the test command's PIGVIZ_SOLUTIONS=1
    try:
        with pytest.raises(ex.CheckFailed) as failed:
            ex.check("01.balance_point", balance_point)
    finally:
        ex.enable_solutions(None)
    shown = failed.value._render_traceback_()
    assert "reproduce:" in shown[-2] and shown[-1].startswith("stuck?")
    assert "balance_point = ex.use_reference('01.balance_point')" in shown[-1]
    assert str(failed.value).splitlines()[-1].lstrip().startswith("reproduce:")
    text = " ".join(_text().split())
    assert 'Second to last, "reproduce:"' in text and 'Last, "stuck?"' in text
    assert 'whose last line is "stuck?' in text


def test_make_present_sets_the_solutions_switch_as_the_guide_says():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\npresent:", 1)[1].split("\n\n", 1)[0]
    assert "PIGVIZ_SOLUTIONS=1" in recipe and "voila" in recipe
    assert "The `present` target sets `PIGVIZ_SOLUTIONS=1`" in " ".join(_text().split())


def test_the_numbers_quoted_for_notebook_06_are_in_its_saved_outputs():
    answers = _section(_text(), "### 06 · Sampled attention")
    quoted = set(re.findall(r"(?<![\w.])\d+\.\d+(?!\.?\d)", answers))
    assert quoted, "the guide quotes no result for notebook 06's questions"
    # Lesson 06 (06a, 06b) and the findings that hold its study (1 to 3): their saved outputs, and their
    # markdown, whose every number `pigviz verify --prose` holds to a claim.
    paths = sorted((ROOT / "notebooks").glob("06*_*.ipynb")) + sorted(
        (ROOT / "notebooks" / "findings").glob("f[123]_*.ipynb")
    )
    prose = "\n".join(
        "".join(c["source"])
        for path in paths
        for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
        if c["cell_type"] == "markdown"
    )
    outputs = "\n".join(_outputs(path) for path in paths) + "\n" + prose
    missing = sorted(n for n in quoted if not re.search(rf"(?<![\d.]){re.escape(n)}(?!\d)", outputs))
    assert not missing, f"docs/workshop.md quotes {missing} for notebook 06, absent from its outputs and its markdown"
