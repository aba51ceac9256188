"""StudyExplorer: pick a layer, a head and the methods, and see error against budget.

The numbers come from a finished study (by default the shipped ``pigviz/data/study_smollm2.json``),
so a change only averages stored per-(layer, head) means and redraws: no attention is
recomputed.
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import plotly.graph_objects as go

from pigviz.plots import study as plots
from pigviz.study import findings
from pigviz.widgets.base import clamp_int as _clamp_int

__all__ = ["StudyExplorer", "DEFAULT_METHODS"]

ALL = -1
DEFAULT_METHODS = ("magicpig", "topk", "oracle", "hybrid", "quest", "streaming")


class StudyExplorer(widgets.VBox):
    """``display(StudyExplorer())``: the shipped study; ``StudyExplorer(results)``: your own."""

    def __init__(self, results: dict | None = None, layer=None, head=None, methods=DEFAULT_METHODS):
        self._suspended = True
        self.results = results if results is not None else findings.load_shipped_results()
        self.layers = list(self.results["layers"])
        self.heads = int(self.results["heads"])
        present = {s["variant"] if s["variant"] != "main" else s["method"] for s in self.results["series"].values()}
        self.available = [m for m in findings.METHOD_LABELS if m in present]

        self.layer_picker = widgets.Dropdown(
            options=[("all layers", ALL)] + [(f"layer {x}", x) for x in self.layers],
            value=ALL,
            description="layer",
            layout=widgets.Layout(width="220px"),
        )
        self.layer_picker.add_class("pigviz-study-layer")
        self.head_picker = widgets.Dropdown(
            options=[("all heads", ALL)] + [(f"head {h}", h) for h in range(self.heads)],
            value=ALL,
            description="head",
            layout=widgets.Layout(width="200px"),
        )
        self.head_picker.add_class("pigviz-study-head")
        self.method_boxes = {
            m: widgets.Checkbox(
                value=m in methods,
                description=findings.METHOD_LABELS[m],
                indent=False,
                layout=widgets.Layout(width="290px"),
            )
            for m in self.available
        }
        picker = widgets.GridBox(
            list(self.method_boxes.values()), layout=widgets.Layout(grid_template_columns="repeat(3, 295px)")
        )
        picker.add_class("pigviz-study-methods")
        self.status = widgets.HTML()
        self.status.add_class("pigviz-status")
        self.chart = go.FigureWidget()
        self.chart.add_class("pigviz-study-chart")

        self.layer_picker.observe(self._on_change, names="value")
        self.head_picker.observe(self._on_change, names="value")
        for box in self.method_boxes.values():
            box.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([self.layer_picker, self.head_picker]), picker, self.chart, self.status])
        self._suspended = False
        self.set_selection(layer=layer, head=head)

    # ------------------------------------------------------------------ state
    @property
    def selection(self) -> dict:
        """``layer`` and ``head`` (None: all) and the ticked methods, already clamped."""
        layer = self.layer_picker.value
        head = self.head_picker.value
        return {
            "layer": None if layer == ALL or layer not in self.layers else layer,
            "head": None if head == ALL else _clamp_int(head, 0, self.heads - 1, 0),
            "methods": [m for m, box in self.method_boxes.items() if box.value],
        }

    def set_selection(self, layer=None, head=None, methods=None) -> None:
        """Set several controls at once and redraw once. ``layer``/``head``: a number, or
        None / -1 for all; out-of-range numbers are clamped to the nearest valid one."""
        self._suspended = True
        try:
            if layer is None or layer == ALL:
                self.layer_picker.value = ALL
            else:
                wanted = _clamp_int(layer, self.layers[0], self.layers[-1], self.layers[0])
                self.layer_picker.value = min(self.layers, key=lambda x: abs(x - wanted))
            self.head_picker.value = ALL if head is None or head == ALL else _clamp_int(head, 0, self.heads - 1, 0)
            if methods is not None:
                for m, box in self.method_boxes.items():
                    box.value = m in methods
        finally:
            self._suspended = False
        self.update()

    def _on_change(self, _change) -> None:
        if not self._suspended:
            self.update()

    # ------------------------------------------------------------------ drawing
    def figure(self) -> go.Figure:
        sel = self.selection
        where = (
            ("all layers" if sel["layer"] is None else f"layer {sel['layer']}")
            + ", "
            + ("all heads" if sel["head"] is None else f"head {sel['head']}")
        )
        points = findings.curves(self.results, sel["layer"], sel["head"], sel["methods"])
        return plots.error_budget_figure(
            points, findings.METHOD_LABELS, title=f"{self.results['model']}: error against budget, {where}"
        )

    def update(self) -> None:
        """Recompute and redraw; problems go to the status line, never to the notebook."""
        try:
            fig = self.figure()
            with self.chart.batch_update():
                self.chart.data = []
                self.chart.add_traces(fig.data)
                self.chart.layout = fig.layout
            self.status.value = self._summary()
        except Exception as exc:  # a widget callback must not raise into the notebook
            self.status.value = f"<span style='color:#b00'>Could not update: {html.escape(str(exc))}</span>"

    def _summary(self) -> str:
        sel = self.selection
        if not sel["methods"]:
            return "Tick at least one method to draw it."
        pig = findings.curves(self.results, sel["layer"], sel["head"], ["magicpig", "topk"])
        if "magicpig" not in pig or "topk" not in pig:
            return "This results file has no MagicPIG/TopK pair to compare."
        parts = []
        for mp, tk in zip(pig["magicpig"], pig["topk"]):
            verdict = "better" if mp["error"] < tk["error"] else "worse"
            parts.append(
                f"{mp['label']}: {100 * mp['budget']:.1f}% of keys, error {mp['error']:.3f} vs TopK "
                f"{tk['error']:.3f} ({verdict})"
            )
        return "<b>MagicPIG against TopK at the same budget</b><br>" + "<br>".join(html.escape(p) for p in parts)
