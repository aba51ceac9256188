"""Widgets for real keys: the key cloud, the sink heatmap that drives it, and one real
query's S-curve.

* ``KeyCloudWidget``: layer, head, query position, raw/centred keys and the number of
  hyperplanes; the 2-D picture plus, in the status line, what real d-dimensional hashing
  with the same hyperplanes does.
* ``SinkHeatmap``: weight on token 0 for every layer and query head. Clicking a cell that
  the shipped capture holds shows that head in a linked ``KeyCloudWidget``; clicking any
  other cell shows the nearest shipped (outlined) head and says so in the status line.
* ``RealSCurveWidget``: K and L sliders over one real query's keys. The query and its keys
  are hashed once, at the largest K and L the sliders allow; each change only recounts.

Every control value is clamped, and callbacks report problems in their status line instead
of raising into the notebook.
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from pigviz._util.config import DEFAULTS
from pigviz.keys import geometry as kg
from pigviz.keys import hashing as kh
from pigviz.keys import projection as kp
from pigviz.lsh import simhash as sh
from pigviz.plots import key_geometry as plots
from pigviz.widgets.base import clamp_int as _clamp
from pigviz.widgets.base import error_html as _error

__all__ = ["KeyCloudWidget", "SinkHeatmap", "RealSCurveWidget"]

PLANES_RANGE = (1, 16)
N_DRAW = 2000


def _sync(target: go.FigureWidget, traces: dict, layout: dict) -> None:
    """Overwrite some traces (index -> plain dict) and layout entries of a live figure at once."""
    with target.batch_update():
        for index, trace in traces.items():
            target.data[index].update(trace, overwrite=True)
        target.layout.update(layout)


def _load(cap):
    return kg.shipped_capture() if cap is None else cap


class KeyCloudWidget(widgets.VBox):
    """The keys of one captured head in the plane of the query and the mean key."""

    def __init__(
        self,
        cap=None,
        layer: int = 19,
        head: int | None = None,
        query_index: int = -1,
        centred: bool = False,
        n_planes: int = 6,
        n_draw: int = N_DRAW,
    ):
        self._suspended = True
        self.cap = _load(cap)
        self.n_draw = _clamp(n_draw, 10, 8192, N_DRAW)
        self._views: dict = {}
        self._selection_listeners: list = []
        layers = self.cap.layers
        layer = layer if layer in layers else layers[0]
        self.layer_box = widgets.Dropdown(
            options=[(f"layer {x}", x) for x in layers],
            value=layer,
            description="layer",
            layout=widgets.Layout(width="180px"),
        )
        self.head_box = widgets.Dropdown(
            options=self._head_options(layer), description="head", layout=widgets.Layout(width="180px")
        )
        if head in self._heads(layer):
            self.head_box.value = head
        T = self.cap.last
        self.query_slider = widgets.IntSlider(
            value=_clamp(query_index, -T, T - 1, -1) % T, min=0, max=T - 1, description="query", continuous_update=True
        )
        self.centre_toggle = widgets.ToggleButtons(
            options=[("raw keys", "raw"), ("centred keys", "centred")],
            value="centred" if centred else "raw",
            style={"button_width": "110px"},
        )
        self.centre_toggle.add_class("pigviz-centre-toggle")
        self.planes_slider = widgets.IntSlider(
            value=_clamp(n_planes, *PLANES_RANGE, 6),
            min=PLANES_RANGE[0],
            max=PLANES_RANGE[1],
            description="hyperplanes",
            continuous_update=True,
            style={"description_width": "initial"},
        )
        self.status = widgets.HTML()
        self.status.add_class("pigviz-status")
        self._hashed = np.flatnonzero(kg.non_exact_mask(self.cap.n_tokens))
        self.fig = go.FigureWidget(
            plots.key_cloud_figure(self._cloud(**self.params), self.cap.keys.shape[-1], len(self._hashed))
        )
        self.fig.add_class("pigviz-key-cloud")

        self.layer_box.observe(self._on_layer, names="value")
        for control in (self.head_box, self.query_slider, self.centre_toggle, self.planes_slider):
            control.observe(self._on_change, names="value")
        super().__init__(
            [
                widgets.HBox([self.layer_box, self.head_box, self.query_slider]),
                widgets.HBox([self.centre_toggle, self.planes_slider]),
                self.fig,
                self.status,
            ]
        )
        self._suspended = False
        self.update()

    # ------------------------------------------------------------------ state

    def _heads(self, layer) -> list[int]:
        return self.cap.query_heads[self.cap.layers.index(layer)]

    def _head_options(self, layer):
        return [(f"head {h}", h) for h in self._heads(layer)]

    @property
    def params(self) -> dict:
        T = self.cap.last
        return dict(
            layer=self.layer_box.value,
            head=self.head_box.value,
            query_index=_clamp(self.query_slider.value, 0, T - 1, T - 1),
            variant=self.centre_toggle.value if self.centre_toggle.value in kg.VARIANTS else "raw",
            n_planes=_clamp(self.planes_slider.value, *PLANES_RANGE, 6),
        )

    def shows(self, layer, head) -> bool:
        """Whether (layer, head) is in the capture, i.e. whether ``select`` can show it."""
        return layer in self.cap.layers and head in self._heads(layer)

    def select(self, layer, head) -> bool:
        """Show ``layer``/``head`` if the capture holds them; otherwise keep the current ones
        and say so in the status line. Returns whether the selection changed to them."""
        if not self.shows(layer, head):
            self.status.value = (
                f"Layer {html.escape(str(layer))}, head {html.escape(str(head))} is not in this "
                f"capture; still showing layer {self.layer_box.value}, head {self.head_box.value}."
            )
            return False
        self._suspended = True
        try:
            self.layer_box.value = layer
            self.head_box.options = self._head_options(layer)
            self.head_box.value = head
        finally:
            self._suspended = False
        self.update()
        return True

    def set_params(self, query_index=None, centred=None, n_planes=None) -> None:
        """Set several controls at once (clamped) and redraw once."""
        self._suspended = True
        try:
            if query_index is not None:
                T = self.cap.last
                self.query_slider.value = _clamp(query_index, -T, T - 1, self.query_slider.value) % T
            if centred is not None:
                self.centre_toggle.value = "centred" if centred else "raw"
            if n_planes is not None:
                self.planes_slider.value = _clamp(n_planes, *PLANES_RANGE, self.planes_slider.value)
        finally:
            self._suspended = False
        self.update()

    def _on_layer(self, change) -> None:
        if self._suspended:
            return
        self._suspended = True
        try:  # keep the same slot in the new layer's group of query heads
            slot = self._heads(change["old"]).index(self.head_box.value) if change["old"] in self.cap.layers else 0
            self.head_box.options = self._head_options(change["new"])
            self.head_box.value = self._heads(change["new"])[slot]
        except Exception as exc:  # noqa: BLE001 -- a callback must not raise into the notebook
            self.status.value = _error(exc)
        finally:
            self._suspended = False
        self.update()

    def _on_change(self, _change) -> None:
        if not self._suspended:
            self.update()

    def on_selection(self, callback) -> None:
        """Call ``callback(layer, head)`` after every redraw (however the head was chosen)."""
        self._selection_listeners.append(callback)

    # ------------------------------------------------------------------ drawing

    def view(self, layer, head) -> kg.HeadView:
        if (layer, head) not in self._views:
            self._views[layer, head] = kg.head_view(self.cap, layer, head)
        return self._views[layer, head]

    def _cloud(self, layer, head, query_index, variant, n_planes) -> kp.KeyCloud:
        self.cloud = kp.key_cloud(self.view(layer, head), query_index, variant, n_planes, n_draw=self.n_draw)
        return self.cloud

    def update(self) -> None:
        """Recompute and redraw; problems go to the status line, never to the notebook."""
        try:
            cloud = self._cloud(**self.params)
            d = self.cap.keys.shape[-1]
            traces = plots.key_cloud_traces(cloud, d, len(self._hashed))
            for trace in traces:
                trace.pop("type")
            r = cloud.extent
            _sync(
                self.fig,
                dict(enumerate(traces)),
                {"title": plots.key_cloud_title(cloud, d), "xaxis.range": [-r, r], "yaxis.range": [-r, r]},
            )
            self.status.value = self._summary(cloud)
            for listener in self._selection_listeners:
                listener(cloud.layer, cloud.head)
        except Exception as exc:  # noqa: BLE001
            self.status.value = _error(exc)

    def _summary(self, c: kp.KeyCloud) -> str:
        d = self.cap.keys.shape[-1]
        n = len(self._hashed)
        return (
            f"<b>Layer {c.layer}, head {c.head}, {c.variant} keys</b>, query at position {c.position}. "
            f"With these {len(c.normals)} hyperplanes as one table, the query's bucket holds "
            f"<b>{c.share_real:.2%}</b> of the {n:,} hashed keys in real {d}-d hashing "
            f"(the 2-D picture shows {c.share_picture:.2%} in its wedge: it is a projection). "
            f"Drawn: {len(c.drawn):,} keys and the sink."
        )


class SinkHeatmap(widgets.VBox):
    """Weight on token 0 for every layer and query head; clicking a shipped cell selects it
    in ``cloud`` (a ``KeyCloudWidget``)."""

    def __init__(self, cloud: KeyCloudWidget | None = None, cap=None):
        self.cloud = cloud
        self.cap = cloud.cap if cloud is not None and cap is None else _load(cap)
        table = kg.sink_table(self.cap)
        self.shipped = kg.head_pairs(self.cap)
        self.selected = None if cloud is None else (cloud.layer_box.value, cloud.head_box.value)
        fig = plots.sink_heatmap_figure(
            table["sink_weight"], self.shipped, self.selected, self.cap.group_size, table["norm_ratio"], clickable=True
        )
        self.sink_weight = table["sink_weight"]
        self.fig = go.FigureWidget(fig)
        self.fig.add_class("pigviz-sink-heatmap")
        for trace in self.fig.data[:2]:
            trace.on_click(self._on_click)
        self.status = widgets.HTML("Click an outlined cell to look at that head's keys.")
        self.status.add_class("pigviz-status")
        if cloud is not None:
            cloud.on_selection(self._mark)
        super().__init__([self.fig, self.status])

    def _on_click(self, trace, points, selector=None) -> None:
        try:
            if not points.xs or not points.ys:
                return
            self.select(int(round(float(points.ys[0]))), int(round(float(points.xs[0]))))
        except Exception as exc:  # noqa: BLE001
            self.status.value = _error(exc)

    def select(self, layer: int, head: int) -> bool:
        """Show ``layer``/``head`` in the key cloud. A cell whose keys are not shipped shows the
        nearest outlined cell instead (nearest on the heatmap's grid), and says so. Returns
        whether the requested cell itself is shown."""
        n_layers, n_heads = self.sink_weight.shape
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            self.status.value = (
                f"There is no layer {layer}, head {head} (layers 0-{n_layers - 1}, heads 0-{n_heads - 1})."
            )
            return False
        weight = self.sink_weight[layer, head]
        shown = min(self.shipped, key=lambda cell: (cell[0] - layer) ** 2 + (cell[1] - head) ** 2)
        if self.cloud is not None:
            self.cloud.select(*shown)  # redraws, then moves our marker via on_selection
        else:
            self._mark(*shown)
        if shown == (layer, head):
            self.status.value = f"Layer {layer}, head {head}: weight on token 0 = {weight:.3f}."
            return True
        self.status.value = (
            f"Layer {layer}, head {head} puts {weight:.2f} of its weight on token 0, but its keys "
            f"are not shipped; showing the nearest outlined head, layer {shown[0]}, head {shown[1]} "
            f"({self.sink_weight[shown]:.2f})."
        )
        return False

    def _mark(self, layer, head) -> None:
        if self.selected == (layer, head):
            return
        self.selected = (layer, head)
        with self.fig.batch_update():
            self.fig.data[2].x = [head]
            self.fig.data[2].y = [layer]


class RealSCurveWidget(widgets.VBox):
    """K and L over one real query's keys: the formula's S-curve and counted frequencies."""

    def __init__(
        self,
        cap=None,
        layer: int = kg.SCURVE_HEAD["layer"],
        head: int = kg.SCURVE_HEAD["head"],
        query_index: int = kg.SCURVE_HEAD["query_index"],
        K: int = sh.DEFAULT_K,
        L: int = sh.DEFAULT_L,
        min_hits: int = DEFAULTS.min_hits,
        n_hashings: int = 100,
        n_keys: int = 250,
        K_max: int = 14,
        L_max: int = 300,
        seed: int = 0,
    ):
        self._suspended = True
        self.cap = _load(cap)
        self.status = widgets.HTML()
        self.status.add_class("pigviz-status")
        self.K_max = _clamp(K_max, 1, kh.MAX_PREFIX_BITS, 14)
        self.L_max = _clamp(L_max, 2, 2000, 300)
        if not self._shows(layer, head):
            layer, head = kg.SCURVE_HEAD["layer"], kg.SCURVE_HEAD["head"]
        self.view = kg.head_view(self.cap, layer, head)
        T = len(self.view.queries)
        self.query_index = _clamp(query_index, -T, T - 1, T - 1) % T
        # hash once at the largest K and L; every slider move only recounts
        hashed = np.flatnonzero(kg.non_exact_mask(self.view.n))
        keys = self.view.keys_as("centred")[hashed]
        query = self.view.queries[self.query_index]
        self.picked = kh.pick_keys(kg.unit_rows(keys) @ kg.unit_rows(query[None])[0], _clamp(n_keys, 20, 2000, 250))
        self.agreement = kh.agreement_prefix(
            query,
            keys[self.picked],
            _clamp(n_hashings, 10, 2000, 100),
            self.K_max,
            self.L_max,
            _clamp(seed, 0, 2**31, 0),
        )
        self.k_slider = widgets.IntSlider(
            value=_clamp(K, 1, self.K_max, sh.DEFAULT_K),
            min=1,
            max=self.K_max,
            description="K bits",
            continuous_update=True,
        )
        self.l_slider = widgets.IntSlider(
            value=_clamp(L, 1, self.L_max, sh.DEFAULT_L),
            min=1,
            max=self.L_max,
            description="L tables",
            continuous_update=True,
        )
        self.hits_toggle = widgets.ToggleButtons(
            options=[1, 2], value=2 if min_hits != 1 else 1, description="min hits", style={"button_width": "40px"}
        )
        self.k_slider.add_class("pigviz-k-slider")
        self.l_slider.add_class("pigviz-l-slider")
        self.fig = go.FigureWidget(plots.real_scurve_figure(self._curve(**self.params)))
        self.fig.add_class("pigviz-real-scurve")
        for control in (self.k_slider, self.l_slider, self.hits_toggle):
            control.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([self.k_slider, self.l_slider, self.hits_toggle]), self.fig, self.status])
        self._suspended = False
        self.update()

    def _shows(self, layer, head) -> bool:
        return layer in self.cap.layers and head in self.cap.query_heads[self.cap.layers.index(layer)]

    @property
    def params(self) -> dict:
        L = _clamp(self.l_slider.value, 1, self.L_max, sh.DEFAULT_L)
        return dict(
            K=_clamp(self.k_slider.value, 1, self.K_max, sh.DEFAULT_K),
            L=L,
            min_hits=min(L, 1 if self.hits_toggle.value == 1 else 2),
        )

    def set_params(self, K=None, L=None, min_hits=None) -> None:
        """Set several controls at once (clamped) and redraw once."""
        self._suspended = True
        try:
            if K is not None:
                self.k_slider.value = _clamp(K, 1, self.K_max, self.k_slider.value)
            if L is not None:
                self.l_slider.value = _clamp(L, 1, self.L_max, self.l_slider.value)
            if min_hits is not None:
                self.hits_toggle.value = 1 if _clamp(min_hits, 1, 2, 2) == 1 else 2
        finally:
            self._suspended = False
        self.update()

    def _on_change(self, _change) -> None:
        if not self._suspended:
            self.update()

    def _curve(self, K, L, min_hits) -> kh.RealSCurve:
        self.curve = kh.real_scurve(
            self.view, self.query_index, K, L, min_hits, agreement=self.agreement, picked=self.picked
        )
        return self.curve

    def update(self) -> None:
        try:
            curve = self._curve(**self.params)
            traces = plots.real_scurve_traces(curve)[1:]  # the keys' histogram does not move
            for trace in traces:
                trace.pop("type")
            _sync(self.fig, {1: traces[0], 2: traces[1]}, {"title": plots.real_scurve_title(curve)})
            self.status.value = self._summary(curve)
        except Exception as exc:  # noqa: BLE001
            self.status.value = _error(exc)

    def _summary(self, c: kh.RealSCurve) -> str:
        half = np.degrees(np.arccos(kh.half_point_cos(c.K, c.L, c.min_hits)))
        note = " (min hits lowered to L)" if c.min_hits < self.hits_toggle.value else ""
        return (
            f"<b>K = {c.K}, L = {c.L}, >= {c.min_hits} hits</b>{note}: u = 50% at {half:.1f} deg. "
            f"The formula expects this query to sample <b>{c.expected_sampled:,.0f}</b> of its "
            f"{len(c.cos_all):,} hashed keys. Counted over {c.n_hashings} hashings, "
            f"{c.coverage():.0%} of the {len(c.keys)} keys' 99% intervals contain the formula."
        )
