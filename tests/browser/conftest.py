import os
from pathlib import Path

import pytest

from .jupyter_harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    HarnessError,
    JupyterLabServer,
    copy_notebooks,
    require_browser_tools,
)
from .lab_driver import shutdown_and_wait
from .waits import timeout_ms

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "browser"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser_tools():
    """In CI (or with PIGVIZ_BROWSER=1) a missing browser is an error; elsewhere a skip."""
    try:
        require_browser_tools()
    except HarnessError as exc:
        if os.environ.get("CI") or os.environ.get("PIGVIZ_BROWSER") == "1":
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab-root")
    copy_notebooks(ROOT / "notebooks", root)
    return root


@pytest.fixture(scope="session")
def lab_server(browser_tools, lab_root, tmp_path_factory):
    server = JupyterLabServer(lab_root, tmp_path_factory.mktemp("lab-work"))
    try:
        server.start()
    except HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chromium(browser_tools):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        except Exception as exc:
            pytest.fail(f"Chromium at {CHROMIUM} did not start: {exc}", pytrace=False)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    # A fixed locale and time zone: menu labels and any number or date the page formats do
    # not depend on the machine's settings.
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US", timezone_id="UTC")
    # Playwright's own waits (click, goto, ...) get the same scaled deadlines as ours.
    context.set_default_timeout(timeout_ms("element"))
    context.set_default_navigation_timeout(timeout_ms("page_load"))
    pg = context.new_page()
    yield pg
    context.close()  # a no-op when lab_page closed it already


@pytest.fixture
def lab_page(lab_server, page):
    """A page for one notebook in JupyterLab. Afterwards, pass or fail, its kernel is shut
    down and gone before the next test starts (one kernel at a time, as on a 2 GB Binder)."""
    yield page
    page.context.close()
    shutdown_and_wait(lab_server)


@pytest.fixture(scope="session")
def artifacts_dir():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
