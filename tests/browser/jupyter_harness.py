"""Start a real JupyterLab server and a headless Chromium for the browser tests.

Everything runs in a temporary directory (notebook copies, Jupyter config/runtime dirs), on a
free localhost port with a random token, and is torn down even when a test fails: kernels are
shut down through the REST API, then the server's whole process group is ended.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from pigviz.site import NOTEBOOK_GLOB

from .waits import describe_timeout, timeout

CHROMIUM = os.environ.get("PIGVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
INSTALL_HINT = (
    "The browser tests need Debian's chromium and Python's playwright: "
    "`apt-get install -y chromium` and `pip install playwright` "
    "(`playwright install` cannot download a browser offline; pigviz uses /usr/bin/chromium, "
    "or set PIGVIZ_CHROMIUM to another Chromium binary)."
)


class HarnessError(RuntimeError):
    pass


class PortTaken(HarnessError):
    pass


def require_browser_tools() -> None:
    if not Path(CHROMIUM).exists():
        raise HarnessError(f"Chromium not found at {CHROMIUM}. {INSTALL_HINT}")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        raise HarnessError(f"Python package playwright is missing. {INSTALL_HINT}") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_quiet_lab_config(config_dir: Path, settings_dir: Path) -> None:
    """Turn off the news pop-up and update checks (they cover widgets in screenshots and try
    to reach the network), and render every cell: JupyterLab 4 otherwise keeps cells outside
    the viewport out of the DOM, and the tests could not see their figures."""
    tracker = settings_dir / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True, exist_ok=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    labconfig = config_dir / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    (labconfig / "page_config.json").write_text(
        json.dumps(
            {
                "disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True},
            }
        )
    )
    (config_dir / "jupyter_server_config.json").write_text(
        json.dumps(
            {
                "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate"},
            }
        )
    )


def isolated_env(workdir: Path, *, solutions: bool = True, **extra: str) -> dict:
    """The environment for a server and its kernels, cut off from the user's and other runs'
    Jupyter and IPython state: config, runtime (connection files), data (user kernelspecs
    that could point at another Python) and the IPython profile (startup scripts, and a
    history.sqlite that every kernel of every run on the machine would otherwise share)."""
    workdir = Path(workdir)
    return dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(workdir / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(workdir / "jupyter-runtime"),
        JUPYTER_DATA_DIR=str(workdir / "jupyter-data"),
        IPYTHONDIR=str(workdir / "ipython"),
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        # The notebooks' blank exercises run with their reference solutions, as in nbval; a
        # learner's server (solutions=False) leaves them blank.
        PIGVIZ_SOLUTIONS="1" if solutions else "0",
        # What a learner's passing functions are kept as (ex.mine): per run, never the user's own.
        PIGVIZ_MINE_DIR=str(workdir / "mine"),
        **extra,
    )


class JupyterLabServer:
    def __init__(
        self,
        root: Path,
        workdir: Path,
        port: int | None = None,
        startup_timeout: float | None = None,
        solutions: bool = True,
    ):
        self.root = Path(root)
        self.solutions = solutions
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.token = secrets.token_hex(16)
        self.startup_timeout = startup_timeout if startup_timeout is not None else timeout("server_start")
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / "jupyter-server.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}/{path.lstrip('/')}{sep}token={self.token}"

    def api(self, path: str, method: str = "GET"):
        """One REST call to the server, parsed. A slow answer on a loaded machine is not an
        error: the timeout is the element deadline, not a fixed 10 s."""
        req = urllib.request.Request(self.url(path), method=method)
        with urllib.request.urlopen(req, timeout=timeout("element")) as resp:
            body = resp.read()
            return json.loads(body) if body else None

    def start(self, attempts: int = 3) -> "JupyterLabServer":
        """Start the server and wait until it answers. The port was free when chosen, but
        another process on a shared machine can take it before the server binds it: then
        the server exits at once, and another free port is tried."""
        for attempt in range(attempts):
            try:
                return self._start_once()
            except PortTaken:
                if attempt == attempts - 1:
                    raise HarnessError(
                        f"JupyterLab could not bind a free port in {attempts} tries; "
                        f"last log:\n{self.log_path.read_text()[-3000:]}"
                    ) from None
                self.port = free_port()

    def _start_once(self) -> "JupyterLabServer":
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", self.port)) == 0:
                raise PortTaken(self.port)
        config_dir = self.workdir / "jupyter-config"
        settings_dir = self.workdir / "lab-user-settings"
        write_quiet_lab_config(config_dir, settings_dir)
        env = isolated_env(self.workdir, solutions=self.solutions)
        cmd = [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            f"--port={self.port}",
            "--port-retries=0",
            "--ip=127.0.0.1",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            f"--LabApp.user_settings_dir={settings_dir}",
            f"--LabApp.workspaces_dir={self.workdir / 'lab-workspaces'}",
            "--ServerApp.disable_check_xsrf=True",
            "--allow-root",
            # the waits read a collapsed cell's execution count from its model (its prompt is not in the page)
            "--LabApp.expose_app_in_browser=True",
        ]
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=self.root, start_new_session=True
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self._log.close()
                self.proc = None
                log = self.log_path.read_text()
                if "already in use" in log or "Address already in use" in log:
                    raise PortTaken(self.port)
                raise HarnessError(f"JupyterLab exited with code {code} before it answered; its log:\n{log[-3000:]}")
            try:
                self.api("api/status")
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.3)  # polling interval; the wait is bounded by the deadline above
        self.stop()
        raise HarnessError(
            describe_timeout(f"JupyterLab answering GET /api/status on port {self.port}", self.startup_timeout)
            + f"; log:\n{self.log_path.read_text()[-3000:]}"
        )

    def list_kernels(self) -> list[dict]:
        return self.api("api/kernels") or []

    def shutdown_kernels(self) -> None:
        """Delete every session (which shuts its kernel down), then any kernel left over.
        Errors are swallowed: this runs in teardown, and stop() ends the process group anyway."""
        for what in ("api/sessions", "api/kernels"):
            try:
                for item in self.api(what) or []:
                    try:
                        self.api(f"{what}/{item['id']}", method="DELETE")
                    except (urllib.error.URLError, OSError):
                        pass
            except Exception:
                pass

    def stop(self) -> None:
        """Shut kernels down through the API, end the server's process group, then end any
        process it started that outlived it (kernels run in sessions of their own)."""
        if self.proc is None:
            return
        self.shutdown_kernels()
        children = descendants(self.proc.pid)
        end_process_group(self.proc, timeout("kernel_shutdown"))
        end_pids(children)
        self._log.close()
        self.proc = None


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, from /proc (empty where there is no /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parents.items() if pp in frontier]
        found += kids
        frontier = kids
    return found


def end_process_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the group ``proc`` leads, SIGKILL if it has not exited after ``grace`` s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=grace)


def end_pids(pids: list[int], grace: float = 5) -> None:
    """SIGTERM, then SIGKILL, each of ``pids`` that is still alive (by pid, nothing broader)."""
    alive = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            alive.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        if alive:
            time.sleep(0.1)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def copy_notebooks(src: Path, dst: Path) -> list[Path]:
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for nb in sorted(src.glob(NOTEBOOK_GLOB)):
        shutil.copy2(nb, dst / nb.name)
        out.append(dst / nb.name)
    return out
