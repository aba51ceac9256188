"""The toy index's figure agrees with its data (lit buckets, hit counts, sampled keys = hits >= 2,
u), the step is the reference's, the ToyIndexExplorer's sliders change the picture, and bad
input is a ValueError naming the parameter."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pigviz.lsh.reference import simhash_codes
from pigviz.lsh.simhash import log_inclusion_probability
from pigviz.plots import toy_index as ti
from pigviz.widgets import toy_index as wmod
from pigviz.widgets.toy_index import ToyIndexExplorer


def _codes_of(step, K, L):
    return simhash_codes(step["keys"], step["planes"], K, L)


def _values(trace, axis):
    values = getattr(trace, axis)
    return [] if values is None else list(values)


def _trace(fig, name):
    (found,) = [t for t in fig.data if t.name == name]
    return found


@pytest.mark.parametrize("angle, K, L", [(60, 3, 4), (200, 1, 8), (300, 4, 2), (10, 2, 1)])
def test_the_step_is_the_references_index_and_query(angle, K, L):
    step = ti.toy_index_step(angle=angle, K=K, L=L, min_hits=min(2, L))
    codes = _codes_of(step, K, L)
    q_codes = simhash_codes(step["q"], step["planes"], K, L)
    assert np.array_equal(step["q_codes"], q_codes)
    assert np.isclose(np.degrees(np.arctan2(step["q"][1], step["q"][0])) % 360, angle)
    assert np.allclose(step["keys"].mean(axis=0), 0.0)  # centred
    offsets, ids = step["offsets"], step["ids"]
    assert offsets.shape == (L, 2**K + 1) and ids.shape == (L, 32)
    for t in range(L):
        for b in range(2**K):
            run = ids[t, offsets[t, b] : offsets[t, b + 1]]
            assert np.array_equal(run, np.flatnonzero(codes[:, t] == b))  # CSR, ascending within a bucket
    hits = (codes == q_codes).sum(axis=1)
    assert np.array_equal(ti.hits_from_tables(offsets, ids, q_codes), hits)
    sampled = np.flatnonzero(hits >= min(2, L))
    c = step["keys"][sampled]
    p = 1 - np.arccos(np.clip(c @ step["q"] / (np.linalg.norm(c, axis=1) * np.linalg.norm(step["q"])), -1, 1)) / np.pi
    np.testing.assert_allclose(step["u"], np.exp(log_inclusion_probability(p, K, L, min(2, L))))


def test_the_figure_lights_the_querys_buckets_and_draws_the_hits_and_u():
    step = ti.toy_index_step()
    fig = ti.toy_index_figure(**step)
    K, L = 3, 4
    shapes = fig.layout.shapes
    lit = [s for s in shapes if s.name == "q bucket"]
    assert len(lit) == L and len([s for s in shapes if s.name in ("q bucket", "bucket")]) == L * 2**K
    # bucket boxes come table by table, bucket by bucket: the lit one is q's bucket in each row
    buckets = [s for s in shapes if s.name in ("q bucket", "bucket")]
    for t in range(L):
        row = buckets[t * 2**K : (t + 1) * 2**K]
        assert [s.name for s in row].index("q bucket") == step["q_codes"][t]
    # the ids written in each bucket are the CSR's
    texts = _trace(fig, "bucket ids").text
    offsets, ids = step["offsets"], step["ids"]
    for t in range(L):
        for b in range(2**K):
            written = texts[t * 2**K + b].replace("<br>", " ").replace("·", "").split()
            assert [int(x) for x in written] == ids[t, offsets[t, b] : offsets[t, b + 1]].tolist()
    hits = (_codes_of(step, K, L) == step["q_codes"]).sum(axis=1)
    assert [int(h) for h in _trace(fig, "hit counts").text] == hits.tolist()
    key_boxes = [s for s in shapes if s.name in ("sampled", "not sampled")]
    assert np.array_equal(np.flatnonzero([s.name == "sampled" for s in key_boxes]), np.flatnonzero(hits >= 2))
    u_texts = [a.text for a in fig.layout.annotations if a.textangle == -90]
    assert u_texts == [ti._fmt_u(v) for v in step["u"]] and len(u_texts) == (hits >= 2).sum()
    colors = _trace(fig, "keys").marker.color
    assert [c == ti.SAMPLED for c in colors] == (hits >= 2).tolist()
    for trace in fig.data:
        for axis in ("x", "y"):
            values = np.array([v for v in _values(trace, axis) if v is not None], dtype=float)
            assert not np.isnan(values).any(), trace.name


def test_the_figure_draws_from_arrays_alone_without_the_plane():
    offsets = np.array([[0, 2, 2, 3, 3]])  # K = 2, L = 1: buckets {0, 2}, {}, {1}, {}
    fig = ti.toy_index_figure(offsets, np.array([[0, 2, 1]]), np.array([1]), min_hits=1)
    lit = [s for s in fig.layout.shapes if s.name == "q bucket"]
    assert len(lit) == 1 and _trace(fig, "hit counts").text == ("0", "0", "0")
    assert len(fig.data) == 8 and not _trace(fig, "keys").x


_ONE = dict(offsets=np.array([[0, 2, 3]]), ids=np.array([[0, 1, 2]]), q_codes=np.array([0]))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(offsets=np.array([[0, 2, 3]]), ids=np.array([[0, 1, 2]]), q_codes=np.array([5])), "q_codes"),
        (dict(offsets=np.array([[0, 2, 4]]), ids=np.array([[0, 1, 2]]), q_codes=np.array([0])), "offsets"),
        (dict(offsets=np.array([[0, 2, 3, 3]]), ids=np.array([[0, 1, 2]]), q_codes=np.array([0])), "offsets"),
        (dict(offsets=np.array([[0, 2, 3]]), ids=np.array([[0, 0, 2]]), q_codes=np.array([0])), "ids"),
        (dict(offsets=np.array([[0, 2, 3]]), ids=np.array([[0.0, 1, 2]]), q_codes=np.array([0])), "ids"),
        (dict(offsets=np.array([[0, 2, 3]]), ids=np.array([[0, 1, 2]]), q_codes=np.array([0]), u=[0.5]), "u"),
        (dict(_ONE, keys=np.ones((3, 2))), "q"),
        (dict(_ONE, keys=np.ones((3, 3)), q=[1.0, 0]), "keys"),
        (dict(_ONE, keys=np.ones((3, 2)), q=[0.0, 0.0]), "q"),
        (dict(_ONE, keys=np.ones((3, 2)), q=[1.0, 0.0], planes=np.ones((2, 3))), "planes"),
    ],
)  # fmt: skip
def test_bad_input_is_a_value_error_naming_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ti.toy_index_figure(**{"min_hits": 1, **kwargs})


@pytest.mark.parametrize(
    "kwargs, name", [(dict(K=9), "K"), (dict(L=0), "L"), (dict(n=99), "n"), (dict(min_hits=7), "min_hits")]
)
def test_bad_step_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ti.toy_index_step(**kwargs)


@pytest.fixture(scope="module")
def explorer():
    return ToyIndexExplorer()


def test_dom_classes_for_browser_tests(explorer):
    assert "pigviz-toy-index" in explorer.fig._dom_classes
    for slider in ("angle", "k", "l"):
        assert f"pigviz-toy-{slider}-slider" in getattr(explorer, f"{slider}_slider")._dom_classes


def test_the_widget_draws_the_default_step(explorer):
    explorer.set_params(angle=60, K=3, L=4)
    want = ti.toy_index_figure(**ti.toy_index_step())
    assert json.loads(explorer.fig.to_json())["data"] == json.loads(want.to_json())["data"]
    assert len(explorer.fig.layout.shapes) == len(want.layout.shapes)
    assert "Could not" not in explorer.status.value and explorer.params == dict(angle=60, K=3, L=4, min_hits=2)


def test_the_sliders_change_the_picture(explorer):
    explorer.set_params(angle=60, K=3, L=4)
    arrow = list(_trace(explorer.fig, "q").x)
    hits = _trace(explorer.fig, "hit counts").text
    explorer.angle_slider.value = 240
    assert list(_trace(explorer.fig, "q").x) != arrow and _trace(explorer.fig, "hit counts").text != hits
    want = ti.toy_index_figure(**ti.toy_index_step(angle=240))
    assert _trace(explorer.fig, "hit counts").text == _trace(want, "hit counts").text
    explorer.k_slider.value = 1
    assert len([s for s in explorer.fig.layout.shapes if s.name in ("bucket", "q bucket")]) == 4 * 2
    explorer.l_slider.value = 7
    assert len([s for s in explorer.fig.layout.shapes if s.name == "q bucket"]) == 7
    assert (explorer.params["K"], explorer.params["L"]) == (1, 7)
    explorer.l_slider.value = 1  # one table: a key is sampled at 1 hit
    assert explorer.params["min_hits"] == 1 and "lowered" in explorer.status.value
    explorer.set_params(angle=60, K=3, L=4)


def test_out_of_range_values_are_clamped_and_nothing_is_nan(explorer):
    explorer.set_params(angle=999, K=-3, L=50)
    assert explorer.params == dict(angle=355, K=1, L=wmod.L_RANGE[1], min_hits=2)
    explorer.set_params(angle="north", K=float("nan"))
    assert explorer.params["angle"] == 355 and explorer.params["K"] == 1
    for trace in explorer.fig.data:
        for axis in ("x", "y"):
            values = np.array([v for v in _values(trace, axis) if v is not None], dtype=float)
            assert not np.isnan(values).any()
    explorer.set_params(angle=60, K=3, L=4)


def test_a_failing_update_is_reported_not_raised(monkeypatch):
    w = ToyIndexExplorer()

    def broken(**_kw):
        raise RuntimeError("boom")

    monkeypatch.setattr(wmod.plots, "toy_index_figure", broken)
    w.k_slider.value = 2  # must not raise
    assert "Could not update" in w.status.value and "boom" in w.status.value
