"""Exercises: the learner writes the central code of a notebook, a check says if it is right.

A notebook leaves a function body as ``...`` (the exercise cell), then checks it and goes on with
what the check returns::

    from pigviz.lessons import exercises as ex

    def topk_estimate(weights, values, budget):
        ...

    topk_estimate = ex.check("01.topk_estimate", topk_estimate)

``check`` runs the function on many inputs, edge cases included, and returns the function to go on
with, or raises ``CheckFailed`` (an AssertionError) naming the input, the expected and the returned
value, and a hint (and, when the result is what a common mistake gives, which mistake). In IPython
and Jupyter the failure shows as that message alone, not as a traceback through this package, with
one line on how to go on when stuck (``use_reference``, or the folded solution). It accepts loops or
vectorised code, numpy or torch: when numpy input makes the function raise, the case is retried with
torch tensors, and torch results are compared as numpy arrays.

What ``check`` returns: the learner's function when it passes; the reference solution when the
function is still blank and solutions are on (environment variable ``PIGVIZ_SOLUTIONS=1``, or
``enable_solutions()``), so that committed, nbval-tested notebooks run through. A passing function is
kept (d2l's ``#@save``): ``ex.mine.softmax`` is the learner's own ``softmax`` in later cells and later
notebooks, or the reference, with one line saying so, where the learner skipped it.

``solution(name)`` shows the reference, ``exercises()`` lists them, ``self_test()`` checks the
checks: each must pass its reference and fail the blank and every known wrong version.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import math
import os
import sys
import textwrap
from pathlib import Path

import numpy as np

from pigviz._util.io import write_text_atomic
from pigviz.lessons.exercises import nb01, nb02, nb03, nb04, nb05, nb06, nb07, nb08
from pigviz.lessons.exercises._framework import (
    Case,
    Exercise,
    Wrong,
    _as_number_or_array,
    _call_quietly,
    _compare,
    failure,
    is_blank,
    is_finite_result,
    solution_text,
)

__all__ = [
    "Exercise",
    "Case",
    "Wrong",
    "SOLUTIONS_ENV",
    "NOTEBOOKS",
    "exercises",
    "get",
    "check",
    "solution",
    "Solution",
    "stub",
    "case_inputs",
    "use_reference",
    "mine",
    "Mine",
    "MINE_DIR_ENV",
    "markers",
    "CheckFailed",
    "solutions_enabled",
    "enable_solutions",
    "is_blank",
    "self_test",
    "format_listing",
    "run_cli",
]

SOLUTIONS_ENV = "PIGVIZ_SOLUTIONS"
# Where a passing function's source is kept for later notebooks (another kernel): a folder per user.
MINE_DIR_ENV = "PIGVIZ_MINE_DIR"

# Notebook key -> file stem, in teaching order. Lessons 04 to 07 span two notebooks each (04a and
# 04b, ..., 07a and 07b): their exercises keep the names "04.*" to "07.*" and
# say which notebook holds them (Exercise.notebook_key).
NOTEBOOKS = {
    "01": "01_stick_balance",
    "02": "02_key_cone",
    "03": "03_centring",
    "04a": "04a_simhash_scurves",
    "04b": "04b_sampling_keys",
    "05a": "05a_kv_bill",
    "05b": "05b_kv_serving",
    "06a": "06a_build_magicpig",
    "06b": "06b_the_index",
    "07a": "07a_inside_the_model",
    "07b": "07b_your_magicpig_writes",
    "08": "08_your_estimator",
}

_REGISTRY: dict[str, Exercise] = {}
for _module in (nb01, nb02, nb03, nb04, nb05, nb06, nb07, nb08):
    for _ex in _module.EXERCISES:
        if _ex.name in _REGISTRY:
            raise RuntimeError(f"exercise {_ex.name} is defined twice")
        _REGISTRY[_ex.name] = _ex
del _module, _ex

_solutions_override: bool | None = None


def exercises(notebook: str | None = None) -> list[Exercise]:
    """Every exercise, in notebook order; only one notebook's with ``notebook="04"`` or
    ``notebook="05a"``; a whole lesson's with its number (``"05"``: 05a's and 05b's)."""
    found = list(_REGISTRY.values())
    if notebook is not None:
        notebook = str(notebook).zfill(2)
        found = [e for e in found if notebook in (e.notebook, e.lesson)]
    return found


def get(name: str) -> Exercise:
    """The exercise called ``name`` ("04.inclusion_probability"; "inclusion_probability" works
    too when only one notebook has it)."""
    if isinstance(name, Exercise):
        return name
    if name in _REGISTRY:
        return _REGISTRY[name]
    short = [e for e in _REGISTRY.values() if e.function_name == name]
    if len(short) == 1:
        return short[0]
    close = difflib.get_close_matches(str(name), list(_REGISTRY) + [e.function_name for e in _REGISTRY.values()], 3)
    extra = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(_REGISTRY)}"
    raise KeyError(f"no exercise called {name!r}{extra}")


class CheckFailed(AssertionError):
    """A failed check. Jupyter shows ``_render_traceback_``: the message and a way on, no frames."""

    def __init__(self, message: str, name: str, function_name: str):
        super().__init__(message)
        self.name, self.function_name = name, function_name

    def stuck_line(self) -> str:
        return (
            f"stuck? `{self.function_name} = ex.use_reference({self.name!r})` goes on with the reference "
            f"solution; the solution is also folded below the check"
        )

    def _render_traceback_(self) -> list[str]:
        # IPython calls this instead of printing a traceback: a learner sees what failed and how to
        # go on, not frames of pigviz's check machinery. Red for the headline only, as errors are.
        lines = str(self).splitlines()
        return [f"\x1b[31m✗ {lines[0]}\x1b[0m", *lines[1:], self.stuck_line()]


def check(name: str, fn, *, quiet: bool = False):
    """Run exercise ``name``'s check on ``fn`` and return the function to go on with.

    ``fn`` itself when it passes (kept, as ``mine.<function name>``, for later cells and notebooks);
    the reference solution when ``fn`` is still blank and solutions are on (``PIGVIZ_SOLUTIONS=1``),
    so that a committed notebook runs through. Otherwise ``CheckFailed`` (an AssertionError) with the
    failing input, expected vs got, and a hint. Prints one line unless ``quiet``."""
    __tracebackhide__ = True  # noqa: F841 - IPython and pytest then show the message, not this frame
    ex = get(name)
    if is_blank(fn) and solutions_enabled():
        if not quiet:
            print(
                f"{ex.name}: {getattr(fn, '__name__', ex.function_name)} is blank and {SOLUTIONS_ENV} is on, "
                f"so the reference solution stands in"
            )
        fn = ex.reference
    message = failure(ex, fn)
    if message is not None:
        raise CheckFailed(message, ex.name, ex.function_name) from None
    saved = mine._keep(ex, fn)
    if not quiet:
        print(f"{ex.name}: pass ({len(ex.cases())} cases)")
        if not saved:
            print(
                f"  kept in this kernel only: {ex.function_name}'s source could not be read, so another "
                f"notebook's ex.mine.{ex.function_name} will use the reference"
            )
    return fn


class Solution(str):
    """Source text that a notebook displays as code, not as a quoted string."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        return f"```python\n{self}```"


def solution(name: str) -> Solution:
    """The reference solution's source (a str that Jupyter shows as a code block)."""
    return Solution(solution_text(get(name)))


def stub(name: str) -> str:
    """The exercise cell as the learner gets it: signature, task as docstring, ``...`` body."""
    return get(name).stub()


def case_inputs(name: str, number: int) -> tuple:
    """The arguments of case ``number`` (1-based, as failure messages count) of a check."""
    cases = get(name).cases()
    if not 1 <= number <= len(cases):
        raise IndexError(f"{name} has cases 1 to {len(cases)}, not {number}")

    return copy.deepcopy(cases[number - 1][0].args)


def solutions_enabled() -> bool:
    """True when blank exercises should be replaced by their reference solutions:
    ``enable_solutions(True/False)`` if called, else ``PIGVIZ_SOLUTIONS`` in (1, true, yes, on)."""
    if _solutions_override is not None:
        return _solutions_override
    return os.environ.get(SOLUTIONS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def enable_solutions(on: bool | None = True) -> None:
    """Switch solutions on or off for this process; ``None`` goes back to the environment."""
    global _solutions_override
    _solutions_override = None if on is None else bool(on)


def use_reference(name: str):
    """The reference solution of exercise ``name``, to go on with when stuck:
    ``balance_point = ex.use_reference("01.balance_point")``."""
    ex = get(name)
    print(f"{ex.name}: going on with the reference solution (ex.solution({ex.name!r}) shows it)")
    return ex.reference


def markers(name: str) -> str:
    """The difficulty, importance and minutes line of exercise ``name``."""
    return get(name).markers()


class Mine:
    """The learner's own functions, kept when their check passes (d2l's ``#@save``).

    ``ex.mine.softmax`` is the ``softmax`` that passed ``03.softmax``: in this kernel the function
    object itself; in another notebook's kernel, the source kept on disk (``PIGVIZ_MINE_DIR``, by
    default ``~/.pigviz/mine``), re-checked before use. Where the learner skipped the exercise, or
    the kept one no longer passes, the reference stands in and one line says so. With solutions on
    (nbval, the site) nothing is read from disk, so a committed notebook never depends on what a
    learner kept."""

    def __init__(self):
        self._kept: dict[str, object] = {}

    @staticmethod
    def folder() -> Path:
        return Path(os.environ.get(MINE_DIR_ENV) or Path.home() / ".pigviz" / "mine")

    def _keep(self, ex: Exercise, fn) -> bool:
        """Keep ``fn`` for this kernel and, with its source, on disk; False where it is kept here only."""
        self._kept[ex.function_name] = fn
        if fn is ex.reference:
            return True  # nothing to save: the reference is what another notebook gets anyway
        try:
            source = textwrap.dedent(inspect.getsource(fn))
            write_text_atomic(self.folder() / f"{ex.name}.py", source)
        except (OSError, TypeError):
            return False  # no source (a lambda, exec'd text, a C function): kept in this kernel only
        return True

    def _from_disk(self, ex: Exercise):
        path = self.folder() / f"{ex.name}.py"
        if solutions_enabled() or not path.is_file():
            return None
        namespace = {"np": np, "numpy": np, "math": math, **{k: v for k, v in self._kept.items()}}
        try:
            exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # noqa: S102
            fn = namespace[ex.function_name]
            if failure(ex, fn) is None:
                return fn
        except Exception:  # noqa: BLE001 - a kept function that no longer loads is replaced below
            pass
        return None

    def __getattr__(self, function_name: str):
        if function_name.startswith("_"):
            raise AttributeError(function_name)
        try:
            ex = get(function_name)
        except KeyError as exc:
            raise AttributeError(f"mine has no {function_name!r}: {exc.args[0]}") from None
        kept = self._kept.get(ex.function_name)
        if kept is None:
            kept = self._from_disk(ex)
            if kept is not None:
                print(f"mine.{ex.function_name}: your {ex.name} from {self.folder() / (ex.name + '.py')}")
                self._kept[ex.function_name] = kept
        if kept is None:
            print(
                f"mine.{ex.function_name}: you have not passed {ex.name} (notebook {ex.notebook}) yet, "
                "so the reference stands in"
            )
            return ex.reference
        return kept

    def __dir__(self):
        return sorted(self._kept)


mine = Mine()


# --------------------------------------------------------------------------- self-test and listing


def self_test(names=None) -> list[str]:
    """Check the checks. For each exercise: its reference must pass; the blank and every known
    wrong version must fail, each wrong version with its own hint in the message; at least two
    wrong versions; a solution text. Returns the problems found (empty: all good)."""
    problems = []
    for ex in exercises() if names is None else [get(n) for n in names]:
        try:
            message = failure(ex, ex.reference)
        except Exception as exc:  # noqa: BLE001 - a broken check is a problem to report
            problems.append(f"{ex.name}: the check itself fails: {type(exc).__name__}: {exc}")
            continue
        if message is not None:
            problems.append(f"{ex.name}: the reference solution fails its own check:\n{message}")
        message = failure(ex, ex.blank())
        if message is None:
            problems.append(f"{ex.name}: the blank passes the check")
        elif "still `...`" not in message:
            problems.append(f"{ex.name}: the blank's failure does not say it is blank:\n{message}")
        if len(ex.wrong) < 2:
            problems.append(f"{ex.name}: only {len(ex.wrong)} wrong version(s); at least 2 are required")
        for wrong in ex.wrong:
            message = failure(ex, wrong.fn)
            if message is None:
                problems.append(f"{ex.name}: the wrong version '{wrong.label}' passes the check")
            elif wrong.hint not in message and not _explained_without_matching(ex, wrong, message):
                problems.append(f"{ex.name}: the failure of '{wrong.label}' does not give its hint:\n{message}")
        try:
            if ex.function_name not in solution_text(ex):
                problems.append(f"{ex.name}: the solution text does not define {ex.function_name}")
        except (OSError, TypeError) as exc:
            problems.append(f"{ex.name}: no solution source: {exc}")
    return problems


def _explained_without_matching(ex: Exercise, wrong, message: str) -> bool:
    """A wrong version whose result breaks the arithmetic (NaN or inf) is never named by matching;
    its failure must then be explained by the failing case's own hint, which says what overflows."""
    for case, expected in ex.cases():
        result = _call_quietly(wrong.fn, case.args)
        if result.error is None and _compare(ex, _as_number_or_array(result.value), expected) is None:
            continue  # this case passes; the message is about a later one
        broken = result.error is None and not is_finite_result(result.value)
        return broken and bool(case.hint) and case.hint in message and "NaN or inf in your result" in message
    return False


def format_listing() -> str:
    """Every exercise with its notebook and signature, grouped by notebook (for the CLI)."""
    lines = []
    for number, notebook in NOTEBOOKS.items():
        found = exercises(number)
        if not found:
            continue
        lines.append(f"notebooks/{notebook}.ipynb")
        width = max(len(e.name) for e in found)
        for e in found:
            lines.append(f"  {e.name:<{width}}  {e.signature}")
    lines.append("")
    lines.append(
        f"{len(_REGISTRY)} exercises. In a notebook: pigviz.lessons.check(name, fn); "
        f"pigviz.lessons.solution(name) shows a reference; {SOLUTIONS_ENV}=1 fills in "
        f"blanks with the references."
    )
    return "\n".join(lines)


def _problems() -> list[str]:
    return self_test()


def run_cli(self_test: bool = False, out=None) -> int:
    """What ``pigviz exercises [--self-test]`` prints, and its exit status: the listing (0), or
    the self-test's problems (1 if any, else 0 and a one-line summary)."""
    out = out or sys.stdout
    if not self_test:
        print(format_listing(), file=out)
        return 0
    problems = _problems()
    total = len(_REGISTRY)
    wrongs = sum(len(e.wrong) for e in _REGISTRY.values())
    if problems:
        for problem in problems:
            print(problem, file=out)
        print(f"self-test FAILED: {len(problems)} problem(s) in {total} exercises", file=out)
        return 1
    print(
        f"self-test passed: {total} exercises; each check passes its reference and rejects "
        f"the blank and its wrong versions ({wrongs} in all)",
        file=out,
    )
    return 0
