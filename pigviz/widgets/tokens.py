"""TokenReader: pick a shipped head, a query position and a budget, and read the words TopK,
MagicPIG and Quest read for it, each token shaded by its true attention weight.

Everything comes from the shipped capture and its tokens (no model load). A change reruns the
three estimators on the one query (:func:`pigviz.study.estimators.token_reads`); MagicPIG's
tables are built once per shipped layer and kept, so a change takes a fraction of a second.
"""

from __future__ import annotations

import ipywidgets as widgets

from pigviz.model import shipped
from pigviz.model.tokens import load_tokens
from pigviz.plots import tokens as plots
from pigviz.study import estimators
from pigviz.widgets.base import clamp_int, error_html

__all__ = ["TokenReader", "BUDGETS", "LABELS"]

BUDGETS = (0.01, 0.02, 0.05, 0.1)
LABELS = {name: estimators.LABELS[name] for name in ("topk", "magicpig", "quest")}


class TokenReader(widgets.VBox):
    """``display(TokenReader())``: layer 2, its first query head, the last position, 2%."""

    def __init__(self, row: int = 0, head: int = 0, position: int = 63, fraction: float = 0.02):
        self._suspended = True
        cap = shipped.load_shipped_capture()
        self.tokens = load_tokens()
        self.first = cap.n_tokens - cap.last
        self.last = cap.last
        # One estimator object per method for the widget's life: MagicPIG keeps its tables.
        self.methods = {name: estimators.library_estimator(name, **self._options(name, cap)) for name in LABELS}
        choices = [
            (f"layer {layer}, head {qh}", (row_, j))
            for row_, layer in enumerate(cap.layers)
            for j, qh in enumerate(cap.query_heads[row_])
        ]
        self.head_picker = widgets.Dropdown(
            options=choices, value=choices[0][1], description="head", layout=widgets.Layout(width="240px")
        )
        self.head_picker.add_class("pigviz-tokens-head")
        self.position_slider = widgets.IntSlider(
            value=self.first + self.last - 1,
            min=self.first,
            max=self.first + self.last - 1,
            description="query at",
            continuous_update=False,
            layout=widgets.Layout(width="420px"),
        )
        self.position_slider.add_class("pigviz-tokens-position")
        self.budget_picker = widgets.Dropdown(
            options=[(f"{f:.0%} of the keys", f) for f in BUDGETS],
            value=0.02,
            description="budget",
            layout=widgets.Layout(width="240px"),
        )
        self.budget_picker.add_class("pigviz-tokens-budget")
        self.view = widgets.HTML()
        self.view.add_class("pigviz-tokens-view")
        self.status = widgets.HTML()
        self.status.add_class("pigviz-status")
        for control in (self.head_picker, self.position_slider, self.budget_picker):
            control.observe(self._on_change, names="value")
        controls = widgets.HBox([self.head_picker, self.position_slider, self.budget_picker])
        super().__init__([controls, self.view, self.status])
        self._suspended = False
        self.set_selection(row=row, head=head, position=position, fraction=fraction)

    @staticmethod
    def _options(name, cap):
        return {"heads": int(cap.metadata["n_model_heads"])} if name == "magicpig" else {}

    @property
    def selection(self) -> dict:
        """``row`` (shipped layer 0..3), ``head`` (0..2 within it), ``position`` (0..63 of the
        captured queries) and ``fraction``, already clamped."""
        row, head = self.head_picker.value
        position = clamp_int(self.position_slider.value, self.first, self.first + self.last - 1, self.first)
        return {"row": row, "head": head, "position": position - self.first, "fraction": self.budget_picker.value}

    def set_selection(self, row=None, head=None, position=None, fraction=None) -> None:
        """Set several controls at once and redraw once; out-of-range numbers are clamped
        (``position`` counts the captured queries, 0..63; ``fraction`` goes to the nearest offered)."""
        self._suspended = True
        try:
            old = self.selection
            r = clamp_int(old["row"] if row is None else row, 0, 3, 0)
            h = clamp_int(old["head"] if head is None else head, 0, 2, 0)
            values = [v for _, v in self.head_picker.options]
            self.head_picker.value = (r, h) if (r, h) in values else values[0]
            if position is not None:
                p = clamp_int(position, 0, self.last - 1, self.last - 1)
                self.position_slider.value = self.first + p
            if fraction is not None:
                try:
                    wanted = float(fraction)
                except (TypeError, ValueError):
                    wanted = 0.02
                self.budget_picker.value = min(BUDGETS, key=lambda f: abs(f - wanted))
        finally:
            self._suspended = False
        self.update()

    def _on_change(self, _change) -> None:
        if not self._suspended:
            self.update()

    def result(self) -> dict:
        sel = self.selection
        return estimators.token_reads(
            sel["row"], sel["head"], sel["position"], sel["fraction"], methods=tuple(self.methods.values())
        )

    def update(self) -> None:
        """Recompute and redraw; problems go to the status line, never to the notebook."""
        try:
            result = self.result()
            self.view.value = plots.reading_view(result, self.tokens, LABELS).html
            self.status.value = ""
        except Exception as exc:  # a widget callback must not raise into the notebook
            self.status.value = error_html(exc)
