"""The thread cap from a cgroup CPU quota: read from fake cgroup trees, applied only under a quota."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from threadpoolctl import threadpool_limits

from pigviz._util import threads

VISIBLE = len(os.sched_getaffinity(0))


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("files", "quota"),
    [
        ({"cpu.max": "150000 100000\n"}, 1.5),  # v2: one and a half CPUs
        ({"cpu.max": "max 100000\n"}, None),  # v2: no quota
        ({"cpu.max": "garbage"}, None),
        ({"cpu/cpu.cfs_quota_us": "200000", "cpu/cpu.cfs_period_us": "100000"}, 2.0),  # v1
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),  # v1: none
        ({"cpu,cpuacct/cpu.cfs_quota_us": "50000", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, 0.5),
        ({}, None),  # no cgroup files at all (macOS, a bare chroot)
    ],
)
def test_cpu_quota_reads_v1_and_v2(tmp_path, files, quota):
    assert threads.cpu_quota(_tree(tmp_path, files)) == quota


@pytest.mark.parametrize(("quota", "cores"), [("50000 100000", 1), ("100000 100000", 1), ("150000 100000", 1)])
def test_usable_cores_rounds_the_quota_down_and_keeps_one(tmp_path, quota, cores):
    assert threads.usable_cores(_tree(tmp_path, {"cpu.max": quota})) == min(cores, VISIBLE)


def test_no_quota_uses_every_visible_core(tmp_path):
    assert threads.usable_cores(_tree(tmp_path, {"cpu.max": "max 100000"})) == VISIBLE


def _run(code: str, env: dict) -> str:
    env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


CODE = """
import torch, os
from pigviz._util.threads import limit_to_quota
before = torch.get_num_threads()
cap = limit_to_quota({root!r})
print(cap, before, torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"))
"""


@pytest.mark.skipif(VISIBLE < 2, reason="a quota below the visible cores needs two of them")
def test_a_quota_below_the_cores_caps_torch_and_the_start_up_variables(tmp_path):
    root = _tree(tmp_path, {"cpu.max": "100000 100000"})
    cap, before, after, omp = _run(CODE.format(root=str(root)), {"OMP_NUM_THREADS": None}).split()
    assert (cap, after, omp) == ("1", "1", "1") and int(before) > 1


def test_without_a_quota_nothing_changes(tmp_path):
    root = _tree(tmp_path, {"cpu.max": "max 100000"})
    cap, before, after, omp = _run(CODE.format(root=str(root)), {"OMP_NUM_THREADS": None}).split()
    assert cap == "None" and before == after and omp == "None"


@pytest.mark.skipif(VISIBLE < 2, reason="a quota below the visible cores needs two of them")
def test_a_variable_the_user_set_is_kept(tmp_path):
    root = _tree(tmp_path, {"cpu.max": "100000 100000"})
    *_, omp = _run(CODE.format(root=str(root)), {"OMP_NUM_THREADS": "2"}).split()
    assert omp == "2"


def test_binder_start_execs_its_arguments_with_the_cap():
    start = Path(__file__).parents[1] / "binder" / "start"
    assert os.access(start, os.X_OK)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    out = subprocess.run([str(start), "sh", "-c", "echo $OMP_NUM_THREADS"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == str(threads.usable_cores())


@pytest.mark.parametrize(
    ("n", "busy", "cores", "fit"),
    [
        (2, 0.0, 2, 2),  # a free machine keeps its second thread
        (2, 0.1, 2, 2),  # noise is not a busy core
        (2, 1.0, 2, 1),  # one core taken: one thread
        (2, 0.5, 2, 1),  # half a core taken still stalls a team of two
        (2, 2.0, 2, 1),  # never fewer than one
        (4, 1.0, 8, 4),  # never more than asked
        (2, None, 2, 2),  # nothing measured: nothing changes
    ],
)
def test_fitting_threads(n, busy, cores, fit):
    assert threads.fitting_threads(n, busy, cores) == fit


HOG = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"


@pytest.mark.skipif(VISIBLE < 2, reason="a busy core beside a free one needs two")
def test_a_busy_core_is_seen_and_the_block_runs_on_the_free_one():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        time.sleep(0.3)  # the hog is spinning
        assert threads.others_busy(0.3) >= 0.5
        with threads.fitted_threads() as inside:
            assert inside == 1 and torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2  # restored after the block
    finally:
        hog.kill()
        hog.wait()
        torch.set_num_threads(before)


def test_fitted_threads_measures_nothing_on_one_thread(monkeypatch):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(threads, "others_busy", lambda window=0.1: pytest.fail("measured on one thread"))
    try:
        with threadpool_limits(limits=1, user_api="blas"), threads.fitted_threads() as inside:
            assert inside == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(VISIBLE < 2, reason="a busy core beside a free one needs two")
def test_numpys_blas_pool_is_fitted_too_and_restored(monkeypatch):
    np = pytest.importorskip("numpy")
    np.ones((64, 64)) @ np.ones((64, 64))  # numpy's BLAS is loaded
    monkeypatch.setattr(threads, "others_busy", lambda window=0.1: 1.0)  # one of two cores taken
    monkeypatch.setattr(threads, "visible_cpus", lambda: {0, 1})
    with threadpool_limits(limits=2, user_api="blas"):
        if threads.blas_threads() != 2:
            pytest.skip("this numpy's BLAS cannot run two threads")
        with threads.fitted_threads() as inside:
            assert inside == 1 and threads.blas_threads() == 1
        assert threads.blas_threads() == 2  # restored after the block


SETTLE = """
import os, json
import pigviz
from pigviz._util import threads
pigviz.setup_notebook()
print(json.dumps({"blas": threads.blas_threads(), "wait": os.environ.get("OMP_WAIT_POLICY")}))
"""


@pytest.mark.skipif(VISIBLE < 2, reason="numpy's BLAS starts one thread per core: one core shows nothing")
@pytest.mark.parametrize(
    "env, want",
    [
        ({}, {"blas": 1, "wait": "PASSIVE"}),  # a notebook kernel: one BLAS thread, idle threads sleep
        ({"OPENBLAS_NUM_THREADS": "2", "OMP_WAIT_POLICY": "ACTIVE"}, {"blas": 2, "wait": "ACTIVE"}),  # the user's
    ],
)
def test_a_notebook_kernel_runs_numpys_blas_on_one_thread_unless_told(env, want):
    clean = {k: v for k, v in os.environ.items() if k not in (*threads.THREAD_VARIABLES, "OMP_WAIT_POLICY")}
    out = subprocess.run(
        [sys.executable, "-c", SETTLE], env={**clean, **env}, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == want


def test_cpu_model_reads_the_model_name(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9B14\nflags\t: fpu\n")
    assert threads.cpu_model(info) == "AMD EPYC 9B14"
    info.write_text("processor\t: 0\n")  # no model name (some ARM kernels): the platform's name instead
    assert threads.cpu_model(info) and threads.cpu_model(info) != "AMD EPYC 9B14"
