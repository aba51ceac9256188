"""Each notebook reads in the time it states, in prose a learner can take in: ``tools/count_cells.py``.

The targets (``count_cells.TARGETS``): no prose written by a per-notebook module's function, at
most about 20 words per sentence, no markdown cell but the opening over about 200 words, an opening
of at most about 250, no run of more than 250 words of prose without a code cell, a figure or a
table, and a stated time within 15% of the reading model (110 words a minute over the core, plus
the minutes of its exercises)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import count_cells  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_meets_the_reading_targets(path):
    problems = count_cells.off_target(count_cells.count(path))
    assert not problems, f"{path.stem}: " + "; ".join(problems)


def test_the_model_counts_a_wall_of_prose_and_generated_words(tmp_path):
    import json

    words = " ".join(["word"] * 130) + "."
    nb = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# T\n\n**Time in a workshop:** about 9 minutes."},
            {"cell_type": "markdown", "metadata": {}, "source": words},
            {"cell_type": "markdown", "metadata": {}, "source": words},
            {
                "cell_type": "code",
                "metadata": {},
                "source": "from pigviz.lessons import nb06_x as nb06\nMarkdown(nb06.story(r))",
                "outputs": [{"output_type": "execute_result", "data": {"text/markdown": words}, "metadata": {}}],
            },
        ],
        "metadata": {},
    }
    path = tmp_path / "06_x.ipynb"
    path.write_text(json.dumps(nb))
    c = count_cells.count(path)
    assert c["module_words"] == 130 and c["longest_run"] == c["opening"] + 390
    problems = " ".join(count_cells.off_target(c))
    assert "130 words of prose come from per-notebook module functions" in problems
    assert f"{c['opening'] + 390} words of prose" in problems and "words per sentence" in problems
