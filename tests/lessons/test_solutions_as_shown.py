"""Every shown solution runs exactly as a learner would paste it: into its notebook, with only the
imports that notebook has made by the exercise (a name imported further down is not there yet when
the check runs), it defines the function, and that function passes its check."""

import ast
from pathlib import Path

import jupytext
import pytest

from pigviz.lessons import exercises as ex

SOURCES = sorted((Path(__file__).resolve().parents[2] / "notebooks" / "src").glob("[0-9][0-9]*_*.py"))


def _notebook_imports(notebook: str, function_name: str) -> str:
    """Every top-level import statement of the notebook's code cells above the exercise's blank, in order."""
    (source,) = [s for s in SOURCES if s.stem.split("_", 1)[0] == notebook]
    lines = []
    for cell in jupytext.read(source, fmt="py:percent").cells:
        if cell.cell_type != "code":
            continue
        if cell.source.lstrip().startswith(f"def {function_name}("):
            return "\n".join(lines)
        for node in ast.parse(cell.source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                lines.append(ast.get_source_segment(cell.source, node))
    raise AssertionError(f"{source.name} has no blank `def {function_name}(`")


@pytest.mark.parametrize("exercise", ex.exercises(), ids=lambda e: e.name)
def test_the_shown_solution_passes_its_check_with_only_its_notebooks_imports(exercise):
    namespace: dict = {}
    exec(_notebook_imports(exercise.notebook, exercise.function_name), namespace)  # noqa: S102 - the notebook's own imports
    exec(str(ex.solution(exercise.name)), namespace)  # noqa: S102 - the solution as the notebook shows it
    assert exercise.function_name in namespace, f"the solution of {exercise.name} does not define it"
    assert ex.check(exercise.name, namespace[exercise.function_name], quiet=True)
