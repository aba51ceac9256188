"""``pigviz site``: the documentation site (the executed notebooks, the workshop guide and the
API reference), built by Sphinx from a clone of the repository; it works offline."""

from __future__ import annotations

from pigviz import site

__all__ = ["register"]


def _cmd_site(args) -> int:
    try:
        index = site.build_site(args.out, work_dir=args.work_dir, quiet=not args.verbose)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"pigviz site: {exc}")
        return 1
    print(f"wrote {index}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "site", help="build the documentation site: notebooks, workshop guide, API reference (works offline)"
    )
    p.add_argument("--out", default="site", help="output folder (default: site/)")
    p.add_argument(
        "--work-dir",
        default=None,
        help="where the staged sources and Sphinx's caches go (default: build/site/ of the clone)",
    )
    p.add_argument("--verbose", action="store_true", help="show sphinx-build's progress")
    p.set_defaults(func=_cmd_site)
