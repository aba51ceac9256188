"""``pigviz site``: a static HTML site of the executed notebooks."""

from __future__ import annotations

from pigviz import site

__all__ = ["register"]


def _cmd_site(args) -> int:
    print(f"wrote {site.build_site(args.out)}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("site", help="build a static HTML site of the executed notebooks (works offline)")
    p.add_argument("--out", default="site", help="output folder (default: site/)")
    p.set_defaults(func=_cmd_site)
