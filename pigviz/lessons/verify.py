"""Headline claims: every number a notebook states, re-derived in one place.

Each lesson module (``pigviz.lessons.nbNN_*``) and each finding's module (``pigviz.lessons.fN_*``:
the lab book's notebooks under ``notebooks/findings/``) offers ``claims() -> list[Claim]``. ``pigviz verify``
runs them all in teaching order, and each notebook prints its own with
``lessons.print_claims("NN")``, so nbval and ``verify`` check one computation rather than two
copies of it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

__all__ = [
    "Claim",
    "LESSON_MODULES",
    "FINDING_MODULES",
    "CLAIM_MODULES",
    "collect_claims",
    "run_claims",
    "format_table",
    "span",
    "near",
]

# One module per notebook, in teaching order. Imported by name so that a lesson which fails to
# import becomes a FAIL row of `pigviz verify` instead of stopping it.
LESSON_MODULES = {
    "01": "pigviz.lessons.nb01_stick_balance",
    "02": "pigviz.lessons.nb02_key_cone",
    "03": "pigviz.lessons.nb03_centring",
    "04a": "pigviz.lessons.nb04a_simhash",
    "04b": "pigviz.lessons.nb04b_sampling",
    "05a": "pigviz.lessons.nb05a_kv_bill",
    "05b": "pigviz.lessons.nb05b_kv_serving",
    "06a": "pigviz.lessons.nb06a_build_magicpig",
    "06b": "pigviz.lessons.nb06b_the_index",
    "07a": "pigviz.lessons.nb07a_inside_the_model",
    "07b": "pigviz.lessons.nb07b_your_magicpig",
    "08": "pigviz.lessons.nb08_your_estimator",
}
# The findings (the lab book): one module per notebook under notebooks/findings/.
FINDING_MODULES = {
    "f1": "pigviz.lessons.f1_every_head",
    "f2": "pigviz.lessons.f2_affordable",
    "f3": "pigviz.lessons.f3_bill_and_speed",
    "f4": "pigviz.lessons.f4_decoding",
    "f5": "pigviz.lessons.f5_serving",
}
CLAIM_MODULES = {**LESSON_MODULES, **FINDING_MODULES}


@dataclass
class Claim:
    notebook: str  # e.g. "01" -- which lesson (or "f1": which finding) states it
    text: str  # the sentence as a learner reads it
    passed: bool
    value: str  # the measured number, formatted
    source: str = field(default="")
    # The texts the notebook's prose quotes from this claim, formatted as written there ("0.41x",
    # "8,174 tokens"): every number in them counts as computed for `pigviz verify --prose`.
    quotes: tuple = ()

    def row(self) -> tuple[str, str, str, str]:
        return (self.notebook, self.text, self.value, "PASS" if self.passed else "FAIL")


def collect_claims(modules=None) -> list[Claim]:
    """Every lesson module's claims. A module that cannot be imported, has no ``claims()``, or
    whose ``claims()`` raises becomes one FAIL claim naming it, so ``pigviz verify`` reports it
    instead of skipping it or stopping at it."""
    out: list[Claim] = []
    for name in CLAIM_MODULES.values() if modules is None else modules:
        try:
            module = importlib.import_module(name)
            produce = getattr(module, "claims", None)
            if not callable(produce):
                raise AttributeError(f"{name} has no claims() function")
            found = list(produce())
        except Exception as exc:  # noqa: BLE001 -- any failure is reported as a FAIL row
            out.append(
                Claim(
                    notebook="--",
                    text=f"{name} states its claims",
                    passed=False,
                    value=f"{type(exc).__name__}: {exc}"[:200],
                    source=name,
                )
            )
            continue
        for claim in found:
            claim.source = claim.source or name
            out.append(claim)
    return out


def run_claims(modules=None) -> tuple[list[Claim], bool]:
    claims = collect_claims(modules)
    return claims, bool(claims) and all(c.passed for c in claims)


def format_table(claims: list[Claim]) -> str:
    rows = [("nb", "claim", "value", "result")] + [c.row() for c in claims]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    widths[1] = min(widths[1], 72)
    lines = []
    for r in rows:
        text = r[1] if len(r[1]) <= widths[1] else r[1][: widths[1] - 1] + "…"
        lines.append(f"{r[0]:<{widths[0]}}  {text:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}")
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def span(values, fmt="{:.2f}") -> str:
    """``"lo to hi"`` of ``values`` in ``fmt``, or ``"none"``."""
    if len(values) == 0:
        return "none"
    return f"{fmt.format(min(values))} to {fmt.format(max(values))}"


def near(value: float, target: float, rel: float) -> bool:
    return abs(value - target) <= rel * abs(target)
