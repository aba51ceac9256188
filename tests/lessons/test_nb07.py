"""Notebook 07's helpers: the tables and computed paragraphs it shows say what the shipped files say,
stay right when a re-measured speed file adds fields or rows, and the rebuild count of question 5
is what decoding itself counts."""

import copy
import re

import numpy as np
import pytest

from pigviz.decode import report
from pigviz.lessons import nb07_sampled_decoding as nb07
from pigviz.lessons.exercises import nb07 as refs
from pigviz.memory.model_shapes import get_model_shape


@pytest.fixture(scope="module")
def shipped():
    quality, passkey, speed = nb07.load_results()
    return {"quality": quality, "passkey": passkey, "speed": speed, "generations": quality["generation"]}


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d[\d,]*\.?\d*", text)


# -- question 5: the rebuild count -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "new_tokens, buffer, events",
    [(24, 16, 1), (40, 256, 0), (10, 3, 2), (1, 5, 0), (18, 16, 1), (17, 16, 0), (35, 16, 2)],
)
def test_rebuild_events_follow_the_buffer_rule(new_tokens, buffer, events):
    # new_tokens - 1 decode steps; a rebuild at the step where the buffer would pass `buffer` tokens
    assert nb07.rebuild_events(new_tokens, buffer) == events


@pytest.mark.parametrize("args", [(0, 16), (24, 0), (2.5, 16), (24, "16")])
def test_rebuild_events_refuses_bad_input_naming_the_parameter(args):
    with pytest.raises(ValueError, match="new_tokens|buffer"):
        nb07.rebuild_events(*args)


@pytest.mark.model
def test_rebuilds_counts_each_sampled_layers_rebuild(smollm2):
    """GenerationResult.rebuilds reads rebuild_events x sampled layers, as answer 5 says."""
    from pigviz.decode import generation
    from pigviz.model.texts import first_tokens

    model, tokenizer = smollm2
    ids = first_tokens(tokenizer, 300)
    out = generation.generate(
        model, tokenizer, ids, "magicpig", 10, progress=False, stop_at_eos=False, K=1, L=16, min_hits=1, buffer=3
    )
    sampled = model.config.num_hidden_layers - 1  # layer 0 dense
    assert out.rebuilds == nb07.rebuild_events(10, 3) * sampled == 2 * sampled


def test_answer_5_states_events_and_the_counter_apart(shipped):
    text = nb07.answer_5(shipped["quality"], shipped["speed"], new_tokens=24, buffer=16)
    sampled = get_model_shape("SmolLM2-135M").layers - 1
    assert "**1** rebuild event" in text and f"reads **{sampled}**" in text


# -- section 5: the bottom line, from the data, tolerant of re-measured files -----------------------------------
def test_speed_bottom_line_reads_every_ratio_from_the_file(shipped):
    text = nb07.speed_bottom_line(shipped["speed"], shipped["generations"])
    ss = report.speed_summary(nb07.speed_rows(shipped["speed"]))
    for s in ss:
        for key in ("attention_ratio_cpu", "step_ratio_cpu"):
            assert f"{s[key]:.2f}x" in text
        assert f"{s['dense_attention_share_cpu']:.0%}" in text
    run = nb07.generation_run(shipped["generations"])
    assert f"{run['step_ratio_wall']:.2f}x" in text
    verdicts = {report.compare(s["step_ratio_cpu"], within=report.same_band(ss, "cpu")) for s in ss}
    if verdicts == {"faster than"}:
        assert "faster on that CPU" in text


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
    assert nb07.speed_rows(again) == [
        {**r, "bandwidth_floor_ratio": 3.5, "threads": 1, "cache_dtype": "float32"} for r in nb07.speed_rows(speed)
    ]
    for helper in (nb07.speed_bottom_line, nb07.speed_story):
        assert helper(again, gens) == helper(speed, gens)
    assert nb07.speed_end_line(again) == nb07.speed_end_line(speed)
    assert nb07.memory_story(again) == nb07.memory_story(speed)
    assert repr(nb07.speed_table(nb07.speed_rows(again))) == repr(nb07.speed_table(nb07.speed_rows(speed)))
    assert all(c.passed for c in nb07._speed_claims(again))


def test_a_slower_step_is_called_slower(shipped):
    speed = copy.deepcopy(shipped["speed"])
    for r in speed["rows"]:
        if r["method"] == "magicpig":  # make MagicPIG's attention 3x dense's
            d = next(x for x in speed["rows"] if x["method"] == "dense" and x["context"] == r["context"])
            for clock in ("", "_cpu"):
                r[f"attention{clock}_ms"] = 3 * d[f"attention{clock}_ms"]
                r[f"step{clock}_ms"] = d[f"step{clock}_ms"] + 2 * d[f"attention{clock}_ms"]
            r["rest_ms"] = r["step_ms"] - r["attention_ms"]
    text = nb07.speed_bottom_line(speed, shipped["generations"])
    assert "slower on that CPU" in text and "faster on that CPU" not in text


def test_memory_story_without_memory_fields_says_so(shipped):
    speed = copy.deepcopy(shipped["speed"])
    for r in speed["rows"]:
        for key in ("peak_rss_mb", "decode_peak_rss_mb", "decode_start_rss_mb", "index_mb"):
            r.pop(key, None)
    assert "records no memory" in nb07.memory_story(speed)
    assert "KV cache's memory" not in nb07.recap(shipped["quality"], shipped["passkey"], speed, shipped["generations"])


def test_speed_table_has_one_row_per_pair_and_ratios_to_dense(shipped):
    rows = nb07.speed_rows(shipped["speed"])
    t = nb07.speed_table(rows)
    assert len(t) == len(rows)
    dense_rows = t.frame[t.frame["method"] == "dense"]
    assert (dense_rows["CPU: attn / dense"] == 1.0).all()


def test_the_generation_run_lost_its_time_in_attention(shipped):
    run = nb07.generation_run(shipped["generations"])
    assert run["step_ratio_wall"] > 1 and run["attention_explains_gap"]
    assert run["magicpig_attention_ms_floor"] <= run["magicpig_attention_ms"]


# -- sections 2 to 4 ---------------------------------------------------------------------------------------------
def test_repeat_counts_match_the_claim(shipped):
    counts = nb07.repeat_counts(shipped["generations"])
    assert counts["magicpig"]["bare"] >= 3 and counts["dense"]["bare"] == 0
    assert counts["dense"]["after"] == nb07.shared_start(shipped["generations"]) > 0
    assert len(nb07.repeat_table(counts)) == 2


def test_two_column_table_gives_the_shipped_perplexity_with_the_references(shipped):
    def two_columns(nll):
        nll = np.maximum(np.asarray(nll, dtype=np.float64), 1e-12)
        return np.stack([-nll, np.log(-np.expm1(-nll))], axis=1)

    t = nb07.two_column_table(shipped["quality"], two_columns, refs.perplexity, refs.kl_divergence)
    frame = t.frame
    assert np.allclose(frame["perplexity: yours"], frame["shipped"], rtol=1e-6)  # the file rounds the mean NLL
    assert (frame["two-token KL, mean"] <= frame["shipped KL"] + 1e-6).all()
    assert all(v.split(" of ")[0] == v.split(" of ")[1] for v in frame["positions where two-token <= shipped"])


def test_quality_table_has_every_run_and_headline_verdicts(shipped):
    q = shipped["quality"]
    blocks = len(q["settings"]["configs"])
    assert len(nb07.quality_table(q)) == 1 + blocks * (1 + len(q["settings"]["baselines"]))
    head = nb07.headline_table(q).frame.set_index("attention")["against MagicPIG"]
    assert head["TopK (oracle)"] == "closer to dense" and head["StreamingLLM"] == "further from dense"


def test_seed_variance_agrees_with_the_claims(shipped):
    sv = nb07.seed_variance(shipped["quality"], nb07.load_study())
    assert sv["seed_err"] < 0.05 and min(sv["seed_kl"]) > 0.1
    assert sv["rows07"] == sv["positions"] * sv["sampled_layers"] * get_model_shape("SmolLM2-135M").attention_heads
    assert len(nb07.seed_table(sv)) == 2


def test_passkey_table_and_counts(shipped):
    p = shipped["passkey"]
    assert len(nb07.passkey_table(p)) == len(p["rows"])
    found = nb07.passkey_found(p)
    assert found["dense"][0] == found["dense"][1] and found["streaming"][0] == 0


def test_merge_parts_of_a_real_step_match_the_engine():
    step = nb07.decode_step(row=0, head=0)
    q, d = step["q"], len(step["q"])
    out_s, lse_s = nb07.softmax_part(step["K_S"] @ q / np.sqrt(d) - nb07.log_inclusion(step), step["V_S"])
    out_e, lse_e = nb07.softmax_part(step["K_exact"] @ q / np.sqrt(d), step["V_exact"])
    merged = refs.merge_partial(out_s, lse_s, out_e, lse_e)
    assert np.max(np.abs(merged - step["engine"])) < 1e-5


def test_every_paragraph_is_free_of_unfilled_values(shipped):
    q, p, s, g = shipped["quality"], shipped["passkey"], shipped["speed"], shipped["generations"]
    study = nb07.load_study()
    counts = nb07.repeat_counts(g)
    texts = [
        nb07.repeat_story(counts, g),
        nb07.generation_bottom_line(g, counts),
        nb07.baselines_text(q),
        nb07.quality_story(q, study),
        nb07.seed_story(nb07.seed_variance(q, study)),
        nb07.quality_bottom_line(q),
        nb07.quest_bytes_story(q),
        nb07.passkey_story(p, q),
        nb07.passkey_bottom_line(p),
        nb07.speed_bottom_line(s, g),
        nb07.speed_story(s, g),
        nb07.speed_end_line(s),
        nb07.gpu_story(None),
        nb07.memory_story(s),
        nb07.index_story(s, g),
        nb07.closing(s),
        nb07.recap(q, p, s, g),
        nb07.answer_1(q),
        nb07.answer_2(q),
        nb07.answer_3(q, p),
        nb07.answer_4(q),
        nb07.answer_6(s),
    ]
    for text in texts:
        assert text and not re.search(r"\bnan\b|\bNone\b|\binf\b|\{|\}", text), text[:120]
        assert _numbers(text) or text.startswith("MagicPIG runs")
