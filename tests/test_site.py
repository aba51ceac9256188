"""The documentation site: copies are all-or-nothing, each notebook is adapted for its page,
and (slow) the whole site builds offline with Sphinx, warnings as errors, from the executed
notebooks without running them."""

import json
import re
import shutil
import threading
from pathlib import Path

import pytest

from pigviz import course, site

ROOT = Path(__file__).resolve().parents[1]

_BUILT: dict[str, Path] = {}
_LOCK = threading.Lock()


def build_once(tmp_path_factory) -> Path:
    """The real site, built once per test session (tests/browser/test_site.py reuses it)."""
    with _LOCK:
        if "index" not in _BUILT:
            base = tmp_path_factory.mktemp("docs-site")
            _BUILT["index"] = site.build_site(base / "html", work_dir=base / "work")
        return _BUILT["index"]


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    return build_once(tmp_path_factory)


# --- install_tree: MathJax's copy is complete or absent ----------------------------------------


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


# --- a notebook adapted for its page ------------------------------------------------------------


def _notebook(*cells) -> dict:
    return {"cells": list(cells), "metadata": {"widgets": {"state": {}}}, "nbformat": 4, "nbformat_minor": 5}


def _code(source="1 + 1", outputs=(), **metadata) -> dict:
    return {"cell_type": "code", "metadata": metadata, "source": source, "outputs": list(outputs)}


def _display(data: dict) -> dict:
    return {"output_type": "display_data", "data": data, "metadata": {}}


def test_an_adapted_notebook_draws_plotly_locally_notes_widgets_and_hides_collapsed_code():
    badge = course.colab_badge("01_stick_balance.ipynb")
    figure = {"data": [{"type": "bar", "y": [1, 2]}], "layout": {"title": {"text": "</script> in a title"}}}
    nb = _notebook(
        {"cell_type": "markdown", "metadata": {}, "source": f"# 01 · A lesson\n\n{badge}\n\nProse."},
        _code("plumbing()", jupyter={"source_hidden": True}),
        _code(outputs=[_display({site.PLOTLY_MIME: figure, "text/html": '<script src="https://cdn.plot.ly/x.js">'})]),
        _code(outputs=[_display({site.WIDGET_MIME: {"model_id": "abc"}, "text/plain": "Widget"})]),
    )
    out = site.adapt_notebook(nb, "01_stick_balance")
    md, hidden, plot, widget = out["cells"]
    assert "colab-badge.svg" not in md["source"] and "pigviz-launch" in md["source"]
    assert course.colab_url("01_stick_balance.ipynb") in md["source"]
    assert course.binder_url("01_stick_balance.ipynb").replace("&", "&amp;") in md["source"]
    assert 'href="notebooks/01_stick_balance.ipynb" download' in md["source"]
    assert hidden["metadata"]["tags"] == [site.HIDE_INPUT]
    (html,) = plot["outputs"][0]["data"].values()
    assert "Plotly.newPlot('01_stick_balance-plot-1'" in html and "cdn.plot.ly" not in html
    assert "</script> in" not in html  # the figure's JSON cannot close the script that draws it
    assert (
        list(widget["outputs"][0]["data"]) == ["text/html"] and "make lab" in widget["outputs"][0]["data"]["text/html"]
    )
    assert "widgets" not in out["metadata"]
    assert nb["cells"][1]["metadata"] == {"jupyter": {"source_hidden": True}}  # the original is untouched


def test_a_notebook_without_the_badge_gets_its_launch_links_under_its_title():
    nb = _notebook({"cell_type": "markdown", "metadata": {}, "source": "# 02 · B"}, _code())
    cells = site.adapt_notebook(nb, "02_b")["cells"]
    assert [c["cell_type"] for c in cells] == ["markdown", "markdown", "code"]
    assert course.colab_url("02_b.ipynb") in cells[1]["source"]


def test_the_front_page_is_the_readme_front_matter_without_remote_images():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lessons = [p.stem for p in sorted((ROOT / "notebooks").glob(site.NOTEBOOK_GLOB))]
    front = site.readme_front(readme, lessons)
    assert front.startswith("# pigviz") and "\n## " not in front
    assert not re.search(r"!\[[^\]]*\]\(https?://", front), "an offline page cannot show a remote image"
    assert "](docs/" not in front
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", front):
        assert (ROOT / "docs" / image).is_file(), image
    for stem in lessons:
        if f"`{stem}.ipynb`" in readme.split("\n## ")[0]:
            assert f"]({stem}.ipynb)" in front


def test_staging_writes_only_into_the_work_folder(tmp_path):
    docs_before = {p: p.stat().st_mtime_ns for p in (ROOT / "docs").rglob("*") if p.is_file()}
    src = tmp_path / "src"
    lessons = site.stage_sources(src)
    assert lessons == [p.stem for p in sorted((ROOT / "notebooks").glob(site.NOTEBOOK_GLOB))]
    assert (src / "conf.py").is_file() and (src / "index.md").is_file() and (src / "workshop.md").is_file()
    findings = sorted(p.stem for p in (ROOT / "notebooks" / "findings").glob(course.FINDING_GLOB))
    assert {p.name for p in (src / "_extra" / "notebooks").iterdir() if p.is_file()} == {f"{s}.ipynb" for s in lessons}
    assert findings and {p.stem for p in (src / "_extra" / "notebooks" / "findings").iterdir()} == set(findings)
    assert {p.stem for p in (src / "findings").glob("*.ipynb")} == set(findings)
    assert (src / course.NOTATION).read_bytes() == (course.learner_dir() / course.NOTATION).read_bytes()
    assert (src / "_static" / "mathjax" / "MathJax.js").is_file() and (src / "_static" / "plotly.min.js").is_file()
    assert {p: p.stat().st_mtime_ns for p in (ROOT / "docs").rglob("*") if p.is_file()} == docs_before
    stamp = (src / f"{lessons[0]}.ipynb").stat().st_mtime_ns
    (src / "gone.md").write_text("# a page removed since")
    site.stage_sources(src)
    assert (src / f"{lessons[0]}.ipynb").stat().st_mtime_ns == stamp, "an unchanged source is not rewritten"
    assert not (src / "gone.md").exists()


def test_staging_without_executed_notebooks_says_where_they_are(tmp_path):
    with pytest.raises(FileNotFoundError, match="clone of the repository"):
        site.stage_sources(tmp_path / "src", notebook_dir=tmp_path)


# --- the whole site -------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_site_builds_offline_with_every_page_and_no_network_asset(built_site):
    out = built_site.parent
    lessons = [p.stem for p in sorted((ROOT / "notebooks").glob(site.NOTEBOOK_GLOB))]
    index = built_site.read_text(encoding="utf-8")
    for stem in lessons:
        page = (out / f"{stem}.html").read_text(encoding="utf-8")
        assert f'href="{stem}.html"' in index, f"the front page's navigation lists {stem}"
        assert "pigviz-launch" in page and course.colab_url(f"{stem}.ipynb") in page
        learner = out / "notebooks" / f"{stem}.ipynb"
        assert learner.read_bytes() == (course.learner_dir() / f"{stem}.ipynb").read_bytes()
        nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))
        plots = sum(site.PLOTLY_MIME in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", []))
        assert page.count('class="pigviz-static-plot"') == plots, stem
        hidden = sum(bool(c["metadata"].get("jupyter", {}).get("source_hidden")) for c in nb["cells"])
        assert page.count("tag_hide-input") >= hidden, stem
    findings = sorted(p.stem for p in (ROOT / "notebooks" / "findings").glob(course.FINDING_GLOB))
    assert findings and ">Lessons<" in index and ">Findings<" in index, "the book's two parts"
    for stem in findings:  # the lab book: its own part of the navigation, its copy in the findings folder
        page = (out / "findings" / f"{stem}.html").read_text(encoding="utf-8")
        assert f'href="findings/{stem}.html"' in index and "Run this finding" in page
        assert course.colab_url(f"findings/{stem}.ipynb") in page
        assert f'href="../notebooks/findings/{stem}.ipynb"' in page
        learner = out / "notebooks" / "findings" / f"{stem}.ipynb"
        assert learner.read_bytes() == (course.learner_dir() / "findings" / f"{stem}.ipynb").read_bytes()
    assert (out / "workshop.html").is_file() and 'href="workshop.html"' in index
    for venue in ("Binder", "Colab", "local"):
        assert venue in index
    api = (out / "api" / "estimators.html").read_text(encoding="utf-8")
    assert 'id="pigviz.study.estimators.evaluate_estimator"' in api
    for page_name, anchor in [
        ("protocol", "pigviz.attention.protocol.call"),
        ("decode", "pigviz.decode.session.use_attention"),
        ("decode", "pigviz.decode.generation.generate"),
        ("lsh", "pigviz.lsh.index.build_index"),
        ("lsh", "pigviz.lsh.magicpig.attend"),
        ("lsh", "pigviz.lsh.fused.attend"),
        ("lsh", "module-pigviz.lsh.reference"),
        ("memory", "module-pigviz.memory.budget"),
        ("toy", "module-pigviz.toy.stick_balance"),
    ]:
        assert f'id="{anchor}"' in (out / "api" / f"{page_name}.html").read_text(encoding="utf-8"), anchor
    assert (out / "_static" / "mathjax" / "MathJax.js").is_file() and (out / "_static" / "plotly.min.js").is_file()
    assert (out / "searchindex.js").is_file()
    remote = re.compile(r"""<(?:script|link|img)\b[^>]*\b(?:src|href)=["']?(?:https?:)?//""", re.IGNORECASE)
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not remote.search(text), f"{page.relative_to(out)} loads {remote.search(text).group(0)}"


def test_a_page_whose_source_was_removed_leaves_the_site(tmp_path):
    src, html = tmp_path / "src", tmp_path / "html"
    for name in ("index.md", "07a_inside.ipynb", "api/lsh.rst"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text("x")
    pages = ["index.html", "07a_inside.html", "07_old.html", "api/lsh.html", "search.html", "_static/x.html"]
    copies = ["_sources/07_old.ipynb", "notebooks/07_old.ipynb", "notebooks/07a_inside.ipynb"]
    for name in pages + copies:
        (html / name).parent.mkdir(parents=True, exist_ok=True)
        (html / name).write_text("x")
    site._drop_removed_pages(html, src)
    left = sorted(p.relative_to(html).as_posix() for p in html.rglob("*") if p.is_file())
    assert left == sorted(set(pages + copies) - {"07_old.html", "_sources/07_old.ipynb", "notebooks/07_old.ipynb"})
