"""The documentation site: the executed notebooks, the workshop guide and the API reference as
one book, built by Sphinx (``myst-nb`` reads the notebooks, ``sphinx-book-theme`` lays them out).

:func:`build_site` stages a Sphinx source tree in a work folder (``build/site/`` of the clone by
default, never ``docs/``): ``docs/site/`` (``conf.py``, the front page, the API pages), the
README's front matter, ``docs/workshop.md``, the executed notebooks and the learner copies. It
then runs ``sphinx-build`` once, with warnings as errors, and copies the HTML to ``out_dir``.
Nothing is executed (``nb_execution_mode = "off"``): the pages show the committed outputs.

A notebook is adapted as it is staged, so that its page works offline and reads as the lesson:

* a plotly figure (``application/vnd.plotly.v1+json``) becomes a ``<div>`` drawn by
  ``Plotly.newPlot`` with the plotly.js copied into ``_static/`` (no CDN);
* a widget needs a kernel: its output becomes a note that says how to run it live;
* a cell whose source JupyterLab collapses (``"jupyter": {"source_hidden": true}``) gets
  myst-nb's ``hide-input`` tag: its output shows, its code sits behind a toggle;
* the "Open in Colab" badge (an image on colab.research.google.com) becomes the page's launch
  bar: Colab, Binder, and the learner copy to download (blank exercises, no outputs).

MathJax comes from ``jupyter-server-mathjax`` and plotly.js from ``plotly``, both copied into
the site, which therefore works from a folder with no network.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pigviz import course

__all__ = [
    "build_site",
    "stage_sources",
    "install_tree",
    "NOTEBOOK_DIR",
    "NOTEBOOK_GLOB",
    "DOCS_DIR",
    "SITE_SOURCE",
    "README",
    "GUIDES",
    "WORK_DIR",
]

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
# The executed notebooks, in teaching order when sorted: a two-digit lesson number, a part letter
# for a lesson in several notebooks (05a, 05b), then "_name".
NOTEBOOK_GLOB = "[0-9][0-9]*_*.ipynb"
DOCS_DIR = ROOT / "docs"
SITE_SOURCE = DOCS_DIR / "site"  # conf.py, the front page, the API pages, _static/
README = ROOT / "README.md"
WORK_DIR = ROOT / "build" / "site"  # the staged sources, Sphinx's caches and its HTML
# Markdown guides published beside the notebooks: (file in docs/, page name on the site).
GUIDES = (("workshop.md", "workshop"),)
PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
HIDE_INPUT = "hide-input"  # myst-nb's tag: the output shows, the code sits behind a toggle
LEARNER_FOLDER = "notebooks"  # in the site: the learner copies, for download
# Written last into a copied folder: its presence means the copy finished.
COMPLETE_MARKER = ".pigviz-copy-complete"
# The README up to its first second-level heading: the title, the pitch, the table of notebooks
# and what the suite finds.
README_END = re.compile(r"^## ", re.MULTILINE)

WIDGET_NOTE = (
    '<div class="pigviz-widget-note admonition note"><p class="admonition-title">Interactive widget</p>'
    "<p>It needs a running Python kernel: open this notebook with <code>make lab</code> (or on "
    "Binder, or Colab: the links at the top of the page) and run its cells to use the controls.</p></div>"
)
COLAB_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
BADGE_LINE = re.compile(r"^\[!\[[^\]]*\]\(https?://[^)]*\)\]\(https?://[^)]*\)\s*$\n?", re.MULTILINE)
# A markdown image from the network, which an offline page cannot show: kept as a link.
REMOTE_IMAGE = re.compile(r"!\[([^\]]*)\]\((https?://[^)\s]*)\)")


def launch_bar(stem: str, folder: str = "") -> str:
    """The links at the top of a notebook page: the learner copy on Colab or Binder, or downloaded.
    ``folder`` is ``"findings"`` for a finding (its copy ships in that folder)."""
    name = f"{folder}/{stem}.ipynb" if folder else f"{stem}.ipynb"
    github = f"https://github.com/{course.REPOSITORY}/blob/{course.RELEASE}/pigviz/notebooks/{name}"
    # A finding's page sits one folder down, and so must reach up for the downloads.
    up = "../" if folder else ""
    links = [
        (course.colab_url(name), "Open in Colab", "GPU runtime", ""),
        (course.binder_url(name), "Launch Binder", "CPU, nothing to install", ""),
        (f"{up}{LEARNER_FOLDER}/{name}", "Download the notebook", "", f' download="{html.escape(stem)}.ipynb"'),
        (github, "on GitHub", "", ""),
    ]
    items = "".join(
        f'<a class="pigviz-launch-{i}" href="{html.escape(url)}"{extra}>{html.escape(text)}</a>'
        + (f' <span class="pigviz-launch-note">({html.escape(note)})</span>' if note else "")
        for i, (url, text, note, extra) in enumerate(links)
    )
    return (
        f'<div class="pigviz-launch"><span class="pigviz-launch-title">Run this {"finding" if folder else "lesson"}:'
        f"</span> {items}"
        '<span class="pigviz-launch-note">the learner copy: blank exercises, no outputs</span></div>'
    )


def _plotly_html(fig_json: dict, div_id: str) -> str:
    payload = json.dumps(
        {
            "data": fig_json.get("data", []),
            "layout": fig_json.get("layout", {}),
            "config": {"responsive": True, "displaylogo": False},
        }
    ).replace("</", "<\\/")
    return (
        f'<div id="{div_id}" class="pigviz-static-plot"></div>\n'
        f"<script>(function(){{var f={payload};"
        f"Plotly.newPlot('{div_id}',f.data,f.layout,f.config);}})();</script>"
    )


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def adapt_notebook(nb: dict, stem: str, folder: str = "") -> dict:
    """Return a copy of notebook ``nb`` (JSON) adapted for its page (see the module docstring);
    ``folder`` is ``"findings"`` for a finding."""
    nb = json.loads(json.dumps(nb))
    nb.get("metadata", {}).pop("widgets", None)  # no widget state: myst-nb would load a widget manager
    plots = 0
    bar_placed = False
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = _source(cell)
            if not bar_placed and COLAB_BADGE.search(text):
                text = COLAB_BADGE.sub(lambda _m: launch_bar(stem, folder), text, count=1)
                bar_placed = True
            cell["source"] = REMOTE_IMAGE.sub(lambda m: f"[{m.group(1)}]({m.group(2)})", text)
            continue
        if cell["cell_type"] != "code":
            continue
        meta = cell.setdefault("metadata", {})
        if meta.get("jupyter", {}).get("source_hidden"):
            tags = meta.setdefault("tags", [])
            if HIDE_INPUT not in tags:
                tags.append(HIDE_INPUT)
        for out in cell.get("outputs", []):
            data = out.get("data")
            if not data:
                continue
            if PLOTLY_MIME in data:
                plots += 1
                out["data"] = {"text/html": _plotly_html(data[PLOTLY_MIME], f"{stem}-plot-{plots}")}
            elif WIDGET_MIME in data:
                out["data"] = {"text/html": WIDGET_NOTE}
    if not bar_placed:  # a notebook without the badge still gets its launch links, under its title
        cells = nb["cells"]
        at = 1 if cells and cells[0]["cell_type"] == "markdown" else 0
        cells.insert(at, {"cell_type": "markdown", "metadata": {}, "source": launch_bar(stem, folder)})
    return nb


def readme_front(text: str, lessons: list[str], findings: list[str] = ()) -> str:
    """The README's front matter (up to its first ``## `` heading) as the site's front page:
    badges dropped (the page says where to run instead), paths made the site's."""
    match = README_END.search(text)
    text = text[: match.start()] if match else text
    text = BADGE_LINE.sub("", text)
    text = REMOTE_IMAGE.sub(lambda m: f"[{m.group(1)}]({m.group(2)})", text)
    text = text.replace("](docs/img/", "](img/").replace("](docs/workshop.md)", "](workshop.md)")
    text = text.replace("](pigviz/notebooks/notation.md)", "](notation.md)")  # the site's own page
    for stem in lessons:  # the table names each notebook: link it to its page
        text = text.replace(f"`{stem}.ipynb`", f"[`{stem}.ipynb`]({stem}.ipynb)")
    for stem in findings:  # and each finding, in its folder
        text = text.replace(f"`findings/{stem}.ipynb`", f"[`findings/{stem}.ipynb`](findings/{stem}.ipynb)")
    return text


def install_tree(source: Path, target: Path) -> Path:
    """Copy folder ``source`` to ``target`` so that ``target`` is either complete or absent.

    The copy goes to a temporary sibling, gets :data:`COMPLETE_MARKER`, and is renamed into
    place. A ``target`` without the marker (left by an interrupted copy) is replaced."""
    source, target = Path(source), Path(target)
    if (target / COMPLETE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
        (tmp / COMPLETE_MARKER).write_text(str(source) + "\n", encoding="utf-8")
        if (target / COMPLETE_MARKER).is_file():  # a parallel build finished first
            return target
        if target.exists():
            stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.stale.", dir=target.parent))
            try:
                os.rename(target, stale / target.name)
            except FileNotFoundError:
                pass
            finally:
                shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / COMPLETE_MARKER).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_if_changed(path: Path, data: bytes) -> None:
    """Write ``data`` unless ``path`` holds it already: an unchanged source keeps its time stamp,
    so Sphinx does not read it again."""
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _sync_tree(source: Path, target: Path) -> set[Path]:
    written = set()
    for path in sorted(source.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            dest = target / path.relative_to(source)
            _write_if_changed(dest, path.read_bytes())
            written.add(dest)
    return written


def stage_sources(
    src: Path,
    notebook_dir: str | Path = NOTEBOOK_DIR,
    docs_dir: str | Path = DOCS_DIR,
    readme: str | Path = README,
    site_source: str | Path = SITE_SOURCE,
) -> list[str]:
    """Write the Sphinx source tree into ``src``; return the lesson pages (notebook stems) in order."""
    import plotly  # heavy: plotly is needed only by notebooks and the site

    src, notebook_dir, docs_dir = Path(src), Path(notebook_dir), Path(docs_dir)
    notebooks = sorted(notebook_dir.glob(NOTEBOOK_GLOB))
    if not notebooks:
        raise FileNotFoundError(
            f"no executed notebooks (NN_name.ipynb, NNa_name.ipynb) found in {notebook_dir}: the site is built "
            f"from a clone of the repository, whose notebooks/ holds them (a pip install carries only the "
            f"learner copies)"
        )
    keep = _sync_tree(Path(site_source), src)
    lessons = [p.stem for p in notebooks]
    findings = sorted((notebook_dir / course.FINDINGS_FOLDER).glob(course.FINDING_GLOB))
    for path in [*notebooks, *findings]:
        folder = course.FINDINGS_FOLDER if path in findings else ""
        nb = adapt_notebook(json.loads(path.read_text(encoding="utf-8")), path.stem, folder)
        dest = src / folder / path.name
        _write_if_changed(dest, (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
        keep.add(dest)
    notation = course.learner_dir() / course.NOTATION  # the page every lesson links to, beside itself
    if notation.is_file():
        _write_if_changed(src / course.NOTATION, notation.read_bytes())
        keep.add(src / course.NOTATION)
    for name, page in GUIDES:
        guide = docs_dir / name
        text = guide.read_text(encoding="utf-8") if guide.is_file() else f"# {page}\n\n(not in this checkout)\n"
        _write_if_changed(src / f"{page}.md", text.encode("utf-8"))
        keep.add(src / f"{page}.md")
    readme = Path(readme)
    front = (
        readme_front(readme.read_text(encoding="utf-8"), lessons, [p.stem for p in findings])
        if readme.is_file()
        else "# pigviz\n"
    )
    _write_if_changed(src / "_readme_front.md", front.encode("utf-8"))
    keep.add(src / "_readme_front.md")
    if (docs_dir / "img").is_dir():
        keep |= _sync_tree(docs_dir / "img", src / "img")
    for learner in course.learner_notebooks(findings=True):  # what "Download the notebook" hands out
        dest = src / "_extra" / LEARNER_FOLDER / learner.relative_to(course.learner_dir())
        _write_if_changed(dest, learner.read_bytes())
        keep.add(dest)
    _write_if_changed(src / "_lessons.json", (json.dumps(lessons) + "\n").encode("utf-8"))  # read by conf.py
    keep.add(src / "_lessons.json")
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    _write_if_changed(src / "_static" / "plotly.min.js", plotly_js.read_bytes())
    keep.add(src / "_static" / "plotly.min.js")
    import jupyter_server_mathjax  # heavy: only the site builder needs it; MathJax 2 for offline formulas

    mathjax = install_tree(Path(jupyter_server_mathjax.__file__).parent / "static", src / "_static" / "mathjax")
    # A notebook or page removed since the last build must not linger as a page.
    for path in list(src.rglob("*")):
        if path.is_file() and mathjax not in path.parents and path not in keep:
            path.unlink()
    return lessons


def build_site(
    out_dir: str | Path = "site",
    notebook_dir: str | Path = NOTEBOOK_DIR,
    docs_dir: str | Path = DOCS_DIR,
    *,
    work_dir: str | Path | None = None,
    readme: str | Path = README,
    quiet: bool = True,
) -> Path:
    """Build the site from the executed notebooks under ``notebook_dir`` (``NN_*.ipynb``,
    ``NNa_*.ipynb``), the guides in ``docs_dir`` and the README into ``out_dir``; return the
    path of its front page. Sphinx's warnings are errors: a broken docstring fails the build.

    ``work_dir`` (default :data:`WORK_DIR`) keeps the staged sources and Sphinx's caches, so a
    second build re-reads only what changed."""
    out_dir = Path(out_dir).resolve()
    work = Path(work_dir).resolve() if work_dir is not None else WORK_DIR
    src, html_dir = work / "src", work / "html"
    stage_sources(src, notebook_dir, docs_dir, readme)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-n"]
    cmd += ["-q"] if quiet else []
    cmd += ["-d", str(work / "doctrees"), str(src), str(html_dir)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(cmd, env=env, capture_output=quiet, text=True)
    if result.returncode != 0:
        detail = f"\n{result.stdout}{result.stderr}" if quiet else ""
        raise RuntimeError(f"sphinx-build failed (exit {result.returncode}): {' '.join(cmd)}{detail}")
    _drop_removed_pages(html_dir, src)
    if out_dir != html_dir:
        shutil.copytree(html_dir, out_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".buildinfo*"))
        _drop_removed_pages(out_dir, src)
    return out_dir / "index.html"


# Pages Sphinx writes that no source file names.
_GENERATED_PAGES = {"genindex", "search", "py-modindex"}


def _drop_removed_pages(html_dir: Path, src: Path) -> None:
    """Remove the pages (and their notebook and source copies) of documents no longer staged:
    Sphinx keeps the output of a removed source, so a renamed notebook would linger as a page of
    the site (07_sampled_decoding did, next to 07a and 07b)."""
    docs = {
        p.relative_to(src).with_suffix("").as_posix() for p in src.rglob("*") if p.suffix in (".md", ".ipynb", ".rst")
    }
    for page in list(html_dir.rglob("*.html")):
        doc = page.relative_to(html_dir).with_suffix("").as_posix()
        if doc.split("/")[0].startswith("_") or doc in _GENERATED_PAGES or doc in docs:
            continue
        page.unlink()
        for copy in (html_dir / "_sources").glob(f"{doc}.*"):
            copy.unlink()
        (html_dir / "notebooks" / f"{Path(doc).name}.ipynb").unlink(missing_ok=True)
