"""The rows ``pigviz.decode.stats`` computes for notebook 07: matched baselines, passkey totals, which
dense the in-model time is against, the index per key, layer budgets and Quest's bytes. Each checked on
small hand-made inputs (where the answer is known) and on the shipped files, with its refusals."""

import pytest

from pigviz.decode import report, stats
from pigviz.memory.model_shapes import get_model_shape


@pytest.fixture(scope="module")
def shipped():
    names = (report.QUALITY_FILE, report.PASSKEY_FILE, report.SPEED_FILE, report.ATTEND_FILE)
    return dict(zip(("quality", "passkey", "speed", "attend"), map(report.load_result, names)))


def _quality(baselines=("topk", "streaming")):
    rows = [{"method": "magicpig", "K": 10, "L": 150, "budget": 0.06, "kl_mean": kl, "top1_agreement": 0.9,
             "perplexity": 9.0} for kl in (0.1, 0.2)]  # fmt: skip
    rows += [{"method": b, "K": 10, "L": 150, "budget": 0.06, "kl_mean": i + 1.0} for i, b in enumerate(baselines)]
    return {"settings": {"configs": [[10, 150]]}, "rows": rows}


def test_matched_rows_put_each_baseline_beside_magicpigs_seed_range():
    (row,) = stats.matched_rows(_quality(), ("topk", "streaming"))
    assert row["magicpig"] == pytest.approx(0.15) and (row["magicpig_min"], row["magicpig_max"]) == (0.1, 0.2)
    assert (row["topk"], row["streaming"]) == (1.0, 2.0)
    assert stats.matched_rows(_quality(), ("topk", "quest")) == []  # a block without Quest is left out


def test_matched_rows_of_the_shipped_file_cover_every_setting(shipped):
    rows = stats.matched_rows(shipped["quality"])
    assert len(rows) == len(shipped["quality"]["settings"]["configs"])
    assert all(r["topk"] < r["magicpig_min"] and r["magicpig_max"] < r["streaming"] for r in rows)


def test_passkey_totals_sum_over_lengths():
    rows = [{"method": "magicpig", "correct": 19, "n": 20, "budget": 0.1},
            {"method": "magicpig", "correct": 20, "n": 20, "budget": 0.05}]  # fmt: skip
    t = stats.passkey_totals({"rows": rows})["magicpig"]
    assert (t["correct"], t["n"], t["share"]) == (39, 40, 39 / 40)
    assert (t["budget_min"], t["budget_max"]) == (0.05, 0.1)
    with pytest.raises(ValueError, match="no rows"):
        stats.passkey_totals({"rows": []})


def test_dense_path_costs_the_dense_layers_at_dense_rate():
    shape = get_model_shape("SmolLM2-135M")
    pairs = [{"context": 100, "method": "dense", "attention_cpu_ms": 3.0 * shape.layers},
             {"context": 100, "method": "magicpig", "attention_cpu_ms": 3.0 + 1.0 * (shape.layers - 1),
              "options": {"dense_layers": [0], "kv_dtype": "bfloat16"}}]  # fmt: skip
    attend = [{"shape": "SmolLM2-135M", "K": 10, "L": 150, "n": n, "sdpa_ms": g, "sdpa_gqa_ms": e}
              for n, g, e in ((64, 9.0, 9.0), (128, 2.0, 3.1))]  # fmt: skip
    dp = stats.dense_path(pairs, attend, K=10, L=150)
    assert dp["alone_n"] == 128 and dp["sampled_layers"] == shape.layers - 1  # the nearest context
    assert dp["dense_layer_ms"] == pytest.approx(3.0) and dp["magicpig_layer_ms"] == pytest.approx(1.0)
    assert dp["vs_grouped"] == pytest.approx(0.5) and dp["nearer_expanded"]
    with pytest.raises(ValueError, match="need dense and MagicPIG"):
        stats.dense_path(pairs, [], K=10, L=150)


def test_dense_path_of_the_shipped_files(shipped):
    """In-model dense (transformers' SDPA) costs what the expanded form costs alone; MagicPIG's sampled layer
    is faster than the grouped form timed alone (notebook 07 now times the grouped form in the model too)."""
    dp = stats.dense_path(report.speed_pairs(shipped["speed"]), shipped["attend"]["rows"], K=10, L=150)
    assert dp["nearer_expanded"] and dp["kv_dtype"] == "bfloat16"
    assert dp["vs_grouped"] == pytest.approx(dp["magicpig_layer_ms"] / dp["grouped_ms"])
    assert report.compare(dp["vs_grouped"]) == "faster than"


def test_index_per_key_sets_the_bill_beside_the_measured_index():
    memory = {"context": 1000, "index_mb": 2.0}
    ix = stats.index_per_key(memory, 10, 150, sampled_layers=2, kv_heads=4)
    assert ix["per_key"] == pytest.approx(2 * 2**20 / (1000 * 2 * 4))
    assert ix["ids_and_offsets"] == pytest.approx((2 * 150 * 1000 + 4 * 150 * (2**10 + 1)) / 1000)  # 16-bit ids
    assert ix["id_bits"] == 16 and stats.index_per_key({**memory, "context": 70_000}, 10, 150, 2, 4)["id_bits"] == 32
    with pytest.raises(ValueError, match="sampled layers and KV heads"):
        stats.index_per_key(memory, 10, 150, sampled_layers=0, kv_heads=4)


def test_layers_read_counts_a_layer_kept_dense_at_100_percent():
    run = {"layer_budgets": {"1": 0.2, "2": 0.1, "3": 0.1}}
    lr = stats.layers_read(run, layers=4, dense_layers=1)
    assert lr["layer"] == 0.2 and lr["now"] == pytest.approx(1.4 / 4) and lr["then"] == pytest.approx(2.2 / 4)
    assert lr["rest"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="not a sampled layer"):
        stats.layers_read(run, layers=4, dense_layers=1, also_dense=0)


def test_quest_bytes_of_the_shipped_file(shipped):
    qb = stats.quest_bytes(shipped["quality"], 4, K=10, L=150)
    assert 0 < qb["bounds_share"] < qb["bytes_share"] < 1 and qb["bytes_share"] > 2 * qb["budget"]
    with pytest.raises(ValueError, match="pages of 3"):
        stats.quest_bytes(shipped["quality"], 3, K=10, L=150)
