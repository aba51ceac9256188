"""The README's library snippet runs as printed, up to where it needs the reader's own estimator
and model (names it does not define)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_library_snippet_runs_as_printed():
    text = README.read_text()
    block = re.search(r"## The library\n\n```python\n(.*?)```", text, re.S)
    assert block, "README.md has no python block under '## The library'"
    runnable = block.group(1).split("from pigviz.study.estimators")[0]
    assert "inclusion_probability" in runnable and "budget_report" in runnable
    namespace: dict = {}
    exec(compile(runnable, "README.md (The library)", "exec"), namespace)  # raises as a reader would see
