"""One bucket coder per backend, every path that hashes held to the reference's.

``pigviz.lsh.reference.simhash_codes`` is the specification (numpy); ``pigviz.lsh.index.bucket_ids``
is its torch twin; the compiled build packs the same bits in ``kernels.pack_buckets``. Every other
path that hashes calls one of these. Change the reference's coder (the bit order, the sign rule, the
plane layout) and this test fails for each path that did not follow."""

import numpy as np
import pytest
import torch

from pigviz.decode.offload import OffloadStep
from pigviz.keys import hashing as kh
from pigviz.lsh import index as lsh_index
from pigviz.lsh import kernels, simhash_checks
from pigviz.lsh.reference import simhash_codes

K, L, D = 7, 5, 16


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((40, D)).astype(np.float32)
    x[0] = 0.0  # a vector on every plane: bit 0 everywhere, in every path
    planes = rng.standard_normal((D, K * L)).astype(np.float32)
    return x, planes, simhash_codes(x.astype(np.float64), planes.astype(np.float64), K, L)


def test_the_reference_packs_bit_j_of_table_l_from_column_l_k_plus_j(case):
    x, planes, want = case
    bits = (x.astype(np.float64) @ planes.astype(np.float64)) > 0
    by_hand = np.array([[sum(int(bits[i, l * K + j]) << j for j in range(K)) for l in range(L)] for i in range(len(x))])
    np.testing.assert_array_equal(want, by_hand)
    assert not want[0].any()


def test_the_torch_coder_is_the_reference(case):
    x, planes, want = case
    got = lsh_index.bucket_ids(torch.from_numpy(x), torch.from_numpy(planes), K, L)
    assert got.dtype == torch.int64
    np.testing.assert_array_equal(got.numpy(), want)


def test_the_torch_coder_packs_exactly_above_float32s_exact_integers():
    rng = np.random.default_rng(3)
    k = 30  # past the 24 bits float32 holds exactly: the int64 branch
    x = rng.standard_normal((9, 8)).astype(np.float32)
    planes = rng.standard_normal((8, k * 2)).astype(np.float32)
    got = lsh_index.bucket_ids(torch.from_numpy(x), torch.from_numpy(planes), k, 2).numpy()
    np.testing.assert_array_equal(got, simhash_codes(x.astype(np.float64), planes.astype(np.float64), k, 2))


def test_the_index_the_offloaded_step_and_the_study_of_real_keys_use_it(case):
    x, planes, want = case
    index = lsh_index.build_index(torch.from_numpy(x)[None], K=K, L=L, sinks=2, recent=2, seed=0)
    # The build filed every key by the reference's code of its centred key on the index's planes.
    built = simhash_codes((x - index.mean[0].numpy()).astype(np.float64), index.planes.double().numpy(), K, L)
    entries, offsets = lsh_index.packed_tables(index)
    for table in range(L):
        assert int(offsets[0, table, -1]) == len(x)  # the build files every key of the prompt
        for bucket in range(2**K):
            run = entries[0, table, offsets[0, table, bucket] : offsets[0, table, bucket + 1]].long().numpy()
            assert np.all(built[run, table] == bucket)
    index.planes = torch.from_numpy(planes)  # the index hashes with these planes from here on
    np.testing.assert_array_equal(index.bucket_ids(torch.from_numpy(x)).numpy(), want)
    step = OffloadStep(index, torch.device("cpu"))
    np.testing.assert_array_equal(step.buckets(torch.from_numpy(x)).numpy(), want)
    np.testing.assert_array_equal(kh._codes(x, torch.from_numpy(planes), L, K).numpy(), want)


def test_the_teaching_tables_use_it(case):
    x, _, _ = case
    table = simhash_checks.SimHash(D, K, L, seed=2)
    flat = table.planes.reshape(D, L * K)  # table l's bit j: column l*K + j, as the reference reads
    np.testing.assert_array_equal(table.bucket_ids(x), simhash_codes(x, flat, K, L))


@pytest.mark.skipif(not kernels.available(), reason="numba is not installed")
def test_the_compiled_packer_is_the_reference(case):
    x, planes, want = case
    proj_t = torch.from_numpy(np.ascontiguousarray((x @ planes).T))  # (L*K, n), as the build hands it
    out = torch.empty((L, len(x)), dtype=torch.int32)
    assert kernels.pack_buckets(proj_t, 0, K, out)
    np.testing.assert_array_equal(out.numpy().T, want)
