"""The toy index explorer of notebook 06, in a real JupyterLab: it is drawn, and its three
sliders (the query's angle, K, L), moved through the DOM, redraw the figure with what the
kernel computes for the new values.

A one-cell notebook holds the widget, so the test does not wait for the whole of 06 to run
(``test_notebooks_render`` runs 06 itself)."""

import json

import numpy as np

from pigviz.plots import toy_index as ti

from .interactions import Widgets
from .lab_driver import open_notebook, plot_data, run_all_cells, wait_kernel_idle, wait_plot_drawn, widget_problems

NAME = "toy_index_widget.ipynb"
FIGURE = "pigviz-toy-index"
CELL = "from pigviz.widgets.toy_index import ToyIndexExplorer\n\nToyIndexExplorer()"


def _notebook() -> dict:
    return {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": CELL}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _drawn_query(page) -> np.ndarray:
    """The tip of the query's arrow as the browser drew it (trace 1: [origin, q])."""
    x, y = plot_data(page, FIGURE)[1]
    return np.array([x[1], y[1]], dtype=float)


def _drawn_hit_counts(page) -> list[int]:
    texts = page.evaluate(
        """(cls) => {
        const host = document.querySelector('.' + cls);
        const el = host.matches('.js-plotly-plot') ? host : host.querySelector('.js-plotly-plot');
        return Array.from(el.data.find(t => t.name === 'hit counts').text);
    }""",
        FIGURE,
    )
    return [int(t) for t in texts]


def test_toy_index_sliders_redraw_the_index(lab_server, lab_page, artifacts_dir):
    page = lab_page
    (lab_server.root / NAME).write_text(json.dumps(_notebook()), encoding="utf-8")
    open_notebook(page, lab_server, NAME)
    run_all_cells(page, lab_server, NAME)
    wait_kernel_idle(page, lab_server, NAME, after="Run All")
    wait_plot_drawn(page, FIGURE, NAME)
    assert not widget_problems(page), widget_problems(page)

    first = ti.toy_index_step()
    np.testing.assert_allclose(_drawn_query(page), first["q"])
    hits = ti.hits_from_tables(first["offsets"], first["ids"], first["q_codes"])
    assert _drawn_hit_counts(page) == hits.tolist()

    w = Widgets(page, NAME, lab_server)
    w.changes(
        FIGURE,
        w.nudge_slider("pigviz-toy-angle-slider", 6),
        "pressing ArrowRight 6 times on the angle slider (.pigviz-toy-angle-slider)",
        readout=w.slider_value("pigviz-toy-angle-slider"),
    )
    angle = int(w.slider_value("pigviz-toy-angle-slider")())
    assert angle == 90
    np.testing.assert_allclose(_drawn_query(page), ti.toy_index_step(angle=angle)["q"], atol=1e-9)

    w.changes(
        FIGURE,
        w.nudge_slider("pigviz-toy-k-slider", 1, "ArrowLeft"),
        "pressing ArrowLeft once on the K slider (.pigviz-toy-k-slider)",
        readout=w.slider_value("pigviz-toy-k-slider"),
    )
    w.changes(
        FIGURE,
        w.nudge_slider("pigviz-toy-l-slider", 2),
        "pressing ArrowRight twice on the L slider (.pigviz-toy-l-slider)",
        readout=w.slider_value("pigviz-toy-l-slider"),
    )
    K, L = int(w.slider_value("pigviz-toy-k-slider")()), int(w.slider_value("pigviz-toy-l-slider")())
    assert (K, L) == (2, 6)
    step = ti.toy_index_step(angle=angle, K=K, L=L)
    assert _drawn_hit_counts(page) == ti.hits_from_tables(step["offsets"], step["ids"], step["q_codes"]).tolist()
    page.locator(f".{FIGURE}").first.screenshot(path=str(artifacts_dir / "toy-index-widget.png"))
