"""``tools/count_cells.py`` on tiny sources: the bins of content cells, what is not content, and
what counts as a measured quantity."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import count_cells  # noqa: E402

SOURCE = '''# %% [markdown]
# # 07 · A tiny lesson
#
# **Time in a workshop:** about 5 minutes.

# %%
import numpy as np

from pigviz import lessons
from pigviz.decode import report
from pigviz.lessons import exercises as ex
from pigviz.plots import study as plots
from pigviz.study import findings

# %%
results = findings.load_shipped_results()

# %%
lessons.table(report.quality_rows(results))

# %%
err = np.asarray(results["series"]["magicpig"]["error"]).mean(axis=1)
print(err.max() - err.min())

# %%
plots.kl_sweep_figure(err)

# %%
rows = report.quality_rows(results)

# %%
plots.kl_sweep_figure(rows)

# %%
best = findings.wins(results, "a", "b")
print(best[0] / (best[0] + best[1]))

# %%
def softmax(s):
    """The row-wise softmax."""
    ...

# %%
softmax = ex.check("03.softmax", softmax)

# %%
lessons.folded("Solution: softmax", ex.solution("03.softmax"))

# %%
my_guess = 0.5

# %% jupyter={"source_hidden": true}
Markdown(f"**Bottom line.** The error is {err.mean():.3f} in notebook 04.")

# %%
w = softmax(err)
lessons.table([{"weight": v} for v in w])
'''


@pytest.fixture
def counted(tmp_path):
    path = tmp_path / "07_tiny.py"
    path.write_text(SOURCE, encoding="utf-8")
    return count_cells.count(path)


def test_cells_are_binned_by_the_whitelist(counted):
    bins = [c["bin"] for c in counted["cells"]]
    # helper table, numpy arithmetic, a plot of that, rows from a helper, a plot of those, a helper's
    # summary with arithmetic on it, the learner's function on in-view data
    assert bins == ["H", "C", "C", "H", "H", "M", "C"], counted["cells"]
    assert (counted["C"], counted["M"], counted["H"]) == (3, 1, 3)
    assert counted["in_view"] == pytest.approx(3 / 7)
    assert "decode.report.quality_rows" in counted["cells"][0]["why"]


def test_set_up_exercises_folds_predictions_and_paragraphs_are_not_content(counted):
    assert counted["excluded"] == {
        "setup": 2,  # the imports; the loader alone
        "stub": 1,
        "check": 1,
        "fold": 1,
        "prediction": 1,
        "paragraph": 1,
    }


def test_a_primitive_counts_only_from_the_notebook_that_teaches_it():
    assert count_cells.whitelisted("pigviz.lsh.simhash.inclusion_probability", "04a") == "primitives"
    assert count_cells.whitelisted("pigviz.lsh.simhash.inclusion_probability", "03") is None
    assert count_cells.whitelisted("pigviz.lessons.table", "01") == "display"
    assert count_cells.whitelisted("pigviz.plots.study.kl_sweep_figure", "06") == "plots"
    assert count_cells.whitelisted("pigviz.memory.serving.paged_rows", "05b") is None


def test_a_finding_is_held_to_no_in_view_target(tmp_path, counted):
    assert not counted["finding"]
    assert any("compute in view" in p for p in count_cells.off_target(counted))
    path = tmp_path / "f9_lab.py"
    path.write_text(SOURCE.replace("**Time in a workshop:** about 5 minutes.", ""), encoding="utf-8")
    finding = count_cells.count(path, finding=True)
    assert finding["finding"] and not count_cells.off_target(finding)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The error falls from 0.58% to 5.75% over 4,000 keys.", ["0.58%", "5.75%", "4,000"]),
        ("A 16-bit cache is 18x larger, 1e-5 apart.", ["16", "18x", "1e-5"]),
        ("As notebook 04 showed in §3 and section 2, layer 19 head 6 of token 0 differs.", []),
        ("Kwon et al. (SOSP 2023) and Tang et al., 2024.", []),
        ("At (K, L) = (10, 150), or K = 10, L = 150, or K10 L150, u is high.", []),
        ("The code `x[:64] * 2` and the math $2^{10}$ hold no quantity.", []),
        ("```python\nx = 128\n```\nNone here.", []),
        ("## 5. A heading with 12 in it\n\n| a | 3 |\n|---|---|\n\n1. first item", []),
        ("Difficulty 🔴⚪ · Importance 🔵⚪ · ~6 min", []),
        ("TP4 on H100 with Llama-3.1-8B reads 3 tables.", ["3"]),
    ],
)
def test_quantities_are_numbers_outside_references_years_pairs_code_and_math(text, expected):
    assert count_cells.quantities(text) == expected


def test_a_sentence_a_cell_writes_is_prose_with_its_formatted_numbers(counted):
    # the hidden paragraph: "The error is {...:.3f} in notebook 04." -> one quantity, the reference not
    prose = count_cells.words(count_cells.prose_text("# 07 · A tiny lesson\n\n"))  # headings are not prose
    assert prose == 0
    assert counted["quantities"] == 1
