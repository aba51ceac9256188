"""Lessons 05a and 05b and finding 5: the tables finding 5's module makes and the computations the
lessons run in their cells, checked against numbers worked out here another way, and the claims
each states."""

import math
import re

import numpy as np
import pytest

from pigviz import lessons
from pigviz.lessons import exercises as ex
from pigviz.lessons import f5_serving as f5
from pigviz.lessons import nb05a_kv_bill as nb05a
from pigviz.lessons.exercises import nb05 as nb05_ref
from pigviz.lessons.exercises._framework import failure
from pigviz.memory import allocators as al
from pigviz.memory import budget
from pigviz.memory import serving as sv
from pigviz.memory.budget import GIB
from pigviz.memory.model_shapes import get_model_shape, known_models


@pytest.fixture(scope="module")
def mix():
    return al.request_mix()


def _numbers(text: str) -> list[float]:
    """The numbers a sentence states, thousands separators dropped."""
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


def test_both_notebooks_state_at_least_their_claims_and_all_pass():
    for notebook, fewest in (("05a", 10), ("05b", 8), ("f5", 60)):
        claims = lessons.claims(notebook)
        assert len(claims) >= fewest
        assert all(c.passed for c in claims), [c.row() for c in claims if not c.passed]


def test_no_claim_points_at_a_document_the_learner_lacks():
    for notebook in ("05a", "05b", "f5"):
        for c in lessons.claims(notebook):
            assert "lesson" not in c.text.lower(), c.text


# --------------------------------------------------------------------------- 05a


def test_uneven_buckets_scan_more_than_the_even_figure():
    rows = f5.uneven_bucket_rows()
    assert len(rows) == 8
    for r in rows:
        K, L = (int(x) for x in r["K, L"].split(", "))
        assert r["even buckets"] == L * (r["n"] - 68) / 2**K  # the benchmark hashes all but 4 sinks + 64 recent
        assert r["keys shaped like"] in ("SmolLM2-135M", "Llama-3.1-8B")
        assert r["measured"] > r["even buckets"]  # the Cauchy-Schwarz direction
    assert len(f5.uneven_bucket_table()) == 8


def test_sum_of_squared_bucket_counts_is_never_below_the_even_figure():
    """The argument of 05a section 4: a query that lands in bucket b with probability n_b / n scans
    sum(n_b^2) / n entries on average, at least n / 2^K, with equality only for even buckets."""
    rng = np.random.default_rng(0)
    n, buckets = 4096, 1024
    even = np.full(buckets, n // buckets)
    assert (even**2).sum() / n == n / buckets
    for _ in range(20):
        counts = np.bincount(rng.integers(0, buckets, n), minlength=buckets)
        assert (counts**2).sum() / n > n / buckets


def test_the_exercise_gives_the_lessons_simulation_and_the_even_figure_for_even_buckets():
    """05a section 4 runs the learner's candidates_per_query on one table's real bucket counts and on
    even ones; the claims module computes the same ratio with its own arithmetic."""
    cands = nb05_ref.candidates_per_query
    rng = np.random.default_rng(0)
    n, d, K = 8_192, 64, 10
    planes = rng.standard_normal((K, d))
    noise = rng.standard_normal((n, d))
    cone = noise + rng.standard_normal(d)
    even = cands(np.full((1, 2**K), n // 2**K))
    assert even == n / 2**K
    sim = nb05a.uneven_buckets()
    for label, keys in (("no cone", noise), ("a cone", cone), ("the cone, centred", cone - cone.mean(axis=0))):
        counts = np.bincount((keys @ planes.T >= 0) @ (1 << np.arange(K)), minlength=2**K)
        assert cands(counts[None]) / even == pytest.approx(sim[label], rel=1e-12), label
    assert cands(np.full((150, 2**10), nb05a.CONTEXT // 2**10)) == budget.candidates_per_query(nb05a.CONTEXT, 10, 150)
    assert cands(np.zeros((3, 8), dtype=int)) == 0.0


def test_05a_model_rows_mark_what_the_context_hides():
    rows = budget.model_rows(nb05a.CONTEXT)
    notes = {r["model"]: r["at 98,304 tokens"] for r in rows}
    marked = {m for m, note in notes.items() if note != "-"}
    # exactly the models whose maximum context is below the lesson's, each note naming that context
    assert marked == {m for m in notes if nb05a.CONTEXT > (get_model_shape(m).max_context or math.inf)}
    assert {"SmolLM2-135M", "Qwen2.5-1.5B", "Mistral-7B-v0.1"} <= marked and "Llama-3.1-8B" not in marked
    assert all(f"{get_model_shape(m).max_context:,}" in notes[m] for m in marked)
    assert get_model_shape("Qwen2.5-1.5B").max_context == 32_768  # the model card's context (finding 05a-1)
    # Mistral's sliding window: the rolling cache of its last 4,096 tokens, 512 MiB at 2 bytes a value
    mistral = get_model_shape("Mistral-7B-v0.1")
    rolling = budget.kv_bytes_per_token(mistral) * mistral.sliding_window
    assert rolling == 512 * 2**20
    assert mistral.sliding_window in _numbers(notes["Mistral-7B-v0.1"])
    assert budget.format_bytes(rolling) in notes["Mistral-7B-v0.1"]
    # the window note is Mistral's alone: every other marked note states its maximum context and nothing else
    assert all(_numbers(notes[m]) == [get_model_shape(m).max_context] for m in marked - {"Mistral-7B-v0.1"})
    # within its context and its window, a model needs no note
    assert budget.context_note(get_model_shape("Mistral-7B-v0.1"), 4_096) == "-"


def test_the_lessons_bucket_simulation_scans_more_than_even_and_centring_evens_it():
    sim = nb05a.uneven_buckets()
    assert set(sim) == {"no cone", "a cone", "the cone, centred"}
    assert all(v >= 1 for v in sim.values())  # never below the even figure
    assert sim["a cone"] > 5 * sim["the cone, centred"]


def test_read_floor_adds_the_weights_read_and_the_kv_overtakes_them_where_bytes_say():
    shape = get_model_shape("Llama-3.1-8B")
    w, per = 2 * shape.params, budget.kv_bytes_per_token(shape)
    n = w // per + 1  # stored: the finding's formula
    assert (n - 1) * per <= w < n * per and n == 122_533
    read = f5.weights_read_bytes(shape)  # one row of the untied input embedding is read
    assert read == w - 2 * (shape.vocab_size - 1) * shape.hidden_size and read // per + 1 == 114_517
    t = f5.read_floor_table()
    assert list(t.frame["ms at 1 TB/s"].round(1)) == [12.9, 15.0, 27.9]


def test_magicpig_layout_drops_its_dense_layers_and_doubles_the_offsets():
    pig, mp = budget.layout_rows(K=10, L=150)
    assert mp["table entries"] * 32 == pig["table entries"] * 30
    assert mp["bucket offsets"] * 32 == 2 * pig["bucket offsets"] * 30
    assert mp["index / KV"] > 1  # still bigger than the cache
    shown = repr(f5.layout_table())
    assert "13.2 GiB" in shown and "281 MiB" in shown


def test_index_bill_rows_mark_models_past_their_context():
    rows = f5.index_bill_rows()
    note = f5.past_context_note()  # the footnote names the one windowed model and its window
    # one row per model, in order, its label the model's name and, past its context, the footnote's mark
    assert all(r["label"].startswith(m) for m, r in zip(known_models(), rows))
    context = {m: r["kv_bytes"] // budget.kv_bytes_per_token(m) for m, r in zip(known_models(), rows)}
    assert set(context.values()) == {f5.CONTEXT}
    past = {m for m in context if context[m] > (get_model_shape(m).max_context or math.inf)}
    assert {"SmolLM2-135M", "Qwen2.5-1.5B", "Mistral-7B-v0.1"} <= past and "Llama-3.1-8B" not in past
    marks = {m: r["label"].removeprefix(m).strip() for m, r in zip(known_models(), rows)}
    assert {m for m, mark in marks.items() if mark} == past
    assert {marks[m] for m in past} == {note.split()[0]}
    assert [r["label"] for r in f5.index_bill_rows(4_096)] == known_models()
    assert "Mistral-7B-v0.1" in note and "4,096" in note and "Qwen2.5-1.5B" not in note


def test_05a_tables_follow_the_library():
    row = budget.model_rows(nb05a.CONTEXT)[0]
    assert row["model"] == "Llama-3.1-8B" and row["KV / token (B)"] == 131_072
    # lesson 05a's section 3 cell: offsets / entries = 2^K / n, two thirds at K = 16
    bill = budget.index_bill("Llama-3.1-8B", nb05a.CONTEXT, K=16, L=150)
    assert bill["bucket_metadata_bytes"] / bill["table_bytes"] == pytest.approx(2**16 / nb05a.CONTEXT) == 2 / 3
    report = budget.budget_report("Llama-3.1-8B", nb05a.CONTEXT, K=10, L=150)
    assert "14.1 GiB" in repr(f5.report_table(report))


# --------------------------------------------------------------------------- 05b


def test_the_lessons_contiguous_and_paged_cells_give_the_librarys_allocations(mix):
    """05b sections 3 and 4 compute the slots and the pages in view; the library's allocators agree."""
    per = al.replica_bytes_per_token()
    pool = int(172.5 * GIB // per)
    prompt, total = mix[:, 0], mix.sum(axis=1)
    for slot in (2_048, 4_096, 8_192, 32_768):
        fits = prompt <= slot
        admitted = np.flatnonzero(fits)[: pool // slot]
        lib = al.contiguous_allocation(mix, slot)
        assert len(admitted) == lib.batch and (~fits[: admitted[-1] + 1]).sum() == lib.rejected
        assert (total[admitted] > slot).sum() == lib.overflow
        used = np.minimum(total[admitted], slot).sum()
        assert 1 - used / (len(admitted) * slot) == pytest.approx(lib.waste_fraction)
    for page in (1, 8, 16, 32, 128):
        batch = int((np.cumsum(-(-total // page) * page) <= pool).sum())
        lib = al.paged_allocation(mix, page)
        assert batch == lib.batch
        assert nb05_ref.paged_waste(total[:batch], page) == pytest.approx(lib.waste_fraction)


def test_the_lessons_break_even_with_attention_is_the_librarys():
    big = get_model_shape("Llama-3.1-70B")
    per, N, flops = big.kv_bytes_per_token(2), 70e9, 989.5e12
    assert flops == budget.H100_DENSE_BF16_FLOPS
    # the cell's tiers, written out, are the library's assumed nominal peaks
    tiers = {"host DRAM over PCIe 5": 64, "RDMA / 200 GbE": 25, "local NVMe": 7, "object storage": 1}
    assert tiers == {k: v for k, v in budget.STORAGE_TIERS_GBPS.items() if "HBM" not in k}
    for n in (128, 4_096, 32_768, 131_072):
        prefill = 2 * N * n + 2 * big.layers * big.attention_heads * big.head_dim * n * (n + 1)
        assert n * per / (prefill / (flops * 4)) == pytest.approx(budget.break_even_at(big, n, N, tp=4))


def test_finding_5_names_the_token_2_column_for_what_it_counts():
    rows = f5.disaggregation_rows()
    assert [round(r["vs 2 s budget"], 2) for r in rows] == [0.1, 0.97, 6.02]
    assert all(r[f5.TOKEN2] == r["prefill = token 1 (s)"] + r["transfer over 200 GbE (s)"] for r in rows)
    assert not any("at most" in k for k in rows[0])
    assert set(f5.DISAGGREGATION_FORMATS) <= set(rows[0])


def test_decode_step_floor_by_hand():
    shape = get_model_shape("Llama-3.1-70B")
    step = budget.decode_step_time(shape, batch=10, cached_tokens=1000)
    weights = 2 * shape.params
    kv = 1000 * shape.kv_bytes_per_token(2)
    assert step["memory_s"] == pytest.approx((weights + kv) / (4 * 3.35e12))
    flops = 2 * shape.params * 10 + 4 * 80 * 64 * 128 * 1000
    assert step["compute_s"] == pytest.approx(flops / (4 * budget.H100_DENSE_BF16_FLOPS))
    assert step["bound"] == "memory" and step["tokens_per_s"] == pytest.approx(10 / step["memory_s"])
    # a batch large enough makes the weight FLOPs the roof
    big = budget.decode_step_time(shape, batch=5_000, cached_tokens=0)
    assert big["bound"] == "compute" and big["step_s"] == big["compute_s"]
    with pytest.raises(ValueError, match="batch"):
        budget.decode_step_time(shape, batch=0, cached_tokens=10)


def test_the_notebooks_roofline_cell_gives_what_decode_step_time_gives(mix):
    """05b section 8 computes step = max(bytes / bandwidth, FLOPs / peak) in a cell over
    allocators.decode_loads; the claims take budget.decode_step_time. Both must agree."""
    hbm, peak = 4 * budget.H100_HBM_BYTES_PER_S, 4 * budget.H100_DENSE_BF16_FLOPS
    loads = al.decode_loads(mix)
    assembly = al.assembly_table(mix)
    per = al.replica_bytes_per_token()
    for r, a in zip(loads, assembly):
        assert r["allocation"] == a
        assert r["final"]["kv_read_bytes"] == a.logical_bytes  # final lengths: each sequence's logical KV
        for when in ("final", "half"):
            load = r[when]
            load["step_s"] = max(load["bytes"] / hbm, load["flops"] / peak)
            load["bound"] = "memory" if load["bytes"] / hbm >= load["flops"] / peak else "compute"
            load["tokens_per_s"] = r["batch"] / load["step_s"]
            lib = budget.decode_step_time("Llama-3.1-70B", r["batch"], load["kv_read_bytes"] // per)
            assert load["step_s"] == pytest.approx(lib["step_s"], rel=1e-12) and load["bound"] == lib["bound"]
    t = sv.throughput_rows(loads)
    assert len(t) == 4 and {r["bound, half-way"] for r in t} == {"memory"}
    tokens_x, batch_x = [r["tokens/s vs baseline"] for r in t], [r["batch vs baseline"] for r in t]
    assert all(1 < x < b for x, b in zip(tokens_x[1:], batch_x[1:]))  # throughput grows less than the batch


def test_utilisation_moves_every_break_even_in_proportion():
    col = "TP4 break-even, 128 tokens (GB/s)"
    rows = {r["MFU (share of the dense peak)"]: r for r in sv.utilisation_rows()}
    for mfu, r in rows.items():
        assert r[col] == pytest.approx(mfu * rows[1.0][col])
    t = sv.nvme_utilisation_threshold()
    assert 0.7 < t < 0.8
    big = get_model_shape("Llama-3.1-70B")
    # just below the threshold NVMe wins from the first token; just above, it does not
    below = budget.crossover_prefix(big, 7e9, 70e9, tp=4, flops_per_gpu=0.999 * t * budget.H100_DENSE_BF16_FLOPS)
    above = budget.crossover_prefix(big, 7e9, 70e9, tp=4, flops_per_gpu=1.001 * t * budget.H100_DENSE_BF16_FLOPS)
    assert below == 1 and above > 1
    # each row's verdict states the crossover prefix (none where NVMe wins from the first token)
    peak = budget.H100_DENSE_BF16_FLOPS
    n = {mfu: budget.crossover_prefix(big, 7e9, 70e9, tp=4, flops_per_gpu=mfu * peak) for mfu in rows}
    assert n[0.75] == 1 and n[1.0] == 34_545
    for mfu, r in rows.items():
        assert _numbers(r["local NVMe (7 GB/s) wins"]) == ([] if n[mfu] == 1 else [n[mfu]]), mfu


def test_reprefill_time_is_replica_seconds():
    """9.4 s of the TP4 replica: the FLOPs over four GPUs' peak, not GPU-seconds."""
    full = {s["target_occupancy"]: s for s in al.preemption_sweep()}[1.0]
    assert full["reprefill_s"] == pytest.approx(9.36, abs=0.01)
    tokens_s = full["reprefill_tokens"] * 2 * 70e9 / (4 * budget.H100_DENSE_BF16_FLOPS)
    assert tokens_s < full["reprefill_s"] < 1.1 * tokens_s  # the weights' share, plus some attention
    assert sv.first_prefill_seconds() == pytest.approx(140, rel=0.01)


def test_05b_tables_hold_the_library_numbers(mix):
    """Each table the notebook renders from pigviz.memory.serving, with its own formats."""

    def render(name, rows):
        return lessons.table(rows, formats=sv.FORMATS[name])

    m = budget.replica_memory()
    replica = sv.replica_rows(m)
    parts = ("total_bytes", "weight_bytes", "after_weights_bytes", "kv_budget_bytes", "rest_bytes")
    assert [r["GiB"] for r in replica] == [m[k] / GIB for k in parts] and replica[3]["GiB"] == 172.5
    assert len(render("replica", replica)) == 5
    shares = sv.context_share_rows()
    per = al.replica_bytes_per_token()
    assert [list(r.values())[-1] for r in shares] == pytest.approx([r["context"] * per / (172.5 * GIB) for r in shares])
    assert round(list(shares[-1].values())[-1], 3) == 0.232  # one 131,072-token sequence: 23.2% of the budget
    assert len(render("context_share", shares)) == 4
    assert list(render("mix", sv.mix_rows(mix)).text["max"]) == ["16,782", "4,000", "17,301"]
    assert [r["rejected"] for r in sv.contiguous_rows(mix)] == [32, 6, 1, 0]
    assert len(render("paged", sv.paged_rows(mix))) == 5
    assert len(render("sharing", sv.sharing_rows([al.prefix_sharing(p) for p in (0, 1_000)]))) == 2
    assert "9.26" in repr(render("break_even_tp", sv.break_even_tp_rows(al.replica_bytes_per_token())))
    # a tier fetches where its bandwidth beats the TP4 break-even; the slower ones recompute
    tiers = sv.tier_rows(per)
    be = budget.break_even_bandwidth(per, sv.N_PARAMS_70B, tp=4) / 1e9
    fast = [r["GB/s"] > be for r in tiers]
    assert [r["verdict"] == "fetch" for r in tiers] == fast and any(fast) and not all(fast)
    assert len(render("tiers", tiers)) == len(budget.STORAGE_TIERS_GBPS)
    # FP8 halves every break-even, and each falls below local NVMe's 7 GB/s: fetch at every length
    fp8 = sv.fp8_rows()
    assert all(r["FP8 KV (GB/s)"] == pytest.approx(r["16-bit KV (GB/s)"] / 2) for r in fp8)
    assert all(r["FP8 KV (GB/s)"] < sv.NVME_GBPS and r["local NVMe (7 GB/s), FP8"] == "fetch" for r in fp8)
    assert len(render("fp8", fp8)) == 4
    d = render("disaggregation", sv.disaggregation_rows())
    assert d.frame["token 2 by, at most (200 GbE, s)"].iloc[-1] == pytest.approx(12.04, abs=0.01)
    assert list(d.text["token 2 by / 2 s budget"]) == ["0.10x", "0.97x", "6.02x"]
    rules = render("rules", sv.rules_rows(mix))
    assert list(rules.text["rule"])[::3] == ["strict (this notebook)", "loose"]


def test_a_prepended_system_prompt_shared_costs_about_nothing(mix):
    pre = sv.prepended_prompt(mix, 2048)
    assert pre["unshared"] < pre["shared"] <= pre["no_prompt"]
    assert pre["shared"] == pre["allocator"]  # a page-aligned prefix: no copy on write
    # by hand: the unshared run holds every prompt 2,048 tokens longer
    longer = mix.copy()
    longer[:, 0] += 2048
    assert pre["unshared"] == al.paged_allocation(longer, 16).batch
    assert (pre["shared"], pre["unshared"], pre["no_prompt"]) == (416, 162, 417)


def test_a_pcie5_drive_beats_every_break_even_and_tiers_say_what_they_stand_for():
    big = get_model_shape("Llama-3.1-70B")
    assert sv.PCIE5_NVME_GBPS * 1e9 > budget.break_even_at(big, 1, 70e9, tp=4)
    assert budget.crossover_prefix(big, sv.PCIE5_NVME_GBPS * 1e9, 70e9, tp=4) == 1
    assert set(sv.TIER_FIGURES) == set(budget.STORAGE_TIERS_GBPS)
    assert {r["tier"]: r["the figure (assumed)"] for r in sv.tier_rows(al.replica_bytes_per_token())} == sv.TIER_FIGURES


def test_transfer_delays_token_2_not_token_1():
    r = sv.disaggregation_rows(prompts=(131_072,))[0]
    assert r["KV to move"] == "40 GiB" and math.isclose(r["transfer over 200 GbE (s)"], 40 * GIB / 25e9)
    # token 2, counted from the arrival, comes after the prefill (token 1) and the transfer
    assert r["token 2 by, at most (200 GbE, s)"] == r["prefill = token 1 (s)"] + r["transfer over 200 GbE (s)"]


# --------------------------------------------------------------------------- the exercises


LESSON_05 = [e.name for e in ex.exercises("05")]


@pytest.mark.parametrize("name", LESSON_05)
def test_each_wrong_version_is_named_alone(name):
    """A wrong version's failure gives its own hint and no other wrong version's."""
    exercise = ex.get(name)
    for wrong in exercise.wrong:
        message = failure(exercise, wrong.fn)
        named = [w.label for w in exercise.wrong if f"common mistake ({w.label})" in message]
        assert named == [wrong.label], (wrong.label, named)


def _candidates_averaged(counts):
    """A learner who reads "on average" as a mean over the tables: each table's scan, then np.mean."""
    scans = [float(np.dot(row, row) / row.sum()) if row.sum() else 0.0 for row in np.asarray(counts)]
    return float(np.mean(scans))


def _candidates_over_every_key(counts):
    """The same slip made another way: the squares over the whole array's sum, L n, not one row's n."""
    counts = np.asarray(counts, dtype=np.float64)
    return float((counts**2).sum() / counts.sum()) if counts.sum() else 0.0


@pytest.mark.parametrize("fn", [_candidates_averaged, _candidates_over_every_key])
def test_a_scan_averaged_over_the_tables_is_named_as_that(fn):
    """Averaging the L tables' scans and dividing by L n give the same numbers; the check names the
    slip by what the learner did (a mean, not a sum), and names nothing else."""
    exercise = ex.get("05.candidates_per_query")
    message = failure(exercise, fn)
    assert message is not None
    named = [w.label for w in exercise.wrong if f"common mistake ({w.label})" in message]
    assert named == ["mean over the tables instead of their sum"], message


def _kv_float(layers, kv_heads, head_dim, dtype_bytes):
    return 2.0 * layers * kv_heads * head_dim * dtype_bytes


def _candidates_expectation(counts):
    """Written from the task: per table, the chance of each bucket times its entries, then the tables added."""
    counts = np.asarray(counts)
    total = 0.0
    for row in counts:
        n = row.sum()
        if n:
            total += float(np.dot(row / n, row))
    return total


def _waste_math_ceil(lengths, page):
    pages = sum(math.ceil(int(x) / page) for x in lengths)
    return (pages * page - sum(int(x) for x in lengths)) / (pages * page)


def _break_even_times(bytes_per_token, n_params, flops_per_gpu, tp):
    recompute = 2 * n_params / flops_per_gpu / tp
    return bytes_per_token / recompute


@pytest.mark.parametrize(
    "name, fn",
    [
        ("05.kv_bytes_per_token", _kv_float),
        ("05.candidates_per_query", _candidates_expectation),
        ("05.paged_waste", _waste_math_ceil),
        ("05.break_even_bandwidth", _break_even_times),
    ],
)
def test_correct_versions_written_from_the_task_pass(name, fn):
    assert failure(ex.get(name), fn) is None
