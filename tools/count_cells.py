"""What a learner meets in each notebook: does a cell compute the idea in view, how dense is the
prose with numbers, and how long does the notebook take to read?

    python tools/count_cells.py              # every lesson and finding in notebooks/src, as tables
    python tools/count_cells.py 06 07        # only those (a key, or a path to a source)
    python tools/count_cells.py --cells 05b  # and each content cell's bin, with the calls that set it
    python tools/count_cells.py --json       # the same figures, for machines
    python tools/count_cells.py --check      # exit 1 naming each lesson off a target in TARGETS
    python tools/count_cells.py --finding X  # count the sources X as findings (no in-view target)

It reads the jupytext sources (``notebooks/src/NN_*.py``; a ``.ipynb`` works too, its outputs are
not read). Sources under ``notebooks/src/findings/`` are *findings*: lab books, free to call any
helper; they are reported in their own table and held to no in-view target.

**Content cells.** Every code cell but these:

* set-up: the Colab cell, imports, ``pigviz.setup_notebook()``, constants, and cells that only bind
  names to what a loader of ``WHITELIST["loaders"]`` returns and show nothing;
* the exercise machinery: a stub (a ``def`` whose body is a docstring and ``...``, ``pass`` or
  ``raise NotImplementedError``), its check (``ex.check``), a solution or answer fold
  (``lessons.folded``, ``ex.solution``), the claims table (``claims_table``, ``print_claims``);
* a widget (a constructor from ``pigviz.widgets``) and a prediction (only ``my_x = ...`` lines);
* a hidden cell (``jupyter={"source_hidden": true}``) that only writes prose (``Markdown(...)``,
  ``print``, ``lessons.folded``): a paragraph, counted as prose below. A hidden cell that shows a
  table or a figure is a content cell, and a helper one (its code is out of view).

**Bins.** Each content cell's pigviz calls are resolved through the notebook's imports
(``from pigviz.study import findings`` makes ``findings.wins`` ``pigviz.study.findings.wins``) and
looked up in ``WHITELIST``; a call that is not there is a *helper* call, whatever its name.
Names bound from a helper call (or in a hidden cell) carry the taint to later cells.

* **C** computes in view: no helper call and no tainted name; its code is arithmetic, numpy /
  torch / pandas, the learner's functions, whitelisted primitives, or a whitelisted display or
  plot of what was computed in view. A plot whose arguments are all constants draws data its own
  function computed, so it is a helper call.
* **M** mixed: a helper call or tainted name, and visible arithmetic (numpy calls, operators
  outside f-strings, calls of functions the notebook defines). Not in view.
* **H** helper: a helper call or a tainted name, and nothing computed beside it.

"in view" is C / (C + M + H). A whitelisted primitive counts as taught from the notebook named
beside it (``simhash_codes`` is not yet taught in 02).

**Prose.** The words a learner reads: every markdown cell, plus the sentences cells write:
``Markdown(...)`` (any cell, hidden or not) and ``print(...)`` of 8 or more literal words. The
text of a written sentence is read from the source, not the output: an f-string's ``{...}``
becomes one word, and one *quantity* when it has a numeric format (``:.2f``, ``:,``, ``:.0%``)
or computes (arithmetic, ``len``, ``round``...). So the cell-written figures are approximate.
Folds (``lessons.folded``) are read only when opened and are not counted.

**Quantities per 100 words**: numbers, with or without a unit ("0.58%", "4,000", "18x", "16-bit",
"1e-5"), in that prose, outside code spans, fenced code, math, markdown tables, headings, the
exercise marker line and the stated time. Not counted: references ("notebook 04", "§3",
"section 2", "question 1", "layer 19", "head 3", "token 0", "seed 5", "step 2"...), years
(1900-2099), (K, L) pairs ("(10, 150)", "K = 10, L = 150", "K10 L150") and numbered-list markers.

**Reading model**, over the core (everything before "Questions", "Going further" or "Appendix"):
prose words / 110 a minute, plus half a minute per table or figure, two per widget, plus the
stated minutes of the checked exercises (the ``~N min`` of each marker line; an open exercise with
no check is reported apart). ``model_prose`` is the older model (prose and exercises only). A
table is a displayed ``lessons.table`` / ``*_table`` / ``DataFrame``, a figure a displayed
``pigviz.plots`` call / ``*_figure`` / plotly figure, a widget a displayed ``pigviz.widgets``
constructor; one per displayed object. **stated**: the "Time in a workshop: about N minutes".

The word caps of earlier rounds (words per sentence, the longest markdown cell after the opening,
the opening, the longest run of prose with nothing to look at) are reported as figures, not held
to a target.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "notebooks" / "src"
FINDINGS = SOURCES / "findings"

# ---------------------------------------------------------------------------------------------
# The pigviz calls a lesson may make. Every other pigviz call is a helper call (it returns rows, a
# table, a summary, text, or data computed out of view), and makes its cell H or M. A name ending
# in ".*" allows every function of that module. The value beside a primitive is the notebook from
# which the course has taught it (the learner wrote it, or its formula was derived in view).
# Findings may call anything.
WHITELIST = {
    # Loaders of arrays and raw records: what the cells then compute on.
    "loaders": {
        "pigviz.model.shipped.load_shipped_capture",
        "pigviz.model.shipped.build_shipped_capture",
        "pigviz.model.tokens.load_tokens",
        "pigviz.model.texts.first_tokens",
        "pigviz.model.loading.load_model",
        "pigviz.keys.geometry.shipped_capture",  # the shipped capture (queries, keys, values)
        "pigviz.keys.geometry.head_view",  # one head's arrays out of a capture
        "pigviz.keys.geometry.head_pairs",  # the (layer, head) pairs a capture holds
        "pigviz.study.findings.load_shipped_results",  # the study's raw per-row series (JSON)
        "pigviz.study.findings.series_array",  # one raw series of it, as an array
        "pigviz.study.findings.head_grid",  # per-head errors (layers, heads), as an array
        "pigviz.study.estimators.shipped_row",  # (q, keys, values) of one captured row
        "pigviz.study.estimators.shipped_queries",  # every captured query of one head
        "pigviz.memory.model_shapes.get_model_shape",  # a model's layer / head / width numbers
        "pigviz.memory.model_shapes.known_models",
        "pigviz.memory.model_shapes.ModelShape",
        "pigviz.toy.stick_balance.make_scenario",  # notebook 01's toy weights and values
        "pigviz.toy.stick_balance.custom_scenario",
        "pigviz.memory.allocators.request_mix",  # 05b's (prompt, output) lengths of 4,000 requests
        "pigviz.study.experiments.decode_step_pieces",  # one decode step's q, keys, values, planes
        "pigviz.study.experiments.shipped_layer",  # one captured layer's q, k, v
        "pigviz.lessons.nb07a_inside_the_model.load_results",  # shipped JSON records, as they are
        "pigviz.lessons.f4_decoding.load_study",
        "pigviz.lessons.f3_bill_and_speed.load_kernels",
        "pigviz.lessons.nb08_your_estimator.load_speed",
        "pigviz.decode.report.load_gpu_speed",
        # The loop that runs the model with the attention it is handed (the learner's own estimator
        # in 07b): token ids, per-step budgets and seconds as they are; the cell compares them in view.
        "pigviz.decode.generate",
        # The protocol's evaluation: runs an estimator on the shipped rows and returns one record per
        # row (its error, keys and bytes read) as measured; 08 builds its tables from them in view.
        "pigviz.study.estimators.evaluate_estimator",
    },
    # The primitives the course has taught, with the notebook that teaches each.
    "primitives": {
        "pigviz.lessons.exercises.mine.*": "01",  # the learner's own functions (ex.mine.fn)
        "pigviz.lessons.mine.*": "01",
        "pigviz.lessons.exercises.use_reference": "01",  # the reference standing in for a skipped exercise
        "pigviz.toy.stick_balance.topk": "01",  # 01.topk_estimate
        "pigviz.lsh.simhash.cos_to_degrees": "01",  # degrees(arccos(c))
        "pigviz.attention.softmax_attention": "01",  # a prerequisite; 02.attention_weights, 03.softmax
        "pigviz.keys.geometry.unit_rows": "02",  # x / |x|
        "pigviz.keys.geometry.cos_to_mean_direction": "02",  # 02.cos_to_mean_direction
        "pigviz.keys.geometry.cone_tightness": "02",  # 02.cone_tightness
        "pigviz.keys.geometry.cos_with_query": "02",  # cos(q, k); centred: 03.cos_centred
        "pigviz.keys.geometry.non_exact_mask": "02",  # the sinks and window left out of hashing
        "pigviz.lsh.simhash.collision_probability": "04a",  # 04.bit_agreement
        "pigviz.lsh.simhash.inclusion_probability": "04a",  # 04.inclusion_probability
        "pigviz.lsh.simhash.log_inclusion_probability": "04b",  # 04.log_inclusion_probability
        "pigviz.lsh.simhash_checks.SimHash": "04a",  # the hyperplanes and codes of 04
        "pigviz.lsh.simhash_codes": "04a",
        "pigviz.lsh.reference.simhash_codes": "04a",
        "pigviz.lsh.simhash.expected_candidates": "05a",  # 05.candidates_per_query
        "pigviz.memory.budget.kv_bytes_per_token": "05a",  # 05.kv_bytes_per_token
        "pigviz.memory.budget.kv_bytes": "05a",
        "pigviz.attention.cost.dense_bytes": "05a",  # the same bytes, for one head
        "pigviz.memory.allocators.PagedKVAllocator": "05b",  # a toy pool the cells drive call by call
        "pigviz.lsh.magicpig_reference": "06a",  # the six steps of 06's magicpig_estimate
        "pigviz.lsh.reference.magicpig_reference": "06a",
        "pigviz.lsh.estimators.magicpig": "06a",  # the library's form of 06's magicpig_estimate
        "pigviz.attention.protocol.*": "06a",  # the estimator protocol: call, exact, topk, costs_like...
        "pigviz.lessons.nb07b_your_magicpig.YourMagicPIG": "07b",  # the class 07b writes in view (a test holds it)
        # 08's open exercise: the learner's estimator, or the worked example where solutions are on
        "pigviz.lessons.nb08_your_estimator.yours_or_worked_example": "08",
    },
    # Display wrappers: they render what the cell built.
    "display": {
        "pigviz.lessons.table",
        "pigviz.lessons.agree",
        "pigviz.lessons.below",
        "pigviz.memory.budget.format_bytes",
        "pigviz.attention.names.method_label",
    },
    # Plot functions: they draw data computed in view (a plot of constants only is a helper call).
    "plots": {"pigviz.plots.*"},
}
# ---------------------------------------------------------------------------------------------

# Calls that make a cell something other than content (see the docstring).
EXCLUDED_CALLS = {
    "setup": ("pigviz.setup_notebook",),
    "check": ("pigviz.lessons.exercises.check", "pigviz.lessons.check"),
    "fold": ("pigviz.lessons.folded", "pigviz.lessons.exercises.solution", "pigviz.lessons.solution"),
    "claims": ("pigviz.lessons.claims_table", "pigviz.lessons.print_claims"),
    "widget": ("pigviz.widgets.*",),
    # A diagram draws the method (a toy step, the placement, a widget's picture for the site, which
    # shows no widget): looked at, like a widget, not a computation of the section's idea.
    "diagram": ("pigviz.plots.diagrams.*", "pigviz.plots.toy_index.*"),
}
TARGETS = {"in_view": 0.60, "quantities_per_100": 1.5, "minutes": 45, "time_rel": 0.15}
WORDS_PER_MINUTE = 110
MINUTES_PER_TABLE_OR_FIGURE = 0.5
MINUTES_PER_WIDGET = 2.0

TIME = re.compile(r"\*\*Time in a workshop:\*\*\s*about\s*(\d+)\s*minutes")
CORE_END = re.compile(r"^#+\s*(Questions|Going further|Appendix)", re.M | re.I)
MARKERS = re.compile(r"^Difficulty .*?~\s*(\d+)\s*min.*$", re.M)
NUMERIC_MODULES = {"np", "numpy", "torch", "pd", "pandas", "math", "F", "scipy", "stats", "random"}
ARRAY_METHODS = {
    "sum", "mean", "max", "min", "std", "var", "argmax", "argmin", "argsort", "cumsum", "prod",
    "dot", "reshape", "astype", "norm", "round", "clip", "any", "all", "item", "numpy", "float",
    "exp", "log", "sort", "topk", "softmax", "median", "quantile", "nonzero", "unique", "tolist",
}  # fmt: skip
_CODE = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$|<[^>\n]*>|\]\([^)]*\)", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*_(\[`$])|\n\s*\n|\n(?=\s*[-*+] |\s*\d+\. |#)")


# ----------------------------------------------------------------------------- prose counters


def words(text: str) -> int:
    return len(re.findall(r"[A-Za-z0-9][\w'’.,%-]*", _CODE.sub(" x ", text)))


def sentences(markdown: str) -> list[str]:
    body = "\n".join(line for line in markdown.splitlines() if not line.lstrip().startswith("#"))
    return [s for s in _SENTENCE_END.split(_CODE.sub(" x ", body)) if words(s) >= 3]


_REFERENCE = re.compile(
    r"(?:§\s*|\b(?:[Nn]otebooks?|[Ll]essons?|[Pp]arts?|[Qq]uestions?|[Aa]nswers?|[Ee]xercises?|[Ss]ections?|"
    r"[Ss]teps?|[Ff]igures?|[Tt]ables?|[Aa]ppendix|[Ll]ayers?|[Hh]eads?|[Tt]oken|[Ss]eeds?|[Rr]ows?|[Cc]ells?|"
    r"[Ff]indings?|[Hh]int|Q|arXiv:?)\s+)\d+[a-z]?(?:\.\d+)*(?:\s*(?:-|–|,|and|or|to)\s*\d+[a-z]?(?:\.\d+)*)*"
)
_KL_PAIR = re.compile(
    r"\(\s*\d+\s*,\s*\d+\s*\)|\bK\s*=?\s*\d+\s*,?\s*(?:and\s+)?L\s*=?\s*\d+|\bK\d+\s*L\d+|\bL\s*=\s*\d+|\bK\s*=\s*\d+"
)
_YEAR = re.compile(r"(?<![\d.,])(?:19|20)\d\d(?![\d,.]\d)")
_NUMBER = re.compile(
    r"(?<![\w.\-/])[−~≈+]?\$?\d(?:[\d,]*\d)?(?:\.\d+)?(?:e[−\-+]?\d+)?(?:[%x×]|\b|(?=[-\sA-Za-z]))", re.I
)


def prose_text(markdown: str) -> str:
    """The markdown a learner reads as sentences: no headings, tables, code, math, tags, marker
    lines, stated time or folds' summaries (fold bodies are kept: they are markdown)."""
    keep = []
    for line in markdown.splitlines():
        s = line.strip()
        if s.startswith("#") or s.startswith("|") or MARKERS.match(s) or s.startswith("[!["):
            continue
        keep.append(line)
    text = "\n".join(keep)
    text = re.sub(r"\*\*Time in a workshop:\*\*[^\n]*", " ", text)
    text = re.sub(r"\$K\$", "K", re.sub(r"\$L\$", "L", text))
    text = re.sub(r"<summary>.*?</summary>", " ", text)
    text = re.sub(r"https?://\S+", " ", text)
    text = _CODE.sub(" ", text)
    return re.sub(r"^(\s*)\d+\.\s", r"\1", text, flags=re.M)


def quantities(markdown: str) -> list[str]:
    """The measured quantities of ``markdown``, as they are written (see the module docstring)."""
    text = prose_text(markdown)
    for pattern in (_REFERENCE, _KL_PAIR, _YEAR):
        text = pattern.sub(" ", text)
    return [m.group(0) for m in _NUMBER.finditer(text)]


# ----------------------------------------------------------------------------- sources


def read_cells(path: Path) -> list[dict]:
    """``[{"type": "code"|"markdown", "source": str, "hidden": bool}]`` of a jupytext source or notebook."""
    import jupytext

    nb = jupytext.read(path, fmt="py:percent") if path.suffix == ".py" else jupytext.read(path)
    return [
        {
            "type": c.cell_type,
            "source": c.source,
            "hidden": bool(c.metadata.get("jupyter", {}).get("source_hidden")),
        }
        for c in nb.cells
        if c.cell_type in ("code", "markdown")
    ]


def _matches(name: str, patterns) -> bool:
    return any(name == p or (p.endswith(".*") and name.startswith(p[:-1])) for p in patterns)


def whitelisted(name: str, key: str) -> str | None:
    """The whitelist group of the pigviz function ``name`` in notebook ``key``, or None (a helper)."""
    for group in ("loaders", "display", "plots"):
        if _matches(name, WHITELIST[group]):
            return group
    for pattern, taught in WHITELIST["primitives"].items():
        if _matches(name, [pattern]) and _order(key) >= _order(taught):
            return "primitives"
    return None


def _order(key: str) -> tuple[int, str]:
    m = re.match(r"(\d+)([a-z]?)", key)
    return (int(m.group(1)), m.group(2)) if m else (99, "")


def _dotted(node) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


class Notebook:
    """The names a notebook's imports bind to pigviz, and the names it taints or defines."""

    def __init__(self, cells, key):
        self.key = key
        self.aliases: dict[str, str] = {}
        self.tainted: set[str] = set()
        self.defined: set[str] = set()  # functions a visible cell defines
        self.loaded: set[str] = set()  # names bound to what a loader returned, nothing computed
        self.kinds: dict[str, str] = {}  # name -> "table" | "figure" | "widget" of what it holds
        for cell in cells:
            tree = _parse(cell["source"]) if cell["type"] == "code" else None
            for node in ast.walk(tree) if tree else ():
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name.startswith("pigviz"):
                            self.aliases[a.asname or "pigviz"] = a.name if a.asname else "pigviz"
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pigviz"):
                    for a in node.names:
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def resolve(self, func) -> str | None:
        """``pigviz.x.y.f`` for a call of an imported pigviz name, else None."""
        parts = _dotted(func)
        if not parts or parts[0] not in self.aliases:
            return None
        name = ".".join([self.aliases[parts[0]], *parts[1:]])
        return name.replace("pigviz.lessons.exercises.exercises.", "pigviz.lessons.exercises.").replace(
            "pigviz.lessons.lessons.", "pigviz.lessons."
        )


def _parse(source: str):
    try:
        return ast.parse(source)
    except SyntaxError:
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
        try:
            return ast.parse("\n".join(lines))
        except SyntaxError:
            return None


def _calls(tree, nb: Notebook) -> list[tuple[str, ast.Call]]:
    return [(n, c) for c in ast.walk(tree) if isinstance(c, ast.Call) for n in [nb.resolve(c.func)] if n]


def _in_fstring(tree) -> set[int]:
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside.update(id(n) for n in ast.walk(node) if n is not node)
    return inside


def _computes(tree, nb: Notebook) -> list[str]:
    """The visible computation in a cell: operators outside f-strings (calls count anywhere), numeric-library calls,
    array methods, calls of functions the notebook defines, whitelisted primitives."""
    inside = _in_fstring(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in inside and not isinstance(node, ast.Call):
            continue  # an operator inside an f-string formats; a call there still computes
        if isinstance(node, ast.BinOp) and not (
            isinstance(node.left, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(node.left, "value", ""), str)
        ):
            found.append(type(node.op).__name__)
        elif isinstance(node, ast.Compare) and not any(isinstance(op, (ast.In, ast.NotIn, ast.Is)) for op in node.ops):
            sides = [node.left, *node.comparators]
            if not any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in sides):
                found.append("compare")  # a filter on a name ("method" == "magicpig") computes nothing
        elif isinstance(node, ast.Call):
            parts = _dotted(node.func)
            name = nb.resolve(node.func)
            if name and whitelisted(name, nb.key) == "primitives":
                found.append(name.rsplit(".", 1)[-1])
            elif parts and parts[0] in NUMERIC_MODULES and len(parts) > 1:
                found.append(".".join(parts))
            elif parts and len(parts) == 1 and parts[0] in nb.defined:
                found.append(parts[0])
            elif isinstance(node.func, ast.Attribute) and node.func.attr in ARRAY_METHODS and not name:
                found.append("." + node.func.attr)
    return found


def _names_loaded(tree) -> set[str]:
    """Names a cell reads from earlier cells (not its comprehension variables or parameters)."""
    local = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            local |= _targets(node.target)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)):
            local |= {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loaded - local


def _targets(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _is_stub(fn: ast.FunctionDef) -> bool:
    body = list(fn.body)
    first = body[0].value if body and isinstance(body[0], ast.Expr) else None
    if len(body) > 1 and isinstance(first, ast.Constant) and isinstance(first.value, str):
        body = body[1:]  # the docstring
    if len(body) != 1:
        return False
    s = body[0]
    return (
        isinstance(s, ast.Pass)
        or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and s.value.value is Ellipsis)
        or (isinstance(s, ast.Raise) and "NotImplementedError" in ast.unparse(s))
    )


def _shown(tree, nb: Notebook) -> list[ast.AST]:
    """What a cell displays: its last expression, ``display(...)`` arguments, ``x.show()``."""
    out = []
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        out.append(tree.body[-1].value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts = _dotted(node.func) or []
            if parts == ["display"]:
                out.extend(node.args)
            elif parts and parts[-1] == "show" and len(parts) == 2:
                out.append(ast.Name(id=parts[0], ctx=ast.Load()))
    return out


def _kind(expr, nb: Notebook) -> str | None:
    """ "table", "figure", "widget", "prose" or None for an expression a cell displays."""
    if isinstance(expr, ast.Name):
        return nb.kinds.get(expr.id)
    if not isinstance(expr, ast.Call):
        return None
    parts = _dotted(expr.func) or []
    name = nb.resolve(expr.func) or ".".join(parts)
    last = name.rsplit(".", 1)[-1]
    if last == "Markdown":
        return "prose"
    if _matches(name, EXCLUDED_CALLS["fold"]) or last == "folded":
        return "fold"
    if _matches(name, ("pigviz.widgets.*",)) or re.search(r"(Widget|Explorer|Reader|Heatmap)$", last):
        return "widget"
    if _matches(name, ("pigviz.plots.*",)) or last.endswith("figure") or last in ("Figure", "reading_view"):
        return "figure"
    if parts[:1] in (["px"], ["go"]):
        return "figure"
    if last in ("table", "DataFrame", "claims_table") or last.endswith("_table"):
        return "table"
    return None


def _text(node) -> tuple[str, int]:
    """The literal text of a string expression and how many of its fields print a number."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, 0
    if isinstance(node, ast.JoinedStr):
        text, numbers = "", 0
        for part in node.values:
            if isinstance(part, ast.Constant):
                text += str(part.value)
            elif isinstance(part, ast.FormattedValue):
                spec = ast.unparse(part.format_spec) if part.format_spec else ""
                computes = isinstance(part.value, (ast.BinOp, ast.UnaryOp)) or (
                    isinstance(part.value, ast.Call)
                    and (_dotted(part.value.func) or [""])[-1] in {"len", "round", "int", "float", "sum", "min", "max"}
                )
                number = bool(re.search(r"[dfeg%,]['\"]?\)?$", spec.strip("'\"")) or computes)
                numbers += number
                text += " x "
        return text, numbers
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        (a, na), (b, nb_) = _text(node.left), _text(node.right)
        return a + b, na + nb_
    if isinstance(node, ast.IfExp):
        return _text(node.body)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _text(node.func.value)
    return "", 0


def written_prose(tree, nb: Notebook) -> tuple[str, int]:
    """Sentences a cell writes: ``Markdown(...)`` and ``print`` of 8+ literal words (not folds)."""
    text, numbers = [], 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        last = (_dotted(node.func) or [""])[-1]
        if last == "Markdown":
            t, n = _text(node.args[0])
        elif last == "print":
            parts = [_text(a) for a in node.args]
            t, n = " ".join(p[0] for p in parts), sum(p[1] for p in parts)
            if words(re.sub(r"\bx\b", "", t)) < 8:
                continue
        else:
            continue
        text.append(t)
        numbers += n
    return "\n\n".join(text), numbers


# ----------------------------------------------------------------------------- a notebook


def classify(cell: dict, nb: Notebook) -> tuple[str, str]:
    """``(bin, why)`` of a code cell: bin is "C", "M", "H" or what excludes it ("setup", "stub",
    "check", "fold", "claims", "widget", "diagram", "prediction", "paragraph", "empty")."""
    source = cell["source"]
    tree = _parse(source)
    if tree is None or not source.strip():
        return "empty", ""
    if "google.colab" in source:
        return "setup", "Colab"
    calls = _calls(tree, nb)
    names = [n for n, _ in calls]
    for what in ("check", "claims", "widget", "diagram", "fold", "setup"):
        if any(_matches(n, EXCLUDED_CALLS[what]) for n in names):
            if what == "fold" and not cell["hidden"] and _computes_beyond_fold(tree, nb):
                break
            return what, ""
    stubs = [s for s in tree.body if isinstance(s, ast.FunctionDef) and _is_stub(s)]
    if stubs:
        return "stub", stubs[0].name
    body = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    if not body:
        return "setup", "imports"
    if all(isinstance(s, ast.Assign) and all(_targets(t) <= {*_my(t)} for t in s.targets) for s in body):
        return "prediction", ""
    shown = [_kind(e, nb) for e in _shown(tree, nb)]
    if cell["hidden"] and all(k in ("prose", "fold", None) for k in shown):
        return "paragraph", ""
    helpers = sorted({n for n in names if not whitelisted(n, nb.key)})
    if _only_loads(tree, body, nb) and not helpers and not _computes(tree, nb):
        return "setup", "constants and loaders"
    plots_of_constants = [
        n for n, c in calls if whitelisted(n, nb.key) == "plots" and not any(_names_loaded(a) for a in _args(c))
    ]
    helpers += [f"{n} (of constants)" for n in plots_of_constants]
    tainted = sorted(_names_loaded(tree) & nb.tainted)
    computed = _computes(tree, nb)
    why = ", ".join([*(h.replace("pigviz.", "") for h in helpers), *(f"{t} (tainted)" for t in tainted)])
    if cell["hidden"]:
        return "H", "hidden: " + (why or "code out of view")
    if helpers or tainted:
        return ("M" if computed else "H"), why
    shows = [n for n in names if whitelisted(n, nb.key) in ("display", "plots")]
    if not computed and not shows:
        return "H", "nothing computed in view"
    inputs = _names_loaded(tree) - set(nb.aliases) - nb.defined
    if not computed and inputs and inputs <= nb.loaded:
        return "H", "shows loaded data, computes nothing: " + ", ".join(sorted(inputs))
    return "C", ", ".join(dict.fromkeys(computed)) or "a display of data computed in view"


def _my(target) -> set[str]:
    return {n for n in _targets(target) if n.startswith("my_")} if _targets(target) else {"_"}


def _args(call: ast.Call):
    return [*call.args, *(k.value for k in call.keywords)]


def _is_constant(node) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False


def _only_loads(tree, body, nb: Notebook) -> bool:
    """Only constants, loaders, imports, ``del``, ``if`` and ``print``: nothing computed or shown."""
    if any(k for k in (_kind(e, nb) for e in _shown(tree, nb)) if k) or (nb.tainted & _names_loaded(tree)):
        return False
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Call):
            name = nb.resolve(node.func)
            if name and not _matches(name, WHITELIST["loaders"]):
                return False
            if not name and (_dotted(node.func) or [""])[-1] not in ("print", "len", "range", "list"):
                return False
    return True


def _computes_beyond_fold(tree, nb) -> bool:
    """A visible cell that computes and then folds an answer is still a content cell."""
    return any(
        not any(
            isinstance(c, ast.Call) and _matches(nb.resolve(c.func) or "", EXCLUDED_CALLS["fold"]) for c in ast.walk(s)
        )
        for s in tree.body
        if not isinstance(s, (ast.Import, ast.ImportFrom))
    ) and bool(_computes(tree, nb))


def _update_names(cell: dict, nb: Notebook, cell_bin: str) -> None:
    """Taint the names a cell binds from a helper call (or in a hidden cell); record the functions
    a visible cell defines and what the displayed names hold."""
    tree = _parse(cell["source"])
    if tree is None:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            helper = any(n and not whitelisted(n, nb.key) for n, _ in _calls(node, nb))
            if cell["hidden"] or helper or (_names_loaded(node) & nb.tainted):
                nb.tainted.add(node.name)
            elif cell_bin != "stub":
                nb.defined.add(node.name)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
            value = getattr(node, "value", None) or getattr(node, "iter", None) or node
            targets = (
                _targets(node.target if hasattr(node, "target") else node)
                if not isinstance(node, ast.Assign)
                else set().union(*map(_targets, node.targets))
            )
            if cell_bin == "check":
                nb.tainted -= targets  # fn = ex.check("NN.fn", fn): the learner's own function
                nb.defined |= targets
                continue
            calls = [n for n, _ in _calls(value, nb)]
            helper = any(not whitelisted(n, nb.key) for n in calls)
            if cell["hidden"] or helper or (_names_loaded(value) & nb.tainted):
                nb.tainted |= targets
            else:
                nb.tainted -= targets
            reads = _names_loaded(value) - set(nb.aliases)
            loads = any(_matches(n, WHITELIST["loaders"]) for n in calls) or (reads and reads <= nb.loaded)
            if loads and not helper and not _computes(value, nb):
                nb.loaded |= targets
            else:
                nb.loaded -= targets


def count(path: Path, finding: bool | None = None) -> dict:
    """The figures of one notebook source (see the module docstring)."""
    path = Path(path).resolve()
    key = path.stem.split("_", 1)[0]
    finding = (FINDINGS in path.parents) if finding is None else finding
    cells = read_cells(path)
    nb = Notebook(cells, key)
    out = {
        "key": key,
        "path": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        "finding": finding,
        "C": 0,
        "M": 0,
        "H": 0,
        "excluded": {},
        "cells": [],
        "prose_words": 0,
        "quantities": 0,
        "core_words": 0,
        "tables": 0,
        "figures": 0,
        "widgets": 0,
        "exercise_minutes": 0,
        "open_exercise_minutes": 0,
        "stated": None,
        "opening": 0,
        "longest_md": 0,
        "longest_run": 0,
    }
    sentence_list, core, run, pending = [], True, 0, None
    for i, cell in enumerate(cells):
        source = cell["source"]
        if cell["type"] == "markdown":
            if CORE_END.search(source):
                core = False
            n = words(source)
            m = TIME.search(source)
            if m and out["stated"] is None:
                out["stated"] = int(m.group(1))
            if i == 0:
                out["opening"] = n
            else:
                out["longest_md"] = max(out["longest_md"], n)
            out["prose_words"] += words(prose_text(source))
            out["quantities"] += len(quantities(source))
            out["core_words"] += n if core else 0
            sentence_list += sentences(source)
            run += n
            out["longest_run"] = max(out["longest_run"], run)
            markers = MARKERS.findall(source)
            if markers and core:
                pending = sum(map(int, markers))
            continue
        tree = _parse(source)
        cell_bin, why = classify(cell, nb)
        if cell_bin == "check" and pending is not None:
            out["exercise_minutes"] += pending
            pending = None
        elif cell_bin not in ("stub", "check") and pending is not None and cell_bin != "empty":
            if cell_bin != "fold":
                out["open_exercise_minutes"] += pending
                pending = None
        if tree is not None:
            text, numbers = written_prose(tree, nb)
            if text:
                n = words(text)
                out["prose_words"] += words(prose_text(text))
                out["quantities"] += len(quantities(text)) + numbers
                out["core_words"] += n if core else 0
                sentence_list += sentences(text)
                run += n
                out["longest_run"] = max(out["longest_run"], run)
            for node in ast.walk(tree):  # what this cell's names hold, before it shows them
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    for t in set().union(*map(_targets, node.targets)):
                        nb.kinds[t] = _kind(node.value, nb)
            shown = [_kind(e, nb) for e in _shown(tree, nb)]
            if core:
                for kind in ("table", "figure", "widget"):
                    out[kind + "s"] += shown.count(kind)
            if not cell["hidden"] or any(k in ("table", "figure", "widget") for k in shown):
                run = 0  # code in view, a table or a figure breaks the prose
        if cell_bin in ("C", "M", "H"):
            out[cell_bin] += 1
            out["cells"].append({"cell": i, "bin": cell_bin, "why": why, "first": source.strip().splitlines()[0][:70]})
        else:
            out["excluded"][cell_bin] = out["excluded"].get(cell_bin, 0) + 1
        if tree is not None:
            _update_names(cell, nb, cell_bin)
    content = out["C"] + out["M"] + out["H"]
    out["content"] = content
    out["in_view"] = out["C"] / content if content else 0.0
    out["quantities_per_100"] = 100 * out["quantities"] / max(out["prose_words"], 1)
    out["words_per_sentence"] = sum(map(words, sentence_list)) / max(len(sentence_list), 1)
    out["model_prose"] = out["core_words"] / WORDS_PER_MINUTE + out["exercise_minutes"]
    out["model"] = (
        out["model_prose"]
        + MINUTES_PER_TABLE_OR_FIGURE * (out["tables"] + out["figures"])
        + MINUTES_PER_WIDGET * out["widgets"]
    )
    return out


def off_target(c: dict) -> list[str]:
    """What misses a target, in words (findings are held to none but a stated time, if they state one)."""
    t, problems = TARGETS, []
    if not c["finding"]:
        if c["in_view"] < t["in_view"]:
            problems.append(f"{c['C']} of {c['content']} content cells compute in view (at least {t['in_view']:.0%})")
        if c["quantities_per_100"] > t["quantities_per_100"]:
            problems.append(
                f"{c['quantities_per_100']:.1f} quantities per 100 words (at most {t['quantities_per_100']})"
            )
        if c["model"] > t["minutes"] * (1 + t["time_rel"]):
            problems.append(f"the reading model gives {c['model']:.0f} minutes (about {t['minutes']} at most)")
        if c["stated"] is None:
            problems.append("no stated time ('**Time in a workshop:** about N minutes')")
    if c["stated"] is not None and abs(c["stated"] - c["model"]) > t["time_rel"] * c["model"]:
        problems.append(f"states {c['stated']} minutes; the reading model gives {c['model']:.0f}")
    return problems


# ----------------------------------------------------------------------------- command line


def sources(selected=(), findings=()) -> list[tuple[Path, bool]]:
    lessons = sorted(SOURCES.glob("[0-9][0-9]*_*.py"))
    found = sorted(FINDINGS.glob("*.py")) if FINDINGS.is_dir() else []
    paths = [(p, False) for p in lessons] + [(p, True) for p in found]
    if selected:
        chosen = []
        for s in selected:
            if Path(s).suffix in (".py", ".ipynb") and Path(s).exists():
                chosen.append((Path(s).resolve(), None))
            else:
                chosen += [(p, f) for p, f in paths if p.stem.split("_", 1)[0] == s or p.stem == s]
        paths = chosen
    return [(p, True if str(p) in findings or p.stem in findings else f) for p, f in paths] + [
        (Path(f).resolve(), True)
        for f in findings
        if Path(f).exists() and all(Path(f).resolve() != p for p, _ in paths)
    ]


def _row(c: dict) -> str:
    stated = c["stated"] if c["stated"] is not None else "-"
    return (
        f"| {c['key']} | {c['C']} / {c['M']} / {c['H']} | {c['in_view']:.0%} | {c['quantities_per_100']:.1f} "
        f"| {c['prose_words']:,} | {c['tables']} / {c['figures']} / {c['widgets']} | {c['exercise_minutes']}"
        f"{' + ' + str(c['open_exercise_minutes']) + ' open' if c['open_exercise_minutes'] else ''} "
        f"| {c['model_prose']:.0f} | {c['model']:.0f} | {stated} | {c['longest_md']} | {c['opening']} "
        f"| {c['longest_run']} | {c['words_per_sentence']:.1f} |"
    )


HEADER = (
    "| nb | content C / M / H | in view | quantities / 100 words | prose words | tables / figures / widgets "
    "| exercise min | model: prose + exercises | model: + tables, figures, widgets | stated | longest md cell "
    "| opening | longest prose run | words / sentence |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main(argv) -> int:
    flags = {a for a in argv if a.startswith("--")}
    args = [a for a in argv if not a.startswith("--")]
    findings = args if "--finding" in flags else []
    counts = [count(p, f) for p, f in sources([] if "--finding" in flags else args, findings)]
    if "--json" in flags:
        for c in counts:
            c.pop("cells") if "--cells" not in flags else None
        print(json.dumps(counts, indent=1))
    else:
        for title, group in (
            ("Lessons", [c for c in counts if not c["finding"]]),
            ("Findings", [c for c in counts if c["finding"]]),
        ):
            if not group:
                continue
            print(f"\n{title}" + (" (no in-view target)" if title == "Findings" else f" (targets: {TARGETS})") + "\n")
            print(HEADER)
            for c in group:
                print(_row(c))
        if "--cells" in flags:
            for c in counts:
                print(f"\n{c['key']}: " + ", ".join(f"{k} {v}" for k, v in sorted(c["excluded"].items())))
                for cell in c["cells"]:
                    print(f"  {cell['cell']:>3} {cell['bin']}  {cell['first']:<70}  {cell['why'][:120]}")
    failing = [(c["key"], off_target(c)) for c in counts]
    if "--check" in flags and any(p for _, p in failing):
        for key, problems in failing:
            if problems:
                print(f"{key}: " + "; ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
