"""A learner's first minutes, in a real JupyterLab: the learner copy of 01 (copied by `pigviz
notebooks`, solutions off) shows blank exercises and no outputs; Run All stops at the first check
with a short message, no traceback; the learner types a correct body and the check passes."""

import json

import pytest

from pigviz import course

from .jupyter_harness import HarnessError, JupyterLabServer
from .lab_driver import NOTEBOOK, _menu, open_notebook, page_state, shutdown_and_wait, wait_kernel_idle
from .waits import poll_until, timeout_ms

NAME = "01_stick_balance.ipynb"
CORRECT = "def balance_point(weights, values): return float(np.dot(weights, values) / np.sum(weights))"


@pytest.fixture(scope="module")
def learner_server(browser_tools, tmp_path_factory):
    root = tmp_path_factory.mktemp("learner")
    course.copy_notebooks(root)
    server = JupyterLabServer(root, tmp_path_factory.mktemp("learner-work"), solutions=False)
    try:
        server.start()
    except HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


def _cell_index(page, starts_with: str) -> int:
    for cell in page_state(page)["cells"]:
        if cell["first"].startswith(starts_with):
            return cell["i"]
    raise AssertionError(f"no cell starts with {starts_with!r}: {[c['first'] for c in page_state(page)['cells']]}")


def _output_text(page, i: int) -> str:
    return page.locator(f"{NOTEBOOK} .jp-Cell").nth(i).locator(".jp-OutputArea").inner_text()


def test_learner_copy_blank_then_a_short_failure_then_a_pass(learner_server, page, artifacts_dir):
    saved = json.loads((learner_server.root / NAME).read_text())
    assert all(not c.get("outputs") for c in saved["cells"] if c["cell_type"] == "code"), "the copy has outputs"
    try:
        open_notebook(page, learner_server, NAME)
        assert page.locator(f"{NOTEBOOK} .jp-OutputArea-output").count() == 0, "outputs shown before running"
        stub = _cell_index(page, "def balance_point(weights, values):")
        stub_text = page.locator(f"{NOTEBOOK} .jp-Cell").nth(stub).locator(".jp-InputArea-editor").inner_text()
        assert stub_text.rstrip().endswith("..."), f"the exercise is not blank: {stub_text!r}"
        check = stub + 1

        # Run All, as a learner does first: it must stop at the blank exercise's check.
        page.locator(f"{NOTEBOOK} .jp-Cell").first.click(timeout=timeout_ms("element"))
        _menu(page, "Run", "Run All Cells")
        message = poll_until(
            lambda: (text := _output_text(page, check)) and "failed case" in text and text,
            f"{NAME}: Run All to stop at the first check (cell {check}) with its message",
            "run_all",
            interval=0.5,
            seen=lambda: _output_text(page, check)[:300],
        )
        wait_kernel_idle(page, learner_server, NAME, after="Run All")
        check_cell = page.locator(f"{NOTEBOOK} .jp-Cell").nth(check)
        check_cell.scroll_into_view_if_needed()
        check_cell.screenshot(path=str(artifacts_dir / "learner-01-failed-check.png"))
        assert "01.balance_point failed case 1 of" in message
        assert "still `...`" in message and "ex.use_reference('01.balance_point')" in message
        assert "Traceback" not in message and "File " not in message and "_framework" not in message, message
        later = [c for c in page_state(page)["cells"] if c["code"] and c["i"] > check + 1]
        assert all(not (c["prompt"] or "").isdigit() for c in later), "Run All went on past the failed check"

        # The learner writes a correct body (one line: no auto-indent to fight), runs it and the check.
        editor = page.locator(f"{NOTEBOOK} .jp-Cell").nth(stub).locator(".cm-content")
        editor.click(timeout=timeout_ms("element"))
        page.keyboard.press("Control+a")
        page.keyboard.type(CORRECT)
        page.keyboard.press("Shift+Enter")  # runs the function cell, moves to the check
        page.keyboard.press("Shift+Enter")  # runs the check
        passed = poll_until(
            lambda: (text := _output_text(page, check)) and "pass" in text and "failed" not in text and text,
            f"{NAME}: the check to pass after a correct body was typed",
            "element",
            interval=0.3,
            seen=lambda: _output_text(page, check)[:300],
        )
        assert "01.balance_point: pass" in passed
        page.locator(f"{NOTEBOOK} .jp-Cell").nth(stub).scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts_dir / "learner-01-passed-check.png"))
    finally:
        page.context.close()
        shutdown_and_wait(learner_server)
