"""pigviz notebooks / pigviz lab: the learner copies land in the learner's folder, and a notebook
the learner changed is never overwritten."""

import json
import re
from pathlib import Path

import pytest

from pigviz import course
from pigviz.cli import course as course_cli
from pigviz.cli import main


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A fake package folder of learner copies, so a test can 'upgrade' pigviz."""
    folder = tmp_path / "package-notebooks"
    folder.mkdir()
    for name in ("01_a.ipynb", "02_b.ipynb"):
        (folder / name).write_text(json.dumps({"cells": [], "name": name}))
    monkeypatch.setattr(course, "learner_dir", lambda: folder)
    return folder


def test_the_real_learner_copies_are_found_in_teaching_order():
    names = [p.name for p in course.learner_notebooks()]
    assert names == sorted(names) and names[0].startswith("01_") and len(names) >= 8
    with_findings = course.learner_notebooks(findings=True)
    assert [p.name for p in with_findings[: len(names)]] == names
    assert [p.parent.name for p in with_findings[len(names) :]] == [course.FINDINGS_FOLDER] * (
        len(with_findings) - len(names)
    )
    assert len(with_findings) > len(names)


def test_the_findings_are_copied_into_their_folder_and_a_lessons_link_reaches_them(tmp_path):
    report = course.copy_notebooks(tmp_path / "course")
    findings = sorted(p.name for p in (tmp_path / "course" / course.FINDINGS_FOLDER).glob("*.ipynb"))
    assert findings and all(f"{course.FINDINGS_FOLDER}/{n}" in report.copied for n in findings)
    lesson = json.loads(next((tmp_path / "course").glob("06b_*.ipynb")).read_text())
    linked = {m for c in lesson["cells"] for m in re.findall(r"\((findings/[^)]+\.ipynb)\)", "".join(c["source"]))}
    assert linked and all((tmp_path / "course" / link).is_file() for link in linked), linked
    notation = tmp_path / "course" / course.NOTATION  # the page every lesson links to
    assert course.NOTATION in report.copied and notation.read_text().startswith("# Notation")
    again = course.copy_notebooks(tmp_path / "course")
    assert not again.copied and not again.updated


def test_copy_then_copy_again_changes_nothing(shipped, tmp_path):
    dest = tmp_path / "mine"
    report = course.copy_notebooks(dest)
    assert report.copied == ["01_a.ipynb", "02_b.ipynb"] and not report.kept
    assert (dest / "01_a.ipynb").read_text() == (shipped / "01_a.ipynb").read_text()
    again = course.copy_notebooks(dest)
    assert again.unchanged == ["01_a.ipynb", "02_b.ipynb"] and not again.copied


def test_an_untouched_copy_is_updated_and_an_edited_one_is_kept(shipped, tmp_path):
    dest = tmp_path / "mine"
    course.copy_notebooks(dest)
    (dest / "02_b.ipynb").write_text("my answers")  # the learner's work
    for name in ("01_a.ipynb", "02_b.ipynb"):  # a newer pigviz ships new copies
        (shipped / name).write_text(json.dumps({"cells": [], "name": name, "version": 2}))
    with pytest.raises(course.LearnerChangesError, match=r"02_b\.ipynb.*--force") as info:
        course.copy_notebooks(dest)
    assert info.value.report.updated == ["01_a.ipynb"] and info.value.report.kept == ["02_b.ipynb"]
    assert (dest / "02_b.ipynb").read_text() == "my answers"
    assert '"version": 2' in (dest / "01_a.ipynb").read_text()


def test_a_file_pigviz_never_wrote_counts_as_the_learners(shipped, tmp_path):
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "01_a.ipynb").write_text("written before pigviz kept a record")
    report = course.copy_notebooks(dest, strict=False)
    assert report.kept == ["01_a.ipynb"] and report.copied == ["02_b.ipynb"]


def test_force_replaces_an_edited_copy_and_keeps_the_learners_version_beside_it(shipped, tmp_path):
    dest = tmp_path / "mine"
    course.copy_notebooks(dest)
    (dest / "01_a.ipynb").write_text("first attempt")
    course.copy_notebooks(dest, force=True)
    assert (dest / "01_a.backup.ipynb").read_text() == "first attempt"
    (dest / "01_a.ipynb").write_text("second attempt")
    report = course.copy_notebooks(dest, force=True)
    assert report.backups == ["01_a.backup-2.ipynb"]
    assert (dest / "01_a.ipynb").read_text() == (shipped / "01_a.ipynb").read_text()


def test_a_file_in_place_of_the_folder_is_refused(shipped, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(NotADirectoryError, match="dest must be a folder"):
        course.copy_notebooks(target)


def test_cli_names_the_kept_file_and_how_to_force(shipped, tmp_path, capsys):
    dest = tmp_path / "mine"
    assert main(["notebooks", str(dest)]) == 0
    assert "2 copied" in capsys.readouterr().out
    (dest / "01_a.ipynb").write_text("mine")
    (shipped / "01_a.ipynb").write_text("{}")
    assert main(["notebooks", str(dest)]) == 1
    err = capsys.readouterr().err
    assert "01_a.ipynb" in err and f"pigviz notebooks {dest} --force" in err
    assert main(["notebooks", str(dest), "--force"]) == 0


def test_lab_copies_when_needed_then_starts_jupyterlab_there(shipped, tmp_path, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(course_cli.subprocess, "call", lambda cmd: started.append(cmd) or 0)
    monkeypatch.setattr(course, "_is_root", lambda: True)
    monkeypatch.setattr(course, "_headless", lambda: True)
    dest = tmp_path / "lab"
    assert main(["lab", str(dest)]) == 0
    (cmd,) = started
    assert cmd[1:4] == ["-m", "jupyter", "lab"] and f"--notebook-dir={dest}" in cmd
    assert "--allow-root" in cmd and "--no-browser" in cmd
    out = capsys.readouterr().out
    assert "2 copied" in out and "open the http://127.0.0.1:8888/lab?token=... URL" in out
    (dest / "01_a.ipynb").write_text("mine")
    assert main(["lab", str(dest)]) == 0  # an edited notebook does not stop the lab from starting
    assert "your changes to 01_a.ipynb are kept" in capsys.readouterr().out


def test_lab_as_a_normal_user_with_a_display_adds_no_flags(monkeypatch, tmp_path):
    monkeypatch.setattr(course, "_is_root", lambda: False)
    monkeypatch.setattr(course, "_headless", lambda: False)
    command, notes = course.lab_command(tmp_path)
    assert "--allow-root" not in command and "--no-browser" not in command and not notes


SOURCES = sorted((Path(__file__).resolve().parents[1] / "notebooks" / "src").glob("[0-9][0-9]*_*.py"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_every_notebook_opens_with_its_colab_badge_and_the_colab_set_up_cell(source):
    import jupytext

    cells = jupytext.read(source, fmt="py:percent").cells
    first_markdown = next(c for c in cells if c.cell_type == "markdown")
    first_code = next(c for c in cells if c.cell_type == "code")
    assert course.colab_badge(f"{source.stem}.ipynb") in first_markdown.source
    assert first_code.source == course.COLAB_SETUP_CELL, "copy pigviz.course.COLAB_SETUP_CELL into the notebook"


def test_the_colab_cell_does_nothing_outside_colab():
    namespace = {}
    exec(course.COLAB_SETUP_CELL, namespace)  # noqa: S102 - our own cell
    assert namespace["IN_COLAB"] is False
