"""The compiled CPU path (pigviz.lsh.fused) against the torch reference (pigviz.lsh.magicpig):
same read set, same outputs to 1e-5, the log-normaliser, the decode buffer, the compiled
index build, and the fallback when numba is missing."""

import dataclasses
import json
import math
import os

import numpy as np
import pytest
import torch

from pigviz.lsh import fused as fused_attend
from pigviz.lsh import index as lsh_index
from pigviz.lsh import kernels, magicpig
from pigviz.lsh.index import build_index
from pigviz.lsh.magicpig import synthetic_decode_step

numba_only = pytest.mark.skipif(not fused_attend.available(), reason="needs numba (pip install pigviz[fast])")


@pytest.fixture(scope="module")
def step():
    return synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1)


@pytest.fixture(scope="module")
def index(step):
    return build_index(step[1], K=8, L=40, sinks=4, recent=32, seed=0)


def rel(a, b):
    return float(((a.double() - b.double()).norm(dim=-1) / b.double().norm(dim=-1)).max())


def torch_only(monkeypatch):
    monkeypatch.setattr(kernels, "kernels", lambda: None)


@numba_only
@pytest.mark.parametrize("min_hits", [1, 2, 3])
def test_fast_path_reads_the_same_keys_and_matches_the_reference(step, index, min_hits):
    q, k, v = step
    out, stats = fused_attend.attend(index, q, k, v, min_hits=min_hits, return_read_mask=True)
    ref, ref_stats = magicpig.attend(index, q, k, v, min_hits=min_hits, return_read_mask=True, return_lse=True)
    assert torch.equal(stats["read_mask"], ref_stats["read_mask"])
    for name in ("keys_read", "sampled", "candidates"):
        assert torch.equal(stats[name], ref_stats[name]), name
    assert stats["budget"] == pytest.approx(ref_stats["budget"])
    assert rel(out, ref) < 1e-5
    assert torch.allclose(stats["lse"], ref_stats["lse"], rtol=1e-5, atol=1e-5)


@numba_only
def test_realistic_shape_matches_the_reference():
    q, k, v = synthetic_decode_step(heads=9, kv_heads=3, n=8192, d=64, seed=0)
    idx = build_index(k, K=10, L=150, seed=0)
    out, stats = fused_attend.attend(idx, q, k, v)
    ref, ref_stats = magicpig.attend(idx, q, k, v, return_lse=True)
    assert torch.equal(stats["sampled"], ref_stats["sampled"])
    assert rel(out, ref) < 1e-5
    assert torch.allclose(stats["lse"], ref_stats["lse"], rtol=1e-5)


@numba_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_cache_is_read_in_place(step, index, dtype):
    q, k, v = (t.to(dtype) for t in step)
    out, stats = fused_attend.attend(index, q, k, v)
    ref, ref_stats = magicpig.attend(index, q, k, v, return_lse=True)
    assert out.dtype == dtype and torch.equal(stats["sampled"], ref_stats["sampled"])
    assert rel(out, ref) < 1e-2  # both round the output to dtype
    assert torch.allclose(stats["lse"], ref_stats["lse"], rtol=1e-5, atol=1e-4)


@numba_only
def test_nothing_outside_the_read_set_is_loaded(step, index):
    q, k, v = step
    out, stats = fused_attend.attend(index, q, k, v, return_read_mask=True)
    pk, pv = k.clone(), v.clone()
    for g in range(2):
        unread = ~stats["read_mask"][3 * g : 3 * g + 3].any(0)
        pk[g, unread] = pv[g, unread] = float("nan")
    again, _ = fused_attend.attend(index, q, pk, pv)
    assert torch.equal(again, out)


@numba_only
def test_a_non_finite_read_is_refused_with_the_reference_message(step, index):
    q, k, v = step
    kk = k.clone()
    kk[1, 3999, 0] = float("nan")  # an exact (recent) key of KV head 1
    with pytest.raises(ValueError, match="^k holds a non-finite number.*query head 3"):
        fused_attend.attend(index, q, kk, v)
    vv = v.clone()
    vv[0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="^v holds a non-finite number"):
        fused_attend.attend(index, q, k, vv)
    with pytest.raises(ValueError, match="q must contain only finite"):
        fused_attend.attend(index, torch.full_like(q, float("nan")), k, v)


def _buffer_case(step):
    q, k, v = step
    n_idx = 3800
    idx = build_index(k[:, :n_idx], K=8, L=40, sinks=4, recent=32, seed=0)
    ends = torch.tensor([3800, 3801, 3900, 4000, 3950, 3805])
    return idx, q, k, v, ends


@numba_only
def test_buffer_is_merged_by_log_sum_exp(step):
    idx, q, k, v, ends = _buffer_case(step)
    scale = 0.3
    out, stats = fused_attend.attend(idx, q, k, v, buffer_end=ends, scale=scale)
    # Written out: the index part from the reference, the buffer densely, then merged.
    part, part_stats = magicpig.attend(idx, q * (scale * math.sqrt(32)), k[:, :3800], v[:, :3800], return_lse=True)
    for h in range(6):
        g = h // 3
        s = (k[g, 3800 : ends[h]] @ q[h]) * scale
        lse = torch.logsumexp(torch.cat([part_stats["lse"][h : h + 1], s]), 0)
        expected = (
            math.exp(part_stats["lse"][h] - lse) * part[h]
            + torch.softmax(torch.cat([part_stats["lse"][h : h + 1], s]), 0)[1:] @ v[g, 3800 : ends[h]]
        )
        assert rel(out[h : h + 1], expected[None]) < 1e-5
        assert float(stats["lse"][h]) == pytest.approx(float(lse), rel=1e-5)
    assert stats["buffer"].tolist() == (ends - 3800).tolist()


@numba_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_step_is_attend_over_index_and_buffer(step, dtype):
    """The decoding loop's entry: transformers' layout, every row sees the whole buffer; a
    second min_hits or scale gets its own plan rather than the first one's."""
    idx, q, k, v, _ = _buffer_case(step)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    for min_hits, scale in ((2, 0.3), (3, 0.3), (2, 0.2)):
        out, sampled = fused_attend.decode_step(idx, q[None, :, None], k[None], v[None], min_hits=min_hits, scale=scale)
        ends = torch.full((6,), 4000)
        ref, stats = fused_attend.attend(idx, q, k, v, min_hits=min_hits, scale=scale, buffer_end=ends)
        assert out.shape == (1, 1, 6, 32) and out.dtype == torch.float32
        assert sampled == int(stats["sampled"].sum())
        assert rel(out[0, 0], ref.float()) < (1e-6 if dtype == torch.float32 else 1e-2)


@numba_only
def test_decode_step_declines_what_it_cannot_run(step, index, monkeypatch):
    q, k, v = step
    needs_grad = q.clone().requires_grad_(True)
    assert fused_attend.decode_step(index, needs_grad[None, :, None], k[None], v[None], min_hits=2, scale=0.2) is None
    torch_only(monkeypatch)
    assert fused_attend.decode_step(index, q[None, :, None], k[None], v[None], min_hits=2, scale=0.2) is None


def test_fallback_without_numba_gives_the_reference(step, index, monkeypatch):
    q, k, v = step
    torch_only(monkeypatch)
    assert not fused_attend.available()
    out, stats = fused_attend.attend(index, q, k, v, return_read_mask=True)
    ref, ref_stats = magicpig.attend(index, q, k, v, return_read_mask=True, return_lse=True)
    assert torch.equal(out, ref) and torch.equal(stats["lse"], ref_stats["lse"])
    assert torch.equal(stats["read_mask"], ref_stats["read_mask"])
    idx, q, k, v, ends = _buffer_case(step)
    out, stats = fused_attend.attend(idx, q, k, v, buffer_end=ends)
    assert out.shape == (6, 32) and torch.isfinite(out).all() and torch.isfinite(stats["lse"]).all()
    # And the build falls back to torch's sorts.
    assert kernels.pack_buckets(torch.zeros(8, 4), 0, 2, torch.zeros(4, 4, dtype=torch.int32)) is False
    assert build_index(k, K=8, L=40).entries.shape == (2, 40, 4000)


@numba_only
def test_fallback_buffer_path_matches_the_fast_path(step, monkeypatch):
    idx, q, k, v, ends = _buffer_case(step)
    fast, fast_stats = fused_attend.attend(idx, q, k, v, buffer_end=ends)
    torch_only(monkeypatch)
    slow, slow_stats = fused_attend.attend(idx, q, k, v, buffer_end=ends)
    assert rel(fast, slow) < 1e-5
    assert torch.allclose(fast_stats["lse"], slow_stats["lse"], rtol=1e-5)


@numba_only
def test_nothing_to_read_gives_zeros_and_minus_infinity(step):
    q, k, v = step
    bare = build_index(k, K=16, L=2, sinks=0, recent=0)
    out, stats = fused_attend.attend(bare, q, k, v)
    assert int(stats["keys_read"].sum()) == 0
    assert torch.equal(out, torch.zeros_like(out)) and bool((stats["lse"] == -math.inf).all())


@numba_only
@pytest.mark.parametrize("K,L", [(1, 3), (8, 40), (10, 150), (20, 5)])
def test_compiled_build_equals_the_torch_build(K, L, monkeypatch):
    k = synthetic_decode_step(heads=4, kv_heads=2, n=3000, d=32, seed=2)[1]
    fast = build_index(k, K=K, L=L, sinks=4, recent=16)
    torch_only(monkeypatch)
    slow = build_index(k, K=K, L=L, sinks=4, recent=16)
    assert torch.equal(fast.offsets, slow.offsets)
    # Projections of keys within rounding of a hyperplane may, on another BLAS, fall on
    # the other side when the product is transposed; on MKL they are bit-identical.
    assert (fast.entries == slow.entries).double().mean() > 0.999
    assert torch.equal(fast.centred_norms, slow.centred_norms)


def test_bad_arguments(step, index):
    q, k, v = step
    with pytest.raises(TypeError, match="LSHIndex"):
        fused_attend.attend("index", q, k, v)
    with pytest.raises(ValueError, match="index was built for"):
        fused_attend.attend(index, q, k[:, :100], v[:, :100])
    with pytest.raises(ValueError, match="buffer_end"):
        fused_attend.attend(index, q, k, v, buffer_end=[4000] * 5)
    with pytest.raises(ValueError, match="min_hits must be in"):
        fused_attend.attend(index, q, k, v, min_hits=0)


def test_index_module_still_builds_without_the_compiled_path(monkeypatch):
    torch_only(monkeypatch)
    k = torch.randn(1, 500, 8)
    idx = lsh_index.build_index(k, K=4, L=3, sinks=1, recent=2)
    assert int(idx.offsets[0, 0, -1]) == 500


@numba_only
def test_sampling_everything_matches_the_reference(step):
    """K=1, L=16, one hit enough: every key is a candidate and sampled (full scratch lists)."""
    q, k, v = step
    wide = build_index(k, K=1, L=16, sinks=4, recent=32)
    out, stats = fused_attend.attend(wide, q, k, v, min_hits=1)
    ref, ref_stats = magicpig.attend(wide, q, k, v, min_hits=1, return_lse=True)
    assert torch.equal(stats["sampled"], ref_stats["sampled"])
    assert rel(out, ref) < 1e-5


# -- threads, the sample-only step, storage layouts ---------------------------------------------
@numba_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_thread_count_gives_the_same_bits(dtype, monkeypatch):
    """Threads take rows as they become free, each row computed by one thread in a fixed
    order: the output, its log-normaliser and the counts are identical for any thread count
    (and for whichever thread took which row: repeated calls split them differently)."""
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", 1)  # threads even for this small step
    q, k, v = synthetic_decode_step(heads=9, kv_heads=3, n=5000, d=64, seed=4)
    k, v = k.to(dtype), v.to(dtype)
    idx = build_index(k, K=10, L=60, seed=1)
    ends = torch.tensor([5000, 5000, 5000, 4990, 5000, 4800, 5000, 5000, 4700])
    idx_small = build_index(k[:, :4600], K=10, L=60, seed=1)
    ref, ref_stats = fused_attend.attend(idx_small, q, k, v, buffer_end=ends, threads=1)
    step_ref = fused_attend.decode_step(idx, q[None, :, None], k[None], v[None], min_hits=2, scale=0.125, threads=1)
    for threads in (2, 3, 4, 9, 16, 2, 2):
        out, stats = fused_attend.attend(idx_small, q, k, v, buffer_end=ends, threads=threads)
        assert torch.equal(out, ref) and torch.equal(stats["lse"], ref_stats["lse"])
        for name in ("sampled", "candidates", "keys_read"):
            assert torch.equal(stats[name], ref_stats[name]), name
        step = fused_attend.decode_step(
            idx, q[None, :, None], k[None], v[None], min_hits=2, scale=0.125, threads=threads
        )
        assert torch.equal(step[0], step_ref[0]) and step[1] == step_ref[1]


@numba_only
def test_an_openmp_team_and_python_threads_give_the_same_bits(monkeypatch):
    """Several threads run as numba's OpenMP team where it is there (kernels.team_ready), else
    as Python threads: either way the step's bits are the one-thread step's."""
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", 1)
    q, k, v = synthetic_decode_step(heads=9, kv_heads=3, n=4000, d=64, seed=5)
    k, v = k.to(torch.bfloat16), v.to(torch.bfloat16)
    idx = build_index(k, K=10, L=60, seed=2)
    args = (idx, q[None, :, None], k[None], v[None])
    one = fused_attend.decode_step(*args, min_hits=2, scale=0.125, threads=1)
    launched = []
    team_ready = kernels.team_ready
    monkeypatch.setattr(kernels, "team_ready", lambda t: launched.append(t) or team_ready(t))
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        team = fused_attend.decode_step(*args, min_hits=2, scale=0.125, threads=2)
        assert torch.get_num_threads() == 1  # the team left torch's own thread count alone
        fused_attend.attend(idx, q, k, v, threads=2)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(torch_threads)
    assert launched == [2, 2]  # decode_step, then attend
    monkeypatch.setattr(kernels, "team_ready", lambda t: False)
    pool = fused_attend.decode_step(*args, min_hits=2, scale=0.125, threads=2)
    for got in (team, pool):
        assert torch.equal(got[0], one[0]) and got[1] == one[1]


@numba_only
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_does_not_use_the_openmp_team(monkeypatch):
    """GNU OpenMP cannot run in a child forked after it started (numba would terminate it):
    there team_ready says no, and the step takes Python threads."""
    monkeypatch.setattr(kernels, "_TEAM", {"pid": os.getpid(), "ok": True})
    assert kernels.team_ready(1) is True  # here, in the process that started the team
    pid = os.fork()
    if pid == 0:  # the child: only a pure-Python answer, then out
        os._exit(0 if kernels.team_ready(1) is False else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_small_steps_start_fewer_threads(monkeypatch):
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", 2**18)
    assert fused_attend.threads_for(9, 8192, 2) == 1  # SmolLM2 at 8k: 74k (row, token) pairs
    assert fused_attend.threads_for(32, 98_304, 2) == 2
    assert fused_attend.threads_for(32, 98_304, 64) == 12  # 3.1M pairs: one thread per 2^18
    assert fused_attend.threads_for(3, 10**7, 8) == 3  # never more than a thread a row
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", 1)
    assert fused_attend.threads_for(9, 8192, 2) == 2
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", fused_attend.NEVER)
    assert fused_attend.threads_for(32, 10**7, 64) == 1


def test_pick_by_trial_takes_the_count_that_ran_fastest():
    now = [0.0]
    cost = {1: 8.0, 2: 5.0}  # two threads faster: a step past the calibration's sizes

    def run(count):
        now[0] += cost[count]
        return count

    assert fused_attend.pick_by_trial(run, (1, 2), clock=lambda: now[0]) == (2, 2)
    cost[2] = 9.0  # the second thread costs more than it gives
    assert fused_attend.pick_by_trial(run, (1, 2), clock=lambda: now[0])[0] == 1


@numba_only
def test_past_the_calibrated_work_a_step_is_decided_by_trial(monkeypatch):
    """A calibration that never saw a second thread pay (NEVER) at its small sizes does not
    keep a larger step on one thread by extrapolation: the step itself is timed on both
    counts, once per size, and its bits are the one-thread step's whichever count wins."""
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", fused_attend.NEVER)
    monkeypatch.setattr(fused_attend, "CALIBRATED_UP_TO", 9 * 2000)
    monkeypatch.setattr(fused_attend, "TRIALS", {})
    tried = []
    pick = fused_attend.pick_by_trial
    monkeypatch.setattr(fused_attend, "pick_by_trial", lambda run, counts: tried.append(counts) or pick(run, counts))
    q, k, v = synthetic_decode_step(heads=9, kv_heads=3, n=5000, d=64, seed=6)
    idx = build_index(k.to(torch.bfloat16), K=10, L=60, seed=3)
    args = (idx, q[None, :, None], k.to(torch.bfloat16)[None], v.to(torch.bfloat16)[None])
    one = fused_attend.decode_step(*args, min_hits=2, scale=0.125, threads=1)
    assert tried == []  # one thread asked: nothing to decide
    for _ in range(3):
        step = fused_attend.decode_step(*args, min_hits=2, scale=0.125, threads=2)
        assert torch.equal(step[0], one[0]) and step[1] == one[1]
    assert tried == [(1, 2)]  # one trial for this size, its decision kept
    (chosen,) = fused_attend.TRIALS.values()
    assert chosen in (1, 2) and fused_attend.threads_used(9, 5000, 2) == chosen
    small = build_index(k[:, :1500].to(torch.bfloat16), K=10, L=60, seed=3)
    fused_attend.attend(small, q, k[:, :1500], v[:, :1500], threads=2)
    assert tried == [(1, 2)]  # within the calibrated sizes the calibration decides


def test_break_even_crosses_the_two_fitted_lines():
    work = [1000, 2000, 4000]
    one = [0.1 + 1e-3 * w for w in work]  # 0.1 ms to start, 1 µs a pair
    two = [0.6 + 0.5e-3 * w for w in work]  # 0.5 ms more to start, half the time a pair
    assert fused_attend.break_even(work, one, two) == 1000  # 0.5 ms / 0.5 µs
    assert fused_attend.break_even(work, one, one) == fused_attend.NEVER  # no pair got cheaper
    assert fused_attend.break_even(work, one, [t * 1.2 for t in one]) == fused_attend.NEVER
    assert fused_attend.break_even(work, one, [t / 2 for t in one]) == 1  # faster at every size


def test_the_threshold_is_read_from_the_environment_then_the_stored_calibration(tmp_path, monkeypatch):
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", None)
    monkeypatch.setenv("PIGVIZ_THREAD_WORK", "12345")
    assert fused_attend.work_per_thread() == 12345
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", None)
    monkeypatch.setenv("PIGVIZ_THREAD_WORK", "many")
    with pytest.raises(ValueError, match="PIGVIZ_THREAD_WORK must be an integer >= 1, got 'many'"):
        fused_attend.work_per_thread()
    monkeypatch.delenv("PIGVIZ_THREAD_WORK")
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", None)
    monkeypatch.setenv("PIGVIZ_CACHE_DIR", str(tmp_path))
    record = {"work_per_thread": 777, "seconds": 0.0}
    calls = []
    monkeypatch.setattr(fused_attend, "calibrate", lambda: calls.append(1) or dict(record))
    assert fused_attend.work_per_thread() == 777 and calls == [1]
    stored = json.loads((tmp_path / fused_attend.CALIBRATION_FILE).read_text())
    assert stored["format"] == fused_attend.CALIBRATION_FORMAT
    assert stored["machines"] == {fused_attend.machine_key(): record}
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", None)
    assert fused_attend.work_per_thread() == 777 and calls == [1]  # read back, not measured again
    (tmp_path / fused_attend.CALIBRATION_FILE).write_text("{not json")
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", None)
    assert fused_attend.work_per_thread() == 777 and calls == [1, 1]  # a broken file is measured again


@numba_only
def test_calibrate_times_both_counts_at_every_size(monkeypatch):
    """A real (short) calibration: times at each size for one and two threads, a threshold
    that follows from them by break_even, and the setting it ran under restored."""
    monkeypatch.setattr(fused_attend, "MIN_WORK_PER_THREAD", 4321)
    record = fused_attend.calibrate(tokens=(1024, 4096), repeats=3)
    assert fused_attend.MIN_WORK_PER_THREAD == 4321
    if record.get("why") == "one core":
        pytest.skip("this machine gives the process one core: nothing to calibrate")
    assert record["work"] == [9 * 1024, 9 * 4096]
    assert all(t > 0 for t in record["one_ms"] + record["two_ms"])
    assert record["work_per_thread"] == fused_attend.break_even(record["work"], record["one_ms"], record["two_ms"])
    assert record["machine"] == fused_attend.machine_key()


def test_threads_are_checked(step, index):
    q, k, v = step
    with pytest.raises(ValueError, match="threads must be in"):
        fused_attend.attend(index, q, k, v, threads=0)
    assert fused_attend.resolve_threads(None) == torch.get_num_threads()


@numba_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_sample_alone_merges_with_the_exact_set_into_attend(step, index, dtype):
    """attend_sampled (buckets given, the exact set left to the caller) plus exact attention
    over the sinks and recent window, merged by log-sum-exp, is attend."""
    q, k, v = (t.to(dtype) for t in step)
    q = q.float()
    ref, ref_stats = fused_attend.attend(index, q, k, v, threads=1)
    out, lse, sampled = fused_attend.attend_sampled(
        index, q, index.bucket_ids(q), k, v, min_hits=2, scale=32**-0.5, threads=2
    )
    assert torch.equal(torch.from_numpy(sampled), ref_stats["sampled"])
    exact = magicpig.exact_positions(index.n, index.sinks, index.recent)
    kv_of = torch.arange(6) // 3
    s = torch.einsum("hd,hjd->hj", q, k[kv_of][:, exact].float()) * 32**-0.5
    lse_e = torch.logsumexp(s, -1)
    out_e = torch.einsum("hj,hjd->hd", torch.softmax(s, -1), v[kv_of][:, exact].float())
    both = torch.stack([lse_e, torch.from_numpy(lse)])
    w = torch.softmax(both, 0)
    merged = w[0, :, None] * out_e + w[1, :, None] * out
    assert rel(merged, ref.float()) < 1e-5
    assert torch.allclose(torch.logsumexp(both, 0), ref_stats["lse"], rtol=1e-5)


@numba_only
def test_a_cache_with_room_to_grow_is_read_in_place(step, index):
    """A view of (kv_heads, capacity, d) storage (a growing cache) is widened, not copied."""
    q, k, v = step
    storage_k = torch.zeros(2, 4100, 32)
    storage_v = torch.zeros(2, 4100, 32)
    storage_k[:, :4000], storage_v[:, :4000] = k, v
    view_k, view_v = storage_k[:, :4000], storage_v[:, :4000]
    assert not view_k.is_contiguous()
    seen = fused_attend._as_kernel_array(view_k)
    assert seen.shape == (2, 4100, 32) and np.shares_memory(seen, storage_k.numpy())
    out, stats = fused_attend.attend(index, q, view_k, view_v)
    ref, ref_stats = fused_attend.attend(index, q, k, v)
    assert torch.equal(out, ref) and torch.equal(stats["sampled"], ref_stats["sampled"])


@numba_only
def test_short_and_wide_storage_read_the_same_keys(step, index):
    """uint16 ids and int32 offsets (this index) against int32 ids and int64 offsets of the
    same tables: the same kernel, compiled for each, gives the same bits."""
    q, k, v = step
    assert index.entries.dtype == torch.uint16 and index.offsets.dtype == torch.int32
    wide = dataclasses.replace(
        index, entries=index.entries.to(torch.int32), offsets=index.offsets.to(torch.int64), cache={}
    )
    out, stats = fused_attend.attend(index, q, k, v, return_read_mask=True)
    out_w, stats_w = fused_attend.attend(wide, q, k, v, return_read_mask=True)
    assert torch.equal(out, out_w) and torch.equal(stats["read_mask"], stats_w["read_mask"])
    ref, ref_stats = magicpig.attend(index, q, k, v, return_read_mask=True)
    assert torch.equal(ref_stats["read_mask"], stats["read_mask"])
