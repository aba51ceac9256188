"""Interactive KV budget: pick a model, a context and (K, L); compare allocators.

Both widgets clamp what they are given and report problems in a status line; a
callback never raises into the notebook."""

from __future__ import annotations

import html

import ipywidgets as widgets
import plotly.graph_objects as go

from pigviz._util.config import DEFAULTS
from pigviz.memory import allocators, budget
from pigviz.memory.model_shapes import known_models
from pigviz.plots.budget import allocator_figure, index_bill_figure
from pigviz.widgets.base import clamp_int as _clamp

__all__ = ["KVBudgetWidget", "AllocatorWidget", "CONTEXT_RANGE"]

CONTEXT_RANGE = (1, 10**7)
K_RANGE, L_RANGE = (1, 20), (1, 400)
_DTYPE_OPTIONS = [("fp32 (4 B)", 4), ("fp16 / bf16 (2 B)", 2), ("fp8 (1 B)", 1)]


def _html_table(rows) -> str:
    cells = "".join(
        f"<tr><td style='padding:2px 12px 2px 0'>{html.escape(str(a))}</td>"
        f"<td style='padding:2px 0'><b>{html.escape(str(b))}</b></td></tr>"
        for a, b in rows
    )
    return f"<table style='font-size:13px'>{cells}</table>"


class KVBudgetWidget(widgets.VBox):
    """KV bytes, LSH tables and bucket offsets for one model, beside every known model."""

    def __init__(
        self,
        model: str = "Llama-3.1-8B",
        context: int = 98_304,
        dtype_bytes: int = 2,
        K: int = DEFAULTS.K,
        L: int = DEFAULTS.L,
    ):
        names = known_models()
        self.model_picker = widgets.Dropdown(
            options=names, value=model if model in names else names[0], description="model"
        )
        self.model_picker.add_class("pigviz-model-picker")
        self.context = widgets.IntText(
            value=_clamp(context, *CONTEXT_RANGE, 98_304), description="context", layout=widgets.Layout(width="220px")
        )
        self.context.add_class("pigviz-context")
        self.dtype = widgets.ToggleButtons(
            options=_DTYPE_OPTIONS,
            value=dtype_bytes if dtype_bytes in (1, 2, 4) else 2,
            description="KV dtype",
            style={"button_width": "120px"},
        )
        self.K = widgets.IntSlider(value=_clamp(K, *K_RANGE, 10), min=K_RANGE[0], max=K_RANGE[1], description="K bits")
        self.L = widgets.IntSlider(
            value=_clamp(L, *L_RANGE, 150), min=L_RANGE[0], max=L_RANGE[1], description="L tables"
        )
        self.table = widgets.HTML()
        self.status = widgets.HTML()
        self.figure = go.FigureWidget(self._figure_data())
        self.figure.add_class("pigviz-kv-bar")
        self.report: dict | None = None
        for control in (self.model_picker, self.context, self.dtype, self.K, self.L):
            control.observe(self._on_change, names="value")
        super().__init__(
            [
                widgets.HBox([self.model_picker, self.context]),
                self.dtype,
                widgets.HBox([self.K, self.L]),
                widgets.HBox([self.table, self.figure]),
                self.status,
            ]
        )
        self._on_change()

    def _figure_data(self) -> go.Figure:
        rows = [
            dict(
                label=name, **budget.index_bill(name, self.context.value, self.K.value, self.L.value, self.dtype.value)
            )
            for name in known_models()
        ]
        return index_bill_figure(
            rows,
            highlight=self.model_picker.value,
            title=f"{self.context.value:,} tokens, {self.dtype.value}-byte KV, "
            f"(K, L) = ({self.K.value}, {self.L.value})",
        )

    def _on_change(self, change=None):
        try:
            clamped = _clamp(self.context.value, *CONTEXT_RANGE, 98_304)
            if clamped != self.context.value:
                self.context.value = clamped  # re-enters this callback once with the clamped value
                return
            self.report = budget.budget_report(
                self.model_picker.value, clamped, self.dtype.value, K=self.K.value, L=self.L.value
            )
            self._render_table(self.report)
            fresh = self._figure_data()
            with self.figure.batch_update():
                for trace, new in zip(self.figure.data, fresh.data):
                    trace.x, trace.y = new.x, new.y
                    if new.text is not None:
                        trace.text = new.text
                self.figure.layout.title.text = fresh.layout.title.text
                self.figure.layout.yaxis.range = fresh.layout.yaxis.range
            notes = "; ".join(self.report["notes"][1:])
            self.status.value = f"<span style='color:#a15c00'>{html.escape(notes)}</span>" if notes else ""
        except Exception as exc:  # a widget must never raise into the notebook
            self.status.value = f"<span style='color:#b00'>could not update: {html.escape(str(exc))}</span>"

    def _render_table(self, r: dict):
        fmt = budget.format_bytes
        self.table.value = _html_table(
            [
                ("KV per token", f"{r['kv_bytes_per_token']:,} B"),
                ("KV per sequence", fmt(r["kv_bytes"])),
                ("read once at 1 TB/s", f"{r['kv_read_time_s'] * 1e3:.3g} ms"),
                (
                    "table bytes per token and head",
                    f"{r['table_bytes_per_head_token']} B vs {r['kv_pair_bytes_per_head_token']} B K+V",
                ),
                ("LSH table entries", fmt(r["table_bytes"])),
                ("bucket offsets", fmt(r["bucket_metadata_bytes"])),
                ("index / KV", f"{r['index_to_kv_ratio']:.2f}x"),
                ("candidates per query", f"{r['candidates_per_query']:,.0f}"),
                ("their index bytes / key bytes", f"{r['candidate_share_of_key_bytes']:.3%}"),
            ]
        )


class AllocatorWidget(widgets.VBox):
    """Four allocators on the seeded request mix; page size, reservation and shared prefix."""

    PAGE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    RESERVES = (2048, 4096, 8192, 16384, 32768)
    PREFIXES = (0, 256, 512, 1024, 2048, 4096, 8192)

    def __init__(self, page_tokens: int = 16, reserve_tokens: int = 8192, shared_prefix: int = 2048):
        self.requests = allocators.request_mix()
        self.page = widgets.SelectionSlider(
            options=self.PAGE_SIZES, description="page tokens", value=self._nearest(page_tokens, self.PAGE_SIZES)
        )
        self.reserve = widgets.Dropdown(
            options=[(f"{r:,} tokens", r) for r in self.RESERVES],
            value=self._nearest(reserve_tokens, self.RESERVES),
            description="reserve",
        )
        self.prefix = widgets.SelectionSlider(
            options=self.PREFIXES, description="shared prefix", value=self._nearest(shared_prefix, self.PREFIXES)
        )
        self.table = widgets.HTML()
        self.status = widgets.HTML()
        self.rows = self._rows()
        self.figure = go.FigureWidget(allocator_figure(self.rows))
        for control in (self.page, self.reserve, self.prefix):
            control.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([self.reserve, self.page, self.prefix]), self.figure, self.table, self.status])
        self._on_change()

    @staticmethod
    def _nearest(value, options):
        try:
            return min(options, key=lambda o: abs(o - float(value)))
        except (TypeError, ValueError):
            return options[len(options) // 2]

    def _rows(self):
        return allocators.assembly_table(
            self.requests,
            page_tokens=self.page.value,
            shared_prefix=self.prefix.value,
            reserves=(self.reserve.value, 2048),
        )

    def _on_change(self, change=None):
        try:
            self.rows = self._rows()
            fresh = allocator_figure(self.rows)
            with self.figure.batch_update():
                for trace, new in zip(self.figure.data, fresh.data):
                    trace.x, trace.y = new.x, new.y
                    if new.text is not None:
                        trace.text = new.text
                self.figure.layout.yaxis.range = fresh.layout.yaxis.range
            base = self.rows[0].batch or 1
            self.table.value = _html_table(
                [
                    (
                        r.name,
                        f"batch {r.batch:,} ({r.batch / base:.1f}x), held/logical {r.held_over_logical:.2f}x"
                        + (f", {r.overflow} cut off at their slot" if r.overflow else "")
                        + (f", {r.rejected} prompts longer than a slot rejected" if r.rejected else ""),
                    )
                    for r in self.rows
                ]
            )
            self.status.value = ""
        except Exception as exc:  # a widget must never raise into the notebook
            self.status.value = f"<span style='color:#b00'>could not update: {html.escape(str(exc))}</span>"
