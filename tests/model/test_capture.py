import json
import struct
from types import SimpleNamespace

import pytest
import torch

from pigviz.cli import main
from pigviz.model import capture as capmod
from pigviz.model.capture import Capture, capture, load_capture, save_capture
from tests.factories import make_capture


# -- bookkeeping without a model ----------------------------------------------------------------
def test_attention_weights_are_causal_and_normalised():
    cap = make_capture()
    w = cap.attention_weights(1)
    assert w.shape == (6, 8, 40)
    assert torch.allclose(w.sum(-1), torch.ones(6, 8), atol=1e-6)
    for i, pos in enumerate(cap.query_positions.tolist()):
        assert torch.all(w[:, i, pos + 1 :] == 0)
        assert torch.all(w[:, i, : pos + 1] > 0)


def test_subset_keeps_gqa_pairing():
    cap = make_capture(n_layers=3, n_heads=6, n_kv=2)  # group size 3
    sub = cap.subset(layers=[2, 0], kv_heads=[[1], [0]])
    assert sub.layers == [2, 0] and sub.kv_heads == [[1], [0]]
    assert sub.query_heads == [[3, 4, 5], [0, 1, 2]]
    assert torch.equal(sub.keys[0, 0], cap.keys[2, 1]) and torch.equal(sub.values[1, 0], cap.values[0, 0])
    assert torch.equal(sub.queries[0], cap.queries[2, 3:6])
    assert torch.equal(sub.outputs[1], cap.outputs[0, 0:3])
    # attention computed on the subset equals the same heads of the full capture
    assert torch.allclose(sub.reference_outputs(0), cap.reference_outputs(2)[3:6], atol=1e-6)


def test_subset_of_a_subset_and_shared_kv_heads():
    cap = make_capture(n_layers=3, n_heads=6, n_kv=2)
    sub = cap.subset(kv_heads=[1]).subset(layers=[1])
    assert sub.kv_heads == [[1]] and torch.equal(sub.keys[0, 0], cap.keys[1, 1])


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(layers=[5]),
        dict(layers=[0, 0]),
        dict(layers=[]),
        dict(kv_heads=[7]),
        dict(layers=[0, 1], kv_heads=[[0], [0, 1]]),
    ],
)
def test_subset_rejects_bad_indices(kwargs):
    with pytest.raises(ValueError):
        make_capture().subset(**kwargs)


def test_astype_fp16_updates_metadata():
    half = make_capture().astype("float16")
    assert half.keys.dtype == torch.float16 and half.outputs.dtype == torch.float16
    assert half.metadata["dtype"] == "float16"
    with pytest.raises(ValueError, match="dtype"):
        make_capture().astype("int3")


def test_inconsistent_metadata_is_rejected():
    cap = make_capture()
    with pytest.raises(ValueError, match="shapes disagree"):
        Capture(cap.queries, cap.keys[:, :, :-1], cap.values[:, :, :-1], cap.query_positions, cap.metadata)
    meta = dict(cap.metadata)
    del meta["text_sha256"]
    with pytest.raises(ValueError, match="text_sha256"):
        Capture(cap.queries, cap.keys, cap.values, cap.query_positions, meta)


# -- one-file storage ------------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path):
    cap = make_capture()
    cap.extras = {"summary": torch.arange(6.0).reshape(2, 3)}
    back = load_capture(save_capture(cap, tmp_path / "c.safetensors"))
    for name in ("queries", "keys", "values", "query_positions", "outputs"):
        assert torch.equal(getattr(back, name), getattr(cap, name)), name
    assert back.metadata == cap.metadata
    assert torch.equal(back.extras["summary"], cap.extras["summary"])


def test_fp16_storage_halves_the_file(tmp_path):
    cap = make_capture(n=400)
    full = save_capture(cap, tmp_path / "a.safetensors").stat().st_size
    half = save_capture(cap, tmp_path / "b.safetensors", dtype=torch.float16)
    back = load_capture(half)
    assert back.keys.dtype == torch.float16 and back.metadata["dtype"] == "float16"
    assert half.stat().st_size < 0.6 * full
    assert torch.allclose(back.keys.float(), cap.keys, atol=2e-3)


def test_saved_bytes_are_canonical(tmp_path):
    """safetensors writes its metadata map in random order; the header must come out sorted."""
    cap = make_capture()
    a = save_capture(cap, tmp_path / "a.safetensors").read_bytes()
    b = save_capture(cap, tmp_path / "b.safetensors").read_bytes()
    assert a == b
    (length,) = struct.unpack("<Q", a[:8])
    header = json.loads(a[8 : 8 + length])
    keys = list(header["__metadata__"])
    assert keys == sorted(keys) and list(header) == sorted(header)


def test_truncated_file_names_the_file(tmp_path):
    path = save_capture(make_capture(), tmp_path / "c.safetensors")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match="c.safetensors"):
        load_capture(path)


def test_garbage_and_missing_files(tmp_path):
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 5)
    with pytest.raises(ValueError, match="junk.safetensors"):
        load_capture(junk)
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        load_capture(tmp_path / "nope.safetensors")


def test_file_with_incomplete_metadata_names_the_file(tmp_path):
    from safetensors.torch import save_file

    cap = make_capture()
    meta = {k: json.dumps(v) for k, v in cap.metadata.items() if k != "layers"}
    path = tmp_path / "partial.safetensors"
    save_file(
        {"queries": cap.queries, "keys": cap.keys, "values": cap.values, "query_positions": cap.query_positions},
        str(path),
        metadata=meta,
    )
    with pytest.raises(ValueError, match=r"partial\.safetensors.*layers"):
        load_capture(path)


def test_file_with_wrong_shapes_names_the_file(tmp_path):
    from safetensors.torch import save_file

    cap = make_capture()
    meta = {k: json.dumps(v) for k, v in cap.metadata.items()}
    path = tmp_path / "shapes.safetensors"
    save_file(
        {
            "queries": cap.queries[:, :2].contiguous(),
            "keys": cap.keys,
            "values": cap.values,
            "query_positions": cap.query_positions,
        },
        str(path),
        metadata=meta,
    )
    with pytest.raises(ValueError, match=r"shapes\.safetensors"):
        load_capture(path)


# -- argument checks before any prefill (fake model and tokenizer) --------------------------------
def fake_model(max_len=100):
    cfg = SimpleNamespace(
        max_position_embeddings=max_len,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        _attn_implementation="sdpa",
    )
    return SimpleNamespace(config=cfg)


class CharTokenizer:
    def __call__(self, text, verbose=True):
        return {"input_ids": [ord(c) for c in text]}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_tokens=10, last=11), "last must be at most n_tokens=10"),
        (dict(n_tokens=101), "allow_long_context"),
        (dict(n_tokens=10, last=2, layers=[4]), r"layers entry must be in \[0, 3\]"),
        (dict(n_tokens=10, last=2, layers=[1, 1]), "distinct"),
        (dict(n_tokens=10, last=2, kv_heads=[2]), r"kv_heads entry must be in \[0, 1\]"),
        (dict(n_tokens=50, last=2, text="short"), "n must be at most 5"),
    ],
)
def test_capture_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        capture(fake_model(), CharTokenizer(), progress=False, **kwargs)


def test_cli_capture_unknown_model_returns_2(tmp_path, capsys):
    assert (
        main(
            [
                "capture",
                "--model",
                "not a model",
                "--context",
                "8",
                "--last",
                "2",
                "--out",
                str(tmp_path / "x.safetensors"),
            ]
        )
        == 2
    )
    assert "smollm2-135m" in capsys.readouterr().err


# -- the real model -------------------------------------------------------------------------------
N, T = 256, 16


@pytest.fixture(scope="module")
def real_capture(smollm2):
    """One small capture, with independent hooks on o_proj recording what the model fed it."""
    model, tokenizer = smollm2
    fed_to_o_proj, logits_seen = {}, []
    hooks = [
        layer.self_attn.o_proj.register_forward_pre_hook(
            lambda mod, args, i=i: fed_to_o_proj.__setitem__(i, args[0][0].clone())
        )
        for i, layer in enumerate(model.model.layers)
    ]
    hooks.append(model.lm_head.register_forward_hook(lambda mod, args, out: logits_seen.append(out.clone())))
    try:
        cap = capture(model, tokenizer, n_tokens=N, last=T, progress=False)
    finally:
        for h in hooks:
            h.remove()
    return cap, fed_to_o_proj, logits_seen[0]


@pytest.mark.slow
@pytest.mark.model
def test_real_capture_shapes_and_metadata(real_capture, smollm2):
    cap, _, _ = real_capture
    model, _ = smollm2
    assert cap.queries.shape == (30, 9, T, 64) and cap.keys.shape == (30, 3, N, 64) == cap.values.shape
    assert cap.query_positions.tolist() == list(range(N - T, N))
    meta = cap.metadata
    assert meta["model_revision"] == model.pigviz_source.revision
    assert meta["n_tokens"] == N and meta["last"] == T and meta["layers"] == list(range(30))
    assert meta["scaling"] == pytest.approx(64**-0.5)
    assert model.config._attn_implementation == "sdpa"  # switched back


@pytest.mark.slow
@pytest.mark.model
def test_captured_qkv_reproduce_the_models_attention_output(real_capture):
    cap, fed_to_o_proj, _ = real_capture
    for row, layer in enumerate(cap.layers):
        # what the model really fed o_proj for the last T positions, laid out (H, T, d)
        model_out = fed_to_o_proj[layer][-T:].reshape(T, 9, 64).transpose(0, 1)
        assert torch.equal(cap.outputs[row], model_out), layer
        torch.testing.assert_close(cap.reference_outputs(row), model_out, atol=2e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.model
def test_capture_does_not_change_the_models_logits(real_capture, smollm2):
    _, _, captured_logits = real_capture
    model, tokenizer = smollm2
    from pigviz.model.texts import first_tokens

    with torch.inference_mode():
        plain = model(input_ids=first_tokens(tokenizer, N)[None], logits_to_keep=1).logits
    assert torch.equal(plain, captured_logits)


@pytest.mark.slow
@pytest.mark.model
def test_keys_obey_the_causal_mask(real_capture, smollm2):
    """A key at position p must not depend on later tokens: a shorter prefill gives the same keys."""
    model, tokenizer = smollm2
    cap, _, _ = real_capture
    short = capture(model, tokenizer, n_tokens=N // 2, last=4, layers=[0, 15, 29], progress=False)
    torch.testing.assert_close(short.keys, cap.keys[[0, 15, 29], :, : N // 2], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.model
def test_failed_prefill_restores_attention_implementation(smollm2):
    model, tokenizer = smollm2

    def boom(*args):
        raise RuntimeError("boom in layer 3")

    handle = model.model.layers[3].register_forward_pre_hook(boom)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            capture(model, tokenizer, n_tokens=32, last=4, progress=False)
    finally:
        handle.remove()
    assert model.config._attn_implementation == "sdpa"
    assert capmod._ACTIVE == []


@pytest.mark.slow
@pytest.mark.model
def test_cli_capture_writes_a_subset_in_fp16(tmp_path, capsys):
    out = tmp_path / "small.safetensors"
    assert (
        main(
            [
                "capture",
                "--context",
                "64",
                "--last",
                "8",
                "--layers",
                "0,12",
                "--kv-heads",
                "1",
                "--fp16",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    cap = load_capture(out)
    assert cap.keys.shape == (2, 1, 64, 64) and cap.queries.shape == (2, 3, 8, 64)
    assert cap.keys.dtype == torch.float16 and cap.query_heads == [[3, 4, 5], [3, 4, 5]]
    assert main(["capture", "--context", "9000", "--quiet", "--out", str(tmp_path / "long.safetensors")]) == 2
    assert "allow_long_context" in capsys.readouterr().err
