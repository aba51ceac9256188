"""pigviz.memory.serving: the rows notebook 05b shows, checked by hand and for their inputs."""

import numpy as np
import pytest

from pigviz import lessons
from pigviz.memory import allocators as al
from pigviz.memory import budget
from pigviz.memory import serving as sv
from pigviz.memory.budget import GIB


@pytest.fixture(scope="module")
def mix():
    return al.request_mix()


def test_every_format_names_columns_its_rows_have(mix):
    per = al.replica_bytes_per_token()
    loads = al.decode_loads(mix)
    for r in loads:
        for w in ("final", "half"):
            step = budget.decode_step_time("Llama-3.1-70B", r["batch"], r[w]["kv_read_bytes"] // per)
            r[w].update({k: step[k] for k in ("step_s", "bound", "tokens_per_s")})
    rows = {
        "replica": sv.replica_rows(),
        "context_share": sv.context_share_rows(),
        "mix": sv.mix_rows(mix),
        "contiguous": sv.contiguous_rows(mix),
        "paged": sv.paged_rows(mix),
        "sharing": sv.sharing_rows([al.prefix_sharing(256)]),
        "break_even_tp": sv.break_even_tp_rows(per),
        "tiers": sv.tier_rows(per),
        "break_even_context": sv.break_even_context_rows(
            budget.break_even_over_context("Llama-3.1-70B", sv.CONTEXTS, sv.N_PARAMS_70B, tps=(4, 8)), {"x": 7.0}
        ),
        "utilisation": sv.utilisation_rows(),
        "preemption": sv.preemption_rows(al.preemption_sweep()),
        "throughput": sv.throughput_rows(loads),
        "fp8": sv.fp8_rows(),
        "disaggregation": sv.disaggregation_rows(),
        "rules": sv.rules_rows(mix),
    }
    assert set(rows) == set(sv.FORMATS)
    for name, r in rows.items():
        lessons.table(r, formats=sv.FORMATS[name])  # raises on a format for a missing column


def test_rows_by_hand(mix):
    c = sv.contiguous_rows(mix, reserves=(2048,))[0]
    a = al.contiguous_allocation(mix, 2048)
    assert (c["rejected"], c["admitted"], c["cut off"]) == (a.rejected, a.batch, a.overflow)
    assert c["wasted"] == pytest.approx(1 - a.logical_bytes / a.held_bytes)
    total = mix.sum(axis=1)
    assert sv.mix_rows(mix)[2]["median"] == int(np.percentile(total, 50))
    p = sv.paged_rows(mix, page_sizes=(16,))[0]
    assert p["vs 8,192-token slots"] == al.paged_allocation(mix, 16).batch / al.contiguous_allocation(mix, 8192).batch
    share = sv.context_share_rows((131_072,))[0]
    assert share["share of 172.5 GiB"] == pytest.approx(131_072 * 327_680 / (172.5 * GIB))
    tp = {r["TP"]: r["break-even GB/s"] for r in sv.break_even_tp_rows(327_680)}
    assert tp["TP4"] == pytest.approx(327_680 / (2 * 70e9 / (4 * budget.H100_DENSE_BF16_FLOPS)) / 1e9)


def test_token_2_counts_from_the_arrival():
    rows = sv.disaggregation_rows(prompts=(4_096, 131_072))
    for r in rows:
        by = r["token 2 by, at most (200 GbE, s)"]
        assert by == r["prefill = token 1 (s)"] + r["transfer over 200 GbE (s)"]
        assert r["token 2 by / 2 s budget"] == by / sv.SECOND_TOKEN_BUDGET_S
        assert r["transfer over 400 Gb/s (s)"] == pytest.approx(r["transfer over 200 GbE (s)"] / 2)
    assert rows[0]["token 2 by / 2 s budget"] < 1 < rows[1]["prefill = token 1 (s)"] / sv.SECOND_TOKEN_BUDGET_S


def test_utilisation_threshold_and_crossovers():
    t = sv.nvme_utilisation_threshold()
    assert t == pytest.approx(7e9 / budget.break_even_at("Llama-3.1-70B", 1, 70e9, tp=4))
    rows = sv.utilisation_rows(utilisations=(1.0, 0.99 * t))
    assert rows[1]["local NVMe (7 GB/s) wins"] == "every length"
    cross = sv.crossovers()
    assert cross["nvme_tp4"] == 34_545 and cross["nvme_tp8"] > cross["max_context"] == 131_072
    assert sv.utilisation_rows(utilisations=(0.5,))[0]["TP4 break-even, 128 tokens (GB/s)"] == pytest.approx(
        0.5 * sv.utilisation_rows(utilisations=(1.0,))[0]["TP4 break-even, 128 tokens (GB/s)"]
    )


def test_prepended_prompt_and_first_prefills(mix):
    pre = sv.prepended_prompt(mix, 0)
    assert pre["unshared"] == pre["shared"] == pre["no_prompt"]
    assert sv.first_prefill_seconds(mix[:1]) == budget.recompute_seconds("Llama-3.1-70B", int(mix[0, 0]), 70e9, tp=4)


def test_inputs_are_validated(mix):
    with pytest.raises(ValueError):
        sv.utilisation_rows(utilisations=(0.0,))
    with pytest.raises(ValueError):
        sv.utilisation_rows(utilisations=(1.5,))
    with pytest.raises(ValueError):
        sv.context_share_rows((0,))
    with pytest.raises(ValueError):
        sv.context_share_rows(kv_budget_bytes=0)
    with pytest.raises(ValueError):
        sv.prepended_prompt(mix, -1)
    with pytest.raises(ValueError):
        sv.break_even_context_rows([], {})
    with pytest.raises(ValueError, match="step_s"):
        sv.throughput_rows(al.decode_loads(mix))  # the roofline floor not yet put on the loads
