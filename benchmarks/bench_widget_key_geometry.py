"""How long the key-geometry widgets compute per control change (Python side, no browser).

    python benchmarks/bench_widget_key_geometry.py [--changes 60]

For KeyCloudWidget (query, centring, hyperplanes, head), SinkHeatmap clicks and
RealSCurveWidget (K, L, min hits): the median and 90th percentile of the whole callback
(compute + figure-widget sync) and of the computation alone (data + the traces the widget
sends). The
target is a compute median under 100 ms at default sizes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from plotly.callbacks import Points  # noqa: E402

from pigviz.plots import key_geometry as plots  # noqa: E402
from pigviz.widgets.key_geometry import KeyCloudWidget, RealSCurveWidget, SinkHeatmap  # noqa: E402


def row(name, seconds):
    ms = sorted(s * 1e3 for s in seconds)
    p90 = ms[int(0.9 * (len(ms) - 1))]
    print(f"{name:<36} n={len(ms):3d}  median {statistics.median(ms):6.1f} ms  p90 {p90:6.1f} ms  max {ms[-1]:6.1f} ms")


def timed(action):
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def bench_cloud(changes: int, rng) -> None:
    t0 = time.perf_counter()
    cloud = KeyCloudWidget()
    heat = SinkHeatmap(cloud)
    print(f"KeyCloudWidget + SinkHeatmap built in {time.perf_counter() - t0:.2f} s (capture load included)")
    pairs = heat.shipped
    callback, compute = [], []
    for _ in range(changes):
        which = rng.integers(4)
        if which == 0:
            callback.append(timed(lambda: setattr(cloud.query_slider, "value", int(rng.integers(0, 64)))))
        elif which == 1:
            toggle = cloud.centre_toggle
            callback.append(timed(lambda: setattr(toggle, "value", "raw" if toggle.value == "centred" else "centred")))
        elif which == 2:
            callback.append(timed(lambda: setattr(cloud.planes_slider, "value", int(rng.integers(1, 17)))))
        else:
            layer, head = pairs[int(rng.integers(len(pairs)))]
            callback.append(timed(lambda: cloud.select(layer, head)))
        params = cloud.params
        compute.append(timed(lambda: plots.key_cloud_traces(cloud._cloud(**params), 64, 8124)))
    row("key cloud: full callback", callback)
    row("key cloud: compute only", compute)

    clicks = []
    for _ in range(max(10, changes // 3)):
        layer, head = int(rng.integers(0, 30)), int(rng.integers(0, 9))
        if rng.random() < 0.5:
            layer, head = pairs[int(rng.integers(len(pairs)))]
        points = Points(point_inds=[[layer, head]], xs=[head], ys=[layer], trace_name="", trace_index=0)
        clicks.append(timed(lambda: heat._on_click(heat.fig.data[0], points)))
    row("sink heatmap click (-> key cloud)", clicks)


def bench_scurve(changes: int, rng) -> None:
    t0 = time.perf_counter()
    widget = RealSCurveWidget()
    print(
        f"RealSCurveWidget built in {time.perf_counter() - t0:.2f} s "
        f"({widget.agreement.n_hashings} hashings of {len(widget.picked)} keys at K <= {widget.K_max}, "
        f"L <= {widget.L_max})"
    )
    callback, compute = [], []
    for _ in range(changes):
        which = rng.integers(3)
        if which == 0:
            callback.append(timed(lambda: setattr(widget.k_slider, "value", int(rng.integers(1, widget.K_max + 1)))))
        elif which == 1:
            callback.append(timed(lambda: setattr(widget.l_slider, "value", int(rng.integers(1, widget.L_max + 1)))))
        else:
            flipped = 1 if widget.hits_toggle.value == 2 else 2
            callback.append(timed(lambda: setattr(widget.hits_toggle, "value", flipped)))
        params = widget.params
        compute.append(timed(lambda: plots.real_scurve_traces(widget._curve(**params))))
    row("real S-curve: full callback", callback)
    row("real S-curve: compute only", compute)
    default = []
    for k in range(20):
        widget.set_params(K=10, L=150, min_hits=2)
        default.append(timed(lambda: widget.set_params(L=151 + k)))
    row("real S-curve at K=10, L~150", default)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=60)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    bench_cloud(args.changes, rng)
    bench_scurve(args.changes, rng)


if __name__ == "__main__":
    main()
