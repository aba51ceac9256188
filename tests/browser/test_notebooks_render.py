"""Every notebook, opened in a real JupyterLab and run with Run All: no error, and every
figure and widget actually drawn."""
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from .interactions import INTERACTIONS
from .lab_driver import (count_outputs, error_cells, open_notebook, rendered_plots, run_all_cells,
                         save_notebook, wait_kernel_idle, widget_problems)

NOTEBOOKS = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_renders(name, page, lab_server, lab_root, artifacts_dir):
    open_notebook(page, lab_server, name)
    run_all_cells(page)
    wait_kernel_idle(page)
    page.wait_for_timeout(1500)  # let FigureWidgets finish their first draw
    nb = save_notebook(page, lab_root / name)

    errors = error_cells(nb)
    assert not errors, f"{name}: cells raised errors: " + "; ".join(errors)

    plots = rendered_plots(page)
    static = count_outputs(nb, "application/vnd.plotly.v1+json")
    assert len(plots) >= static, f"{name}: {static} plotly outputs but only {len(plots)} drawn"
    empty = [p for p in plots if not p["svg"] or p["w"] < 50 or p["h"] < 50 or p["traces"] == 0]
    assert not empty, f"{name}: {len(empty)} of {len(plots)} plots have an empty plot area: {empty}"
    assert not widget_problems(page), f"{name}: widgets failed to display: {widget_problems(page)}"

    if name in INTERACTIONS:
        INTERACTIONS[name](page)

    stem = name.removesuffix(".ipynb")
    page.screenshot(path=str(artifacts_dir / f"{stem}-top.png"))
    outputs = page.locator(".jp-OutputArea-output:has(.js-plotly-plot)")
    shots = 0
    for i in range(outputs.count()):
        if shots == 10:
            break
        if outputs.nth(i).is_visible():  # e.g. a figure in a collapsed accordion is not
            try:  # screenshots are artifacts for a person to look at, not assertions
                outputs.nth(i).screenshot(path=str(artifacts_dir / f"{stem}-plot{shots}.png"), timeout=15_000)
                shots += 1
            except PlaywrightTimeout:
                pass
    lab_server.shutdown_kernels()  # one notebook's kernel at a time, as on a 2 GB Binder
