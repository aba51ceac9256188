"""The error-against-budget chart of notebook 08: one line per estimator, yours highlighted."""

import pytest

from pigviz.plots import estimators as plots


def entries():
    out = []
    for name, errs, shares in (("topk", (0.05, 0.02), (0.51, 0.52)), ("mine", (0.04, 0.015), (None, None))):
        for f, e, s in zip((0.02, 0.05), errs, shares):
            out.append(
                {
                    "estimator": name,
                    "fraction": f,
                    "rows": 768,
                    "error": e,
                    "error_median": e,
                    "keys_read": 100,
                    "budget_used": f,
                    "bytes_share": s,
                }
            )
    return out


def test_one_trace_per_estimator_yours_highlighted_on_log_axes():
    fig = plots.error_budget_figure(entries(), highlight="mine", labels={"topk": "TopK"})
    names = [t.name for t in fig.data]
    assert names == ["TopK", "mine"]
    mine = fig.data[1]
    assert mine.line.width == 4 and mine.marker.symbol == "star" and list(mine.x) == [2.0, 5.0]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log" and fig.layout.title.text


def test_a_bytes_chart_leaves_out_and_names_what_declares_no_bytes():
    fig = plots.error_budget_figure(entries(), x="bytes_share")
    assert [t.name for t in fig.data] == ["topk"]
    note = fig.layout.annotations[0].text  # names what is left out, and only that
    assert "mine" in note and "topk" not in note


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="x must be one of"):
        plots.error_budget_figure(entries(), x="nope")
    with pytest.raises(ValueError, match="highlight names estimators"):
        plots.error_budget_figure(entries(), highlight=["someone"])
    bad = entries()
    bad[0]["error"] = float("nan")
    with pytest.raises(ValueError, match="log axis needs positive finite numbers"):
        plots.error_budget_figure(bad)
