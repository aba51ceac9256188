"""The bundled GGUF cut to its first layers: a valid GGUF with the same bytes for what it keeps,
a model whose kept layers compute what the full model's do, and the loader's override."""

import numpy as np
import pytest
import torch

from pigviz.model import gguf_cut
from pigviz.model import loading as models

N_LAYERS = 4  # layer 0 stays dense under MagicPIG: three sampled layers to compare
TOKENS = 300


def _bundled():
    try:
        return models.bundled_gguf_path()
    except models.ModelUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def cut_file(tmp_path_factory):
    src = _bundled()
    return src, gguf_cut.cut_gguf(src, tmp_path_factory.mktemp("cut") / "cut.gguf", N_LAYERS)


@pytest.fixture(scope="module")
def cut_model(cut_file):
    # The de-quantised copy is cached under the cut's own sha256, beside the full model's.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(models.GGUF_OVERRIDE_ENV["smollm2-135m"], str(cut_file[1]))
        return models.load_model(device="cpu", progress=False)  # compared with the CPU fp32 fixture


# -- the file -----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.model
def test_n_layers_is_checked(tmp_path):
    src = _bundled()
    blocks = gguf_cut.gguf_block_count(src)
    for bad in (0, blocks + 1):
        with pytest.raises(ValueError, match=rf"n_layers must be in \[1, {blocks}\]"):
            gguf_cut.cut_gguf(src, tmp_path / "x.gguf", bad)
    with pytest.raises(ValueError, match=rf"n_layers must be in \[1, {blocks}\]"):
        gguf_cut.cut_gguf_size(src, blocks + 1)
    with pytest.raises(TypeError, match="n_layers must be an integer"):
        gguf_cut.cut_gguf(src, tmp_path / "x.gguf", 2.5)
    with pytest.raises(FileNotFoundError, match="src must be an existing GGUF"):
        gguf_cut.cut_gguf(tmp_path / "missing.gguf", tmp_path / "x.gguf", 1)
    assert not (tmp_path / "x.gguf").exists()


@pytest.mark.slow
@pytest.mark.model
def test_cut_keeps_metadata_and_the_kept_tensors_bytes(cut_file):
    import gguf

    src, cut = cut_file
    full, part = gguf.GGUFReader(src), gguf.GGUFReader(cut)
    assert part.get_field("llama.block_count").contents() == N_LAYERS
    bound = gguf_cut.cut_gguf_size(src, N_LAYERS)
    assert bound - 65536 <= cut.stat().st_size <= bound  # less only the dropped tensor entries in the header
    assert gguf_cut.layers_that_fit(src, bound) == N_LAYERS
    skip = {"GGUF.tensor_count", "GGUF.kv_count", "llama.block_count"}
    assert [f for f in full.fields if f not in skip] == [f for f in part.fields if f not in skip]
    for name in ("tokenizer.ggml.tokens", "tokenizer.chat_template", "llama.context_length"):
        assert full.get_field(name).contents() == part.get_field(name).contents()
    kept = {t.name: t for t in part.tensors}
    expected = [t.name for t in full.tensors if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < N_LAYERS]
    assert list(kept) == expected
    for t in full.tensors:
        if t.name in kept:
            assert kept[t.name].tensor_type == t.tensor_type
            assert np.array_equal(kept[t.name].data, t.data), t.name


@pytest.mark.slow
@pytest.mark.model
def test_cli_cut_gguf(tmp_path, capsys):
    from pigviz.cli import main  # the CLI imports plotly; keep this module's other tests without it

    _bundled()
    out = tmp_path / "one.gguf"
    assert main(["data", "cut-gguf", "--n-layers", "1", "--out", str(out)]) == 0
    assert gguf_cut.gguf_block_count(out) == 1 and "PIGVIZ_SMOLLM2_GGUF" in capsys.readouterr().out
    assert main(["data", "cut-gguf", "--n-layers", "0", "--out", str(tmp_path / "none.gguf")]) == 2
    assert "n_layers must be in [1," in capsys.readouterr().err


# -- the loader's override --------------------------------------------------------------------
def test_override_env_names_the_file_or_says_what_is_wrong(tmp_path, monkeypatch):
    env = models.GGUF_OVERRIDE_ENV["smollm2-135m"]
    fake = tmp_path / "other.gguf"
    fake.write_bytes(b"GGUF")
    monkeypatch.setenv(env, str(fake))
    assert models.bundled_gguf_path() == fake.resolve()
    monkeypatch.setenv(env, str(tmp_path / "missing.gguf"))
    with pytest.raises(models.ModelUnavailableError, match=f"{env} must name an existing GGUF file"):
        models.bundled_gguf_path()


# -- the model -----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.model
def test_cut_model_loads_with_the_full_models_weights(cut_model, cut_file, smollm2):
    model, _ = cut_model
    full, _ = smollm2
    assert model.config.num_hidden_layers == N_LAYERS
    assert model.pigviz_source.path == str(cut_file[1].resolve())
    assert model.pigviz_source.revision != full.pigviz_source.revision  # its own cache entry
    full_params = dict(full.named_parameters())
    names = [name for name, _ in model.named_parameters()]
    assert any(f"layers.{N_LAYERS - 1}." in n for n in names)
    for name, p in model.named_parameters():
        assert torch.equal(p, full_params[name]), name


@pytest.mark.slow
@pytest.mark.model
def test_kept_layers_keys_equal_the_full_models(cut_model, smollm2):
    from pigviz.model.capture import capture

    caps = [
        capture(m, tok, n_tokens=TOKENS, last=4, layers=list(range(N_LAYERS)), progress=False)
        for m, tok in (cut_model, smollm2)
    ]
    assert caps[0].keys.shape == caps[1].keys.shape
    assert torch.equal(caps[0].keys, caps[1].keys)
    assert torch.equal(caps[0].queries, caps[1].queries)


@pytest.mark.slow
@pytest.mark.model
def test_kept_layers_budgets_equal_the_full_models(cut_model, smollm2):
    """MagicPIG decoding the same tokens (teacher-forced, so the cut model's own predictions do
    not matter), with a buffer small enough to rebuild: every kept layer reads the same keys."""
    from pigviz.decode.session import forward, new_cache, use_attention
    from pigviz.model.texts import first_tokens

    ids = first_tokens(smollm2[1], TOKENS + 8)
    per_model = []
    for model, _ in (cut_model, smollm2):
        cache, steps = new_cache(model), []
        with use_attention(model, "magicpig", K=6, L=20, buffer=3) as session:
            forward(model, ids[:TOKENS], cache, logits_to_keep=1)
            session.prepare(cache)
            session.phase = "decode"
            for t in range(TOKENS, TOKENS + 8):
                forward(model, ids[t : t + 1], cache)
                session.take_budgets()
                steps.append({k: float(v[-1]) for k, v in session.last_layer_budgets.items()})
            assert session.upkeeps > 0 and session.rebuilds == 0  # the buffer was filed, never rebuilt
        per_model.append(steps)
    cut, full = per_model
    for step_cut, step_full in zip(cut, full):
        assert sorted(step_cut) == list(range(1, N_LAYERS))
        assert step_cut == {k: step_full[k] for k in step_cut}
        assert all(0 < b < 1 for b in step_cut.values())
