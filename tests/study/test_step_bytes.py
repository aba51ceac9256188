"""pigviz.study.step_bytes: the study's MagicPIG bytes recounted with the hyperplanes read by
each query head, exactly as bytes_read(heads=1) would have counted them, and one step's rows."""

from __future__ import annotations

import pytest

from pigviz.attention import cost
from pigviz.study import findings, step_bytes


def _results(positions=2, context=10, last=3, heads=3, d=4):
    share = [[[0.1] * heads]]  # (layers, seeds, heads)
    series = {
        "magicpig K2 L3": {"method": "magicpig", "setting": [2, 3], "positions": positions, "bytes_share": share},
        "topk @K2 L3": {"method": "topk", "setting": [2, 3], "positions": positions, "bytes_share": share},
    }
    return {"heads": heads, "head_dim": d, "context": context, "last": last, "series": series}


def test_the_recount_adds_the_unshared_planes_over_each_position_and_leaves_other_methods():
    r = _results()
    out = step_bytes.planes_per_query_head(r)
    ns = (8, 9)  # context - last + 1 + t for the two positions averaged
    want = sum(
        (
            cost.bytes_read("magicpig", n=n, d=4, keys_read=1, K=2, L=3, heads=1)
            - cost.bytes_read("magicpig", n=n, d=4, keys_read=1, K=2, L=3, heads=3)
        )
        / cost.dense_bytes(n, 4)
        for n in ns
    ) / len(ns)
    assert out["series"]["magicpig K2 L3"]["bytes_share"][0][0][0] == pytest.approx(0.1 + want, rel=1e-12)
    assert out["series"]["topk @K2 L3"]["bytes_share"] == r["series"]["topk @K2 L3"]["bytes_share"]
    assert r["series"]["magicpig K2 L3"]["bytes_share"][0][0][0] == 0.1  # the input is left as it was
    with pytest.raises(ValueError, match="already count"):
        step_bytes.planes_per_query_head(out)


def test_the_recount_names_a_series_without_bytes():
    r = _results()
    del r["series"]["magicpig K2 L3"]["bytes_share"]
    with pytest.raises(ValueError, match="no bytes_share"):
        step_bytes.planes_per_query_head(r)


def test_on_the_shipped_study_magicpig_reads_more_than_sparq_once_each_head_reads_its_planes():
    r = findings.load_shipped_results()
    before, after = findings.matched_table(r), findings.matched_table(step_bytes.planes_per_query_head(r))
    for a, b in zip(before, after):
        assert b["methods"]["magicpig"]["bytes_share"] > a["methods"]["magicpig"]["bytes_share"]
        assert b["methods"]["sparq"]["bytes_share"] == a["methods"]["sparq"]["bytes_share"]
        assert b["methods"]["magicpig"]["bytes_share"] > b["methods"]["sparq"]["bytes_share"]


def test_step_rows_and_parts_agree_with_the_cost_model():
    step = {"n": 1000, "q": [0.0] * 8, "K": 4, "L": 5, "K_S": [[0.0] * 8] * 7, "keys_read": 50}
    rows = {r["method"]: r for r in step_bytes.step_rows(step)}
    assert set(rows) == set(step_bytes.STEP_METHODS) and rows["magicpig"]["choose_share"] is None
    parts = step_bytes.magicpig_parts(step)
    assert sum(p["bytes"] for p in parts) == pytest.approx(rows["magicpig"]["bytes"])
    assert parts[0] == {"part": "hyperplanes", "bytes": 4 * 5 * 8 * 2, "share": 320 / cost.dense_bytes(1000, 8)}
    shared = {r["method"]: r for r in step_bytes.step_rows(step, heads=4)}["magicpig"]["bytes"]
    assert rows["magicpig"]["bytes"] - shared == pytest.approx(320 * 3 / 4)
    with pytest.raises(ValueError, match="no 'K_S'"):
        step_bytes.step_rows({k: v for k, v in step.items() if k != "K_S"})
