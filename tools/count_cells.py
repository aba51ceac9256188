"""What a learner meets in each notebook: is the idea in the cells, and can it be read in the stated time?

    python tools/count_cells.py            # every notebooks/NN_*.ipynb, as a markdown table
    python tools/count_cells.py 06 07      # only those
    python tools/count_cells.py --check    # exit 1 naming each notebook off a target below

Columns, per executed notebook:

* **in view**: the share of content cells that compute their result in view. A content cell is a
  code cell that is not set-up or imports, an exercise (stub, check, solution), a claims table, a
  widget or a prediction. It computes in view unless it calls a function of a per-notebook lessons
  module (``pigviz.lessons.nbNN_*``) other than one that loads, formats or draws (``load_*``,
  ``*_table``, ``*_figure``, ``*_rows``... see ``DISPLAY``).
* **prose from modules**: the share of the words a learner reads that a per-notebook module's
  function writes into a cell's output (``Markdown(nbNN.story(...))``); the target is 0. Words
  that short f-string cells in the notebook write are counted as reading, not here.
* **words / sentence**, the longest markdown cell after the opening, the opening's words, and the
  runs of more than 250 words of prose with no code cell, figure or table between them.
* **model**: reading time at 110 words a minute over the core (everything before the questions,
  "Going further" or an appendix), plus the minutes of the exercises there; **stated**: the
  "Time in a workshop" the notebook gives. A stated time is due within 15% of the model.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS_PER_MINUTE = 110
TARGETS = {"words_per_sentence": 21.0, "cell_words": 220, "opening_words": 260, "run_words": 250, "time_rel": 0.15}
TIME = re.compile(r"\*\*Time in a workshop:\*\*\s*about\s*(\d+)\s*minutes")
CORE_END = re.compile(r"^#+\s*(Questions|Going further|Appendix)", re.M | re.I)
# Calls into a per-notebook module that only load, format or draw.
DISPLAY = re.compile(r"^(load\w*|\w*_table|\w*table|\w*_figure|figure\w*|\w*_rows|show\w*|fmt\w*|format\w*|labels?)$")
PER_NOTEBOOK = re.compile(
    r"from pigviz\.lessons import (nb\d\d\w*)(?: as (\w+))?|import pigviz\.lessons\.(nb\d\d\w*) as (\w+)"
)
NOT_CONTENT = re.compile(
    r"ex\.check\(|reference_or\(|ex\.solution\(|lessons\.solution\(|claims_table\(|print_claims\(|Widget\(|"
    r"google\.colab|setup_notebook\(|^def \w+\([^)]*\):\s*\n\s*(\"\"\"[\s\S]*?\"\"\"\s*)?\.\.\.\s*$",
    re.M,
)
IMPORTS_ONLY = re.compile(r"(\s*(import|from) .*\n?|\s*#.*\n?)+")
_CODE = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$|<[^>\n]*>|\]\([^)]*\)", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*_(\[`$])|\n\s*\n|\n(?=\s*[-*+] |\s*\d+\. |#)")


def _source(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _words(text: str) -> int:
    return len(re.findall(r"[A-Za-z0-9][\w'’.,%-]*", _CODE.sub(" x ", text)))


def _sentences(markdown: str) -> list[str]:
    body = "\n".join(line for line in markdown.splitlines() if not line.lstrip().startswith("#"))
    return [s for s in _SENTENCE_END.split(_CODE.sub(" x ", body)) if _words(s) >= 3]


def _output_markdown(cell) -> str:
    text = []
    for out in cell.get("outputs", []) or []:
        markdown = out.get("data", {}).get("text/markdown", "")
        markdown = "".join(markdown) if isinstance(markdown, list) else markdown
        if markdown and not markdown.lstrip().startswith("<details>"):  # a fold is read only when opened
            text.append(markdown)
    return "\n".join(text)


def _hidden(cell) -> bool:
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def _shows_something(cell) -> bool:
    for out in cell.get("outputs", []) or []:
        data = out.get("data", {})
        if any(k in data for k in ("application/vnd.plotly.v1+json", "image/png", "text/html")):
            return True
        if out.get("output_type") == "stream" or "text/plain" in data:
            return True
    return not cell.get("metadata", {}).get("jupyter", {}).get("source_hidden")


def _exercise_minutes(key: str) -> dict[str, int]:
    try:
        from pigviz.lessons import exercises as ex

        return {e.function_name: e.minutes for e in ex.exercises(key) if e.notebook == key}
    except Exception:  # noqa: BLE001 - the tool still counts words without the package
        return {}


def count(path: Path) -> dict:
    key = path.stem.split("_", 1)[0]
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = nb["cells"]
    aliases = set()
    for cell in cells:
        for m in PER_NOTEBOOK.finditer(_source(cell)):
            aliases.add(m.group(2) or m.group(4) or m.group(1) or m.group(3))
    call = re.compile(r"\b(" + "|".join(map(re.escape, sorted(aliases))) + r")\.(\w+)\(") if aliases else None
    minutes = _exercise_minutes(key)
    out = {"key": key, "content": 0, "in_view": 0, "md_words": 0, "module_words": 0, "cell_words": 0}
    sentences, core, stated, opening = [], True, None, 0
    core_words, core_minutes, run, longest_run, cell_max = 0, 0, 0, 0, 0
    for i, cell in enumerate(cells):
        source = _source(cell)
        if cell["cell_type"] == "markdown":
            if CORE_END.search(source):
                core = False
            words = _words(source)
            m = TIME.search(source)
            if m and stated is None:
                stated = int(m.group(1))
            if i == 0:
                opening = words
            else:
                cell_max = max(cell_max, words)
            out["md_words"] += words
            sentences += _sentences(source)
            run += words
            longest_run = max(longest_run, run)
            core_words += words if core else 0
            continue
        generated = _output_markdown(cell)
        from_module = bool(call and re.search(r"Markdown\(\s*(" + "|".join(map(re.escape, aliases)) + r")\.", source))
        if generated:
            words = _words(generated)
            out["module_words" if from_module else "cell_words"] += words
            core_words += words if core else 0
            run += words
            longest_run = max(longest_run, run)
        if _shows_something(cell) and not (generated and _hidden(cell)):
            run = 0  # a cell with code in view, a figure or a table breaks the prose
        for name, mins in minutes.items():
            if core and re.search(rf"^def {re.escape(name)}\(", source, re.M):
                core_minutes += mins
        if (
            NOT_CONTENT.search(source)
            or not source.strip()
            or re.fullmatch(r"(\s*(import|from) .*\n?|\s*#.*\n?)+", source)
        ):
            continue
        if re.fullmatch(r"(\s*my_\w+\s*=.*\n?|\s*#.*\n?)+", source):
            continue  # a prediction the learner fills in
        out["content"] += 1
        delegated = call and any(not DISPLAY.match(fn) for _, fn in call.findall(source))
        out["in_view"] += not delegated
    reading = out["md_words"] + out["module_words"] + out["cell_words"]
    out["in_view_share"] = out["in_view"] / max(out["content"], 1)
    out["module_share"] = out["module_words"] / max(reading, 1)
    out["words_per_sentence"] = sum(map(_words, sentences)) / max(len(sentences), 1)
    out["cell_max"], out["opening"], out["longest_run"] = cell_max, opening, longest_run
    out["model"] = core_words / WORDS_PER_MINUTE + core_minutes
    out["stated"] = stated
    return out


def off_target(c: dict) -> list[str]:
    """What misses a target, in words."""
    t, problems = TARGETS, []
    if c["module_words"]:
        problems.append(f"{c['module_words']} words of prose come from per-notebook module functions")
    if c["words_per_sentence"] > t["words_per_sentence"]:
        problems.append(f"{c['words_per_sentence']:.1f} words per sentence (at most {t['words_per_sentence']})")
    if c["cell_max"] > t["cell_words"]:
        problems.append(f"a markdown cell of {c['cell_max']} words (at most {t['cell_words']} after the opening)")
    if c["opening"] > t["opening_words"]:
        problems.append(f"an opening of {c['opening']} words (at most {t['opening_words']})")
    if c["longest_run"] > t["run_words"]:
        problems.append(f"{c['longest_run']} words of prose with nothing to look at between (at most {t['run_words']})")
    if c["stated"] is None:
        problems.append("no stated time ('**Time in a workshop:** about N minutes')")
    elif abs(c["stated"] - c["model"]) > t["time_rel"] * c["model"]:
        problems.append(f"states {c['stated']} minutes; the reading model gives {c['model']:.0f}")
    return problems


def main(argv) -> int:
    check = "--check" in argv
    argv = [a for a in argv if a != "--check"]
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    if argv:
        paths = [p for p in paths if p.stem.split("_", 1)[0] in argv or p.stem[:2] in argv]
    print(
        "| notebook | content cells in view | prose from modules | words / sentence | longest cell "
        "| opening | longest prose run | model vs stated (min) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    failing = []
    for path in paths:
        c = count(path)
        print(
            f"| {c['key']} | {c['in_view']} of {c['content']} ({c['in_view_share']:.0%}) | {c['module_share']:.0%} "
            f"| {c['words_per_sentence']:.1f} | {c['cell_max']} | {c['opening']} | {c['longest_run']} "
            f"| {c['model']:.0f} vs {c['stated'] if c['stated'] is not None else '-'} |"
        )
        problems = off_target(c)
        if problems:
            failing.append((c["key"], problems))
    if check and failing:
        for key, problems in failing:
            print(f"{key}: " + "; ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
