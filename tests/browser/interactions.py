"""What a learner does with each notebook's widgets, through the real DOM controls.

Each function gets a page where the notebook has just been run, acts on a widget, and
waits (up to a deadline) for the figure it drives to change. Before each action the figure
must be still and the kernel idle, so that a late update from the previous action cannot
pass for the effect of this one."""

from __future__ import annotations

from .lab_driver import kernel_model, page_state, plot_snapshot, wait_plot_changed, wait_plot_drawn, wait_plot_settled


class Widgets:
    """The notebook ``name``, open in ``page``, with its kernel on ``server`` (None in Voila,
    where only the page is watched)."""

    def __init__(self, page, name: str, server=None, context=None):
        self.page, self.name, self.server = page, name, server
        self.context = context  # optional: more state for a failure message (e.g. websockets)

    def busy(self) -> bool:
        """Something in flight: the kernel busy (server and page agree), or a cell running."""
        if self.server is None:
            return False
        model = kernel_model(self.server, self.name)
        state = page_state(self.page)
        return (
            model is None
            or model.get("execution_state") != "idle"
            or state["indicator"] != "idle"
            or any(c["prompt"] == "*" for c in state["cells"])
        )

    def settle(self, figure_class: str, after: str) -> str:
        return wait_plot_settled(self.page, figure_class, self.name, after, busy=self.busy)

    def changes(self, figure_class: str, action, what: str, readout=None) -> None:
        """Do ``action`` and wait for the data of the figure in ``.figure_class`` to change.
        ``what`` says what the action is, for the failure message; ``readout`` (optional)
        returns the control's value, shown in the message before and after."""
        wait_plot_drawn(self.page, figure_class, self.name)
        before = self.settle(figure_class, "the previous step")
        value_before = readout() if readout else None
        action()

        def seen():
            now = plot_snapshot(self.page, figure_class)
            text = "figure data unchanged" if now == before else f"figure data now {(now or '')[:80]!r}"
            if readout:
                text += f"; control value before {value_before!r}, after {readout()!r}"
            status = self.status_lines()
            if status:
                text += f"; widget status line(s): {status}"
            if self.context:
                text += f"; {self.context()}"
            return text

        wait_plot_changed(self.page, figure_class, before, self.name, what, seen=seen)
        self.settle(figure_class, what)

    def status_lines(self) -> list[str]:
        """The text of the widgets' HTML status lines: they say what the kernel last computed
        (e.g. "Budget 17 of 64 keys"), which tells a lost update from an undrawn one."""
        return self.page.evaluate("""() => [...document.querySelectorAll('.widget-html')]
            .map(e => e.innerText.trim()).filter(t => t.length > 0).map(t => t.slice(0, 160))""")

    def slider_value(self, slider_class: str):
        return lambda: self.page.evaluate(
            """(cls) => {
            const el = document.querySelector('.' + cls + ' .widget-readout');
            return el ? (el.value !== undefined && el.value !== '' ? el.value : el.textContent) : null;
        }""",
            slider_class,
        )

    def nudge_slider(self, slider_class: str, presses: int, key: str = "ArrowRight"):
        def act():
            handle = self.page.locator(f".{slider_class} .noUi-handle").first
            handle.scroll_into_view_if_needed()
            handle.click()
            for _ in range(presses):
                self.page.keyboard.press(key)

        return act


def stick_balance(page, name, server=None):
    w = Widgets(page, name, server)
    w.changes(
        "pigviz-sticks",
        w.nudge_slider("pigviz-budget-slider", 4),
        "pressing ArrowRight 4 times on the budget slider (.pigviz-budget-slider)",
        readout=w.slider_value("pigviz-budget-slider"),
    )
    button = page.locator(".pigviz-resample").first
    w.changes("pigviz-sticks", lambda: button.click(), "clicking Resample (.pigviz-resample)")


def simhash_scurves(page, name, server=None):
    w = Widgets(page, name, server)
    w.changes(
        "pigviz-scurve",
        w.nudge_slider("pigviz-k-slider", 2),
        "pressing ArrowRight twice on the K slider (.pigviz-k-slider)",
        readout=w.slider_value("pigviz-k-slider"),
    )
    w.changes(
        "pigviz-scurve",
        w.nudge_slider("pigviz-l-slider", 5, "ArrowLeft"),
        "pressing ArrowLeft 5 times on the L slider (.pigviz-l-slider)",
        readout=w.slider_value("pigviz-l-slider"),
    )


def key_cone(page, name, server=None):
    """Click a heatmap cell (by its data coordinates) and expect the key cloud to switch."""
    w = Widgets(page, name, server)
    wait_plot_drawn(page, "pigviz-sink-heatmap", name)

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

    w.changes("pigviz-key-cloud", click_cell, "clicking the strongest cell of the sink heatmap (.pigviz-sink-heatmap)")


INTERACTIONS = {
    "01_stick_balance.ipynb": stick_balance,
    "02_key_cone.ipynb": key_cone,
    "04a_simhash_scurves.ipynb": simhash_scurves,
}
