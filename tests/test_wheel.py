"""A plain `pip install` of pigviz carries the whole course: built as a wheel, installed (not
editable) into a fresh virtual environment, and used from a folder that has nothing to do with
the repository, it verifies every claim, copies the learner notebooks, and runs them."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEEL_LIMIT_MB = 15


def _run(cmd, cwd, env=None, timeout=900):
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, its pigviz command, an unrelated working folder) with pigviz from a wheel."""
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "--no-build-isolation", "-q", "-w", dist], tmp)
    (wheel,) = dist.glob("pigviz-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", venv], tmp)
    python = venv / "bin" / "python"
    # The test environment's packages (torch, transformers, jupyter...) without its editable pigviz:
    # a path in a .pth file is put on sys.path, but .pth files inside it are not run, so the editable
    # finder stays off and the wheel's pigviz, first on the path, is the one imported.
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).stdout.strip())
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], tmp)
    work = tmp / "elsewhere"
    work.mkdir()
    return {"python": python, "pigviz": venv / "bin" / "pigviz", "work": work, "wheel": wheel, "site": site}


@pytest.mark.slow
def test_the_wheel_is_small_and_holds_the_data_and_the_learner_notebooks(installed):
    import zipfile

    size_mb = installed["wheel"].stat().st_size / 2**20
    print(f"wheel: {installed['wheel'].name}, {size_mb:.1f} MiB")
    assert size_mb < WHEEL_LIMIT_MB
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    assert "pigviz/data/manifest.json" in names and "pigviz/data/smollm2_8k_capture.safetensors" in names
    notebooks = [n for n in names if n.startswith("pigviz/notebooks/") and n.endswith(".ipynb")]
    src = ROOT / "notebooks" / "src"
    assert len(notebooks) == len(list(src.glob("[0-9][0-9]*_*.py"))) + len(list(src.glob("findings/f[0-9]*_*.py")))
    assert any(n.startswith("pigviz/notebooks/findings/f1_") for n in notebooks)


@pytest.mark.slow
def test_the_installed_package_is_the_wheel_not_the_repository(installed):
    where = _run([installed["python"], "-c", "import pigviz, sys; print(pigviz.__file__)"], installed["work"])
    path = Path(where.stdout.strip()).resolve()
    assert path.is_relative_to(installed["site"].resolve()), path
    data = _run(
        [installed["python"], "-c", "from pigviz.model.shipped import data_dir; print(data_dir())"], installed["work"]
    )
    assert Path(data.stdout.strip()).resolve().is_relative_to(installed["site"].resolve())


@pytest.mark.slow
@pytest.mark.model
def test_verify_passes_from_a_wheel_install_in_an_unrelated_folder(installed):
    env = {k: v for k, v in os.environ.items() if k != "PIGVIZ_DATA_DIR"}
    done = _run([installed["pigviz"], "verify"], installed["work"], env=env)
    last = done.stdout.strip().splitlines()[-1]
    print(last)
    assert last.endswith(" 0 failed") and "FAIL" not in done.stdout.replace("0 failed", "")


@pytest.mark.slow
@pytest.mark.model
def test_learner_notebooks_copied_from_the_wheel_run(installed):
    course = installed["work"] / "course"
    done = _run([installed["pigviz"], "notebooks", course], installed["work"])
    assert "copied" in done.stdout
    copied = sorted(p.name for p in course.glob("*.ipynb"))
    assert copied and copied[0].startswith("01_")
    for name in copied:
        nb = json.loads((course / name).read_text())
        assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code"), name
    # Run 01 and 06 as a learner's kernel would, with the references standing in for the blanks.
    script = (
        "import sys, nbformat\n"
        "from nbclient import NotebookClient\n"
        "site = sys.argv[1]\n"
        "for path in sys.argv[2:]:\n"
        "    nb = nbformat.read(path, as_version=4)\n"
        "    # The kernel must import the wheel's pigviz, not the repository's.\n"
        "    check = f'import pigviz; assert pigviz.__file__.startswith({site!r})'\n"
        "    nb.cells.append(nbformat.v4.new_code_cell(check))\n"
        "    NotebookClient(nb, timeout=600, kernel_name='python3', resources={'metadata': {'path': '.'}}).execute()\n"
        "    errors = [o for c in nb.cells for o in c.get('outputs', []) if o.get('output_type') == 'error']\n"
        "    assert not errors, (path, errors[:1])\n"
        "    print('ran', path)\n"
    )
    targets = [next(course.glob("01_*.ipynb")), next(course.glob("06a_*.ipynb"))]
    env = dict(os.environ, PIGVIZ_SOLUTIONS="1")
    env.pop("PIGVIZ_DATA_DIR", None)
    done = _run([installed["python"], "-c", script, installed["site"], *targets], course, env=env)
    assert done.stdout.count("ran ") == 2, done.stdout
