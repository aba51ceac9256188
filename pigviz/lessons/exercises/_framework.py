"""The machinery behind the exercises: records, the check loop, comparisons, messages.

Only numpy is needed. torch is used when it is installed, and only to retry a case with
tensors when a learner's function refuses numpy input (a function written with torch ops).
"""

from __future__ import annotations

import copy
import dis
import inspect
import math
import numbers
import textwrap
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# What a function returns, which decides how its result is compared.
FLOAT, INT, ARRAY = "float", "int", "array"


@dataclass(frozen=True)
class Case:
    """One input the check runs. ``hint`` says what the case probes and how it goes wrong."""

    label: str
    args: tuple
    hint: str = ""


@dataclass(frozen=True)
class Wrong:
    """A plausible wrong implementation the check must reject, and the hint for it."""

    label: str
    fn: Callable
    hint: str


@dataclass(frozen=True)
class Exercise:
    """One place in a notebook where the learner writes the central code."""

    name: str  # "01.topk_estimate": lesson number, dot, function name
    signature: str  # "topk_estimate(weights, values, budget) -> float"
    task: str  # what to write, in a few sentences
    reference: Callable  # the reference solution (its source is the solution)
    make_cases: Callable[[], list]  # -> list[Case], deterministic
    wrong: tuple  # Wrong, at least two
    hint: str  # the code-level hint (the notebook's second fold), shown with any failure
    output: str = ARRAY  # FLOAT, INT or ARRAY (ARRAY also covers float-or-array)
    rtol: float = 1e-6
    atol: float = 1e-12
    helpers: tuple = ()  # functions the reference calls, shown with the solution
    # The first hint a notebook folds above the blank: what to think about, which earlier result to
    # use; no code. The second fold gives `hint`, the code-level one; the solution fold the rest.
    nudge: str = ""
    # What the notebook shows before the blank (ARENA's markers): 1-5 each, and the minutes it takes.
    difficulty: int = 0
    importance: int = 0
    minutes: int = 0
    # The notebook that holds it, when a lesson spans several ("05a", "05b"); by default the
    # lesson number that starts the name.
    notebook_key: str = ""
    # For a result that is not one number or one array (06.magicpig_estimate's (output, read)):
    # compare(got, expected) -> None when right, else what is off; it also names known mistakes.
    compare: Callable | None = None
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def markers(self) -> str:
        """``Difficulty 🔴🔴⚪⚪⚪ · Importance 🔵🔵🔵⚪⚪ · ~10 min``: the line above the exercise."""
        if not (1 <= self.difficulty <= 5 and 1 <= self.importance <= 5 and self.minutes >= 1):
            raise ValueError(
                f"{self.name}: difficulty and importance must be 1-5 and minutes >= 1, got "
                f"{self.difficulty}, {self.importance}, {self.minutes}"
            )
        red = "🔴" * self.difficulty + "⚪" * (5 - self.difficulty)
        blue = "🔵" * self.importance + "⚪" * (5 - self.importance)
        return f"Difficulty {red} · Importance {blue} · ~{self.minutes} min"

    @property
    def lesson(self) -> str:
        """The lesson number that starts the name: "05" for "05.paged_waste"."""
        return self.name.split(".", 1)[0]

    @property
    def notebook(self) -> str:
        """The notebook that holds the exercise: its ``notebook_key``, else the lesson number."""
        return self.notebook_key or self.lesson

    @property
    def function_name(self) -> str:
        return self.name.split(".", 1)[1]

    @property
    def parameters(self) -> list[str]:
        inside = self.signature[self.signature.index("(") + 1 : self.signature.index(")")]
        return [p.strip() for p in inside.split(",") if p.strip()]

    def stub(self) -> str:
        """The exercise cell's code: the signature, the task as docstring, a ``...`` body."""
        doc = textwrap.fill(self.task, 84, initial_indent="    ", subsequent_indent="    ")
        return f'def {self.function_name}({", ".join(self.parameters)}):\n    """\n{doc}\n    """\n    ...\n'

    def blank(self) -> Callable:
        """A function with the right parameters and a ``...`` body, as the learner gets it."""
        namespace: dict = {}
        exec(self.stub(), namespace)  # noqa: S102 - our own template text
        return namespace[self.function_name]

    def cases(self) -> list:
        if "cases" not in self._cache:
            cases = self.make_cases()
            expected = []
            for case in cases:
                result = _call_quietly(self.reference, case.args)
                if result.error is not None:
                    raise RuntimeError(f"the reference of {self.name} fails on case {case.label!r}: {result.error!r}")
                expected.append(_as_number_or_array(result.value))
            self._cache["cases"] = list(zip(cases, expected))
        return self._cache["cases"]


# --------------------------------------------------------------------------- calling


@dataclass
class _Result:
    value: Any = None
    error: BaseException | None = None
    torch_error: BaseException | None = None
    used_torch: bool = False


def _torch():
    try:
        import torch  # heavy: torch loads in ~1 s; numpy-only lessons never need it
    except Exception:  # noqa: BLE001 - torch is optional here
        return None
    return torch


def _to_torch(arg, torch):
    if isinstance(arg, np.ndarray):
        return torch.from_numpy(arg.copy())
    if isinstance(arg, float):
        return torch.tensor(arg, dtype=torch.float64)
    return arg


def _call_quietly(fn, args) -> _Result:
    """Call ``fn`` on copies of ``args`` with numpy's warnings silenced (the check reports
    NaN and overflow itself). If numpy input raises, retry once with torch tensors."""
    result = _Result()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            result.value = fn(*copy.deepcopy(args))
            return result
        except Exception as exc:  # noqa: BLE001 - any failure is the learner's to see
            result.error = exc
        torch = _torch()
        if torch is None or not any(isinstance(a, (np.ndarray, float)) for a in args):
            return result
        try:
            result.value = fn(*[_to_torch(a, torch) for a in copy.deepcopy(args)])
            result.error, result.used_torch = None, True
        except Exception as exc:  # noqa: BLE001
            result.torch_error = exc
    return result


def _as_number_or_array(value):
    """numpy view of a result: torch tensors, numpy scalars, lists and Python numbers."""
    if value is None or isinstance(value, (str, bytes, dict)):
        return value
    if isinstance(value, tuple):  # several results, as (output, read): each one converted
        return tuple(_as_number_or_array(v) for v in value)
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu()
        value = value.double() if value.is_floating_point() else value
        value = value.numpy()
    if isinstance(value, (bool, np.bool_)):
        return value
    if isinstance(value, numbers.Number) and not isinstance(value, np.generic):
        return value
    try:
        return np.asarray(value)
    except Exception:  # noqa: BLE001
        return value


def is_blank(fn) -> bool:
    """True if ``fn`` does nothing but return None: a body of ``...``, ``pass`` or a docstring."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    for ins in dis.get_instructions(code):
        if ins.opname in ("RESUME", "NOP", "CACHE", "RETURN_VALUE", "POP_TOP"):
            continue
        if ins.opname in ("LOAD_CONST", "RETURN_CONST") and ins.argval in (None, Ellipsis):
            continue
        return False
    return True


# --------------------------------------------------------------------------- comparing


def _compare(ex: Exercise, got, expected) -> str | None:
    """None if ``got`` is right, else a short description of what is off."""
    if got is None:
        return "returned None"
    if ex.compare is not None:
        return ex.compare(got, expected)
    if ex.output in (FLOAT, INT):
        try:
            arr = np.asarray(got, dtype=np.float64)
        except (TypeError, ValueError):
            return f"returned {type(got).__name__}, not a number"
        if arr.size != 1:
            return f"returned an array of shape {arr.shape}; a single number was expected"
        value = float(arr.reshape(()))
        if ex.output == INT:
            if not math.isfinite(value) or value != float(expected):
                return "wrong value"
            return None
        if math.isnan(value):
            return "returned NaN"
        if not np.isclose(value, float(expected), rtol=ex.rtol, atol=ex.atol):
            return "wrong value"
        return None
    exp = np.asarray(expected, dtype=np.float64)
    if isinstance(got, np.ndarray) and got.dtype == object:
        return "returned an object array, not numbers"
    try:
        arr = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return f"returned {type(got).__name__}, not numbers"
    if exp.ndim == 0:
        if arr.size != 1:
            return f"returned shape {arr.shape} for a single input; a single number was expected"
        arr = arr.reshape(())
    elif arr.shape != exp.shape:
        return f"returned shape {arr.shape}, expected shape {exp.shape}"
    if np.isnan(arr).any() and not np.isnan(exp).any():
        return "returned NaN"
    if not np.allclose(arr, exp, rtol=ex.rtol, atol=ex.atol, equal_nan=True):
        return "wrong value"
    return None


def _same(a: _Result, b: _Result, atol: float = 1e-12, ex: Exercise | None = None) -> bool:
    """Do two calls agree (used to recognise a known mistake in a learner's result)? With an
    exercise's own ``compare``, they agree when it finds nothing off between them."""
    if a.error is not None or b.error is not None:
        return (
            a.error is not None
            and b.error is not None
            and type(a.error) is type(b.error)
            and str(a.error) == str(b.error)
        )
    x, y = _as_number_or_array(a.value), _as_number_or_array(b.value)
    if x is None or y is None:
        return x is None and y is None
    if ex is not None and ex.compare is not None:
        return ex.compare(y, x) is None
    try:
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if x.size == 1 and y.size == 1:
            x, y = x.reshape(()), y.reshape(())
        # A NaN or an infinity says the arithmetic broke, not which mistake made it: many different
        # bugs overflow to the same inf or NaN, so such a result never names a "common mistake".
        if not (np.isfinite(x).all() and np.isfinite(y).all()):
            return False
        return x.shape == y.shape and bool(np.allclose(x, y, rtol=1e-9, atol=atol))
    except (TypeError, ValueError):
        return False


def show(x, width: int = 90) -> str:
    """Compact text for an input or a result: small arrays in full, large ones summarised."""
    x = _as_number_or_array(x)
    if isinstance(x, tuple):
        return "(" + ", ".join(show(v, width) for v in x) + ")"
    if isinstance(x, np.ndarray):
        if x.ndim == 0:
            return show(x.item())
        if x.size <= 12:
            text = np.array2string(x, precision=6, separator=", ", max_line_width=10**6)
            return " ".join(text.split())
        flat = ", ".join(f"{v:.4g}" for v in x.reshape(-1)[:4])
        return f"array of shape {x.shape} ({x.dtype}) starting [{flat}, ...]"
    if isinstance(x, float):
        text = repr(x)
        return text if len(text) <= 14 else f"{x:.12g}"
    text = repr(x)
    return text if len(text) <= width else text[: width - 3] + "..."


# --------------------------------------------------------------------------- checking


def failure(ex: Exercise, fn) -> str | None:
    """None if ``fn`` passes every case of ``ex``, else the message the learner sees."""
    if not callable(fn):
        return f"{ex.name}: expected a function, got {type(fn).__name__}"
    cases = ex.cases()
    for number, (case, expected) in enumerate(cases, 1):
        result = _call_quietly(fn, case.args)
        if result.error is None:
            problem = _compare(ex, _as_number_or_array(result.value), expected)
            if problem is None:
                continue
        return _message(ex, fn, number, len(cases), case, expected, result)
    return None


def _message(ex, fn, number, total, case, expected, result) -> str:
    names = ex.parameters
    inputs = ", ".join(f"{n}={show(a)}" for n, a in zip(names, case.args))
    lines = [f"{ex.name} failed case {number} of {total}: {case.label}", f"  input:    {inputs}"]
    blank = is_blank(fn)
    if result.error is not None:
        first, second, flavour = result.error, result.torch_error, "torch tensors"
        if second is not None and any(w in str(first) for w in ("ndarray", "numpy", "Tensor")):
            # A torch-only function: its error on tensors is the informative one.
            first, second, flavour = second, first, "numpy arrays"
        lines.append(f"  expected: {show(expected)}")
        lines.append(f"  raised:   {type(first).__name__}: {first}")
        if second is not None:
            lines.append(f"  (with {flavour} instead: {type(second).__name__}: {second})")
    else:
        got = _as_number_or_array(result.value)
        lines.append(f"  expected: {show(expected)}")
        lines.append(f"  got:      {show(got)}" + ("  (from torch tensor input)" if result.used_torch else ""))
        problem = _compare(ex, got, expected)
        if problem not in (None, "wrong value", "returned None"):
            lines.append(f"  problem:  {problem}")
        detail = _where(ex, got, expected)
        if detail:
            lines.append(f"  {detail}")
        if not is_finite_result(got):
            lines.append(
                "  NaN or inf in your result: an exp overflowed, a log met 0, or something was divided by 0 "
                "(an empty set?)"
            )
    if blank:
        lines.append(
            f"  hint: the body of {getattr(fn, '__name__', 'your function')} is still `...`: "
            f"write it, then run this check again."
        )
    elif result.error is None and result.value is None:
        lines.append("  hint: your function returned None. Did you forget `return`?")
    else:
        matches = [w for w in ex.wrong if _same(_call_quietly(w.fn, case.args), result, min(ex.atol, 1e-12), ex)]
        if case.hint:
            lines.append(f"  hint: {case.hint}")
        for w in matches:
            lines.append(f"  this is what you get with a common mistake ({w.label}): {w.hint}")
        if not matches:
            close = _relative_error(got_of(result), expected)
            if close is not None and close < 1e-2:
                lines.append(
                    f"  close: off by a relative {close:.1e}, but the check asks for {ex.rtol:g}. Is part of "
                    f"the arithmetic in float32 (torch's default dtype), or does a step lose precision?"
                )
            lines.append(f"  general hint: {ex.hint}")
    lines.append(
        f"  reproduce: pigviz.lessons.exercises.case_inputs({ex.name!r}, {number}); "
        f"solution: pigviz.lessons.solution({ex.name!r})"
    )
    return "\n".join(lines)


def is_finite_result(value) -> bool:
    """False when a numeric result holds NaN or inf (then no common mistake is named: many bugs
    break the arithmetic the same way). None is no number at all, so it is not "broken"."""
    if value is None:
        return True
    try:
        return bool(np.isfinite(np.asarray(_as_number_or_array(value), dtype=np.float64)).all())
    except (TypeError, ValueError):
        return True


def got_of(result: _Result):
    return _as_number_or_array(result.value)


def _relative_error(got, expected) -> float | None:
    """Largest relative difference, or None when the shapes or values are not comparable."""
    try:
        g = np.asarray(got, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        if g.size == 1 and e.size == 1:
            g, e = g.reshape(()), e.reshape(())
        if g.shape != e.shape or not np.isfinite(g).all() or not np.isfinite(e).all():
            return None
        return float(np.max(np.abs(g - e) / np.maximum(np.abs(e), 1e-300), initial=0.0))
    except (TypeError, ValueError):
        return None


def _where(ex, got, expected) -> str:
    """For arrays: the first entry that differs, so a long array still gives one number."""
    if ex.output != ARRAY or ex.compare is not None:
        return ""
    try:
        g = np.asarray(got, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
    except (TypeError, ValueError):
        return ""
    if g.shape != e.shape or e.size <= 1:
        return ""
    bad = ~np.isclose(g, e, rtol=ex.rtol, atol=ex.atol, equal_nan=True)
    if not bad.any():
        return ""
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    where = idx[0] if len(idx) == 1 else idx
    return (
        f"first difference at index {where}: expected {e[idx]:.10g}, got {g[idx]:.10g} "
        f"({int(bad.sum())} of {e.size} entries differ)"
    )


def solution_text(ex: Exercise) -> str:
    parts = [inspect.getsource(ex.reference)]
    for helper in ex.helpers:
        parts.append(inspect.getsource(helper))
    return "\n\n".join(textwrap.dedent(p).rstrip() for p in parts) + "\n"
