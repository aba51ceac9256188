"""Sphinx configuration of the pigviz site. Built by ``make site`` (``pigviz.site.build_site``),
which stages this folder with the executed notebooks, the README's front matter, the workshop
guide and the learner copies into ``build/site/src``: run Sphinx on that folder, not on this one."""

import json
import re
from pathlib import Path

from docutils import nodes
from sphinx.ext import napoleon

from pigviz import __version__, course

HERE = Path(__file__).resolve().parent
LESSONS = json.loads((HERE / "_lessons.json").read_text()) if (HERE / "_lessons.json").is_file() else []

project = "pigviz"
author = "the pigviz authors"
copyright = "the pigviz authors, MIT licence"
release = version = __version__

extensions = [
    "myst_nb",  # Markdown and notebooks (myst-nb reads .md through myst-parser too)
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.mathjax",
]
exclude_patterns = ["_build", "_extra", "_readme_front.md", "jupyter_execute", "**/.ipynb_checkpoints"]
html_extra_path = ["_extra"]  # the learner copies, at notebooks/NAME.ipynb

# --- notebooks: shown as committed, never executed ------------------------------------------
nb_execution_mode = "off"
nb_render_markdown_format = "myst"  # a Markdown output's $math$ renders like the prose's
myst_enable_extensions = ["dollarmath", "amsmath", "substitution", "html_image", "colon_fence"]
myst_heading_anchors = 3
nb_ipywidgets_js = {}  # the pages hold no widget state (pigviz.site turns each widget into a note)
myst_substitutions = {
    "binder": f"[Binder]({course.binder_url()})",
    "colab_first": f"[Colab]({course.colab_url(LESSONS[0] + '.ipynb')})" if LESSONS else "Colab",
}

# --- formulas without a network: MathJax 2 from jupyter-server-mathjax, copied into _static ---
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"  # the files it ships
mathjax2_config = {
    "tex2jax": {
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processEscapes": True,
        "ignoreClass": "tex2jax_ignore|mathjax_ignore",  # the whole page: the contents name formulas too
    },
    # jupyter-server-mathjax ships the STIX-Web fonts only (and no CommonHTML output)
    "HTML-CSS": {"availableFonts": [], "webFont": "STIX-Web", "imageFont": None},
    "showMathMenu": False,
    "messageStyle": "none",
}
myst_update_mathjax = False  # myst would write a MathJax 3 configuration

# --- the API reference ------------------------------------------------------------------------
# The docstrings are reStructuredText with NumPy-style sections (Parameters, Returns, Raises),
# read by napoleon on functions and classes only (_napoleon_sections: on a property or constant
# it would read "Tokens in the largest bucket: ..." as a type). Each page says ":members:" (a
# default "members" would override a page's own list); the constants a docstring names are autodata.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
# A section's types are written for the reader ("torch.Tensor, (H, d)", "int in [1, 62]"): shown as
# emphasised text, never turned into cross-references (nitpicky would fail on each word).
napoleon_use_param = False
napoleon_use_rtype = False
napoleon_preprocess_types = False
# autodoc_typehints lists each annotation under the description: kept for a docstring without
# NumPy sections, dropped beside them (_one_list).
autodoc_default_options = {"show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_docstring_signature = True
autodoc_preserve_defaults = True
nitpicky = True
# Types from other projects: no intersphinx (the build is offline), so their names stay plain text.
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|np|numpy|pd|pandas|transformers|plotly|numba|collections\.abc|typing)(\..*)?"),
    (r"py:class", r"(Tensor|ndarray|DataFrame|Figure|PreTrainedModel|Callable|Iterable|Iterator|Sequence)"),
    (r"py:class", r"(optional|callable|array-like|array_like|dtype|device|tensor|function)"),
    # private helpers a docstring names for the reader of the source
    (r"py:.*", r"(.*\.)?_[A-Za-z].*"),
    # internal modules the reference does not document, named in prose
    (
        r"py:.*",
        r"pigviz\.(study\.run|model\.capture|memory\.model_shapes|decode\.(offload|cache)|lsh\.(kernels|affordable))(\..*)?",
    ),
    (r"py:attr", r"offload_report"),  # DecodeSession's attribute, set by prepare()
]
# Modules whose docstrings are not yet valid reStructuredText, shown verbatim as a literal block
# until they are fixed (none now: keep the mechanism for a module that needs it for a while).
VERBATIM_DOCSTRINGS: tuple[str, ...] = ()
_INLINE_LITERAL = re.compile(r"(``.*?``)")
# |x| in a docstring is a norm or a set's size, never a reStructuredText substitution
_BARS = re.compile(r"(?<![\\\w`|])\|(?=[^\s|])([^|\n]*?[^\s|\\])\|(?![\w|])")


def _napoleon_sections(app, what, name, obj, options, lines):
    """napoleon's NumPy sections on modules, classes and functions. An attribute's, property's or
    constant's docstring is prose: napoleon would take its first line's "text: more" for "type:
    description" (and nitpicky then fails on the "type"), so it is left as written."""
    if what in ("attribute", "data", "property") or name.startswith(VERBATIM_DOCSTRINGS):
        return
    napoleon._process_docstring(app, what, name, obj, options, lines)


def _one_list(app, domain, objtype, content):
    """Where a docstring has NumPy sections, they are the one list of its parameters and returns:
    drop the fields autodoc_typehints adds from the annotations beside them (a second, bare
    "Parameters" list and a "Return type"). A docstring without sections keeps them."""
    for field_list in [n for n in content if isinstance(n, nodes.field_list)]:
        fields = [f for f in field_list if isinstance(f, nodes.field)]
        names = [f[0].astext().strip() for f in fields]
        if not {"Parameters", "returns", "Yields"} & set(names):  # the fields napoleon writes
            continue
        for field, name in zip(fields, names):
            if name.split(" ", 1)[0] in ("param", "type", "rtype"):
                field_list.remove(field)


def _docstring_as_text(app, what, name, obj, options, lines):
    """Keep the docstrings' plain-text conventions from reading as markup: ``|x|`` (a norm) is
    escaped, and a module of :data:`VERBATIM_DOCSTRINGS` is shown as written."""
    inherited = getattr(type(obj), "__doc__", None) if what in ("data", "attribute") else None
    if inherited and lines and lines[0].strip() == inherited.strip().splitlines()[0].strip():
        lines[:] = []  # a constant has no docstring of its own: not its type's (dict, tuple, ...)
        return
    if name.startswith(VERBATIM_DOCSTRINGS) and lines:
        lines[:] = ["::", ""] + ["    " + line for line in lines] + [""]
        return
    for i, line in enumerate(lines):
        if "|" in line and not line.lstrip().startswith(("| ", "+-", "+=")):
            parts = _INLINE_LITERAL.split(line)
            lines[i] = "".join(p if p.startswith("``") else _BARS.sub(r"\\|\1\\|", p) for p in parts)


# --- the book ---------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "pigviz: KV caches and MagicPIG, hands-on"
html_static_path = ["_static"]
html_css_files = ["pigviz.css"]
html_js_files = ["plotly.min.js"]  # bundled: the figures are drawn without a CDN
html_last_updated_fmt = None
html_copy_source = True
html_show_sourcelink = False
html_theme_options = {
    "repository_url": f"https://github.com/{course.REPOSITORY}",
    "repository_branch": course.RELEASE,
    "use_repository_button": True,
    "use_download_button": True,
    "use_fullscreen_button": True,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": True,
}
html_context = {"default_mode": "auto"}


def _launch_buttons(app, pagename, templatename, context, doctree):
    """The header's rocket menu on a lesson: the same links as the page's launch bar (the
    theme's own launch buttons would open the executed notebook, not the learner copy)."""
    if pagename not in LESSONS or "header_buttons" not in context:
        return
    name = f"{pagename}.ipynb"
    buttons = [
        {
            "type": "link",
            "text": "Colab",
            "tooltip": "Open the learner copy in Colab (GPU runtime)",
            "icon": "_static/images/logo_colab.png",
            "url": course.colab_url(name),
        },
        {
            "type": "link",
            "text": "Binder",
            "tooltip": "Launch the learner copy on Binder (CPU)",
            "icon": "_static/images/logo_binder.svg",
            "url": course.binder_url(name),
        },
        {
            "type": "link",
            "text": "Learner copy",
            "tooltip": "Download the notebook: blank exercises, no outputs",
            "icon": "fas fa-file-arrow-down",
            "url": f"notebooks/{name}",
        },
    ]
    context["header_buttons"].insert(
        0,
        {
            "type": "group",
            "tooltip": "Run this lesson",
            "icon": "fas fa-rocket",
            "buttons": buttons,
            "label": "launch-buttons",
        },
    )


def setup(app):
    # napoleon (set up by "extensions", before this) reads every docstring: swap its reader for
    # _napoleon_sections, which leaves attributes, properties and constants alone.
    ours = [x for x in app.events.listeners["autodoc-process-docstring"] if x.handler is napoleon._process_docstring]
    if len(ours) != 1:
        raise RuntimeError(f"expected napoleon's one docstring reader, found {len(ours)}: has Sphinx changed?")
    app.disconnect(ours[0].id)
    app.connect("autodoc-process-docstring", _napoleon_sections)
    app.connect("autodoc-process-docstring", _docstring_as_text)
    app.connect("object-description-transform", _one_list, priority=600)  # after autodoc_typehints' (500)
    app.connect("html-page-context", _launch_buttons, priority=501)  # after the theme fills header_buttons
