"""scripts/setup.sh on a GPU runtime, on a CPU machine, and without the venv module.

The "system" Python is this interpreter's base (not the project's venv) with a user site of its
own (``PYTHONUSERBASE``) holding a stand-in ``torch`` package: a CUDA build or a CPU build, as
the case needs. A venv sees a user site only when it sees the system packages, so the stand-in
shows exactly whether setup created the venv with ``--system-site-packages``. The script runs
with ``PIGVIZ_SETUP_DRY_RUN=1``: it creates the venv for real and prints each install instead of
running it, so nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup.sh"
BASE_PYTHON = getattr(sys, "_base_executable", None) or sys.executable

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or not sys.platform.startswith("linux"), reason="setup.sh is a bash script"
)


def _user_site(userbase: Path) -> Path:
    return Path(sysconfig.get_path("purelib", f"{os.name}_user", vars={"userbase": str(userbase)}))


def _stand_in_torch(userbase: Path, version: str, cuda: str | None) -> None:
    pkg = _user_site(userbase) / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"from . import version\n__version__ = {version!r}\n", encoding="utf-8")
    (pkg / "version.py").write_text(f"cuda = {cuda!r}\n", encoding="utf-8")


def _env(tmp_path: Path, **extra) -> dict:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONNOUSERSITE")
    }
    bin_dir = str(ROOT / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir)
    env.update(PIGVIZ_SETUP_DRY_RUN="1", PIGVIZ_VENV=str(tmp_path / "venv"), PYTHON=BASE_PYTHON)
    env.update(extra)
    return env


def _setup(env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, env=env, timeout=300)


def _venv_torch(venv: Path, env) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
        capture_output=True,
        text=True,
        env=env,
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def _system_sees_no_torch(env) -> bool:
    done = subprocess.run([BASE_PYTHON, "-c", "import torch"], capture_output=True, env=env)
    return done.returncode != 0


def test_a_gpu_runtime_keeps_its_cuda_torch(tmp_path):
    userbase = tmp_path / "userbase"
    _stand_in_torch(userbase, "2.13.0+cu124", "12.4")
    env = _env(tmp_path, PYTHONUSERBASE=str(userbase))
    done = _setup(env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    kept = [line for line in out.splitlines() if "GPU runtime: keeping" in line]
    assert len(kept) == 1 and "CUDA build of torch 2.13.0+cu124 (CUDA 12.4)" in kept[0], out
    assert "include-system-site-packages = true" in (tmp_path / "venv" / "pyvenv.cfg").read_text()
    assert _venv_torch(tmp_path / "venv", env) == "2.13.0+cu124 12.4"
    assert "torch 2.13.0+cu124 with CUDA 12.4 already installed: kept" in out
    assert "would run pip install -q torch" not in out and "installing the CPU build" not in out, out
    assert "would run pip install -q -e .[test]" in out  # the rest is installed as usual


def test_a_cpu_machine_gets_the_cpu_build_in_its_own_venv(tmp_path):
    userbase = tmp_path / "userbase"
    _stand_in_torch(userbase, "2.13.0+cpu", None)  # a CPU torch outside the venv is not borrowed
    env = _env(tmp_path, PYTHONUSERBASE=str(userbase))
    done = _setup(env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "GPU runtime" not in out
    assert "include-system-site-packages = false" in (tmp_path / "venv" / "pyvenv.cfg").read_text()
    assert _venv_torch(tmp_path / "venv", env) == ""
    assert "would run pip install -q torch --index-url https://download.pytorch.org/whl/cpu" in out, out


def test_without_the_venv_module_setup_names_the_package_to_install(tmp_path):
    # Debian's python3 without python3-venv: `import venv` works, ensurepip is missing.
    blocker = tmp_path / "block"
    (blocker / "ensurepip").mkdir(parents=True)
    (blocker / "ensurepip" / "__init__.py").write_text("raise ImportError('no ensurepip here')\n")
    fake = tmp_path / "python3"
    fake.write_text(f'#!/bin/sh\nPYTHONPATH={blocker} exec {BASE_PYTHON} "$@"\n')
    fake.chmod(0o755)
    env = _env(tmp_path, PYTHON=str(fake))
    done = _setup(env)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install python3-venv" in lines[0], done.stderr
    assert not (tmp_path / "venv").exists()
