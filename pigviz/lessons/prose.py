"""Every number a notebook's prose states, checked against what its code computes.

``pigviz verify --prose`` reads every markdown cell of every notebook and, sentence by sentence,
finds the numbers written there. Each must be one of:

* a number a claim of that notebook stands for: the claim's ``value`` or one of its ``quotes``
  (the formatted texts the prose quotes, e.g. ``"0.41x"``, ``"8,174 tokens"``), re-derived by
  ``claims()`` at every run, so a sentence whose number drifts from the computation fails;
* a definition or a citation the notebook's claims module lists in ``PROSE_DEFINED`` (a dict from
  the number as written to why it is not measured: ``{"150": "tables, the paper's setting"}``);
* a number that is not a statement: a bare one-digit integer (counts such as "2 of L tables", the
  4 of "step 4"), section and notebook references (``§3``, ``notebook 06``, ``Part 2``), numbers
  inside code (backticks, fenced blocks), links and HTML tags, and the exercise marker line.

A claims module can also let its prose quote other notebooks' claims with ``PROSE_FROM =
("06",)``. Direction words ("faster", "more than") are for claims to assert; this check keeps the
numbers beside them true.
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from pigviz.lessons.verify import CLAIM_MODULES, Claim, collect_claims

__all__ = [
    "ProseProblem",
    "numbers_in",
    "sentences",
    "check_prose",
    "format_problems",
    "unformatted_placeholders",
    "notebook_paths",
]

# The learner copies ship in the package (what pigviz.course copies out).
LEARNER_NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

# A number as prose writes it: 8,174 / 0.41 / 1e-6 / 5.1% / 0.41x / 96k. Not a digit glued to a
# word or to a word and a hyphen (SmolLM2-135M, Llama-3.1-8B, bf16, Q4_1), nor inside a longer number.
_NUMBER = re.compile(
    r"(?<![\w.,^/])(?<!\w-)(?<!\w−)"
    r"(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(e[-+−]?\d+)?(%|x(?![\w])|×|k(?![\w]))?"
    r"(?![\w.,]?\d)"
)
# What is not a statement of a measured number.
_FENCED = re.compile(r"```.*?```", re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_TAG = re.compile(r"<[^>\n]*>")
_URL = re.compile(r"https?://\S+")
_REFERENCE = re.compile(
    r"(?:§|\b(?:[Nn]otebooks?|[Ll]essons?|[Ff]indings?|Parts?|Questions?|Answers?|Exercises?|[Ss]ections?|[Ss]teps?|Figures?|"
    r"Tables?|Appendix|Q|arXiv:?)\s*)\d+[a-z]?(?:\.\d+)*(?:\s*(?:-|–|,|and|or|to)\s*\d+[a-z]?(?:\.\d+)*)*"
    # a lesson's own key standing alone ("07a's merge_partial", "06a and 06b"): two digits and a part letter
    r"|\b0\d[ab]\b"
)
_HEADING_NUMBER = re.compile(r"^(#+\s*)\d+[a-z]?(?:\.\d+)*\.?", re.M)
_LIST_NUMBER = re.compile(r"^(\s*)\d+\.\s", re.M)
# The exercise marker line, and the stated workshop time (tools/count_cells.py holds each stated
# time to the reading-time model, and a test fails when one is off by more than 15%).
_MARKERS = re.compile(r"^Difficulty .*$|\*\*Time in a workshop:\*\*[^\n]*", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s+(?=[A-Z*_(\[`$])|\n\s*\n|\n(?=\s*[-*+] |\s*\d+\. |#)")


@dataclass(frozen=True)
class ProseProblem:
    notebook: str  # "07"
    cell: int  # index of the cell in the notebook
    cell_id: str
    sentence: str
    number: str

    def line(self) -> str:
        text = " ".join(self.sentence.split())
        text = text if len(text) <= 240 else text[:239] + "…"
        return f"{self.notebook} cell {self.cell} ({self.cell_id}): {self.number!r} is not computed here: {text}"


def _blank_out(pattern: re.Pattern, text: str) -> str:
    # Keeps offsets (and so sentence boundaries) where they were.
    return pattern.sub(lambda m: " " * len(m.group(0)), text)


def _statable(markdown: str) -> str:
    text = markdown
    for pattern in (_FENCED, _INLINE_CODE, _LINK_TARGET, _TAG, _URL, _MARKERS, _REFERENCE):
        text = _blank_out(pattern, text)
    text = _HEADING_NUMBER.sub(lambda m: m.group(1) + " " * (len(m.group(0)) - len(m.group(1))), text)
    return _LIST_NUMBER.sub(lambda m: m.group(1) + " " * (len(m.group(0)) - len(m.group(1))), text)


def numbers_in(text: str, *, statable: bool = True) -> list[str]:
    """The numbers a text states, as written (``"8,174"``, ``"0.41x"``, ``"5.1%"``), in order.
    With ``statable`` (the default for prose) code, links, references and one-digit integers are
    left out; without, every number (what a claim's value or quote stands for)."""
    source = _statable(text) if statable else text
    found = []
    for m in _NUMBER.finditer(source):
        token = m.group(0).replace("−", "-")
        if statable and m.group(1).isdigit() and len(m.group(1)) == 1 and not any(m.group(i) for i in (2, 3, 4)):
            continue
        found.append(token)
    return found


def sentences(markdown: str) -> list[tuple[str, str]]:
    """``(sentence as written, the same with unstatable parts blanked)`` for each sentence."""
    blanked = _statable(markdown)
    out, start = [], 0
    for m in _SENTENCE_END.finditer(markdown):
        out.append((markdown[start : m.start()], blanked[start : m.start()]))
        start = m.end()
    out.append((markdown[start:], blanked[start:]))
    return [(s, b) for s, b in out if s.strip()]


def notebook_paths(folder=None) -> dict[str, Path]:
    """``{"01": path, ..., "f1": path}``: the lessons of ``folder`` (default: the shipped learner
    copies, whose markdown is the executed notebooks' markdown), then the findings in its
    ``findings/`` folder, by key."""
    base = Path(folder) if folder is not None else LEARNER_NOTEBOOKS
    found = {}
    for path in [*sorted(base.glob("[0-9][0-9]*_*.ipynb")), *sorted((base / "findings").glob("f[0-9]*_*.ipynb"))]:
        found[path.stem.split("_", 1)[0]] = path
    return found


def _allowed(notebook: str, claims_by_nb: dict[str, list[Claim]]) -> tuple[set[str], set[str]]:
    """The numbers the notebook's claims stand for, and its listed definitions."""
    module = importlib.import_module(CLAIM_MODULES[notebook])
    defined = {str(k) for k in getattr(module, "PROSE_DEFINED", {})}
    computed: set[str] = set()
    for key in (notebook, *getattr(module, "PROSE_FROM", ())):
        for claim in claims_by_nb.get(key, []):
            if not claim.passed:
                continue  # a failing claim vouches for no sentence
            for text in (claim.value, *claim.quotes):
                computed.update(numbers_in(str(text), statable=False))
    return computed, defined


def check_prose(folder=None, notebooks=None, claims: list[Claim] | None = None) -> list[ProseProblem]:
    """Every number in every markdown cell that neither a passing claim nor ``PROSE_DEFINED``
    accounts for. ``claims`` (default: run them all now) lets a caller reuse a run."""
    paths = notebook_paths(folder)
    if notebooks is not None:
        paths = {k: v for k, v in paths.items() if k in set(notebooks)}
    if claims is None:
        claims = collect_claims()
    by_nb: dict[str, list[Claim]] = {}
    for claim in claims:
        by_nb.setdefault(claim.notebook, []).append(claim)
    problems = []
    for key, path in paths.items():
        if key not in CLAIM_MODULES:
            continue
        computed, defined = _allowed(key, by_nb)
        nb = json.loads(path.read_text(encoding="utf-8"))
        for index, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "markdown":
                continue
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            for sentence, blanked in sentences(source):
                for number in numbers_in(blanked, statable=False):
                    if len(number) == 1:
                        continue  # a one-digit count or index (the statable rule, on a sentence)
                    if number not in computed and number not in defined:
                        problems.append(ProseProblem(key, index, cell.get("id", ""), sentence.strip(), number))
    return problems


def format_problems(problems: list[ProseProblem]) -> str:
    if not problems:
        return "prose: every number in every markdown cell is computed by a claim or listed as a definition"
    lines = [p.line() for p in problems]
    lines.append(f"prose: {len(problems)} number(s) in the markdown that no claim computes")
    return "\n".join(lines)


# An f-string that lost its f: {name}, {k['longest']:,}, {x:.2f}. Not LaTeX ({M} after _ or ^,
# \frac{a}{b}), not a dict or set repr ({'a': 1}, {1, 2}).
_PLACEHOLDER = re.compile(r"(?<![\\\w_^{}$])\{[A-Za-z_][\w.]*(?:\[[^\]{}]+\])*(?:![rsa])?(?::[^{}\s]*)?\}")


_SHOWN_CODE = re.compile(r"```.*?```|<pre[^>]*>.*?</pre>|<code[^>]*>.*?</code>", re.S)


def unformatted_placeholders(folder) -> list[str]:
    """``"NN cell i: {...}"`` for every unformatted placeholder in any saved output of the
    executed notebooks in ``folder``."""
    found = []
    for key, path in notebook_paths(folder).items():
        nb = json.loads(path.read_text(encoding="utf-8"))
        for index, cell in enumerate(nb["cells"]):
            for out in cell.get("outputs", []) or []:
                texts = [out.get("text", "")]
                for mime in ("text/plain", "text/markdown", "text/html"):
                    texts.append(out.get("data", {}).get(mime, ""))
                for text in texts:
                    text = "".join(text) if isinstance(text, list) else str(text)
                    # Source code shown as code (a solution, a reference's source) may hold f-strings.
                    text = _SHOWN_CODE.sub(" ", text)
                    for m in _PLACEHOLDER.finditer(text):
                        found.append(f"{key} cell {index}: {m.group(0)}")
    return found
