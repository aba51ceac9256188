"""What a learner does with each notebook's widgets, through the real DOM controls.

Each function gets a page where the notebook has just been run, acts on a widget, and
asserts that the figure it drives changed."""
from __future__ import annotations

from .lab_driver import plot_data


def _changed_after(page, figure_class: str, action, settle_ms: int = 1500):
    before = plot_data(page, figure_class)
    assert before, f"figure .{figure_class} is not drawn"
    action()
    page.wait_for_timeout(settle_ms)
    after = plot_data(page, figure_class)
    assert after != before, f"figure .{figure_class} did not change"


def _nudge_slider(page, slider_class: str, presses: int = 3, key: str = "ArrowRight"):
    handle = page.locator(f".{slider_class} .noUi-handle").first
    handle.scroll_into_view_if_needed()
    handle.click()
    for _ in range(presses):
        page.keyboard.press(key)


def stick_balance(page):
    _changed_after(page, "pigviz-sticks", lambda: _nudge_slider(page, "pigviz-budget-slider", 4))
    button = page.locator(".pigviz-resample").first
    _changed_after(page, "pigviz-sticks", lambda: button.click())


def simhash_scurves(page):
    _changed_after(page, "pigviz-scurve", lambda: _nudge_slider(page, "pigviz-k-slider", 2))
    _changed_after(page, "pigviz-scurve", lambda: _nudge_slider(page, "pigviz-l-slider", 5, "ArrowLeft"))


def key_cone(page):
    """Click a heatmap cell (by its data coordinates) and expect the key cloud to switch."""
    def click_cell():
        box = page.evaluate("""() => {
            const host = document.querySelector('.pigviz-sink-heatmap');
            const el = host.matches('.js-plotly-plot') ? host : host.querySelector('.js-plotly-plot');
            el.scrollIntoView({block: 'center'});
            const fl = el._fullLayout, tr = el.data[0];
            const nx = (tr.x || tr.z[0].map((_, i) => i)), ny = (tr.y || tr.z.map((_, i) => i));
            // pick the cell with the largest value: a layer/head with a strong sink
            let best = [0, 0], top = -Infinity;
            tr.z.forEach((row, j) => row.forEach((v, i) => { if (v > top) { top = v; best = [i, j]; } }));
            const r = el.getBoundingClientRect();
            return {x: r.left + fl._size.l + fl.xaxis.l2p(fl.xaxis.d2l(nx[best[0]])),
                    y: r.top + fl._size.t + fl.yaxis.l2p(fl.yaxis.d2l(ny[best[1]]))};
        }""")
        page.mouse.click(box["x"], box["y"])
    _changed_after(page, "pigviz-key-cloud", click_cell, settle_ms=2500)


INTERACTIONS = {
    "01_stick_balance.ipynb": stick_balance,
    "02_key_cone.ipynb": key_cone,
    "04_simhash_scurves.ipynb": simhash_scurves,
}
