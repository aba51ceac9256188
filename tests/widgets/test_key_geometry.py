"""KeyCloudWidget, SinkHeatmap and RealSCurveWidget react to their controls, clamp bad
values, and never raise into the notebook."""

from __future__ import annotations

import numpy as np
import pytest
from plotly.callbacks import Points

from pigviz.keys import hashing as kh
from pigviz.keys import projection as kp
from pigviz.lsh import simhash as sh
from pigviz.widgets.key_geometry import KeyCloudWidget, RealSCurveWidget, SinkHeatmap


@pytest.fixture(scope="module")
def cloud():
    return KeyCloudWidget(layer=19, head=6)


@pytest.fixture(scope="module")
def heat(cloud):
    return SinkHeatmap(cloud)


@pytest.fixture(scope="module")
def scurve():
    return RealSCurveWidget(n_hashings=30, n_keys=60, K_max=12, L_max=200)


def keys_x(w):
    return np.concatenate([np.asarray(w.fig.data[i].x if w.fig.data[i].x is not None else [], float) for i in (2, 3)])


def click(heat, layer, head, trace=0):
    points = Points(point_inds=[[layer, head]], xs=[head], ys=[layer], trace_name="", trace_index=trace)
    for handler in heat.fig.data[trace]._click_callbacks:  # what plotly calls on a browser click
        handler(heat.fig.data[trace], points, None)


def test_dom_classes_for_browser_tests(cloud, heat, scurve):
    assert "pigviz-key-cloud" in cloud.fig._dom_classes
    assert "pigviz-centre-toggle" in cloud.centre_toggle._dom_classes
    assert "pigviz-sink-heatmap" in heat.fig._dom_classes
    assert "pigviz-real-scurve" in scurve.fig._dom_classes


def test_centring_toggle_moves_the_cloud_onto_the_origin(cloud):
    cloud.select(19, 6)
    cloud.set_params(query_index=63, centred=False, n_planes=6)
    raw_mean = np.array([cloud.fig.data[4].x[0], cloud.fig.data[4].y[0]])
    raw_x = keys_x(cloud)
    raw_title = cloud.fig.layout.title.text
    assert raw_mean[0] > 5 and cloud.cloud.variant == "raw"
    cloud.centre_toggle.value = "centred"
    np.testing.assert_allclose([cloud.fig.data[4].x[0], cloud.fig.data[4].y[0]], 0.0)
    assert cloud.cloud.variant == "centred" and cloud.fig.layout.title.text != raw_title  # the title follows
    assert abs(np.mean(keys_x(cloud))) < 1.0 < np.mean(raw_x)
    assert "Could not" not in cloud.status.value and f"{cloud.cloud.share_real:.2%}" in cloud.status.value


def test_changing_head_and_planes_changes_the_figure(cloud):
    cloud.select(19, 6)
    cloud.set_params(query_index=63, centred=False, n_planes=6)
    before = keys_x(cloud)
    cloud.select(25, 4)
    assert cloud.params["layer"] == 25 and cloud.params["head"] == 4
    assert not np.array_equal(before, keys_x(cloud))
    assert len([v for v in cloud.fig.data[1].x if v is None]) == 6
    cloud.planes_slider.value = 11
    assert len([v for v in cloud.fig.data[1].x if v is None]) == 11
    cloud.layer_box.value = 13  # the head follows to the same slot of layer 13
    assert cloud.params["head"] == 4 and cloud.head_box.options[0][1] == 3


def test_status_reports_real_hashing_numbers(cloud):
    cloud.select(19, 6)
    cloud.set_params(query_index=-1, centred=True, n_planes=6)
    c = cloud.cloud
    assert f"{c.share_real:.2%}" in cloud.status.value
    assert c.share_real == pytest.approx(kp.key_cloud(cloud.view(19, 6), 63, "centred", 6).share_real)


def test_clamping_and_garbage_never_raise(cloud):
    cloud.set_params(query_index=999, n_planes=-3)
    assert cloud.params["query_index"] == 63 and cloud.params["n_planes"] == 1
    cloud.set_params(query_index="late", n_planes=float("nan"))
    assert cloud.params["query_index"] == 63 and cloud.params["n_planes"] == 1
    assert not cloud.select(4, 0) and "not in this capture" in cloud.status.value
    for trace in cloud.fig.data:
        values = [v for v in (trace.x if trace.x is not None else ()) if v is not None]
        assert not np.any(np.isnan(np.asarray(values, float)))
    cloud.set_params(query_index=63, n_planes=6)


def test_heatmap_click_on_a_shipped_cell_selects_it(cloud, heat):
    cloud.select(19, 6)
    click(heat, 13, 5)
    assert (cloud.params["layer"], cloud.params["head"]) == (13, 5)
    assert heat.selected == (13, 5)
    assert tuple(heat.fig.data[2].x) == (5,) and tuple(heat.fig.data[2].y) == (13,)
    click(heat, 2, 7, trace=1)  # the outline markers sit on top and are clickable too
    assert (cloud.params["layer"], cloud.params["head"]) == (2, 7)


def test_heatmap_click_elsewhere_shows_the_nearest_shipped_head(cloud, heat):
    cloud.select(2, 6)
    click(heat, 23, 4)  # a strong sink whose keys are not shipped
    assert (cloud.params["layer"], cloud.params["head"]) == (25, 4)
    assert "not shipped" in heat.status.value and "layer 25, head 4" in heat.status.value
    assert heat.selected == (25, 4)
    click(heat, 14, 0)  # nearest outlined cell on the grid: layer 13, head 3
    assert (cloud.params["layer"], cloud.params["head"]) == (13, 3)
    assert not heat.select(40, 1) and "no layer 40" in heat.status.value
    assert heat.selected == (13, 3)
    cloud.select(19, 8)  # the cloud's own controls move the heatmap marker
    assert heat.selected == (19, 8)


def test_real_scurve_moves_with_k_and_l(scurve):
    scurve.set_params(K=10, L=150, min_hits=2)
    formula = np.asarray(scurve.fig.data[1].y, float)
    counted = np.asarray(scurve.fig.data[2].y, float)
    np.testing.assert_array_equal(counted, kh.sampled_in(scurve.agreement, 10, 150, 2).mean(axis=1))
    scurve.k_slider.value = 7
    assert not np.allclose(formula, np.asarray(scurve.fig.data[1].y, float))
    assert np.all(np.asarray(scurve.fig.data[2].y, float) >= counted)  # fewer bits: sampled at least as often
    scurve.l_slider.value = 60
    x = np.asarray(scurve.fig.data[1].x, float)
    np.testing.assert_allclose(scurve.fig.data[1].y, sh.inclusion_probability(sh.collision_probability(x), 7, 60, 2))
    assert (scurve.params["K"], scurve.params["L"]) == (7, 60) and "Could not" not in scurve.status.value


def test_real_scurve_clamps(scurve):
    scurve.set_params(K=99, L=0, min_hits=2)
    assert scurve.params == dict(K=12, L=1, min_hits=1)
    assert "lowered" in scurve.status.value
    scurve.set_params(K="x", L=float("inf"))
    assert scurve.params["K"] == 12 and scurve.params["L"] == 1
    assert not np.any(np.isnan(np.asarray(scurve.fig.data[1].y, float)))
    assert "Could not" not in scurve.status.value
    scurve.set_params(K=10, L=150, min_hits=2)
