"""The padded, sync-free formulation of MagicPIG's step (magicpig._attend_padded, what a GPU
runs) against the readable one on the CPU: same keys read, same outputs to 1e-5, same
stats; nothing outside the read set touched; and no op that would make a CPU wait for a
GPU. The CUDA tests run it under torch.cuda.set_sync_debug_mode("error") and skip without
a GPU."""

import contextlib
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pigviz.lsh import fused, magicpig
from pigviz.lsh.index import build_index
from pigviz.lsh.magicpig import attend, synthetic_decode_step

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible to torch)")


def rel(a, b):
    return float(((a.double() - b.double()).norm(dim=-1) / b.double().norm(dim=-1)).max())


def both(index, q, k, v, **kw):
    ref = attend(index, q, k, v, return_read_mask=True, return_lse=True, padded=False, **kw)
    pad = attend(index, q, k, v, return_read_mask=True, return_lse=True, padded=True, **kw)
    return ref, pad


def assert_same(ref, pad, tol=1e-5):
    (out_r, st_r), (out_p, st_p) = ref, pad
    assert set(st_r) == set(st_p)
    assert torch.equal(st_r["read_mask"], st_p["read_mask"])
    for name in ("keys_read", "sampled", "candidates"):
        assert torch.equal(st_r[name], st_p[name]), name
    assert (st_r["exact"], st_r["n"]) == (st_p["exact"], st_p["n"])
    assert isinstance(st_p["budget"], float) and st_p["budget"] == pytest.approx(st_r["budget"], rel=1e-12)
    assert out_p.dtype == out_r.dtype
    read_any = st_r["keys_read"] > 0
    assert rel(out_p[read_any], out_r[read_any]) < tol
    assert torch.equal(out_p[~read_any], out_r[~read_any])
    assert torch.allclose(st_p["lse"], st_r["lse"], rtol=1e-5, atol=1e-5)


REALISTIC = [  # (heads, kv_heads, n, d, K, L, min_hits): shapes of SmolLM2 and a GQA-4 model
    (9, 3, 8192, 64, 10, 150, 2),
    (8, 2, 6000, 32, 8, 40, 1),
    (8, 2, 6000, 32, 8, 40, 2),
    (8, 2, 6000, 32, 8, 40, 3),
    (4, 4, 3000, 32, 8, 40, 2),  # no grouping
]


@pytest.mark.parametrize("heads,kv_heads,n,d,K,L,min_hits", REALISTIC)
def test_padded_matches_the_reference_at_a_realistic_budget(heads, kv_heads, n, d, K, L, min_hits):
    q, k, v = synthetic_decode_step(heads=heads, kv_heads=kv_heads, n=n, d=d, seed=3)
    index = build_index(k, K=K, L=L)
    ref, pad = both(index, q, k, v, min_hits=min_hits)
    assert_same(ref, pad)
    stats = ref[1]
    assert (stats["sampled"] > 0).all() and stats["budget"] < 0.3  # a sample, not everything
    # The read list is padded to a bound the host knows; the bound must hold.
    assert int(stats["sampled"].max()) <= index.max_candidates // min_hits
    assert int(stats["candidates"].max()) <= index.max_candidates


def test_heads_gathered_in_several_batches(monkeypatch):
    """Long contexts gather a few heads at a time (``_GATHER_BYTES``): the joined batches give
    the same answer as one batch."""
    q, k, v = synthetic_decode_step(heads=8, kv_heads=2, n=3000, d=32, seed=6)
    index = build_index(k, K=8, L=40)
    one = attend(index, q, k, v, return_lse=True, padded=True)
    width = magicpig._PaddedPlan.of(index, 8, 2, k.device).spare
    monkeypatch.setattr(magicpig, "_GATHER_BYTES", 3 * 4 * width * 32)  # three heads per batch
    batched = attend(index, q, k, v, return_lse=True, padded=True)
    assert torch.equal(batched[0], one[0]) and torch.equal(batched[1]["lse"], one[1]["lse"])
    assert_same(
        attend(index, q, k, v, return_read_mask=True, return_lse=True, padded=False),
        attend(index, q, k, v, return_read_mask=True, return_lse=True, padded=True),
    )


def test_u_offset_and_a_strided_cache_view():
    """Decoding hands attend k[:, :n] of a longer cache: gathered in place, same answer."""
    q, k, v = synthetic_decode_step(heads=6, kv_heads=2, n=4100, d=32, seed=4)
    index = build_index(k[:, :4000], K=8, L=40)
    kk, vv = k[:, :4000], v[:, :4000]
    assert not kk.is_contiguous()
    assert_same(*both(index, q, kk, vv, u_offset=1e-4))


def _one_head_samples(sinks, recent):
    """K=20 bits: buckets of a handful of keys, so a random query samples nothing; query head
    1 is a copy of key 100 (centred) and samples at least that key."""
    q, k, v = synthetic_decode_step(heads=4, kv_heads=2, n=3000, d=32, seed=5)
    index = build_index(k, K=20, L=10, sinks=sinks, recent=recent)
    q = q.clone()
    q[1] = 3.0 * (k[0, 100] - index.mean[0])
    return index, q, k, v


@pytest.mark.parametrize("sinks,recent", [(4, 32), (0, 0)])
def test_a_head_that_samples_nothing(sinks, recent):
    index, q, k, v = _one_head_samples(sinks, recent)
    ref, pad = both(index, q, k, v)
    sampled = ref[1]["sampled"]
    assert sampled[1] >= 1 and (sampled == 0).any()
    assert_same(ref, pad)
    if sinks + recent == 0:  # nothing read at all: zeros, and a normaliser of -inf
        empty = sampled == 0
        assert torch.equal(pad[0][empty], torch.zeros_like(pad[0][empty]))
        assert bool((pad[1]["lse"][empty] == -math.inf).all())


@pytest.mark.parametrize(
    "case",
    ["realistic", "recent window only", "no exact set", "a head samples nothing", "nothing read by some heads"],
)
def test_padded_path_loads_nothing_outside_the_read_set(case):
    if case in ("realistic", "recent window only"):
        q, k, v = synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1)
        index = build_index(k, K=8, L=40, sinks=4 if case == "realistic" else 0)
    elif case == "no exact set":
        q, k, v = synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1)
        index = build_index(k, K=8, L=40, sinks=0, recent=0)
    else:
        index, q, k, v = _one_head_samples(*((4, 32) if case == "a head samples nothing" else (0, 0)))
    out, stats = attend(index, q, k, v, return_read_mask=True, padded=True)
    group = q.shape[0] // k.shape[0]
    pk, pv = k.clone(), v.clone()
    for g in range(k.shape[0]):
        unread = ~stats["read_mask"][group * g : group * (g + 1)].any(0)
        pk[g, unread] = pv[g, unread] = float("nan")
    assert bool(torch.isnan(pk).any())
    again, _ = attend(index, q, pk, pv, padded=True)
    assert torch.isfinite(again).all() and torch.equal(again, out)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_cache(dtype):
    q, k, v = synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1)
    index = build_index(k, K=8, L=40)
    kh, vh = k.to(dtype), v.to(dtype)
    # A float32 query: both widen the same half keys and values, so they agree to 1e-5.
    assert_same(*both(index, q, kh, vh))
    # A half query too: the outputs are rounded to half, so within half an ulp or so.
    (out_r, st_r), (out_p, st_p) = both(index, q.to(dtype), kh, vh)
    assert out_p.dtype == dtype and torch.equal(st_p["read_mask"], st_r["read_mask"])
    assert rel(out_p, out_r) < 1e-2


def test_a_non_finite_read_is_refused_with_the_same_message():
    q, k, v = synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1)
    index = build_index(k, K=8, L=40)
    for name, token in (("k", 3999), ("v", 1)):
        kk, vv = k.clone(), v.clone()
        (kk if name == "k" else vv)[1, token, 5] = float("nan")
        with pytest.raises(ValueError, match=f"^{name} holds a non-finite number.*query head 3"):
            attend(index, q, kk, vv, padded=True)


def test_environment_switch_and_bad_argument(monkeypatch):
    q, k, v = synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1)
    index = build_index(k, K=8, L=40)
    called = []
    real = magicpig._attend_padded
    monkeypatch.delenv("PIGVIZ_PADDED", raising=False)
    monkeypatch.setattr(magicpig, "_attend_padded", lambda *a: called.append(1) or real(*a))
    attend(index, q, k, v)
    assert called == []  # the CPU default is the readable version
    monkeypatch.setenv("PIGVIZ_PADDED", "1")
    attend(index, q, k, v)
    attend(index, q, k, v, padded=False)  # the argument wins over the environment
    assert called == [1]
    monkeypatch.setenv("PIGVIZ_PADDED", "off")
    attend(index, q, k, v)
    assert called == [1]
    monkeypatch.setenv("PIGVIZ_PADDED", "maybe")
    with pytest.raises(ValueError, match="PIGVIZ_PADDED must be 1 or 0"):
        attend(index, q, k, v)
    monkeypatch.delenv("PIGVIZ_PADDED")
    with pytest.raises(TypeError, match="padded must be True, False or None"):
        attend(index, q, k, v, padded="yes")


# -- no op that waits for a GPU --------------------------------------------------------------------
# On a CPU nothing waits, but the ops that would on a GPU can be seen: scalar reads
# (int/float/bool/.item), nonzero, boolean-mask selection, repeat_interleave without a host
# output size. .cpu()/.tolist()/.numpy() do not dispatch on a CPU tensor: they are trapped.
_WAITING_OPS = ("_local_scalar_dense", "aten.item", "is_nonzero", "nonzero", "masked_select")


class _Waits(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if any(op in name for op in _WAITING_OPS):
            self.seen.append(name)
        if name.startswith("aten.index.") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] if i is not None
        ):
            self.seen.append(name + " with a bool mask")
        if name.startswith("aten.repeat_interleave") and kwargs.get("output_size") is None:
            self.seen.append(name + " without output_size")
        return func(*args, **kwargs)


@contextlib.contextmanager
def _no_host_reads(monkeypatch):
    def trap(name):
        def refuse(self, *args, **kwargs):
            raise AssertionError(f".{name}() in the padded path")

        return refuse

    with monkeypatch.context() as patch:
        for name in ("cpu", "tolist", "numpy"):
            patch.setattr(torch.Tensor, name, trap(name))
        with _Waits() as waits:
            yield waits


def test_the_waiting_ops_are_seen(monkeypatch):
    """The detector itself: each kind of wait the readable version has is caught."""
    x = torch.arange(6.0)
    with _no_host_reads(monkeypatch) as waits:
        int(x.max())
        x[x > 2]
        torch.repeat_interleave(torch.tensor([1, 2]))
    assert len(waits.seen) >= 3
    with _no_host_reads(monkeypatch), pytest.raises(AssertionError, match="cpu"):
        x.cpu()
    q, k, v = synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1)
    index = build_index(k, K=8, L=40)
    with _no_host_reads(monkeypatch) as waits, contextlib.suppress(AssertionError):
        attend(index, q, k, v, padded=False)
    assert waits.seen


@pytest.mark.parametrize("min_hits,sinks", [(2, 4), (1, 4), (3, 0)])
def test_padded_path_has_no_op_that_waits_for_a_gpu(monkeypatch, min_hits, sinks):
    q, k, v = synthetic_decode_step(heads=9, kv_heads=3, n=4000, d=32, seed=2)
    index = build_index(k, K=8, L=40, sinks=sinks)
    attend(index, q, k, v, min_hits=min_hits, padded=True)  # tables built and cached first
    with _no_host_reads(monkeypatch) as waits:
        # check=False: what a GPU runs (finiteness checks only with PIGVIZ_DEBUG=1)
        out, stats = magicpig._attend_padded(index, q, k, v, min_hits, True, True, 1e-4, False)
    assert waits.seen == []
    assert isinstance(stats["budget"], torch.Tensor) and stats["budget"].ndim == 0
    ref, ref_stats = attend(index, q, k, v, min_hits=min_hits, u_offset=1e-4, padded=False)
    assert rel(out, ref) < 1e-5 and torch.equal(stats["sampled"], ref_stats["sampled"])


def test_fused_reference_path_keeps_its_stats_where_attend_left_them(monkeypatch):
    """The path a GPU takes through fused.attend (no compiled kernel), with the padded attend
    and a decode buffer: same output as with the readable attend."""
    monkeypatch.setattr(fused.kernels, "kernels", lambda: None)
    q, k, v = synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1)
    index = build_index(k[:, :3800], K=8, L=40)
    ends = torch.tensor([3800, 3801, 3900, 4000, 3950, 3805])
    monkeypatch.setenv("PIGVIZ_PADDED", "0")
    ref, ref_stats = fused.attend(index, q, k, v, buffer_end=ends, scale=0.3)
    monkeypatch.setenv("PIGVIZ_PADDED", "1")
    out, stats = fused.attend(index, q, k, v, buffer_end=ends, scale=0.3)
    assert rel(out, ref) < 1e-5 and torch.allclose(stats["lse"], ref_stats["lse"], rtol=1e-5)
    assert torch.equal(stats["buffer"], ends - 3800) and torch.equal(stats["keys_read"], ref_stats["keys_read"])


# -- on a GPU ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def _sync_is_an_error():
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_attend_never_waits_and_matches_the_reference(dtype):
    q, k, v = (t.cuda() for t in synthetic_decode_step(heads=9, kv_heads=3, n=8192, d=64, seed=0))
    k, v = k.to(dtype), v.to(dtype)
    index = build_index(k, K=10, L=150)
    attend(index, q, k, v)  # the log u table goes to the GPU once (a wait, outside the check)
    torch.cuda.synchronize()
    with _sync_is_an_error():
        out, stats = attend(index, q, k, v, return_read_mask=True, return_lse=True, u_offset=1e-4)
        for name in ("keys_read", "sampled", "candidates", "lse", "read_mask", "budget"):
            assert stats[name].is_cuda, name
    ref, ref_stats = attend(index, q, k, v, return_read_mask=True, return_lse=True, u_offset=1e-4, padded=False)
    assert torch.equal(stats["read_mask"], ref_stats["read_mask"])
    assert torch.equal(stats["sampled"].cpu(), ref_stats["sampled"])
    assert 0 < float(stats["budget"]) < 0.3
    assert rel(out, ref) < 1e-5


@pytest.mark.cuda
@cuda
def test_cuda_fused_reference_with_a_buffer_never_waits():
    q, k, v = (t.cuda() for t in synthetic_decode_step(heads=6, kv_heads=2, n=4000, d=32, seed=1))
    index = build_index(k[:, :3800], K=8, L=40)
    ends = torch.tensor([3800, 3801, 3900, 4000, 3950, 3805])
    fused.attend(index, q, k, v, buffer_end=ends)
    torch.cuda.synchronize()
    with _sync_is_an_error():
        out, stats = fused.attend(index, q, k, v, buffer_end=ends)
    cpu, cpu_stats = fused.attend(build_index(k[:, :3800].cpu(), K=8, L=40), q.cpu(), k.cpu(), v.cpu(), buffer_end=ends)
    assert stats["buffer"].is_cuda and stats["buffer"].tolist() == (ends - 3800).tolist()
    assert rel(out.cpu(), cpu) < 2e-2  # a projection within rounding of zero may flip a bucket bit
