"""``pigviz notebooks DIR``: copy the learner notebooks into DIR. ``pigviz lab [DIR]``: do that if
needed, then start JupyterLab there."""

from __future__ import annotations

import subprocess
import sys

from pigviz import course

__all__ = ["register", "DEFAULT_LAB_DIR"]

DEFAULT_LAB_DIR = "pigviz-notebooks"


def _cmd_notebooks(args) -> int:
    try:
        report = course.copy_notebooks(args.dir, force=args.force)
    except course.LearnerChangesError as exc:
        print(exc.report.summary(), file=sys.stderr)
        print(f"pigviz notebooks: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    print(f"open them with: pigviz lab {args.dir}")
    return 0


def _cmd_lab(args) -> int:
    report = course.copy_notebooks(args.dir, strict=False)
    print(f"[lab] {report.summary()}")
    if report.kept:
        print(f"[lab] your changes to {', '.join(report.kept)} are kept (`pigviz notebooks {args.dir} --force` resets)")
    command, notes = course.lab_command(args.dir, extra=args.jupyter_args)
    for note in notes:
        print(f"[lab] {note}")
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130


def register(sub) -> None:
    p = sub.add_parser(
        "notebooks", help="copy the learner notebooks (blank exercises, no outputs) into DIR; edited ones are kept"
    )
    p.add_argument("dir", metavar="DIR", help="folder to copy them into (created if needed)")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace notebooks you changed too (your versions are kept as NAME.backup.ipynb)",
    )
    p.set_defaults(func=_cmd_notebooks)

    p = sub.add_parser("lab", help="copy the learner notebooks into DIR if needed, then start JupyterLab there")
    p.add_argument(
        "dir", metavar="DIR", nargs="?", default=DEFAULT_LAB_DIR, help=f"working folder (default: ./{DEFAULT_LAB_DIR})"
    )
    p.add_argument("jupyter_args", nargs="*", metavar="JUPYTER_ARG", help="passed on to `jupyter lab` (after --)")
    p.set_defaults(func=_cmd_lab)
