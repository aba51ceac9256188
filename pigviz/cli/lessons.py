"""``pigviz verify``: re-derive every number the notebooks state. ``pigviz exercises``: list the
exercises; ``--self-test`` checks that every check passes its reference and rejects the blank and
its known wrong versions."""

from __future__ import annotations

from pigviz import lessons

__all__ = ["register"]


def _cmd_verify(args) -> int:
    claims, ok = lessons.run_claims()
    print(lessons.format_table(claims))
    failed = [c for c in claims if not c.passed]
    print(f"\n{len(claims) - len(failed)} passed, {len(failed)} failed")
    return 0 if ok else 1


def _cmd_exercises(args) -> int:
    return lessons.exercises.run_cli(self_test=args.self_test)


def register(sub) -> None:
    p = sub.add_parser("verify", help="re-derive every headline number the notebooks state")
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
