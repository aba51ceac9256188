"""The teaching layer: per notebook, the claims it states (``pigviz verify``) and, in
``pigviz.lessons.exercises``, the code the learner writes with its checks.

    from pigviz import lessons
    lessons.claims_table("05b")                    # the table a notebook shows; nbval compares its text
    lessons.table(rows, formats={"error": "{:.3f}"})  # any table: rendered in Jupyter, stable text for nbval
    paged_waste = lessons.check("05.paged_waste", paged_waste)  # a learner's function against its check
    lessons.mine.paged_waste                       # that function again, in a later cell or notebook
    lessons.folded("Answer 1", text)               # Markdown behind a click (solutions, answers)
    lessons.solution("05.paged_waste")             # the reference, one call away
    lessons.agree(mine, theirs, within=1e-12)      # "agree to better than 1e-12": no CPU-dependent residue
"""

from __future__ import annotations

from pigviz._util.fmt import agree, below
from pigviz.lessons import exercises
from pigviz.lessons.exercises import check, mine, solution
from pigviz.lessons.tables import Folded, Table, folded, table
from pigviz.lessons.verify import CLAIM_MODULES, LESSON_MODULES, Claim, collect_claims, format_table, run_claims

__all__ = [
    "Claim",
    "LESSON_MODULES",
    "CLAIM_MODULES",
    "claims",
    "print_claims",
    "collect_claims",
    "run_claims",
    "format_table",
    "exercises",
    "check",
    "solution",
    "agree",
    "below",
    "table",
    "Table",
    "folded",
    "Folded",
    "mine",
    "claims_table",
]


def claims(notebook: str) -> list[Claim]:
    """The claims of one notebook (``"01"`` ... ``"08"``; lesson 05 is ``"05a"`` and ``"05b"``; the
    findings ``"f1"``, ...)."""
    if notebook not in CLAIM_MODULES:
        raise ValueError(f"notebook must be one of {', '.join(CLAIM_MODULES)}, got {notebook!r}")
    return collect_claims([CLAIM_MODULES[notebook]])


def print_claims(notebook: str) -> None:
    """Print one notebook's claims as a text table; FAIL rows say what failed."""
    print(format_table(claims(notebook)))


def claims_table(notebook: str) -> Table:
    """One notebook's claims as a rendered table (what a notebook shows): the sentence, the
    number re-derived now, PASS or FAIL (in red). ``pigviz verify`` runs the same claims."""
    rows = [{"claim": c.text, "value now": c.value, "result": "PASS" if c.passed else "FAIL"} for c in claims(notebook)]
    return table(rows, fail_where={"result": "FAIL"})
