"""The error-vs-budget study: runner, decode-time tables, results file, summaries, widget, CLI."""

import json
import math

import numpy as np
import pytest
import torch

from pigviz.attention import dense_attention, streaming_attention
from pigviz.lsh.index import build_index
from pigviz.lsh.magicpig import attend, sampled_attention, synthetic_decode_step
from pigviz.study import findings
from pigviz.study import run as study
from tests.factories import make_capture

TINY = dict(settings=((4, 12), (3, 16)), seeds=2, sinks=2, recent=8, min_hits=2, quest_page=4)


def tiny_capture(n_layers=2, n=96, t=6, d=8, seed=0):
    """Keys in a cone with a sink, like a real model's, so every method has work to do."""
    cap = make_capture(n_layers=n_layers, n_heads=6, n_kv=2, n=n, t=t, d=d, seed=seed, outputs=False)
    gen = torch.Generator().manual_seed(seed)
    cap.keys += 2.0 * torch.randn(n_layers, 2, 1, d, generator=gen)
    cap.keys[:, :, 0] *= 4.0
    return cap


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "r.json"
    spec = study.StudySpec(settings=((4, 12), (3, 16), study.PAPER_SETTING), seeds=2, sinks=2, recent=8, quest_page=4)
    results = study.run_study(tiny_capture(), spec, out, progress=False, command="test")
    return results, out


# -- decode-time tables ----------------------------------------------------------------------------
@pytest.mark.parametrize("n", [90, 95, 100])
def test_decode_index_matches_a_fresh_build_when_nothing_is_centred(n):
    q, k, v = synthetic_decode_step(6, 2, 100, 16, seed=3)
    prompt = build_index(k[:, :90], K=4, L=20, sinks=4, recent=10, seed=1, centre=False)
    fresh = build_index(k[:, :n], K=4, L=20, sinks=4, recent=10, seed=1, centre=False)
    a, sa = attend(study.decode_index(prompt, k, n), q, k[:, :n], v[:, :n])
    b, sb = attend(fresh, q, k[:, :n], v[:, :n])
    assert torch.equal(a, b) and torch.equal(sa["keys_read"], sb["keys_read"])


def test_decode_index_refuses_keys_outside_the_recent_window():
    _, k, _ = synthetic_decode_step(3, 1, 100, 8, seed=0)
    prompt = build_index(k[:, :80], K=3, L=5, sinks=2, recent=10, seed=0)
    assert study.decode_index(prompt, k, 80) is prompt
    with pytest.raises(ValueError, match="n must be in"):
        study.decode_index(prompt, k, 91)


def test_exact_outputs_are_causal_dense_attention():
    cap = tiny_capture()
    q, k, v = cap.queries[0], cap.keys[0], cap.values[0]
    _, exact = study.exact_outputs(q, k, v)
    for t, p in enumerate(cap.query_positions.tolist()):
        ref, _ = dense_attention(q[:, t], k[:, : p + 1], v[:, : p + 1])
        assert torch.allclose(exact[:, t], ref, atol=1e-5)


def test_one_position_equals_the_engine_called_directly():
    cap = tiny_capture(n_layers=1, t=1)
    q, k, v = cap.queries[0], cap.keys[0], cap.values[0]
    spec = study.StudySpec(
        settings=((4, 12),), seeds=1, methods=("magicpig", "streaming"), sinks=2, recent=8, ablations=False
    )
    res = study.run_layer(q, k, v, spec)
    out, stats = sampled_attention(q[:, 0], k, v, K=4, L=12, sinks=2, recent=8, seed=0)
    exact, _ = dense_attention(q[:, 0], k, v)
    err = ((out - exact).norm(dim=-1) / exact.norm(dim=-1)).tolist()
    assert np.allclose(res["magicpig K4 L12"]["error"][0], err, rtol=1e-6)
    assert np.allclose(res["magicpig K4 L12"]["budget"][0], (stats["keys_read"].double() / k.shape[1]).tolist())
    s_out, _ = streaming_attention(q[:, 0], k, v, sinks=2, recent=8)
    s_err = ((s_out - exact).norm(dim=-1) / exact.norm(dim=-1)).tolist()
    assert np.allclose(res["streaming"]["error"][0], s_err, rtol=1e-6)


def test_first_position_variant_is_the_method_itself_when_there_is_one_position():
    cap = tiny_capture(n_layers=1, t=1)
    spec = study.StudySpec(settings=(study.PAPER_SETTING,), seeds=1, methods=("magicpig",), sinks=2, recent=8)
    res = study.run_layer(cap.queries[0], cap.keys[0], cap.values[0], spec)
    assert res["magicpig K10 L150 first_position"]["error"] == res["magicpig K10 L150"]["error"]
    assert res["magicpig K10 L150 no_exact"]["error"] != res["magicpig K10 L150"]["error"]


# -- the study end to end --------------------------------------------------------------------------
def test_tiny_study_has_every_series_with_the_right_shapes(tiny_results):
    results, _ = tiny_results
    layers, heads = len(results["layers"]), results["heads"]
    assert layers == 2 and heads == 6 and results["last"] == 6
    expected = {
        "magicpig K4 L12",
        "magicpig K3 L16",
        "magicpig K10 L150",
        "magicpig K10 L150 no_sink",
        "magicpig K10 L150 no_exact",
        "magicpig K10 L150 no_correction",
        "magicpig K10 L150 first_position",
        "magicpig K10 L150 no_window",
        "streaming",
    }
    expected |= {
        f"{m} @K{K} L{L}{v}"
        for m, v in (
            ("topk", ""),
            ("quest", ""),
            ("oracle", ""),
            ("hybrid", ""),
            ("quest", " rank_all"),
            ("mp_exact_top", ""),
            ("vattention", ""),
            ("sparq", ""),
        )
        for K, L in ((4, 12), (3, 16), (10, 150))
    }
    assert set(results["series"]) == expected
    for name, s in results["series"].items():
        seeds = 2 if s["method"] in study.RANDOM_METHODS else 1
        for key in ("error", "budget", "bytes_share"):
            arr = np.asarray(s[key])
            assert arr.shape == (layers, seeds, heads), name
            assert np.all(np.isfinite(arr)) and np.all(arr >= 0)
        assert np.all(np.asarray(s["budget"]) <= 1.0)
        first_only = s["variant"] in ("no_exact", "no_window", "first_position")
        assert s["positions"] == (1 if first_only else 6)


def test_budgets_count_distinct_keys_of_the_visible_prefix(tiny_results):
    results, _ = tiny_results
    n_visible = np.arange(96 - 6, 96) + 1
    stream = np.asarray(results["series"]["streaming"]["budget"])
    assert np.allclose(stream, np.mean(10 / n_visible), rtol=1e-4)  # 2 sinks + 8 recent
    for K, L in ((4, 12), (3, 16)):
        target = np.asarray(results["series"][f"magicpig K{K} L{L}"]["budget"]).mean(axis=(1, 2))  # per layer
        mp = np.asarray(results["series"][f"magicpig K{K} L{L}"]["budget"])
        assert np.all(mp >= np.mean(10 / n_visible) - 1e-9)  # never below the exact set
        topk = np.asarray(results["series"][f"topk @K{K} L{L}"]["budget"]).mean(axis=(1, 2))
        assert np.allclose(topk, target, atol=1 / n_visible[0])  # matched per layer


def test_results_file_round_trips_without_nan(tiny_results):
    results, out = tiny_results
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert study.load_results(out) == json.loads(text)
    assert not (out.parent / (out.name + ".partial")).exists()


def test_a_stopped_study_resumes_from_its_partial_file(tmp_path, monkeypatch):
    cap = tiny_capture()
    spec = study.StudySpec(
        settings=((4, 12),), seeds=1, methods=("magicpig", "topk"), sinks=2, recent=8, ablations=False
    )
    calls = []
    real = study.run_layer

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(study, "run_layer", flaky)
    with pytest.raises(KeyboardInterrupt):
        study.run_study(cap, spec, tmp_path / "r.json", progress=False)
    assert (tmp_path / "r.json.partial").is_file() and not (tmp_path / "r.json").exists()
    calls.clear()
    monkeypatch.setattr(study, "run_layer", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    resumed = study.run_study(cap, spec, tmp_path / "r.json", progress=False)
    assert len(calls) == 1  # layer 0 was not redone
    fresh = study.run_study(cap, spec, None, progress=False)
    assert resumed["series"] == fresh["series"]


# -- bad inputs ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(seeds=0), ValueError, "seeds"),
        (dict(seeds=1.5), TypeError, "seeds"),
        (dict(methods=("magicpig", "nope")), ValueError, "methods entry"),
        (dict(methods=("topk",)), ValueError, "magicpig"),
        (dict(settings=()), ValueError, "settings"),
        (dict(settings=((10, 150), (10, 150))), ValueError, "settings"),
        (dict(settings=((0, 150),)), ValueError, "K"),
        (dict(min_hits=5, settings=((4, 4),)), ValueError, "min_hits"),
    ],
)
def test_bad_specs_name_the_parameter(kwargs, error, match):
    with pytest.raises(error, match=match):
        study.StudySpec(**kwargs)


def test_bad_runs_name_the_problem(tmp_path):
    cap = tiny_capture()
    with pytest.raises(ValueError, match="layers"):
        study.run_study(cap, study.StudySpec(**TINY), layers=[7], progress=False)
    with pytest.raises(ValueError, match="recent"):
        study.run_layer(cap.queries[0], cap.keys[0], cap.values[0], study.StudySpec(**dict(TINY, recent=3)))
    (tmp_path / "x.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="pigviz-study-v1"):
        study.load_results(tmp_path / "x.json")
    with pytest.raises(FileNotFoundError, match="pigviz study"):
        study.load_results(tmp_path / "missing.json")


def test_summaries_reject_unknown_selections(tiny_results):
    results, _ = tiny_results
    with pytest.raises(ValueError, match="methods"):
        findings.curves(results, methods=["magicpig", "bogus"])
    with pytest.raises(ValueError, match="layer"):
        findings.series_summary(results, "streaming", layer=99)
    with pytest.raises(ValueError, match="head"):
        findings.series_summary(results, "streaming", head=6)
    with pytest.raises(ValueError, match="series"):
        findings.per_layer(results, "nope")


def test_summaries_average_every_row_once(tiny_results):
    results, _ = tiny_results
    name = "magicpig K4 L12"
    overall = findings.series_summary(results, name)
    per = [
        findings.series_summary(results, name, layer=x, head=h)["error"]
        for x in results["layers"]
        for h in range(results["heads"])
    ]
    assert math.isclose(overall["error"], np.mean(per), rel_tol=1e-12)
    assert overall["rows"] == 2 * 6 * 6 and overall["seeds"] == 2
    mean, std = findings.per_layer(results, name)
    assert mean.shape == (2,) and np.all(std >= 0)
    better, total = findings.wins(results, "hybrid @K4 L12", "magicpig K4 L12")
    assert total == 12 and 0 <= better <= 12
    pts = findings.curves(results)
    assert len(pts["magicpig"]) == 3 and len(pts["streaming"]) == 1 and len(pts["no_sink"]) == 1
    for points in pts.values():
        assert all(np.diff([p["budget"] for p in points]) >= 0)


# -- figures and the widget ------------------------------------------------------------------------
def test_figures_have_titles_axes_and_no_nan(tiny_results):
    from pigviz.plots import study as plots

    results, _ = tiny_results
    figs = [plots.error_budget_figure(findings.curves(results), findings.METHOD_LABELS, title="t")]
    by_bytes = plots.error_budget_figure(findings.curves(results), findings.METHOD_LABELS, title="t", x="bytes_share")
    topk = next(t for t in by_bytes.data if t.name == findings.METHOD_LABELS["topk"])
    assert min(topk.x) > 50  # percent of dense's bytes: TopK scores every key
    # the x axis is each point's bytes share of dense (in %), not its budget
    points = findings.curves(results)["topk"]
    assert list(topk.x) == pytest.approx([100 * p["bytes_share"] for p in points])
    assert list(topk.x) != pytest.approx([100 * p["budget"] for p in points])
    figs.append(by_bytes)
    with pytest.raises(ValueError, match="x must be one of"):
        plots.error_budget_figure(findings.curves(results), findings.METHOD_LABELS, title="t", x="speed")
    mean, std = findings.per_layer(results, "magicpig K4 L12")
    figs.append(plots.per_layer_figure(results["layers"], {"MagicPIG": ("magicpig", mean, std)}, title="t"))
    ratio = findings.head_grid(results, "magicpig K4 L12") / findings.head_grid(results, "topk @K4 L12")
    figs.append(plots.head_ratio_figure(ratio, results["layers"], title="t"))
    figs.append(plots.sink_figure(np.full((2, 6), 0.3), ratio, results["layers"], title="t"))
    figs.append(
        plots.kl_sweep_figure(
            [{"K": 4, "L": 12, "budget": 0.1, "error": 0.2}], [{"budget": 0.1, "error": 0.1}], title="t"
        )
    )
    for fig in figs:
        assert fig.layout.title.text == "t" and fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
        for trace in fig.data:
            for attr in ("x", "y", "z"):
                values = getattr(trace, attr, None)
                if values is not None:
                    assert np.all(np.isfinite(np.asarray(values, dtype=float))), (trace.name, attr)


def test_widget_clamps_and_never_raises(tiny_results):
    from pigviz.widgets.study import StudyExplorer

    results, _ = tiny_results
    w = StudyExplorer(results)
    assert "pigviz-study-layer" in w.layer_picker._dom_classes and "pigviz-study-chart" in w.chart._dom_classes
    pairs = findings.curves(results, w.selection["layer"], w.selection["head"], ["magicpig", "topk"])
    assert len(w.chart.data) > 0 and w.status.value.count("<br>") == len(pairs["magicpig"])  # a line per budget
    w.set_selection(layer=1000, head=-7, methods=["topk", "bogus"])
    assert w.selection == {"layer": 1, "head": 0, "methods": ["topk"]}
    w.set_selection(methods=[])
    assert "Tick at least one" in w.status.value and len(w.chart.data) == 0
    w.results = {"series": None}  # a broken results dict: message, not exception
    w.update()
    assert "Could not update" in w.status.value


# -- the shipped study -----------------------------------------------------------------------------
def test_shipped_results_cover_every_row():
    results = findings.load_shipped_results()
    assert len(results["layers"]) == 30 and results["heads"] == 9 and results["last"] == 64
    assert findings.series_summary(results, "magicpig K10 L150")["rows"] == 17_280


def test_cli_rejects_bad_arguments(capsys):
    from pigviz.cli import main

    assert main(["study", "--seeds", "0", "--out", "x.json"]) == 2
    assert "seeds" in capsys.readouterr().err
    assert main(["study"]) == 2
    assert "--out is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["study", "--settings", "10", "--out", "x.json"])


def test_cli_summarises_finished_results(tiny_results, capsys):
    from pigviz.cli import main

    _, out = tiny_results
    assert main(["study", "--from", str(out)]) == 0
    assert "magicpig K4 L12" in capsys.readouterr().out


def test_capture_cache_key_changes_with_context_and_last():
    a = study.capture_cache_path("some/model", 8192, 64)
    assert a != study.capture_cache_path("some/model", 4096, 64) != study.capture_cache_path("some/model", 8192, 32)
    assert a.suffix == ".safetensors" and "n8192-t64" in a.name


# -- the live experiments of notebook 06 ---------------------------------------------------------
def test_five_line_estimator_matches_the_engine():
    from pigviz.attention import stable_softmax
    from pigviz.lsh.simhash import log_inclusion_probability
    from pigviz.study.experiments import decode_step_pieces

    step = decode_step_pieces(row=0, head=1)
    q, K_S, d = step["q"], step["K_S"], len(step["q"])
    centred = K_S - step["mu"]
    cos = centred @ q / (np.linalg.norm(centred, axis=1) * np.linalg.norm(q))
    log_u = log_inclusion_probability(1 - np.arccos(np.clip(cos, -1, 1)) / np.pi, step["K"], step["L"], 2)
    w = stable_softmax(np.concatenate([K_S @ q / np.sqrt(d) - log_u, step["K_exact"] @ q / np.sqrt(d)]))
    o_hat = w @ np.concatenate([step["V_S"], step["V_exact"]])
    assert np.allclose(o_hat, step["engine"], atol=1e-4 * np.abs(step["engine"]).max())
    assert step["keys_read"] == len(K_S) + len(step["K_exact"])


def test_mass_captured_never_beats_topk_and_budgets_fall_with_K():
    from pigviz.study.experiments import kl_sweep, mass_captured, sampled_share

    m = mass_captured(row=0)
    read = np.add(m["exact"], m["sampled"])
    assert np.all(read <= np.asarray(m["topk"]) + 1e-5) and np.all((read > 0) & (read <= 1 + 1e-5))
    sweep, topk = kl_sweep(row=0, Ks=(9, 11), Ls=(60,))
    assert sweep[0]["budget"] > sweep[1]["budget"] and len(topk) == 2
    share = sampled_share(row=0, dims=(32, 64, 128))
    iso = [share["isotropic"][d] for d in (32, 64, 128)]
    assert iso[0] > iso[1] > iso[2] > 0 and 0 < share["real"] < 1
    with pytest.raises(ValueError, match="row"):
        mass_captured(row=9)


# -- the affordable estimators against TopK, in keys and in bytes ----------------------------------
def test_matched_table_compares_each_method_with_topk_at_its_budget(tiny_results):
    results, _ = tiny_results
    rows = findings.matched_table(results)
    assert [row["setting"] for row in rows] == [tuple(s) for s in results["spec"]["settings"]]
    for row in rows:
        K, L = row["setting"]
        topk = findings.series_summary(results, f"topk @K{K} L{L}")
        assert row["reference"]["error"] == topk["error"]
        assert row["reference"]["bytes_share"] == topk["bytes_share"]
        for method, m in row["methods"].items():
            name = f"magicpig K{K} L{L}" if method == "magicpig" else f"{method} @K{K} L{L}"
            mine = findings.series_summary(results, name)
            assert m["error"] == mine["error"] and m["ratio"] == pytest.approx(mine["error"] / topk["error"])
            assert 0 <= m["wins"] <= m["cells"] == len(results["layers"]) * results["heads"]
    with pytest.raises(ValueError, match="must be in the results"):
        findings.matched_table(results, methods=("nonesuch",))


def test_oracles_read_over_half_of_dense_bytes_and_the_sampled_methods_far_less(tiny_results):
    results, _ = tiny_results
    for name, s in results["series"].items():
        share = np.asarray(s["bytes_share"])
        if s["method"] in ("topk", "oracle", "hybrid"):
            assert np.all(share > 0.5), name  # they score every key
        if s["method"] == "streaming":  # exactly the keys and values it reads
            assert np.allclose(share, np.asarray(s["budget"]))
