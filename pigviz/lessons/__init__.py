"""The teaching layer: per notebook, the claims it states (``pigviz verify``) and, in
``pigviz.lessons.exercises``, the code the learner writes with its checks.

    from pigviz import lessons
    lessons.print_claims("05b")                    # the table a notebook prints; nbval compares it
    lessons.check("05.paged_waste", paged_waste)   # a learner's function against its check
    lessons.solution("05.paged_waste")             # the reference, one call away
    lessons.agree(mine, theirs, within=1e-12)      # "agree to better than 1e-12": no CPU-dependent residue
"""

from __future__ import annotations

from pigviz._util.fmt import agree, below
from pigviz.lessons import exercises
from pigviz.lessons.exercises import check, reference_or, solution
from pigviz.lessons.verify import LESSON_MODULES, Claim, collect_claims, format_table, run_claims

__all__ = [
    "Claim",
    "LESSON_MODULES",
    "claims",
    "print_claims",
    "collect_claims",
    "run_claims",
    "format_table",
    "exercises",
    "check",
    "solution",
    "reference_or",
    "agree",
    "below",
]


def claims(notebook: str) -> list[Claim]:
    """The claims of one notebook (``"01"`` ... ``"07"``; lesson 05 is ``"05a"`` and ``"05b"``)."""
    if notebook not in LESSON_MODULES:
        raise ValueError(f"notebook must be one of {', '.join(LESSON_MODULES)}, got {notebook!r}")
    return collect_claims([LESSON_MODULES[notebook]])


def print_claims(notebook: str) -> None:
    """Print one notebook's claims as a table; FAIL rows say what failed."""
    print(format_table(claims(notebook)))
