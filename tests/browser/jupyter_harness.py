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

CHROMIUM = os.environ.get("PIGVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
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
    (labconfig / "page_config.json").write_text(json.dumps({
        "disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True},
    }))
    (config_dir / "jupyter_server_config.json").write_text(json.dumps({
        "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate"},
    }))


class JupyterLabServer:
    def __init__(self, root: Path, workdir: Path, port: int | None = None, startup_timeout: float = 90):
        self.root = Path(root)
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.token = secrets.token_hex(16)
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        self.log_path = self.workdir / "jupyter-server.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}/{path.lstrip('/')}{sep}token={self.token}"

    def _api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(self.url(path), method=method)
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
            return json.loads(body) if body else None

    def start(self) -> "JupyterLabServer":
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", self.port)) == 0:
                raise HarnessError(f"port {self.port} is already taken; pick another or let the harness choose")
        config_dir = self.workdir / "jupyter-config"
        settings_dir = self.workdir / "lab-user-settings"
        write_quiet_lab_config(config_dir, settings_dir)
        env = dict(os.environ,
                   JUPYTER_CONFIG_DIR=str(config_dir),
                   JUPYTER_RUNTIME_DIR=str(self.workdir / "jupyter-runtime"),
                   PYDEVD_DISABLE_FILE_VALIDATION="1")
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser",
               f"--port={self.port}", "--port-retries=0", "--ip=127.0.0.1",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
               f"--LabApp.user_settings_dir={settings_dir}",
               f"--LabApp.workspaces_dir={self.workdir / 'lab-workspaces'}",
               "--ServerApp.disable_check_xsrf=True", "--allow-root"]
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=self.root, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HarnessError(f"JupyterLab exited with code {self.proc.returncode} before it "
                                   f"answered; its log:\n{self.log_path.read_text()[-3000:]}")
            try:
                self._api("api/status")
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.3)
        self.stop()
        raise HarnessError(f"JupyterLab did not answer on port {self.port} within "
                           f"{self.startup_timeout:.0f} s; log:\n{self.log_path.read_text()[-3000:]}")

    def shutdown_kernels(self) -> None:
        try:
            for kernel in self._api("api/kernels") or []:
                self._api(f"api/kernels/{kernel['id']}", method="DELETE")
        except Exception:
            pass

    def stop(self) -> None:
        if self.proc is None:
            return
        self.shutdown_kernels()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self._log.close()
        self.proc = None


def copy_notebooks(src: Path, dst: Path) -> list[Path]:
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for nb in sorted(src.glob("[0-9][0-9]_*.ipynb")):
        shutil.copy2(nb, dst / nb.name)
        out.append(dst / nb.name)
    return out
