"""evaluate_estimator: the rows it returns, the baselines on the same rows, the budget rule,
the summaries, and the token reads behind notebook 06's text view."""

import numpy as np
import pytest
import torch

from pigviz.attention import baselines, protocol
from pigviz.study import estimators
from tests.factories import make_capture


def first_keys(q, keys, values, budget):
    """Attention over the first `budget` keys: deterministic, cheap, honest about its reads."""
    s = keys[:budget] @ q / np.sqrt(len(q))
    w = np.exp(s - s.max())
    return w @ values[:budget] / w.sum(), np.arange(budget)


@pytest.fixture(scope="module")
def shipped_rows():
    return estimators.evaluate_estimator(first_keys, positions=(0, 63), baselines=("topk", "quest"))


def test_rows_cover_every_shipped_head_position_and_budget(shipped_rows, shipped_capture):
    mine = [r for r in shipped_rows if r["estimator"] == "first_keys"]
    assert len(mine) == 4 * 3 * 2 * 2 and all(set(r) == set(estimators.ROW_FIELDS) for r in shipped_rows)
    assert {r["layer"] for r in mine} == {2, 13, 19, 25} and {r["position"] for r in mine} == {8128, 8191}
    for r in mine:
        assert r["n"] == r["position"] + 1 and r["budget"] == max(1, round(r["fraction"] * r["n"]))
        assert r["keys_read"] == r["budget"] and r["bytes_share"] is None
    heads = {(r["layer"], r["head"], r["kv_head"]) for r in mine}
    assert heads == {
        (L, h, kv[0])
        for L, qh, kv in zip(shipped_capture.layers, shipped_capture.query_heads, shipped_capture.kv_heads)
        for h in qh
    }


def test_each_error_is_the_relative_distance_to_exact_attention(shipped_rows, shipped_capture):
    cap = shipped_capture
    row = next(r for r in shipped_rows if r["estimator"] == "topk" and r["layer"] == 13 and r["position"] == 8191)
    li, j = cap.layers.index(13), cap.query_heads[1].index(row["head"])
    q = cap.queries[li, j, -1].double()
    k, v = cap.keys[li, 0].double(), cap.values[li, 0].double()
    exact = torch.softmax(k @ q / 8.0, 0) @ v
    got, stats = baselines.topk_attention(q[None], k[None], v[None], row["budget"] / row["n"])
    err = float((got[0] - exact).norm() / exact.norm())
    assert row["error"] == pytest.approx(err, rel=1e-9) and row["keys_read"] == int(stats["keys_read"][0])
    assert row["bytes_share"] == pytest.approx(
        protocol.topk().bytes_read(8192, 64, 64, row["budget"]) / (8192 * 128 * 2), rel=1e-12
    )


def test_baselines_are_kept_and_only_the_new_estimator_runs(shipped_rows, monkeypatch):
    made = []
    real = estimators.library_estimator
    monkeypatch.setattr(estimators, "library_estimator", lambda *a, **kw: made.append(a) or real(*a, **kw))
    again = estimators.evaluate_estimator(first_keys, positions=(0, 63), baselines=("topk", "quest"))
    assert made == [] and again == shipped_rows
    estimators.evaluate_estimator(first_keys, positions=(0,), baselines=("topk",))
    assert made == [("topk",)]  # other positions: run afresh


def test_over_budget_and_misnamed_estimators_are_refused():
    def greedy(q, keys, values, budget):
        return protocol.exact_output(q, keys, values), np.arange(len(keys))

    with pytest.raises(protocol.OverBudget, match="'greedy' read 8129 distinct keys, more than its budget of 163"):
        estimators.evaluate_estimator(greedy, positions=(0,), baselines=())
    topk = protocol.declare(lambda *a: first_keys(*a), name="topk")
    with pytest.raises(ValueError, match="give it another name"):
        estimators.evaluate_estimator(topk, positions=(0,))
    with pytest.raises(ValueError, match="budgets must be distinct fractions"):
        estimators.evaluate_estimator(first_keys, budgets=(0.02, 0.02))
    with pytest.raises(ValueError, match=r"budgets entry must be in \(0.0, 1.0\], got 1.5"):
        estimators.evaluate_estimator(first_keys, budgets=(1.5,))
    with pytest.raises(ValueError, match="baselines entries must be names of topk"):
        estimators.evaluate_estimator(first_keys, baselines=("nope",))
    with pytest.raises(ValueError, match=r"positions entry must be in \[0, 63\]"):
        estimators.evaluate_estimator(first_keys, positions=(64,))
    with pytest.raises(TypeError, match="estimator must be callable"):
        estimators.evaluate_estimator("mine")


def test_a_capture_of_your_own_and_a_layer_subset():
    cap = make_capture(n_layers=3, n_heads=4, n_kv=2, n=120, t=5, d=8, seed=1, outputs=False)
    rows = estimators.evaluate_estimator(
        first_keys, budgets=(0.1, 1.0), capture=cap, layers=[0, 2], baselines=("topk",)
    )
    mine = [r for r in rows if r["estimator"] == "first_keys"]
    assert len(mine) == 2 * 4 * 5 * 2 and {r["layer"] for r in mine} == {0, 2}
    assert {r["kv_head"] for r in mine if r["head"] in (2, 3)} == {1}  # GQA: query head h reads KV head h // 2
    full = [r for r in rows if r["fraction"] == 1.0 and r["estimator"] == "topk"]
    assert max(r["error"] for r in full) < 1e-12  # TopK of every key is exact attention
    with pytest.raises(ValueError, match="layers must be a non-empty subset of the captured layers"):
        estimators.evaluate_estimator(first_keys, capture=cap, layers=[7])


def test_layers_run_on_a_fresh_capture_with_a_progress_bar(monkeypatch, capsys):
    cap = make_capture(n_layers=2, n_heads=3, n_kv=1, n=80, t=4, d=8, seed=2, outputs=False)
    monkeypatch.setattr(estimators, "cached_capture", lambda progress=True: cap)
    rows = estimators.evaluate_estimator(first_keys, budgets=(0.25,), layers=[1], baselines=("quest",))
    assert {r["layer"] for r in rows} == {1} and len(rows) == 2 * 3 * 4
    assert "estimators" in capsys.readouterr().err  # the bar


def test_summary_and_ranking_are_the_means_and_the_order():
    rows = []
    for pos, (a, b) in enumerate([(0.1, 0.2), (0.3, 0.1), (0.2, 0.15)]):
        for name, err in (("topk", a), ("mine", b)):
            rows.append(
                dict(
                    estimator=name,
                    fraction=0.05,
                    layer=2,
                    kv_head=0,
                    head=0,
                    position=pos,
                    n=100,
                    budget=5,
                    keys_read=5 if name == "topk" else 4,
                    error=err,
                    bytes_share=None,
                )
            )
    summary = {e["estimator"]: e for e in estimators.summary(rows)}
    assert summary["mine"]["error"] == pytest.approx(0.15) and summary["mine"]["budget_used"] == pytest.approx(0.04)
    assert summary["mine"]["error_median"] == pytest.approx(0.15) and summary["topk"]["rows"] == 3
    ranked = estimators.ranking(rows)
    assert [(r["estimator"], r["rank"]) for r in ranked] == [("mine", 1), ("topk", 2)]
    mine = ranked[0]
    assert mine["vs_reference"] == pytest.approx(0.75) and mine["wins"] == pytest.approx(2 / 3)
    assert next(r for r in ranked if r["estimator"] == "topk")["wins"] is None


def test_token_reads_give_each_method_its_keys_and_the_weight_they_hold():
    r = estimators.token_reads(row=0, head=0, position=63, fraction=0.02)
    assert (r["layer"], r["head"], r["n"], r["budget"]) == (2, 6, 8192, 164)
    assert r["weights"].sum() == pytest.approx(1.0) and set(r["methods"]) == {"topk", "magicpig", "quest"}
    for info in r["methods"].values():
        assert info["read"].size <= 164 and info["weight_read"] == pytest.approx(r["weights"][info["read"]].sum())
    top = np.sort(np.argsort(-r["weights"])[:164])
    assert r["methods"]["topk"]["read"].tolist() == top.tolist()  # TopK reads the heaviest keys
    assert max(i["weight_read"] for i in r["methods"].values()) == r["methods"]["topk"]["weight_read"]
    q, k, v = estimators.shipped_row(0, 0, 63)
    assert q.shape == (64,) and k.shape == v.shape == (8192, 64)
    with pytest.raises(ValueError, match=r"position must be in \[0, 63\]"):
        estimators.token_reads(position=64)
