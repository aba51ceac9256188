"""The token view: the read tokens marked, shading on a log scale, a stable text summary."""

import re

import numpy as np
import pytest

from pigviz.plots import tokens as plots


def result(n=40):
    w = np.full(n, 1e-6)
    w[[0, 20, 39]] = [0.5, 0.3, 0.2]
    w /= w.sum()
    return {
        "layer": 2,
        "head": 6,
        "position": n - 1,
        "n": n,
        "budget": 3,
        "fraction": 0.075,
        "weights": w,
        "methods": {
            "topk": {"read": np.array([0, 20, 39]), "weight_read": float(w[[0, 20, 39]].sum()), "error": 0.0},
            "quest": {"read": np.array([36, 37, 38]), "weight_read": float(w[36:39].sum()), "error": 0.5},
        },
    }


def test_the_view_marks_the_read_tokens_and_lists_the_heaviest():
    toks = [f"t{i}" for i in range(40)]
    toks[37] = "a\nb"
    view = plots.reading_view(result(), toks, {"topk": "TopK"}, top=3)
    html = view._repr_html_()
    assert html.count("border-bottom:2px solid") == 6 and "outline:1px dashed" in html
    assert "title='20: 3.0e-01'" in html
    # each panel's head: the keys the method read and the share of the true weight they hold
    heads = [(int(k), int(w)) for k, w in re.findall(r"(\d+) keys holding <b>(\d+)%</b>", html)]
    assert heads == [(m["read"].size, round(100 * m["weight_read"])) for m in result()["methods"].values()]
    assert heads == [(3, 100), (3, 0)]
    assert html.count("✓") == 3  # TopK read the 3 heaviest, Quest none of them
    assert "t0" in html and "t7" not in html  # context of 2 tokens around runs only
    assert "a⏎b" in html  # a line break shows as a mark
    assert repr(view).splitlines()[1:] == ["  TopK: 3 keys, 100% of the weight", "  quest: 3 keys, 0% of the weight"]
    with pytest.raises(ValueError, match="tokens must cover the 40 positions"):
        plots.reading_view(result(), toks[:10])


def test_shading_is_logarithmic_and_clear_below_the_floor():
    assert plots.shade(1e-5) == "transparent" and plots.shade(float("nan")) == "transparent"
    alphas = [int(plots.shade(w)[-2:], 16) / 255 for w in (1e-3, 1e-2, 1e-1, 1.0)]
    assert alphas == sorted(alphas) and alphas[-1] == pytest.approx(0.88, abs=0.003)
    assert np.allclose(np.diff(alphas), alphas[1] - alphas[0], atol=0.011)  # even steps per decade
