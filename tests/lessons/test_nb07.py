"""Notebook 07's rows and claims: the library rows it renders say what the shipped files say, its speed
claims stay right when a re-measured speed file adds fields or rows (and fail when the direction
flips), the kernel table shows no speed-up where a step ran on one thread, and the rebuild count of
question 5 is what decoding itself counts."""

import copy

import numpy as np
import pytest

from pigviz import DEFAULTS, MagicPIGConfig
from pigviz.decode import report, stats
from pigviz.lessons import f3_bill_and_speed as f3
from pigviz.lessons import f4_decoding as f4
from pigviz.lessons import nb07a_inside_the_model as nb07
from pigviz.lessons import nb07b_your_magicpig as nb07b
from pigviz.lessons.exercises import nb03, nb06
from pigviz.lessons.exercises import nb07 as refs
from pigviz.lsh import index as lsh_index
from pigviz.memory.model_shapes import get_model_shape
from pigviz.study.experiments import decode_step_pieces


@pytest.fixture(scope="module")
def shipped():
    quality, passkey, speed = nb07.load_results()
    return {"quality": quality, "passkey": passkey, "speed": speed, "generations": quality["generation"]}


# -- question 5: the rebuild count -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "new_tokens, buffer, events",
    [(24, 16, 1), (40, 256, 0), (10, 3, 2), (1, 5, 0), (18, 16, 1), (17, 16, 0), (35, 16, 2)],
)
def test_upkeep_events_follow_the_buffer_rule(new_tokens, buffer, events):
    # new_tokens - 1 decode steps; a rebuild at the step where the buffer would pass `buffer` tokens
    assert stats.upkeep_events(new_tokens, buffer) == events


@pytest.mark.parametrize("args", [(0, 16), (24, 0), (2.5, 16), (24, "16"), (True, 16)])
def test_upkeep_events_refuses_bad_input_naming_the_parameter(args):
    with pytest.raises(ValueError, match="new_tokens|buffer"):
        stats.upkeep_events(*args)


@pytest.mark.model
def test_upkeeps_count_each_sampled_layers_insertion(smollm2):
    """GenerationResult.upkeeps reads upkeep_events x sampled layers (finding 3's question); nothing is rebuilt."""
    from pigviz.decode import generation
    from pigviz.model.texts import first_tokens

    model, tokenizer = smollm2
    ids = first_tokens(tokenizer, 300)
    out = generation.generate(
        model, tokenizer, ids, "magicpig", 10, progress=False, stop_at_eos=False, K=1, L=16, min_hits=1, buffer=3
    )
    sampled = model.config.num_hidden_layers - 1  # layer 0 dense
    assert out.upkeeps == stats.upkeep_events(10, 3) * sampled == 2 * sampled and out.rebuilds == 0


# -- section 5: claims from the data, tolerant of re-measured files -----------------------------------------------
def _remeasured(speed):
    """The shipped speed file as a re-measurement might write it: new fields on every row, and a second
    (thread-sweep) row for each pair after the first, with other numbers."""
    out = copy.deepcopy(speed)
    for r in out["rows"]:
        r.update({"bandwidth_floor_ratio": 3.5, "threads": 1, "cache_dtype": "float32"})
    extra = []
    for r in out["rows"]:
        twin = copy.deepcopy(r)
        twin.update({"threads": 4, "step_ms": 1.0, "step_cpu_ms": 1.0, "attention_ms": 0.5, "attention_cpu_ms": 0.5})
        extra.append(twin)
    out["rows"] += extra
    out["thread_scaling"] = {"1": 1.0, "4": 2.9}
    return out


def test_section_5_ignores_added_fields_and_later_rows(shipped):
    speed, gens = shipped["speed"], shipped["generations"]
    again = _remeasured(speed)
    assert report.speed_pairs(again) == [
        {**r, "bandwidth_floor_ratio": 3.5, "threads": 1, "cache_dtype": "float32"} for r in report.speed_pairs(speed)
    ]
    assert report.speed_table_rows(report.speed_pairs(again)) == report.speed_table_rows(report.speed_pairs(speed))
    before, after = f3._speed_claims(speed, gens), f3._speed_claims(again, gens)
    assert [(c.value, c.quotes, c.passed) for c in after] == [(c.value, c.quotes, c.passed) for c in before]
    assert all(c.passed for c in after)


def test_a_slower_step_fails_the_faster_claim(shipped):
    speed = copy.deepcopy(shipped["speed"])
    for r in speed["rows"]:
        if r["method"] == "magicpig":  # make MagicPIG's attention 3x dense's
            d = next(x for x in speed["rows"] if x["method"] == "dense" and x["context"] == r["context"])
            for clock in ("", "_cpu"):
                r[f"attention{clock}_ms"] = 3 * d[f"attention{clock}_ms"]
                r[f"step{clock}_ms"] = d[f"step{clock}_ms"] + 2 * d[f"attention{clock}_ms"]
            r["rest_ms"] = r["step_ms"] - r["attention_ms"]
    faster = [c for c in f3._speed_claims(speed, shipped["generations"]) if "faster than dense" in c.text]
    assert len(faster) == 1 and not faster[0].passed  # so it vouches for none of section 5's ratios


def test_without_memory_fields_no_memory_claim_is_made(shipped):
    speed = copy.deepcopy(shipped["speed"])
    for r in speed["rows"]:
        for key in ("peak_rss_mb", "decode_peak_rss_mb", "decode_start_rss_mb", "index_mb"):
            r.pop(key, None)
    texts = [c.text for c in f3._speed_claims(speed, shipped["generations"])]
    assert not any(t.startswith("memory:") for t in texts)
    assert any(c.text.startswith("memory:") for c in f3._speed_claims(shipped["speed"], shipped["generations"]))


def test_the_index_with_room_to_grow_outweighs_both_caches(shipped):
    """07-11: the caches measure as their formulas say; the index, laid out with room to grow (so that
    generated tokens are filed without re-sorting), outweighs the cache MagicPIG held and the fp32 one
    dense held, and is its packed size (index_bytes over the 29 sampled layers) times the room."""
    (m,) = [x for x in report.memory_check(report.speed_pairs(shipped["speed"])) if x["context"] == 8174]
    held = (29 * 8174 * 46_080 / 2 / 30 + 8174 * 46_080 / 30) / 2**20  # bf16 sampled layers, fp32 layer 0
    assert m["kv_cache_mb"] == pytest.approx(held, rel=0.04)  # both caches measure ~3% over the formula
    assert m["dense_kv_cache_mb"] == pytest.approx(8174 * 46_080 / 2**20, rel=0.04)
    packed = 29 * lsh_index.index_bytes(8174, 10, 150, 3) / 2**20
    assert m["kv_cache_mb"] < m["dense_kv_cache_mb"] < m["index_mb"]
    assert 1.2 * packed < m["index_mb"] < 2.5 * packed  # the room: a quarter and more per bucket, spare at the end


def test_speed_table_rows_have_one_row_per_method_and_ratios_to_dense_and_the_fastest_dense(shipped):
    fair = report.fair_rows(shipped["speed"])
    rows = report.speed_table_rows(fair)
    assert len(rows) == len(fair) and {r["method"] for r in rows} == {*report.DENSE_FORMS, "magicpig"}
    assert all(r["CPU: attn / dense"] == 1.0 for r in rows if r["method"] == "dense")
    for context in {r["context"] for r in rows}:
        here = [r for r in rows if r["context"] == context]
        best = min((r for r in here if r["method"] in report.DENSE_FORMS), key=lambda r: r["CPU: attn ms"])
        assert all(r["fastest dense"] == best["method"] for r in here) and best["attn / fastest dense"] == 1.0
    assert set(f3.SPEED_COLUMNS) <= set(rows[0])


def test_the_generation_run_lost_its_time_in_attention(shipped):
    run = stats.generation_run(shipped["generations"])
    assert run["step_ratio_wall"] > 1 and run["attention_explains_gap"]
    assert run["magicpig_attention_ms_floor"] <= run["magicpig_attention_ms"]
    with pytest.raises(ValueError, match="dense and a magicpig"):
        stats.generation_run(shipped["generations"][:1])


def test_kernel_table_shows_no_speed_up_where_the_step_ran_on_one_thread():
    """07-3: where 2 threads were asked and 1 used, the speed-up cell is empty."""
    attend, _ = f3.load_kernels()
    attend = copy.deepcopy(attend)
    report.kernel_runs(attend)[0]["attend_threads_used"]["2"] = 1  # as a step too small to split records it
    frame = f3.kernel_table(attend).frame
    used = frame["2 threads asked: used"]
    assert (used == 1).any() and (used == 2).any()
    assert frame.loc[used == 1, "2 threads: bf16 speed-up"].isna().all()
    assert (frame.loc[used == 2, "2 threads: bf16 speed-up"] > 1).all()


# -- sections 2 to 4 ---------------------------------------------------------------------------------------------
def test_repeat_rows_match_the_claim(shipped):
    rows = {r["method"]: r for r in stats.repeat_rows(shipped["generations"])}
    assert rows["magicpig"]['bare "def" items'] >= 3 and rows["dense"]['bare "def" items'] == 0
    assert rows["dense"]["shared tokens"] == stats.shared_start(shipped["generations"]) > 0
    with pytest.raises(ValueError, match="non-empty list"):
        stats.repeat_rows([])


def test_two_column_stand_ins_give_the_shipped_perplexity_with_the_references(shipped):
    """Section 3's two-column cell with the references: the shipped perplexity, and a KL at or below the shipped."""

    def two_columns(nll):
        nll = np.maximum(np.asarray(nll, dtype=np.float64), 1e-12)
        return np.stack([-nll, np.log(-np.expm1(-nll))], axis=1)

    rows = shipped["quality"]["rows"]
    ref = two_columns(next(r for r in rows if r["method"] == "dense")["nll_per_token"])
    for r in rows[:4]:
        nll = r["nll_per_token"]
        ppl = refs.perplexity(two_columns(nll), np.zeros(len(nll), dtype=int))
        assert ppl == pytest.approx(r["perplexity"], rel=1e-6)  # the file rounds the mean NLL
        assert (np.asarray(refs.kl_divergence(ref, two_columns(nll))) <= np.asarray(r["kl_per_token"]) + 1e-6).all()


def test_quality_rows_have_every_run_and_headline_verdicts(shipped):
    q = shipped["quality"]
    blocks = len(q["settings"]["configs"])
    assert len(report.quality_rows(q)) == 1 + blocks * (1 + len(q["settings"]["baselines"]))
    head = {r["attention"]: r["against MagicPIG"] for r in report.headline_rows(q, DEFAULTS.K, DEFAULTS.L)}
    assert head["TopK (oracle)"] == "closer to dense" and head["StreamingLLM"] == "further from dense"


def test_seed_variance_agrees_with_the_claims(shipped):
    rows = stats.seed_variance(shipped["quality"], f4.load_study())
    assert rows[0]["std / mean, most"] < 0.05 and rows[1]["std / mean, least"] > 0.1
    sampled = get_model_shape("SmolLM2-135M").layers - len(shipped["quality"]["settings"]["dense_layers"])
    assert rows[1]["attention rows"] == rows[1]["positions"] * sampled * get_model_shape("SmolLM2-135M").attention_heads
    assert stats.seed_spreads(shipped["quality"]) == pytest.approx(stats.seed_spreads(shipped["quality"]))


def test_worst_positions_differ_between_seeds(shipped):
    worst = stats.worst_positions(shipped["quality"], 10, 150)
    assert len(worst) == 3 and all(len(v) == 5 for v in worst.values())
    assert not set.intersection(*map(set, worst.values()))
    with pytest.raises(ValueError, match="no MagicPIG run"):
        stats.worst_positions(shipped["quality"], 3, 7)


def test_passkey_rows(shipped):
    p = shipped["passkey"]
    rows = report.passkey_rows(p)
    assert len(rows) == len(p["rows"])
    assert all(r["retrieved"] == "20/20" for r in rows if r["attention"] == "dense")


def test_merge_parts_of_a_real_step_match_the_engine():
    """Section 1's cell with the references standing in for the learner's 03.softmax and 06.log_u."""
    step = decode_step_pieces(row=0, head=0)
    q, d = step["q"], len(step["q"])

    def softmax_part(scores, values):
        top = np.max(scores)
        return nb03.softmax(scores) @ values, top + np.log(np.exp(scores - top).sum())

    log_u = nb06.log_u(q, step["K_S"], step["mu"], step["K"], step["L"])
    out_s, lse_s = softmax_part(step["K_S"] @ q / np.sqrt(d) - log_u, step["V_S"])
    out_e, lse_e = softmax_part(step["K_exact"] @ q / np.sqrt(d), step["V_exact"])
    merged = refs.merge_partial(out_s, lse_s, out_e, lse_e)
    assert np.max(np.abs(merged - step["engine"])) < 1e-5


def test_log_softmax_given_to_the_learner_is_exact_where_softmax_underflows():
    x = np.array([[0.0, -800.0], [1000.0, 0.0]])
    assert refs.log_softmax(x)[0, 1] == pytest.approx(-800.0) and refs.log_softmax(x)[1, 1] == pytest.approx(-1000.0)


# -- the findings' directions: each claim fails when its direction flips -----------------------------------------
def test_a_best_dense_level_with_magicpig_fails_the_faster_claim_and_a_fastest_sdpa_the_flattery_claim(shipped):
    """07-4: the ratios are set against dense at its best; MagicPIG level with the fastest dense form must not
    pass as faster, and transformers' SDPA as the fastest form must not pass as flattering MagicPIG."""

    def claims(speed, words):
        return [c for c in f3._speed_claims(speed, shipped["generations"]) if words in c.text]

    assert all(c.passed for c in claims(shipped["speed"], "against dense at its best"))
    level = copy.deepcopy(shipped["speed"])
    for r in report.fair_rows(level):
        if r["method"] == "dense_grouped":  # as fast as MagicPIG at its context
            mp = next(x for x in report.fair_rows(level) if x["method"] == "magicpig" and x["context"] == r["context"])
            r.update({k: mp[k] for k in ("attention_cpu_ms", "step_cpu_ms", "attention_ms", "step_ms", "rest_ms")})
    (faster,) = claims(level, "faster than dense (beyond")
    assert not faster.passed
    fastest_sdpa = copy.deepcopy(shipped["speed"])
    for r in report.fair_rows(fastest_sdpa):
        if r["method"] == "dense":
            r["attention_cpu_ms"] = 0.001
    (flattery,) = claims(fastest_sdpa, "flatters it")
    assert not flattery.passed


def test_the_authors_claim_counts_the_rows_where_their_kernels_beat_pigviz_whole_step():
    """07-4: ahead in every row for the same work; the rows behind pigviz's whole step counted, as said."""
    attend, authors = f3.load_kernels()

    def authors_claim(data):
        return next(c for c in f3.kernel_claims(attend, data) if c.text.startswith("beside the authors"))

    shipped_claim = authors_claim(authors)
    behind = [r for r in report.authors_rows(authors) if r["authors / whole step"] < 1]
    said = f"faster in {len(behind)} row" + ("s" if len(behind) != 1 else "") if behind else "faster in no row"
    ahead = sum(r["authors / same work"] > 1 + report.SAME_WITHIN for r in report.authors_rows(authors))
    assert (
        shipped_claim.passed and said in shipped_claim.quotes and f"ahead in {ahead} of 4 rows" in shipped_claim.quotes
    )
    slower = copy.deepcopy(authors)
    for r in slower["rows"]:
        r["pigviz_same_work_ms"] = 2 * r["authors_ms"]  # the authors ahead on the same work everywhere
    assert not authors_claim(slower).passed


# -- section 4: your MagicPIG, an estimator with a build step ------------------------------------------------------
def test_your_magicpig_in_the_notebook_is_the_lesson_modules():
    """Notebook 08 races nb07b.YourMagicPIG: it must be the class notebook 07b writes in view."""
    import inspect
    from pathlib import Path

    source = Path(__file__).parents[2] / "notebooks" / "src" / "07b_your_magicpig_writes.py"
    source = source.read_text(encoding="utf-8")
    assert inspect.getsource(nb07b.YourMagicPIG) in source


def test_your_magicpig_builds_the_exercises_index_and_runs_its_step():
    rng = np.random.default_rng(7)
    keys, values, q = rng.standard_normal((200, 8)), rng.standard_normal((200, 3)), rng.standard_normal(8)
    config = MagicPIGConfig(K=3, L=12, sinks=2, recent=8, seed=4)
    est = nb07b.YourMagicPIG(refs.buffered_step, nb06.build_tables, "yours", config)
    index = est.build(keys[:190])
    want = refs.index_prefill(keys[:190], 3, 12, 2, 8, seed=4)
    assert sorted(index) == sorted(want)
    for k in ("planes", "mu"):
        np.testing.assert_array_equal(index[k], want[k])
    for a, b in zip(index["tables"], want["tables"]):
        np.testing.assert_array_equal(a, b)
    out, read = est(q, keys, values, 200, index=index)
    assert set(range(190, 200)) <= set(read.tolist())  # the buffer is read exactly
    np.testing.assert_allclose(out, refs.buffered_step(q, keys, values, want)[0])
    # Without a config it builds at the method's defaults, all of them from pigviz.DEFAULTS.
    plain = nb07b.YourMagicPIG(refs.buffered_step, nb06.build_tables, "yours").build(keys[:190])
    settings = {k: plain[k] for k in ("K", "L", "sinks", "recent")}
    assert settings == {k: getattr(DEFAULTS, k) for k in settings}
    assert plain["planes"].shape == (8, DEFAULTS.K * DEFAULTS.L)


def test_buffered_step_equals_one_softmax_over_its_reads():
    """The merged parts give what one softmax over [sampled - log u ; exact] gives (06a's sampled_estimate)."""
    case = next(c for c in refs._buffered_cases() if "larger than the recent window" in c.label)
    q, keys, values, index = case.args
    out, read = refs.buffered_step(q, keys, values, index)
    n0 = index["n_indexed"]
    exact = np.r_[0 : index["sinks"], n0 - index["recent"] : len(keys)]
    sampled = np.setdiff1d(read, exact)
    assert sampled.size and sampled.max() < n0 - index["recent"]
    one = nb06.sampled_estimate(
        q, keys[sampled], values[sampled], index["mu"], keys[exact], values[exact], index["K"], index["L"]
    )
    np.testing.assert_allclose(out, one, rtol=1e-10)


def test_the_yardstick_and_stage_tables_read_the_benchmark_rows():
    attend, _ = f3.load_kernels()
    frame = f3.yardstick_table(attend).frame
    runs = [r for r in report.kernel_runs(attend)]
    assert list(frame["tokens"]) == [r["n"] for r in runs]
    for (_, row), r in zip(frame.iterrows(), runs):
        assert row["dense bf16 floor ms"] == r["dense_bf16_floor_ms"]
        per_token = row["MagicPIG per token, 4,096 ms"]
        assert row["4,096: x dense floor"] == pytest.approx(per_token / r["dense_bf16_floor_ms"])
        assert row["MagicPIG per token, 256 ms"] > row["MagicPIG per token, 4,096 ms"] > row["MagicPIG step ms"]
    old = copy.deepcopy(attend)
    for r in old["rows"]:
        del r["dense_bf16_floor_ms"]  # a file measured before the yardstick has none to show
    assert report.kernel_yardstick_rows(old) == []
    stages = f3.stage_table(attend).frame
    assert list(stages["stage"]) == ["hash", "walk", "hits", "K", "mix"]
    assert np.allclose(stages["x floor"], stages["ms"] / stages["floor ms"], rtol=1e-12)
