"""How many threads this process may use: the CPUs it may run on, capped by a cgroup CPU quota.

Binder and most container hosts give a container a fraction of a many-core machine through a
CPU quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``) while every
core stays visible. torch, numba and OpenBLAS start one thread per visible core; past the quota
those threads are throttled in turn and wait for each other at every barrier, so a 1-CPU quota
on a 64-core host runs far slower with 64 threads than with one. ``limit_to_quota`` caps them at
the quota, and changes nothing where no quota is set (the second core stays in use when free).
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
from contextlib import contextmanager
from pathlib import Path

# threadpoolctl finds the BLAS numpy loaded (OpenBLAS in numpy's wheels) and sets its pool, which
# no variable can change once numpy is imported.
from threadpoolctl import threadpool_info, threadpool_limits

__all__ = [
    "visible_cpus",
    "cpu_quota",
    "usable_cores",
    "limit_to_quota",
    "others_busy",
    "fitting_threads",
    "fitted_threads",
    "blas_threads",
    "settle_for_notebooks",
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The variables the thread pools read when they start: set only where the user has not.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")


def visible_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity; every CPU where the OS does not say)."""
    if hasattr(os, "sched_getaffinity"):
        return os.sched_getaffinity(0)
    return set(range(os.cpu_count() or 1))


def cpu_model(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first "model name"), else the platform's
    processor or machine: what a timing was measured on, written beside it."""
    text = _read(Path(cpuinfo)) or ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def cpu_quota(root: str | os.PathLike = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (1.5 = one and a half cores), or None when
    no quota is set or none can be read. cgroup v2 first (``cpu.max``: "quota period" or "max
    period"), then v1 (``cpu/cpu.cfs_quota_us``, -1 for none, over ``cpu.cfs_period_us``)."""
    root = Path(root)
    v2 = _read(root / "cpu.max")
    if v2 is not None:
        parts = v2.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                quota, period = int(parts[0]), int(parts[1])
            except ValueError:
                return None
            return quota / period if quota > 0 and period > 0 else None
        return None
    for folder in (root / "cpu", root / "cpu,cpuacct", root):
        quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        if quota is None or period is None:
            continue
        try:
            q, p = int(quota), int(period)
        except ValueError:
            return None
        return q / p if q > 0 and p > 0 else None
    return None


def usable_cores(root: str | os.PathLike = CGROUP_ROOT) -> int:
    """The CPUs this process may run on (its affinity), capped by the cgroup quota rounded down
    (a thread past the quota is throttled, not run), and at least one."""
    visible = len(visible_cpus())
    quota = cpu_quota(root)
    if quota is None:
        return max(1, visible)
    return max(1, min(visible, math.floor(quota + 1e-9)))


def limit_to_quota(root: str | os.PathLike = CGROUP_ROOT) -> int | None:
    """Cap the thread pools at the cgroup quota; return the cap, or None where no quota applies
    (nothing is changed then). Sets the start-up variables the user has not set, and lowers the
    thread count of torch, numba and numpy's BLAS where they are already loaded (never raises it)."""
    visible = len(visible_cpus())
    cap = usable_cores(root)
    if cap >= visible:
        return None
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(cap))
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() > cap:
        torch.set_num_threads(cap)
    numba = sys.modules.get("numba")
    if numba is not None:
        try:
            if numba.get_num_threads() > cap:
                numba.set_num_threads(cap)
        except (ValueError, RuntimeError):  # a numba without a threading layer here
            pass
    if blas_threads() > cap:
        threadpool_limits(limits=cap, user_api="blas")
    return cap


def blas_threads() -> int:
    """The most threads a loaded BLAS (numpy's OpenBLAS) runs, 1 where none is loaded."""
    return max((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"), default=1)


def settle_for_notebooks() -> None:
    """Thread settings for a notebook kernel, which shares its machine with a browser, a Jupyter
    server and whatever else runs there. Measured beside a CPU hog on two cores (notebook 08,
    ``benchmarks/bench_busy_core.py``): idle OpenMP threads that spin (libgomp's default, for
    torch and numba) took 2.6x on a cell they slept through, and numpy's two BLAS threads made a
    loop of matrix-vector products 7x slower, while on a free machine that second BLAS thread
    gained nothing measurable on the lessons' arrays. So idle OpenMP threads sleep (where torch
    and numba are not loaded yet; a value the user set is kept) and numpy's BLAS runs one thread
    unless ``OPENBLAS_NUM_THREADS`` says otherwise. torch and numba keep every core; their loops
    fit themselves to the free ones (:func:`fitted_threads`)."""
    if "torch" not in sys.modules and "numba" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "OPENBLAS_NUM_THREADS" not in os.environ and blas_threads() > 1:
        threadpool_limits(limits=1, user_api="blas")


# -- a busy machine ------------------------------------------------------------------------------
# Where another process keeps one of our cores busy, a thread team that splits every operation in
# two waits at each operation's end for the thread that shares its core: measured here, 08's SparQ
# evaluation took 65 s with torch's two threads beside a busy core against 19 s with one. The
# loops of many small operations (an estimator over captured rows, a decode step's layers) check
# how much of the machine is free when they start and run with the threads that fit.


def _busy_jiffies(cpus: set[int]) -> int | None:
    """Busy time (clock ticks) of ``cpus`` since boot, from /proc/stat's per-CPU lines."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3:4].isdigit()]
    except OSError:
        return None
    busy = 0
    for fields in lines:
        if int(fields[0][3:]) in cpus:
            ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
            busy += sum(ticks) - ticks[3] - ticks[4]
    return busy


def others_busy(window: float = 0.1) -> float | None:
    """How many of this process's CPUs other processes kept busy over the next ``window``
    seconds (1.0 = one whole core), or None where /proc/stat cannot be read. This process's own
    threads are subtracted (its CPU time over the same window)."""
    cpus = visible_cpus()
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    before, own_before, t0 = _busy_jiffies(cpus), sum(os.times()[:2]), time.monotonic()
    if before is None:
        return None
    time.sleep(window)
    after, own_after, t1 = _busy_jiffies(cpus), sum(os.times()[:2]), time.monotonic()
    if after is None:
        return None
    return max(0.0, ((after - before) / hz - (own_after - own_before)) / max(t1 - t0, 1e-9))


def fitting_threads(threads: int, busy: float | None, cores: int) -> int:
    """The threads that fit beside ``busy`` cores of other work on ``cores``: one less for every
    core another process keeps more than a quarter busy (a thread sharing its core with a busy
    process stalls the team), never more than ``threads`` asked for, never fewer than one."""
    if busy is None:
        return threads
    return max(1, min(threads, math.floor(cores - busy + 0.25)))


@contextmanager
def fitted_threads(window: float = 0.1):
    """Run the block with torch's and numpy's BLAS thread counts fitted to the free cores
    (measured now, over ``window`` seconds), and restore them after. Nothing is measured where
    both already run one thread. Yields the threads the block runs with."""
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else 1
    threads = max(torch_threads, blas_threads())
    if threads <= 1:
        yield threads
        return
    cores = len(visible_cpus())
    fit = fitting_threads(threads, others_busy(window), cores)
    if fit == threads:
        yield threads
        return
    # OpenBLAS's pool splits each matrix product across its threads like torch's team does, and
    # stalls the same way beside a busy core (numpy estimators ran 4-16x slower there).
    with threadpool_limits(limits=fit, user_api="blas"):
        if torch is not None and torch_threads > fit:
            torch.set_num_threads(fit)
        try:
            yield fit
        finally:
            if torch is not None:
                torch.set_num_threads(torch_threads)
