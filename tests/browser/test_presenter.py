"""Presenter mode: a notebook served by Voila, without code, and its widgets still work."""

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .interactions import Widgets
from .jupyter_harness import descendants, end_pids, end_process_group, free_port, isolated_env
from .waits import describe_timeout, timeout, timeout_ms, wait_for_js

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "01_stick_balance.ipynb"
WHERE = f"{NOTEBOOK.name} in Voila"


def _start_voila(tmp_path, log, port):
    env = isolated_env(tmp_path)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "voila",
            str(NOTEBOOK),
            f"--port={port}",
            "--no-browser",
            "--Voila.ip=127.0.0.1",
            "--strip_sources=True",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=NOTEBOOK.parent,
        start_new_session=True,
    )


def _wait_answering(proc, url, log_path) -> bool:
    """True once the server answers HTTP, False if it exited because its port was taken."""
    limit = timeout("server_start")
    deadline = time.monotonic() + limit
    while True:
        if proc.poll() is not None:
            text = log_path.read_text()
            if "already in use" in text:
                return False
            pytest.fail(f"voila exited with {proc.returncode} before answering: {text[-2000:]}")
        try:
            urllib.request.urlopen(url + "api/status", timeout=timeout("element"))
            return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer means the server is up
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(
                    describe_timeout(f"voila serving {NOTEBOOK.name} answering HTTP at {url}", limit)
                    + f"; log: {log_path.read_text()[-2000:]}"
                )
            time.sleep(0.3)  # polling interval; the deadline above bounds the wait


@pytest.fixture
def voila_server(browser_tools, tmp_path):
    if not NOTEBOOK.exists():
        pytest.fail(f"{NOTEBOOK.name} is missing")
    log_path = tmp_path / "voila.log"
    log = open(log_path, "w")
    proc = None
    try:
        for _ in range(3):  # a port free when chosen can be taken before voila binds it
            port = free_port()
            proc = _start_voila(tmp_path, log, port)
            url = f"http://127.0.0.1:{port}/"
            if _wait_answering(proc, url, log_path):
                break
        else:
            pytest.fail(f"voila could not bind a free port in 3 tries: {log_path.read_text()[-2000:]}")
        yield url
    finally:
        if proc is not None:
            kernels = descendants(proc.pid)  # kernels run in sessions of their own
            end_process_group(proc, timeout("kernel_shutdown"))
            end_pids(kernels)
        log.close()


def watch_websockets(page):
    """Record when each of the page's websockets (the kernel's channels) opens and closes, so
    that a widget update that never comes back can be told apart from a dropped connection."""
    start, events = time.monotonic(), []

    def on_ws(ws):
        short = ws.url.split("?")[0][-60:]
        events.append(f"{time.monotonic() - start:.1f}s open {short}")
        ws.on("close", lambda _ws: events.append(f"{time.monotonic() - start:.1f}s closed {short}"))

    page.on("websocket", on_ws)
    return lambda: f"page websockets: {events or 'none'} (now {time.monotonic() - start:.1f}s)"


def test_presenter_mode_slider_moves_the_plot(voila_server, page, artifacts_dir):
    websockets = watch_websockets(page)
    page.goto(voila_server)
    wait_for_js(
        page,
        "() => !!document.querySelector('.pigviz-budget-slider .noUi-handle')",
        None,
        f"{WHERE}: the budget slider (.pigviz-budget-slider) rendered",
        "page_load",
    )
    code = page.evaluate("""() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea')]
        .map(e => e.innerText.trim()).filter(t => t.length > 0)""")
    assert code == [], f"{WHERE}: expected no code in presenter mode, but it shows: {code[:2]}"

    w = Widgets(page, WHERE, context=websockets)  # no Jupyter REST API in Voila: watch the page
    w.changes(
        "pigviz-sticks",
        w.nudge_slider("pigviz-budget-slider", 5),
        "pressing ArrowRight 5 times on the budget slider (.pigviz-budget-slider)",
        readout=w.slider_value("pigviz-budget-slider"),
    )
    page.screenshot(path=str(artifacts_dir / "presenter-01.png"), full_page=True, timeout=timeout_ms("element"))
