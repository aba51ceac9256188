"""Each lesson states the time the reading model gives it: ``tools/count_cells.py``.

The model counts what a learner looks at: the core's words at 110 a minute, half a minute per
table or figure, two per widget, plus the stated minutes of its checked exercises
(``count_cells.count(...)["model"]``); a stated time within 15% of it. Word caps (words per
sentence, the longest cell, the opening) are figures in the tool's report, not tests."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import count_cells  # noqa: E402

LESSONS = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]*_*.py"))


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_the_lesson_states_the_time_its_reading_model_gives(path):
    c = count_cells.count(path)
    assert c["stated"] is not None, f"{path.stem}: state '**Time in a workshop:** about N minutes'"
    model, rel = c["model"], count_cells.TARGETS["time_rel"]
    assert abs(c["stated"] - model) <= rel * model, (
        f"{path.stem}: states {c['stated']} minutes; prose at {count_cells.WORDS_PER_MINUTE} words a minute, "
        f"{c['exercise_minutes']} exercise minutes and its {c['tables']} tables, {c['figures']} figures and "
        f"{c['widgets']} widgets give {model:.0f}"
    )


def test_the_model_counts_prose_a_cell_writes_and_what_the_learner_looks_at(tmp_path):
    words = " ".join(["word"] * 110) + "."
    source = tmp_path / "09_x.py"
    source.write_text(
        "# %% [markdown]\n# # T\n#\n# **Time in a workshop:** about 9 minutes.\n\n"
        "# %%\nimport numpy as np\nfrom pigviz import lessons\nfrom pigviz.lessons import exercises as ex\n"
        "from pigviz.plots import study as plots\n\n"
        f"# %% [markdown]\n# {words}\n\n"
        "# %% [markdown]\n# Difficulty 🔴⚪⚪⚪⚪ · Importance 🔵⚪⚪⚪⚪ · ~3 min\n\n"
        "# %%\ndef f(x):\n    ...\n\n"
        '# %%\nf = ex.check("09.f", f)\n\n'
        f'# %% jupyter={{"source_hidden": true}}\nMarkdown("{words}")\n\n'
        '# %%\nx = np.arange(3) * 2\nlessons.table([{"x": v} for v in x])\n\n'
        "# %%\nplots.kl_sweep_figure(x)\n\n"
        "# %% [markdown]\n# ## Questions to try\n#\n# " + words + "\n",
        encoding="utf-8",
    )
    c = count_cells.count(source)
    assert c["stated"] == 9 and c["exercise_minutes"] == 3
    assert (c["tables"], c["figures"], c["widgets"]) == (1, 1, 0)
    assert c["model_prose"] == pytest.approx(3 + 2 + 1 / 110 * 4, abs=0.1)  # the title and time line: 4 words
    assert c["model"] == pytest.approx(c["model_prose"] + 1.0)
