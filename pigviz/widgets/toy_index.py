"""ToyIndexExplorer: turn the query, change K and L, and watch a toy LSH index answer it.

One figure (:func:`pigviz.plots.toy_index.toy_index_figure`) of a toy index of 32 keys in the
plane, computed with :mod:`pigviz.lsh.reference` (:func:`~pigviz.plots.toy_index.toy_index_step`):
each table's buckets with the token ids they hold, the query's bucket lit in each, each key's
hits and the sampled keys with their u. Sliders: the query's direction (an angle), K and L.
"""

from __future__ import annotations

import ipywidgets as widgets
import plotly.graph_objects as go

from pigviz.plots import toy_index as plots
from pigviz.widgets.base import clamp_int as _clamp
from pigviz.widgets.base import error_html

__all__ = ["ToyIndexExplorer"]

ANGLE_RANGE = (0, 355)
K_RANGE = (1, plots.MAX_K)
L_RANGE = (1, plots.MAX_L)
MIN_HITS = 2
WIDTH = 900


class ToyIndexExplorer(widgets.VBox):
    """A toy index over ``n`` keys. ``display(ToyIndexExplorer())`` in a notebook."""

    def __init__(self, angle: int = 60, K: int = 3, L: int = 4, n: int = 32, seed: int = 4):
        self._suspended = True
        self.n = _clamp(n, 1, plots.MAX_N, 32)
        self.seed = _clamp(seed, 0, 10**6, 4)
        self.angle_slider = widgets.IntSlider(
            value=_clamp(angle, *ANGLE_RANGE, 60), min=ANGLE_RANGE[0], max=ANGLE_RANGE[1], step=5,
            description="q angle", continuous_update=True,
        )  # fmt: skip
        self.k_slider = widgets.IntSlider(
            value=_clamp(K, *K_RANGE, 3), min=K_RANGE[0], max=K_RANGE[1], description="K bits", continuous_update=True
        )
        self.l_slider = widgets.IntSlider(
            value=_clamp(L, *L_RANGE, 4), min=L_RANGE[0], max=L_RANGE[1], description="L tables", continuous_update=True
        )
        self.angle_slider.add_class("pigviz-toy-angle-slider")
        self.k_slider.add_class("pigviz-toy-k-slider")
        self.l_slider.add_class("pigviz-toy-l-slider")
        self.status = widgets.HTML()
        self.status.add_class("pigviz-status")
        self.fig = go.FigureWidget()
        self.fig.add_class("pigviz-toy-index")
        first = plots.toy_index_figure(**self.step)
        self.fig.add_traces(first.data)
        self.fig.update_layout(first.layout)
        self.fig.layout.width = WIDTH  # the ids fit their buckets at this width (plots.toy_index.SLOT_PX)
        for control in (self.angle_slider, self.k_slider, self.l_slider):
            control.observe(self._on_change, names="value")
        controls = widgets.HBox([self.angle_slider, self.k_slider, self.l_slider])
        super().__init__([controls, self.fig, self.status])
        self._suspended = False
        self.update()

    # ------------------------------------------------------------------ state

    @property
    def params(self) -> dict:
        """What the figure shows, clamped: a key is sampled at 2 hits (1 when L = 1)."""
        L = _clamp(self.l_slider.value, *L_RANGE, 4)
        return dict(
            angle=_clamp(self.angle_slider.value, *ANGLE_RANGE, 60),
            K=_clamp(self.k_slider.value, *K_RANGE, 3),
            L=L,
            min_hits=min(MIN_HITS, L),
        )

    @property
    def step(self) -> dict:
        """The toy step the figure draws (:func:`pigviz.plots.toy_index.toy_index_step`)."""
        return plots.toy_index_step(n=self.n, seed=self.seed, **self.params)

    def set_params(self, angle=None, K=None, L=None) -> None:
        """Set several sliders at once (values are clamped) and redraw once."""
        self._suspended = True
        try:
            for slider, value, lo_hi in (
                (self.angle_slider, angle, ANGLE_RANGE),
                (self.k_slider, K, K_RANGE),
                (self.l_slider, L, L_RANGE),
            ):
                if value is not None:
                    slider.value = _clamp(value, *lo_hi, slider.value)
        finally:
            self._suspended = False
        self.update()

    def _on_change(self, _change) -> None:
        if not self._suspended:
            self.update()

    # ------------------------------------------------------------------ drawing

    def update(self) -> None:
        """Recompute and redraw; a problem goes to the status line, never to the notebook."""
        try:
            step = self.step
            new = plots.toy_index_figure(**step)
            with self.fig.batch_update():
                for old, trace in zip(self.fig.data, new.data):
                    old.update(trace.to_plotly_json(), overwrite=True)
                self.fig.layout.update(new.layout.to_plotly_json(), overwrite=True)
            self.status.value = self._summary(step)
        except Exception as exc:  # a widget callback must not raise into the notebook
            self.status.value = error_html(exc)

    def _summary(self, step: dict) -> str:
        p = self.params
        hits = plots.hits_from_tables(step["offsets"], step["ids"], step["q_codes"])
        read = int(hits.sum())
        note = " (lowered to 1: there is one table)" if p["min_hits"] < MIN_HITS else ""
        return (
            f"<b>K = {p['K']}, L = {p['L']}, q at {p['angle']} deg</b>: the query reads one bucket a table, "
            f"{read} of the L n = {p['L'] * self.n} entries; {int((hits >= p['min_hits']).sum())} of {self.n} keys "
            f"share its bucket in at least {p['min_hits']} tables{note} and are sampled."
        )
