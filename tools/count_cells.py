"""Count what a learner reads in each executed notebook's code cells.

    python tools/count_cells.py            # every notebooks/NN_*.ipynb, as a markdown table
    python tools/count_cells.py 06 07      # only those

Columns: code cells; code lines (non-blank); print / f-string lines (a line with ``print(`` or an
f-string) and their share; cells over 15 lines; and the same counts for the cells a learner reads
(collapsed cells, ``"jupyter": {"source_hidden": true}``, excluded); then the time the notebook states
("Time in a workshop: about N minutes").
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRINTISH = re.compile(r"print\(|\bf\"|\bf'")
TIME = re.compile(r"(?:Time in a workshop|Workshop time):\*\*\s*([^.]*)")


def count(path: Path) -> dict:
    nb = json.loads(path.read_text(encoding="utf-8"))
    out = {"cells": 0, "lines": 0, "printish": 0, "over15": 0, "read_cells": 0, "read_lines": 0, "read_max": 0}
    stated = ""
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown" and not stated:
            m = TIME.search(source)
            stated = " ".join(m.group(1).replace("#", " ").split()) if m else ""
        if cell["cell_type"] != "code":
            continue
        lines = [line for line in source.splitlines() if line.strip()]
        out["cells"] += 1
        out["lines"] += len(lines)
        out["printish"] += sum(bool(PRINTISH.search(line)) for line in lines)
        out["over15"] += len(lines) > 15
        if not cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"):
            out["read_cells"] += 1
            out["read_lines"] += len(lines)
            out["read_max"] = max(out["read_max"], len(lines))
    out["stated"] = stated
    return out


def main(argv) -> None:
    paths = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    if argv:
        paths = [p for p in paths if p.stem.split("_", 1)[0] in argv or p.stem[:2] in argv]
    print(
        "| notebook | code cells | code lines | print / f-string lines | cells over 15 lines "
        "| cells a learner reads (lines, longest) | stated time |"
    )
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        c = count(path)
        share = f"{c['printish']} ({c['printish'] / max(c['lines'], 1):.0%})"
        print(
            f"| {path.stem.split('_', 1)[0]} | {c['cells']} | {c['lines']} | {share} | {c['over15']} "
            f"| {c['read_cells']} ({c['read_lines']}, {c['read_max']}) | {c['stated']} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
