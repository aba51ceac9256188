"""``pigviz verify``: re-derive every number the notebooks state."""
from __future__ import annotations

from pigviz import lessons

__all__ = ["register"]


def _cmd_verify(args) -> int:
    claims, ok = lessons.run_claims()
    print(lessons.format_table(claims))
    failed = [c for c in claims if not c.passed]
    print(f"\n{len(claims) - len(failed)} passed, {len(failed)} failed")
    return 0 if ok else 1


def register(sub) -> None:
    p = sub.add_parser("verify", help="re-derive every headline number the notebooks state")
    p.set_defaults(func=_cmd_verify)
