"""A static HTML site of the executed notebooks, readable offline and without a kernel.

Plotly figures stay interactive: every ``application/vnd.plotly.v1+json`` output becomes a
``<div>`` drawn by ``Plotly.newPlot``, with one copy of plotly.js written next to the pages
(found through a relative ``<script src>``, so the site works from ``file://`` too). Widgets
need a kernel, so each widget output is replaced by a note that says how to run it live.
"""

from __future__ import annotations

import copy
import html
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from pigviz import course
from pigviz._util.io import atomic_path

__all__ = ["build_site", "install_tree", "NOTEBOOK_DIR", "NOTEBOOK_GLOB", "DOCS_DIR", "GUIDES"]

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
# The executed notebooks, in teaching order when sorted: a two-digit lesson number, a part letter
# for a lesson in several notebooks (05a, 05b), then "_name".
NOTEBOOK_GLOB = "[0-9][0-9]*_*.ipynb"
DOCS_DIR = Path(__file__).resolve().parents[1] / "docs"
# Markdown guides published beside the notebooks: (file in docs/, title on the index page).
GUIDES = (("workshop.md", "Instructor guide: agendas, room set-up, answers, common stumbles"),)
PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# Written last into a copied folder: its presence means the copy finished.
COMPLETE_MARKER = ".pigviz-copy-complete"

WIDGET_NOTE = (
    '<div class="pigviz-widget-note" style="border:1px dashed #888;padding:0.6em 1em;'
    'margin:0.4em 0;color:#444;background:#f7f7f7;font-family:sans-serif">'
    "<b>Interactive widget.</b> It needs a running Python kernel: open this notebook with "
    "<code>make lab</code> (or on Binder) and run its cells to use the controls.</div>"
)


def _plotly_html(fig_json: dict, div_id: str) -> str:
    payload = json.dumps(
        {
            "data": fig_json.get("data", []),
            "layout": fig_json.get("layout", {}),
            "config": {"responsive": True, "displaylogo": False},
        }
    )
    return (
        f'<div id="{div_id}" class="pigviz-static-plot" style="width:100%;min-height:420px"></div>\n'
        f"<script>(function(){{var f={payload};"
        f"Plotly.newPlot('{div_id}',f.data,f.layout,f.config);}})();</script>"
    )


def _convert_outputs(nb, stem: str) -> tuple[int, int]:
    """Rewrite rich outputs in place; return (plots, widgets) converted."""
    plots = widgets = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data")
            if not data:
                continue
            if PLOTLY_MIME in data:
                plots += 1
                out["data"] = {"text/html": _plotly_html(data[PLOTLY_MIME], f"{stem}-plot-{plots}")}
            elif WIDGET_MIME in data:
                widgets += 1
                out["data"] = {"text/html": WIDGET_NOTE}
    return plots, widgets


LEARNER_FOLDER = "notebooks"  # in the site: the learner copies, for download
HIDDEN_TAG = "pigviz-source-hidden"
# Cells whose source the notebook collapses by default (``"jupyter": {"source_hidden": true}``, as
# JupyterLab honours it) show on the site as their outputs with a "show code" button: prose,
# figures and tables first, code on demand.
HIDDEN_SOURCE_HEAD = """<style>
.celltag_pigviz-source-hidden .jp-Cell-inputWrapper { display: none; }
.celltag_pigviz-source-hidden.pigviz-shown .jp-Cell-inputWrapper { display: block; }
.pigviz-show-code { font-size: 0.8em; color: #555; background: #f4f4f4; border: 1px solid #ccc;
  border-radius: 3px; padding: 0.1em 0.6em; margin: 0.2em 0 0.2em 0; cursor: pointer; }
</style>
<script>
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".celltag_pigviz-source-hidden").forEach(function (cell) {
    var button = document.createElement("button");
    button.className = "pigviz-show-code";
    button.textContent = "show code";
    button.addEventListener("click", function () {
      var shown = cell.classList.toggle("pigviz-shown");
      button.textContent = shown ? "hide code" : "show code";
    });
    cell.insertBefore(button, cell.firstChild);
  });
});
</script>"""


def _tag_hidden_sources(nb) -> int:
    """Tag the cells whose source is collapsed by default; return how many."""
    hidden = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"):
            tags = cell.metadata.setdefault("tags", [])
            if HIDDEN_TAG not in tags:
                tags.append(HIDDEN_TAG)
            hidden += 1
    return hidden


def _launch_bar(stem: str) -> str:
    """Links at the top of a notebook page: run the learner copy on Colab or Binder, or download it."""
    name = f"{stem}.ipynb"
    link = 'style="margin-right:1.2em"'
    return (
        '<div class="pigviz-launch" style="font-family:sans-serif;font-size:0.9em;padding:0.5em 1em;'
        'background:#f7f7f7;border-bottom:1px solid #ddd">'
        f'<a href="index.html" {link}>&larr; all notebooks</a>'
        f'<a href="{html.escape(course.colab_url(name))}" {link}>Open in Colab (GPU runtime)</a>'
        f'<a href="{html.escape(course.binder_url(name))}" {link}>Launch Binder (CPU)</a>'
        f'<a href="{LEARNER_FOLDER}/{html.escape(name)}" download {link}>Download the notebook</a>'
        '<span style="color:#666">(your copy: blank exercises, no outputs)</span></div>'
    )


def _guide_page(title: str, body_html: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:52em;margin:2em auto;line-height:1.5}}
table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:0.2em 0.5em}}
code{{background:#f4f4f4}}</style></head>
<body><p><a href="index.html">&larr; all notebooks</a></p>
{body_html}
</body></html>
"""


def _index_page(entries: list[tuple[str, str, int, int]], guides=()) -> str:
    binder = html.escape(course.binder_url())
    guide_rows = "\n".join(f'<li><a href="{html.escape(page)}">{html.escape(title)}</a></li>' for page, title in guides)
    guide_block = f"<h2>For instructors</h2>\n<ul>\n{guide_rows}\n</ul>" if guides else ""
    rows = "\n".join(
        f'<li><a href="{html.escape(page)}">{html.escape(title)}</a>'
        f' <span style="color:#666">({plots} interactive figure{"s" if plots != 1 else ""}'
        f"{f', {widgets} widget(s) to run live' if widgets else ''})</span></li>"
        for page, title, plots, widgets in entries
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>pigviz notebooks</title>
<style>body{{font-family:sans-serif;max-width:48em;margin:2em auto;line-height:1.5}}</style></head>
<body><h1>pigviz: the notebooks, in teaching order</h1>
<p>How an LLM reads its KV cache at decode time, and how MagicPIG samples it instead.
Figures are interactive (zoom, hover); widgets need a kernel: run <code>make lab</code>.</p>
<p>Each page links to the learner's copy of its notebook (blank exercises, no outputs), to run or download.
<b>Which venue for which workshop:</b> the lessons run from shipped data on a CPU, so
<a href="{binder}">Binder</a> suits a room of laptops for notebooks 01-06 and 07's recorded results
(2 GB, one CPU; nothing to install). The optional live cells (the real model's prefill and sampled
decoding in 02, 03 and 07) want a GPU runtime: <b>Colab</b> (each page's "Open in Colab" link; its first cell
installs pigviz). Locally: <code>pip install</code> pigviz and run <code>pigviz lab</code>.</p>
<ol>
{rows}
</ol>
{guide_block}</body></html>
"""


def _title(nb, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def _copy_mathjax(out_dir: Path) -> str:
    """Ship MathJax beside the pages (from jupyter-server-mathjax) so formulas render offline;
    fall back to nbconvert's CDN address when that package is missing."""
    try:
        import jupyter_server_mathjax  # heavy: only the site builder needs it
    except ImportError:
        return HTMLExporterDefaults.MATHJAX_CDN
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    install_tree(static, out_dir / "mathjax")
    return "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"


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


class HTMLExporterDefaults:
    MATHJAX_CDN = "https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe"


def build_site(
    out_dir: str | Path = "site", notebook_dir: str | Path = NOTEBOOK_DIR, docs_dir: str | Path = DOCS_DIR
) -> Path:
    """Export every notebook (``NN_*.ipynb``, ``NNa_*.ipynb``) under ``notebook_dir`` and the
    ``GUIDES`` found in ``docs_dir`` to ``out_dir``; return the index path."""
    import nbformat  # heavy: only the site builder needs it
    import plotly  # heavy: plotly is needed only by notebooks
    from nbconvert import HTMLExporter  # heavy: only the site builder needs it
    from nbconvert.filters import markdown2html  # heavy: only the site builder needs it

    notebook_dir, out_dir = Path(notebook_dir), Path(out_dir)
    notebooks = sorted(notebook_dir.glob(NOTEBOOK_GLOB))
    if not notebooks:
        raise FileNotFoundError(
            f"no executed notebooks (NN_name.ipynb, NNa_name.ipynb) found in {notebook_dir}: the site is built "
            f"from a clone of the repository, whose notebooks/ holds them (a pip install carries only the "
            f"learner copies)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    with atomic_path(out_dir / "plotly.min.js") as tmp:
        shutil.copyfile(plotly_js, tmp)

    exporter = HTMLExporter(template_name="lab", mathjax_url=_copy_mathjax(out_dir))
    for learner in course.learner_notebooks():  # what "Download the notebook" hands out
        with atomic_path(out_dir / LEARNER_FOLDER / learner.name) as tmp:
            shutil.copyfile(learner, tmp)
    entries = []
    for path in notebooks:
        nb = nbformat.read(str(path), as_version=4)
        nb = copy.deepcopy(nb)
        plots, widgets = _convert_outputs(nb, path.stem)
        hidden = _tag_hidden_sources(nb)
        body, _ = exporter.from_notebook_node(nb)
        # require.js is only for classic-notebook widgets, and with it loaded plotly.js would
        # register as an AMD module instead of the global `Plotly` the figures call.
        body = re.sub(r'<script src="[^"]*require(\.min)?\.js"></script>', "", body)
        # plotly.js must load before the first figure's script runs.
        body = body.replace("<head>", '<head>\n<script src="plotly.min.js"></script>', 1)
        if hidden:
            body = body.replace("</head>", HIDDEN_SOURCE_HEAD + "\n</head>", 1)
        bar = _launch_bar(path.stem)
        body = re.sub(r"(<body[^>]*>)", lambda m, bar=bar: m.group(1) + "\n" + bar, body, count=1)
        page = f"{path.stem}.html"
        with atomic_path(out_dir / page) as tmp:
            tmp.write_text(body, encoding="utf-8")
        entries.append((page, _title(nb, path.stem), plots, widgets))
    guides = []
    for name, title in GUIDES:
        source = Path(docs_dir) / name
        if not source.is_file():
            continue
        page = source.with_suffix(".html").name
        with atomic_path(out_dir / page) as tmp:
            tmp.write_text(_guide_page(title, markdown2html(source.read_text(encoding="utf-8"))), encoding="utf-8")
        guides.append((page, title))
    index = out_dir / "index.html"
    with atomic_path(index) as tmp:
        tmp.write_text(_index_page(entries, guides), encoding="utf-8")
    return index
