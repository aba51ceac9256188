import dataclasses
import json

import pytest

from pigviz.memory.model_shapes import ModelShape, count_params, get_model_shape, known_models, shape_from_config

# (layers, attention heads, KV heads, head_dim, hidden, max_position_embeddings), from each config.json
EXPECTED = {
    "Llama-3.1-8B": (32, 32, 8, 128, 4096, 131072),
    "Llama-3.1-70B": (80, 64, 8, 128, 8192, 131072),
    "Qwen2.5-0.5B": (24, 14, 2, 64, 896, 32768),
    "Qwen2.5-1.5B": (28, 12, 2, 128, 1536, 131072),
    "Qwen2.5-7B": (28, 28, 4, 128, 3584, 131072),
    "SmolLM2-135M": (30, 9, 3, 64, 576, 8192),
    "Mistral-7B-v0.1": (32, 32, 8, 128, 4096, 32768),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_known_shapes_match_their_configs(name):
    s = get_model_shape(name)
    fields = (s.layers, s.attention_heads, s.kv_heads, s.head_dim, s.hidden_size, s.max_position_embeddings)
    assert fields == EXPECTED[name]
    assert s.name == name


# The context each model card documents: the maximum context pigviz uses (known_models.json's
# context_length). Qwen2.5-1.5B's card says "Full 32,768 tokens" where its config says 131072.
DOCUMENTED = {
    "Llama-3.1-8B": 131_072,
    "Llama-3.1-70B": 131_072,
    "Qwen2.5-0.5B": 32_768,
    "Qwen2.5-1.5B": 32_768,
    "Qwen2.5-7B": 131_072,
    "SmolLM2-135M": 8_192,
    "Mistral-7B-v0.1": 32_768,
}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_max_context_is_the_documented_context(name):
    s = get_model_shape(name)
    assert s.max_context == DOCUMENTED[name]
    assert s.max_context <= s.max_position_embeddings


def test_a_config_without_context_length_takes_max_position_embeddings():
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "max_position_embeddings": 2048}
    s = shape_from_config(cfg)
    assert s.max_context == s.max_position_embeddings == 2048
    assert shape_from_config({**cfg, "context_length": 1024}).max_context == 1024


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parameter_formula_reproduces_published_counts(name):
    # the table stores the published count; the formula derives it from the other fields
    s = get_model_shape(name)
    assert count_params(s) == s.params


def test_every_required_model_is_shipped():
    assert set(EXPECTED) <= set(known_models())


@pytest.mark.parametrize(
    "alias,name",
    [
        ("llama-3.1-8b", "Llama-3.1-8B"),
        ("LLAMA-3.1-70B", "Llama-3.1-70B"),
        ("meta-llama/Llama-3.1-8B", "Llama-3.1-8B"),
        ("Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
        ("qwen2.5_7b", "Qwen2.5-7B"),
        ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B"),
        ("smollm2", "SmolLM2-135M"),
        ("mistral-7b", "Mistral-7B-v0.1"),
        ("llama-70b", "Llama-3.1-70B"),
    ],
)
def test_names_match_case_insensitively_with_aliases(alias, name):
    assert get_model_shape(alias).name == name


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        get_model_shape("gpt-5-huge")
    for name in known_models():
        assert name in str(err.value)


def test_config_json_file_and_directory(tmp_path):
    config = {
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_size": 256,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    for source in (tmp_path / "config.json", str(tmp_path / "config.json"), tmp_path):
        s = get_model_shape(source)
        assert (s.layers, s.kv_heads, s.head_dim, s.max_context) == (4, 2, 32, 4096)
        assert s.kv_bytes_per_token(2) == 2 * 4 * 2 * 32 * 2
        assert s.params == count_params(s) > 0


def test_explicit_head_dim_wins_and_kv_heads_default_to_heads():
    s = shape_from_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "head_dim": 96})
    assert s.head_dim == 96 and s.kv_heads == 4 and s.params is None and s.max_context is None


def test_gpt2_style_and_multimodal_configs():
    gpt2 = shape_from_config({"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024})
    assert (gpt2.layers, gpt2.kv_heads, gpt2.head_dim, gpt2.max_context) == (12, 12, 64, 1024)
    nested = shape_from_config({"text_config": {"num_hidden_layers": 3, "num_attention_heads": 4, "hidden_size": 64}})
    assert nested.layers == 3


def test_pretrained_config_object():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=3,
        intermediate_size=512,
        vocab_size=1000,
        max_position_embeddings=8192,
    )
    s = get_model_shape(cfg)
    assert (s.layers, s.attention_heads, s.kv_heads, s.head_dim, s.max_context) == (3, 4, 2, 64, 8192)
    # the formula agrees with the module transformers would build from the same config
    import torch

    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    assert s.params == sum(p.numel() for p in model.parameters())


def test_qwen2_config_counts_its_qkv_bias():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen2Config(
        hidden_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=256,
        vocab_size=500,
        tie_word_embeddings=True,
    )
    import torch

    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM(cfg)
    assert get_model_shape(cfg).params == sum(p.numel() for p in model.parameters())


def test_bad_configs_and_paths(tmp_path):
    with pytest.raises(ValueError, match="num_hidden_layers"):
        shape_from_config({"num_attention_heads": 4, "hidden_size": 64})
    with pytest.raises(ValueError, match="kv_heads"):
        shape_from_config(
            {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3, "hidden_size": 64}
        )
    with pytest.raises(FileNotFoundError):
        get_model_shape(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="Known models"):
        get_model_shape("some-org/unknown-model")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        get_model_shape(tmp_path / "broken.json")
    with pytest.raises(TypeError, match="config"):
        get_model_shape(42)


@pytest.mark.parametrize(
    "field,value,exc",
    [
        ("num_attention_heads", 0, ValueError),
        ("num_attention_heads", -4, ValueError),
        ("num_attention_heads", "4", TypeError),
        ("hidden_size", 0, ValueError),
        ("hidden_size", 64.5, TypeError),
        ("num_hidden_layers", "two", TypeError),
        ("num_key_value_heads", 0, ValueError),
        ("head_dim", "16", TypeError),
        ("max_position_embeddings", -1, ValueError),
        ("vocab_size", "big", TypeError),
    ],
)
def test_bad_config_fields_name_themselves(field, value, exc):
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, field: value}
    with pytest.raises(exc, match=field):
        shape_from_config(config)


def test_hidden_size_smaller_than_heads_is_explained():
    with pytest.raises(ValueError, match="hidden_size .* num_attention_heads"):
        shape_from_config({"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 4})


def test_shape_is_validated_and_gqa_variant():
    s = get_model_shape("Llama-3.1-70B")
    assert s.query_heads_per_kv_head == 8
    assert s.with_kv_heads(64).kv_bytes_per_token() == 8 * s.kv_bytes_per_token()
    with pytest.raises(ValueError, match="layers"):
        dataclasses.replace(s, layers=0)
    assert isinstance(s, ModelShape) and get_model_shape(s) is s
