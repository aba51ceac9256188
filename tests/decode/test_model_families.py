"""Tiny random-weight models of each supported family, built from configs here (no download):
capture and sampled decoding run on them; families whose attention the estimator does not model
are refused with an error that names what is missing."""

import pytest
import torch
import transformers

from pigviz.cli import main
from pigviz.decode import generation, session
from pigviz.model import capture as capmod
from pigviz.model import loading

COMMON = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)
SUPPORTED = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),
    "mistral": lambda: transformers.MistralConfig(**COMMON, sliding_window=None),
}


class ByteTokenizer:
    """Enough of a tokenizer for capture and generation: one token per character."""

    eos_token_id = None

    def __call__(self, text, verbose=True):
        return {"input_ids": [ord(c) % COMMON["vocab_size"] for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(32 + int(i) % 90) for i in ids)


def tiny(family):
    torch.manual_seed(0)
    config = SUPPORTED[family]()
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


@pytest.mark.parametrize("family", list(SUPPORTED))
def test_capture_reproduces_the_models_attention_output(family):
    model = tiny(family)
    text = "the quick brown fox jumps over the lazy dog. " * 12
    cap = capmod.capture(model, ByteTokenizer(), n_tokens=400, last=8, text=text, progress=False)
    assert cap.keys.shape == (2, 2, 400, 16) and cap.queries.shape == (2, 4, 8, 16)
    for row in range(2):
        torch.testing.assert_close(cap.reference_outputs(row), cap.outputs[row].float(), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("family", list(SUPPORTED))
def test_sampled_decoding_runs_and_reads_a_fraction_of_the_cache(family):
    model = tiny(family)
    ids = torch.randint(0, COMMON["vocab_size"], (1, 600), generator=torch.Generator().manual_seed(1))
    dense = generation.generate(model, ByteTokenizer(), ids, "dense", 5, progress=False, stop_at_eos=False)
    sampled = generation.generate(
        model,
        ByteTokenizer(),
        ids,
        "magicpig",
        5,
        progress=False,
        stop_at_eos=False,
        K=6,
        L=30,
        sinks=4,
        recent=32,
        dense_layers=(),
    )
    assert len(sampled.token_ids) == len(dense.token_ids) == 5
    assert all(0 < b < 0.9 for b in sampled.budgets[1:]), sampled.budgets


@pytest.mark.parametrize(
    "config,missing",
    [
        (lambda: transformers.Gemma2Config(**COMMON, head_dim=16), "soft-capped"),
        (lambda: transformers.MistralConfig(**COMMON, sliding_window=256), "sliding-window"),
    ],
)
def test_unsupported_attention_is_refused_naming_what_is_missing(config, missing):
    cfg = config()
    assert any(missing in p for p in loading.unsupported_attention(cfg))
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    with pytest.raises(loading.UnsupportedAttentionError, match=missing) as info:
        session.check_swappable(model)
    assert cfg.model_type in str(info.value)
    with pytest.raises(loading.UnsupportedAttentionError, match=missing):
        capmod.capture(model, ByteTokenizer(), n_tokens=64, last=4, text="x" * 100, progress=False)


def test_loading_a_saved_unsupported_model_names_the_problem_not_sdpa(tmp_path):
    cfg = transformers.Gemma2Config(**COMMON, head_dim=16)
    transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").save_pretrained(tmp_path)
    with pytest.raises(loading.UnsupportedAttentionError, match="soft-capped"):
        loading.load_model(str(tmp_path), progress=False)


@pytest.mark.slow
@pytest.mark.model
def test_study_command_runs_the_seeds_path_on_a_tiny_qwen2(tmp_path, smollm2, monkeypatch, capsys):
    """`pigviz study --model FOLDER ...`: the path the seed's Qwen2.5-1.5B run takes on a GPU
    runtime, here on a random-weight Qwen2 saved with SmolLM2's tokenizer."""
    _, tokenizer = smollm2
    config = transformers.Qwen2Config(**dict(COMMON, vocab_size=len(tokenizer)))
    torch.manual_seed(0)
    folder = tmp_path / "tiny-qwen2"
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    monkeypatch.setenv("PIGVIZ_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "study.json"
    code = main(
        [
            "study",
            "--model",
            str(folder),
            "--context",
            "512",
            "--last",
            "4",
            "--seeds",
            "1",
            "--settings",
            "6,20",
            "--methods",
            "magicpig,topk",
            "--no-ablations",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0, capsys.readouterr().err
    text = out.read_text()
    assert '"heads": 4' in text and '"last": 4' in text
