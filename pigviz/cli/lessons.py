"""``pigviz verify``: re-derive every number the notebooks state. ``pigviz exercises``: list the
exercises; ``--self-test`` checks that every check passes its reference and rejects the blank and
its known wrong versions."""

from __future__ import annotations

from pigviz import lessons
from pigviz.lessons import prose

__all__ = ["register"]


def _cmd_verify(args) -> int:
    wanted = args.notebook or None
    if wanted:
        unknown = [n for n in wanted if n not in lessons.CLAIM_MODULES]
        if unknown:
            raise SystemExit(f"--notebook must be one of {', '.join(lessons.CLAIM_MODULES)}, got {', '.join(unknown)}")
    modules = None if not wanted else [lessons.CLAIM_MODULES[n] for n in wanted]
    claims, ok = lessons.run_claims(modules)
    failed = [c for c in claims if not c.passed]
    if not args.prose:
        print(lessons.format_table(claims))
        print()
    problems = prose.check_prose(args.notebooks, notebooks=wanted, claims=claims)
    print(prose.format_problems(problems))
    # The last line is the tally (pigviz data regenerate --check and the tests read it): each claim,
    # and the prose check as one more, which fails when any number in the markdown is not computed.
    if args.prose:
        print(f"{0 if problems else 1} passed, {1 if problems else 0} failed")
        return 1 if problems else 0
    print(f"{len(claims) - len(failed) + (not problems)} passed, {len(failed) + bool(problems)} failed")
    return 0 if ok and not problems else 1


def _cmd_exercises(args) -> int:
    return lessons.exercises.run_cli(self_test=args.self_test)


def register(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="re-derive every headline number the notebooks state, and check every number in their prose",
    )
    p.add_argument(
        "--prose",
        action="store_true",
        help="only the prose check: each number in a markdown cell is one a claim computes, or a listed definition",
    )
    p.add_argument(
        "--notebooks",
        metavar="DIR",
        default=None,
        help="the notebooks whose markdown to read (default: the shipped ones)",
    )
    p.add_argument(
        "--notebook",
        action="append",
        metavar="NN",
        help="only this notebook (01 ... 08, 05a, f1, ...); repeatable",
    )
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser(
        "exercises", help="list the exercises (notebook, name, signature); --self-test checks the checks"
    )
    p.add_argument(
        "--self-test",
        action="store_true",
        help="run each check on its reference (must pass), the blank and known wrong versions (must fail)",
    )
    p.set_defaults(func=_cmd_exercises)
