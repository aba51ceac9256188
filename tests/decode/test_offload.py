"""MagicPIG's own placement (``placement="cpu_offload"``): on a machine without a GPU both sides
run on the CPU, and the step is pinned to the single-device one: the same keys read, outputs
within 1e-5 (a layer), the same tokens and budgets (a model). The CUDA test skips without a GPU."""

import pytest
import torch

from pigviz.decode import cache as kv_cache
from pigviz.decode import generation
from pigviz.decode import session as decoding
from pigviz.decode.offload import OffloadStep
from pigviz.lsh import fused
from pigviz.lsh.index import build_index
from pigviz.lsh.magicpig import synthetic_decode_step

numba_only = pytest.mark.skipif(not fused.available(), reason="needs numba (pip install pigviz[fast])")
N, N_IDX, SINKS, RECENT, H, HKV, D = 3000, 2900, 4, 32, 6, 2, 32
PROMPT_TOKENS = 300


def rel(a, b):
    return float(((a.double() - b.double()).norm(dim=-1) / b.double().norm(dim=-1)).max())


def _offloaded(dtype):
    """An offloaded layer over tokens 0..N_IDX-1, then N - N_IDX buffer tokens, and its index."""
    q, k, v = synthetic_decode_step(heads=H, kv_heads=HKV, n=N, d=D, seed=5)
    layer = kv_cache.layer_classes()[1](
        k[None, :, :N_IDX], v[None, :, :N_IDX], sinks=SINKS, recent=RECENT, dtype=dtype, spare=40
    )
    index = build_index(layer.cpu_keys[:, :N_IDX], K=8, L=40, sinks=SINKS, recent=RECENT, seed=2)
    for t in range(N_IDX, N):  # one token at a time, as decoding appends them (the storage grows)
        layer.update(k[None, :, t : t + 1], v[None, :, t : t + 1])
    return q, k, v, layer, index


def _reference(index, k, v, rows, ends):
    out, stats = fused.attend(index, rows, k, v, scale=0.2, buffer_end=ends, threads=1)
    return out, stats["sampled"]


def test_the_cache_moves_only_the_layers_it_can_sample_from():
    """offload_layers is the storage's own move: a layer too short to sample from, an empty one
    and one already offloaded stay as they are; the report counts the device bytes it freed."""
    Growing, Offload = kv_cache.layer_classes()
    _, k, v = synthetic_decode_step(heads=H, kv_heads=HKV, n=200, d=D, seed=1)
    cache = type("Cache", (), {})()  # the function reads only .layers
    cache.layers = [Growing(), Growing(), Growing(), Growing(torch.bfloat16)]
    cache.layers[0].update(k[None], v[None])
    cache.layers[1].update(k[None, :, : SINKS + RECENT], v[None, :, : SINKS + RECENT])  # nothing to sample
    cache.layers[3].update(k[None], v[None])
    before = kv_cache.storage_bytes(cache)["device"]
    report = kv_cache.offload_layers(cache, [0, 1, 2, 3], sinks=SINKS, recent=RECENT, kv_dtype="model", spare=9)
    assert report["layers"] == [0, 3]
    assert [type(layer) for layer in cache.layers] == [Offload, Growing, Growing, Offload]
    assert cache.layers[0].cpu_keys.dtype == torch.float32 and cache.layers[3].cpu_keys.dtype == torch.bfloat16
    assert report["device_bytes_before"] == before
    assert report["device_bytes_freed"] == before - kv_cache.storage_bytes(cache)["device"] > 0
    assert torch.equal(cache.layers[0].cpu_keys[:, :200], k)  # every indexed token, on the CPU
    again = kv_cache.offload_layers(cache, [0, 3], sinks=SINKS, recent=RECENT, kv_dtype="model", spare=9)
    assert again is None  # nothing left to move


@numba_only
@pytest.mark.parametrize("T", [1, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_layer_offloaded_reads_what_the_single_device_step_reads(T, dtype):
    q, k, v, layer, index = _offloaded(dtype)
    assert layer.get_seq_length() == N and layer.buffered == N - N_IDX
    assert layer.keys.shape == (1, HKV, SINKS + RECENT + N - N_IDX, D)
    # What the single-device step reads: the CPU's (rounded) copy of the sampled tokens, the
    # device's own exact tokens and buffer.
    k_ref, v_ref = k.clone(), v.clone()
    k_ref[:, SINKS : N_IDX - RECENT] = layer.cpu_keys[:, SINKS : N_IDX - RECENT].float()
    v_ref[:, SINKS : N_IDX - RECENT] = layer.cpu_values[:, SINKS : N_IDX - RECENT].float()
    gen = torch.Generator().manual_seed(T)
    query = (q[:, None, :] + 0.3 * torch.randn(H, T, D, generator=gen))[None]  # (1, H, T, d)
    out, sampled = OffloadStep(index, torch.device("cpu"))(index, layer, query, scale=0.2, min_hits=2, threads=2)
    rows = query[0].reshape(HKV, H // HKV * T, D).reshape(-1, D)  # KV-major, as the step orders them
    ends = N - T + 1 + torch.arange(T).repeat(H)
    ref, ref_sampled = _reference(index, k_ref, v_ref, rows, ends)
    assert torch.equal(torch.from_numpy(sampled), ref_sampled)
    assert out.shape == (1, T, H, D)
    assert rel(out[0].transpose(0, 1).reshape(-1, D), ref) < 1e-5


@numba_only
def test_folding_the_buffer_moves_it_to_the_cpu_and_keeps_the_window():
    q, k, v, layer, _ = _offloaded(torch.float32)
    layer.fold_buffer(2950)
    assert layer.n_indexed == 2950 and layer.buffered == 50
    assert torch.equal(layer.cpu_keys[:, :2950], k[:, :2950])
    expected = torch.cat([k[:, :SINKS], k[:, 2950 - RECENT : N]], 1)
    assert torch.equal(layer.keys[0], expected) and torch.equal(layer.values[0][:, :SINKS], v[:, :SINKS])
    index = build_index(layer.cpu_keys[:, :2950], K=8, L=40, sinks=SINKS, recent=RECENT, seed=2)
    step = OffloadStep(index, torch.device("cpu"))
    out, sampled = step(index, layer, q[None, :, None], scale=0.2, min_hits=2, threads=1)
    ref, ref_sampled = _reference(index, k, v, q, torch.full((H,), N))
    assert torch.equal(torch.from_numpy(sampled), ref_sampled) and rel(out[0, 0], ref) < 1e-5
    with pytest.raises(ValueError, match="only the 50 tokens of its decode buffer"):
        layer.crop(-51)
    layer.crop(-10)
    assert layer.get_seq_length() == N - 10 and layer.buffered == 40


def _teacher_forced(model, prompt, placement, **options):
    cache = decoding.new_cache(model)
    with decoding.use_attention(model, "magicpig", placement=placement, kv_dtype="model", **options) as session:
        decoding.forward(model, prompt[:PROMPT_TOKENS], cache, logits_to_keep=1)
        session.prepare(cache)
        session.phase = "decode"
        chunk = decoding.forward(model, prompt[PROMPT_TOKENS : PROMPT_TOKENS + 5], cache)
        budgets = [session.take_budgets()]
        layers = [dict(session.last_layer_budgets)]
        steps = [chunk]
        for t in range(5, 9):  # single steps, past the buffer of 6: every layer is re-indexed
            steps.append(decoding.forward(model, prompt[PROMPT_TOKENS + t : PROMPT_TOKENS + t + 1], cache))
            budgets.append(session.take_budgets())
            layers.append(dict(session.last_layer_budgets))
    return torch.cat(steps), torch.cat(budgets), layers, session


@numba_only
def test_the_cpu_offload_decodes_as_the_single_device_path(smollm2):
    """Both sides on the CPU, float32 storage on both paths: the same keys read in every layer
    (equal budgets), the same logits within float rounding, through a chunk of rows, single
    steps and an insertion of the buffer into every index."""
    from pigviz.model.texts import first_tokens

    model, tok = smollm2
    prompt = first_tokens(tok, PROMPT_TOKENS + 10)
    options = {"K": 8, "L": 40, "buffer": 6}
    ref_logits, ref_budgets, ref_layers, ref_session = _teacher_forced(model, prompt, "device", **options)
    logits, budgets, layers, session = _teacher_forced(model, prompt, "cpu_offload", **options)
    assert session.upkeeps == ref_session.upkeeps > 0 and session.rebuilds == ref_session.rebuilds == 0
    assert len(session._offloaded) == model.config.num_hidden_layers - 1
    for ours, theirs in zip(layers, ref_layers):
        assert ours.keys() == theirs.keys()
        for layer in ours:
            assert torch.allclose(ours[layer], theirs[layer], atol=1e-6), layer
    assert torch.allclose(budgets, ref_budgets, atol=1e-6)
    assert torch.allclose(logits, ref_logits, atol=1e-4, rtol=0)
    assert torch.equal(logits.argmax(-1), ref_logits.argmax(-1))


@numba_only
def test_generate_with_the_cpu_offload_reports_what_it_moved(smollm2):
    from pigviz.model.texts import first_tokens

    model, tok = smollm2
    ids = first_tokens(tok, PROMPT_TOKENS)
    kwargs = dict(progress=False, stop_at_eos=False, K=8, L=40, buffer=8)
    single = generation.generate(model, tok, ids, "magicpig", 5, kv_dtype="model", **kwargs)
    moved = generation.generate(model, tok, ids, "magicpig", 5, placement="cpu_offload", kv_dtype="model", **kwargs)
    assert moved.token_ids == single.token_ids
    assert moved.budgets == pytest.approx(single.budgets, abs=1e-6)
    report = moved.extra["offload"]
    assert report["device"] == "cpu" and report["layers"] == list(range(1, model.config.num_hidden_layers))
    assert report["device_bytes_freed"] == report["device_bytes_before"] - report["device_bytes_after"] > 0
    # Each offloaded layer keeps [4 sinks | 64 recent | 8 + 1 buffer rows] on the device; the
    # dense layer 0 its prompt and spare rows.
    config = model.config
    kv = config.num_key_value_heads * (config.hidden_size // config.num_attention_heads) * 4 * 2
    layer0 = PROMPT_TOKENS + kv_cache._GROW_TOKENS
    assert report["device_bytes_after"] == kv * (layer0 + 29 * (4 + 64 + 9))
    assert report["device_bytes_before"] == kv * 30 * layer0
    half = generation.generate(model, tok, ids, "magicpig", 3, placement="cpu_offload", **kwargs)
    assert half.extra["offload"]["cpu_bytes"] == pytest.approx(report["cpu_bytes"] / 2)  # bf16 on the CPU


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible to torch)")
def test_cuda_offload_runs_the_sample_on_the_cpu_and_frees_gpu_memory():
    from pigviz.model import loading
    from pigviz.model.texts import first_tokens

    model, tok = loading.load_model(device="cuda", dtype="bfloat16", progress=False)
    ids = first_tokens(tok, 2048)
    kwargs = dict(progress=False, stop_at_eos=False, K=8, L=40)
    moved = generation.generate(model, tok, ids, "magicpig", 6, placement="cpu_offload", buffer=4, **kwargs)
    dense = generation.generate(model, tok, ids, "dense", 6, progress=False, stop_at_eos=False)
    report = moved.extra["offload"]
    assert report["device"].startswith("cuda") and report["cuda_allocated_freed"] > 0
    assert (
        moved.upkeeps > 0
        and moved.rebuilds == 0
        and all(0 < b <= 1 for b in moved.budgets)
        and 0 < moved.mean_budget() < 0.1
    )
    assert moved.token_ids[:2] == dense.token_ids[:2]
    assert sum(a == b for a, b in zip(moved.token_ids, dense.token_ids)) >= 4
