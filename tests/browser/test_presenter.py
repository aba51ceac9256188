"""Presenter mode: a notebook served by Voila, without code, and its widgets still work."""
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .jupyter_harness import free_port
from .lab_driver import plot_data

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "01_stick_balance.ipynb"


@pytest.fixture
def voila_server(browser_tools, tmp_path):
    if not NOTEBOOK.exists():
        pytest.fail(f"{NOTEBOOK.name} is missing")
    port = free_port()
    log = open(tmp_path / "voila.log", "w")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "voila", str(NOTEBOOK), f"--port={port}", "--no-browser",
         "--Voila.ip=127.0.0.1", "--strip_sources=True"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=NOTEBOOK.parent, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"voila exited with {proc.returncode}: {(tmp_path / 'voila.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(url + "api/status", timeout=2)
                break
            except urllib.error.HTTPError:
                break  # any HTTP answer means the server is up
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("voila did not answer within 60 s")
                time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_presenter_mode_slider_moves_the_plot(voila_server, page, artifacts_dir):
    page.goto(voila_server, timeout=120_000)
    handle = page.locator(".pigviz-budget-slider .noUi-handle").first
    handle.wait_for(timeout=120_000)
    page.wait_for_timeout(1000)
    code = page.evaluate("""() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea')]
        .map(e => e.innerText.trim()).filter(t => t.length > 0)""")
    assert code == [], f"presenter mode shows no code, but shows: {code[:2]}"
    before = plot_data(page, "pigviz-sticks")
    assert before, "the stick-balance figure is drawn"
    handle.click()
    for _ in range(5):
        page.keyboard.press("ArrowRight")
    page.wait_for_timeout(1500)
    after = plot_data(page, "pigviz-sticks")
    assert after != before, "moving the budget slider changed the plotted balance points"
    page.screenshot(path=str(artifacts_dir / "presenter-01.png"), full_page=True)
