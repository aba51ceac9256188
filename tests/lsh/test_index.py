"""The per-layer LSH index: CSR layout, centring, memory bill, and refusals."""

import pytest
import torch

from pigviz.lsh import index as lsh_index
from pigviz.lsh.index import LSHIndex, build_index, build_scratch_bytes, expected_candidates, index_bytes
from pigviz.lsh.magicpig import synthetic_decode_step


@pytest.fixture(scope="module")
def cone_keys():
    _q, k, _v = synthetic_decode_step(heads=4, kv_heads=2, n=3000, d=32, seed=3)
    return k


def test_tables_are_a_csr_layout_of_every_token(cone_keys):
    index = build_index(cone_keys, K=6, L=5, sinks=2, recent=10, seed=1)
    Hkv, n, _ = cone_keys.shape
    assert index.entries.shape == (Hkv, 5, n) and index.entries.dtype == torch.uint16  # n <= 65,536
    assert index.offsets.shape == (Hkv, 5, 2**6 + 1) and index.offsets.dtype == torch.int32
    for g in range(Hkv):
        buckets = index.bucket_ids(cone_keys[g] - index.mean[g])  # (n, L)
        for table in range(5):
            ids = index.entries[g, table].long()
            assert torch.equal(ids.sort().values, torch.arange(n))  # a permutation
            offsets = index.offsets[g, table]
            assert offsets[0] == 0 and offsets[-1] == n
            assert bool((offsets[1:] >= offsets[:-1]).all())
            for bucket in (0, 17, 40, 63):
                members = ids[offsets[bucket] : offsets[bucket + 1]]
                assert bool((buckets[members, table] == bucket).all())
                assert bool((members[1:] > members[:-1]).all())  # token order kept
            assert int((buckets[:, table] == 17).sum()) == int(offsets[18] - offsets[17])


def test_mean_excludes_the_exact_set(cone_keys):
    k = cone_keys.clone()
    k[:, 0] = 1e4  # a wild sink key must not pull the centre
    k[:, -1] = -1e4
    index = build_index(k, K=4, L=2, sinks=1, recent=1)
    assert torch.allclose(index.mean, k[:, 1:-1].mean(1), atol=1e-5)
    raw = build_index(k, K=4, L=2, sinks=1, recent=1, centre=False)
    assert torch.count_nonzero(raw.mean) == 0 and not raw.centred


def test_centring_spreads_cone_keys_over_buckets(cone_keys):
    largest_share = {}
    for centre in (True, False):
        index = build_index(cone_keys, K=8, L=10, centre=centre)
        largest_share[centre] = float(index.bucket_sizes().amax(-1).double().mean()) / cone_keys.shape[1]
    assert largest_share[True] < 0.05 < largest_share[False]


def test_centred_norms_match_the_keys(cone_keys):
    index = build_index(cone_keys, K=4, L=3)
    assert torch.allclose(index.centred_norms, (cone_keys - index.mean[:, None]).norm(dim=-1), rtol=1e-5)


def test_memory_matches_the_formula(cone_keys):
    Hkv, n, d = cone_keys.shape
    index = build_index(cone_keys, K=7, L=9)
    assert index.table_bytes == index_bytes(n, 7, 9, Hkv) == Hkv * (2 * 9 * n + 4 * 9 * (2**7 + 1))
    assert index.nbytes == index.table_bytes + 4 * (d * 7 * 9 + Hkv * d + Hkv * n)
    # The paper's bill: 150 ids per key at (10, 150), two bytes each up to 65,536 tokens (300
    # bytes), four beyond (600 at n = 98,304, and always on a GPU); a query scans
    # L n / 2^K = 14,400 entries at n = 98,304.
    assert (index_bytes(8192, 10, 150) - 4 * 150 * 1025) / 8192 == 300
    assert (index_bytes(98_304, 10, 150) - 4 * 150 * 1025) / 98_304 == 600
    assert (index_bytes(8192, 10, 150, device="cuda") - 4 * 150 * 1025) / 8192 == 600
    assert expected_candidates(98_304, 10, 150) == 14_400


def test_planes_come_from_the_seed_on_the_cpu(cone_keys):
    a = build_index(cone_keys, K=5, L=4, seed=11)
    b = build_index(cone_keys, K=5, L=4, seed=11)
    c = build_index(cone_keys, K=5, L=4, seed=12)
    expected = torch.randn(cone_keys.shape[-1], 20, generator=torch.Generator().manual_seed(11))
    assert torch.equal(a.planes, expected)
    assert torch.equal(a.entries, b.entries) and torch.equal(a.offsets, b.offsets)
    assert not torch.equal(a.planes, c.planes)


def test_bucket_ids_pack_bits_exactly_at_large_k():
    K, L, d = 40, 3, 16
    planes = torch.randn(d, K * L, generator=torch.Generator().manual_seed(0))
    index = LSHIndex(
        K=K,
        L=L,
        sinks=0,
        recent=0,
        seed=0,
        centred=True,
        planes=planes,
        mean=torch.zeros(1, d),
        entries=torch.zeros(1, L, 1, dtype=torch.int32),
        offsets=torch.zeros(1, L, 1, dtype=torch.int64),
        centred_norms=torch.zeros(1, 1),
    )
    x = torch.randn(50, d, generator=torch.Generator().manual_seed(1))
    bits = ((x @ planes) > 0).view(50, L, K)
    expected = torch.zeros(50, L, dtype=torch.int64)
    for j in range(K):
        expected |= bits[..., j].long() << j
    assert torch.equal(index.bucket_ids(x), expected)
    assert int(index.bucket_ids(x).max()) >= 2**30  # beyond float32's exact range
    small = LSHIndex(
        K=10,
        L=L,
        sinks=0,
        recent=0,
        seed=0,
        centred=True,
        planes=planes[:, :30],
        mean=index.mean,
        entries=index.entries,
        offsets=index.offsets,
        centred_norms=index.centred_norms,
    )
    expected_small = sum(((x @ planes[:, :30]) > 0).view(50, L, 10)[..., j].long() << j for j in range(10))
    assert torch.equal(small.bucket_ids(x), expected_small)
    assert torch.equal(small.bucket_ids(torch.zeros(2, d)), torch.zeros(2, L, dtype=torch.int64))


def test_ids_are_short_exactly_while_they_fit_in_16_bits():
    assert lsh_index.token_id_dtype(65_536) == torch.uint16
    assert lsh_index.token_id_dtype(65_537) == torch.int32
    assert lsh_index.token_id_dtype(1000, "cuda") == torch.int32
    k = torch.randn(1, 65_537, 4, generator=torch.Generator().manual_seed(0))
    wide = build_index(k, K=3, L=2, sinks=1, recent=1)
    short = build_index(k[:, :65_536], K=3, L=2, sinks=1, recent=1)
    assert wide.entries.dtype == torch.int32 and short.entries.dtype == torch.uint16
    # Ids above 32,767 survive the 16-bit storage (unsigned) and every token is listed once.
    assert torch.equal(short.token_ids()[0, 1].sort().values, torch.arange(65_536))
    assert int(short.entries.to(torch.int64).max()) == 65_535


def test_radix_and_torch_sorts_agree():
    buckets = torch.randint(0, 2**9, (6, 2000), generator=torch.Generator().manual_seed(0))
    fast = lsh_index._stable_argsort_rows(buckets, 9)
    assert torch.equal(fast, torch.sort(buckets, dim=1, stable=True).indices)


def test_half_precision_keys_build_like_float32(cone_keys):
    a = build_index(cone_keys.half().float(), K=6, L=4)
    b = build_index(cone_keys.half(), K=6, L=4)
    assert torch.equal(a.entries, b.entries) and torch.equal(a.offsets, b.offsets)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"K": 0}, "K must be in"),
        ({"K": 63}, "K must be in"),
        ({"L": 0}, "L must be in"),
        ({"sinks": 2000, "recent": 1000}, "sinks \\+ recent"),
        ({"sinks": -1}, "sinks must be in"),
        ({"K": 30, "L": 200}, "GiB"),
        ({"K": 10, "L": 150, "max_bytes": 1000}, "would take"),
    ],
)
def test_bad_arguments_are_refused(cone_keys, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_index(cone_keys, **{"K": 10, "L": 4, **kwargs})


def test_memory_guard_counts_the_build_scratch(cone_keys):
    """The build holds int64 bucket ids and their sort order beside the tables: a limit that
    fits the tables alone must be refused, one that also fits the scratch accepted."""
    Hkv, n, _ = cone_keys.shape
    tables = index_bytes(n, 8, 20, Hkv)
    scratch = build_scratch_bytes(n, 8, 20)
    assert scratch >= 20 * 20 * n and scratch > tables
    with pytest.raises(ValueError, match="scratch"):
        build_index(cone_keys, K=8, L=20, max_bytes=tables)
    with pytest.raises(ValueError, match="would take"):
        build_index(cone_keys, K=8, L=20, max_bytes=tables + scratch - 1)
    assert build_index(cone_keys, K=8, L=20, max_bytes=tables + scratch).table_bytes == tables


@pytest.mark.parametrize("where, bad", [(1500, float("nan")), (0, float("inf")), (2999, -float("inf"))])
def test_non_finite_keys_are_refused(cone_keys, where, bad):
    # A middle key, a sink and a recent key: the mean excludes the last two, the tables do not.
    k = cone_keys.clone()
    k[1, where, 3] = bad
    with pytest.raises(ValueError, match=f"finite.*key {where} of KV head 1"):
        build_index(k, K=4, L=2, sinks=4, recent=64)
    with pytest.raises(ValueError, match="finite"):
        build_index(k, K=4, L=2, centre=False)


def test_keys_beyond_float32_are_refused(cone_keys):
    k = cone_keys.double()
    k[0, 10, 0] = 1e300  # finite in float64, inf once hashed in float32
    with pytest.raises(ValueError, match="float32.*key 10 of KV head 0"):
        build_index(k, K=4, L=2)


def test_bad_keys_are_refused(cone_keys):
    with pytest.raises(TypeError, match="k must be a torch.Tensor"):
        build_index(cone_keys.numpy(), K=10, L=4)
    with pytest.raises(ValueError, match="kv_heads, n, d"):
        build_index(cone_keys[0], K=10, L=4)
    with pytest.raises(TypeError, match="centre"):
        build_index(cone_keys, K=10, L=4, centre="yes")
    with pytest.raises(TypeError, match="K"):  # below the entry points K and L have no defaults
        build_index(cone_keys)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_index_uses_the_same_planes(cone_keys):
    cpu = build_index(cone_keys, K=8, L=6, seed=4)
    gpu = build_index(cone_keys.cuda(), K=8, L=6, seed=4)
    assert torch.equal(cpu.planes, gpu.planes.cpu())
    same_bucket = (cpu.offsets == gpu.offsets.cpu()).double().mean()
    assert same_bucket > 0.95  # a projection a hair from 0 may flip a bit
