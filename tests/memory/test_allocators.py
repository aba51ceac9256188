import random

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pigviz.memory import allocators as al
from pigviz.memory import budget
from pigviz.memory.budget import GIB

BPT = 327_680
requests_st = st.lists(st.tuples(st.integers(16, 5000), st.integers(8, 2000)), min_size=1, max_size=60)


def test_request_mix_follows_the_stated_recipe():
    mix = al.request_mix()
    assert mix.shape == (4000, 2) and mix.dtype == np.int64
    assert mix[:, 0].min() >= 16 and mix[:, 0].max() <= 128_000
    assert mix[:, 1].min() >= 8 and mix[:, 1].max() <= 4_000
    # the same Python stream, drawn independently here: prompt then output, per request
    rng = random.Random(5)
    first = [(int(rng.lognormvariate(6.4, 1.0)), int(rng.lognormvariate(5.5, 0.8))) for _ in range(3)]
    assert [tuple(r) for r in mix[:3].tolist()] == [(max(16, p), max(8, o)) for p, o in first]
    assert np.array_equal(al.request_mix(10, seed=1), al.request_mix(10, seed=1))
    assert not np.array_equal(al.request_mix(10, seed=1), al.request_mix(10, seed=2))


def test_replica_shape_is_320_kib_per_token():
    assert al.replica_bytes_per_token() == BPT and al.KV_BUDGET_BYTES == int(172.5 * GIB)
    assert al.KV_BUDGET_BYTES == budget.replica_memory()["kv_budget_bytes"]


def test_contiguous_by_hand():
    reqs = [(100, 20), (3000, 500), (50, 10)]
    a = al.contiguous_allocation(reqs, reserve_tokens=1000, budget_bytes=2500 * 10, bytes_per_token=10)
    # the 3,000-token prompt cannot enter a 1,000-token slot: rejected, the third request takes the slot
    assert (a.batch, a.held_bytes, a.logical_bytes, a.overflow, a.rejected) == (2, 20_000, 1_800, 0, 1)
    a = al.contiguous_allocation([(100, 20), (900, 500)], 1000, budget_bytes=10**6, bytes_per_token=10)
    # the second answer outgrows its slot: cut off at 1,000 tokens, it holds and uses exactly the slot
    assert (a.batch, a.overflow, a.rejected, a.logical_bytes, a.completed) == (2, 1, 0, (120 + 1000) * 10, 1)
    a = al.contiguous_allocation(reqs, 4096, budget_bytes=10**9, bytes_per_token=10)
    assert a.batch == 3 and a.rejected == 0  # more slots than requests admits them all


def test_contiguous_never_counts_more_than_its_slots():
    mix = al.request_mix()
    for reserve in (1024, 2048, 8192):
        a = al.contiguous_allocation(mix, reserve)
        assert 0 <= a.waste_fraction < 1 and a.logical_bytes <= a.held_bytes
    a = al.contiguous_allocation(mix, 2048)
    assert (a.batch, a.rejected, a.overflow) == (276, 32, 16)
    assert a.waste_fraction == pytest.approx(0.507, abs=5e-4)


def test_contiguous_rules_by_hand():
    reqs = [(100, 20), (3000, 500), (50, 2000)]
    kw = dict(budget_bytes=2000 * 10, bytes_per_token=10)  # two 1,000-token slots
    strict, full, first, loose = al.contiguous_rules(reqs, 1000, **kw)
    assert (strict.batch, strict.rejected, strict.overflow, strict.logical_bytes) == (2, 1, 1, (120 + 1000) * 10)
    assert (full.rejected, full.logical_bytes) == (1, (120 + 2050) * 10)
    # first in line: the 3,000-token prompt gets a slot; counted up to it, or at its full 3,500
    assert (first.batch, first.rejected, first.overflow, first.logical_bytes) == (2, 0, 1, (120 + 1000) * 10)
    assert loose.logical_bytes == (120 + 3500) * 10 and loose.waste_fraction < 0
    assert "1,000" in strict.name and len({r.name for r in (strict, full, first, loose)}) == 4  # four rows told apart


def test_the_loose_rule_reproduces_its_numbers():
    """The loose rule takes reqs[:slots] and counts each at p + o: 5.65x at 8k, 34.4% wasted at 2k."""
    mix = al.request_mix()
    rules = {r: al.contiguous_rules(mix, r) for r in (2048, 8192)}
    assert round(rules[8192][3].held_over_logical, 2) == 5.65
    assert round(rules[2048][3].waste_fraction, 3) == 0.344
    assert round(rules[2048][2].waste_fraction, 3) == 0.451
    assert round(rules[2048][1].waste_fraction, 3) == 0.497
    assert rules[2048][0] == al.contiguous_allocation(mix, 2048)


def test_prefix_coverage():
    reqs = [(100, 5), (3000, 5), (2048, 5), (10, 5)]
    c = al.prefix_coverage(reqs, 2048, batch=3)
    assert (c["batch"], c["prompts_within_prefix"]) == (3, 2)
    assert c["share_within_prefix"] == pytest.approx(2 / 3)
    assert c["private_prompt_token_share"] == pytest.approx((3000 - 2048) / (100 + 3000 + 2048))
    assert al.prefix_coverage(reqs, 0)["private_prompt_token_share"] == 1.0
    with pytest.raises(ValueError, match="batch"):
        al.prefix_coverage(reqs, 16, batch=5)


def test_paged_by_hand_with_and_without_prefix():
    reqs = [(100, 20), (30, 10), (5, 3)]
    a = al.paged_allocation(reqs, page_tokens=16, budget_bytes=16 * 10 * 10, bytes_per_token=10)
    # pages needed: ceil(120/16)=8, ceil(40/16)=3 -> 8 fit in 10, 11 do not: stop after one
    assert (a.batch, a.held_bytes, a.logical_bytes) == (1, 8 * 16 * 10, 120 * 10)
    a = al.paged_allocation(reqs, 16, budget_bytes=16 * 10 * 100, bytes_per_token=10, shared_prefix=64)
    # prefix 4 pages once; private tokens 120-64=56 -> 4, 40-30=10 -> 1, 8-5=3 -> 1
    assert (a.batch, a.held_bytes // 160) == (3, 4 + 4 + 1 + 1)


@settings(max_examples=60, deadline=None)
@given(reqs=requests_st, page=st.sampled_from([1, 2, 8, 16, 32, 128]))
def test_paged_waste_is_below_one_page_per_sequence(reqs, page):
    a = al.paged_allocation(reqs, page, budget_bytes=10**15, bytes_per_token=1)
    assert a.batch == len(reqs)
    waste_tokens = a.held_bytes - a.logical_bytes
    assert 0 <= waste_tokens <= a.batch * (page - 1)


@settings(max_examples=40, deadline=None)
@given(reqs=requests_st, page=st.sampled_from([1, 16, 64]), budget=st.integers(1, 10**6))
@example(reqs=[(16, 8)], page=16, budget=1)  # a budget smaller than one page admits nothing
def test_real_allocator_matches_page_formula_without_sharing(reqs, page, budget):
    formula = al.paged_allocation(reqs, page, budget_bytes=budget, bytes_per_token=1)
    real = al.paged_admission_with_allocator(reqs, page, budget_bytes=budget, bytes_per_token=1)
    assert (real.batch, real.held_bytes, real.logical_bytes) == (
        formula.batch,
        formula.held_bytes,
        formula.logical_bytes,
    )


@settings(max_examples=40, deadline=None)
@given(
    prefix=st.integers(0, 5000), n=st.integers(1, 40), page=st.sampled_from([1, 7, 16, 64]), seed=st.integers(0, 10**6)
)
def test_sharing_never_increases_memory_and_frees_everything(prefix, n, page, seed):
    r = al.prefix_sharing(prefix, n_requests=n, page_tokens=page, seed=seed)
    assert r["shared_pages"] <= r["naive_pages"]
    assert r["pages_after_free"] == 0
    assert r["cow_copies"] <= n - 1  # the last writer of a shared partial page needs no copy


def test_prefix_sharing_matches_the_seed_table():
    saved = {p: al.prefix_sharing(p) for p in (0, 256, 1024, 4096, 16384)}
    assert saved[0]["saved_fraction"] == 0
    assert saved[4096]["formula_saved_fraction"] == pytest.approx(0.8905, abs=5e-4)
    assert abs(saved[4096]["saved_fraction"] - saved[4096]["formula_saved_fraction"]) < 0.01
    assert [saved[p]["saved_fraction"] for p in sorted(saved)] == sorted(s["saved_fraction"] for s in saved.values())


def test_refcounts_and_copy_on_write():
    pool = al.PagedKVAllocator(num_pages=10, page_tokens=4)
    pool.add_sequence("root", 6)  # pages: one full, one half full
    full, partial = pool.page_table("root")
    pool.fork("root", "a")
    pool.fork("root", "b", tokens=4)  # b takes only the full page
    assert [pool.refcount(p) for p in (full, partial)] == [3, 2]
    pool.append("a", 1)  # write into a shared partial page: copy first
    assert pool.cow_copies == 1 and pool.page_table("a")[0] == full and pool.page_table("a")[1] != partial
    assert pool.refcount(partial) == 1 and pool.length("a") == 7
    pool.append("b", 4)  # b's last page is full: no copy, one new page
    assert pool.cow_copies == 1 and len(pool.page_table("b")) == 2
    pool.append("root", 2)  # root is now the only owner of its partial page
    assert pool.cow_copies == 1 and pool.page_table("root")[1] == partial
    in_use = pool.pages_in_use
    pool.free("root")
    assert pool.pages_in_use == in_use - 1 and pool.refcount(full) == 2
    pool.free("a")
    pool.free("b")
    assert pool.pages_in_use == 0 and pool.refcount(full) == 0 and pool.free_pages == 10


def test_out_of_pages_leaves_state_unchanged():
    pool = al.PagedKVAllocator(num_pages=3, page_tokens=4)
    pool.add_sequence("x", 8)
    with pytest.raises(al.OutOfPages):
        pool.append("x", 5)
    assert pool.pages_in_use == 2 and pool.length("x") == 8
    with pytest.raises(al.OutOfPages):
        pool.add_sequence("y", 9)
    with pytest.raises(KeyError):
        pool.length("y")
    with pytest.raises(ValueError, match="already exists"):
        pool.add_sequence("x")


def test_allocator_with_shared_prefix_pays_for_copy_on_write():
    mix = al.request_mix()
    formula = al.paged_allocation(mix, 16, shared_prefix=2048)
    real = al.paged_admission_with_allocator(mix, 16, shared_prefix=2048)
    # prompts shorter than the prefix share a partly used page and copy it on first write
    assert real.batch < formula.batch and real.batch > 0.95 * formula.batch


def test_serving_without_pressure_never_preempts_and_finishes_everything():
    reqs = [(100, 50)] * 10
    r = al.simulate_serving(1.0, requests=reqs, page_tokens=16, budget_bytes=10**6, bytes_per_token=1)
    assert (r["completed"], r["preemptions"], r["reprefill_tokens"]) == (10, 0, 0)
    assert r["steps"] == 50  # everyone runs at once and decodes 50 tokens


def test_serving_evicts_when_pages_run_out_and_counts_the_reprefill():
    # a pool of 20 four-token pages; two requests of 30 prompt tokens (8 pages each) that want 20 more
    reqs = [(30, 20), (30, 20)]
    r = al.simulate_serving(1.0, requests=reqs, page_tokens=4, budget_bytes=20 * 4, bytes_per_token=1)
    assert r["completed"] == 2 and r["preemptions"] >= 1
    # an evicted request re-prefills its prompt and what it had generated
    assert r["reprefill_tokens"] >= 30 and r["reprefill_s"] > 0
    # the same requests one at a time (a target that admits only one) need no eviction
    solo = al.simulate_serving(0.5, requests=reqs, page_tokens=4, budget_bytes=20 * 4, bytes_per_token=1)
    assert solo["preemptions"] == 0 and solo["completed"] == 2 and solo["steps"] == 40


def test_serving_rejects_a_request_that_can_never_fit():
    r = al.simulate_serving(0.9, requests=[(100, 10), (10, 5)], page_tokens=4, budget_bytes=40, bytes_per_token=1)
    assert r["rejected"] == 1 and r["completed"] == 1


def test_preemptions_rise_with_the_target_on_the_seed_mix():
    sweep = al.preemption_sweep((0.9, 0.99, 1.0))
    counts = [s["preemptions"] for s in sweep]
    assert counts == sorted(counts) and counts[0] == 0 and counts[-1] > 40 * max(counts[1], 1)
    assert all(s["completed"] == 4000 for s in sweep)
    assert al.preemption_sweep((0.9,)) == sweep[:1]  # deterministic (and cached)


def test_preemption_figure():
    from pigviz.plots import budget as pb

    reqs = [(30, 20), (30, 20)]
    sweep = al.preemption_sweep((0.5, 1.0), requests=reqs, page_tokens=4, budget_bytes=80, bytes_per_token=1)
    fig = pb.preemption_figure(sweep)
    assert fig.layout.yaxis.type == "log" and list(fig.data[0].x) == ["50%", "100%"]
    assert fig.data[0].text[0] == "0"


def test_largest_sharing_gap_finds_the_mid_page_prefix():
    rows = [al.prefix_sharing(p) for p in (1_000, 1_024, 4_096)]
    gap = al.largest_sharing_gap(rows)
    assert gap["prefix_tokens"] == 1_000 and gap["cow_copies"] == 63
    assert gap["gap_points"] == pytest.approx(100 * (rows[0]["formula_saved_fraction"] - rows[0]["saved_fraction"]))
    with pytest.raises(ValueError, match="results"):
        al.largest_sharing_gap([])


@pytest.mark.parametrize(
    "call",
    [
        lambda: al.request_mix(10, seed=-5),
        lambda: al.prefix_sharing(16, seed=-1),
    ],
)
def test_negative_seeds_are_refused(call):
    # random.Random(-5) would silently give the same stream as random.Random(5)
    with pytest.raises(ValueError, match=r"seed must be in \[0"):
        call()


def test_assembly_rederives_the_seed_table():
    rows = al.assembly_table()
    assert [r.batch for r in rows] == [69, 276, 417, 1085]
    # the contiguous rows count a cut-off sequence at its slot, not at its full length
    assert [round(r.held_over_logical, 2) for r in rows] == [6.72, 2.03, 1.01, 0.38]
    assert round(rows[3].batch / rows[0].batch, 1) == 15.7
    assert (rows[1].overflow, rows[1].rejected) == (16, 32)


@pytest.mark.parametrize(
    "call,exc,match",
    [
        (lambda: al.contiguous_allocation([(1, 2)], 0), ValueError, "reserve_tokens"),
        (lambda: al.paged_allocation([(1, 2)], 0), ValueError, "page_tokens"),
        (lambda: al.paged_allocation([(1, 2, 3)], 16), ValueError, "requests"),
        (lambda: al.paged_allocation([(-1, 2)], 16), ValueError, "requests"),
        (lambda: al.prefix_sharing(-1), ValueError, "prefix_tokens"),
        (lambda: al.simulate_serving(1.5), ValueError, "target_occupancy"),
        (lambda: al.simulate_serving(0.0), ValueError, "target_occupancy"),
        (lambda: al.request_mix(0), ValueError, "n"),
        (lambda: al.PagedKVAllocator(0), ValueError, "num_pages"),
    ],
)
def test_bad_inputs(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_allocator_widget_reacts():
    from pigviz.widgets.budget import AllocatorWidget

    w = AllocatorWidget()
    assert tuple(w.figure.data[0].y) == (69, 276, 417, 1085)
    w.page.value = 128
    assert tuple(w.figure.data[0].y)[2] < 417
    w.prefix.value = 0
    assert w.figure.data[0].y[3] == w.figure.data[0].y[2]
    w.reserve.value = 32768
    assert w.figure.data[0].y[0] == 17
    # the table is redrawn with the rows' current numbers: one line each, its batch and held/logical
    assert w.status.value == "" and w.table.value.count("<tr>") == len(w.rows)
    for r in w.rows:
        assert f"batch {r.batch:,} " in w.table.value and f"{r.held_over_logical:.2f}x" in w.table.value, r.name
    assert AllocatorWidget(page_tokens=-3, reserve_tokens="x").page.value == 1


def test_decode_loads_count_each_admitted_sequence_once_at_its_length():
    reqs = al.request_mix()
    loads = al.decode_loads(reqs)
    rows = al.assembly_table(reqs)
    assert [r["batch"] for r in loads] == [r.batch for r in rows]
    per = al.replica_bytes_per_token()
    paged = loads[2]
    final = int(reqs[: paged["batch"]].sum())  # paged: the first `batch` requests, whole
    assert paged["final"]["kv_read_bytes"] == final * per
    assert paged["half"]["kv_read_bytes"] < paged["final"]["kv_read_bytes"]
    slot = loads[0]  # contiguous 8k: prompts that fit, capped at the slot
    fits = reqs[reqs[:, 0] <= 8192][: slot["batch"]]
    assert slot["final"]["kv_read_bytes"] == int(np.minimum(fits.sum(axis=1), 8192).sum()) * per


def test_request_mix_is_clipped_to_its_ranges():
    mix = al.request_mix()
    assert al.PROMPT_TOKENS_RANGE == (16, 128_000) and al.OUTPUT_TOKENS_RANGE == (8, 4_000)
    assert mix[:, 0].min() >= 16 and mix[:, 0].max() <= 128_000
    assert mix[:, 1].min() >= 8 and mix[:, 1].max() == 4_000  # one output sits at the cap
