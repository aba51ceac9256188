"""An estimator with a build step: its index is built once per layer and KV head at the first
decode step, over the prefill's keys, kept across steps, and each row gets the whole visible
cache with it (the buffer after the indexed keys). Plain estimators are unaffected."""

import numpy as np
import pytest
import torch
import transformers

from pigviz.attention import protocol
from pigviz.decode import custom
from pigviz.decode import session as decoding

COMMON = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)
PREFIX, STEPS = 30, 4


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**COMMON)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def exact(q, keys, values):
    s = keys @ q / np.sqrt(len(q))
    w = np.exp(s - s.max())
    return w @ values / w.sum()


class Recorder:
    """Exact attention that keeps a copy of the keys as its index and records every build and call."""

    name = "recorder"

    def __init__(self):
        self.built, self.calls = [], []

    def build(self, keys):
        self.built.append(keys.shape)
        return {"keys": keys.copy(), "serial": len(self.built)}

    def __call__(self, q, keys, values, budget, index=None):
        n0 = len(index["keys"])
        assert np.array_equal(keys[:n0], index["keys"])  # the index covers the first n0 of the keys passed
        self.calls.append((index["serial"], n0, len(keys)))
        return exact(q, keys, values), np.arange(len(keys))


def plain(q, keys, values, budget):
    return exact(q, keys, values), np.arange(len(keys))


def decode_steps(model, ids, attention, **options):
    """Prefill ``PREFIX`` tokens densely, then decode the rest one token per forward."""
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, "dense"):
        decoding.forward(model, ids[:PREFIX], cache)
    logits = []
    with decoding.use_attention(model, attention, **options) as session:
        session.phase = "decode"
        for i in range(PREFIX, len(ids)):
            logits.append(decoding.forward(model, ids[i : i + 1], cache))
    return torch.cat(logits)


def test_build_runs_once_per_layer_and_kv_head_and_the_index_persists(tiny):
    ids = torch.randint(0, 96, (PREFIX + STEPS,), generator=torch.Generator().manual_seed(2))
    rec = Recorder()
    mine = decode_steps(tiny, ids, rec, budget=1.0, dense_layers=(0,))
    sparse_layers, kv_heads, heads = 2, 2, 4
    assert len(rec.built) == sparse_layers * kv_heads  # once per (layer, KV head), at the first step
    assert all(shape == (PREFIX, 16) for shape in rec.built)  # over the prefill's keys
    assert len(rec.calls) == STEPS * sparse_layers * heads
    assert {n0 for _, n0, _ in rec.calls} == {PREFIX}  # the same index at every step
    assert sorted({n for _, _, n in rec.calls}) == [PREFIX + 1 + s for s in range(STEPS)]  # the buffer grows
    assert len(custom.indexes_of(rec)) == sparse_layers * kv_heads
    dense = decode_steps(tiny, ids, "dense")
    torch.testing.assert_close(mine, dense, rtol=0, atol=1e-5)  # exact over every key passed


def test_a_new_prompt_builds_again(tiny):
    rec = Recorder()
    for seed in (3, 4):
        ids = torch.randint(0, 96, (PREFIX + 2,), generator=torch.Generator().manual_seed(seed))
        decode_steps(tiny, ids, rec, budget=1.0)
    assert len(rec.built) == 2 * 2 * 2  # two prompts x two sparse layers x two KV heads
    assert custom.indexes_of(rec).builds == 8


def test_a_chunk_of_rows_builds_over_the_cache_before_it(tiny):
    ids = torch.randint(0, 96, (PREFIX + STEPS,), generator=torch.Generator().manual_seed(5))
    rec = Recorder()
    cache = decoding.new_cache(tiny)
    with decoding.use_attention(tiny, "dense"):
        decoding.forward(tiny, ids[:PREFIX], cache)
    with decoding.use_attention(tiny, rec, budget=1.0) as session:
        session.phase = "decode"
        decoding.forward(tiny, ids[PREFIX:], cache)  # STEPS rows in one forward
    assert {shape[0] for shape in rec.built} == {PREFIX}
    assert sorted({n for _, _, n in rec.calls}) == [PREFIX + 1 + s for s in range(STEPS)]


def test_plain_estimators_are_unaffected(tiny):
    ids = torch.randint(0, 96, (PREFIX + STEPS,), generator=torch.Generator().manual_seed(6))
    seen = []

    def plain_recording(q, keys, values, budget):
        seen.append(len(keys))
        return plain(q, keys, values, budget)

    mine = decode_steps(tiny, ids, plain_recording, budget=1.0)
    dense = decode_steps(tiny, ids, "dense")
    torch.testing.assert_close(mine, dense, rtol=0, atol=1e-5)
    assert sorted(set(seen)) == [PREFIX + 1 + s for s in range(STEPS)]
    with pytest.raises(TypeError, match="takes no index"):
        protocol.call(plain, np.ones(4), np.ones((3, 4)), np.ones((3, 2)), 3, index={})


def test_call_without_an_index_builds_over_all_but_the_rows_own_token():
    rec = Recorder()
    rng = np.random.default_rng(0)
    k, v, q = rng.standard_normal((9, 4)), rng.standard_normal((9, 3)), rng.standard_normal(4)
    out, read = protocol.call(rec, q, k, v, 9)
    assert rec.built == [(8, 4)] and rec.calls == [(1, 8, 9)]
    np.testing.assert_allclose(out, exact(q, k, v))


def test_indexes_keep_an_index_while_the_keys_grow_and_rebuild_for_other_keys():
    rec = Recorder()
    store = protocol.Indexes(rec)
    rng = np.random.default_rng(1)
    keys = rng.standard_normal((12, 4))
    assert store.get("a", keys[:9], 8)[1] == 8
    assert store.get("a", keys, 11)[1] == 8  # the same keys grown: kept
    other = keys.copy()
    other[3] += 1.0
    assert store.get("a", other, 11)[1] == 11  # other keys: built again
    assert store.get("b", keys, 5)[1] == 5  # another place
    assert store.builds == 3
    with pytest.raises(TypeError, match="no build"):
        protocol.Indexes(plain)


def test_a_failing_build_names_the_estimator_and_the_row(tiny):
    class Broken(Recorder):
        name = "broken"

        def build(self, keys):
            raise RuntimeError("no tables")

    ids = torch.randint(0, 96, (PREFIX + 1,), generator=torch.Generator().manual_seed(7))
    with pytest.raises(RuntimeError, match="no tables") as info:
        decode_steps(tiny, ids, Broken(), budget=1.0)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "'broken'" in notes and "layer 1" in notes


def test_evaluate_estimator_builds_once_per_shipped_head():
    from pigviz.study.estimators import evaluate_estimator

    rec = Recorder()
    rows = evaluate_estimator(rec, budgets=(1.0,), positions=[60, 62, 63], baselines=())
    assert len(rows) == 12 * 3
    assert len(rec.built) == 4  # the shipped capture: 4 layers, one KV head each
    n0 = {n0 for _, n0, _ in rec.calls}
    assert len(n0) == 1 and {n - next(iter(n0)) for _, _, n in rec.calls} == {1, 3, 4}
    assert max(r["error"] for r in rows) < 1e-12
