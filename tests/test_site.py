"""Static site: copies are all-or-nothing, and a build leaves no temporary files behind."""

import shutil
from pathlib import Path

import pytest

from pigviz import site


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "src"
    (src / "jax" / "output").mkdir(parents=True)
    (src / "MathJax.js").write_text("main")
    (src / "jax" / "output" / "font.js").write_text("font")
    return src


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_fresh_copy_is_complete_and_leaves_no_temporaries(source, tmp_path):
    target = site.install_tree(source, tmp_path / "out" / "mathjax")
    assert _files(target) == _files(source) | {site.COMPLETE_MARKER}
    assert [p.name for p in target.parent.iterdir()] == ["mathjax"]


def test_interrupted_copy_is_repaired(source, tmp_path):
    # What the old copytree left after a Ctrl-C: the main script, but not the fonts.
    target = tmp_path / "out" / "mathjax"
    target.mkdir(parents=True)
    (target / "MathJax.js").write_text("main")
    site.install_tree(source, target)
    assert (target / "jax" / "output" / "font.js").read_text() == "font"
    assert [p.name for p in target.parent.iterdir()] == ["mathjax"]


def test_complete_copy_is_not_copied_again(source, tmp_path, monkeypatch):
    target = site.install_tree(source, tmp_path / "mathjax")
    monkeypatch.setattr(shutil, "copytree", lambda *a, **k: pytest.fail("copied twice"))
    assert site.install_tree(source, target) == target


def test_failed_copy_leaves_nothing_under_the_target_name(source, tmp_path, monkeypatch):
    real_copytree = shutil.copytree

    def copy_then_fail(src, dst, *args, **kwargs):
        monkeypatch.setattr(shutil, "copytree", real_copytree)  # copytree recurses through the module
        real_copytree(src, dst, *args, **kwargs)
        raise OSError("disk full")

    monkeypatch.setattr(shutil, "copytree", copy_then_fail)
    with pytest.raises(OSError, match="disk full"):
        site.install_tree(source, tmp_path / "out" / "mathjax")
    assert list((tmp_path / "out").iterdir()) == []


def test_build_site_writes_pages_and_plotly_without_temporaries(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbconvert")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 99 · A tiny lesson"), nbformat.v4.new_code_cell("1 + 1")]
    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    nbformat.write(nb, str(notebooks / "99_tiny.ipynb"))
    out = tmp_path / "site"
    index = site.build_site(out, notebooks)
    assert "A tiny lesson" in index.read_text()
    import plotly

    shipped_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert (out / "plotly.min.js").stat().st_size == shipped_js.stat().st_size
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_guides_are_published_and_linked_from_the_index(tmp_path):
    import nbformat

    notebooks, docs = tmp_path / "nb", tmp_path / "docs"
    notebooks.mkdir()
    docs.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 01 · A lesson")])
    nbformat.write(nb, str(notebooks / "01_lesson.ipynb"))
    (docs / "workshop.md").write_text("# Running the workshop\n\n| agenda | minutes |\n|---|---|\n| 01 | 30 |\n")
    index = site.build_site(tmp_path / "out", notebook_dir=notebooks, docs_dir=docs)
    page = (tmp_path / "out" / "workshop.html").read_text()
    assert "<h1" in page and "Running the workshop" in page and "<table" in page
    assert 'href="workshop.html"' in index.read_text()
    assert not list((tmp_path / "out").glob("*.tmp*"))


def test_a_lesson_in_two_notebooks_is_listed_in_teaching_order(tmp_path):
    """05a and 05b (one lesson, two notebooks) sit between 04 and 06 on the index page."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbconvert")
    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    for stem in ("06_after", "05b_serving", "04_before", "05a_bill"):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {stem.split('_')[0]} · {stem}")])
        nbformat.write(nb, str(notebooks / f"{stem}.ipynb"))
    (notebooks / "notes_draft.ipynb").write_text("{}")  # not a lesson: no number in front
    index = site.build_site(tmp_path / "out", notebooks, docs_dir=tmp_path / "no_docs").read_text()
    pages = ["04_before.html", "05a_bill.html", "05b_serving.html", "06_after.html"]
    assert [index.index(f'href="{p}"') for p in pages] == sorted(index.index(f'href="{p}"') for p in pages)
    assert "notes_draft" not in index


def test_pages_link_to_colab_binder_and_the_learner_copy_and_hide_collapsed_code(tmp_path):
    import nbformat

    from pigviz import course

    notebooks = tmp_path / "nb"
    notebooks.mkdir()
    hidden = nbformat.v4.new_code_cell("print('plumbing')", metadata={"jupyter": {"source_hidden": True}})
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("# 01 · A lesson"), hidden, nbformat.v4.new_code_cell("1 + 1")]
    )
    nbformat.write(nb, str(notebooks / "01_stick_balance.ipynb"))
    out = tmp_path / "out"
    index = site.build_site(out, notebook_dir=notebooks, docs_dir=tmp_path / "no_docs").read_text()
    page = (out / "01_stick_balance.html").read_text()
    assert course.colab_url("01_stick_balance.ipynb") in page
    assert (
        course.binder_url("01_stick_balance.ipynb").replace("&", "&amp;") in page
        or course.binder_url("01_stick_balance.ipynb") in page
    )
    assert 'href="notebooks/01_stick_balance.ipynb" download' in page
    learner = out / "notebooks" / "01_stick_balance.ipynb"
    assert learner.read_bytes() == (course.learner_dir() / "01_stick_balance.ipynb").read_bytes()
    assert "celltag_pigviz-source-hidden" in page and "show code" in page
    assert page.count("celltag_pigviz-source-hidden") >= 2  # the CSS rule and the one hidden cell
    assert "Binder" in index and "Colab" in index
