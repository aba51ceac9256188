"""SimHashExplorer: move K, L and the hit threshold and watch the bucket and the S-curve move.

Left: a toy 2-D query and keys hashed with L tables of K hyperplanes (table 1 drawn).
Right: the probability that a key is sampled against its angle to the query, with markers
counted from real hashing. The counting is capped at a fixed number of sign bits so every
change stays well under 100 ms of compute.
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from pigviz._util.config import DEFAULTS
from pigviz.lsh import simhash as sh
from pigviz.lsh import simhash_checks
from pigviz.plots import simhash as plots
from pigviz.widgets.base import clamp_int as _clamp

__all__ = ["SimHashExplorer"]

K_RANGE = (1, 20)
L_RANGE = (1, 300)
MIN_HITS_CHOICES = (1, 2, 3, 4)
SEED_RANGE = (0, 10**6)
# Sign bits (keys x trials x tables x bits) the counted markers may use per change.
MC_BUDGET = 1_500_000
MC_TRIALS = (12, 400)
MARKER_ANGLES = np.arange(0.0, 181.0, 15.0)
CURVE_ANGLES = np.linspace(0.0, 180.0, 181)
NAPKIN_TOKENS = sh.NAPKIN_TOKENS


class SimHashExplorer(widgets.VBox):
    """Interactive SimHash lesson. ``display(SimHashExplorer())`` in a notebook."""

    def __init__(
        self,
        K: int = sh.DEFAULT_K,
        L: int = sh.DEFAULT_L,
        min_hits: int = DEFAULTS.min_hits,
        seed: int = 0,
        n_keys: int = 30,
        mc_budget: int = MC_BUDGET,
    ):
        self._suspended = True
        self.n_keys = _clamp(n_keys, 1, 500, 30)
        self.mc_budget = _clamp(mc_budget, 10_000, 50_000_000, MC_BUDGET)
        self.k_slider = widgets.IntSlider(
            value=_clamp(K, *K_RANGE, sh.DEFAULT_K),
            min=K_RANGE[0],
            max=K_RANGE[1],
            description="K bits",
            continuous_update=True,
        )
        self.l_slider = widgets.IntSlider(
            value=_clamp(L, *L_RANGE, sh.DEFAULT_L),
            min=L_RANGE[0],
            max=L_RANGE[1],
            description="L tables",
            continuous_update=True,
        )
        self.k_slider.add_class("pigviz-k-slider")
        self.l_slider.add_class("pigviz-l-slider")
        self.hits_toggle = widgets.ToggleButtons(
            options=list(MIN_HITS_CHOICES),
            description="min hits",
            value=_clamp(min_hits, 1, MIN_HITS_CHOICES[-1], 2),
            style={"button_width": "40px"},
        )
        self.hits_toggle.add_class("pigviz-minhits")
        self.seed_box = widgets.BoundedIntText(
            value=_clamp(seed, *SEED_RANGE, 0),
            min=SEED_RANGE[0],
            max=SEED_RANGE[1],
            description="seed",
            layout=widgets.Layout(width="160px"),
        )
        self.resample_button = widgets.Button(
            description="Resample", icon="refresh", tooltip="new keys, new hyperplanes"
        )
        self.status = widgets.HTML()
        self.status.add_class("pigviz-status")

        self.plane_fig = go.FigureWidget()
        self.scurve_fig = go.FigureWidget()
        self.scurve_fig.add_class("pigviz-scurve")
        self._build_figures()

        for control in (self.k_slider, self.l_slider, self.hits_toggle, self.seed_box):
            control.observe(self._on_change, names="value")
        self.resample_button.on_click(self._on_resample)
        controls = widgets.VBox(
            [
                widgets.HBox([self.k_slider, self.l_slider]),
                widgets.HBox([self.hits_toggle, self.seed_box, self.resample_button]),
            ]
        )
        super().__init__([controls, widgets.HBox([self.plane_fig, self.scurve_fig]), self.status])
        self._suspended = False
        self.update()

    # ------------------------------------------------------------------ state

    @property
    def params(self) -> dict:
        """The values the figures show, already clamped (min_hits never exceeds L)."""
        K = _clamp(self.k_slider.value, *K_RANGE, sh.DEFAULT_K)
        L = _clamp(self.l_slider.value, *L_RANGE, sh.DEFAULT_L)
        return dict(
            K=K,
            L=L,
            min_hits=min(L, _clamp(self.hits_toggle.value, 1, MIN_HITS_CHOICES[-1], 2)),
            seed=_clamp(self.seed_box.value, *SEED_RANGE, 0),
        )

    def set_params(self, K=None, L=None, min_hits=None, seed=None) -> None:
        """Set several controls at once (values are clamped) and redraw once."""
        self._suspended = True
        try:
            if K is not None:
                self.k_slider.value = _clamp(K, *K_RANGE, self.k_slider.value)
            if L is not None:
                self.l_slider.value = _clamp(L, *L_RANGE, self.l_slider.value)
            if min_hits is not None:
                self.hits_toggle.value = _clamp(min_hits, 1, MIN_HITS_CHOICES[-1], self.hits_toggle.value)
            if seed is not None:
                self.seed_box.value = _clamp(seed, *SEED_RANGE, self.seed_box.value)
        finally:
            self._suspended = False
        self.update()

    def _on_change(self, _change) -> None:
        if not self._suspended:
            self.update()

    def _on_resample(self, _button) -> None:
        self.seed_box.value = (self.seed_box.value + 1) % (SEED_RANGE[1] + 1)  # triggers update

    # ------------------------------------------------------------------ drawing

    def _build_figures(self) -> None:
        plane, scurve = self._figures(**self.params)
        self.plane_fig.add_traces(plane.data)
        self.plane_fig.update_layout(plane.layout)
        self.scurve_fig.add_traces(scurve.data)
        self.scurve_fig.update_layout(scurve.layout)

    def mc_trials(self, K: int, L: int) -> int:
        """Hashings behind the counted markers: as many as the sign-bit budget allows."""
        per_trial = (len(MARKER_ANGLES) + 1) * K * L
        return int(np.clip(self.mc_budget // per_trial, *MC_TRIALS))

    def _figures(self, K: int, L: int, min_hits: int, seed: int):
        demo = simhash_checks.plane_demo(K=K, L=L, min_hits=min_hits, seed=seed, n_keys=self.n_keys)
        plane = plots.plane_figure(demo)
        p = sh.collision_probability(np.cos(np.radians(CURVE_ANGLES)))
        mine = sh.inclusion_probability(p, K, L, min_hits)
        curves = [
            ("one table: p^K", p**K, plots.COLORS["one_table"], "dot"),
            (">= 1 of L tables", sh.inclusion_probability(p, K, L, 1), plots.COLORS["hits1"], "solid"),
            (
                ">= 2 of L tables",
                sh.inclusion_probability(p, K, L, 2) if L >= 2 else np.zeros_like(p),
                plots.COLORS["hits2"],
                "solid",
            ),
            (f">= {min_hits} of L tables", mine, plots.COLORS["hitsm"], "dash"),
        ]
        trials = self.mc_trials(K, L)
        mc = simhash_checks.monte_carlo_inclusion(
            np.cos(np.radians(MARKER_ANGLES)), K, L, min_hits, n_trials=trials, seed=seed
        )
        marker_color = plots.COLORS[{1: "hits1", 2: "hits2"}.get(min_hits, "hitsm")]
        scurve = plots.scurve_figure(
            CURVE_ANGLES,
            curves,
            [(f"counted, >= {min_hits} ({trials} hashings)", mc, marker_color)],
            K=K,
            L=L,
            height=500,
            width=560,
        )
        # the >= 2 curve is meaningless for L = 1; the extra curve only matters past 2 hits
        scurve.data[2].visible = L >= 2
        scurve.data[3].visible = min_hits > 2
        self._last = dict(demo=demo, mc=mc, trials=trials)
        return plane, scurve

    def update(self) -> None:
        """Recompute and redraw; problems go to the status line, never to the notebook."""
        try:
            params = self.params
            plane, scurve = self._figures(**params)
            for target, source in ((self.plane_fig, plane), (self.scurve_fig, scurve)):
                with target.batch_update():
                    for old, new in zip(target.data, source.data):
                        old.update(new.to_plotly_json(), overwrite=True)
                    target.layout.title = source.layout.title
            self.status.value = self._summary(**params)
        except Exception as exc:  # a widget callback must not raise into the notebook
            self.status.value = f"<span style='color:#b00'>Could not update: {html.escape(str(exc))}</span>"

    def _summary(self, K: int, L: int, min_hits: int, seed: int) -> str:
        demo = self._last["demo"]
        u_orth = sh.inclusion_probability(0.5, K, L, min_hits)
        half = sh.crossing_cos(K, L, min_hits)
        note = ""
        if min_hits != self.hits_toggle.value:
            note = f" (min hits lowered to L = {L})"
        scanned = sh.expected_candidates(NAPKIN_TOKENS, K, L)
        scanned = f"{scanned:,.0f}" if scanned >= 10 else f"{scanned:.2g}"
        return (
            f"<b>K = {K}, L = {L}</b>, a key is sampled when >= {min_hits} tables collide{note}. "
            f"Orthogonal key: u = {u_orth:.3g}; u = 50% at {np.degrees(np.arccos(half)):.1f} deg.<br>"
            f"Toy keys sampled: {int(demo.included.sum())} of {len(demo.hits)}. "
            f"Entries one query scans for n = {NAPKIN_TOKENS:,} keys: L n / 2^K = {scanned}. "
            f"Markers: {self._last['trials']} independent hashings."
        )
