import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pigviz.cli.text import budget_report_text, model_table
from pigviz.memory import budget
from pigviz.memory.budget import GIB
from pigviz.memory.model_shapes import ModelShape, get_model_shape, known_models

LLAMA8 = "Llama-3.1-8B"


def _numbers(text: str) -> list[float]:
    """The numbers a text states (thousands separators dropped), HTML tags skipped."""
    plain = re.sub(r"<[^>]+>", " ", text)
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", plain)]


def test_llama8b_by_hand():
    assert budget.kv_bytes_per_token(LLAMA8) == 32 * 8 * 128 * 2 * 2 == 131_072
    assert budget.kv_bytes(LLAMA8, 98_304) == 98_304 * 131_072 == 12 * 2**30
    assert budget.read_time_s(12 * 2**30, 1e12) == pytest.approx(0.012884901888)
    assert budget.lsh_table_bytes(LLAMA8, 98_304, L=150) == 98_304 * 150 * 4 * 32 * 8 == 15_099_494_400
    assert budget.bucket_metadata_bytes(LLAMA8, K=10, L=150) == 1024 * 150 * 32 * 8 * 4 == 150 * 2**20
    assert budget.candidates_per_query(98_304, K=10, L=150) == 14_400
    assert budget.key_bytes_per_head(LLAMA8, 98_304) == 98_304 * 128 * 2 == 25_165_824


def test_report_has_the_promised_keys_and_is_json():
    r = budget.budget_report(LLAMA8, 98_304, K=10, L=150)
    for key in (
        "kv_bytes_per_token",
        "kv_bytes",
        "table_bytes",
        "candidates_per_query",
        "candidate_share_of_key_bytes",
        "bucket_metadata_bytes",
        "kv_read_time_s",
        "index_to_kv_ratio",
    ):
        assert key in r
    assert r["candidate_share_of_key_bytes"] == pytest.approx(57_600 / 25_165_824)
    assert r["index_to_kv_ratio"] == pytest.approx((15_099_494_400 + 150 * 2**20) / (12 * 2**30))
    assert r["kv_bytes_per_token"] == budget.kv_bytes_per_token(LLAMA8)
    assert r["candidates_per_query"] == budget.candidates_per_query(98_304, 10, 150)
    json.dumps(r, allow_nan=False)
    # `pigviz budget` prints the report: its lines state r's numbers
    shown = _numbers(budget_report_text(r))
    assert r["kv_bytes_per_token"] in shown and r["candidates_per_query"] in shown
    assert round(100 * r["candidate_share_of_key_bytes"], 2) in shown


def test_report_notes_long_contexts_and_sliding_windows():
    assert any("exceeds" in n for n in budget.budget_report("SmolLM2-135M", 100_000, K=10, L=150)["notes"])
    assert any("sliding window" in n for n in budget.budget_report("mistral-7b", 10_000, K=10, L=150)["notes"])
    assert len(budget.budget_report(LLAMA8, 1000, K=10, L=150)["notes"]) == 1
    no_limit = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}
    assert len(budget.budget_report(no_limit, 10**8, K=10, L=150)["notes"]) == 1


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(known_models()),
    n=st.integers(1, 10**6),
    m=st.integers(1, 10**6),
    dtype=st.sampled_from([1, 2, 4]),
    L=st.integers(1, 500),
)
def test_bytes_are_linear_in_context(model, n, m, dtype, L):
    assert budget.kv_bytes(model, n + m, dtype) == budget.kv_bytes(model, n, dtype) + budget.kv_bytes(model, m, dtype)
    assert budget.lsh_table_bytes(model, n + m, L) == budget.lsh_table_bytes(model, n, L) + budget.lsh_table_bytes(
        model, m, L
    )
    # the table/KV ratio is a property of (L, head_dim, dtype) alone
    shape_ratio = budget.lsh_table_bytes(model, n, L) / budget.kv_bytes(model, n, dtype)
    assert shape_ratio == pytest.approx(budget.lsh_table_bytes(model, m, L) / budget.kv_bytes(model, m, dtype))


@settings(max_examples=30, deadline=None)
@given(K=st.integers(1, 20), L=st.integers(1, 400), n=st.integers(1, 10**7))
def test_candidates_double_per_table_count_and_halve_per_bit(K, L, n):
    c = budget.candidates_per_query(n, K, L)
    assert budget.candidates_per_query(n, K, 2 * L) == pytest.approx(2 * c)
    assert budget.candidates_per_query(n, K + 1, L) == pytest.approx(c / 2)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: budget.kv_bytes(LLAMA8, -1), r"context must be in \[1"),
        (lambda: budget.kv_bytes(LLAMA8, 0), "context"),
        (lambda: budget.kv_bytes(LLAMA8, 100, dtype_bytes=3), "dtype_bytes must be one of 4, 2, 1"),
        (lambda: budget.budget_report(LLAMA8, 1000, K=0, L=150), r"K must be in \[1, 30\]"),
        (lambda: budget.budget_report(LLAMA8, 1000, K=10, L=0), r"L must be in \[1"),
        (lambda: budget.budget_report("nope", 1000, K=10, L=150), "Known models: Llama-3.1-8B"),
        (lambda: budget.read_time_s(10, 0), "bandwidth_bytes_per_s"),
        (lambda: budget.recompute_seconds_per_token(70e9, tp=0), "tp"),
    ],
)
def test_bad_inputs_name_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_wrong_types_raise_type_errors():
    with pytest.raises(TypeError, match="context"):
        budget.kv_bytes(LLAMA8, "many")
    with pytest.raises(TypeError, match="dtype_bytes"):
        budget.kv_bytes(LLAMA8, 10, dtype_bytes=2.5)


def test_break_even_by_hand():
    per_token = 327_680
    t = 2 * 70e9 / (989.5e12 * 4)
    assert budget.break_even_bandwidth(per_token, 70e9, tp=4) == pytest.approx(per_token / t)
    table = budget.break_even_table(per_token, 70e9)
    assert [row["tp"] for row in table] == [1, 2, 4, 8]
    assert all(b["break_even_GBps"] == pytest.approx(2 * a["break_even_GBps"]) for a, b in zip(table, table[1:]))
    verdicts = {v["tier"]: v["fetch_wins"] for v in budget.tier_verdicts(table[2]["break_even_GBps"])}
    assert verdicts == {
        "GPU HBM (H100)": True,
        "host DRAM over PCIe 5": True,
        "RDMA / 200 GbE": True,
        "local NVMe": False,
        "object storage": False,
    }
    # the 1,979 TFLOP/s datasheet figure is the 2:4-sparse one: exactly twice the dense rate
    assert budget.H100_SPARSE_BF16_FLOPS == pytest.approx(2 * budget.H100_DENSE_BF16_FLOPS)


def test_replica_memory_adds_up_in_one_unit():
    m = budget.replica_memory()
    # four H100s of 80 GiB; Llama-3.1-70B's bf16 weights; the assumed 172.5 GiB for KV
    assert m["total_bytes"] == 4 * 80 * GIB == 4 * budget.H100_MEMORY_BYTES
    assert m["weight_bytes"] == 2 * get_model_shape("Llama-3.1-70B").params
    assert m["kv_budget_bytes"] == budget.REPLICA_KV_BUDGET_BYTES == int(172.5 * GIB)
    assert m["after_weights_bytes"] == m["total_bytes"] - m["weight_bytes"]
    assert m["rest_bytes"] == m["after_weights_bytes"] - m["kv_budget_bytes"] > 0
    assert round(m["after_weights_bytes"] / GIB, 1) == 188.6 and round(m["rest_bytes"] / GIB, 1) == 16.1
    # four 80e9-byte GPUs (298 GiB) leave less than 172.5 GiB after the weights: refused, not hidden
    with pytest.raises(ValueError, match="does not fit"):
        budget.replica_memory(gpu_bytes=80 * 10**9)
    with pytest.raises(ValueError, match="gpus"):
        budget.replica_memory(gpus=0)


def test_attention_flops_by_hand_and_by_loop():
    # one layer, one head of width 2: query i costs 2 x 2 x i (scores) + 2 x 2 x i (values)
    tiny = ModelShape(
        "tiny", layers=1, attention_heads=1, kv_heads=1, head_dim=2, hidden_size=2, params=10, max_context=None
    )
    assert budget.attention_flops(tiny, 3) == sum(8 * i for i in (1, 2, 3))
    assert budget.prefill_flops(tiny, 3) == 2 * 10 * 3 + 48
    big = get_model_shape("Llama-3.1-70B")
    n = 1000
    loop = sum(4 * big.layers * big.attention_heads * big.head_dim * i for i in range(1, n + 1))
    assert budget.attention_flops(big, n) == loop


@pytest.mark.parametrize("tp", [1, 4, 8])
def test_break_even_falls_with_the_prefix_and_tends_to_the_weights_only_form(tp):
    big = "Llama-3.1-70B"
    short = budget.break_even_bandwidth(327_680, 70e9, tp=tp)
    values = [budget.break_even_at(big, n, 70e9, tp=tp) for n in (1, 128, 4096, 32_768, 131_072)]
    assert values == sorted(values, reverse=True)
    assert values[0] == pytest.approx(short, rel=1e-4) and values[0] < short
    # FP8 halves the bytes and nothing else
    assert budget.break_even_at(big, 4096, 70e9, dtype_bytes=1, tp=tp) == pytest.approx(values[2] / 2)


def test_break_even_over_context_matches_the_quick_count():
    rows = {r["context"]: r for r in budget.break_even_over_context("Llama-3.1-70B", n_params=70e9, tps=(4,))}
    assert [round(rows[n]["TP4"], 1) for n in (4096, 32_768, 131_072)] == [8.9, 7.1, 4.2]
    assert 0 < rows[128]["attention_share"] < rows[131_072]["attention_share"] < 1


@pytest.mark.parametrize("bw,dtype,tp", [(7e9, 2, 4), (7e9, 2, 8), (25e9, 2, 4), (7e9, 1, 4), (1e9, 2, 4)])
def test_crossover_prefix_is_where_fetching_starts_to_win(bw, dtype, tp):
    n = budget.crossover_prefix("Llama-3.1-70B", bw, 70e9, dtype_bytes=dtype, tp=tp)
    win = lambda k: budget.fetch_or_recompute("Llama-3.1-70B", k, bw, 70e9, dtype, tp=tp)["fetch_wins"]  # noqa: E731
    assert win(n)
    assert n == 1 or not win(n - 1)


def test_crossover_prefix_numbers_and_none():
    assert budget.crossover_prefix("Llama-3.1-70B", 7e9, 70e9, tp=4) == 34_545
    assert budget.crossover_prefix("Llama-3.1-70B", 7e9, 70e9, dtype_bytes=1, tp=4) == 1
    assert budget.crossover_prefix("Llama-3.1-70B", 1.0, 70e9, tp=4) is None  # 1 B/s: never within 10^9 tokens


def test_disaggregated_transfer():
    t = budget.disaggregated_transfer("Llama-3.1-70B", 131_072, 25e9)
    assert t["kv_bytes"] == 40 * GIB and t["transfer_s"] == pytest.approx(40 * GIB / 25e9)


def test_tier_verdict_changes():
    assert budget.tier_verdict_changes(327_680, 70e9, 4, 8) == []
    # from TP1 (2.3 GB/s) to TP8 (18.5 GB/s) the bar passes local NVMe's 7 GB/s
    assert budget.tier_verdict_changes(327_680, 70e9, 1, 8) == ["local NVMe"]


@pytest.mark.parametrize("bw", [-7e9, 0, float("nan")])
def test_fetch_or_recompute_refuses_non_positive_bandwidth(bw):
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        budget.fetch_or_recompute("Llama-3.1-70B", 128, bw, 70e9)


def test_recompute_needs_a_parameter_count():
    shape = ModelShape(
        "x", layers=1, attention_heads=1, kv_heads=1, head_dim=2, hidden_size=2, params=None, max_context=None
    )
    with pytest.raises(ValueError, match="n_params"):
        budget.prefill_flops(shape, 10)


def test_format_bytes():
    assert budget.format_bytes(600) == "600 B"
    assert budget.format_bytes(128 * 1024) == "128 KiB"
    assert budget.format_bytes(12 * 2**30) == "12 GiB"
    assert budget.format_bytes(150 * 2**20) == "150 MiB"


def _finite(fig):
    for trace in fig.data:
        for axis in ("x", "y"):
            values = getattr(trace, axis, None)
            if values is not None and len(values) and not isinstance(values[0], str):
                assert np.all(np.isfinite(np.asarray(values, dtype=float))), trace.name


def test_budget_figures_have_titles_units_and_no_nan():
    from pigviz.plots import budget as pb

    rows = [dict(label=m, **budget.index_bill(m, 98_304, 10, 150)) for m in known_models()]
    fig = pb.index_bill_figure(rows, highlight=LLAMA8)
    # three stacked bars in GiB: KV, table entries, bucket offsets; together each row's index bill
    parts = ("kv_bytes", "table_bytes", "bucket_metadata_bytes")
    assert fig.layout.barmode == "stack" and [t.type for t in fig.data[:3]] == ["bar"] * 3
    assert [list(t.y) for t in fig.data[:3]] == [[r[k] / GIB for r in rows] for k in parts]
    assert list(fig.data[3].y) == pytest.approx([sum(r[k] for k in parts) / GIB for r in rows])  # the totals on top
    assert any("<b>" in x for x in fig.data[0].x)
    _finite(fig)
    noted = pb.index_bill_figure(rows, title="T", note="† a footnote")
    assert noted.layout.title.text == "T<br><sup>† a footnote</sup>"
    assert pb.index_bill_figure(rows, title="T").layout.title.text == "T"
    ctx = np.array([1_000, 10_000, 100_000])
    curves = {m: (ctx, [budget.kv_bytes(m, int(c)) for c in ctx]) for m in known_models()}
    fig = pb.kv_vs_context_figure(curves, reference_gib={"80 GB": 74.5})
    assert fig.layout.xaxis.type == "log"
    *lines, reference = fig.data
    assert all(list(t.x) == list(ctx) for t in lines) and list(reference.y) == [74.5, 74.5]
    # models of one KV shape (Llama-3.1-8B and Mistral-7B) share a line: one trace per distinct curve
    distinct = {tuple(nbytes) for _, nbytes in curves.values()}
    assert len(lines) == len(distinct) < len(curves)
    assert sorted(tuple(t.y) for t in lines) == sorted(tuple(np.asarray(b) / GIB) for b in distinct)
    _finite(fig)
    rows = budget.break_even_over_context("Llama-3.1-70B", (128, 4096, 131_072), 70e9, tps=(4, 8))
    fig = pb.break_even_context_figure(rows, {"local NVMe": 7.0})
    assert fig.layout.xaxis.type == "log"
    # one line per TP degree, in GB/s, then one per tier
    assert len(fig.data) == 2 + 1
    for trace, tp in zip(fig.data, (4, 8)):
        assert list(trace.x) == [128, 4096, 131_072]
        want = [budget.break_even_at("Llama-3.1-70B", n, 70e9, tp=tp) / 1e9 for n in trace.x]
        assert list(trace.y) == pytest.approx(want)
    assert list(fig.data[2].y) == [7.0, 7.0]
    _finite(fig)


def test_kv_widget_reacts_and_clamps():
    from pigviz.widgets.budget import KVBudgetWidget

    w = KVBudgetWidget()
    assert "pigviz-model-picker" in w.model_picker._dom_classes
    assert "pigviz-context" in w.context._dom_classes and "pigviz-kv-bar" in w.figure._dom_classes
    kv_before = list(w.figure.data[0].y)
    tables_before = list(w.figure.data[1].y)
    w.dtype.value = 1
    assert list(w.figure.data[0].y) == pytest.approx([v / 2 for v in kv_before])
    w.L.value = 300
    assert list(w.figure.data[1].y) == pytest.approx([2 * v for v in tables_before])
    w.model_picker.value = "Qwen2.5-0.5B"
    assert "<b>Qwen2.5-0.5B</b>" in w.figure.data[0].x and f"<b>{LLAMA8}</b>" not in w.figure.data[0].x
    assert w.report["model"]["name"] == "Qwen2.5-0.5B"
    w.context.value = -50
    assert w.context.value == 1 and w.report["context"] == 1
    w.context.value = 10**9
    assert w.context.value == 10**7 and "exceeds" in w.status.value
    assert "could not update" not in w.status.value
    # the table shows the report of the current settings, and follows it back
    assert round(w.report["candidates_per_query"]) in _numbers(w.table.value)
    w.context.value, w.L.value, w.K.value, w.model_picker.value, w.dtype.value = 98_304, 150, 10, LLAMA8, 2
    assert w.report["candidates_per_query"] == budget.candidates_per_query(98_304, 10, 150)
    assert w.report["kv_bytes"] == budget.kv_bytes(LLAMA8, 98_304)
    shown = _numbers(w.table.value)
    assert w.report["candidates_per_query"] in shown and w.report["kv_bytes"] / GIB in shown


def test_model_rows_are_the_one_row_builder_of_the_model_table():
    rows = budget.model_rows(98_304)
    assert [r["model"] for r in rows] == known_models()
    llama = rows[0]
    assert llama["KV / token (B)"] == 131_072 and llama["KV at 98,304"] == "12 GiB"
    assert llama["read at 1 TB/s (ms)"] == pytest.approx(12 * 2**30 / 1e12 * 1e3)
    # a note ("-": none) on exactly the models whose maximum context is below 98,304, naming it
    past = [m for m in known_models() if (get_model_shape(m).max_context or math.inf) < 98_304]
    assert past and LLAMA8 not in past
    assert [r["model"] for r in rows if r["at 98,304 tokens"] != "-"] == past
    assert all(
        get_model_shape(r["model"]).max_context in _numbers(r["at 98,304 tokens"]) for r in rows if r["model"] in past
    )
    text = model_table(98_304)
    # the CLI's table: every model, and Mistral's rolling cache (its window's KV)
    mistral = get_model_shape("Mistral-7B-v0.1")
    rolling = budget.format_bytes(mistral.sliding_window * budget.kv_bytes_per_token(mistral))
    assert all(r["model"] in text for r in rows) and rolling in text


def test_decode_step_time_is_the_roofline_of_decode_step_load():
    load = budget.decode_step_load("Llama-3.1-70B", 64, 100_000)
    assert load["bytes"] == load["weight_bytes"] + load["kv_read_bytes"]
    step = budget.decode_step_time("Llama-3.1-70B", 64, 100_000)
    hbm, peak = 4 * budget.H100_HBM_BYTES_PER_S, 4 * budget.H100_DENSE_BF16_FLOPS
    assert step["step_s"] == max(load["bytes"] / hbm, load["flops"] / peak)
    assert step["tokens_per_s"] == 64 / step["step_s"]


def test_layout_rows_drop_the_dense_layers_and_count_two_offsets_per_bucket():
    pig, mp = budget.layout_rows("Llama-3.1-8B", 98_304, K=10, L=150)
    assert pig["table entries"] == budget.lsh_table_bytes("Llama-3.1-8B", 98_304, 150)
    assert mp["table entries"] == pig["table entries"] * 30 // 32
    assert mp["bucket offsets"] == 2 * pig["bucket offsets"] * 30 // 32 == 281.25 * 2**20
    assert budget.MAGICPIG_DENSE_LAYERS == (0, 16) and len(budget.MAGICPIG_COMMIT) == 40
    one = budget.layout_rows("Llama-3.1-8B", 98_304, K=10, L=150, dense_layers=(), offsets_per_bucket=1)
    assert one[1]["table entries"] == pig["table entries"] and one[1]["bucket offsets"] == pig["bucket offsets"]
    with pytest.raises(ValueError):
        budget.layout_rows("Llama-3.1-8B", 98_304, K=10, L=150, dense_layers=(32,))
    with pytest.raises(ValueError):
        budget.layout_rows("Llama-3.1-8B", 98_304, K=10, L=150, offsets_per_bucket=0)
