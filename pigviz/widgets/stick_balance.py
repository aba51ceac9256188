"""StickBalanceWidget: pick a scenario and a budget, watch the balance points move."""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from pigviz.plots.stick_balance import (
    MARKER_ORDER,
    METHOD_STYLE,
    error_curves_figure,
    marker_updates,
    sticks_figure,
    sticks_title,
)
from pigviz.toy import stick_balance as sb
from pigviz.widgets.base import clamp_int as _clamp

__all__ = ["StickBalanceWidget"]

_N_RANGE = (2, 256)
_SEEDS_RANGE = (10, 5000)


class StickBalanceWidget(widgets.VBox):
    """Scenario dropdown, budget slider and resample button above two linked figures.

    The sticks figure redraws the balance points of one run of every estimator; the
    error-vs-budget charts of all scenarios are computed once, when the widget is built
    (about 0.1 s each), and the chart marks the current budget. Out-of-range arguments are
    clamped; problems show in the status line."""

    def __init__(
        self,
        scenario: str = "sink",
        budget: int = sb.DEFAULT_BUDGET,
        n: int = sb.DEFAULT_N,
        seed: int = 0,
        n_seeds: int = 300,
    ):
        notes = []
        if scenario not in sb.SCENARIOS:
            notes.append(f"unknown scenario {scenario!r}, showing 'sink'")
            scenario = "sink"
        self._n = _clamp(n, *_N_RANGE, sb.DEFAULT_N)
        self._n_seeds = _clamp(n_seeds, *_SEEDS_RANGE, 300)
        self._seed = _clamp(seed, 0, 2**31 - 1, 0)
        self._rng = np.random.default_rng(self._seed)
        # Everything that depends only on the scenario is built once, so a switch only
        # copies arrays into the live figures (building plotly figures costs ~50 ms).
        self._views = {name: self._build_view(name) for name in sb.SCENARIOS}
        self._scenario = self._views[scenario]["scenario"]
        budget = _clamp(budget, 1, self._n, min(sb.DEFAULT_BUDGET, self._n))

        self.scenario_dropdown = widgets.Dropdown(options=list(sb.SCENARIOS), value=scenario, description="scenario")
        self.budget_slider = widgets.IntSlider(
            value=budget, min=1, max=self._n, description="budget B", continuous_update=True
        )
        self.resample_button = widgets.Button(
            description="Resample", icon="refresh", tooltip="Draw a fresh sample for the random estimators"
        )
        self.status = widgets.HTML()
        self.scenario_dropdown.add_class("pigviz-scenario")
        self.budget_slider.add_class("pigviz-budget-slider")
        self.resample_button.add_class("pigviz-resample")

        self.estimates = self._estimate(budget)
        self.sticks = go.FigureWidget(sticks_figure(self._scenario, self.estimates, budget))
        self.errors = go.FigureWidget(error_curves_figure(self._views[scenario]["curves"], budget))
        sticks_box = widgets.Box([self.sticks])
        sticks_box.add_class("pigviz-sticks")
        self.errors_box = widgets.Box([self.errors])
        self.errors_box.add_class("pigviz-error-curves")

        self.scenario_dropdown.observe(self._on_scenario, names="value")
        self.budget_slider.observe(self._on_budget, names="value")
        self.resample_button.on_click(self._on_resample)
        controls = widgets.HBox([self.scenario_dropdown, self.budget_slider, self.resample_button])
        super().__init__([controls, self.status, sticks_box, self.errors_box])
        self._set_status(notes)

    # -- compute -------------------------------------------------------------------------
    def _estimate(self, budget):
        return sb.estimate_all(self._scenario, budget, self._rng)

    def _build_view(self, name):
        scenario = sb.make_scenario(name, n=self._n, seed=self._seed)
        curves = sb.error_curves(scenario, n_seeds=self._n_seeds, seed=self._seed)
        sticks = sticks_figure(scenario)
        errors = error_curves_figure(curves)
        bar_keys = ("x", "y", "customdata", "width", "showlegend")
        return {
            "scenario": scenario,
            "curves": curves,
            "bars": [{k: trace[k] for k in bar_keys} for trace in sticks.data[:2]],
            "x_range": sticks.layout.xaxis2.range,
            "curve_traces": [{"x": trace.x, "y": trace.y} for trace in errors.data],
            "curves_title": errors.layout.title.text,
        }

    # -- callbacks: never raise into the notebook ----------------------------------------
    def _on_budget(self, change):
        self._guarded(self._redraw_markers)

    def _on_resample(self, _button):
        self._guarded(self._redraw_markers)

    def _on_scenario(self, change):
        self._guarded(self._switch_scenario, change["new"])

    def _guarded(self, fn, *args):
        try:
            fn(*args)
        except Exception as exc:  # a widget callback must not raise into the notebook
            self.status.value = f"<span style='color:#b00020'>Could not update: {html.escape(str(exc))}</span>"

    def _budget(self):
        return _clamp(self.budget_slider.value, 1, self._scenario.n, min(sb.DEFAULT_BUDGET, self._scenario.n))

    def _redraw_markers(self):
        budget = self._budget()
        self.estimates = self._estimate(budget)
        with self.sticks.batch_update():
            # traces 0-1 are the sticks, which stay put; only the balance markers move
            for trace, update in zip(self.sticks.data[2:], marker_updates(self.estimates)):
                trace.update(update)
            self.sticks.layout.title.text = sticks_title(self._scenario, budget)
        with self.errors.batch_update():
            self.errors.layout.shapes[0].x0 = self.errors.layout.shapes[0].x1 = budget
        self._set_status()

    def _switch_scenario(self, name):
        if name not in sb.SCENARIOS:
            raise ValueError(f"scenario must be one of {', '.join(sb.SCENARIOS)}")
        view = self._views[name]
        self._scenario = view["scenario"]
        budget = self._budget()
        self.estimates = self._estimate(budget)
        with self.sticks.batch_update():
            for trace, update in zip(self.sticks.data, view["bars"] + marker_updates(self.estimates)):
                trace.update(update)
            self.sticks.layout.title.text = sticks_title(self._scenario, budget)
            for line in self.sticks.layout.shapes:  # the truth line, one per subplot
                line.x0 = line.x1 = self._scenario.truth
            self.sticks.layout.xaxis2.range = view["x_range"]
        with self.errors.batch_update():
            for trace, update in zip(self.errors.data, view["curve_traces"]):
                trace.update(update)
            self.errors.layout.title.text = view["curves_title"]
        self._set_status()

    def _set_status(self, notes=()):
        est, truth = self.estimates, self.estimates["exact"].value
        smp = est["sampling"]
        draws = "unlimited free draws" if not np.isfinite(smp.draws) else f"{smp.draws:.0f} draws"
        misses = ", ".join(f"{METHOD_STYLE[name][0]} {abs(est[name].value - truth):.3f}" for name in MARKER_ORDER[1:])
        text = (
            f"<b>{self._scenario.name}</b>: truth {truth:.3f}. Budget {self._budget()} of "
            f"{self._scenario.n} keys; sampling read {smp.keys_read} keys in {draws}. "
            f"Miss: {misses}."
        )
        if notes:
            text += " <span style='color:#b00020'>" + html.escape("; ".join(notes)) + "</span>"
        self.status.value = text
