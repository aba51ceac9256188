"""Half-size KV storage for sampled decoding (pigviz.decode.cache): written in place, in its
own dtype, never beside a float32 copy; the teacher-forced copy leaves the reference alone."""

import pytest
import torch

from pigviz.decode import cache as kv_cache
from pigviz.decode import generation
from pigviz.decode import session as decoding

PROMPT_TOKENS = 300


@pytest.fixture(scope="module")
def prompt(smollm2):
    from pigviz.model.texts import first_tokens

    return first_tokens(smollm2[1], PROMPT_TOKENS + 20)


def test_growing_layer_writes_in_place_in_its_own_dtype():
    Growing, _ = kv_cache.layer_classes()
    layer = Growing(torch.bfloat16)
    k, v = torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8)
    got_k, got_v = layer.update(k, v)
    assert got_k is k and got_v is v  # the first chunk's own attention reads it unrounded
    assert layer.keys.dtype == torch.bfloat16 and torch.equal(layer.keys, k.to(torch.bfloat16))
    storage = layer.keys.untyped_storage().data_ptr()
    for t in range(5):
        new_k, new_v = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
        got_k, got_v = layer.update(new_k, new_v)
        assert got_k.dtype == torch.bfloat16 and got_k.shape == (1, 2, 11 + t, 8)
        assert torch.equal(got_k[:, :, -1:], new_k.to(torch.bfloat16))
        assert torch.equal(got_v[:, :, -1:], new_v.to(torch.bfloat16))
    assert layer.keys.untyped_storage().data_ptr() == storage  # no copy of the layer per token
    assert layer.get_seq_length() == 15 and layer.capacity >= 15
    assert layer.nbytes == 2 * 2 * layer.capacity * 8 * 2
    layer.crop(-3)
    assert layer.get_seq_length() == 12
    last = torch.randn(1, 2, 1, 8)
    got_k, _ = layer.update(last, last)
    assert got_k.shape[2] == 13 and torch.equal(got_k[:, :, -1:], last.to(torch.bfloat16))
    assert torch.equal(got_k[:, :, :10], k.to(torch.bfloat16))


def test_growing_layer_grows_and_readopts():
    Growing, _ = kv_cache.layer_classes()
    layer = Growing(None)
    layer.update(torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 4))
    big = torch.arange(2000, dtype=torch.float32).view(1, 1, 500, 4)
    layer.update(big, big)
    assert layer.get_seq_length() == 503 and layer.capacity >= 503
    assert torch.equal(layer.keys[:, :, 3:], big)
    # Something outside replaced keys (beam search does): the layer takes it as its storage.
    layer.keys, layer.values = layer.keys[:, :, :5].clone(), layer.values[:, :, :5].clone()
    layer.update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4))
    assert layer.get_seq_length() == 6 and torch.equal(layer.keys[:, :, 3:5], big[:, :, :2])


def test_decoding_cache_halves_only_the_sampled_layers(smollm2, prompt):
    model, _ = smollm2
    with decoding.use_attention(model, "magicpig", K=6, L=20) as session:
        cache = session.new_cache(model)
        decoding.forward(model, prompt[:PROMPT_TOKENS], cache, logits_to_keep=1)
    dtypes = [layer.keys.dtype for layer in cache.layers]
    assert dtypes[0] == torch.float32 and set(dtypes[1:]) == {torch.bfloat16}
    with decoding.use_attention(model, "magicpig", kv_dtype="model") as session:
        assert type(session.new_cache(model)) is type(decoding.new_cache(model))
        assert session._half_layers(torch.float32) == ()
    with decoding.use_attention(model, "dense") as session:
        assert session._half_layers(torch.float32) == ()


def test_half_copy_leaves_the_reference_cache_alone(smollm2, prompt):
    model, _ = smollm2
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, "dense"):
        decoding.forward(model, prompt[:PROMPT_TOKENS], cache, logits_to_keep=1)
    before = [layer.keys.clone() for layer in cache.layers]
    with decoding.use_attention(model, "magicpig", K=6, L=20) as session:
        run = session.decode_cache(cache)
        assert run is not cache and run.layers[0] is not cache.layers[0]
        session.prepare(run)
        session.phase = "decode"
        logits = decoding.forward(model, prompt[PROMPT_TOKENS : PROMPT_TOKENS + 4], run)
    assert torch.isfinite(logits).all()
    assert run.get_seq_length() == PROMPT_TOKENS + 4 and cache.get_seq_length() == PROMPT_TOKENS
    assert all(torch.equal(a, layer.keys) for a, layer in zip(before, cache.layers))
    assert run.layers[5].keys.dtype == torch.bfloat16 and cache.layers[5].keys.dtype == torch.float32
    # 29 of 30 layers at two bytes an element, with spare rows for the tokens to come.
    layer = run.layers[5]
    assert layer.nbytes == 2 * 2 * layer.capacity * layer.keys.shape[1] * layer.keys.shape[3]
    assert layer.capacity < 2 * (PROMPT_TOKENS + 4)
    assert kv_cache.storage_bytes(run)["device"] < kv_cache.storage_bytes(cache)["device"]


def test_bf16_storage_decodes_within_rounding_of_float32(smollm2, prompt):
    """Teacher-forced rows on the same float32 prefill: bf16 K/V against float32 K/V in the
    sampled layers, same options; budgets and logits agree within bf16's rounding."""
    model, _ = smollm2
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, "dense"):
        decoding.forward(model, prompt[:PROMPT_TOKENS], cache, logits_to_keep=1)
    chunk = prompt[PROMPT_TOKENS : PROMPT_TOKENS + 8]
    results = {}
    for kv in ("bfloat16", "model"):
        with decoding.use_attention(model, "magicpig", K=1, L=16, min_hits=1, kv_dtype=kv) as session:
            run = session.decode_cache(cache)
            session.prepare(run)
            session.phase = "decode"
            logits = decoding.forward(model, chunk, run)
            results[kv] = logits, session.take_budgets()
            run.crop(-chunk.numel())
    (half, half_budget), (full, full_budget) = results["bfloat16"], results["model"]
    assert torch.allclose(half_budget, full_budget, atol=1e-6)  # every key is read either way
    p, q = torch.log_softmax(full.double(), -1), torch.log_softmax(half.double(), -1)
    kl = (p.exp() * (p - q)).sum(-1)
    assert float(kl.max()) < 1e-3 and torch.equal(full.argmax(-1), half.argmax(-1))


def test_generate_reports_the_half_size_cache(smollm2, prompt):
    ids = prompt[:PROMPT_TOKENS]
    half = generation.generate(*smollm2, ids, "magicpig", 3, progress=False, stop_at_eos=False, K=6, L=20)
    full = generation.generate(
        *smollm2, ids, "magicpig", 3, progress=False, stop_at_eos=False, K=6, L=20, kv_dtype="model"
    )
    assert half.extra["cache_bytes"]["device"] < full.extra["cache_bytes"]["device"]
    assert half.as_dict()["extra"]["cache_bytes"]["cpu"] == 0
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        generation.generate(*smollm2, ids, "magicpig", 2, progress=False, kv_dtype="int8")
