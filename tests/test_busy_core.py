"""The heaviest lesson runs through beside a process that keeps a core busy.

A browser, a Jupyter server or a neighbour on a shared host takes a core; a thread team that splits
small operations then waits at each one for the thread that shares its core (08's Run All once did
not finish within 420 s there). The kernel's thread settings (``pigviz.setup_notebook``) and the
fitted loops keep it going; ``benchmarks/bench_busy_core.py`` prints the per-cell ratios. This test
holds the behaviour: Run All of notebook 08 beside a CPU hog finishes, every cell within the same
limit nbval gives a cell, with the kernel settled as ``setup_notebook`` says."""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
HOG = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end: pass\n"
PROBE = (
    "import os, json\nfrom pigviz._util import threads\n"
    "print(json.dumps([threads.blas_threads(), os.environ.get('OMP_WAIT_POLICY')]))"
)


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a busy core beside a free one needs two")
def test_notebook_08_runs_through_beside_a_busy_core(monkeypatch, tmp_path):
    monkeypatch.setenv("PIGVIZ_SOLUTIONS", "1")
    monkeypatch.setenv("PIGVIZ_MINE_DIR", str(tmp_path / "mine"))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    (path,) = sorted((ROOT / "notebooks").glob("08_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
    finally:
        hog.kill()
        hog.wait()
    probe = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert probe.strip() == '[1, "PASSIVE"]'  # numpy's BLAS on one thread, idle OpenMP threads asleep
