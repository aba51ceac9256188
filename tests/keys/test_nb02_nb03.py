"""What notebooks 02 and 03 add to the key geometry: how the picture's hyperplanes split the keys,
the picture's angles, the entries a query scans, the weight outside the exact set, MagicPIG's
output error with raw and centred keys, the side-by-side cloud figure and the lessons' tables."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pigviz.keys import geometry as kg
from pigviz.keys import hashing as kh
from pigviz.keys import projection as kp
from pigviz.lessons import nb02_key_cone as nb02
from pigviz.plots import key_geometry as pk
from tests.keys.test_geometry import planted_capture


def _numbers(text: str) -> list[float]:
    """The numbers a text states, thousands separators dropped."""
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


@pytest.fixture(scope="module")
def planted():
    return planted_capture()


# --------------------------------------------------------------------------- the picture


@pytest.mark.parametrize("variant", ["raw", "centred"])
def test_one_plane_splits_match_the_clouds_bucket_shares(planted, variant):
    view = kg.head_view(planted, 3, 1)
    splits = kp.plane_splits(view, 2, variant, n_planes=1)
    cloud = kp.key_cloud(view, 2, variant, n_planes=1)
    # with one hyperplane, the query's bucket is its side of that plane
    assert splits.picture[0] == pytest.approx(cloud.share_picture)
    assert splits.real[0] == pytest.approx(cloud.share_real)


def test_plane_splits_count_the_query_side_in_d_dimensions(planted):
    view = kg.head_view(planted, 5, 2)
    splits = kp.plane_splits(view, -1, "raw", n_planes=5, seed=3)
    planes = kp.hyperplanes(view.keys.shape[1], 5, 3)
    keys = view.keys[kg.non_exact_mask(view.n)]
    q_side = planes @ view.queries[-1] >= 0
    expected = [np.mean((keys @ p >= 0) == s) for p, s in zip(planes, q_side)]
    np.testing.assert_allclose(splits.real, expected)
    assert splits.picture.shape == (5,) and np.all((0 <= splits.picture) & (splits.picture <= 1))


def test_crosses_needs_keys_on_both_sides():
    splits = kp.PlaneSplits(0, 0, "raw", np.array([0.0, 0.005, 0.3, 0.995, 1.0]), np.full(5, 0.5))
    np.testing.assert_array_equal(splits.crosses(), [False, False, True, False, False])
    np.testing.assert_array_equal(splits.crosses(0.001), [False, True, True, True, False])


def test_plane_splits_agree_with_the_picture_when_keys_lie_in_its_plane():
    cap = planted_capture(seed=2)
    v = kg.head_view(cap, 3, 0)
    e1 = v.mean_key / np.linalg.norm(v.mean_key)
    q = v.queries[-1]
    e2 = q - (q @ e1) * e1
    e2 /= np.linalg.norm(e2)
    v.keys = (np.random.default_rng(0).standard_normal((v.n, 2)) * 3 + [5, 0]) @ np.stack([e1, e2])
    v._cache.clear()
    splits = kp.plane_splits(v, -1, "raw", n_planes=6)
    np.testing.assert_allclose(splits.picture, splits.real)


def test_picture_cosines_keep_the_sign_and_grow_in_size(planted):
    cloud = kp.key_cloud(kg.head_view(planted, 3, 0), -1, "raw", n_planes=3)
    pic = kp.picture_cosines(cloud)
    assert pic.shape == cloud.cos_query.shape
    assert np.all(np.sign(pic) == np.sign(cloud.cos_query))
    assert np.all(np.abs(pic) >= np.abs(cloud.cos_query) - 1e-12)


def test_plane_splits_bad_input(planted):
    view = kg.head_view(planted, 3, 0)
    for kwargs, word in (
        (dict(query_index=8), "query_index"),
        (dict(variant="both"), "variant"),
        (dict(n_planes=0), "n_planes"),
    ):
        with pytest.raises(ValueError, match=word):
            kp.plane_splits(view, **kwargs)


def test_key_cloud_pair_figure_puts_two_panels_on_equal_axes(planted):
    view = kg.head_view(planted, 3, 0)
    clouds = {v: kp.key_cloud(view, -1, v, n_planes=4) for v in kg.VARIANTS}
    fig = pk.key_cloud_pair_figure(clouds, view.keys.shape[1], 132)
    assert fig.layout.xaxis.range == fig.layout.xaxis2.range
    assert fig.layout.yaxis.scaleanchor == "x" and fig.layout.yaxis2.scaleanchor == "x2"
    names = [t.name for t in fig.data if t.showlegend]
    assert len(names) == len(set(names))  # one legend entry per kind of trace
    # two panels, raw keys then centred ones: each draws its cloud's keys and mean key, the raw mean
    # away from the origin, the centred one at it
    panels = [[t for t in fig.data if t.xaxis == axis] for axis in ("x", "x2")]
    assert sum(map(len, panels)) == len(fig.data)
    raw, centred = clouds["raw"], clouds["centred"]
    assert np.hypot(*raw.mean_xy) > 0.1 * raw.extent and np.allclose(centred.mean_xy, 0)
    for panel, cloud in zip(panels, (raw, centred)):
        drawn = {tuple(p) for t in panel if t.mode == "markers" for p in np.c_[t.x, t.y]}
        assert {tuple(p) for p in cloud.xy} | {tuple(cloud.mean_xy)} <= drawn
    with pytest.raises(ValueError, match="two"):
        pk.key_cloud_pair_figure([clouds["raw"]])


# --------------------------------------------------------------------------- hashing


def test_output_errors_vanish_when_every_key_is_sampled(planted):
    # one bit per table and 200 tables: every key shares the query's bucket in >= 2 tables
    errors = kh.output_errors(planted, K=1, L=200, seeds=(0,))
    n = planted.n_tokens
    for variant in ("raw", "centred"):
        assert np.all(errors.keys_read[variant] == n)
        assert errors.mean_error(variant).max() < 1e-3
    assert errors.exact == kg.EXACT_SINKS + kg.EXACT_RECENT


def test_output_errors_exact_only_reads_the_sinks_and_the_recent_keys(planted):
    errors = kh.output_errors(planted, K=8, L=10, seeds=(0, 1))
    view = kg.head_view(planted, 3, 0)
    exact = ~kg.non_exact_mask(view.n)
    s = view.keys[exact] @ view.queries[-1] * view.scaling
    w = np.exp(s - s.max())
    only = w / w.sum() @ view.values[exact]
    true = view.attention_weights()[-1] @ view.values
    want = np.linalg.norm(only - true) / np.linalg.norm(true)
    assert errors.error["exact only"][0, 0] == pytest.approx(np.full(2, want))
    assert errors.mean_error("raw").shape == (2, 4)
    with pytest.raises(ValueError, match="method"):
        errors.mean_error("topk")
    with pytest.raises(ValueError, match="seeds"):
        kh.output_errors(planted, K=4, L=4, seeds=())


def test_output_errors_need_the_last_query_at_the_last_position():
    cap = planted_capture()
    cap.query_positions = cap.query_positions - 1
    with pytest.raises(ValueError, match="last position"):
        kh.output_errors(cap, K=4, L=4, seeds=(0,))


# --------------------------------------------------------------------------- the lessons' tables


def test_lesson_02_tables_and_shares(planted):
    rows = kg.geometry_table(planted)
    assert len(nb02.query_table(rows)) == len(rows) == len(nb02.sink_key_table(rows))
    view = kg.head_view(planted, 3, 0)
    splits = kp.plane_splits(view)
    shown = nb02.plane_table(splits).frame  # one row per hyperplane: its shares in the picture and in d dims
    assert list(shown["query's side, picture"]) == list(splits.picture)
    assert list(shown["query's side, 64-d"]) == list(splits.real)
    fill = nb02._bucket_fill(view, n_planes=3)  # what notebook 02's cell counts, for its claim
    assert 1 <= fill["filled"] <= fill["buckets"] == 8 and 0 < fill["top_share"] <= 1
    shares = nb02.one_plane_shares(planted, n_planes=3, query_stride=4)
    assert shares["raw"].shape == (len(kg.head_pairs(planted)), 3, 2)
    # the summary names the capture's model and states its context and its queries
    summary = nb02.capture_summary(planted)
    assert planted.metadata["model_name"] in summary
    assert {planted.n_tokens, len(planted.query_positions)} <= set(_numbers(summary))


# --------------------------------------------------------------------------- one table for every query


@pytest.mark.parametrize("variant", ["raw", "centred"])
def test_bucket_shares_are_the_clouds_real_shares_for_every_query(planted, variant):
    view = kg.head_view(planted, 5, 1)
    shares = kp.bucket_shares(view, variant, n_planes=3, seed=2)
    assert shares.shape == (len(view.queries),)
    for i in range(len(view.queries)):
        assert shares[i] == pytest.approx(kp.key_cloud(view, i, variant, n_planes=3, seed=2).share_real)


def test_one_plane_bucket_shares_of_a_query_and_its_negation_add_up_to_one(planted):
    view = kg.head_view(planted, 3, 0)
    flipped = kg.HeadView(
        view.layer, view.head, view.kv_head, view.keys, view.values, -view.queries, view.positions, view.scaling
    )
    # one plane: a query's bucket is its side of it, and -q sits on the other side
    shares = kp.bucket_shares(view, "raw", n_planes=1)
    assert np.all((shares >= 0) & (shares <= 1))
    assert np.allclose(shares + kp.bucket_shares(flipped, "raw", n_planes=1), 1.0)


def test_all_bucket_shares_cover_every_head_and_query(planted):
    every = kp.all_bucket_shares(planted, n_planes=2)
    assert every["heads"] == kg.head_pairs(planted)
    for variant in ("raw", "centred"):
        assert every[variant].shape == (len(every["heads"]), planted.queries.shape[2])
    layer, head = every["heads"][-1]
    assert np.array_equal(every["centred"][-1], kp.bucket_shares(kg.head_view(planted, layer, head), "centred", 2))


def test_bucket_shares_bad_input(planted):
    view = kg.head_view(planted, 3, 0)
    with pytest.raises(ValueError, match="variant"):
        kp.bucket_shares(view, "sorted")
    with pytest.raises(ValueError, match="n_planes"):
        kp.bucket_shares(view, n_planes=0)


# --------------------------------------------------------------------------- figures


def test_sink_heatmap_invites_a_click_only_inside_the_widget():
    weight, shipped = np.random.default_rng(0).uniform(size=(6, 6)), [(2, 1), (4, 3)]
    static = pk.sink_heatmap_figure(weight, shipped, None, 3)
    live = pk.sink_heatmap_figure(weight, shipped, None, 3, clickable=True)
    assert not any("click" in (t.name or "") + (t.hovertemplate or "") for t in static.data)
    assert "(click one)" in live.data[3].name and "click" in live.data[1].hovertemplate
