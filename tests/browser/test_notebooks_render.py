"""Every notebook, opened in a real JupyterLab and run with Run All: no error, and every
figure and widget actually drawn."""

import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from pigviz.site import NOTEBOOK_GLOB

from .interactions import INTERACTIONS
from .lab_driver import (
    count_outputs,
    empty_plots,
    error_cells,
    open_notebook,
    rendered_plots,
    run_all_cells,
    save_notebook,
    wait_figures_drawn,
    wait_kernel_idle,
    widget_problems,
)

NOTEBOOKS = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "notebooks").glob(NOTEBOOK_GLOB))


@contextmanager
def phase(name: str, what: str):
    """Print how long each step took: pytest shows it with a failure, which tells a slow
    machine (every step slow) from a stuck step."""
    start = time.monotonic()
    try:
        yield
    finally:
        print(f"{name}: {what} took {time.monotonic() - start:.1f} s", flush=True)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_renders(name, lab_page, lab_server, lab_root, artifacts_dir):
    page = lab_page
    with phase(name, "open and kernel ready"):
        open_notebook(page, lab_server, name)
    with phase(name, "Run All"):
        run_all_cells(page, lab_server, name)
        wait_kernel_idle(page, lab_server, name, after="Run All")
    with phase(name, "save"):
        nb = save_notebook(page, lab_root / name, name)

    errors = error_cells(nb)
    assert not errors, f"{name}: expected no cell to raise; cells raised errors: " + "; ".join(errors)

    static = count_outputs(nb, "application/vnd.plotly.v1+json")
    with phase(name, "figures drawn"):
        wait_figures_drawn(page, name, at_least=static)  # FigureWidgets draw after their cell ends
    plots = rendered_plots(page)
    assert len(plots) >= static, f"{name}: expected {static} plotly outputs drawn, saw {len(plots)}"
    empty = empty_plots(plots)
    assert not empty, (
        f"{name}: expected every plot drawn; {len(empty)} of {len(plots)} have an empty plot area: {empty}"
    )
    problems = widget_problems(page)
    assert not problems, f"{name}: expected every widget displayed; saw: {problems}"

    if name in INTERACTIONS:
        with phase(name, "widget interactions"):
            INTERACTIONS[name](page, name, lab_server)

    stem = name.removesuffix(".ipynb")
    page.screenshot(path=str(artifacts_dir / f"{stem}-top.png"))
    outputs = page.locator(".jp-OutputArea-output:has(.js-plotly-plot)")
    shots = 0
    for i in range(outputs.count()):
        if shots == 10:
            break
        if outputs.nth(i).is_visible():  # e.g. a figure in a collapsed accordion is not
            try:  # screenshots are artifacts for a person to look at, not assertions
                outputs.nth(i).screenshot(path=str(artifacts_dir / f"{stem}-plot{shots}.png"))
                shots += 1
            except PlaywrightTimeout:
                pass
