"""The instructor guide agrees with the exercises it describes: every exercise has a row in its
table, and the row names every mistake the check recognises (the Wrong versions' labels)."""

from pathlib import Path

import pytest

from pigviz.lessons import exercises as ex

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "workshop.md"


def _rows() -> dict:
    rows = {}
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`") and cells[0].endswith("`"):
            rows[cells[0].strip("`")] = cells
    return rows


@pytest.mark.parametrize("exercise", ex.exercises(), ids=lambda e: e.name)
def test_the_guide_lists_every_mistake_each_check_recognises(exercise):
    row = _rows().get(exercise.name)
    assert row is not None, f"docs/workshop.md's exercise table has no row for {exercise.name}"
    listed = row[-1]
    missing = [w.label for w in exercise.wrong if w.label.replace("||", "‖") not in listed]
    assert not missing, f"{exercise.name}: the guide's row does not name {missing}"
